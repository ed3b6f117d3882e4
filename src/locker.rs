//! The handle applications hold: [`Locker`], its builder, and lock requests.
//!
//! A `Locker` wraps a sqlx pool and carries one owner id. Everything it acquires is
//! owned by that id, which is what makes its leases reentrant: a second acquisition of
//! a key the handle already holds counts a hold instead of waiting for itself.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use uuid::Uuid;

use crate::backoff::Backoff;
use crate::dialect::{DbPool, Dialect, Failure, Grant, Mode, Statements};
use crate::error::{Class, Error, Result};
use crate::for_update::{self, DbTransaction, TxHold};
use crate::guard::LockGuard;
use crate::sql::Args;
use crate::strategy::Strategy;
use crate::validate::{self, TableName};
use crate::watchdog::{LostReason, Track, Watchdog, WatchdogStats};

/// How long a lease lasts unless renewed, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The first wait between two attempts on a busy lock, by default.
pub const DEFAULT_POLL_MIN: Duration = Duration::from_millis(10);

/// The longest wait between two attempts on a busy lock, by default.
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(500);

/// The first wait between two attempts on a busy lock, by default, when releases wake
/// waiters ([`LockerBuilder::notify_waiters`]): with each wait drawn from the upper
/// half of its step, a waiter sends at most 20 statements a second.
pub const DEFAULT_NOTIFY_POLL_MIN: Duration = Duration::from_millis(100);

/// The longest wait between two attempts on a busy lock, by default, when releases
/// wake waiters ([`LockerBuilder::notify_waiters`]).
pub const DEFAULT_NOTIFY_POLL_MAX: Duration = Duration::from_secs(2);

/// How often an acquisition attempt that lost a deadlock or serialization race is
/// tried again before it counts as busy.
const CONTENTION_RETRIES: u32 = 5;

/// How often a release, extension or force release that lost a deadlock or
/// serialization race is tried again before the call gives up. These must not give up
/// easily: under `SERIALIZABLE` isolation with many pollers on one key, a release can
/// lose several races in a row, and a release that fails leaves the lock taken until
/// it expires. With the back-off below the tries span about two seconds.
const RELEASE_RETRIES: u32 = 40;

/// What every guard and request of one handle shares.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) db: DbPool,
    pub(crate) stmts: Statements,
    pub(crate) owner: Uuid,
    owner_text: String,
    ttl: Duration,
    poll_min: Duration,
    poll_max: Duration,
    auto_renew: bool,
    strategy: Strategy,
    keepalive: Duration,
    pub(crate) watchdog: Watchdog,
    /// The release listener shared by the handles of one family, when waiters are
    /// woken by notifications.
    #[cfg(feature = "postgres")]
    notifier: Option<Arc<crate::notify::Notifier>>,
    /// Whether the server is a Galera node, checked before the first for-update lock.
    galera: crate::dialect::GaleraCheck,
}

/// Ends the watchdog task with the handle: it holds the handle weakly and wakes to
/// find it gone.
impl Drop for Inner {
    fn drop(&mut self) {
        self.watchdog.wake();
    }
}

impl Inner {
    pub(crate) fn owner_text(&self) -> &str {
        &self.owner_text
    }

    /// Gives back one hold, retrying statements that lost a deadlock race.
    pub(crate) async fn release(&self, args: &Args) -> Result<bool> {
        retry_contention(|| self.db.release(&self.stmts, args)).await
    }

    /// Pushes a lease's expiry; `None` when it is no longer ours.
    pub(crate) async fn extend(&self, args: &Args) -> Result<Option<i64>> {
        retry_contention(|| self.db.lease_extend(&self.stmts, args)).await
    }
}

/// The most locks [`Locker::list`] reports.
pub const MAX_LISTED: usize = 100_000;

/// A held lock, as [`Locker::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The key.
    pub key: String,
    /// The strategy that holds it (`lease` or `insert`).
    pub strategy: String,
    /// The owner id of the holding handle.
    pub owner: String,
    /// The fencing token of the current grant.
    pub fencing_token: i64,
    /// How many reentrant holds the owner has.
    pub hold_count: u32,
    /// When the current holder took it (database clock).
    pub acquired_at: chrono::DateTime<chrono::Utc>,
    /// When it expires unless renewed (database clock).
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// How long until it expires, measured on the database clock.
    pub expires_in: Duration,
}

impl From<crate::dialect::Listed> for LockInfo {
    fn from(l: crate::dialect::Listed) -> Self {
        use crate::guard::micros_to_utc;
        Self {
            key: l.key,
            strategy: l.strategy,
            owner: l.owner,
            fencing_token: l.token,
            hold_count: u32::try_from(l.hold_count).unwrap_or(0),
            acquired_at: micros_to_utc(l.acquired_us),
            expires_at: micros_to_utc(l.expires_us),
            expires_in: Duration::from_micros(
                u64::try_from(l.expires_us.saturating_sub(l.now_us)).unwrap_or(0),
            ),
        }
    }
}

/// The longest single wait of a for-update attempt in the database.
const FOR_UPDATE_SLICE: Duration = Duration::from_secs(1);

/// How long before a deadline a for-update attempt stops waiting in the database.
const FOR_UPDATE_MARGIN: Duration = Duration::from_millis(50);

/// How often a for-update lock's connection is checked, by default.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(5);

/// Refuses a strategy the dialect cannot hold, before any SQL is sent.
fn check_strategy(strategy: Strategy, dialect: Dialect) -> Result<()> {
    if strategy == Strategy::ForUpdate && dialect == Dialect::Sqlite {
        return Err(Error::Unsupported(
            "the for-update strategy needs row locks, which SQLite does not have: use the \
             lease or insert strategy there"
                .into(),
        ));
    }
    Ok(())
}

/// Runs a statement again while it loses deadlock or serialization races (each time
/// rolled back by the server, so safe to repeat), with a jittered back-off so that
/// the retries of several losers do not collide again.
pub(crate) async fn retry_contention<T, F, Fut>(mut statement: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Failure>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(64));
    let mut tries = 0;
    loop {
        match statement().await {
            Err(f) if f.class == Class::Contention && tries < RELEASE_RETRIES => {
                tries += 1;
                tokio::time::sleep(backoff.next_delay()).await;
            }
            other => return other.map_err(Error::from),
        }
    }
}

/// A handle for taking distributed locks, built from a sqlx pool.
///
/// Each `Locker` has its own owner id (a random UUID). Locks are held by that id, so:
///
/// - two handles, in one process or in two, exclude each other;
/// - one handle is **reentrant**: acquiring a key it already holds succeeds at once,
///   counts one more hold, and needs one more release. Clones of a `Locker` share the
///   owner id, so tasks that must exclude *each other* need handles of their own:
///   [`Locker::new_handle`] makes one cheaply, on the same pool.
///
/// The default strategy is a **lease**: a row per key with an owner, the time it was
/// taken and how long it lasts. Expiry is decided by the database clock alone. A lease
/// that is not released lapses after its TTL, so a crashed holder never blocks others
/// for longer than that.
///
/// # Pool settings
///
/// Every acquisition, release and extension is one statement on one pooled connection.
/// sqlx pools ping each connection they hand out unless
/// `PoolOptions::test_before_acquire(false)` is set, which adds a round trip to each of
/// them; turn it off for lock-heavy pools. For SQLite files shared by several
/// processes, use WAL mode and a busy timeout.
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
/// sqlock::migrate(&pool.clone().into()).await?;
///
/// let locker = Locker::builder(pool).build()?;
/// let guard = locker.acquire("nightly-report").await?;
/// println!("holding {} with token {}", guard.key(), guard.fencing_token());
/// assert!(guard.release().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Locker {
    inner: Arc<Inner>,
}

/// Settings for a [`Locker`].
#[derive(Debug, Clone)]
#[must_use = "the builder does nothing itself, use .build()"]
pub struct LockerBuilder {
    db: DbPool,
    table: Option<String>,
    ttl: Duration,
    poll_min: Duration,
    poll_max: Duration,
    auto_renew: bool,
    renew_interval: Option<Duration>,
    strategy: Strategy,
    keepalive: Duration,
    poll_set: bool,
    notify_waiters: bool,
    transaction_pooling: bool,
}

impl LockerBuilder {
    /// The lock table. Defaults to `sqlock_locks`, the table the migrations create.
    ///
    /// The name is checked by [`build`](Self::build): see [`TableName`].
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = Some(name.into());
        self
    }

    /// How long a lease lasts unless extended or renewed. Defaults to 30 seconds
    /// ([`DEFAULT_TTL`]); a single request may override it with [`LockRequest::ttl`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The waits between attempts on a busy lock: the first is about `min`, each next
    /// one doubles up to `max`, with random jitter. Defaults to 10 ms and 500 ms.
    ///
    /// With [`notify_waiters`](Self::notify_waiters) on, the defaults are 100 ms and
    /// 2 s ([`DEFAULT_NOTIFY_POLL_MIN`], [`DEFAULT_NOTIFY_POLL_MAX`]) instead: a
    /// release wakes its waiters, so polling is only the fallback.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max;
        self.poll_set = true;
        self
    }

    /// Whether releases wake this handle's waiters at once through PostgreSQL's
    /// `LISTEN`/`NOTIFY`, rather than leaving them to their next poll. Defaults to
    /// `false`. PostgreSQL only.
    ///
    /// With it on, a release (and a [force release](Locker::force_release)) of a lease
    /// or insert lock that frees the key also sends `pg_notify('<table>_released',
    /// key)` in the same statement, so it stays one round trip. The handle, and the
    /// handles made from it with [`Locker::new_handle`], share one listener: it holds
    /// a connection of its own (opened like the pool's, counted outside it) from the
    /// first wait until the last of those handles is dropped. A release wakes one
    /// waiter of its key in each process, the one waiting longest, which tries again
    /// at once; the others keep waiting (only one can have the lock), so each waiter
    /// sends about one statement per release it is woken for, plus its polls.
    ///
    /// Notifications are a hint: correctness never rests on them. Waiters keep polling
    /// underneath (with longer default waits, see
    /// [`poll_interval`](Self::poll_interval)); a listener that cannot connect is
    /// logged with `tracing` and retried with back-off while waiters poll. A lease
    /// that lapses without a release announces nothing, and for-update waiters wait in
    /// the database as before. Releases from handles without this setting announce
    /// nothing either: turn it on for every handle on a table.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) refuses it with [`Error::Unsupported`] on MariaDB and
    /// SQLite, and with [`Error::InvalidSettings`] together with
    /// [`transaction_pooling`](Self::transaction_pooling) (a transaction-pooling proxy
    /// delivers notifications to whichever client holds the server connection).
    pub fn notify_waiters(mut self, on: bool) -> Self {
        self.notify_waiters = on;
        self
    }

    /// Whether the pool connects through a transaction-pooling proxy, such as
    /// PgBouncer with `pool_mode = transaction`. Defaults to `false`. PostgreSQL only.
    ///
    /// Such a proxy lends a server connection for one transaction at a time, so
    /// nothing may rest on a session: sqlx's named prepared statements end up on the
    /// wrong server connection, and so does the unnamed statement sqlx parses in one
    /// round trip and executes in the next. With this on, every statement sqlock sends
    /// is unnamed, and each runs in a transaction of its own (`BEGIN`, the statement,
    /// `COMMIT`), which keeps it on one server connection; the for-update strategy's
    /// statements run in its lock's transaction as always. Every strategy works this
    /// way. The cost: an acquisition or release takes four round trips instead of one
    /// or two.
    ///
    /// Session state sqlock never relies on: its advisory locks are transaction-scoped
    /// and its `lock_timeout` is transaction-local. Waiter wake-ups by `LISTEN` cannot
    /// work behind such a proxy, so [`notify_waiters`](Self::notify_waiters) is
    /// refused with it. The proxy must pass `extra_float_digits` (PgBouncer:
    /// `ignore_startup_parameters = extra_float_digits`). [`crate::migrate`] takes a
    /// session advisory lock: run migrations on a direct connection.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) refuses it with [`Error::Unsupported`] on MariaDB and
    /// SQLite.
    pub fn transaction_pooling(mut self, on: bool) -> Self {
        self.transaction_pooling = on;
        self
    }

    /// How the handle's locks are held in the table. Defaults to [`Strategy::Lease`];
    /// a single request may choose another with [`LockRequest::strategy`].
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// How often a held for-update lock's connection is checked with a round trip, to
    /// notice a connection the server ended and to keep an idle-in-transaction timeout
    /// from ending it. Defaults to 5 seconds ([`DEFAULT_KEEPALIVE`]).
    pub fn keepalive(mut self, every: Duration) -> Self {
        self.keepalive = every;
        self
    }

    /// Whether the watchdog keeps this handle's leases alive until they are released.
    /// Defaults to `true`; a single request may say otherwise with
    /// [`LockRequest::auto_renew`]. Without renewal a lease lapses at its TTL.
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }

    /// How often the watchdog renews leases. Defaults to a third of each lease's TTL;
    /// a value above half the TTL is taken as half the TTL.
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.renew_interval = Some(every);
        self
    }

    /// Checks the settings and makes the handle. Sends nothing to the database.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTableName`] for a bad table name, [`Error::TtlTooShort`] or
    /// [`Error::TtlTooLong`] for a TTL out of range; [`Error::Unsupported`] and
    /// [`Error::InvalidSettings`] for settings the server or each other rule out (see
    /// [`notify_waiters`](Self::notify_waiters) and
    /// [`transaction_pooling`](Self::transaction_pooling)).
    pub fn build(mut self) -> Result<Locker> {
        let table = match &self.table {
            Some(name) => TableName::new(name)?,
            None => TableName::default(),
        };
        validate::ttl(self.ttl)?;
        check_strategy(self.strategy, self.db.dialect())?;
        if self.keepalive < validate::MIN_TTL {
            return Err(Error::TtlTooShort {
                ttl: self.keepalive,
                min: validate::MIN_TTL,
            });
        }
        if let Some(every) = self.renew_interval {
            if every.is_zero() {
                return Err(Error::TtlTooShort {
                    ttl: every,
                    min: validate::MIN_TTL,
                });
            }
        }
        let dialect = self.db.dialect();
        let postgres_only = |what: &str| {
            Error::Unsupported(format!(
                "{what} is for PostgreSQL only, and this pool is {dialect}"
            ))
        };
        if self.notify_waiters && dialect != Dialect::Postgres {
            return Err(postgres_only(
                "notify_waiters (waking waiters with LISTEN/NOTIFY; elsewhere waiters poll)",
            ));
        }
        if self.transaction_pooling && dialect != Dialect::Postgres {
            return Err(postgres_only(
                "transaction_pooling (for PgBouncer and its kind)",
            ));
        }
        if self.notify_waiters && self.transaction_pooling {
            return Err(Error::InvalidSettings(
                "notify_waiters cannot work with transaction_pooling: a transaction-pooling \
                 proxy hands LISTEN's server connection to other clients, and their \
                 notifications with it; leave notify_waiters off (waiters poll)"
                    .into(),
            ));
        }
        if self.notify_waiters && !self.poll_set {
            self.poll_min = DEFAULT_NOTIFY_POLL_MIN;
            self.poll_max = DEFAULT_NOTIFY_POLL_MAX;
        }
        let mode = Mode {
            notify: self.notify_waiters,
            pinned: self.transaction_pooling,
        };
        let stmts = Statements::new(dialect, &table, mode);
        let settings = self.settings();
        #[cfg(feature = "postgres")]
        let notifier = match &self.db {
            DbPool::Postgres(pool) if self.notify_waiters => Some(Arc::new(
                crate::notify::Notifier::new(pool, table.release_channel()),
            )),
            _ => None,
        };
        let inner = Inner::new(
            self.db,
            stmts,
            &settings,
            #[cfg(feature = "postgres")]
            notifier,
        );
        Ok(Locker {
            inner: Arc::new(inner),
        })
    }

    fn settings(&self) -> Settings {
        Settings {
            ttl: self.ttl,
            poll_min: self.poll_min,
            poll_max: self.poll_max,
            auto_renew: self.auto_renew,
            renew_interval: self.renew_interval,
            strategy: self.strategy,
            keepalive: self.keepalive,
        }
    }
}

/// The settings a handle copies to the handles made from it.
#[derive(Debug, Clone, Copy)]
struct Settings {
    ttl: Duration,
    poll_min: Duration,
    poll_max: Duration,
    auto_renew: bool,
    renew_interval: Option<Duration>,
    strategy: Strategy,
    keepalive: Duration,
}

impl Inner {
    fn new(
        db: DbPool,
        stmts: Statements,
        s: &Settings,
        #[cfg(feature = "postgres")] notifier: Option<Arc<crate::notify::Notifier>>,
    ) -> Self {
        let owner = Uuid::new_v4();
        Self {
            db,
            stmts,
            owner,
            owner_text: owner.hyphenated().to_string(),
            ttl: s.ttl,
            poll_min: s.poll_min,
            poll_max: s.poll_max,
            auto_renew: s.auto_renew,
            strategy: s.strategy,
            keepalive: s.keepalive,
            watchdog: Watchdog::new(s.renew_interval),
            #[cfg(feature = "postgres")]
            notifier,
            galera: crate::dialect::GaleraCheck::new(),
        }
    }

    /// A registration for release wake-ups of `key`, when this handle has them; the
    /// for-update strategy waits in the database instead.
    #[cfg(feature = "postgres")]
    fn wakeups(&self, args: &Args) -> Option<crate::notify::Subscription> {
        if args.strategy == Strategy::ForUpdate {
            return None;
        }
        self.notifier.as_ref().map(|n| n.subscribe(&args.key))
    }

    fn settings(&self) -> Settings {
        Settings {
            ttl: self.ttl,
            poll_min: self.poll_min,
            poll_max: self.poll_max,
            auto_renew: self.auto_renew,
            renew_interval: self.watchdog.interval(),
            strategy: self.strategy,
            keepalive: self.keepalive,
        }
    }
}

impl Locker {
    /// Starts building a handle on `pool` (a `PgPool`, `MySqlPool` or `SqlitePool`).
    pub fn builder(pool: impl Into<DbPool>) -> LockerBuilder {
        LockerBuilder {
            db: pool.into(),
            table: None,
            ttl: DEFAULT_TTL,
            poll_min: DEFAULT_POLL_MIN,
            poll_max: DEFAULT_POLL_MAX,
            auto_renew: true,
            renew_interval: None,
            strategy: Strategy::Lease,
            keepalive: DEFAULT_KEEPALIVE,
            poll_set: false,
            notify_waiters: false,
            transaction_pooling: false,
        }
    }

    /// A handle with the default settings on `pool`.
    ///
    /// # Errors
    ///
    /// None with the defaults; the `Result` mirrors [`LockerBuilder::build`].
    pub fn new(pool: impl Into<DbPool>) -> Result<Self> {
        Self::builder(pool).build()
    }

    /// A new handle on the same pool, with the same settings and a new owner id.
    ///
    /// Locks taken through it exclude this handle's (no reentrancy between the two).
    pub fn new_handle(&self) -> Self {
        let i = &self.inner;
        Self {
            inner: Arc::new(Inner::new(
                i.db.clone(),
                i.stmts.clone(),
                &i.settings(),
                #[cfg(feature = "postgres")]
                i.notifier.clone(),
            )),
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// This handle's owner id, as stored in the lock rows it holds.
    pub fn owner(&self) -> Uuid {
        self.inner.owner
    }

    /// The lock table.
    pub fn table(&self) -> &TableName {
        self.inner.stmts.table()
    }

    /// The database dialect of the pool.
    pub fn dialect(&self) -> Dialect {
        self.inner.db.dialect()
    }

    /// The pool the handle runs on.
    pub fn pool(&self) -> &DbPool {
        &self.inner.db
    }

    /// Creates this handle's lock table if it does not exist, with the DDL of
    /// [`schema`](crate::schema). Meant for custom table names, tests and SQLite; for
    /// the default table prefer [`migrate`](crate::migrate).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the DDL fails.
    pub async fn create_table(&self) -> Result<()> {
        let ddl = crate::schema::schema(self.dialect(), self.table());
        Ok(self.inner.db.execute_script(ddl).await?)
    }

    /// Releases the lock on `key` whoever holds it: an operator's escape hatch for a
    /// lock whose holder is stuck. Returns whether a live lease was released.
    ///
    /// The key's fencing token moves on, so the old holder's renewals, releases and
    /// fenced writes fail from now on, and its [lost signal](LockGuard::lost) fires
    /// within one renewal period.
    ///
    /// # Errors
    ///
    /// Bad keys before any SQL is sent; database errors.
    pub async fn force_release(&self, key: &str) -> Result<bool> {
        validate::key(key)?;
        let args = Args {
            key: key.to_owned(),
            ..Args::default()
        };
        retry_contention(|| self.inner.db.lease_force_release(&self.inner.stmts, &args)).await
    }

    /// The locks held now in this handle's table, whoever holds them, ordered by key
    /// (at most [`MAX_LISTED`]). Times are the database's.
    ///
    /// # Errors
    ///
    /// [`Error::MissingTable`], [`Error::Database`].
    pub async fn list(&self) -> Result<Vec<LockInfo>> {
        let args = Args {
            limit: MAX_LISTED as i64,
            ..Args::default()
        };
        let rows = retry_contention(|| self.inner.db.list(&self.inner.stmts, &args)).await?;
        Ok(rows.into_iter().map(LockInfo::from).collect())
    }

    /// The counters of this handle's watchdog.
    pub fn watchdog_stats(&self) -> WatchdogStats {
        self.inner.watchdog.stats()
    }

    /// Runs `work` while holding the lock on `key` and releases it afterwards.
    ///
    /// `work` gets the grant's fencing token. If the lock is lost while it runs, `work`
    /// is dropped (cancelled at its next await point) and the call returns
    /// [`Error::LockLost`]; so it does when the final release finds the lock no longer
    /// ours. Waits for the lock as long as it takes; use [`LockRequest::run`] for a
    /// deadline or a TTL of its own.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`], and as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
    /// let rows = locker
    ///     .with_lock("rebuild-index", |token| async move {
    ///         // ... work that must not run twice, fenced with `token` ...
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, key: &str, work: F) -> Result<T>
    where
        F: FnOnce(i64) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        self.lock(key).run(work).await
    }

    /// A request for the lock on `key`, to set a TTL of its own before acquiring.
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
    /// use std::time::Duration;
    ///
    /// let guard = locker
    ///     .lock("invoice-42")
    ///     .ttl(Duration::from_secs(5))
    ///     .acquire_timeout(Duration::from_secs(1))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock<'a>(&'a self, key: &'a str) -> LockRequest<'a> {
        LockRequest {
            locker: self,
            key,
            ttl: None,
            auto_renew: None,
            max_hold: None,
            timeout: None,
            strategy: None,
        }
    }

    /// Takes the lock on `key` if it is free, in one attempt; `Ok(None)` when another
    /// owner holds it. See [`LockRequest::try_acquire`].
    ///
    /// # Errors
    ///
    /// Bad input (an empty or over-long key) before any SQL is sent, and database
    /// errors; see [`Error`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, a lock the attempt took is given back.
    pub async fn try_acquire(&self, key: &str) -> Result<Option<LockGuard>> {
        self.lock(key).try_acquire().await
    }

    /// Takes the lock on `key`, waiting as long as it takes. See
    /// [`LockRequest::acquire`].
    ///
    /// # Errors
    ///
    /// Bad input before any SQL is sent, and database errors; see [`Error`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, a lock the attempt in flight took is given
    /// back and no connection is kept.
    pub async fn acquire(&self, key: &str) -> Result<LockGuard> {
        self.lock(key).acquire().await
    }

    /// Takes the lock on `key`, waiting at most `timeout`. See
    /// [`LockRequest::acquire_timeout`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline; bad input before any SQL is sent; database
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, key: &str, timeout: Duration) -> Result<LockGuard> {
        self.lock(key).acquire_timeout(timeout).await
    }
}

/// A request for one lock, made by [`Locker::lock`].
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until one of its acquire methods is awaited"]
pub struct LockRequest<'a> {
    locker: &'a Locker,
    key: &'a str,
    ttl: Option<Duration>,
    auto_renew: Option<bool>,
    max_hold: Option<Duration>,
    timeout: Option<Duration>,
    strategy: Option<Strategy>,
}

impl LockRequest<'_> {
    /// The lease's TTL for this request. Defaults to the handle's
    /// ([`LockerBuilder::ttl`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How this lock is held in the table. Defaults to the handle's
    /// ([`LockerBuilder::strategy`]).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// Whether the watchdog renews this lease. Defaults to the handle's
    /// ([`LockerBuilder::auto_renew`]).
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

    /// How long [`run`](Self::run) waits for the lock. Defaults to no limit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Runs `work` while holding the lock; see [`Locker::with_lock`]. Waits for the
    /// lock as [`timeout`](Self::timeout) says.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`], [`Error::Timeout`], and as [`try_acquire`](Self::try_acquire).
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(i64) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let key = self.key.to_owned();
        let guard = match self.timeout {
            Some(t) => self.acquire_timeout(t).await?,
            None => self.acquire().await?,
        };
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
    /// [`Error::KeyContainsNul`], a TTL out of range); [`Error::MissingTable`];
    /// [`Error::Database`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement runs in a task of its own, and if this future is gone
    /// when it returns a grant, that task gives the lock back.
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        let args = self.args()?;
        let mut tries = 0;
        loop {
            match attempt(&self.locker.inner, &args, true).await {
                Ok(grant) => return Ok(grant.map(|(g, sent)| self.guard(args, g, sent))),
                Err(f) if f.class == Class::Contention && tries < CONTENTION_RETRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(u64::from(tries))).await;
                }
                Err(f) if f.class == Class::Contention => return Ok(None),
                Err(f) => return Err(f.error),
            }
        }
    }

    /// Takes the lock, waiting for it as long as it takes.
    ///
    /// Polls with capped exponential back-off and jitter (see
    /// [`LockerBuilder::poll_interval`]). [`try_acquire`](Self::try_acquire) tries once;
    /// [`acquire_timeout`](Self::acquire_timeout) gives up at a deadline.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no lock held and no
    /// connection taken (a lock the attempt in flight took is given back).
    pub async fn acquire(self) -> Result<LockGuard> {
        self.wait(None).await
    }

    /// Takes the lock, waiting at most `timeout` for it.
    ///
    /// At the deadline the call returns [`Error::Timeout`], also when an attempt is in
    /// flight then: that attempt finishes in the background and gives back what it
    /// took. A timeout shorter than one round trip (zero included) therefore always
    /// times out; use [`try_acquire`](Self::try_acquire) for a single attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], and as [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn acquire_timeout(self, timeout: Duration) -> Result<LockGuard> {
        let deadline = Instant::now().checked_add(timeout);
        self.wait(deadline).await
    }

    async fn wait(self, deadline: Option<Instant>) -> Result<LockGuard> {
        let args = self.args()?;
        let started = Instant::now();
        let timed_out = || Error::Timeout {
            key: self.key.to_owned(),
            waited: started.elapsed(),
        };
        let inner = &self.locker.inner;
        let mut backoff = Backoff::new(inner.poll_min, inner.poll_max);
        // Registered before the first attempt, so that a release announced while an
        // attempt is under way still cuts the wait after it short.
        #[cfg(feature = "postgres")]
        let wakeups = inner.wakeups(&args);
        let mut args = args;
        loop {
            // A for-update attempt waits in the database, in slices of at most a second
            // that end a little before the deadline: a caller who gives up never leaves
            // a wait behind that could take the lock after it was told it timed out.
            let slice = deadline.map_or(FOR_UPDATE_SLICE, |d| {
                d.saturating_duration_since(Instant::now())
                    .saturating_sub(FOR_UPDATE_MARGIN)
                    .min(FOR_UPDATE_SLICE)
            });
            args.wait_us = i64::try_from(slice.as_micros()).unwrap_or(i64::MAX);
            // MariaDB waits in whole seconds; shorter remainders poll without waiting.
            let nowait = args.strategy != Strategy::ForUpdate
                || slice < Duration::from_millis(1)
                || (self.locker.dialect() == Dialect::MySql && slice < FOR_UPDATE_SLICE);
            let outcome = match deadline {
                Some(d) => match tokio::time::timeout_at(d, attempt(inner, &args, nowait)).await {
                    Ok(outcome) => outcome,
                    Err(_) if self.locker.inner.db.is_exhausted() => {
                        return Err(Error::PoolExhausted)
                    }
                    Err(_) => return Err(timed_out()),
                },
                None => attempt(inner, &args, nowait).await,
            };
            match outcome {
                Ok(Some((grant, sent))) => return Ok(self.guard(args, grant, sent)),
                // The attempt waited in the database already: go again at once.
                Ok(None) if !nowait => continue,
                Ok(None) => {}
                // Lost a deadlock or serialization race: the lock is contended, wait.
                Err(f) if f.class == Class::Contention => {}
                Err(f) => return Err(f.error),
            }
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

    fn args(&self) -> Result<Args> {
        validate::key(self.key)?;
        let strategy = self.strategy.unwrap_or(self.locker.inner.strategy);
        check_strategy(strategy, self.locker.dialect())?;
        let ttl_us = validate::ttl(self.ttl.unwrap_or(self.locker.inner.ttl))?;
        Ok(Args {
            key: self.key.to_owned(),
            owner: self.locker.inner.owner_text.clone(),
            ttl_us,
            strategy,
            ..Args::default()
        })
    }

    fn guard(&self, mut args: Args, granted: Granted, sent: Instant) -> LockGuard {
        let inner = &self.locker.inner;
        let grant = match granted {
            Granted::Lease(grant) => grant,
            Granted::Tx(tx, token) => {
                args.token = token;
                let (hold, lost) = TxHold::start(tx, &inner.stmts, inner.keepalive);
                return LockGuard::new_tx(inner.clone(), args, hold, lost.into());
            }
        };
        args.token = grant.token;
        let ttl = self.ttl.unwrap_or(inner.ttl);
        let renew_until = match (self.auto_renew.unwrap_or(inner.auto_renew), self.max_hold) {
            (false, _) => Some(sent),
            // A cap too far to represent is no cap.
            (true, Some(cap)) => sent.checked_add(cap),
            (true, None) => None,
        };
        let lost = Watchdog::register(
            inner,
            &args.key,
            grant.token,
            Track {
                ttl,
                sent,
                renew_until,
            },
        );
        LockGuard::new(inner.clone(), args, grant, lost)
    }
}

/// One acquisition statement, run in a task of its own so that it is never cut off
/// half way: if the caller stops waiting (its future was dropped, or its deadline
/// passed), whatever the statement took is given back, by the task when the caller was
/// gone before the outcome was sent, or by [`Landing`] when the outcome was sent but
/// never read.
async fn attempt(
    inner: &Arc<Inner>,
    args: &Args,
    nowait: bool,
) -> Result<Option<(Granted, Instant)>, Failure> {
    let (tx, rx) = oneshot::channel();
    // The lease is valid at least until this instant plus its TTL, whenever the
    // database ran the statement: the watchdog counts from here.
    let sent = Instant::now();
    let task_inner = inner.clone();
    let task_args = args.clone();
    tokio::spawn(async move {
        let (db, stmts) = (&task_inner.db, &task_inner.stmts);
        let outcome = match task_args.strategy {
            Strategy::ForUpdate => {
                for_update::attempt(db, stmts, &task_args, nowait, &task_inner.galera)
                    .await
                    .map(|o| o.map(|(tx, token)| Granted::Tx(tx, token)))
            }
            _ => db
                .lease_acquire(stmts, &task_args, &task_inner.galera)
                .await
                .map(|o| o.map(Granted::Lease)),
        };
        if let Err(Ok(Some(granted))) = tx.send(outcome) {
            give_back(task_inner, task_args, granted).await;
        }
    });
    let mut landing = Landing {
        rx,
        inner: inner.clone(),
        args: args.clone(),
        read: false,
    };
    let outcome = (&mut landing.rx).await;
    landing.read = true;
    match outcome {
        Ok(outcome) => outcome.map(|granted| granted.map(|g| (g, sent))),
        // The task panicked: nothing was granted to us that we know of.
        Err(_) => Err(Failure {
            class: Class::Other,
            error: Error::Database(sqlx::Error::WorkerCrashed),
        }),
    }
}

/// What one attempt took.
#[derive(Debug)]
enum Granted {
    /// A lease or insert row.
    Lease(Grant),
    /// A row lock in an open transaction, with the grant's token.
    Tx(DbTransaction, i64),
}

/// The receiving end of an attempt. Dropped unread, it closes the channel (so a later
/// send fails and the task gives the grant back) and gives back a grant that was
/// already sent.
struct Landing {
    rx: oneshot::Receiver<Result<Option<Granted>, Failure>>,
    inner: Arc<Inner>,
    args: Args,
    read: bool,
}

impl Drop for Landing {
    fn drop(&mut self) {
        if self.read {
            return;
        }
        self.rx.close();
        if let Ok(Ok(Some(granted))) = self.rx.try_recv() {
            let (inner, args) = (self.inner.clone(), std::mem::take(&mut self.args));
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(give_back(inner, args, granted))),
                Err(_) => tracing::debug!(key = %args.key,
                    "acquisition abandoned outside a runtime; the lock ends at its expiry"),
            }
        }
    }
}

/// Releases a grant nobody is waiting for any more. A transaction is rolled back.
async fn give_back(inner: Arc<Inner>, mut args: Args, granted: Granted) {
    let grant = match granted {
        Granted::Lease(grant) => grant,
        Granted::Tx(tx, _) => {
            drop(tx); // sqlx rolls it back as the connection returns to the pool
            return;
        }
    };
    args.token = grant.token;
    if let Err(e) = inner.release(&args).await {
        tracing::warn!(key = %args.key, error = %e,
            "could not give back a lock taken for a caller that stopped waiting; \
             it lapses at its expiry");
    }
}
