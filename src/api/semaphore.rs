//! Semaphores: [`Semaphore`], made by [`Locker::semaphore`], whose acquisitions take
//! permits (one, or k at once) as [`SemaphoreGuard`]s; and what an operator sees of
//! them, [`SemaphoreInfo`] by [`Locker::semaphores`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::db::values::{Limit, Slots};
use crate::db::Grant;
use crate::strategy::handle::Handle;
use crate::strategy::held::Held;
use crate::strategy::lease::{LeaseHold, Renewal};
use crate::strategy::semaphore::{self, Grants, PermitAsk};
use crate::strategy::{Hold, LockId};
use crate::support::error::{Error, Result};
use crate::support::strategy_kind::Strategy;
use crate::support::validate;

use super::admin::{LockInfo, MAX_LISTED};
use super::guard::LockGuard;
use super::locker::Locker;
use super::permits::SemaphoreGuard;

/// A counting semaphore of N permits on the lock table: at most N holders of its
/// permits at any instant, across every process and host that uses it.
///
/// Made by [`Locker::semaphore`]. Each permit is a lease of its own on the lock table
/// (an owner, an expiry on the database clock, a fencing token), kept alive by the
/// handle's watchdog like a lock's, so a crashed holder's permit comes back at its TTL
/// and a paused one loses it then. The semaphore is N rows of the table, one per
/// permit (its *slots*, on the keys `semaphore:<name>#0` to `#N-1`), never a
/// counter: no
/// sequence of releases, crashes, sweeps or retries can let N + 1 hold at once, since
/// each slot is a lease that one owner holds at a time.
///
/// - **N is fixed** by the first caller, recorded with the semaphore, and never
///   changed by sqlock: a caller naming another N gets [`Error::PermitsMismatch`]
///   before anything is granted.
/// - **k permits at once** ([`acquire_many`](Self::acquire_many)) are all-or-nothing:
///   one transaction takes k free slots or none.
/// - **No re-entry**: every acquisition takes permits of its own, also on a handle that
///   holds some already. A handle holding `n` permits of a semaphore of N waits for
///   the others' permits as anyone does.
/// - **Not fair**: a waiter polls, and the first to find enough free permits takes
///   them; a waiter for k permits may wait while waiters for fewer keep taking them.
///
/// - **One name, one holder.** The semaphore holds its name as every primitive holds
///   a name: while a permit is held, the row of the name `name` is held in shared mode
///   by permits (no owner, `semaphore` as its strategy, the permits counted, expiring
///   no sooner than any of them; [`Locker::lock_info`] shows it so), renewed with the
///   permits and freed with the last. So a lock of any strategy on `name`, a
///   multi-lock that names it, an election on it, and reads or the write side of the
///   read-write lock `name` are busy while a permit is held, and permits are busy
///   while any of those holds the name. A permit holder that dies keeps the name held
///   until its permit's expiry, and no later than the name's.
///
/// A permit is not a lock: [`Locker::acquire`] refuses the keys of permits
/// ([`Error::ReservedKey`]), and a semaphore is refused the names of those keys and of
/// a read-write lock's holds ([`Error::ReservedKey`], [`Error::ReservedMarker`]).
///
/// # When not to use it
///
/// For one holder at a time, take a lock ([`Locker::acquire`]): one statement instead
/// of a transaction, re-entrant. With
/// [presence](crate::LockerBuilder::presence) a permit records the handle's marker as
/// a lease does, and a dead holder's permit is the next acquisition's at once. Its
/// waiters are woken by a permit's release on PostgreSQL with
/// [`LockerBuilder::notify_waiters`](crate::LockerBuilder::notify_waiters), as a
/// lock's waiters are by its release.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqlock::Error> {
/// use sqlock::Locker;
/// use sqlx::sqlite::SqlitePoolOptions;
///
/// let pool = SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
/// sqlock::migrate(&pool).await?;
/// let locker = Locker::new(pool)?;
///
/// // At most two exports at once, in every process that uses "exports".
/// let exports = locker.semaphore("exports", 2);
/// let first = exports.acquire().await?;
/// let second = locker.new_handle().semaphore("exports", 2).acquire().await?;
/// assert!(exports.try_acquire().await?.is_none()); // both permits are held
/// assert!(first.release().await?);
/// assert!(exports.try_acquire().await?.is_some()); // one came back
/// # drop(second);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a semaphore does nothing until one of its acquire methods is awaited"]
pub struct Semaphore {
    shared: Arc<Handle>,
    name: String,
    permits: u32,
    ttl: Option<Duration>,
    auto_renew: Option<bool>,
    timeout: Option<Duration>,
}

impl Locker {
    /// The semaphore `name` of `permits` permits (N), on this handle: its permits are
    /// held by this handle's owner id and renewed by its watchdog. See [`Semaphore`].
    ///
    /// The name and N are checked by the calls that use them: the name as a key (1 to
    /// [`MAX_SEMAPHORE_NAME_BYTES`](crate::MAX_SEMAPHORE_NAME_BYTES) bytes, no NUL, not
    /// in the spaces kept for permits and read-write locks' holds), N from 1 to
    /// [`MAX_PERMITS`](crate::MAX_PERMITS).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let permit = locker.semaphore("video-encoders", 4).acquire().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore {
            shared: self.shared.clone(),
            name: name.to_owned(),
            permits,
            ttl: None,
            auto_renew: None,
            timeout: None,
        }
    }

    /// The semaphores recorded in this handle's table, by name (at most
    /// [`MAX_LISTED`]), each with its N and the permits held now.
    ///
    /// # Errors
    ///
    /// [`Error::MissingTable`] when the semaphores' table is missing (apply the
    /// migrations); database errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let permit = locker.semaphore("exports", 3).acquire().await?;
    /// let listed = locker.semaphores().await?;
    /// assert_eq!((listed[0].name.as_str(), listed[0].permits), ("exports", 3));
    /// assert_eq!(listed[0].holders.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn semaphores(&self) -> Result<Vec<SemaphoreInfo>> {
        let db = &self.shared.db;
        let limit = Limit(i64::try_from(MAX_LISTED).unwrap_or(i64::MAX));
        let mut listed = Vec::new();
        for (name, permits) in db.semaphore_list(&limit).await? {
            let prefix = format!("{}{name}#", validate::SEMAPHORE_KEY_PREFIX);
            let holders = db.semaphore_holders(&holders_of(&prefix, permits)).await?;
            listed.push(SemaphoreInfo {
                name,
                permits: u32::try_from(permits).unwrap_or(0),
                holders: holders.into_iter().map(LockInfo::from).collect(),
            });
        }
        Ok(listed)
    }
}

/// The slots of a semaphore of `permits`, to read its holders.
fn holders_of(prefix: &str, permits: i64) -> Slots<'_> {
    Slots {
        prefix,
        owner: "",
        permits,
        count: 0,
        ttl_us: 0,
        presence: "",
        gone: "[]",
    }
}

/// A semaphore as [`Locker::semaphores`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// Its name.
    pub name: String,
    /// N, its number of permits.
    pub permits: u32,
    /// The permits held now, by slot: each a lease on the key
    /// `semaphore:<name>#<slot>`.
    pub holders: Vec<LockInfo>,
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// N, the number of permits this caller gives the semaphore.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Each permit's lease TTL. Defaults to the handle's
    /// ([`LockerBuilder::ttl`](crate::LockerBuilder::ttl)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether the watchdog renews the permits. Defaults to the handle's
    /// ([`LockerBuilder::auto_renew`](crate::LockerBuilder::auto_renew)).
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = Some(on);
        self
    }

    /// How long [`acquire`](Self::acquire) and [`acquire_many`](Self::acquire_many)
    /// wait, as [`LockRequest::timeout`](crate::LockRequest::timeout) does. Defaults to
    /// no limit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Takes one permit if one is free, in one transaction; `Ok(None)` when all N are
    /// held, or the name is held by another primitive. Waiting versions: [`acquire`](Self::acquire),
    /// [`acquire_timeout`](Self::acquire_timeout).
    ///
    /// # Errors
    ///
    /// Bad input before any SQL is sent ([`Error::EmptyKey`], [`Error::KeyTooLong`],
    /// [`Error::KeyContainsNul`], [`Error::ReservedKey`], [`Error::ReservedMarker`] for
    /// the name, [`Error::InvalidPermits`], a TTL out of range); [`Error::PermitsMismatch`] when the semaphore is recorded with another
    /// N; [`Error::GrantExpired`] when the grant's answer took longer than its TTL (it
    /// was given back); [`Error::MissingTable`]; [`Error::Database`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the transaction runs in the caller's task, and moves to a task of
    /// its own if this future is dropped first, which gives back the permits it took.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// match locker.semaphore("crawlers", 8).try_acquire().await? {
    ///     Some(permit) => println!("crawling with permit {}", permit.fencing_token()),
    ///     None => println!("eight crawlers run already"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<SemaphoreGuard>> {
        self.try_acquire_many(1).await
    }

    /// Takes one permit, waiting for one as long as it takes, or until the semaphore's
    /// [`timeout`](Self::timeout) if it has one. Polls as a lock's wait does.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the timeout, and as [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no permit held (permits
    /// the attempt in flight took are given back).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let permit = locker.semaphore("crawlers", 8).acquire().await?;
    /// // ... crawl ...
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<SemaphoreGuard> {
        self.acquire_many(1).await
    }

    /// Takes one permit, waiting at most `timeout`: [`Error::Timeout`] then.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
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
    /// let permit = locker.semaphore("crawlers", 8).acquire_timeout(Duration::from_secs(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<SemaphoreGuard> {
        self.acquire_many_timeout(1, timeout).await
    }

    /// Takes `count` permits at once if that many are free, all or none, in one
    /// transaction; `Ok(None)` when fewer are free (nothing is taken then).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPermitCount`] for a count of 0 or above N, before any SQL is
    /// sent; and as [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`try_acquire`](Self::try_acquire).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let memory = locker.semaphore("gigabytes", 16);
    /// let small = memory.try_acquire_many(10).await?.expect("16 free");
    /// assert!(memory.try_acquire_many(7).await?.is_none()); // 6 left: none taken
    /// assert_eq!(memory.try_acquire_many(6).await?.map(|g| g.permits()), Some(6));
    /// # drop(small);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_many(&self, count: u32) -> Result<Option<SemaphoreGuard>> {
        let ask = self.ask(count)?;
        let span = self.span(&ask);
        let granted = semaphore::acquire(&self.shared, &ask, None, true)
            .instrument(span)
            .await?;
        Ok(granted.map(|g| self.guard(&ask, g)))
    }

    /// Takes `count` permits at once, all or none, waiting until that many are free,
    /// as long as it takes or until the semaphore's [`timeout`](Self::timeout).
    ///
    /// # Errors
    ///
    /// As [`try_acquire_many`](Self::try_acquire_many) and
    /// [`acquire`](Self::acquire).
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
    /// let permits = locker.semaphore("gigabytes", 16).acquire_many(4).await?;
    /// assert_eq!(permits.tokens().count(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_many(&self, count: u32) -> Result<SemaphoreGuard> {
        let deadline = self.timeout.and_then(|t| Instant::now().checked_add(t));
        self.wait(count, deadline).await
    }

    /// Takes `count` permits at once, all or none, waiting at most `timeout`:
    /// [`Error::Timeout`] then.
    ///
    /// # Errors
    ///
    /// As [`acquire_many`](Self::acquire_many).
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
    /// let memory = locker.semaphore("gigabytes", 16);
    /// let held = memory.acquire_many(12).await?;
    /// let more = memory.acquire_many_timeout(8, Duration::from_millis(50)).await;
    /// assert!(matches!(more, Err(sqlock::Error::Timeout { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_many_timeout(
        &self,
        count: u32,
        timeout: Duration,
    ) -> Result<SemaphoreGuard> {
        let deadline = Instant::now().checked_add(timeout);
        self.wait(count, deadline).await
    }

    /// The permits held now, by slot (database clock).
    ///
    /// # Errors
    ///
    /// Bad input before any SQL is sent, as [`try_acquire`](Self::try_acquire);
    /// database errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let exports = locker.semaphore("exports", 2);
    /// let permit = exports.acquire().await?;
    /// assert_eq!(exports.holders().await?[0].owner, locker.owner().to_string());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn holders(&self) -> Result<Vec<LockInfo>> {
        let prefix = validate::semaphore(&self.name, self.permits)?;
        let slots = holders_of(&prefix, i64::from(self.permits));
        let holders = self.shared.db.semaphore_holders(&slots).await?;
        Ok(holders.into_iter().map(LockInfo::from).collect())
    }

    async fn wait(&self, count: u32, deadline: Option<Instant>) -> Result<SemaphoreGuard> {
        let ask = self.ask(count)?;
        let span = self.span(&ask);
        let granted = semaphore::acquire(&self.shared, &ask, deadline, false)
            .instrument(span)
            .await?;
        let granted = granted.ok_or_else(|| Error::Timeout {
            key: ask.name.clone(),
            waited: Duration::ZERO,
        })?;
        Ok(self.guard(&ask, granted))
    }

    /// What an acquisition of `count` permits asks for, checked before any SQL.
    fn ask(&self, count: u32) -> Result<PermitAsk> {
        let prefix = validate::semaphore(&self.name, self.permits)?;
        validate::permit_count(count, self.permits)?;
        let ttl = self.ttl.unwrap_or(self.shared.settings.ttl);
        validate::ttl(ttl)?;
        Ok(PermitAsk {
            name: self.name.clone(),
            prefix,
            permits: self.permits,
            count,
            ttl,
        })
    }

    fn span(&self, ask: &PermitAsk) -> tracing::Span {
        tracing::info_span!("sqlock.acquire", key = %ask.name, strategy = "semaphore",
            owner = %self.shared.owner, table = %self.shared.db.table(),
            permits = ask.permits, count = ask.count)
    }

    /// The guard of the permits granted: a lease guard each, registered with the
    /// watchdog.
    fn guard(&self, ask: &PermitAsk, (slots, sent): Grants) -> SemaphoreGuard {
        let shared = &self.shared;
        let renewal = Renewal {
            ttl: ask.ttl,
            auto_renew: self.auto_renew.unwrap_or(shared.settings.auto_renew),
            max_hold: None,
        };
        let permits = slots
            .into_iter()
            .map(|slot| {
                let id = LockId {
                    key: slot.key,
                    strategy: Strategy::Lease,
                    token: slot.token,
                    rw_write: false,
                };
                let grant = Grant {
                    owner: shared.owner_text.clone(),
                    token: slot.token,
                    expires_us: slot.expires_us,
                    hold_count: 1,
                    strategy: Strategy::Lease.name().to_owned(),
                    presence: slot.presence,
                    holder: None,
                };
                let (hold, lost) = LeaseHold::start(shared, &id, &grant, sent, renewal);
                LockGuard::from_held(Held::new(
                    Arc::clone(shared),
                    id,
                    Hold::Lease(hold),
                    lost,
                    None,
                ))
            })
            .collect();
        SemaphoreGuard::new(ask.name.clone(), permits)
    }
}
