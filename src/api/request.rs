//! Lock requests: [`LockRequest`], made by [`Locker::lock`](crate::Locker::lock), with
//! the wait loop that polls (or is woken) until a lock is granted or a deadline passes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::strategy::attempt::{attempt, try_once};
use crate::strategy::fair;
use crate::strategy::{check_strategy, handle::Handle, lease::Renewal, wait_in_database};
use crate::strategy::{Ask, Granted, Hold};
use crate::support::backoff::Backoff;
use crate::support::error::{Class, Error, Result};
use crate::support::lost::LostReason;
use crate::support::strategy_kind::Strategy;
use crate::support::validate;

use super::guard::LockGuard;

/// How many grants in a row may come back too late to use (their answer outran their
/// TTL) before a waiting call reports [`Error::GrantExpired`].
const LAPSED_GRANTS: u32 = 3;

/// A request for one lock, made by [`Locker::lock`](crate::Locker::lock).
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until one of its acquire methods is awaited"]
pub struct LockRequest<'a> {
    shared: &'a Arc<Handle>,
    key: &'a str,
    ttl: Option<Duration>,
    auto_renew: Option<bool>,
    max_hold: Option<Duration>,
    timeout: Option<Duration>,
    strategy: Option<Strategy>,
}

impl<'a> LockRequest<'a> {
    /// A request for `key` on `shared`, with the handle's settings.
    pub(crate) fn new(shared: &'a Arc<Handle>, key: &'a str) -> Self {
        Self {
            shared,
            key,
            ttl: None,
            auto_renew: None,
            max_hold: None,
            timeout: None,
            strategy: None,
        }
    }

    /// The lease's TTL for this request. Defaults to the handle's
    /// ([`LockerBuilder::ttl`](crate::LockerBuilder::ttl)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How this lock is held in the table. Defaults to the handle's
    /// ([`LockerBuilder::strategy`](crate::LockerBuilder::strategy)).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// Whether the watchdog renews this lease. Defaults to the handle's
    /// ([`LockerBuilder::auto_renew`](crate::LockerBuilder::auto_renew)).
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = Some(on);
        self
    }

    /// A cap on the total hold time: past it the watchdog renews the lease no more,
    /// and its lost signal fires when it expires ([`LostReason::HoldCapReached`]).
    /// Defaults to no cap.
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.max_hold = Some(cap);
        self
    }

    /// How long the request waits for the lock: [`acquire`](Self::acquire) and
    /// [`run`](Self::run) then answer [`Error::Timeout`] at the deadline, as
    /// [`acquire_timeout`](Self::acquire_timeout) does. Defaults to no limit.
    /// [`try_acquire`](Self::try_acquire) makes one attempt whatever it says, and
    /// `acquire_timeout` takes its own.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Runs `work` while holding the lock; see
    /// [`Locker::with_lock`](crate::Locker::with_lock). Waits for the
    /// lock as [`timeout`](Self::timeout) says.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`], [`Error::Timeout`], and as [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::with_lock`](crate::Locker::with_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
    /// use std::time::Duration;
    ///
    /// let rows = locker
    ///     .lock("rebuild-index")
    ///     .ttl(Duration::from_secs(10))
    ///     .timeout(Duration::from_secs(30))
    ///     .run(|token| async move {
    ///         // ... work fenced with `token` ...
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(i64) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let key = self.key.to_owned();
        let guard = self.acquire().await?;
        let mut lost = guard.lost();
        let work = work(guard.fencing_token());
        let outcome = tokio::select! {
            // Checked first: when both are ready, the loss wins.
            biased;
            reason = lost.wait() => Err(reason),
            value = work => Ok(value),
        };
        let still_ours = guard.release().await;
        match outcome {
            Err(reason) => Err(Error::LockLost { key, reason }),
            Ok(value) => match still_ours? {
                true => Ok(value),
                false => Err(Error::LockLost {
                    key,
                    reason: lost.reason().unwrap_or(LostReason::NotHeld),
                }),
            },
        }
    }

    /// Takes the lock if it is free, expired, or already held by this handle, in one
    /// statement; `Ok(None)` when another owner holds a live lease.
    ///
    /// A statement that loses a deadlock or serialization race is retried a few times;
    /// if the race persists the lock is reported as held (`Ok(None)`).
    ///
    /// Waiting versions: [`acquire`](Self::acquire),
    /// [`acquire_timeout`](Self::acquire_timeout).
    ///
    /// # Errors
    ///
    /// Bad input before any SQL is sent ([`Error::EmptyKey`], [`Error::KeyTooLong`],
    /// [`Error::KeyContainsNul`], a TTL out of range); [`Error::StrategyConflict`],
    /// also before any SQL, when this handle holds the key with another strategy;
    /// [`Error::GrantExpired`] when the key was free but the grant's answer took longer
    /// than its TTL (it was given back); [`Error::MissingTable`]; [`Error::Database`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement runs in a task of its own, and if this future is gone
    /// when it returns a grant, that task gives the lock back.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
    /// use sqlock::Strategy;
    ///
    /// let guard = locker.lock("invoice-run").strategy(Strategy::Insert).try_acquire().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        let ask = self.ask()?;
        let granted = if ask.strategy == Strategy::Fair {
            fair::acquire(self.shared, &ask, None, true).await?
        } else {
            try_once(self.shared, &ask).await?
        };
        Ok(granted.map(|(g, sent)| self.guard(&ask, g, sent)))
    }

    /// Takes the lock, waiting for it as long as it takes, or until the request's
    /// [`timeout`](Self::timeout) if it has one.
    ///
    /// Polls with capped exponential back-off and jitter (see
    /// [`LockerBuilder::poll_interval`](crate::LockerBuilder::poll_interval)).
    /// [`try_acquire`](Self::try_acquire) tries once;
    /// [`acquire_timeout`](Self::acquire_timeout) gives up at a deadline.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the request's [`timeout`](Self::timeout);
    /// [`Error::GrantExpired`] only after three grants in a row came back too late to
    /// use (one is tried again at once); and as [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no lock held and no
    /// connection taken (a lock the attempt in flight took is given back).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
    /// use std::time::Duration;
    ///
    /// // The request's timeout bounds the wait.
    /// let guard = locker.lock("invoice-run").timeout(Duration::from_secs(2)).acquire().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(self) -> Result<LockGuard> {
        let deadline = self.timeout.and_then(|t| Instant::now().checked_add(t));
        self.wait(deadline).await
    }

    /// Takes the lock, waiting at most `timeout` for it.
    ///
    /// At the deadline the call returns [`Error::Timeout`], also when an attempt is in
    /// flight then (waiting for a pooled connection included): that attempt finishes
    /// in the background and gives back what it took. A timeout shorter than one round
    /// trip (zero included) therefore always times out; use
    /// [`try_acquire`](Self::try_acquire) for a single attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline, also when the attempt in flight then has the
    /// pool's last connection itself (waiting in the database behind another
    /// transaction, say); [`Error::PoolExhausted`] instead when no connection could be
    /// had at all (every connection of the pool was taken by others for the whole
    /// wait, so no attempt ever had one), or the pool's own acquire timeout ran out
    /// first; and as [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
    /// use std::time::Duration;
    ///
    /// let guard = locker
    ///     .lock("invoice-run")
    ///     .ttl(Duration::from_secs(5))
    ///     .acquire_timeout(Duration::from_secs(1))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_timeout(self, timeout: Duration) -> Result<LockGuard> {
        let deadline = Instant::now().checked_add(timeout);
        self.wait(deadline).await
    }

    async fn wait(self, deadline: Option<Instant>) -> Result<LockGuard> {
        let ask = self.ask()?;
        if ask.strategy == Strategy::Fair {
            let granted = fair::acquire(self.shared, &ask, deadline, false).await?;
            // Without `once`, a wait ends with a grant or an error.
            let (granted, sent) = granted.ok_or_else(|| Error::Timeout {
                key: ask.key.clone(),
                waited: Duration::ZERO,
            })?;
            return Ok(self.guard(&ask, granted, sent));
        }
        let started = Instant::now();
        let timed_out = || Error::Timeout {
            key: self.key.to_owned(),
            waited: started.elapsed(),
        };
        let shared = &self.shared;
        let dialect = shared.db.dialect();
        let mut backoff = Backoff::new(shared.settings.poll_min, shared.settings.poll_max);
        // Registered before the first attempt, so that a release announced while an
        // attempt is under way still cuts the wait after it short.
        #[cfg(feature = "postgres")]
        let wakeups = wakeups(shared, ask.strategy, &ask.key);
        // Whether any attempt had a pooled connection: until one has, a deadline met
        // while every connection of the pool is taken is an exhausted pool.
        let reached = Arc::new(AtomicBool::new(false));
        let mut lapsed = 0;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let in_db = wait_in_database(ask.strategy, dialect, left);
            // The deadline is the caller's: at it the answer is a timeout, also when the
            // attempt in flight holds the pool's last connection itself (waiting in the
            // database behind another transaction, say). Only a wait in which no attempt
            // ever had a connection, while every connection of the pool was taken, is an
            // exhausted pool.
            let this = attempt(shared, &ask, in_db, reached.clone());
            let outcome = match deadline {
                Some(d) => match tokio::time::timeout_at(d, this).await {
                    Ok(outcome) => outcome,
                    Err(_) if !reached.load(Ordering::Relaxed) && shared.pool.is_exhausted() => {
                        return Err(Error::PoolExhausted)
                    }
                    Err(_) => return Err(timed_out()),
                },
                None => this.await,
            };
            match outcome {
                Ok(Some((grant, sent))) => return Ok(self.guard(&ask, grant, sent)),
                // The attempt waited in the database already: go again at once.
                Ok(None) if in_db.is_some() => continue,
                Ok(None) => {}
                // Lost a deadlock or serialization race, or a lock of another strategy
                // holds the key: the lock is busy, wait.
                Err(f) if matches!(f.class, Class::Contention | Class::Held) => {}
                // Granted too late to use: another attempt may be quicker, but a TTL that
                // every answer outruns is the caller's to change, not a wait for ever.
                Err(f) if f.class == Class::Lapsed => {
                    lapsed += 1;
                    if lapsed >= LAPSED_GRANTS {
                        return Err(f.error);
                    }
                    continue;
                }
                Err(f) => return Err(f.error),
            }
            lapsed = 0;
            let wake = Instant::now() + backoff.next_delay();
            let until = deadline.map_or(wake, |d| wake.min(d));
            let sleep = tokio::time::sleep_until(until);
            #[cfg(feature = "postgres")]
            let woken = match &wakeups {
                Some(w) => {
                    tokio::select! {
                        () = sleep => false,
                        () = w.woken() => true,
                    }
                }
                None => {
                    sleep.await;
                    false
                }
            };
            #[cfg(not(feature = "postgres"))]
            let woken = {
                sleep.await;
                false
            };
            if !woken && deadline.is_some_and(|d| until >= d) {
                return Err(timed_out());
            }
        }
    }

    /// The strategy this request takes the lock with.
    fn chosen_strategy(&self) -> Strategy {
        self.strategy.unwrap_or(self.shared.settings.strategy)
    }

    /// What this request asks for, checked before any SQL is sent.
    fn ask(&self) -> Result<Ask> {
        validate::key(self.key)?;
        let shared = &self.shared;
        let strategy = self.chosen_strategy();
        check_strategy(strategy, shared.db.dialect())?;
        // A key is held by one strategy at a time, and this handle's own hold of it is
        // re-entered only with the strategy it holds the key with.
        if let Some(held) = shared.held_with(self.key).filter(|&h| h != strategy) {
            return Err(Error::StrategyConflict {
                key: self.key.to_owned(),
                held,
                requested: strategy,
            });
        }
        let ttl = self.ttl.unwrap_or(shared.settings.ttl);
        validate::ttl(ttl)?;
        Ok(Ask {
            key: self.key.to_owned(),
            strategy,
            ttl,
        })
    }

    fn guard(&self, ask: &Ask, granted: Granted, sent: Instant) -> LockGuard {
        let shared = &self.shared;
        let renewal = Renewal {
            ttl: ask.ttl,
            auto_renew: self.auto_renew.unwrap_or(shared.settings.auto_renew),
            max_hold: self.max_hold,
        };
        let (hold, id, lost) = Hold::start(shared, ask, granted, sent, renewal);
        LockGuard::new(Arc::clone(shared), id, hold, lost)
    }
}

/// A registration for release wake-ups of `key`, when the handle has them; the
/// for-update strategy waits in the database instead.
#[cfg(feature = "postgres")]
fn wakeups(
    handle: &Handle,
    strategy: Strategy,
    key: &str,
) -> Option<crate::keepers::notify::Subscription> {
    if strategy == Strategy::ForUpdate {
        return None;
    }
    handle.notifier.as_ref().map(|n| n.subscribe(key))
}
