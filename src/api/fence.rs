//! Fenced writes: a holder makes its own writes conditional on still holding the lock,
//! inside its own transaction, with [`LockGuard::fence`].
//!
//! This answers the paused holder: a process that stalls past its lease (a GC pause, a
//! stopped VM) and then writes as if it still held the lock. With the check first in
//! the transaction, the check and the writes commit together, and a takeover waits for
//! that commit, so a stale holder's transaction fails instead of writing.

use crate::db::fence::{FenceConnection, FenceQuery};
use crate::strategy::handle::Handle;
use crate::strategy::LockId;
use crate::support::error::{Error, Result};
use crate::support::lost::LostReason;

use super::guard::LockGuard;

impl LockGuard {
    /// Checks, inside the holder's own transaction on `conn`, that this lock is still
    /// held (same owner, same token, unexpired on the database clock), and keeps it so
    /// until that transaction ends: put it first in a transaction whose writes must
    /// only happen under the lock. A takeover waits for the transaction (PostgreSQL
    /// `FOR SHARE`, MariaDB `LOCK IN SHARE MODE`; on SQLite a takeover that commits
    /// first makes the transaction's write fail), so a holder that was paused past its
    /// lease cannot write after losing it.
    ///
    /// Keep a fenced transaction short, well under the renewal period: its shared row
    /// lock also holds up the renewal of this lease, and of every lease the watchdog
    /// renews in the same statement, until it ends.
    ///
    /// `conn` is a connection of the same database as the lock table, of the lock's
    /// dialect: `&mut *tx` for a `sqlx::Transaction`. Not for for-update locks, whose
    /// own transaction ([`transaction`](Self::transaction)) is fenced already.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](Error::LockLost) when the lock is no longer held;
    /// [`Error::FenceNotApplicable`] for a connection of another
    /// dialect or a for-update lock; database errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the check may or may not have run on `conn`; roll that
    /// transaction back rather than commit it.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # sqlx::raw_sql("CREATE TABLE ledger (id INTEGER PRIMARY KEY, balance INTEGER); INSERT INTO ledger VALUES (1, 0)").execute(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let guard = locker.acquire("ledger-1").await?;
    /// let mut tx = pool.begin().await?;
    /// guard.fence(&mut *tx).await?; // fails, and nothing is written, if the lock was lost
    /// sqlx::query("UPDATE ledger SET balance = balance + 10 WHERE id = 1")
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Without a call, the same check can be written into the statement itself, with
    /// the key, owner and token bound: `... WHERE EXISTS (SELECT 1 FROM sqlock_locks
    /// WHERE lock_key = $1 AND lock_owner = $2 AND fencing_token = $3 AND locked AND
    /// expires_at > clock_timestamp() FOR SHARE)`.
    pub async fn fence<C: FenceConnection>(&self, conn: &mut C) -> Result<()> {
        let held = &self.held;
        check(&held.handle, &held.id, held.hold.fenceable(), conn).await
    }
}

/// The fence check of the grant `id` of `handle`, on `conn`: see [`LockGuard::fence`].
/// `fenceable`: whether the lock is a lease (or insert) lock.
pub(crate) async fn check<C: FenceConnection>(
    handle: &Handle,
    id: &LockId,
    fenceable: bool,
    conn: &mut C,
) -> Result<()> {
    let dialect = handle.db.dialect();
    if !fenceable || C::dialect() != dialect {
        return Err(Error::FenceNotApplicable {
            dialect: dialect.name(),
        });
    }
    let (fence, pinned) = handle.db.fence();
    // Unnamed behind a transaction-pooling proxy, like every statement of the handle.
    let checked = conn
        .check(FenceQuery {
            sql: fence,
            key: &id.key,
            owner: &handle.owner_text,
            token: id.token,
            persistent: !pinned,
        })
        .await;
    let held = match checked {
        Ok(held) => held,
        // The check waits two seconds at most on MariaDB: a row locked longer than
        // that is a for-update holder's, which holds only a key whose lease is not
        // live. Only the statement was rolled back, not the transaction.
        Err(e) if C::is_lock_wait_timeout(&e) => false,
        Err(e) => return Err(e.into()),
    };
    if held {
        Ok(())
    } else {
        Err(Error::LockLost {
            key: id.key.clone(),
            reason: LostReason::NotHeld,
        })
    }
}
