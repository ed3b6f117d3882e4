//! The schedulers inside the databases, for the sweeper: pg_cron on PostgreSQL and the
//! event scheduler on MariaDB. This layer reads what a server offers and runs the
//! statements of `sql/<dialect>/sweep_schedule*.sql`; what to ask of it, and what to
//! tell a caller when something is missing, is decided above.

// Built with one database feature, the other server's half goes unused.
#![cfg_attr(
    not(all(feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_variables, unused_imports)
)]

use crate::sql::{Args, Placeholders, Statement};
use crate::validate::TableName;

use super::{DbPool, Dialect};

/// The statements that schedule and unschedule the sweep, rendered for one table.
#[derive(Debug)]
pub(crate) struct SchedulerStatements {
    /// What the server offers: see [`Scheduler`].
    check: Statement,
    schedule: Statement,
    unschedule: Statement,
    /// MariaDB only: whether the table's event exists (DROP EVENT IF EXISTS does not
    /// say).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    scheduled: Option<Statement>,
}

impl SchedulerStatements {
    /// The statements for `table`, or `None` where the database has no scheduler
    /// (SQLite). They are pinned, as a handle's are in the transaction-pooling mode,
    /// when `pinned`.
    pub(crate) fn new(dialect: Dialect, table: &TableName, pinned: bool) -> Option<Self> {
        let (check, schedule, unschedule, scheduled) = match dialect {
            Dialect::Postgres => (
                include_str!("../../sql/postgres/sweep_scheduler.sql"),
                include_str!("../../sql/postgres/sweep_schedule.sql"),
                include_str!("../../sql/postgres/sweep_unschedule.sql"),
                None,
            ),
            Dialect::MySql => (
                include_str!("../../sql/mysql/sweep_scheduler.sql"),
                include_str!("../../sql/mysql/sweep_schedule.sql"),
                include_str!("../../sql/mysql/sweep_unschedule.sql"),
                Some(include_str!("../../sql/mysql/sweep_scheduled.sql")),
            ),
            Dialect::Sqlite => return None,
        };
        let style: Placeholders = dialect.placeholders();
        let render = |text| Statement::render(text, table, style).pinned(pinned);
        Some(Self {
            check: render(check),
            schedule: render(schedule),
            unschedule: render(unschedule),
            scheduled: scheduled.map(render),
        })
    }
}

/// What a server offers for scheduling the sweep, read before anything is scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scheduler {
    /// PostgreSQL.
    PgCron {
        /// pg_cron's version in this database; `None` when its extension is not
        /// created here.
        version: Option<String>,
        /// The database pg_cron runs its jobs from (`cron.database_name`); `None` when
        /// pg_cron is not loaded.
        cron_database: Option<String>,
        /// This database.
        here: String,
        /// Whether the sweep procedure of sqlock's migrations exists.
        has_procedure: bool,
    },
    /// MariaDB.
    Events {
        /// Whether the event scheduler runs (`event_scheduler=ON`).
        on: bool,
        /// Whether the procedures of sqlock's migrations exist.
        has_procedure: bool,
    },
}

impl DbPool {
    /// What the server offers for scheduling the sweep.
    pub(crate) async fn sweep_scheduler(
        &self,
        s: &SchedulerStatements,
    ) -> Result<Scheduler, sqlx::Error> {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        use sqlx::Row as _;
        let a = Args::default();
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                let row = s
                    .check
                    .bind::<sqlx::Postgres>(&a)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(Scheduler::PgCron {
                    version: row.try_get(0)?,
                    cron_database: row.try_get(1)?,
                    here: row.try_get(2)?,
                    has_procedure: row.try_get(3)?,
                })
            }
            #[cfg(feature = "mysql")]
            Self::MySql(pool) => {
                let row = s.check.bind::<sqlx::MySql>(&a).fetch_one(pool).await?;
                let scheduler: Option<String> = row.try_get(0)?;
                Ok(Scheduler::Events {
                    on: scheduler.is_some_and(|v| v.eq_ignore_ascii_case("ON")),
                    has_procedure: row.try_get::<i64, _>(1)? != 0,
                })
            }
            #[allow(unreachable_patterns)]
            _ => Err(no_scheduler()),
        }
    }

    /// Schedules the sweep with `a`'s schedule, interval, batch, grace and batches;
    /// pg_cron's job id on PostgreSQL.
    pub(crate) async fn schedule_sweep(
        &self,
        s: &SchedulerStatements,
        a: &Args,
    ) -> Result<Option<i64>, sqlx::Error> {
        #[cfg(feature = "postgres")]
        use sqlx::Row as _;
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                let row = s
                    .schedule
                    .bind::<sqlx::Postgres>(a)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(Some(row.try_get(0)?))
            }
            #[cfg(feature = "mysql")]
            Self::MySql(pool) => {
                s.schedule.bind::<sqlx::MySql>(a).execute(pool).await?;
                Ok(None)
            }
            #[allow(unreachable_patterns)]
            _ => Err(no_scheduler()),
        }
    }

    /// Removes the scheduled sweep; whether there was one.
    pub(crate) async fn unschedule_sweep(
        &self,
        s: &SchedulerStatements,
    ) -> Result<bool, sqlx::Error> {
        let a = Args::default();
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                let removed = s
                    .unschedule
                    .bind::<sqlx::Postgres>(&a)
                    .fetch_all(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(!removed.is_empty())
            }
            #[cfg(feature = "mysql")]
            Self::MySql(pool) => {
                use sqlx::Row as _;
                let Some(scheduled) = &s.scheduled else {
                    return Err(no_scheduler());
                };
                let row = scheduled.bind::<sqlx::MySql>(&a).fetch_one(pool).await?;
                let existed = row.try_get::<i64, _>(0)? > 0;
                s.unschedule.bind::<sqlx::MySql>(&a).execute(pool).await?;
                Ok(existed)
            }
            #[allow(unreachable_patterns)]
            _ => Err(no_scheduler()),
        }
    }
}

/// Never reached: the statements exist only for the dialects with a scheduler.
fn no_scheduler() -> sqlx::Error {
    sqlx::Error::Protocol("BUG: no scheduler statements for this dialect".into())
}
