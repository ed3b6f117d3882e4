//! Lock requests: [`LockRequest`], made by [`Locker::lock`](crate::Locker::lock), with
//! the wait loop that polls (or is woken) until a lock is granted or a deadline passes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::strategy::attempt::try_once;
use crate::strategy::fair;
use crate::strategy::lock_wait::{self, Acquired};
use crate::strategy::{check_strategy, handle::Handle, lease::Renewal};
use crate::strategy::{Ask, Granted};
use crate::support::error::{Error, Result};
use crate::support::lost::LostReason;
use crate::support::strategy_kind::Strategy;
use crate::support::validate;

use super::guard::LockGuard;

/// A request for one lock, made by [`Locker::lock`](crate::Locker::lock).
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until one of its acquire methods is awaited"]
pub struct LockRequest<'a> {
    shared: &'a Arc<Handle>,
    key: &'a str,
    ttl: Option<Duration>,
    auto_renew: Option<bool>,
    max_hold: Option<Duration>,
    at_least: Option<Duration>,
    timeout: Option<Duration>,
    strategy: Option<Strategy>,
    /// A key of sqlock's own (a waiting writer's intent, `NAME@write:OWNER`), which a
    /// caller's request may not name.
    own_key: bool,
    /// The write side of the read-write lock of the key (recorded as such).
    write_side: bool,
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
            at_least: None,
            timeout: None,
            strategy: None,
            own_key: false,
            write_side: false,
        }
    }

    /// A request for one of sqlock's own keys (a read-write lock's intent), which the
    /// checks of a caller's key would refuse.
    pub(crate) fn own_key(mut self) -> Self {
        self.own_key = true;
        self
    }

    /// A request for the write side of the read-write lock of the key: a lease,
    /// recorded as the write side, which a read of the same handle may join (a
    /// downgrade) and which no other lock of the handle re-enters.
    pub(crate) fn write_side(mut self) -> Self {
        self.write_side = true;
        self
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

    /// An at-least hold: the lock is kept until at least `hold` after it was taken,
    /// even when it is released (or its guard dropped) sooner, and given back then;
    /// ShedLock's `lockAtLeastFor`. Defaults to none: a release frees the key at once.
    ///
    /// This is how replicas that each run the same job on a timer run it once per
    /// period: every replica tries the lock at each tick with an at-least hold of about
    /// the period; the first takes it, and a job that finishes early does not let a
    /// replica whose clock or timer runs a little behind take the key and run it again
    /// in the same period. See the project's `examples/scheduler.rs`.
    ///
    /// Precisely, on the database clock: the lease was taken at `acquired_at` (a
    /// re-entry keeps it, see [`LockInfo::acquired_at`](crate::LockInfo::acquired_at)).
    /// A release, or a dropped guard's release in the background, that gives back the
    /// last hold before `acquired_at + hold` does not free the row: it stays taken by
    /// this owner with no hold ([`LockInfo::hold_count`](crate::LockInfo::hold_count)
    /// 0), its expiry set to `acquired_at + hold` (shorter or longer than the lease had),
    /// and then lapses like any lease, free for the next acquisition (with a higher
    /// fencing token). Nothing renews it meanwhile, and it is busy for every owner, this
    /// handle included: a hold that ended is not re-entered. A release at or after
    /// `acquired_at + hold` frees the key at once, as without the hold. With several
    /// holds of one key (re-entry), the longest at-least hold any of them asked for
    /// applies at the last release. The release answers as usual: `true` when the lock
    /// was still ours. A lock lost before its release stays lost: the hold shapes a
    /// release, and cannot keep a lease that lapsed. An operator's immediate
    /// [force release](crate::Locker::force_release_now) frees the key at once; one
    /// that [revokes](crate::Locker::force_release) the lock has the release that
    /// gives it back free it at once (a revoked lease never outlasts its expiry), and
    /// a key the hold keeps after its release keeps it until its expiry. A release
    /// that never reaches the server (the process died first) leaves the lease to its
    /// TTL: give the request a [`ttl`](Self::ttl) of at least the hold when the period
    /// must hold through a crash of the holder.
    ///
    /// Lease and insert strategies only: a for-update lock ends with its transaction.
    ///
    /// # Errors
    ///
    /// The acquisition answers [`Error::AtLeastUnsupported`] for the for-update
    /// and fair strategies and [`Error::TtlTooLong`] for a hold longer than
    /// [`MAX_TTL`](crate::MAX_TTL), before any SQL is sent.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool)?;
    /// use std::time::Duration;
    ///
    /// let replica = locker.new_handle(); // another replica's handle
    /// let guard = locker.lock("hourly-report").at_least(Duration::from_secs(3000)).try_acquire().await?;
    /// let guard = guard.expect("the first replica to try takes it");
    /// // ... the report, done in seconds ...
    /// assert!(guard.release().await?);
    /// // Kept for the rest of the period: no replica runs the report again in it.
    /// assert!(replica.try_acquire("hourly-report").await?.is_none());
    /// assert!(locker.try_acquire("hourly-report").await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn at_least(mut self, hold: Duration) -> Self {
        self.at_least = Some(hold);
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
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
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
    /// [`Error::KeyContainsNul`], [`Error::ReservedKey`], [`Error::ReservedMarker`], a
    /// TTL out of range); [`Error::StrategyConflict`], also before any SQL, when this
    /// handle holds the key with another strategy, and [`Error::MixedHolds`] when it
    /// holds a read or the write side of the read-write lock of that name;
    /// [`Error::GrantExpired`] when the key was free but the grant's answer took longer
    /// than its TTL (it was given back); [`Error::MissingTable`]; [`Error::Database`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement runs in the caller's task, and moves to a task of its
    /// own if this future is dropped first, which gives the lock back.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// use sqlock::Strategy;
    ///
    /// let guard = locker.lock("invoice-run").strategy(Strategy::Insert).try_acquire().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        let ask = self.ask()?;
        let span = self.span(&ask);
        let granted = async {
            let started = Instant::now();
            let granted = if ask.strategy == Strategy::Fair {
                fair::try_acquire(self.shared, &ask).await?
            } else {
                try_once(self.shared, &ask).await?
            };
            match granted {
                Some((granted, sent)) => Ok(Some(self.guard(&ask, granted, sent, started, None))),
                None => {
                    self.busy(&ask);
                    Ok(None)
                }
            }
        }
        .instrument(span.clone())
        .await;
        if let Ok(Some(guard)) = &granted {
            span.record("token", guard.fencing_token());
        }
        granted
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
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
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
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
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
        match self.wait(deadline).await {
            // A timeout comes at the deadline set here: the call waited `timeout` at
            // least, though the wait counts from its own start, a moment later.
            Err(Error::Timeout { key, waited }) => Err(Error::Timeout {
                key,
                waited: waited.max(timeout),
            }),
            other => other,
        }
    }

    async fn wait(self, deadline: Option<Instant>) -> Result<LockGuard> {
        let ask = self.ask()?;
        let span = self.span(&ask);
        // Boxed, its type erased: the callers' futures (an election's campaign spawned
        // onto a runtime, say) would otherwise nest the whole wait in their own types,
        // deep enough for the compiler's layout and `Send` checks to reach their
        // recursion limit in users' crates. One allocation per wait.
        let waiting: Pin<Box<dyn Future<Output = Result<LockGuard>> + Send + '_>> =
            Box::pin(self.wait_for(&ask, deadline).instrument(span.clone()));
        let granted = waiting.await;
        if let Ok(guard) = &granted {
            span.record("token", guard.fencing_token());
        }
        granted
    }

    /// The wait of [`wait`](Self::wait), in its span (`strategy/lock_wait.rs`).
    async fn wait_for(&self, ask: &Ask, deadline: Option<Instant>) -> Result<LockGuard> {
        let started = Instant::now();
        let a = lock_wait::wait(self.shared, ask, deadline).await?;
        Ok(self.guard(ask, a.granted, a.sent, started, a.last_busy))
    }

    /// The strategy this request takes the lock with.
    fn chosen_strategy(&self) -> Strategy {
        self.strategy.unwrap_or(self.shared.settings.strategy)
    }

    /// What this request asks for, checked before any SQL is sent.
    pub(super) fn ask(&self) -> Result<Ask> {
        // Not a semaphore's permit nor a read-write lock's hold: those are taken
        // through their semaphore or read-write lock only.
        if self.own_key {
            validate::key(self.key)?;
        } else {
            validate::lock_key(self.key)?;
        }
        let shared = &self.shared;
        // A name this handle holds by a read is held in shared mode: a lock on it would
        // wait for this handle's own read. (The write side's checks are its request's:
        // an upgrade is refused there.)
        if !self.write_side && shared.holds_read_of(self.key) {
            return Err(Error::MixedHolds {
                key: self.key.to_owned(),
                held: "by a read",
                requested: "as a lock",
            });
        }
        // The write side and another lock of this handle on the name are two holders
        // to the database (the write side's row records it as such): the one would wait
        // for the other. These checks make the mix a clear error; two requests made at
        // once both pass them, and then the database keeps them apart.
        if self.write_side && shared.holds_other_than_write(self.key) {
            return Err(Error::MixedHolds {
                key: self.key.to_owned(),
                held: "as a lock",
                requested: "as the write side",
            });
        }
        if !self.write_side && shared.holds_write_side(self.key) {
            return Err(Error::MixedHolds {
                key: self.key.to_owned(),
                held: "as the write side",
                requested: "as a lock",
            });
        }
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
        if let Some(hold) = self.at_least {
            // A for-update lock ends with its transaction; a fair lock is handed to the
            // next waiter at its release.
            if matches!(strategy, Strategy::ForUpdate | Strategy::Fair) {
                return Err(Error::AtLeastUnsupported {
                    strategy: strategy.name(),
                });
            }
            if hold > validate::MAX_TTL {
                return Err(Error::TtlTooLong {
                    ttl: hold,
                    max: validate::MAX_TTL,
                });
            }
        }
        Ok(Ask {
            key: self.key.to_owned(),
            strategy,
            ttl,
            write: self.write_side,
        })
    }

    /// How the watchdog keeps a grant to `ask`.
    pub(super) fn renewal(&self, ask: &Ask) -> Renewal {
        Renewal {
            ttl: ask.ttl,
            auto_renew: self.auto_renew.unwrap_or(self.shared.settings.auto_renew),
            max_hold: self.max_hold,
        }
    }

    /// The span of one acquisition; its token is recorded at the grant.
    pub(super) fn span(&self, ask: &Ask) -> tracing::Span {
        tracing::info_span!("sqlock.acquire", key = %ask.key, strategy = %ask.strategy,
            owner = %self.shared.owner, table = %self.shared.db.table(),
            token = tracing::field::Empty)
    }

    /// Notes an attempt that found the lock busy; when it answered.
    fn busy(&self, ask: &Ask) -> Instant {
        lock_wait::busy(self.shared, ask)
    }

    /// The guard of a grant to `ask`, whose acquisition started at `started` and last
    /// found the lock busy at `last_busy`.
    pub(super) fn guard(
        &self,
        ask: &Ask,
        granted: Granted,
        sent: Instant,
        started: Instant,
        last_busy: Option<Instant>,
    ) -> LockGuard {
        let acquired = Acquired {
            granted,
            sent,
            last_busy,
            turn: None,
        };
        let held = acquired.hold(self.shared, ask, started, self.renewal(ask), self.at_least);
        LockGuard::from_held(held)
    }
}
