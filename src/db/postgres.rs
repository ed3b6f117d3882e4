//! PostgreSQL: statements from `sql/postgres/`, results through `RETURNING`, errors
//! sorted by SQLSTATE; row locks behind a transaction-scoped advisory gate, and pg_cron
//! for the scheduled sweep.

use sqlx::postgres::PgDatabaseError;
use sqlx::{PgPool, Postgres as Pg, Row as _};

use crate::support::error::{Class, Error};
use crate::support::validate::TableName;

use super::backend::{
    sql, Backend, Base, CommonTemplates, ForUpdate, ForUpdateTemplates, Gate, RowLocks,
};
use super::dialect::Dialect;
use super::fence::fence_connection;
use super::runner::{ints, On, Runner};
use super::scheduling::{SchedulerState, SchedulerStatements, Scheduling};
use super::statement::{Mode, Statement, Target};
use super::transaction::DbTransaction;
use super::values::{Bound, Key, Nothing, Schedule};

/// A PostgreSQL database and one lock table in it.
#[derive(Debug)]
pub(crate) struct Postgres {
    base: Base<Pg>,
    for_update: ForUpdate,
    /// The for-update transaction's `lock_timeout` and the key's gate, waiting for the
    /// gate and not.
    begin: Statement<Bound<'static>>,
    begin_nowait: Statement<Bound<'static>>,
    scheduler: SchedulerStatements,
}

impl Postgres {
    pub(crate) fn new(pool: PgPool, table: &TableName, mode: Mode) -> Self {
        let target = Target {
            table,
            placeholders: Dialect::Postgres.placeholders(),
            mode,
        };
        let mut templates = CommonTemplates::postgres();
        // With notifications on, the releases that free a key announce it.
        if mode.notify {
            templates.lease_release = sql!("postgres", "lease_release_notify");
            templates.insert_release = sql!("postgres", "insert_release_notify");
            templates.lease_release_at_least = sql!("postgres", "lease_release_at_least_notify");
            templates.insert_release_at_least = sql!("postgres", "insert_release_at_least_notify");
            templates.lease_force_release = sql!("postgres", "lease_force_release_notify");
            // And so does an election's claim of a new term, for its observers.
            templates.elect_claim = sql!("postgres", "elect_claim_notify");
            // The fair handoff names the waiter it handed the lock to (`strategy/fair/steps.rs`).
            templates.family.fair.mark = sql!("postgres", "fair_mark_notify");
            // A fair release nobody is queued for frees the key alone: it announces it.
            templates.family.fair.release = sql!("postgres", "fair_release_notify");
            // A read's or a permit's release frees its row, and the last read or
            // permit of a name frees the name (`shared.rs`).
            templates.family.shared.release = sql!("postgres", "shared_release_notify");
            templates.family.shared.leave = sql!("postgres", "shared_leave_notify");
            // So does the write side's release, unless its owner's read takes it over.
            templates.family.rw.release = sql!("postgres", "rw_release_notify");
        }
        Self {
            base: Base::new(pool, &target, &templates),
            for_update: ForUpdate::render(&ForUpdateTemplates::postgres(), &target),
            begin: target.render(sql!("postgres", "for_update_begin")),
            begin_nowait: target.render(sql!("postgres", "for_update_begin_nowait")),
            scheduler: SchedulerStatements {
                check: target.render(sql!("postgres", "sweep_scheduler")),
                schedule: target.render(sql!("postgres", "sweep_schedule")),
                unschedule: target.render(sql!("postgres", "sweep_unschedule")),
            },
        }
    }
}

impl Backend for Postgres {
    type Db = Pg;

    const DIALECT: Dialect = Dialect::Postgres;

    fn base(&self) -> &Base<Pg> {
        &self.base
    }

    /// By SQLSTATE.
    fn classify(e: &sqlx::Error) -> Class {
        let Some(code) = e
            .as_database_error()
            .and_then(|d| d.try_downcast_ref::<PgDatabaseError>())
            .map(|d| d.code())
        else {
            return Class::Other;
        };
        match code {
            // serialization_failure, deadlock_detected, lock_not_available
            "40001" | "40P01" | "55P03" => Class::Contention,
            // undefined_table: the table or its sequence is missing
            "42P01" => Class::MissingTable,
            _ => Class::Other,
        }
    }

    /// `None` when the key's gate or row was taken (a for-update holder, an
    /// acquisition under way, a fenced transaction).
    /// In a transaction that holds the key's gate already, the statement takes it
    /// again: a transaction's advisory locks are re-entrant.
    async fn force_release<'a>(
        &'a self,
        on: On<'a, Pg>,
        k: &'a Key<'a>,
    ) -> Result<Option<bool>, sqlx::Error> {
        let rows = ints(on, &self.common().lease_force_release, k).await?;
        Ok(match rows.first() {
            None => Some(false),
            Some(1) => Some(true),
            Some(_) => None,
        })
    }

    /// `None` when the key's gate was taken (a for-update holder, an acquisition under
    /// way); the row's lock is not waited for either (`lease_revoke.sql`).
    async fn revoke<'a>(
        &'a self,
        on: On<'a, Pg>,
        k: &'a Key<'a>,
    ) -> Result<Option<bool>, sqlx::Error> {
        let rows = ints(on, &self.common().lease_revoke, k).await?;
        Ok(match rows.first() {
            None => Some(false),
            Some(1) => Some(true),
            Some(_) => None,
        })
    }
}

impl RowLocks for Postgres {
    fn for_update(&self) -> &ForUpdate {
        &self.for_update
    }

    async fn bound<'a>(
        &'a self,
        conn: &'a mut sqlx::PgConnection,
        b: &'a Bound<'_>,
        nowait: bool,
    ) -> Result<Gate, sqlx::Error> {
        let begin = if nowait {
            &self.begin_nowait
        } else {
            &self.begin
        };
        let rows = Pg::rows(On::Conn(conn), begin, b).await?;
        let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
        let (before, open) = (Pg::text(row, 0)?, Pg::flag(row, 1)?);
        Ok(if open {
            Gate::Open(Some(before))
        } else {
            Gate::Taken
        })
    }

    fn lend(tx: sqlx::Transaction<'static, Pg>) -> DbTransaction {
        DbTransaction::Postgres(tx)
    }
}

impl Scheduling for Postgres {
    async fn scheduler(&self) -> Result<SchedulerState, sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        let row = self
            .scheduler
            .check
            .bind::<Pg>(&Nothing)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        let version: Option<String> = row.try_get(0)?;
        let cron_database: Option<String> = row.try_get(1)?;
        let here: String = row.try_get(2)?;
        let has_procedure: bool = row.try_get(3)?;
        let missing = |hint: String| Error::SchedulerUnavailable {
            dialect: Self::DIALECT.name(),
            hint,
        };
        let ready = match (&version, cron_database) {
            (Some(_), _) if !has_procedure => Err(Error::MissingSweepProcedure {
                name: format!("{}_sweep", self.table().as_str()),
                dialect: Self::DIALECT.name(),
            }),
            (Some(_), _) => Ok(()),
            (None, None) => Err(missing(format!(
                "pg_cron is not loaded: add pg_cron to shared_preload_libraries, set \
                 cron.database_name = '{here}', restart the server, and run CREATE \
                 EXTENSION pg_cron in database {here}"
            ))),
            (None, Some(cron)) if cron != here => Err(missing(format!(
                "pg_cron runs its jobs from database {cron}, not {here}: set \
                 cron.database_name = '{here}' and restart the server, then run CREATE \
                 EXTENSION pg_cron in database {here}"
            ))),
            (None, Some(_)) => Err(missing(format!(
                "pg_cron is loaded but its extension is not created: run CREATE \
                 EXTENSION pg_cron in database {here}"
            ))),
        };
        let seconds = if pg_cron_has_seconds(version.as_deref()) {
            Ok(())
        } else {
            Err(format!(
                "pg_cron {} schedules by the minute (1 to 59 seconds need pg_cron 1.5 \
                 or later): give 1m or more",
                version.as_deref().unwrap_or("?")
            ))
        };
        Ok(SchedulerState {
            ready,
            seconds,
            installed: version.is_some(),
        })
    }

    fn plan(secs: u64) -> Result<String, String> {
        cron_schedule(secs).ok_or_else(|| {
            "pg_cron keeps a cron schedule, which repeats evenly every 1 to 59 seconds, \
             every N minutes where N divides 60, every N hours where N divides 24, or daily"
                .into()
        })
    }

    async fn schedule(&self, s: &Schedule<'_>) -> Result<Option<i64>, sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        let row = self
            .scheduler
            .schedule
            .bind::<Pg>(s)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(row.try_get(0)?))
    }

    async fn unschedule(&self) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        let removed = self
            .scheduler
            .unschedule
            .bind::<Pg>(&Nothing)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(!removed.is_empty())
    }
}

fence_connection!(sqlx::PgConnection, Postgres, "postgres");

/// pg_cron's schedule for a run every `secs` seconds, if it has one.
fn cron_schedule(secs: u64) -> Option<String> {
    let divides = |n: u64, of: u64| n > 0 && n <= of && of % n == 0;
    Some(match secs {
        1..=59 => format!("{secs} seconds"),
        s if s % 60 != 0 => return None,
        s if divides(s / 60, 60) && s < 3600 => match s / 60 {
            1 => "* * * * *".into(),
            m => format!("*/{m} * * * *"),
        },
        s if s % 3600 == 0 && divides(s / 3600, 24) => match s / 3600 {
            1 => "0 * * * *".into(),
            24 => "0 0 * * *".into(),
            h => format!("0 */{h} * * *"),
        },
        _ => return None,
    })
}

/// Whether pg_cron `version` (`1.4-1`, `1.6`) takes schedules in seconds: 1.5 and later.
fn pg_cron_has_seconds(version: Option<&str>) -> bool {
    let Some(v) = version else { return false };
    let mut parts = v.split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_become_cron_schedules_or_are_refused() {
        let cases = [
            (1, Some("1 seconds")),
            (59, Some("59 seconds")),
            (60, Some("* * * * *")),
            (300, Some("*/5 * * * *")),
            (1800, Some("*/30 * * * *")),
            (3600, Some("0 * * * *")),
            (7200, Some("0 */2 * * *")),
            (43200, Some("0 */12 * * *")),
            (86400, Some("0 0 * * *")),
            (90, None),
            (420, None),
            (5400, None),
            (18000, None),
        ];
        for (secs, want) in cases {
            assert_eq!(cron_schedule(secs).as_deref(), want, "{secs}s");
            assert_eq!(
                <Postgres as Scheduling>::plan(secs).ok().as_deref(),
                want,
                "{secs}s"
            );
        }
    }

    #[test]
    fn pg_cron_takes_seconds_from_1_5() {
        assert!(!pg_cron_has_seconds(Some("1.4-1")));
        assert!(!pg_cron_has_seconds(None));
        assert!(pg_cron_has_seconds(Some("1.5")));
        assert!(pg_cron_has_seconds(Some("1.6.4")));
        assert!(pg_cron_has_seconds(Some("2.0")));
    }
}
