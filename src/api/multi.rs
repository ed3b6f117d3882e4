//! Multi-locks: [`MultiLockRequest`], made by [`Locker::lock_many`], and the
//! [`MultiLockGuard`] it hands out: several keys held all or none, with one lost
//! signal for the set.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::db::fence::FenceConnection;

use crate::strategy::handle::Handle;
use crate::strategy::held::Held;
use crate::strategy::landing::{Landing, Leases};
use crate::strategy::lease::Renewal;
use crate::strategy::multi::{self, MultiAsk};
use crate::strategy::wait::single_try;
use crate::strategy::{Ask, Granted, Hold};
use crate::support::error::{Error, Result};
use crate::support::lost::{LostReason, LostSignal};
use crate::support::strategy_kind::Strategy;
use crate::support::validate;

use super::guard::LockGuard;
use super::guard_set::GuardSet;
use super::locker::Locker;

/// The most distinct keys one multi-lock may take: 64.
///
/// Each key is a row of its own, taken in one transaction; a set this large already
/// holds that transaction for a while on a busy table.
pub const MAX_MULTI_LOCK_KEYS: usize = 64;

impl Locker {
    /// A request for the locks on every key of `keys` at once, all or none: a
    /// multi-lock. See [`MultiLockRequest`] for what it promises.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// use std::time::Duration;
    ///
    /// // Move money between two accounts: both locked, or neither.
    /// let both = locker
    ///     .lock_many(&["account:7", "account:3"])
    ///     .timeout(Duration::from_secs(5))
    ///     .acquire()
    ///     .await?;
    /// assert_eq!(both.keys().collect::<Vec<_>>(), ["account:3", "account:7"]);
    /// let other = locker.new_handle();
    /// assert!(other.try_acquire("account:3").await?.is_none());
    /// assert!(both.release().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_many<'a, K: AsRef<str>>(&'a self, keys: &[K]) -> MultiLockRequest<'a> {
        MultiLockRequest {
            shared: &self.shared,
            keys: keys.iter().map(|k| k.as_ref().to_owned()).collect(),
            ttl: None,
            auto_renew: None,
            max_hold: None,
            timeout: None,
        }
    }
}

/// A request for several locks at once, made by [`Locker::lock_many`].
///
/// # What it promises
///
/// - **All or none.** Every key is taken in one attempt, or none is: an attempt is one
///   transaction that sends the lease's acquisition statement once per key and commits
///   only when every key came back this handle's; otherwise it rolls back, and nothing
///   of it was ever visible to anyone else.
/// - **A fixed order, no deadlock.** The keys are deduplicated and sorted (by their
///   bytes) before the attempt, so every multi-lock takes the keys it shares with
///   another in the same order; and no statement of an attempt ever waits for a lock
///   another acquisition holds (PostgreSQL finds the key's gate closed at once,
///   MariaDB waits on no row lock, SQLite runs one writer at a time). An attempt that
///   meets a key in use rolls back and tries again after a pause: two multi-locks over
///   overlapping keys cannot deadlock, and no deadlock error reaches the caller.
/// - **Leases, one per key.** Each key is held as a lease ([`Strategy::Lease`]) of its
///   own, with the request's TTL, expiring on the database clock, renewed by the
///   handle's watchdog like any lease, and with a fencing token of its own
///   ([`MultiLockGuard::tokens`]). So a key of the set excludes every other owner's
///   lock on it, of any strategy, and the reverse; this handle's own lease on a key
///   counts one more hold (re-entry), and its hold of a key with another strategy is
///   refused ([`Error::StrategyConflict`], before any SQL), as is a key it holds a
///   read of, or holds as the write side of its read-write lock
///   ([`Error::MixedHolds`]). A key held by another primitive (a semaphore's
///   permits or reads of that name, an election) is busy as any held key is.
/// - **One lost signal.** [`MultiLockGuard::lost`] fires when any key of the set is
///   lost, with that key's reason.
/// - **Released together** by [`MultiLockGuard::release`] (one release statement per
///   key), or in the background when the guard is dropped.
///
/// A waiting multi-lock polls with the handle's back-off: it is not woken by
/// releases, and it does not queue. A set whose keys are often taken one by one by
/// others may wait long: every key must be free at the same moment.
///
/// # Errors
///
/// Before any SQL: [`Error::NoKeys`] for an empty set, [`Error::TooManyKeys`] past
/// [`MAX_MULTI_LOCK_KEYS`] distinct keys, and the key and TTL errors of a single lock
/// for any key of the set ([`Error::ReservedKey`] for a semaphore's permit key,
/// [`Error::ReservedMarker`] for a key of a read-write lock's holds).
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until one of its acquire methods is awaited"]
pub struct MultiLockRequest<'a> {
    shared: &'a Arc<Handle>,
    keys: Vec<String>,
    ttl: Option<Duration>,
    auto_renew: Option<bool>,
    max_hold: Option<Duration>,
    timeout: Option<Duration>,
}

impl MultiLockRequest<'_> {
    /// Each lease's TTL. Defaults to the handle's
    /// ([`LockerBuilder::ttl`](crate::LockerBuilder::ttl)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether the watchdog renews the leases. Defaults to the handle's
    /// ([`LockerBuilder::auto_renew`](crate::LockerBuilder::auto_renew)).
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = Some(on);
        self
    }

    /// A cap on the total hold time, as [`LockRequest::max_hold`](crate::LockRequest::max_hold).
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.max_hold = Some(cap);
        self
    }

    /// How long [`acquire`](Self::acquire) waits: [`Error::Timeout`] at the deadline.
    /// Defaults to no limit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Takes every key if all are free (or this handle's leases), in one attempt;
    /// `Ok(None)` when another owner holds any of them. An attempt that met a key in
    /// use for a moment by another acquisition is made again a few times first.
    ///
    /// # Errors
    ///
    /// Bad input before any SQL (see the type's docs); [`Error::StrategyConflict`];
    /// [`Error::GrantExpired`] when the answer outran the TTL (given back);
    /// database errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the attempt runs in the caller's task, and moves to a task of its
    /// own if this future is dropped first, which gives back every key it took.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let other = locker.new_handle();
    /// let held = other.acquire("b").await?;
    /// // "b" is taken: neither key is.
    /// assert!(locker.lock_many(&["a", "b"]).try_acquire().await?.is_none());
    /// assert!(other.try_acquire("a").await?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(self) -> Result<Option<MultiLockGuard>> {
        let ask = self.ask()?;
        let started = Instant::now();
        let taken = single_try(|reached| multi::attempt(self.shared, &ask, reached)).await?;
        Ok(taken.map(|(landing, sent)| self.guard(&ask, landing, sent, started)))
    }

    /// Takes every key, waiting as long as it takes, or until the request's
    /// [`timeout`](Self::timeout). Polls with the handle's back-off.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline (naming the keys, joined by `,`);
    /// [`Error::GrantExpired`] after three grants in a row came back too late; and as
    /// [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped at any point, it leaves no key held (what the attempt in
    /// flight took is given back).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let set = locker.lock_many(&["x", "y", "x"]).acquire().await?;
    /// for (key, token) in set.tokens() {
    ///     println!("{key}: fenced with {token}");
    /// }
    /// set.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(self) -> Result<MultiLockGuard> {
        let deadline = self.timeout.and_then(|t| Instant::now().checked_add(t));
        self.wait(deadline).await
    }

    /// Takes every key, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline, and as [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_timeout(self, timeout: Duration) -> Result<MultiLockGuard> {
        let deadline = Instant::now().checked_add(timeout);
        self.wait(deadline).await
    }

    async fn wait(self, deadline: Option<Instant>) -> Result<MultiLockGuard> {
        let ask = self.ask()?;
        let started = Instant::now();
        // The multi-lock's wait (`strategy/multi.rs`).
        let (landing, sent) = multi::wait(self.shared, &ask, deadline).await?;
        Ok(self.guard(&ask, landing, sent, started))
    }

    /// What this request asks for, checked before any SQL is sent: the keys valid,
    /// distinct, sorted and not too many; none held by this handle with another
    /// strategy; the TTL in range.
    fn ask(&self) -> Result<MultiAsk> {
        if self.keys.is_empty() {
            return Err(Error::NoKeys);
        }
        for key in &self.keys {
            // A semaphore's permit keys are not a lock's to take.
            validate::lock_key(key)?;
        }
        let mut keys = self.keys.clone();
        keys.sort_unstable();
        keys.dedup();
        if keys.len() > MAX_MULTI_LOCK_KEYS {
            return Err(Error::TooManyKeys {
                count: keys.len(),
                max: MAX_MULTI_LOCK_KEYS,
            });
        }
        for key in &keys {
            // A name this handle holds by a read: as a single lock's request refuses it.
            if self.shared.holds_read_of(key) {
                return Err(Error::MixedHolds {
                    key: key.clone(),
                    held: "by a read",
                    requested: "as a lock",
                });
            }
            // Nor one it holds as the write side of its read-write lock, a holder of its
            // own to the database: the multi-lock would wait for it.
            if self.shared.holds_write_side(key) {
                return Err(Error::MixedHolds {
                    key: key.clone(),
                    held: "as the write side",
                    requested: "as a lock",
                });
            }
            if let Some(held) = self.shared.held_with(key).filter(|&h| h != Strategy::Lease) {
                return Err(Error::StrategyConflict {
                    key: key.clone(),
                    held,
                    requested: Strategy::Lease,
                });
            }
        }
        let ttl = self.ttl.unwrap_or(self.shared.settings.ttl);
        validate::ttl(ttl)?;
        Ok(MultiAsk { keys, ttl })
    }

    /// The guard of the grants of `ask`, one lease guard per key.
    fn guard(
        &self,
        ask: &MultiAsk,
        landing: Landing<Leases>,
        sent: Instant,
        started: Instant,
    ) -> MultiLockGuard {
        let shared = self.shared;
        let renewal = Renewal {
            ttl: ask.ttl,
            auto_renew: self.auto_renew.unwrap_or(shared.settings.auto_renew),
            max_hold: self.max_hold,
        };
        let guards = ask
            .keys
            .iter()
            .zip(landing.take().into_grants())
            .map(|(key, grant)| {
                shared
                    .meter
                    .granted(Strategy::Lease, key, started.elapsed());
                let one = Ask {
                    key: key.clone(),
                    strategy: Strategy::Lease,
                    ttl: ask.ttl,
                    write: false,
                };
                let (hold, id, lost) =
                    Hold::start(shared, &one, Granted::Lease(grant), sent, renewal);
                LockGuard::from_held(Held::new(Arc::clone(shared), id, hold, lost, None))
            })
            .collect();
        MultiLockGuard::new(guards)
    }
}

/// Several locks held together, all taken at once by [`Locker::lock_many`]: a
/// multi-lock. See [`MultiLockRequest`] for its guarantees.
///
/// Each key is a lease of its own (its own fencing token, renewed by the watchdog);
/// the set has one [lost signal](Self::lost), which fires when any key is lost.
///
/// # Drop
///
/// Dropping the guard gives every key back in the background, as a dropped
/// [`LockGuard`] does; [`release`](Self::release) to know when, and whether, they
/// were still held.
#[derive(Debug)]
#[must_use = "if unused the locks are released again at once (in the background)"]
pub struct MultiLockGuard {
    /// One lease guard per key, sorted by key.
    set: GuardSet,
}

impl MultiLockGuard {
    fn new(guards: Vec<LockGuard>) -> Self {
        Self {
            set: GuardSet::new(guards),
        }
    }

    /// The keys held, sorted (by their bytes) and without repeats.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.set.keys()
    }

    /// Each key with the fencing token of its lease, sorted by key. Fence each
    /// resource with the token of the key that guards it.
    pub fn tokens(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        self.set.tokens()
    }

    /// The fencing token of `key`'s lease, if the set holds `key`.
    pub fn fencing_token(&self, key: &str) -> Option<i64> {
        self.set
            .tokens()
            .find(|(k, _)| *k == key)
            .map(|(_, token)| token)
    }

    /// The earliest expiry of the set's leases, as last renewed.
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.set.expires_at()
    }

    /// The guard of each key, sorted by key.
    pub fn guards(&self) -> &[LockGuard] {
        self.set.guards()
    }

    /// A signal that fires when any key of the set is lost, with that key's reason.
    /// Waits forever once the set is released.
    pub fn lost(&self) -> LostSignal {
        self.set.lost()
    }

    /// Whether any key of the set was lost. Cheap: sends nothing.
    pub fn is_lost(&self) -> bool {
        self.set.is_lost()
    }

    /// Why the first key of the set lost was lost, if one was. Cheap: sends nothing.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.set.lost_reason()
    }

    /// Checks, inside the holder's own transaction on `conn`, that every key of the
    /// set is still held (same owner, same token, unexpired on the database clock),
    /// and keeps them so until that transaction ends, as [`LockGuard::fence`] does for
    /// one lock.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when a key is no longer held;
    /// [`Error::FenceNotApplicable`] for a connection of another dialect; database
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the checks may or may not have run on `conn`; roll that
    /// transaction back rather than commit it.
    pub async fn fence<C: FenceConnection>(&self, conn: &mut C) -> Result<()> {
        self.set.fence(conn).await
    }

    /// Gives every key back, one release statement per key, in key order: whether
    /// every one was still held. Every key is released even when one fails; the first
    /// error is answered then.
    ///
    /// # Errors
    ///
    /// The first database error of a release (that key lapses at its expiry).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the releases run in a task of their own, and finish in the
    /// background if the future is dropped.
    pub async fn release(self) -> Result<bool> {
        self.set.release().await
    }
}
