//! The application's pool, of whichever server: [`DbPool`], built from any sqlx pool
//! the crate supports, and what the library asks of it as a whole (its dialect,
//! whether it is exhausted, a script, the migrations).

use crate::support::error::Result;

use super::dialect::Dialect;
use super::per_server::every_server;

/// A sqlx connection pool of one of the supported databases.
///
/// Built with `From` from a `PgPool`, `MySqlPool` or `SqlitePool`, so
/// [`Locker::builder`](crate::Locker::builder) takes any of them directly. Cloning is
/// cheap: it clones the pool handle.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum DbPool {
    /// A PostgreSQL pool.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    Postgres(sqlx::PgPool),
    /// A MariaDB pool.
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    MySql(sqlx::MySqlPool),
    /// A SQLite pool.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    Sqlite(sqlx::SqlitePool),
}

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl From<sqlx::PgPool> for DbPool {
    fn from(pool: sqlx::PgPool) -> Self {
        Self::Postgres(pool)
    }
}

#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
impl From<sqlx::MySqlPool> for DbPool {
    fn from(pool: sqlx::MySqlPool) -> Self {
        Self::MySql(pool)
    }
}

#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
impl From<sqlx::SqlitePool> for DbPool {
    fn from(pool: sqlx::SqlitePool) -> Self {
        Self::Sqlite(pool)
    }
}

/// A pool by reference, as [`Locker::builder`](crate::Locker::builder) and
/// [`migrate`](crate::migrate) take it: cloned (a pool is a handle on shared
/// connections; a clone is cheap and shares them).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl From<&sqlx::PgPool> for DbPool {
    fn from(pool: &sqlx::PgPool) -> Self {
        Self::Postgres(pool.clone())
    }
}

/// A pool by reference, cloned, as for PostgreSQL's.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
impl From<&sqlx::MySqlPool> for DbPool {
    fn from(pool: &sqlx::MySqlPool) -> Self {
        Self::MySql(pool.clone())
    }
}

/// A pool by reference, cloned, as for PostgreSQL's.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
impl From<&sqlx::SqlitePool> for DbPool {
    fn from(pool: &sqlx::SqlitePool) -> Self {
        Self::Sqlite(pool.clone())
    }
}

/// A [`DbPool`] by reference, cloned.
impl From<&DbPool> for DbPool {
    fn from(pool: &DbPool) -> Self {
        pool.clone()
    }
}

impl DbPool {
    /// The pool's dialect.
    pub fn dialect(&self) -> Dialect {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => Dialect::Postgres,
            #[cfg(feature = "mysql")]
            Self::MySql(_) => Dialect::MySql,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => Dialect::Sqlite,
        }
    }

    /// Whether every connection the pool may open is open and in use.
    pub(crate) fn is_exhausted(&self) -> bool {
        every_server!(self, DbPool, |pool| pool.num_idle() == 0
            && pool.size() >= pool.options().get_max_connections())
    }

    /// Whether the pool was closed.
    pub fn is_closed(&self) -> bool {
        every_server!(self, DbPool, |pool| pool.is_closed())
    }

    /// Closes the pool: see sqlx's `Pool::close`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the pool is closed for new acquisitions at the first poll; dropping the
    /// future only stops waiting for the connections in use to come back.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// locker.pool().close().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close(&self) {
        every_server!(self, DbPool, |pool| pool.close().await)
    }

    /// Runs a script of several statements (DDL) in one go.
    pub(crate) async fn execute_script(&self, script: String) -> Result<(), sqlx::Error> {
        let script = sqlx::AssertSqlSafe(script);
        every_server!(self, DbPool, |pool| sqlx::raw_sql(script)
            .execute(pool)
            .await
            .map(drop))
    }

    /// Applies sqlock's migrations, recorded in their own history table.
    pub(crate) async fn migrate(&self, migrator: &sqlx::migrate::Migrator) -> Result<()> {
        every_server!(self, DbPool, |pool| migrator.run(pool).await?);
        Ok(())
    }
}
