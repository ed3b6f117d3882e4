//! Fenced writes: a holder makes its own writes conditional on still holding the lock,
//! inside its own transaction.
//!
//! This answers the paused holder: a process that stalls past its lease (a GC pause, a
//! stopped VM) and then writes as if it still held the lock. With
//! [`LockGuard::fence`](crate::LockGuard::fence) first in the transaction, the check
//! and the writes commit together, and a takeover waits for that commit, so a stale
//! holder's transaction fails instead of writing.

use std::future::Future;
use std::pin::Pin;

use crate::dialect::{self, Dialect};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lost::LostReason;

/// A database connection a fenced write's check can run on: `PgConnection`,
/// `MySqlConnection` or `SqliteConnection` (pass `&mut *tx` for a transaction).
///
/// Sealed: implemented by sqlock for the three connection types only.
pub trait FenceConnection: sealed::Sealed + Send {
    #[doc(hidden)]
    fn check<'a>(
        &'a mut self,
        sql: &'a str,
        key: &'a str,
        owner: &'a str,
        token: i64,
        persistent: bool,
    ) -> Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + 'a>>;

    #[doc(hidden)]
    fn dialect() -> Dialect;
}

mod sealed {
    pub trait Sealed {}
}

/// Implements [`FenceConnection`] for one sqlx connection type: the fence statement
/// binds key, owner and token, in that order, in every dialect.
macro_rules! fence_connection {
    ($feature:literal, $conn:ty, $db:ty, $dialect:expr) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for $conn {}

        #[cfg(feature = $feature)]
        impl FenceConnection for $conn {
            fn check<'a>(
                &'a mut self,
                sql: &'a str,
                key: &'a str,
                owner: &'a str,
                token: i64,
                persistent: bool,
            ) -> Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + 'a>> {
                Box::pin(async move {
                    let row = sqlx::query::<$db>(sqlx::AssertSqlSafe(sql))
                        .bind(key)
                        .bind(owner)
                        .bind(token)
                        .persistent(persistent)
                        .fetch_optional(&mut *self)
                        .await?;
                    Ok(row.is_some())
                })
            }

            fn dialect() -> Dialect {
                $dialect
            }
        }
    };
}

fence_connection!(
    "postgres",
    sqlx::PgConnection,
    sqlx::Postgres,
    Dialect::Postgres
);
fence_connection!("mysql", sqlx::MySqlConnection, sqlx::MySql, Dialect::MySql);
fence_connection!(
    "sqlite",
    sqlx::SqliteConnection,
    sqlx::Sqlite,
    Dialect::Sqlite
);

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
    /// ```no_run
    /// # async fn example(pool: sqlx::PgPool, guard: sqlock::LockGuard) -> Result<(),
    /// Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// guard.fence(&mut *tx).await?; // fails, and nothing is written, if the lock was lost
    /// sqlx::query("UPDATE ledger SET balance = balance + 10 WHERE id = 1")
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Without a call, the same check can be written into the statement itself, with
    /// the key, owner and token bound: `... WHERE EXISTS (SELECT 1 FROM sqlock_locks
    /// WHERE lock_key = $1 AND lock_owner = $2 AND fencing_token = $3 AND locked AND
    /// expires_at > clock_timestamp() FOR SHARE)`.
    pub async fn fence<C: FenceConnection>(&self, conn: &mut C) -> Result<()> {
        if !self.hold.fenceable() || C::dialect() != self.table.db.dialect() {
            return Err(Error::FenceNotApplicable {
                dialect: self.table.db.dialect().name(),
            });
        }
        let fence = &self.table.stmts.fence;
        // Unnamed behind a transaction-pooling proxy, like every statement of the handle.
        let checked = conn
            .check(
                fence.text(),
                &self.args.key,
                &self.args.owner,
                self.args.token,
                !fence.is_pinned(),
            )
            .await;
        let held = match checked {
            Ok(held) => held,
            // The check waits two seconds at most on MariaDB: a row locked longer than
            // that is a for-update holder's, which holds only a key whose lease is not
            // live. Only the statement was rolled back, not the transaction.
            Err(e) if dialect::is_lock_wait_timeout(C::dialect(), &e) => false,
            Err(e) => return Err(e.into()),
        };
        if held {
            Ok(())
        } else {
            Err(Error::LockLost {
                key: self.args.key.clone(),
                reason: LostReason::NotHeld,
            })
        }
    }
}
