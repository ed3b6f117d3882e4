//! [`SemaphoreGuard`]: the permits one acquisition of a [`Semaphore`](crate::Semaphore)
//! took, each a lease held as a [`LockGuard`] holds one, with one lost signal for the
//! set.

use chrono::{DateTime, Utc};

use crate::db::fence::FenceConnection;
use crate::support::error::Result;
use crate::support::lost::{LostReason, LostSignal};

use super::guard::LockGuard;
use super::guard_set::GuardSet;

/// Permits of a [`Semaphore`](crate::Semaphore), taken at once by one acquisition.
///
/// Each permit is a lease with the guarantees of a [`LockGuard`]'s: renewed by the
/// handle's watchdog, a fencing token of its own, released only by its owner. While
/// the guard is held and not [lost](Self::lost), its permits count towards N and no
/// one else holds them, and the semaphore's name is held in shared mode by permits:
/// busy for every other primitive. The release of the last permit of the name frees
/// it.
///
/// # Dropping
///
/// Dropping the guard releases its permits in the background, as dropping a
/// `LockGuard` does (on the runtime the permits were taken on, even outside of one);
/// their renewal stops at once. Call [`release`](Self::release) to know whether they
/// were still held.
#[derive(Debug)]
#[must_use = "if unused the permits are given back at once"]
pub struct SemaphoreGuard {
    name: String,
    /// One lease guard per permit, by slot.
    permits: GuardSet,
}

impl SemaphoreGuard {
    /// The guard of `permits` (one at least) of the semaphore `name`.
    pub(crate) fn new(name: String, permits: Vec<LockGuard>) -> Self {
        Self {
            name,
            permits: GuardSet::new(permits),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits the guard holds (of the semaphore's
    /// [`permits`](crate::Semaphore::permits)).
    pub fn permits(&self) -> u32 {
        u32::try_from(self.permits.guards().len()).unwrap_or(u32::MAX)
    }

    /// The highest fencing token of the guard's permits: the one to fence with when
    /// the guard holds one permit.
    ///
    /// Each permit has a token of its own, which only grows from one grant of its slot
    /// to the next (on PostgreSQL and MariaDB every grant of the table draws a higher
    /// token than the grants before it, across the semaphore's slots too). A resource
    /// that fences the semaphore's holders keeps the last token it saw per slot
    /// ([`tokens`](Self::tokens)).
    pub fn fencing_token(&self) -> i64 {
        self.tokens().map(|(_, token)| token).max().unwrap_or(0)
    }

    /// Each permit's slot key (`semaphore:<name>#<slot>`) with its fencing token, by
    /// slot, as [`MultiLockGuard::tokens`](crate::MultiLockGuard::tokens) gives each
    /// key's.
    pub fn tokens(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        self.permits.tokens()
    }

    /// The keys of the permits' slots (`semaphore:<name>#<slot>`), by slot.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.permits.keys()
    }

    /// When the first of the permits expires unless renewed (database clock).
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.permits.expires_at()
    }

    /// A signal that fires when any of the permits is lost (its lease no longer this
    /// owner's, or renewals failing until it may have lapsed), with the first reason.
    /// The permits left are still held until the guard is released or dropped.
    pub fn lost(&self) -> LostSignal {
        self.permits.lost()
    }

    /// Whether any of the permits was lost. Cheap: sends nothing.
    pub fn is_lost(&self) -> bool {
        self.permits.is_lost()
    }

    /// Why a permit was lost, if one was. Cheap: sends nothing.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.permits.lost_reason()
    }

    /// Checks, inside the holder's own transaction on `conn`, that every permit of the
    /// guard is still held (same owner, same token, unexpired on the database clock),
    /// and keeps them so until that transaction ends, exactly as
    /// [`LockGuard::fence`] does for a lock: put it first in a transaction whose writes
    /// must only happen while the permits are held. A resource fenced per slot keeps
    /// the last token it saw for each of [`keys`](Self::keys).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost) when a permit is no longer held;
    /// [`Error::FenceNotApplicable`](crate::Error::FenceNotApplicable) for a connection of another dialect; database
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the checks may or may not have run on `conn`; roll that
    /// transaction back rather than commit it.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # sqlx::raw_sql("CREATE TABLE exports (slot TEXT PRIMARY KEY, runs INTEGER)").execute(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let permit = locker.semaphore("exports", 4).acquire().await?;
    /// let mut tx = pool.begin().await?;
    /// permit.fence(&mut *tx).await?; // fails, and nothing is written, if the permit was lost
    /// sqlx::query("INSERT INTO exports (slot, runs) VALUES (?, 1)")
    ///     .bind(permit.keys().next())
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?;
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fence<C: FenceConnection>(&self, conn: &mut C) -> Result<()> {
        self.permits.fence(conn).await
    }

    /// Gives the permits back: whether every one of them was still this owner's. A
    /// permit that was lost (taken by another owner after it lapsed) is left to its
    /// holder: a release checks owner and token.
    ///
    /// # Errors
    ///
    /// Database errors; every permit's release is attempted even when one fails (a
    /// permit whose release failed lapses at its expiry), and the first error is
    /// reported.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the releases run in a task of their own, and finish in the
    /// background if the future is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let permits = locker.semaphore("exports", 4).acquire_many(2).await?;
    /// assert!(permits.release().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<bool> {
        self.permits.release().await
    }
}
