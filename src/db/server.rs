//! A handle's backend: [`Db`], its server's type with the pool and the statements
//! rendered for its table; the one dispatch onto it ([`on_backend!`], which every
//! primitive's steps use for their own calls on `Db`, declared beside them); and the
//! calls every lock makes (a lease's acquisition, renewal and release, the listing,
//! the sweep, the scheduler).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::support::error::Result;
use crate::support::validate::TableName;

use super::backend::{Backend, RowLocks};
use super::dialect::Dialect;
#[cfg(feature = "mysql")]
use super::mysql;
use super::outcome::{Elected, Failure, Grant, Listed, Renewal};
use super::per_server::every_server;
use super::pool::DbPool;
#[cfg(feature = "postgres")]
use super::postgres;
use super::runner;
use super::scheduling::{schedule, unschedule};
#[cfg(feature = "sqlite")]
use super::sqlite;
use super::statement::Mode;
use super::values::{Acquire, Claim, Held, Key, Limit, Release, Renew, Schedule, Sweep};

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

/// Runs `$body` with `$b` bound to the backend `$db` (a [`Db`]) holds, and its
/// `sqlx::Error` made a [`Failure`] by that backend: code written once over
/// `B: Backend`, run on each server's type. `Db` and `Backend` must be in scope.
macro_rules! on_backend {
    ($db:expr, |$b:ident| $body:expr) => {
        $crate::db::per_server::every_server!($db, Db, |$b| $body.map_err(|e| $b.failure(e)))
    };
}
pub(crate) use on_backend;

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

    pub(crate) async fn lease_renew(
        &self,
        r: &Renew<'_>,
        batch: &[(String, i64)],
    ) -> Result<Renewal, Failure> {
        on_backend!(self, |b| b.lease_renew(r, batch).await)
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
    use crate::db::backend::{Common, CommonTemplates};
    use crate::db::statement::Mode;
    use crate::db::statement::{Statement, Target};
    use crate::db::values::Claim;
    use crate::db::Dialect;
    use crate::support::validate::TableName;

    /// Every statement of the common set renders with the values it is bound with (a
    /// template naming a value its request lacks panics), elections' included.
    #[test]
    fn the_election_statements_render_with_their_values() {
        let table = TableName::new("t").unwrap();
        for (dialect, templates) in [
            (Dialect::Postgres, CommonTemplates::postgres()),
            (Dialect::MySql, CommonTemplates::mysql()),
            (Dialect::Sqlite, CommonTemplates::sqlite()),
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
                    target.render(crate::db::backend::sql!("postgres", "elect_claim_notify"));
                assert!(notify.text().contains("pg_notify"));
                assert_eq!(notify.params().len(), 4);
            }
        }
    }
}
