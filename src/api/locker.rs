//! The handle applications hold: [`Locker`].
//!
//! A `Locker` wraps a lock table handle and carries one owner id. Everything it
//! acquires is owned by that id, which is what makes its leases reentrant: a second
//! acquisition of a key the handle already holds counts a hold instead of waiting for
//! itself. It is built by [`LockerBuilder`](crate::LockerBuilder); its acquisition
//! calls are here, made of a [`LockRequest`] each; admin calls and sweeps live in
//! `admin.rs`.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::db::{DbPool, Dialect};
use crate::keepers::watchdog::WatchdogStats;
use crate::strategy::handle::Handle;
use crate::support::error::Result;
use crate::support::validate::TableName;

use super::guard::LockGuard;
use super::request::LockRequest;

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
/// sqlock::migrate(&pool).await?;
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
    pub(crate) shared: Arc<Handle>,
}

impl Locker {
    /// A new handle on the same pool, with the same settings and a new owner id.
    ///
    /// Locks taken through it exclude this handle's (no reentrancy between the two). The
    /// handles made this way share the connections they keep outside the pool for
    /// waiting in the server and for wake locks, and their cap (see
    /// [`LockerBuilder::server_waits`](crate::LockerBuilder::server_waits)).
    pub fn new_handle(&self) -> Self {
        Self {
            shared: Arc::new(self.shared.sibling()),
        }
    }

    /// This handle's owner id, as stored in the lock rows it holds.
    pub fn owner(&self) -> Uuid {
        self.shared.owner
    }

    /// The lock table.
    pub fn table(&self) -> &TableName {
        self.shared.db.table()
    }

    /// The database dialect of the pool.
    pub fn dialect(&self) -> Dialect {
        self.shared.db.dialect()
    }

    /// The pool the handle runs on.
    pub fn pool(&self) -> &DbPool {
        &self.shared.pool
    }

    /// Creates this handle's lock table if it does not exist, with the DDL of
    /// [`schema`](crate::schema). Meant for custom table names, tests and SQLite; for
    /// the default table prefer [`migrate`](crate::migrate).
    ///
    /// # Errors
    ///
    /// [`Error::Database`](crate::Error::Database) when the DDL fails.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the DDL may or may not have run; it is idempotent, so run
    /// it again.
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
    /// let locker = Locker::builder(pool).table("job_locks").build()?;
    /// locker.create_table().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_table(&self) -> Result<()> {
        let ddl = crate::db::schema::schema(self.dialect(), self.table());
        Ok(self.shared.pool.execute_script(ddl).await?)
    }

    /// Whether presence ([`LockerBuilder::presence`](crate::LockerBuilder::presence))
    /// can work with this handle's pool and settings, whether or not it is on: `Ok`
    /// when it can. Sends at most one read (on MariaDB: whether the server is a node of
    /// a Galera cluster, asked once per handle family) and takes no marker.
    ///
    /// # Errors
    ///
    /// [`Error::PresenceUnavailable`](crate::Error::PresenceUnavailable), saying why:
    /// behind a transaction-pooling proxy, on a Galera node, on an in-memory SQLite
    /// database. A database error when the server cannot be asked.
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
    /// use sqlock::Locker;
    ///
    /// let probe = Locker::new(pool.clone())?;
    /// let presence = probe.check_presence().await.is_ok();
    /// let locker = Locker::builder(pool).presence(presence).build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_presence(&self) -> Result<()> {
        self.shared.db.presence_on_server().await
    }

    /// Whether this handle keeps a presence marker
    /// ([`LockerBuilder::presence`](crate::LockerBuilder::presence)).
    pub fn has_presence(&self) -> bool {
        self.shared.presence.is_some()
    }

    /// The counters of this handle's watchdog.
    pub fn watchdog_stats(&self) -> WatchdogStats {
        self.shared.watchdog.stats()
    }

    /// Runs `work` while holding the lock on `key` and releases it afterwards.
    ///
    /// `work` gets the grant's fencing token. If the lock is lost while it runs, `work`
    /// is dropped (cancelled at its next await point) and the call returns
    /// [`Error::LockLost`](crate::Error::LockLost); so it does when the final release finds
    /// the lock no longer
    /// ours. Waits for the lock as long as it takes; use [`LockRequest::run`] for a
    /// deadline or a TTL of its own.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost), and as [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire), while the lock is awaited. Dropped while
    /// `work` runs, the work is dropped and the lock is given back in the background, as a
    /// dropped guard is.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
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
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
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
        LockRequest::new(&self.shared, key)
    }

    /// Takes the lock on `key` if it is free, in one attempt; `Ok(None)` when another
    /// owner holds it. See [`LockRequest::try_acquire`].
    ///
    /// # Errors
    ///
    /// Bad input (an empty or over-long key) and a key this handle holds with another
    /// strategy, before any SQL is sent; a grant that came back after its TTL; database
    /// errors. See [`LockRequest::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, a lock the attempt took is given back.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// match locker.try_acquire("nightly-report").await? {
    ///     Some(guard) => {
    ///         // ... the work, fenced with guard.fencing_token() ...
    ///         guard.release().await?;
    ///     }
    ///     None => println!("another process runs it"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, key: &str) -> Result<Option<LockGuard>> {
        self.lock(key).try_acquire().await
    }

    /// Takes the lock on `key`, waiting as long as it takes. See
    /// [`LockRequest::acquire`].
    ///
    /// # Errors
    ///
    /// Bad input before any SQL is sent, and database errors; see [`Error`](crate::Error).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, a lock the attempt in flight took is given
    /// back and no connection is kept.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let guard = locker.acquire("nightly-report").await?;
    /// // ... the work ...
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, key: &str) -> Result<LockGuard> {
        self.lock(key).acquire().await
    }

    /// Takes the lock on `key`, waiting at most `timeout`. See
    /// [`LockRequest::acquire_timeout`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) at the deadline; bad input before any SQL
    /// is sent; database
    /// errors.
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
    /// match locker.acquire_timeout("nightly-report", Duration::from_secs(5)).await {
    ///     Ok(guard) => drop(guard.release().await?),
    ///     Err(sqlock::Error::Timeout { waited, .. }) => println!("still busy after {waited:?}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_timeout(&self, key: &str, timeout: Duration) -> Result<LockGuard> {
        self.lock(key).acquire_timeout(timeout).await
    }
}
