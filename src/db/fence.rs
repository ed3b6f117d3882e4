//! Fenced writes, at the connection: the sealed [`FenceConnection`] trait, through which
//! [`LockGuard::fence`](crate::LockGuard::fence) runs its check on the holder's own
//! connection or transaction, of whichever server.
//!
//! Each server's backend implements it for its connection type (`fence_connection!`
//! in `postgres.rs`, `mysql.rs`, `sqlite.rs`).

use std::future::Future;
use std::pin::Pin;

use super::dialect::Dialect;

/// A database connection a fenced write's check can run on: `PgConnection`,
/// `MySqlConnection` or `SqliteConnection` (pass `&mut *tx` for a transaction).
///
/// Sealed: implemented by sqlock for the three connection types only.
pub trait FenceConnection: sealed::Sealed + Send {
    #[doc(hidden)]
    fn check<'a>(&'a mut self, query: FenceQuery<'a>) -> FenceCheck<'a>;

    #[doc(hidden)]
    fn dialect() -> Dialect;

    /// Whether `e` is a lock wait that ran out, which rolls back the check alone, not
    /// the holder's transaction.
    #[doc(hidden)]
    fn is_lock_wait_timeout(e: &sqlx::Error) -> bool;
}

/// The fence statement and what it binds: key, owner and token, in that order, in every
/// dialect; unnamed (not `persistent`) behind a transaction-pooling proxy.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct FenceQuery<'a> {
    pub(crate) sql: &'a str,
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) token: i64,
    pub(crate) persistent: bool,
}

/// The check's answer to come: whether the lock is still held.
#[doc(hidden)]
pub type FenceCheck<'a> = Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + 'a>>;

pub(super) mod sealed {
    pub trait Sealed {}
}

/// Implements [`FenceConnection`] for a server's connection type `$conn`, with its
/// backend `$backend`, there with the crate's feature `$feature`.
macro_rules! fence_connection {
    ($conn:ty, $backend:ty, $feature:literal) => {
        impl $crate::db::fence::sealed::Sealed for $conn {}

        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl $crate::db::fence::FenceConnection for $conn {
            fn check<'a>(
                &'a mut self,
                q: $crate::db::fence::FenceQuery<'a>,
            ) -> $crate::db::fence::FenceCheck<'a> {
                type Db = <$backend as $crate::db::backend::Backend>::Db;
                Box::pin(async move {
                    let row = sqlx::query::<Db>(sqlx::AssertSqlSafe(q.sql))
                        .bind(q.key)
                        .bind(q.owner)
                        .bind(q.token)
                        .persistent(q.persistent)
                        .fetch_optional(&mut *self)
                        .await?;
                    Ok(row.is_some())
                })
            }

            fn dialect() -> $crate::db::dialect::Dialect {
                <$backend as $crate::db::backend::Backend>::DIALECT
            }

            fn is_lock_wait_timeout(e: &sqlx::Error) -> bool {
                <$backend as $crate::db::backend::Backend>::is_lock_wait_timeout(e)
            }
        }
    };
}
pub(crate) use fence_connection;
