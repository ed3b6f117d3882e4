//! The database layer: one backend per server behind the traits of `backend.rs`, the
//! statements of `sql/` rendered and typed, the schema and its migrations.
//!
//! This layer knows no strategy and no handle: it runs statements and reports what
//! they found, sorted by whether the caller may retry. The servers are told apart in
//! one place, [`per_server!`], by the enums over them: [`DbPool`] (the application's
//! pool), [`Db`] (a handle's backend) and [`DbTransaction`] (a for-update lock's
//! transaction).

// Built with SQLite alone, the parts for the servers (row locks, schedulers) go unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_variables, unused_imports, unused_macros)
)]

pub(crate) mod backend;
mod dialect;
pub(crate) mod durability;
pub(crate) mod fair;
pub(crate) mod fence;
#[cfg(feature = "sqlite")]
pub(crate) mod marker_file;
pub(crate) mod multi;
#[cfg(feature = "mysql")]
mod mysql;
mod outcome;
mod per_server;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod presence;
pub(crate) mod rendered;
pub(crate) mod retry;
pub(crate) mod revoke;
pub(crate) mod runner;
pub(crate) mod rw;
pub(crate) mod scheduling;
pub(crate) mod schema;
pub(crate) mod semaphore;
pub(crate) mod shared;
#[cfg(feature = "sqlite")]
mod sqlite;
pub(crate) mod statement;
pub(crate) mod transaction;
pub(crate) mod values;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use dialect::Dialect;
pub(crate) use outcome::{Elected, Failure, Grant, Listed, Renewal};
pub(crate) use per_server::per_server;
pub(crate) use runner::noting_checkout;
pub use transaction::DbTransaction;

use crate::support::error::{Class, Result};
use crate::support::validate::TableName;

use backend::{Backend, RowLocks};
use fair::Standing;
use scheduling::{schedule, unschedule};
use statement::Mode;
use values::{
    Acquire, Claim, Extend, Held, Key, Limit, Parent, Permits, Place, Release, Renew, Schedule,
    Slots, Sweep,
};

/// Every server's variant, for [`per_server!`] over [`DbPool`] and [`Db`].
macro_rules! every_server {
    ($value:expr, $ty:ident, |$x:ident| $body:expr) => {
        per_server!(
            $value,
            $ty {
                Postgres: "postgres",
                MySql: "mysql",
                Sqlite: "sqlite"
            },
            |$x| $body
        )
    };
}

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
    /// # sqlock::migrate(&pool.clone().into()).await?;
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

/// A handle's backend: its server's type, with the pool and the statements rendered for
/// its table. Cloning is cheap.
#[derive(Debug, Clone)]
pub(crate) enum Db {
    #[cfg(feature = "postgres")]
    Postgres(Arc<postgres::Postgres>),
    #[cfg(feature = "mysql")]
    MySql(Arc<mysql::MariaDb>),
    #[cfg(feature = "sqlite")]
    Sqlite(Arc<sqlite::Sqlite>),
}

/// Runs `$body` with `$b` bound to the backend, and its `sqlx::Error` made a
/// [`Failure`] by that backend.
macro_rules! on_backend {
    ($db:expr, |$b:ident| $body:expr) => {
        every_server!($db, Db, |$b| $body.map_err(|e| $b.failure(e)))
    };
}

impl Db {
    /// The backend of `pool`'s server for `table`.
    pub(crate) fn new(pool: &DbPool, table: &TableName, mode: Mode) -> Self {
        match pool {
            #[cfg(feature = "postgres")]
            DbPool::Postgres(p) => {
                Self::Postgres(Arc::new(postgres::Postgres::new(p.clone(), table, mode)))
            }
            #[cfg(feature = "mysql")]
            DbPool::MySql(p) => Self::MySql(Arc::new(mysql::MariaDb::new(p.clone(), table, mode))),
            #[cfg(feature = "sqlite")]
            DbPool::Sqlite(p) => {
                Self::Sqlite(Arc::new(sqlite::Sqlite::new(p.clone(), table, mode)))
            }
        }
    }

    /// The server family.
    pub(crate) fn dialect(&self) -> Dialect {
        every_server!(self, Db, |b| dialect_of(&**b))
    }

    /// The lock table's name.
    pub(crate) fn table(&self) -> &TableName {
        every_server!(self, Db, |b| b.table())
    }

    /// The fence statement, as [`FenceConnection`](fence::FenceConnection) sends it:
    /// its text, and whether it is sent unnamed (transaction pooling).
    pub(crate) fn fence(&self) -> (&str, bool) {
        every_server!(self, Db, |b| {
            let s = &b.common().fence;
            (s.text(), s.is_pinned())
        })
    }

    pub(crate) async fn lease_acquire(&self, a: &Acquire<'_>) -> Result<Vec<Grant>, Failure> {
        on_backend!(self, |b| b.lease_acquire(a).await)
    }

    /// A multi-lock's attempt: every key of `all` (sorted, distinct), or none
    /// (`multi.rs`).
    pub(crate) async fn lease_acquire_all(
        &self,
        all: &values::AcquireAll<'_>,
    ) -> Result<multi::Taken, Failure> {
        on_backend!(self, |b| multi::acquire(&**b, all).await)
    }

    /// A read hold of a read-write lock (`rw.rs`).
    pub(crate) async fn rw_read(&self, a: &Acquire<'_>) -> Result<rw::Read, Failure> {
        on_backend!(self, |b| rw::read(&**b, a).await)
    }

    /// A hold of a name in shared mode (a read, a permit) gives back one hold, and its
    /// last counts the name one hold less (`shared.rs`): whether it was still ours.
    pub(crate) async fn shared_release(
        &self,
        h: &Held<'_>,
        name: &Parent<'_>,
    ) -> Result<bool, Failure> {
        on_backend!(self, |b| shared::release(&**b, h, name).await)
    }

    /// The write side of a read-write lock gives back one hold, and its last leaves
    /// the name to the owner's own read, if the table shows one live, or frees it, in
    /// one statement (`rw_release.sql`): whether it was still ours.
    pub(crate) async fn rw_release_write(&self, h: &Held<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b.matched(&b.common().rw.release, h).await)
    }

    /// An operator's release of the holds of a name in shared mode (`shared.rs`): how
    /// many rows were released. A gate in use is contention.
    pub(crate) async fn force_release_shared(&self, k: &Key<'_>) -> Result<u64, Failure> {
        on_backend!(self, |b| shared::force_name(&**b, k).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, k.0))
    }

    /// An operator's release of one hold in shared mode, its name counted one hold less
    /// (`shared.rs`): whether a live hold was released.
    pub(crate) async fn force_release_hold(
        &self,
        k: &Key<'_>,
        name: &Parent<'_>,
    ) -> Result<bool, Failure> {
        on_backend!(self, |b| shared::force_hold(&**b, k, name).await)
    }

    /// The insert strategy's release of its last hold: whether it deleted the row.
    pub(crate) async fn insert_release(&self, h: &Held<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b.matched(&b.common().insert_release, h).await)
    }

    /// A lease's release of one hold: whether it was still ours.
    pub(crate) async fn lease_release(&self, h: &Held<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b.matched(&b.common().lease_release, h).await)
    }

    /// The insert strategy's release of its last hold, once its at-least hold is over:
    /// whether it deleted the row.
    pub(crate) async fn insert_release_at_least(&self, r: &Release<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b
            .matched(&b.common().insert_release_at_least, r)
            .await)
    }

    /// A release of one hold of a lock taken with an at-least hold: whether it was
    /// still ours. The last hold keeps the row until the at-least hold ends.
    pub(crate) async fn lease_release_at_least(&self, r: &Release<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b
            .matched(&b.common().lease_release_at_least, r)
            .await)
    }

    /// After a release or an extension met a locked row: whether the lease is still
    /// ours, by a read that waits on nothing.
    pub(crate) async fn still_held(&self, h: &Held<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b.still_held(h).await)
    }

    /// Extends a lease; a hold of a name in shared mode pushes its name first, in the
    /// same transaction (`shared.rs`), so that the name never expires before it.
    pub(crate) async fn lease_extend(&self, e: &Extend<'_>) -> Result<Option<i64>, Failure> {
        match Parent::of(e.held.key) {
            Some(name) => on_backend!(self, |b| shared::extend(&**b, e, name.key).await),
            None => on_backend!(self, |b| b.lease_extend(e).await),
        }
    }

    pub(crate) async fn lease_renew(
        &self,
        r: &Renew<'_>,
        batch: &[(String, i64)],
    ) -> Result<Renewal, Failure> {
        on_backend!(self, |b| b.lease_renew(r, batch).await)
    }

    /// An operator's revocation of the lock on `k` (`revoke.rs`; with `hold`, `k` is one
    /// read or permit): how many holds were revoked, and the lock as it now stands. A
    /// key whose gate or row another transaction holds fails with contention at once,
    /// never waiting for it.
    pub(crate) async fn revoke(&self, k: &Key<'_>, hold: bool) -> Result<revoke::Revoked, Failure> {
        on_backend!(self, |b| revoke::revoke(&**b, k, hold).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, k.0))
    }

    /// Which leases of `r.batch`, found lost by a renewal, were revoked by an operator
    /// (`lease_revoked.sql`): their keys.
    pub(crate) async fn lease_revoked(&self, r: &Renew<'_>) -> Result<Vec<String>, Failure> {
        on_backend!(self, |b| runner::texts(
            runner::On::Pool(b.pool(), false),
            &b.common().lease_revoked,
            r
        )
        .await)
    }

    /// An operator's release: whether a live lease was released. A key whose row (or,
    /// on PostgreSQL, whose advisory gate) another transaction holds fails with
    /// contention at once, never waiting for it.
    pub(crate) async fn force_release(&self, k: &Key<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| fair::force_release(&**b, k).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, k.0))
    }

    pub(crate) async fn list(&self, l: &Limit) -> Result<Vec<Listed>, Failure> {
        on_backend!(self, |b| b.list(l).await)
    }

    pub(crate) async fn lookup(&self, k: &Key<'_>) -> Result<Option<Listed>, Failure> {
        Ok(on_backend!(self, |b| b.lookup(k).await)?.into_iter().next())
    }

    /// An election's claim of its lease's term: whether it was recorded (the lease was
    /// still the candidate's).
    pub(crate) async fn elect_claim(&self, c: &Claim<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b.matched(&b.common().elect_claim, c).await)
    }

    /// The leader of the election on a key, if it has one now.
    pub(crate) async fn elect_leader(&self, k: &Key<'_>) -> Result<Option<Elected>, Failure> {
        Ok(on_backend!(self, |b| b.elect_leader(k).await)?
            .into_iter()
            .next())
    }

    /// One batch of the sweep; rows another transaction holds are passed over.
    pub(crate) async fn sweep(&self, s: &Sweep<'_>) -> Result<u64, Failure> {
        on_backend!(self, |b| b.sweep(s).await)
    }

    /// The fair strategy's join (see [`fair::join`]): the waiter's ticket and
    /// standing. A closed gate is contention.
    pub(crate) async fn fair_join(&self, p: &Place<'_>) -> Result<(i64, Standing), Failure> {
        on_backend!(self, |b| fair::join(&**b, p).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, p.key))
    }

    /// The first waiter's poll (see [`fair::poll`]). A closed gate is contention.
    pub(crate) async fn fair_poll(&self, p: &Place<'_>) -> Result<Standing, Failure> {
        on_backend!(self, |b| fair::poll(&**b, p).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, p.key))
    }

    /// A waiter keeps its place (see [`fair::stand`]).
    pub(crate) async fn fair_stand(&self, p: &Place<'_>, renew: bool) -> Result<Standing, Failure> {
        on_backend!(self, |b| fair::stand(&**b, p, renew).await)
    }

    /// A waiter renews its place alone (see [`fair::renew`]): whether it was live.
    pub(crate) async fn fair_renew(&self, p: &Place<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| fair::renew(&**b, p).await)
    }

    /// A waiter named by a notification claims the grant it names, if the table shows
    /// it the waiter's (see [`fair::claim`]).
    pub(crate) async fn fair_claim(
        &self,
        p: &Place<'_>,
        token: i64,
    ) -> Result<Option<Standing>, Failure> {
        on_backend!(self, |b| fair::claim(&**b, p, token).await)
    }

    /// A waiter leaves the queue (see [`fair::leave`]). A closed gate is contention.
    pub(crate) async fn fair_leave(&self, p: &Place<'_>) -> Result<(), Failure> {
        on_backend!(self, |b| fair::leave(&**b, p).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, p.key))
    }

    /// A fair holder's release, handing the lock on (see [`fair::release`]): whether
    /// it was still ours. A closed gate is contention.
    pub(crate) async fn fair_release(&self, h: &Held<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| fair::release(&**b, h).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, h.key))
    }

    /// One batch of the fair queue's sweep.
    pub(crate) async fn fair_sweep(&self, s: &Sweep<'_>) -> Result<u64, Failure> {
        on_backend!(self, |b| fair::sweep(&**b, s).await)
    }

    /// The sweep of presence marker files their processes left behind (SQLite, where
    /// markers are files beside the database): how many were removed. The servers'
    /// markers are session locks, which end with their sessions.
    pub(crate) async fn sweep_markers(&self) -> Result<u64, Failure> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(b) => b.sweep_markers().await.map_err(|e| b.failure(e)),
            #[allow(unreachable_patterns)]
            _ => Ok(0),
        }
    }

    // The semaphore (`semaphore.rs`).

    /// Records the semaphore with its N unless it is recorded: the N it has.
    pub(crate) async fn semaphore_ensure(&self, p: &Permits<'_>) -> Result<Option<i64>, Failure> {
        on_backend!(self, |b| semaphore::ensure(&**b, p).await)
    }

    /// Takes `slots.count` permits of the semaphore, all or none.
    pub(crate) async fn semaphore_take(
        &self,
        p: &Permits<'_>,
        slots: &Slots<'_>,
    ) -> Result<semaphore::Taken, Failure> {
        on_backend!(self, |b| semaphore::take(&**b, p, slots).await)
    }

    /// The live permits of a semaphore's slots.
    pub(crate) async fn semaphore_holders(
        &self,
        slots: &Slots<'_>,
    ) -> Result<Vec<Listed>, Failure> {
        on_backend!(self, |b| semaphore::holders(&**b, slots).await)
    }

    /// The recorded semaphores with their N.
    pub(crate) async fn semaphore_list(&self, l: &Limit) -> Result<Vec<(String, i64)>, Failure> {
        on_backend!(self, |b| semaphore::list(&**b, l).await)
    }

    /// Runs `work` on the backend, when its server has row locks: `None` on SQLite.
    pub(crate) async fn with_row_locks<W: OnRowLocks>(&self, work: W) -> Option<W::Output> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(b) => Some(work.run(&**b).await),
            #[cfg(feature = "mysql")]
            Self::MySql(b) => Some(work.run(&**b).await),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => {
                let _ = work;
                None
            }
        }
    }

    /// Refuses a server with no scheduler inside (SQLite), saying what to do instead.
    pub(crate) fn has_scheduler(&self) -> Result<()> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => Err(no_scheduler()),
            #[allow(unreachable_patterns)]
            _ => Ok(()),
        }
    }

    /// Schedules the sweep inside the database every `every` (whole seconds, checked
    /// by the caller): the schedule given to the scheduler, and pg_cron's job id.
    pub(crate) async fn schedule_sweep(
        &self,
        every: Duration,
        values: impl FnOnce(&str) -> Schedule<'_> + Send,
    ) -> Result<(String, Option<i64>)> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(b) => schedule(&**b, every, values).await,
            #[cfg(feature = "mysql")]
            Self::MySql(b) => schedule(&**b, every, values).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => Err(no_scheduler()),
        }
    }

    /// Removes the scheduled sweep; whether there was one.
    pub(crate) async fn unschedule_sweep(&self) -> Result<bool> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(b) => unschedule(&**b).await,
            #[cfg(feature = "mysql")]
            Self::MySql(b) => unschedule(&**b).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => Err(no_scheduler()),
        }
    }
}

fn dialect_of<B: Backend>(_: &B) -> Dialect {
    B::DIALECT
}

/// Work written once over the servers with row locks (the for-update strategy), run by
/// [`Db::with_row_locks`] on the handle's backend.
pub(crate) trait OnRowLocks: Send {
    type Output;

    fn run<B: RowLocks>(self, backend: &B) -> impl Future<Output = Self::Output> + Send;
}

/// SQLite has no scheduler inside.
#[cfg(feature = "sqlite")]
fn no_scheduler() -> crate::support::error::Error {
    crate::support::error::Error::SchedulerUnavailable {
        dialect: Dialect::Sqlite.name(),
        hint: "SQLite has no scheduler: run Locker::spawn_sweeper in the application, or \
               `sqlock sweep` from cron"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::backend::{common_templates, Common};
    use super::statement::Mode;
    use super::statement::{Statement, Target};
    use super::Dialect;
    use crate::db::values::Claim;
    use crate::support::validate::TableName;

    /// Every statement of the common set renders with the values it is bound with (a
    /// template naming a value its request lacks panics), elections' included.
    #[test]
    fn the_election_statements_render_with_their_values() {
        let table = TableName::new("t").unwrap();
        for (dialect, templates) in [
            (Dialect::Postgres, common_templates!("postgres")),
            (Dialect::MySql, common_templates!("mysql")),
            (Dialect::Sqlite, common_templates!("sqlite")),
        ] {
            let target = Target {
                table: &table,
                placeholders: dialect.placeholders(),
                mode: Mode::default(),
            };
            let common = Common::render(&templates, &target);
            assert!(common.elect_claim.text().contains("t_leaders"), "{dialect}");
            assert_eq!(common.elect_claim.params().len(), 4, "{dialect}");
            assert!(
                common.elect_leader.text().contains("t_leaders"),
                "{dialect}"
            );
            if dialect == Dialect::Postgres {
                let notify: Statement<Claim<'static>> =
                    target.render(super::backend::sql!("postgres", "elect_claim_notify"));
                assert!(notify.text().contains("pg_notify"));
                assert_eq!(notify.params().len(), 4);
            }
        }
    }
}
