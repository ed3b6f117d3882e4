//! The operator's calls on a lock table: what is held ([`Locker::list`], and one key
//! with [`Locker::lock_info`]) and releasing a stuck lock by force. None of them waits
//! on a lock another transaction holds. Sweeps are in `sweeping.rs`.

use std::time::Duration;

use crate::db::retry::{retry_contention, retry_failure};
use crate::db::values::{Key, Limit, Parent};
use crate::db::{Failure, Listed};
use crate::support::error::{Class, Error, Result};
use crate::support::validate;

use super::locker::Locker;

/// The most locks [`Locker::list`] reports.
pub const MAX_LISTED: usize = 100_000;

/// A held lock, as [`Locker::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The key.
    pub key: String,
    /// The strategy that holds it (`lease`, `insert` or `fair`; `write` for the write
    /// side of a [read-write lock](Locker::write_lock), a lease); for a name held in
    /// shared mode, the mode: `read` (by reads of the
    /// [read-write lock](Locker::read_lock) of that name) or `semaphore` (by permits of
    /// the [semaphore](crate::Semaphore) of that name).
    pub strategy: String,
    /// The owner id of the holding handle; empty for a name held in shared mode, whose
    /// holders are its reads or permits, each listed with its own key and owner.
    pub owner: String,
    /// The fencing token of the current grant.
    pub fencing_token: i64,
    /// How many reentrant holds the owner has: 0 while an
    /// [at-least hold](crate::LockRequest::at_least) keeps a lock its owner released.
    /// For a name held in shared mode: how many reads or permits hold it (one that
    /// died unreleased counts until the name expires).
    pub hold_count: u32,
    /// When the current holder took it (database clock); a re-entry keeps it.
    pub acquired_at: chrono::DateTime<chrono::Utc>,
    /// When it expires unless renewed (database clock).
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// How long until it expires, measured on the database clock.
    pub expires_in: Duration,
    /// How many live waiters of the fair strategy are queued for it.
    pub waiters: u64,
}

impl From<Listed> for LockInfo {
    fn from(l: Listed) -> Self {
        use crate::strategy::lease::micros_to_utc;
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
            waiters: u64::try_from(l.waiters).unwrap_or(0),
        }
    }
}

impl Locker {
    /// Releases the lock on `key` whoever holds it: an operator's escape hatch for a
    /// lock whose holder is stuck. Returns whether a live lease (or insert lock) was
    /// released.
    ///
    /// The key's fencing token moves on, so the old holder's renewals, releases and
    /// fenced writes fail from now on, and its [lost signal](crate::LockGuard::lost) fires
    /// within one renewal period.
    ///
    /// A key with [fair](crate::Strategy::Fair) waiters queued is handed to the first
    /// live one in the release's own transaction, under the key's gate: no newcomer of
    /// any strategy takes it between.
    ///
    /// A name held in shared mode (by reads of a [read-write lock](Locker::read_lock),
    /// or permits of a [semaphore](crate::Semaphore)) is released with every read and
    /// permit that holds it, in one transaction: their tokens move on, and each holder
    /// learns of it at its next renewal. The reads of a name are released with it too
    /// when the name is held as a write side (a downgrade under way). The key of one
    /// read or permit releases that hold alone, and its name counts one hold less (the
    /// last frees it).
    ///
    /// A for-update lock cannot be released this way: it is a row lock in its holder's
    /// transaction and ends with that transaction (end the holder's session to free
    /// it). The call never waits for it: it tries again for about two seconds while
    /// the key's row stays locked, then answers [`Error::RowLocked`].
    ///
    /// # Errors
    ///
    /// Bad keys before any SQL is sent; [`Error::RowLocked`]; database errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the release may or may not have happened.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool.clone().into()).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// if locker.force_release("nightly-report").await? {
    ///     println!("released a stuck lock");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_release(&self, key: &str) -> Result<bool> {
        validate::key(key)?;
        let k = Key(key);
        let db = &self.shared.db;
        let failed = |f: Failure| match f.class {
            Class::Contention => Error::RowLocked {
                key: key.to_owned(),
            },
            _ => f.error,
        };
        // One read or permit: its name counts one hold less in the same transaction.
        if let Some(name) = Parent::of(key) {
            return retry_failure(|| db.force_release_hold(&k, &name))
                .await
                .map_err(failed);
        }
        // The holds of the name in shared mode first (never the name freed while a
        // read or permit of it is live), then the name as any lock: a fair lock's
        // waiters get it next, in their order, in the release's own transaction.
        let shared = retry_failure(|| db.force_release_shared(&k))
            .await
            .map_err(failed)?;
        let released = retry_failure(|| db.force_release(&k))
            .await
            .map_err(failed)?;
        Ok(shared > 0 || released)
    }

    /// The locks held now in this handle's table, whoever holds them, ordered by key
    /// (at most [`MAX_LISTED`]). Times are the database's.
    ///
    /// # Errors
    ///
    /// [`Error::MissingTable`], [`Error::Database`].
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
    /// # sqlock::migrate(&pool.clone().into()).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// for lock in locker.list().await? {
    ///     println!("{} held by {} (token {}), {:?} left", lock.key, lock.owner,
    ///         lock.fencing_token, lock.expires_in);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list(&self) -> Result<Vec<LockInfo>> {
        let limit = Limit(i64::try_from(MAX_LISTED).unwrap_or(i64::MAX));
        let rows = retry_contention(|| self.shared.db.list(&limit)).await?;
        Ok(rows.into_iter().map(LockInfo::from).collect())
    }

    /// The lock on `key` if it is held now (a lease or insert lock, unexpired on the
    /// database clock), as [`list`](Self::list) reports it; `None` when it is free. A
    /// for-update lock is not seen: it lives in its holder's transaction.
    ///
    /// One statement, a lookup by primary key; it takes no lock.
    ///
    /// # Errors
    ///
    /// Bad keys before any SQL is sent; [`Error::MissingTable`], [`Error::Database`].
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
    /// # sqlock::migrate(&pool.clone().into()).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// match locker.lock_info("nightly-report").await? {
    ///     Some(info) => println!("held by {} for {:?} more", info.owner, info.expires_in),
    ///     None => println!("free"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_info(&self, key: &str) -> Result<Option<LockInfo>> {
        validate::key(key)?;
        let k = Key(key);
        let row = retry_contention(|| self.shared.db.lookup(&k)).await?;
        Ok(row.map(LockInfo::from))
    }
}
