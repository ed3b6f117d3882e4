//! Read-write locks: [`RwLockRequest`], made by [`Locker::read_lock`] and
//! [`Locker::write_lock`]: many readers or one writer, with writer preference.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::strategy::handle::Handle;
use crate::strategy::held::Held;
use crate::strategy::landing::{Landing, Leases};
use crate::strategy::lease::Renewal;
use crate::strategy::rwlock::{self, intent_key, read_attempt};
use crate::strategy::wait::single_try;
use crate::strategy::{Ask, Granted, Hold};
use crate::support::error::{Error, Result};
use crate::support::strategy_kind::Strategy;
use crate::support::validate::read_key;
use crate::support::validate::{self, MAX_KEY_BYTES};

use super::guard::LockGuard;
use super::locker::Locker;
use super::request::LockRequest;

/// The longest name a read-write lock may have: 212 bytes, so that its rows' keys
/// (the name followed by `@write:` and an owner id) fit in
/// [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES).
pub const MAX_RWLOCK_NAME_BYTES: usize = MAX_KEY_BYTES - 43;

impl Locker {
    /// A request for the read side of the read-write lock `name`: shared with other
    /// readers, excluded by a writer. See [`RwLockRequest`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let other = locker.new_handle();
    /// let mine = locker.read_lock("catalog").acquire().await?;
    /// let theirs = other.read_lock("catalog").acquire().await?; // readers share
    /// let writer = locker.new_handle();
    /// assert!(writer.write_lock("catalog").try_acquire().await?.is_none());
    /// mine.release().await?;
    /// theirs.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_lock<'a>(&'a self, name: &'a str) -> RwLockRequest<'a> {
        RwLockRequest::new(&self.shared, name, false)
    }

    /// A request for the write side of the read-write lock `name`: excludes readers
    /// and other writers. See [`RwLockRequest`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let write = locker.write_lock("catalog").acquire().await?;
    /// // A downgrade: the writer takes the read side, then gives up the write side.
    /// let read = locker.read_lock("catalog").acquire().await?;
    /// write.release().await?;
    /// assert!(locker.new_handle().read_lock("catalog").try_acquire().await?.is_some());
    /// read.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_lock<'a>(&'a self, name: &'a str) -> RwLockRequest<'a> {
        RwLockRequest::new(&self.shared, name, true)
    }
}

/// A request for one side of a read-write lock, made by [`Locker::read_lock`] or
/// [`Locker::write_lock`].
///
/// # What it promises
///
/// - **Many readers or one writer.** The write side of the lock `name` is a lease on
///   the key `name` itself, which its row records as the write side (`write` as its
///   strategy, [`LockInfo::strategy`](crate::LockInfo::strategy)), so that the
///   database tells it from any other lock of its owner on the name; each read hold
///   is a lease of its own, on the key
///   `name@read:<owner>` ([`LockGuard::key`] shows it). Reads hold the name itself
///   too, together: while a read is live the row `name` is held in *shared mode* (no
///   owner, `read` as its strategy, the reads counted, expiring no sooner than any of
///   them; [`Locker::lock_info`] shows it so). So the name is busy for every
///   exclusive acquisition, of whatever primitive: a writer, a lock of any strategy on
///   the key, a multi-lock that names it, an election on it, a semaphore of that name.
///   A read is granted only while the name is free or held by reads, in one
///   transaction that marks the name: no reader and writer (nor any other holder of
///   the name) ever both hold.
/// - **Writer preference.** A writer that has to wait first records its intent (a
///   lease on `name@write:<owner>`, renewed while it waits); a read that arrives while
///   an intent or a write hold is live waits behind it, so a steady stream of readers
///   cannot starve a writer. Two exceptions, both holders who would otherwise wait for
///   themselves: a handle that already holds a read re-enters it, and a handle that
///   holds the write side takes a read at once (a downgrade).
/// - **Downgrade.** A handle holding the write side may take the read side: granted at
///   once whatever waits, and only beside the write side (the database grants a read
///   beside a lock of its own owner only when the row records the write side).
///   Releasing the write hold (or dropping its guard, or a write attempt cut off giving
///   back its grant) then leaves the name to the read hold, in shared mode, in the
///   release's own statement, with no moment in which the lock was free: other readers
///   get in, writers keep waiting. The release decides from the table, where it finds
///   the owner's read live or not. The reverse, an upgrade (asking for the write side
///   while holding a read), is refused with [`Error::UpgradeRefused`] before any SQL:
///   two readers upgrading at once would wait for each other. A read asked for by a
///   handle that holds the name otherwise than as the write side (a plain lock, a
///   multi-lock's key), a lock asked for by a handle that holds a read or the write
///   side of the name, and the write side asked for by a handle that holds a lock on
///   the name, are refused with [`Error::MixedHolds`] before any SQL: they are holders
///   of their own, and one would wait for the other. Two such requests made at once
///   both pass those checks; the database then keeps them apart as it keeps two
///   owners apart (the one granted second is busy).
/// - **Leases.** Every hold, read or write, has its own owner, expiry on the database
///   clock and fencing token, is renewed by the watchdog, fires its lost signal when
///   lost, and comes back at its TTL when its holder dies; the sweeper clears expired
///   read holds as it clears any expired lease. A read's renewal and extension push
///   the name in the same statement or transaction, and its release counts the name
///   one read less (the last frees it): the name never expires before a live read of
///   it. A reader that dies keeps the name held until its read's expiry, and no later
///   than the name's expiry plus a renewal period. Write tokens rise from one write to
///   the next on every server; on PostgreSQL and MariaDB every token, read or write,
///   comes from the table's one sequence, so a write after a read carries a higher
///   token than the read, and the reverse.
///
/// Waits poll with the handle's back-off; writers are not queued among themselves.
///
/// # Errors
///
/// Before any SQL: the key errors of a single lock for the name (among them
/// [`Error::ReservedKey`] and [`Error::ReservedMarker`], and [`Error::KeyTooLong`]
/// past [`MAX_RWLOCK_NAME_BYTES`]), [`Error::UpgradeRefused`],
/// [`Error::StrategyConflict`] and [`Error::MixedHolds`], TTL errors.
///
/// # Cancel safety
///
/// Cancel safe: an attempt runs in the caller's task, and moves to a task of its own,
/// which gives back what it took, if its caller stops waiting first; a writer that stops waiting gives back its intent and
/// its hold of `name` in the background, as the write side's release does (a read of
/// the handle granted beside it meanwhile keeps the name).
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until one of its acquire methods is awaited"]
pub struct RwLockRequest<'a> {
    shared: &'a Arc<Handle>,
    name: &'a str,
    write: bool,
    ttl: Option<Duration>,
    auto_renew: Option<bool>,
    max_hold: Option<Duration>,
    timeout: Option<Duration>,
}

impl<'a> RwLockRequest<'a> {
    fn new(shared: &'a Arc<Handle>, name: &'a str, write: bool) -> Self {
        Self {
            shared,
            name,
            write,
            ttl: None,
            auto_renew: None,
            max_hold: None,
            timeout: None,
        }
    }

    /// The hold's TTL. Defaults to the handle's
    /// ([`LockerBuilder::ttl`](crate::LockerBuilder::ttl)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether the watchdog renews the hold. Defaults to the handle's.
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = Some(on);
        self
    }

    /// A cap on the total hold time, as [`LockRequest::max_hold`].
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.max_hold = Some(cap);
        self
    }

    /// How long [`acquire`](Self::acquire) waits: [`Error::Timeout`] at the deadline.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Takes the side asked for if it can be had now; `Ok(None)` otherwise. A write
    /// tried this way records no intent.
    ///
    /// # Errors
    ///
    /// See the type's docs; database errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: what the attempt took is given back.
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        let ttl = self.check()?;
        if self.write {
            // The name is busy while reads hold it: no reader to wait out.
            return self
                .writer_request(self.name, ttl)
                .write_side()
                .try_acquire()
                .await;
        }
        let taken =
            single_try(|reached| read_attempt(self.shared, self.name, ttl, reached)).await?;
        Ok(taken.map(|(landing, sent)| self.read_guard(ttl, landing, sent)))
    }

    /// Takes the side asked for, waiting as long as it takes, or until the request's
    /// [`timeout`](Self::timeout).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline; see the type's docs.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped at any point, it leaves nothing held (a writer's intent and
    /// hold are given back in the background).
    pub async fn acquire(self) -> Result<LockGuard> {
        let deadline = self.timeout.and_then(|t| Instant::now().checked_add(t));
        self.wait(deadline).await
    }

    /// Takes the side asked for, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline, and as [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_timeout(self, timeout: Duration) -> Result<LockGuard> {
        let deadline = Instant::now().checked_add(timeout);
        self.wait(deadline).await
    }

    async fn wait(self, deadline: Option<Instant>) -> Result<LockGuard> {
        let ttl = self.check()?;
        if self.write {
            self.wait_write(ttl, deadline).await
        } else {
            self.wait_read(ttl, deadline).await
        }
    }

    /// A reader's wait: one read attempt per poll.
    async fn wait_read(&self, ttl: Duration, deadline: Option<Instant>) -> Result<LockGuard> {
        // The reader's wait (`strategy/rwlock.rs`).
        let (landing, sent) = rwlock::read(self.shared, self.name, ttl, deadline).await?;
        Ok(self.read_guard(ttl, landing, sent))
    }

    /// A writer's wait (`strategy/rwlock.rs`): its intent first, so that later readers
    /// wait, then the lease on the name, which is busy while reads hold it; the intent
    /// goes once the write is granted (or given up). Both leases are checked as lock
    /// requests before any SQL is sent.
    async fn wait_write(&self, ttl: Duration, deadline: Option<Instant>) -> Result<LockGuard> {
        let started = Instant::now();
        let intent_key = intent_key(self.name, &self.shared.owner_text);
        let intent_request = self.writer_request(&intent_key, ttl).own_key();
        let intent = intent_request.ask()?;
        let request = self.writer_request(self.name, ttl).write_side();
        let write = request.ask()?;
        let span = request.span(&write);
        // Boxed, its type erased, as a lock request's wait is (`LockRequest::wait`).
        let waiting: Pin<Box<dyn Future<Output = Result<Held>> + Send + '_>> = Box::pin(
            rwlock::write(
                self.shared,
                &intent,
                intent_request.span(&intent),
                &write,
                request.renewal(&write),
                started,
                deadline,
            )
            .instrument(span.clone()),
        );
        let guard = LockGuard::from_held(waiting.await?);
        span.record("token", guard.fencing_token());
        Ok(guard)
    }

    /// A lease request for one of the writer's keys, with this request's settings.
    fn writer_request<'k>(&'k self, key: &'k str, ttl: Duration) -> LockRequest<'k> {
        let mut r = LockRequest::new(self.shared, key)
            .strategy(Strategy::Lease)
            .ttl(ttl);
        if let Some(on) = self.auto_renew {
            r = r.auto_renew(on);
        }
        if let Some(cap) = self.max_hold {
            r = r.max_hold(cap);
        }
        r
    }

    /// The request checked before any SQL is sent: the TTL it asks for.
    fn check(&self) -> Result<Duration> {
        // The name is the write side's key: a semaphore's permit keys are refused.
        validate::lock_key(self.name)?;
        if self.name.len() > MAX_RWLOCK_NAME_BYTES {
            return Err(Error::KeyTooLong {
                len: self.name.len(),
                max: MAX_RWLOCK_NAME_BYTES,
            });
        }
        let owner = &self.shared.owner_text;
        if self.write && self.shared.held_with(&read_key(self.name, owner)).is_some() {
            return Err(Error::UpgradeRefused {
                name: self.name.to_owned(),
            });
        }
        if !self.write {
            if let Some(held) = self
                .shared
                .held_with(self.name)
                .filter(|&h| h != Strategy::Lease)
            {
                return Err(Error::StrategyConflict {
                    key: self.name.to_owned(),
                    held,
                    requested: Strategy::Lease,
                });
            }
            // A downgrade leaves the name to the read at the write side's release; no
            // other release of the name does.
            if self.shared.holds_other_than_write(self.name) {
                return Err(Error::MixedHolds {
                    key: self.name.to_owned(),
                    held: "as a lock",
                    requested: "by a read",
                });
            }
        }
        let ttl = self.ttl.unwrap_or(self.shared.settings.ttl);
        validate::ttl(ttl)?;
        Ok(ttl)
    }

    /// The guard of a read hold.
    fn read_guard(&self, ttl: Duration, landing: Landing<Leases>, sent: Instant) -> LockGuard {
        let shared = self.shared;
        let renewal = Renewal {
            ttl,
            auto_renew: self.auto_renew.unwrap_or(shared.settings.auto_renew),
            max_hold: self.max_hold,
        };
        let key = read_key(self.name, &shared.owner_text);
        // The attempt stays noted until the guard holds the read: a release of this
        // handle's write side, which waits for reads under way, then sees it held.
        let _until_held = shared.attempt_started(&key);
        let grant = landing
            .take()
            .into_grants()
            .into_iter()
            .next()
            .expect("a read landing holds one grant");
        let one = Ask {
            key,
            strategy: Strategy::Lease,
            ttl,
            write: false,
        };
        let (hold, id, lost) = Hold::start(shared, &one, Granted::Lease(grant), sent, renewal);
        LockGuard::from_held(Held::new(Arc::clone(shared), id, hold, lost, None))
    }
}
