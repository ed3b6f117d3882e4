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
    fn dialect() -> crate::Dialect;
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

            fn dialect() -> crate::Dialect {
                $dialect
            }
        }
    };
}

fence_connection!(
    "postgres",
    sqlx::PgConnection,
    sqlx::Postgres,
    crate::Dialect::Postgres
);
fence_connection!(
    "mysql",
    sqlx::MySqlConnection,
    sqlx::MySql,
    crate::Dialect::MySql
);
fence_connection!(
    "sqlite",
    sqlx::SqliteConnection,
    sqlx::Sqlite,
    crate::Dialect::Sqlite
);
