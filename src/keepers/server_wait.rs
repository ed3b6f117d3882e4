//! Waiting in the server for a crashed holder (`LockerBuilder::server_waits`): a
//! waiter whose attempt found the key held by a lease that records another handle's
//! presence marker (a lease or insert waiter's busy attempt; the fair lock's first
//! waiter's look) waits, inside the server, for that marker to be freed, and tries
//! again the moment it is, rather than at its next poll.
//!
//! The marker is freed only when every session of the holder is gone: its process
//! died, and the server ended its connections (on PostgreSQL the wait queues behind
//! the holder's own standby connection; on MariaDB either may be handed the name
//! first, and neither ever finds it free). The wait lets the marker go in the same
//! statement (`marker_wait.sql`), and the row stays the truth: the waiter's next
//! attempt takes the lease over by the acquisition's own check, or finds it busy.
//!
//! Each wait runs on a connection of the handle's own, outside the pool, opened with
//! the pool's connect options and exempt from the server's timeouts as presence's are,
//! at most [`ServerWaits::new`]'s cap at once: beyond that a waiter polls as before.
//! A wait lasts no longer than the pause it replaces, bounded in the server, and runs
//! in a task of its own: a waiter woken otherwise (a release, its deadline, its caller
//! gone) leaves it to run out, and its connection is kept for the next wait. Idle
//! connections are closed when the handle goes.
//!
//! The same connections serve the waits for a live holder's release: a waiter whose
//! attempt found its key busy, with no crashed holder's marker to wait for, waits for
//! the key's wake lock, which the holder keeps while it holds the key and lets go once
//! its release has committed (`keepers/wake_lock.rs`, `wake_wait.sql`). Nobody holding
//! it as the wait begins (a holder that keeps none, or has not taken it yet) is asked
//! again over the next 31 ms, then the waiter polls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Semaphore};

use crate::db::presence::Conn;
use crate::db::wake_lock::{wake_name, WakeAnswer, WakeStatements};
use crate::db::Db;

/// How much longer than its own bound a wait may take on the client's clock before
/// its connection counts as lost: a round trip and a loaded machine's delays.
const SLACK: Duration = Duration::from_secs(2);

/// The shortest pause worth a wait in the server: below it the pause just sleeps.
const SHORTEST: Duration = Duration::from_millis(5);

/// The pauses before a wake lock that nobody held is asked for again: its holder may
/// be about to take it (a waiter woken by the last release found the key taken by
/// another, whose wake lock follows its grant by a round trip; a holder that did not
/// wait takes it after `wake_lock::TAKE_AFTER`).
const NOT_HELD_RETRIES: [Duration; 5] = [
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(4),
    Duration::from_millis(8),
    Duration::from_millis(16),
];

/// A handle's waits in the server: what its busy attempts saw, its connections, its
/// cap.
#[derive(Debug, Clone)]
pub(crate) struct ServerWaits {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The wake locks' statements, where the server has them.
    wake: Option<Arc<WakeStatements>>,
    /// One permit per wait that may run at once: the cap.
    slots: Arc<Semaphore>,
    cap: usize,
    /// Connections no wait uses now, kept for the next (at most `cap`).
    idle: Mutex<Vec<Conn>>,
    /// Per key a wait of the handle watches, what its busy attempts found.
    seen: Mutex<HashMap<String, Watched>>,
    /// How many keys `seen` holds, read without its lock.
    seen_len: AtomicUsize,
}

/// A key some waits of the handle watch: how many, and the marker the last busy
/// attempt on it found its holder's lease recording.
#[derive(Debug, Default)]
struct Watched {
    waits: usize,
    marker: Option<String>,
}

/// A wait's watch of its key, from [`ServerWaits::watch`]: while it lives, busy
/// attempts on the key note the marker they found; dropped with the wait.
#[derive(Debug)]
pub(crate) struct Watch {
    shared: Arc<Shared>,
    key: String,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let s = &self.shared;
        let mut seen = s.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = seen.get_mut(&self.key) {
            w.waits = w.waits.saturating_sub(1);
            if w.waits == 0 {
                seen.remove(&self.key);
            }
        }
        s.seen_len.store(seen.len(), Ordering::Relaxed);
    }
}

/// A wait in the server under way: the crashed holder's marker it waits for (`None`
/// for a key's wake lock), and its answer (`true`: freed).
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) marker: Option<String>,
    answer: oneshot::Receiver<bool>,
}

impl Started {
    /// Returns once the marker was freed; never when the wait ran out or failed.
    pub(crate) async fn freed(&mut self) {
        match (&mut self.answer).await {
            Ok(true) => {}
            _ => std::future::pending().await,
        }
    }
}

impl ServerWaits {
    /// At most `cap` waits in the server at once (`0`: none, every waiter polls); the
    /// waits for wake locks with `wake`, where the server has them.
    pub(crate) fn new(cap: u32, wake: Option<Arc<WakeStatements>>) -> Self {
        let cap = usize::try_from(cap)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            shared: Arc::new(Shared {
                wake: wake.filter(|_| cap > 0),
                slots: Arc::new(Semaphore::new(cap)),
                cap,
                idle: Mutex::new(Vec::new()),
                seen: Mutex::new(HashMap::new()),
                seen_len: AtomicUsize::new(0),
            }),
        }
    }

    /// Watches `key` for a wait, until the answer is dropped: only the busy attempts on
    /// a key some wait watches are noted, so that an attempt no wait follows (a single
    /// try, a fair lock's one statement) leaves nothing behind. `None` with no waits
    /// allowed.
    pub(crate) fn watch(&self, key: &str) -> Option<Watch> {
        let s = &self.shared;
        if s.cap == 0 {
            return None;
        }
        let mut seen = s.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.entry(key.to_owned()).or_default().waits += 1;
        s.seen_len.store(seen.len(), Ordering::Relaxed);
        Some(Watch {
            shared: Arc::clone(s),
            key: key.to_owned(),
        })
    }

    /// Notes what an attempt on `key` found, when a wait watches it: busy under a lease
    /// recording `holder` (`Some`), or anything else (`None`: forgotten). Costs no lock
    /// while no wait of the handle is under way, or with no waits allowed.
    pub(crate) fn seen(&self, key: &str, holder: Option<String>) {
        let s = &self.shared;
        if s.cap == 0 || s.seen_len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut seen = s.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = seen.get_mut(key) {
            w.marker = holder;
        }
    }

    /// Starts a wait in the server, for `wait` at most, for the marker the last busy
    /// attempt on `key` found, unless that is `skip` (a marker this waiter already saw
    /// freed, whose lease then stayed busy: it waits for its polls). `None` when there
    /// is nothing to wait for, the pause is too short, or the cap is reached.
    pub(crate) fn start(
        &self,
        db: &Db,
        key: &str,
        wait: Duration,
        skip: Option<&str>,
    ) -> Option<Started> {
        let s = &self.shared;
        if wait < SHORTEST || s.seen_len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let marker = s
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .and_then(|w| w.marker.clone())?;
        self.wait_for(db, marker, wait, skip)
    }

    /// Starts a wait in the server, for `wait` at most, for `marker` (another handle's,
    /// which a step found the key's holder recording), unless that is `skip`. `None`
    /// when the pause is too short, the cap is reached, or no waits are allowed.
    pub(crate) fn wait_for(
        &self,
        db: &Db,
        marker: String,
        wait: Duration,
        skip: Option<&str>,
    ) -> Option<Started> {
        let s = &self.shared;
        if s.cap == 0 || wait < SHORTEST || skip == Some(marker.as_str()) {
            return None;
        }
        let waited = marker.clone();
        let waiting = db.clone();
        self.spawn(db, Some(marker), wait, move |conn| {
            Box::pin(async move { waiting.marker_wait(conn, &waited, wait).await })
        })
    }

    /// Starts a wait in the server, for `wait` at most, for `key`'s wake lock to be let
    /// go by its holder (a live holder's release). `None` when the pause is too short,
    /// the cap is reached, or the server has no wake locks.
    pub(crate) fn wake_wait(&self, db: &Db, key: &str, wait: Duration) -> Option<Started> {
        let s = &self.shared;
        if wait < SHORTEST {
            return None;
        }
        let statements = Arc::clone(s.wake.as_ref()?);
        let name = wake_name(db, key);
        let until = tokio::time::Instant::now() + wait;
        #[cfg(feature = "sqlite")]
        if let Some(dir) = statements.files() {
            // SQLite: a file to try, no connection.
            let dir = dir.to_owned();
            let slot = Arc::clone(&s.slots).try_acquire_owned().ok()?;
            let (tell, answer) = oneshot::channel();
            tokio::spawn(async move {
                let _slot = slot;
                let freed = retried(WakeSite::File(&dir), &name, until).await;
                let _ = tell.send(freed.unwrap_or(false));
            });
            return Some(Started {
                marker: None,
                answer,
            });
        }
        let server = db.clone();
        self.spawn(db, None, wait, move |conn| {
            Box::pin(async move {
                // A Galera node keeps a GET_LOCK name on one node only (asked once).
                if server.wake_locks_ruled_out().await.unwrap_or(true) {
                    return Ok(false);
                }
                retried(WakeSite::Server(&statements, conn), &name, until).await
            })
        })
    }

    /// Runs `wait` on a connection of the handle's own (an idle one, or one opened for
    /// it), in a task of its own, bounded by `bound` and [`SLACK`] on the client's
    /// clock, when a slot is free: its answer comes back on the returned [`Started`].
    /// The connection is kept for the next wait when the wait answered, closed when it
    /// failed or did not answer in time (its state is unknown).
    fn spawn<F>(&self, db: &Db, marker: Option<String>, bound: Duration, wait: F) -> Option<Started>
    where
        F: for<'c> FnOnce(&'c mut Conn) -> WaitFuture<'c> + Send + 'static,
    {
        let s = &self.shared;
        let slot = Arc::clone(&s.slots).try_acquire_owned().ok()?;
        let (tell, answer) = oneshot::channel();
        let shared = Arc::clone(s);
        let db = db.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let idle = shared
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut conn = match idle {
                Some(conn) => conn,
                None => match db.wake_connect().await {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::debug!(error = %e,
                            "no connection to wait in the server on; the waiter polls");
                        return;
                    }
                },
            };
            match tokio::time::timeout(bound + SLACK, wait(&mut conn)).await {
                Ok(Ok(freed)) => {
                    let _ = tell.send(freed);
                    let mut idle = shared.idle.lock().unwrap_or_else(PoisonError::into_inner);
                    if idle.len() < shared.cap {
                        idle.push(conn);
                        return;
                    }
                    drop(idle);
                    conn.close();
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "a wait in the server failed; the waiter polls");
                    conn.close();
                }
                // Not answered in time: the connection's state is unknown.
                Err(_) => conn.close(),
            }
        });
        Some(Started { marker, answer })
    }
}

/// Where a wake lock is waited for: a server, on a connection; SQLite, at its file.
enum WakeSite<'a> {
    Server(&'a WakeStatements, &'a mut Conn),
    #[cfg(feature = "sqlite")]
    File(&'a std::path::Path),
}

impl WakeSite<'_> {
    /// One wait, for `left` at most, for the wake lock named `name`.
    async fn once(&mut self, name: &str, left: Duration) -> Result<WakeAnswer, sqlx::Error> {
        match self {
            Self::Server(statements, conn) => statements.wait(conn, name, left).await,
            #[cfg(feature = "sqlite")]
            Self::File(dir) => Ok(crate::db::wake_lock::wait_file(dir, name, left).await),
        }
    }
}

/// Waits at `site` until `until` for the wake lock named `name` to be let go: `true`
/// when it was. Nobody holding it is asked again after each of [`NOT_HELD_RETRIES`]
/// (while time is left), then the waiter polls.
async fn retried(
    mut site: WakeSite<'_>,
    name: &str,
    until: tokio::time::Instant,
) -> Result<bool, sqlx::Error> {
    let mut retries = NOT_HELD_RETRIES.iter();
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        match site.once(name, left).await? {
            WakeAnswer::Freed => return Ok(true),
            WakeAnswer::Held => return Ok(false),
            WakeAnswer::NotHeld => match retries.next() {
                Some(pause) if left > *pause + SHORTEST => tokio::time::sleep(*pause).await,
                _ => return Ok(false),
            },
        }
    }
}

/// A wait's statements on its connection: `true` when what it waited for was freed.
type WaitFuture<'c> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, sqlx::Error>> + Send + 'c>>;

impl Drop for Shared {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        for conn in idle {
            conn.close();
        }
    }
}
