//! [`DbTransaction`]: the open transaction of a for-update lock, as its holder sees it,
//! and what the lock does with it (check, commit, roll back) on whichever server.

use super::per_server;
use super::statement::Statement;
use super::values::Held;

/// The open transaction of a for-update lock, lent by
/// [`LockGuard::transaction`](crate::LockGuard::transaction).
///
/// Run your own statements on it; they commit with
/// [`LockGuard::commit`](crate::LockGuard::commit) (or
/// [`release`](crate::LockGuard::release)) and are rolled back with the lock otherwise.
#[derive(Debug)]
#[non_exhaustive]
pub enum DbTransaction {
    /// A PostgreSQL transaction.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    /// A MariaDB transaction.
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
}

impl DbTransaction {
    /// The PostgreSQL transaction, if this is one.
    ///
    /// Not run as a doctest: a for-update lock needs PostgreSQL or MariaDB, and the
    /// doctests have SQLite.
    ///
    /// ```no_run
    /// # async fn example(guard: sqlock::LockGuard) -> Result<(), sqlx::Error> {
    /// if let Some(mut tx) = guard.transaction().await {
    ///     if let Some(pg) = tx.as_postgres_mut() {
    ///         sqlx::query("UPDATE jobs SET done = TRUE WHERE id = 7").execute(&mut **pg).await?;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn as_postgres_mut(&mut self) -> Option<&mut sqlx::Transaction<'static, sqlx::Postgres>> {
        #[allow(unreachable_patterns)]
        match self {
            Self::Postgres(tx) => Some(tx),
            _ => None,
        }
    }

    /// The MariaDB transaction, if this is one.
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub fn as_mysql_mut(&mut self) -> Option<&mut sqlx::Transaction<'static, sqlx::MySql>> {
        #[allow(unreachable_patterns)]
        match self {
            Self::MySql(tx) => Some(tx),
            _ => None,
        }
    }

    /// Commits the transaction.
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        per_server!(
            self,
            DbTransaction {
                Postgres: "postgres",
                MySql: "mysql"
            },
            |tx| tx.commit().await
        )
    }

    /// Rolls the transaction back.
    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        per_server!(
            self,
            DbTransaction {
                Postgres: "postgres",
                MySql: "mysql"
            },
            |tx| tx.rollback().await
        )
    }

    /// Runs `check` in the transaction: whether it returned a row.
    pub(crate) async fn exists(
        &mut self,
        check: &Statement<Held<'static>>,
        held: &Held<'_>,
    ) -> Result<bool, sqlx::Error> {
        per_server!(
            *self,
            DbTransaction {
                Postgres: "postgres",
                MySql: "mysql"
            },
            |ref mut tx| check
                .bind(held)
                .fetch_optional(&mut **tx)
                .await
                .map(|row| row.is_some())
        )
    }
}
