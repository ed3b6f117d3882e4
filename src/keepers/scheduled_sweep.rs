//! The sweeper scheduled inside the database, so that expired rows are reclaimed with
//! no client running: a pg_cron job on PostgreSQL, an event on MariaDB, each calling
//! the sweep procedure that sqlock's migrations create (`<table>_sweep`). What each
//! scheduler needs and accepts is its server backend's to say (`db/postgres.rs`,
//! `db/mysql.rs`); the interval's bounds are checked here, before any SQL.

use std::time::Duration;

use crate::db::values::Schedule;
use crate::db::Db;
use crate::support::error::{Error, Result};

use super::sweeper::SweepOptions;

/// How many batches one scheduled run of the sweep deletes at most; rows left over
/// are reclaimed by the next run.
pub const SCHEDULED_SWEEP_BATCHES: u32 = 100;

/// The longest interval a scheduled sweep may have: one day.
pub const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// A sweep scheduled inside the database by
/// [`Locker::schedule_sweep`](crate::Locker::schedule_sweep).
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

/// Schedules the sweep of `db`'s table every `every` with `options`.
pub(crate) async fn schedule(
    db: &Db,
    every: Duration,
    options: SweepOptions,
) -> Result<ScheduledSweep> {
    db.has_scheduler()?;
    check_interval(every)?;
    let batch = options.batch_values()?;
    let every_s = i64::try_from(every.as_secs()).unwrap_or(i64::MAX);
    let (schedule, job_id) = db
        .schedule_sweep(every, |plan| Schedule {
            schedule: plan,
            every_s,
            limit: batch.limit,
            grace_us: batch.grace_us,
            batches: i64::from(SCHEDULED_SWEEP_BATCHES),
        })
        .await?;
    Ok(ScheduledSweep {
        name: format!("{}_sweep", db.table().as_str()),
        schedule,
        job_id,
    })
}

/// Removes the scheduled sweep of `db`'s table; whether there was one.
pub(crate) async fn unschedule(db: &Db) -> Result<bool> {
    db.unschedule_sweep().await
}

/// Refuses an interval no scheduler keeps: the schedulers count whole seconds, and a
/// scheduled sweep runs at least once a day.
fn check_interval(every: Duration) -> Result<()> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_intervals_are_refused_before_sql() {
        for every in [
            Duration::ZERO,
            Duration::from_millis(1500),
            Duration::from_secs(86_401),
        ] {
            assert!(
                matches!(check_interval(every), Err(Error::InvalidSchedule { .. })),
                "{every:?}"
            );
        }
        assert!(check_interval(Duration::from_secs(90)).is_ok());
    }
}
