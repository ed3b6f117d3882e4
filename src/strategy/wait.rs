//! The wait every waiting primitive shares: the deadline, the back-off between polls
//! (cut short by a PostgreSQL wake-up where the primitive has one), the grants that
//! come back too late to use, the exhausted-pool answer, and the timeout, each written
//! once here.
//!
//! A primitive's wait is a loop of its own attempts around one [`Wait`]:
//!
//! ```text
//! let mut wait = Wait::new(handle, key, deadline);
//! loop {
//!     let outcome = wait.attempt(attempt(handle, ask, wait.reached())).await?;
//!     match wait.judge(outcome)? {
//!         Turn::Granted(grant) => return Ok(grant),
//!         Turn::Again => continue,
//!         Turn::Busy => wait.pause().await?,
//!     }
//! }
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::db::wake_lock::WakeAnswer;
use crate::db::Failure;
use crate::keepers::server_wait::{Started, Watch};
use crate::keepers::wake::{self, LocalSubscription};
use crate::support::backoff::Backoff;
use crate::support::error::{Class, Error, Result};

use super::handle::Handle;

/// How many grants in a row may come back too late to use (their answer outran their
/// TTL) before a waiting call reports [`Error::GrantExpired`]: another attempt may be
/// quicker, but a TTL that every answer outruns is the caller's to change, not a wait
/// for ever.
pub(crate) const LAPSED_GRANTS: u32 = 3;

/// How many lost races for a gate or a row in a row a single try takes as a busy
/// lock, rather than trying again.
pub(crate) const CONTENTION_RETRIES: u32 = 5;

/// The longest pause after a lost race for a gate or a row: such a race is over in a
/// transaction's time, far sooner than a busy lock's poll.
const CONTENTION_PAUSE_MAX: Duration = Duration::from_millis(16);

/// The pauses between attempts that lose races for a gate or a row, every
/// primitive's: from 1 ms, doubling to [`CONTENTION_PAUSE_MAX`], with jitter; a single
/// try gives up after [`CONTENTION_RETRIES`] in a row.
#[derive(Debug)]
pub(crate) struct Contention {
    once: bool,
    lost: u32,
    backoff: Backoff,
}

impl Contention {
    /// The pauses of one wait, `once` for a single try.
    pub(crate) fn new(once: bool) -> Self {
        Self {
            once,
            lost: 0,
            backoff: Backoff::new(Duration::from_millis(1), CONTENTION_PAUSE_MAX),
        }
    }

    /// One more race lost: the pause before the next attempt, or `None` when a single
    /// try has lost [`CONTENTION_RETRIES`] in a row and counts the lock as busy.
    pub(crate) fn lost(&mut self) -> Option<Duration> {
        if self.once && self.lost >= CONTENTION_RETRIES {
            return None;
        }
        self.lost += 1;
        Some(self.backoff.next_delay())
    }
}

/// A single try of `attempt` (a new attempt each time it is called), made again after
/// a [`Contention`] pause while it loses a race for a gate or a row, up to
/// [`CONTENTION_RETRIES`] times: a race that persists, or a lock of another strategy
/// on the key ([`Class::Held`]), counts as busy (`Ok(None)`).
///
/// # Errors
///
/// Whatever else the attempt failed with, [`Error::GrantExpired`] included: the key
/// was free, but the answer came too late to use the grant, which is not "busy".
pub(crate) async fn single_try<T, F, Fut>(mut attempt: F) -> Result<Option<T>>
where
    F: FnMut(Arc<AtomicBool>) -> Fut,
    Fut: Future<Output = std::result::Result<Option<T>, Failure>>,
{
    let mut contention = Contention::new(true);
    loop {
        match attempt(Arc::new(AtomicBool::new(false))).await {
            Ok(granted) => return Ok(granted),
            Err(f) if f.class == Class::Contention => match contention.lost() {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Ok(None),
            },
            Err(f) if f.class == Class::Held => return Ok(None),
            Err(f) => return Err(f.error),
        }
    }
}

/// What an attempt came to, for the loop around it.
#[derive(Debug)]
pub(crate) enum Turn<T> {
    /// Granted: the wait is over.
    Granted(T),
    /// Busy, or a race lost: pause, then try again.
    Busy,
    /// Granted too late to use, or waited in the database already: try again at once.
    Again,
}

/// One wait for one primitive's grant: see the module's documentation.
pub(crate) struct Wait<'h> {
    handle: &'h Handle,
    key: String,
    deadline: Option<Instant>,
    started: Instant,
    backoff: Backoff,
    lapsed: u32,
    /// Whether any attempt had a pooled connection: until one has, a deadline met
    /// while every connection of the pool is taken is an exhausted pool.
    reached: Arc<AtomicBool>,
    #[cfg(feature = "postgres")]
    wakeups: Option<crate::keepers::notify::Subscription>,
    /// The wake-up by a release in this process, on every server.
    local: Option<LocalSubscription>,
    /// A crashed holder's marker this wait's wait in the server saw freed: not waited
    /// for again (should its lease stay busy, the wait polls).
    freed: Option<String>,
    /// The wait's watch of its key, for the markers its busy attempts find.
    _watch: Option<Watch>,
    /// Whether a pause waits in the server for the release of the key's holder, by
    /// its wake lock (a lock's wait: its key is what the holder holds), and whether in
    /// the key's turn (`Some(true)`: a lock's waiter) or with every waiter of the key
    /// (`Some(false)`: a read's, which the writer's release may grant all together).
    holder_woken: Option<bool>,
    /// The last pause's wait in the server, kept until the attempt after it has
    /// answered: a waiter woken by a wake lock holds the key's wake turn until then.
    server: Option<Started>,
    /// Whether a wait for the wake lock found none held, and the waiter tried again at
    /// once, since the last wait that found one: a second such wait sleeps its pause.
    not_held_seen: bool,
}

impl std::fmt::Debug for Wait<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wait")
            .field("key", &self.key)
            .field("deadline", &self.deadline)
            .field("lapsed", &self.lapsed)
            .finish_non_exhaustive()
    }
}

impl<'h> Wait<'h> {
    /// A wait for `key` (as a timeout names it) until `deadline`, or for ever, polling
    /// with the handle's back-off.
    pub(crate) fn new(
        handle: &'h Handle,
        key: impl Into<String>,
        deadline: Option<Instant>,
    ) -> Self {
        let settings = &handle.settings;
        let key = key.into();
        Self {
            handle,
            _watch: handle.server_waits.watch(&key),
            key,
            deadline,
            started: Instant::now(),
            backoff: Backoff::new(settings.poll_min, settings.poll_max),
            lapsed: 0,
            reached: Arc::new(AtomicBool::new(false)),
            #[cfg(feature = "postgres")]
            wakeups: None,
            local: None,
            freed: None,
            holder_woken: None,
            server: None,
            not_held_seen: false,
        }
    }

    /// Also wakes, between its polls, at the release of the key's holder in any process:
    /// a pause waits in the server for the key's wake lock, which a holder keeps while
    /// it holds the key (`keepers/wake_lock.rs`), within the handle's cap of waits in
    /// the server; beyond it, or where the server has no wake locks, the pause polls.
    pub(crate) fn woken_by_holder(mut self) -> Self {
        self.holder_woken = Some(true);
        self
    }

    /// [`woken_by_holder`](Self::woken_by_holder) for a read of a read-write lock,
    /// which waits for the writer that holds the name: without turns, so the writer's
    /// release wakes every reader, as every one of them may then be granted.
    pub(crate) fn woken_by_writer(mut self) -> Self {
        self.holder_woken = Some(false);
        self
    }

    /// Also wakes at a release of `key`: by any handle of this process, on every server
    /// (`keepers/wake.rs`), and, where the handle listens, announced by PostgreSQL's
    /// notifications from any process. Subscribed now, before the first attempt, so
    /// that a release while an attempt is under way still cuts the pause after it
    /// short.
    ///
    /// A release in another process, where the handle does not listen, is found by
    /// the wait's polls.
    pub(crate) fn woken_for(self, key: &str) -> Self {
        self.woken_for_any(&[key])
    }

    /// Also wakes at a release announced for any of `keys` (a multi-lock's keys; a
    /// semaphore's name and the prefix of its permits, which a permit's release wakes),
    /// as [`woken_for`](Self::woken_for) does for one.
    pub(crate) fn woken_for_any(mut self, keys: &[&str]) -> Self {
        self.local = Some(wake::subscribe(&self.handle.wake_scope, keys));
        #[cfg(feature = "postgres")]
        {
            self.wakeups = self.handle.notifier.as_ref().map(|n| n.subscribe_any(keys));
        }
        self
    }

    /// The time left until the deadline, `None` without one.
    pub(crate) fn left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The flag an attempt sets once it has a pooled connection (see
    /// [`noting_checkout`](crate::db::noting_checkout)).
    pub(crate) fn reached(&self) -> Arc<AtomicBool> {
        self.reached.clone()
    }

    /// The timeout this wait answers at its deadline.
    pub(crate) fn timed_out(&self) -> Error {
        Error::Timeout {
            key: self.key.clone(),
            waited: self.started.elapsed(),
        }
    }

    /// Runs one attempt, bounded by the deadline: at it the answer is a timeout, also
    /// when the attempt in flight holds the pool's last connection itself (waiting in
    /// the database behind another transaction, say). Only a wait in which no attempt
    /// ever had a connection, while every connection of the pool was taken, is an
    /// exhausted pool. An attempt cut off here gives back what it took (its statements
    /// move to a task of their own that finishes them: `landing::land`).
    pub(crate) async fn attempt<T>(
        &self,
        this: impl Future<Output = std::result::Result<T, Failure>>,
    ) -> Result<std::result::Result<T, Failure>> {
        match self.deadline {
            Some(d) => match tokio::time::timeout_at(d, this).await {
                Ok(outcome) => Ok(outcome),
                Err(_)
                    if !self.reached.load(Ordering::Relaxed) && self.handle.pool.is_exhausted() =>
                {
                    Err(Error::PoolExhausted)
                }
                Err(_) => Err(self.timed_out()),
            },
            None => Ok(this.await),
        }
    }

    /// What an attempt's outcome means for the wait: a grant; busy (nothing granted, a
    /// race lost, or a lock of another strategy on the key); a grant that came back
    /// too late, tried again at once up to [`LAPSED_GRANTS`] times in a row; or the
    /// attempt's error.
    pub(crate) fn judge<T>(
        &mut self,
        outcome: std::result::Result<Option<T>, Failure>,
    ) -> Result<Turn<T>> {
        // The attempt after the last pause has answered: unless granted (the hold
        // hands the wake turn on, see `turn`), its wake turn goes.
        if !matches!(outcome, Ok(Some(_))) {
            self.server = None;
        }
        match outcome {
            Ok(Some(granted)) => Ok(Turn::Granted(granted)),
            Ok(None) => Ok(Turn::Busy),
            Err(f) if matches!(f.class, Class::Contention | Class::Held) => Ok(Turn::Busy),
            Err(f) if f.class == Class::Lapsed => {
                self.lapsed += 1;
                if self.lapsed >= LAPSED_GRANTS {
                    return Err(f.error);
                }
                Ok(Turn::Again)
            }
            Err(f) => Err(f.error),
        }
    }

    /// The wait in the server that woke this waiter before its grant, if one did: it
    /// keeps the key's wake turn until dropped, which the grant's hold does once its
    /// wake lock is taken, so that the next waiter of the key waits for that.
    pub(crate) fn turn(&mut self) -> Option<Started> {
        self.server.take()
    }

    /// Sleeps the back-off's next delay, or less when woken; answers the timeout at the
    /// deadline.
    pub(crate) async fn pause(&mut self) -> Result<()> {
        let delay = self.backoff.next_delay();
        self.paused(delay, true).await
    }

    /// Sleeps `delay` (a primitive's own, for a race it lost), or less when woken;
    /// answers the timeout at the deadline.
    pub(crate) async fn pause_for(&mut self, delay: Duration) -> Result<()> {
        self.paused(delay, false).await
    }

    /// Sleeps `delay`, or less when woken; answers the timeout at the deadline.
    ///
    /// A back-off's pause (`long`) that waits in the server for the key's wake lock,
    /// held by a live holder, lasts until that holder's release, or the longest poll
    /// interval at most: the wait has the key watched, and a lease that lapses without
    /// a release is found at the poll after it, as the back-off would find it. A wake
    /// lock that nobody holds (a holder that keeps none) leaves the pause its own
    /// length, as does a primitive's own pause after a race it lost.
    async fn paused(&mut self, delay: Duration, long: bool) -> Result<()> {
        self.lapsed = 0;
        self.server = None;
        let now = Instant::now();
        let until = self.deadline.map_or(now + delay, |d| (now + delay).min(d));
        // Where the last attempt found the key held by a lease recording another
        // handle's marker, the pause waits in the server for that marker too; else,
        // for a wait on one key's holder, for the holder's release (its wake lock).
        let waits = &self.handle.server_waits;
        let mut end = until;
        let mut server = waits.start(
            &self.handle.db,
            &self.key,
            until.saturating_duration_since(now),
            self.freed.as_deref(),
        );
        // A lock waiter whose key a hold of this process keeps is woken by that hold's
        // release from within the process (`keepers/wake.rs`), before the wake lock
        // is even let go: a wait in the server would only add statements. Should the
        // key be held elsewhere all the same (the hold here lapsed), the pause polls.
        let held_here = self.holder_woken == Some(true)
            && self.local.is_some()
            && wake::held_here(&self.handle.wake_scope, &self.key);
        if let (None, Some(turns), false) = (&server, self.holder_woken, held_here) {
            let longest = if long {
                delay.max(self.handle.settings.poll_max)
            } else {
                delay
            };
            let long = now + longest;
            let long = self.deadline.map_or(long, |d| long.min(d));
            server = waits.wake_wait(
                &self.handle.db,
                &self.key,
                long.saturating_duration_since(now),
                turns,
            );
            if server.is_some() {
                end = long;
            }
        }
        let woken = loop {
            tokio::select! {
                () = tokio::time::sleep_until(end) => break false,
                () = self.notified() => break true,
                () = woken(self.local.as_ref()) => break true,
                answer = ended(server.as_mut()) => match answer {
                    WakeAnswer::Freed => {
                        self.not_held_seen = false;
                        if let Some(marker) = server.as_ref().and_then(|s| s.marker.clone()) {
                            self.freed = Some(marker);
                        }
                        break true;
                    }
                    // Ran out (or failed): the pause goes on to its end.
                    WakeAnswer::Held => {
                        self.not_held_seen = false;
                        server = None;
                    }
                    // No wake lock held: the first time, the key may have been freed
                    // between the busy attempt and the wait (its release came first),
                    // so the waiter tries again at once; after that (a holder that
                    // keeps none), the pause's own length.
                    WakeAnswer::NotHeld if !self.not_held_seen => {
                        self.not_held_seen = true;
                        break true;
                    }
                    WakeAnswer::NotHeld => {
                        server = None;
                        end = until;
                    }
                },
            }
        };
        self.server = server;
        if !woken && self.deadline.is_some_and(|d| end >= d) {
            return Err(self.timed_out());
        }
        Ok(())
    }
}

impl Wait<'_> {
    /// Returns at a wake-up by a notification, where the handle listens; never
    /// otherwise.
    async fn notified(&self) {
        #[cfg(feature = "postgres")]
        if let Some(w) = &self.wakeups {
            return w.woken().await;
        }
        std::future::pending().await
    }
}

/// How a wait in the server ended, when one runs; never otherwise.
async fn ended(server: Option<&mut Started>) -> WakeAnswer {
    match server {
        Some(s) => s.ended().await,
        None => std::future::pending().await,
    }
}

/// Returns once a wait in the server saw a crashed holder's marker freed, when one
/// runs; never otherwise.
pub(crate) async fn freed(server: Option<&mut Started>) {
    match server {
        Some(s) => s.freed().await,
        None => std::future::pending().await,
    }
}

/// Returns at a wake-up by a release in this process, when subscribed; never
/// otherwise.
pub(crate) async fn woken(local: Option<&LocalSubscription>) {
    match local {
        Some(w) => w.woken().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_try_gives_up_after_its_retries_a_wait_never() {
        let mut once = Contention::new(true);
        let pauses: Vec<_> = std::iter::from_fn(|| once.lost()).take(100).collect();
        assert_eq!(pauses.len(), CONTENTION_RETRIES as usize);
        assert!(
            pauses.iter().all(|p| *p <= CONTENTION_PAUSE_MAX),
            "{pauses:?}"
        );

        let mut wait = Contention::new(false);
        let pauses: Vec<_> = std::iter::from_fn(|| wait.lost()).take(100).collect();
        assert_eq!(pauses.len(), 100);
        // Doubling from 1 ms, the pauses reach the cap's upper half and stay below it.
        assert!(
            pauses[20..].iter().all(|p| *p >= CONTENTION_PAUSE_MAX / 2),
            "{pauses:?}"
        );
        assert!(
            pauses.iter().all(|p| *p <= CONTENTION_PAUSE_MAX),
            "{pauses:?}"
        );
    }
}
