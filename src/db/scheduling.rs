//! The scheduled sweep, on the servers with a scheduler inside (pg_cron on PostgreSQL,
//! the event scheduler on MariaDB): the [`Scheduling`] trait their backends implement,
//! and the steps every server takes alike.

use std::future::Future;
use std::time::Duration;

use crate::support::error::{Error, Result};

use super::backend::Backend;
use super::statement::Statement;
use super::values::{Nothing, Schedule};

/// What a server's scheduler is, and whether it can run the sweep, as read from it.
#[derive(Debug)]
pub(crate) struct SchedulerState {
    /// Ready to schedule; `Err` says what is missing, in the server's own terms.
    pub(crate) ready: Result<(), Error>,
    /// Whether schedules of less than a minute are accepted (pg_cron 1.5 and later;
    /// MariaDB's events always); `Err` says why not.
    pub(crate) seconds: Result<(), String>,
    /// Whether the scheduler is there at all, so that something may be scheduled.
    pub(crate) installed: bool,
}

/// A server with a scheduler inside (pg_cron, MariaDB's events) that can run the
/// sweep procedure of sqlock's migrations.
pub(crate) trait Scheduling: Backend {
    /// Reads what the server offers.
    fn scheduler(&self) -> impl Future<Output = Result<SchedulerState, sqlx::Error>> + Send;

    /// This server's schedule for a run every `secs` seconds (1 to a day), worked out
    /// before any SQL is sent; `Err` says why it has none.
    fn plan(secs: u64) -> Result<String, String>;

    /// Schedules the sweep; pg_cron's job id where there is one.
    fn schedule(
        &self,
        s: &Schedule<'_>,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send;

    /// Removes the scheduled sweep; whether there was one.
    fn unschedule(&self) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;
}

/// The statements of [`Scheduling`], rendered for one table.
#[derive(Debug, Clone)]
pub(crate) struct SchedulerStatements {
    pub(crate) check: Statement<Nothing>,
    pub(crate) schedule: Statement<Schedule<'static>>,
    pub(crate) unschedule: Statement<Nothing>,
}

/// Schedules the sweep on a server with a scheduler.
pub(super) async fn schedule<B: Scheduling>(
    b: &B,
    every: Duration,
    values: impl FnOnce(&str) -> Schedule<'_> + Send,
) -> Result<(String, Option<i64>)> {
    let invalid = |reason: String| Error::InvalidSchedule { every, reason };
    // Before any SQL: a schedule this server cannot keep.
    let plan = B::plan(every.as_secs()).map_err(invalid)?;
    let state = b.scheduler().await.map_err(|e| b.failure(e).error)?;
    state.ready?;
    if every < Duration::from_secs(60) {
        state.seconds.map_err(invalid)?;
    }
    let job = b
        .schedule(&values(&plan))
        .await
        .map_err(|e| b.failure(e).error)?;
    Ok((plan, job))
}

/// Removes the scheduled sweep on a server with a scheduler.
pub(super) async fn unschedule<B: Scheduling>(b: &B) -> Result<bool> {
    let state = b.scheduler().await.map_err(|e| b.failure(e).error)?;
    if !state.installed {
        return Ok(false);
    }
    b.unschedule().await.map_err(|e| b.failure(e).error)
}
