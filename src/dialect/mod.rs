//! The thin layer between the strategies and the three database servers.
//!
//! A dialect supplies its statements (from `sql/<dialect>/`), runs them on its own
//! sqlx pool type, reads the results back into the shapes the strategies use, and
//! classifies its errors. Everything else (validation, waiting, guards) is written
//! once, above this layer.

mod kind;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
mod runner;
mod scheduler;
#[cfg(feature = "sqlite")]
mod sqlite;
mod statements;

mod outcome;

pub use kind::Dialect;
pub(crate) use outcome::{Failure, Grant, Listed, Renewal};
pub(crate) use runner::{checked_out, noting_checkout, Runner};
pub(crate) use scheduler::{Scheduler, SchedulerStatements};
pub(crate) use statements::{ForUpdateStatements, Mode, Statements};

use crate::error::{Class, Result};
use crate::sql::Args;

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
    Postgres(sqlx::PgPool),
    /// A MariaDB pool.
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
    /// A SQLite pool.
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
}

#[cfg(feature = "postgres")]
impl From<sqlx::PgPool> for DbPool {
    fn from(pool: sqlx::PgPool) -> Self {
        Self::Postgres(pool)
    }
}

#[cfg(feature = "mysql")]
impl From<sqlx::MySqlPool> for DbPool {
    fn from(pool: sqlx::MySqlPool) -> Self {
        Self::MySql(pool)
    }
}

#[cfg(feature = "sqlite")]
impl From<sqlx::SqlitePool> for DbPool {
    fn from(pool: sqlx::SqlitePool) -> Self {
        Self::Sqlite(pool)
    }
}

/// Runs `$body` with `$pool` bound to the concrete pool and `$dialect` to its module.
macro_rules! dispatch {
    ($db:expr, |$pool:ident, $m:ident| $body:expr) => {
        match $db {
            #[cfg(feature = "postgres")]
            DbPool::Postgres($pool) => {
                #[allow(unused_imports)]
                use self::postgres as $m;
                $body
            }
            #[cfg(feature = "mysql")]
            DbPool::MySql($pool) => {
                #[allow(unused_imports)]
                use self::mysql as $m;
                $body
            }
            #[cfg(feature = "sqlite")]
            DbPool::Sqlite($pool) => {
                #[allow(unused_imports)]
                use self::sqlite as $m;
                $body
            }
        }
    };
}

impl DbPool {
    /// The pool's dialect.
    pub fn dialect(&self) -> Dialect {
        dispatch!(self, |_pool, m| m::DIALECT)
    }

    /// Whether every connection the pool may open is open and in use.
    pub(crate) fn is_exhausted(&self) -> bool {
        dispatch!(self, |pool, _m| pool.num_idle() == 0
            && pool.size() >= pool.options().get_max_connections())
    }

    /// Whether the pool was closed.
    pub fn is_closed(&self) -> bool {
        dispatch!(self, |pool, _m| pool.is_closed())
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
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) {
    /// locker.pool().close().await;
    /// # }
    /// ```
    pub async fn close(&self) {
        dispatch!(self, |pool, _m| pool.close().await)
    }

    /// Runs a script of several statements (DDL) in one go.
    pub(crate) async fn execute_script(&self, script: String) -> Result<(), sqlx::Error> {
        let script = sqlx::AssertSqlSafe(script);
        dispatch!(self, |pool, _m| sqlx::raw_sql(script)
            .execute(pool)
            .await
            .map(drop))
    }

    /// Applies sqlock's migrations, recorded in their own history table.
    pub(crate) async fn migrate(&self, migrator: &sqlx::migrate::Migrator) -> Result<()> {
        dispatch!(self, |pool, _m| migrator.run(pool).await?);
        Ok(())
    }

    /// Runs the acquisition statement. On a node of a Galera cluster it runs in an
    /// explicit transaction (see [`galera_cluster_size`](Self::galera_cluster_size)).
    pub(crate) async fn lease_acquire(
        &self,
        s: &Statements,
        a: &Args,
        galera: &GaleraCheck,
    ) -> Result<Option<Grant>, Failure> {
        // Galera certifies an autocommit statement at its COMMIT, after MariaDB has sent
        // the RETURNING row; sqlx cannot read an error that follows rows. In an explicit
        // transaction the certification failure is the COMMIT's own error instead.
        let in_tx =
            s.lease_acquire.is_pinned() || self.galera_cluster_size(s, galera).await?.is_some();
        // MariaDB answers no row at all when the key's fence bucket was in use by
        // another statement (see lease_acquire.sql): sent again after a pause, for a
        // second at most, as the bucket is held for one statement only.
        let mut backoff = crate::backoff::Backoff::new(
            std::time::Duration::from_millis(1),
            std::time::Duration::from_millis(16),
        );
        let mut tries = 0;
        let grants = loop {
            let grants = dispatch!(self, |pool, m| Runner::fetch_grants(
                pool,
                &s.lease_acquire,
                a,
                in_tx
            )
            .await
            .map_err(|e| s.error(m::classify(&e), e))?);
            tries += 1;
            if !grants.is_empty() || self.dialect() != Dialect::MySql || tries >= BUCKET_TRIES {
                break grants;
            }
            tokio::time::sleep(backoff.next_delay()).await;
        };
        let Some(grant) = grants.into_iter().next() else {
            return Ok(None);
        };
        if grant.gate_closed() {
            return Err(Failure::row_locked(Class::Contention, &a.key));
        }
        if grant.owner != a.owner {
            return Ok(None);
        }
        if grant.strategy != a.strategy {
            // Ours, held with the other strategy, and left as it was (MariaDB answers
            // the row as it stands; the others answer nothing then).
            return Err(Failure {
                class: Class::Other,
                error: crate::error::Error::StrategyConflict {
                    key: a.key.clone(),
                    held: grant.strategy.parse().unwrap_or_default(),
                    requested: a.strategy.parse().unwrap_or_default(),
                },
            });
        }
        Ok(Some(grant))
    }

    /// The size of the Galera cluster the server is a node of, when it is one of
    /// several; `None` for a server on its own and for other dialects. Asked once per
    /// handle (the answer is kept in `galera`).
    pub(crate) async fn galera_cluster_size(
        &self,
        s: &Statements,
        galera: &GaleraCheck,
    ) -> Result<Option<i64>, Failure> {
        match self {
            #[cfg(feature = "mysql")]
            Self::MySql(pool) => galera
                .get_or_try_init(|| mysql::galera_cluster_size(pool, s))
                .await
                .copied(),
            #[allow(unreachable_patterns)]
            _ => {
                let _ = (s, galera);
                Ok(None)
            }
        }
    }

    /// Gives back one hold; with `delete_row` (the insert strategy) the last hold
    /// deletes the row, otherwise the row stays, free.
    ///
    /// On MariaDB a release waits a second at most on a row lock (the row of a lease
    /// that lapsed may be a for-update holder's for a whole transaction): when the row
    /// stays locked, a read that waits on nothing tells a lease that is gone (`false`)
    /// from a short lock (contention, tried again by the caller).
    pub(crate) async fn release(
        &self,
        s: &Statements,
        a: &Args,
        delete_row: bool,
    ) -> Result<bool, Failure> {
        let outcome = async {
            if delete_row && self.matched(s, &s.insert_release, a).await? {
                return Ok(true);
            }
            self.matched(s, &s.lease_release, a).await
        }
        .await;
        match outcome {
            Err(f) if f.class == Class::Contention && !self.still_held(s, a).await? => Ok(false),
            other => other,
        }
    }

    /// After a release or extension found its row locked (MariaDB, which is told not to
    /// wait): whether the lease is still ours, by a read that waits on no row lock.
    /// `true` where the dialect has no such read.
    async fn still_held(&self, s: &Statements, a: &Args) -> Result<bool, Failure> {
        let Some(held) = &s.lease_held else {
            return Ok(true);
        };
        dispatch!(self, |pool, m| Runner::fetch_i64s(pool, held, a)
            .await
            .map(|rows| !rows.is_empty())
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    /// Runs `st` and tells whether it matched a row.
    async fn matched(
        &self,
        s: &Statements,
        st: &crate::sql::Statement,
        a: &Args,
    ) -> Result<bool, Failure> {
        dispatch!(self, |pool, m| Runner::execute(pool, st, a)
            .await
            .map(|rows| rows > 0)
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    /// Renews the leases of `batch` (also in `a.batch`) in one statement (two or three
    /// on MariaDB when some were lost).
    pub(crate) async fn lease_renew(
        &self,
        s: &Statements,
        a: &Args,
        batch: &[(String, i64)],
    ) -> Result<Renewal, Failure> {
        dispatch!(self, |pool, m| m::lease_renew(pool, s, a, batch)
            .await
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    /// An operator's release: whether a live lease was released. A key whose row (or,
    /// on PostgreSQL, whose advisory gate) another transaction holds fails with
    /// contention at once, never waiting for it.
    pub(crate) async fn lease_force_release(
        &self,
        s: &Statements,
        a: &Args,
    ) -> Result<bool, Failure> {
        dispatch!(self, |pool, m| m::lease_force_release(pool, s, a)
            .await
            .map_err(|e| s.error(m::classify(&e), e))?)
        .ok_or_else(|| Failure::row_locked(Class::Contention, &a.key))
    }

    /// The locks held now, by key (at most `a.limit`).
    pub(crate) async fn list(&self, s: &Statements, a: &Args) -> Result<Vec<Listed>, Failure> {
        dispatch!(self, |pool, m| Runner::fetch_listed(pool, &s.list, a)
            .await
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    /// The lock on `a.key`, when it is held now.
    pub(crate) async fn lookup(&self, s: &Statements, a: &Args) -> Result<Option<Listed>, Failure> {
        dispatch!(self, |pool, m| Runner::fetch_listed(pool, &s.lookup, a)
            .await
            .map(|rows| rows.into_iter().next())
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    /// One batch of the sweep; rows another transaction holds are passed over.
    pub(crate) async fn sweep(&self, s: &Statements, a: &Args) -> Result<u64, Failure> {
        dispatch!(self, |pool, m| m::sweep(pool, s, a)
            .await
            .map_err(|e| s.error(m::classify(&e), e)))
    }

    /// Pushes a lease's expiry; `None` when it is no longer ours. Waits a second at most
    /// on a row lock on MariaDB, as [`release`](Self::release).
    pub(crate) async fn lease_extend(
        &self,
        s: &Statements,
        a: &Args,
    ) -> Result<Option<i64>, Failure> {
        let outcome = dispatch!(self, |pool, m| Runner::fetch_value(
            pool,
            &s.lease_extend,
            a
        )
        .await
        .map_err(|e| s.error(m::classify(&e), e)));
        match outcome {
            Err(f) if f.class == Class::Contention && !self.still_held(s, a).await? => Ok(None),
            other => other,
        }
    }
}

/// How often MariaDB's acquisition is sent while the key's fence bucket is in use by
/// another statement: with pauses of at most 16 ms, about a second.
const BUCKET_TRIES: u32 = 70;

/// The outcome of a handle's check for a Galera cluster: the cluster's size, or `None`
/// for a server on its own. Made once, before the handle's first acquisition.
pub(crate) type GaleraCheck = tokio::sync::OnceCell<Option<i64>>;

/// Sorts a database error of `dialect`: whether the caller may retry it.
pub(crate) fn classify(dialect: Dialect, e: &sqlx::Error) -> Class {
    match dialect {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => postgres::classify(e),
        #[cfg(feature = "mysql")]
        Dialect::MySql => mysql::classify(e),
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => sqlite::classify(e),
        #[allow(unreachable_patterns)]
        _ => Class::Other,
    }
}

/// One sweep batch as one statement, where the dialect's DELETE can skip locked rows.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
async fn sweep_in_one<DB: Runner>(
    pool: &sqlx::Pool<DB>,
    s: &Statements,
    a: &Args,
) -> Result<u64, sqlx::Error> {
    DB::execute(pool, &s.sweep, a).await
}

/// A batched renewal in one statement whose `RETURNING` names the survivors.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
async fn renew_returning<DB: Runner>(
    pool: &sqlx::Pool<DB>,
    s: &Statements,
    a: &Args,
) -> Result<Renewal, sqlx::Error> {
    Ok(Renewal {
        survivors: Some(DB::fetch_strings(pool, &s.lease_renew, a).await?),
        statements: 1,
    })
}

/// Whether `e` is a lock wait that ran out (MariaDB's ER_LOCK_WAIT_TIMEOUT or
/// ER_LOCK_NOWAIT), which rolls back the statement but not its transaction.
pub(crate) fn is_lock_wait_timeout(dialect: Dialect, e: &sqlx::Error) -> bool {
    match dialect {
        #[cfg(feature = "mysql")]
        Dialect::MySql => mysql::is_lock_wait_timeout(e),
        _ => {
            let _ = e;
            false
        }
    }
}
