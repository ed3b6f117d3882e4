//! The sweeper scheduled inside the database, so that expired rows are reclaimed with
//! no client running: a pg_cron job on PostgreSQL, an event on MariaDB, each calling
//! the sweep procedure that sqlock's migrations create (`<table>_sweep`).

use std::time::Duration;

use crate::dialect::{Dialect, Scheduler, SchedulerStatements};
use crate::error::{Error, Result};
use crate::locker::Locker;
use crate::sweeper::SweepOptions;

/// How many batches one scheduled run of the sweep deletes at most; rows left over
/// are reclaimed by the next run.
pub const SCHEDULED_SWEEP_BATCHES: u32 = 100;

/// The longest interval a scheduled sweep may have: one day.
pub const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// A sweep scheduled inside the database by [`Locker::schedule_sweep`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduledSweep {
    /// The name the scheduler knows it by, `<table>_sweep`: the pg_cron job's or the
    /// MariaDB event's.
    pub name: String,
    /// The schedule as the scheduler was given it: a cron expression (or `N seconds`)
    /// for pg_cron, `EVERY N SECOND` for an event.
    pub schedule: String,
    /// pg_cron's id of the job; `None` on MariaDB.
    pub job_id: Option<i64>,
}

impl Locker {
    /// Schedules the sweep inside the database, to run every `every` with `options`
    /// whether or not any client is running: a pg_cron job on PostgreSQL, an event on
    /// MariaDB. Scheduling again replaces the schedule; [`unschedule_sweep`] removes
    /// it.
    ///
    /// Each run calls the procedure `<table>_sweep` from sqlock's migrations, which
    /// keeps the rules of [`sweep`](Self::sweep) (it never deletes a live lock, checks
    /// expiry again under the row lock, passes over rows another transaction holds, and
    /// leaves fencing tokens rising) and deletes at most [`SCHEDULED_SWEEP_BATCHES`]
    /// batches, each committed on its own.
    ///
    /// What each database needs:
    ///
    /// - **PostgreSQL**: pg_cron in `shared_preload_libraries`, `cron.database_name`
    ///   naming this database, and `CREATE EXTENSION pg_cron` run in it. The job runs
    ///   as the user who scheduled it, in the database's default search path (keep the
    ///   table there). pg_cron before 1.5 schedules by the minute: `every` is then a
    ///   number of minutes that divides an hour, of hours that divides a day, or a day;
    ///   from 1.5 on, 1 to 59 seconds work too.
    /// - **MariaDB**: the event scheduler on (`event_scheduler=ON` in the server's
    ///   configuration, or `SET GLOBAL event_scheduler = ON` until the next restart);
    ///   any whole number of seconds.
    /// - **SQLite** has no scheduler: use [`spawn_sweeper`](Self::spawn_sweeper) in
    ///   the application, or the command-line tool's `sweep` from cron.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchedule`] for an interval the scheduler cannot keep, and bad
    /// options as [`sweep`](Self::sweep), before any SQL is sent;
    /// [`Error::SchedulerUnavailable`] when the database has no scheduler ready (saying
    /// what to set); [`Error::MissingSweepProcedure`] when the migrations that create
    /// the procedure were not applied; database errors (such as a missing privilege).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the schedule is one statement, which either took effect or did not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
    /// use std::time::Duration;
    /// use sqlock::SweepOptions;
    ///
    /// let job = locker
    ///     .schedule_sweep(Duration::from_secs(300), SweepOptions::new().grace(Duration::from_secs(60)))
    ///     .await?;
    /// println!("sweeping by {} on {}", job.name, job.schedule);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`unschedule_sweep`]: Self::unschedule_sweep
    pub async fn schedule_sweep(
        &self,
        every: Duration,
        options: SweepOptions,
    ) -> Result<ScheduledSweep> {
        let s = self.scheduler_statements()?;
        let mut args = options.args()?;
        let plan = plan(self.shared.db.dialect(), every)?;
        let name = format!("{}_sweep", self.shared.stmts.table().as_str());
        let state = self.read_scheduler(&s).await?;
        if let Scheduler::PgCron { version, .. } = &state {
            if every.as_secs() < 60 && !pg_cron_has_seconds(version.as_deref()) {
                return Err(Error::InvalidSchedule {
                    every,
                    reason: format!(
                        "pg_cron {} schedules by the minute (1 to 59 seconds need pg_cron \
                         1.5 or later): give 1m or more",
                        version.as_deref().unwrap_or("?")
                    ),
                });
            }
        }
        args.schedule = plan.clone();
        args.every_s = i64::try_from(every.as_secs()).unwrap_or(i64::MAX);
        args.batches = i64::from(SCHEDULED_SWEEP_BATCHES);
        let job_id = self
            .shared
            .db
            .schedule_sweep(&s, &args)
            .await
            .map_err(|e| self.shared.stmts.failure(e).error)?;
        Ok(ScheduledSweep {
            name,
            schedule: plan,
            job_id,
        })
    }

    /// Removes the sweep [`schedule_sweep`](Self::schedule_sweep) scheduled for this
    /// table, and returns whether there was one. On PostgreSQL only the jobs of the
    /// connected user are seen.
    ///
    /// # Errors
    ///
    /// [`Error::SchedulerUnavailable`] on SQLite, before any SQL is sent; database
    /// errors. On PostgreSQL without pg_cron, or MariaDB without the event, there is
    /// nothing to remove: `Ok(false)`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the removal is one statement, which either took effect or did not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
    /// if locker.unschedule_sweep().await? {
    ///     println!("the scheduled sweep is gone");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unschedule_sweep(&self) -> Result<bool> {
        let s = self.scheduler_statements()?;
        let state = self
            .shared
            .db
            .sweep_scheduler(&s)
            .await
            .map_err(|e| self.shared.stmts.failure(e).error)?;
        if let Scheduler::PgCron { version: None, .. } = state {
            return Ok(false);
        }
        self.shared
            .db
            .unschedule_sweep(&s)
            .await
            .map_err(|e| self.shared.stmts.failure(e).error)
    }

    /// The scheduler statements for this table; SQLite has none.
    fn scheduler_statements(&self) -> Result<SchedulerStatements> {
        let dialect = self.shared.db.dialect();
        let pinned = self.shared.stmts.lease_acquire.is_pinned();
        SchedulerStatements::new(dialect, self.shared.stmts.table(), pinned).ok_or(
            Error::SchedulerUnavailable {
                dialect: dialect.name(),
                hint: "SQLite has no scheduler: run Locker::spawn_sweeper in the \
                       application, or `sqlock sweep` from cron"
                    .into(),
            },
        )
    }

    /// What the server offers, checked for what scheduling needs: the scheduler, and
    /// the procedure of the migrations.
    async fn read_scheduler(&self, s: &SchedulerStatements) -> Result<Scheduler> {
        let state = self
            .shared
            .db
            .sweep_scheduler(s)
            .await
            .map_err(|e| self.shared.stmts.failure(e).error)?;
        let dialect = self.shared.db.dialect().name();
        let missing = |hint: String| Error::SchedulerUnavailable { dialect, hint };
        match &state {
            Scheduler::PgCron {
                version: Some(_),
                has_procedure: false,
                ..
            }
            | Scheduler::Events {
                on: true,
                has_procedure: false,
            } => Err(Error::MissingSweepProcedure {
                name: format!("{}_sweep", self.shared.stmts.table().as_str()),
                dialect,
            }),
            Scheduler::PgCron {
                version: Some(_), ..
            }
            | Scheduler::Events { on: true, .. } => Ok(state),
            Scheduler::PgCron {
                version: None,
                cron_database: None,
                here,
                ..
            } => Err(missing(format!(
                "pg_cron is not loaded: add pg_cron to shared_preload_libraries, set \
                 cron.database_name = '{here}', restart the server, and run CREATE \
                 EXTENSION pg_cron in database {here}"
            ))),
            Scheduler::PgCron {
                version: None,
                cron_database: Some(cron),
                here,
                ..
            } if cron != here => Err(missing(format!(
                "pg_cron runs its jobs from database {cron}, not {here}: set \
                 cron.database_name = '{here}' and restart the server, then run CREATE \
                 EXTENSION pg_cron in database {here}"
            ))),
            Scheduler::PgCron {
                version: None,
                here,
                ..
            } => Err(missing(format!(
                "pg_cron is loaded but its extension is not created: run CREATE EXTENSION \
                 pg_cron in database {here}"
            ))),
            Scheduler::Events { on: false, .. } => Err(missing(
                "the event scheduler is off: set event_scheduler=ON in the server's \
                 configuration (or SET GLOBAL event_scheduler = ON until the next restart)"
                    .into(),
            )),
        }
    }
}

/// The schedule to give the dialect's scheduler for `every`, checked before any SQL
/// is sent: a cron expression (or `N seconds`) for pg_cron, the interval for an event.
fn plan(dialect: Dialect, every: Duration) -> Result<String> {
    let invalid = |reason: &str| Error::InvalidSchedule {
        every,
        reason: reason.into(),
    };
    if every.subsec_nanos() != 0 || every.is_zero() {
        return Err(invalid("the schedulers count whole seconds, from 1s up"));
    }
    if every > MAX_SWEEP_INTERVAL {
        return Err(invalid("a scheduled sweep runs at least once a day"));
    }
    let secs = every.as_secs();
    match dialect {
        Dialect::MySql => Ok(format!("EVERY {secs} SECOND")),
        Dialect::Postgres => cron_schedule(secs).ok_or_else(|| {
            invalid(
                "pg_cron keeps a cron schedule, which repeats evenly every 1 to 59 seconds, \
                 every N minutes where N divides 60, every N hours where N divides 24, or \
                 daily",
            )
        }),
        // Refused before this by the missing statements; kept total for the compiler.
        _ => Err(invalid("this database has no scheduler")),
    }
}

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
        }
    }

    #[test]
    fn bad_intervals_are_refused_before_sql() {
        for every in [
            Duration::ZERO,
            Duration::from_millis(1500),
            Duration::from_secs(86_401),
        ] {
            for dialect in [Dialect::Postgres, Dialect::MySql] {
                assert!(
                    matches!(plan(dialect, every), Err(Error::InvalidSchedule { .. })),
                    "{every:?} on {dialect}"
                );
            }
        }
        assert_eq!(
            plan(Dialect::MySql, Duration::from_secs(90)).unwrap(),
            "EVERY 90 SECOND"
        );
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
