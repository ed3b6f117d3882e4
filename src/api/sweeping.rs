//! Sweeping, as a [`Locker`] call: reclaim expired rows once, in a background task, or
//! on a schedule inside the database (a pg_cron job on PostgreSQL, an event on
//! MariaDB). The work itself is the keepers' (`keepers/sweeper.rs`,
//! `keepers/scheduled_sweep.rs`).

use std::time::Duration;

use crate::keepers::scheduled_sweep::{self, ScheduledSweep};
use crate::keepers::sweeper::{self, SweepOptions, SweeperHandle};
use crate::support::error::Result;

use super::locker::Locker;

// For the links of the docs below.
#[allow(unused_imports)]
use crate::{keepers::scheduled_sweep::SCHEDULED_SWEEP_BATCHES, support::error::Error};

impl Locker {
    /// Reclaims every row of the lock table whose lease expired (and, with a grace,
    /// expired long enough ago), batch by batch, and returns how many it deleted.
    ///
    /// Released leases count as expired: their rows go too. Held leases are never
    /// touched, whoever holds them, and neither are the for-update strategy's rows,
    /// which are reused by every lock of their key.
    ///
    /// On SQLite the sweep also removes the presence marker files that killed processes
    /// left beside the database (see
    /// [`LockerBuilder::presence`](crate::LockerBuilder::presence)): a file whose lock
    /// is free (its process gone) and whose owner holds no lease an acquisition could
    /// still take over from it. A live handle's marker is never touched. The files are
    /// not counted among the rows.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidBatch`] or [`Error::TtlTooLong`] (for the grace) before any SQL
    /// is sent; database errors. Rows deleted by earlier batches stay deleted.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops between or during batches; a batch either deleted its
    /// rows or did not.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// use std::time::Duration;
    /// use sqlock::SweepOptions;
    ///
    /// let reclaimed = locker.sweep(SweepOptions::new().grace(Duration::from_secs(60))).await?;
    /// println!("reclaimed {reclaimed} rows");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sweep(&self, options: SweepOptions) -> Result<u64> {
        sweeper::sweep(&self.shared.db, options).await
    }

    /// Runs [`sweep`](Self::sweep) every `every` in a background task, until the
    /// returned handle is shut down or dropped. A failed sweep is logged and tried
    /// again at the next interval.
    ///
    /// # Errors
    ///
    /// Bad options, as [`sweep`](Self::sweep), before the task starts; a zero
    /// interval as [`Error::TtlTooShort`].
    pub fn spawn_sweeper(&self, every: Duration, options: SweepOptions) -> Result<SweeperHandle> {
        sweeper::spawn(self.shared.db.clone(), every, options)
    }

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
    /// Not run as a doctest: it needs pg_cron on PostgreSQL, or MariaDB's event
    /// scheduler.
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
        scheduled_sweep::schedule(&self.shared.db, every, options).await
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
    /// Not run as a doctest: it needs pg_cron on PostgreSQL, or MariaDB's event
    /// scheduler.
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
        scheduled_sweep::unschedule(&self.shared.db).await
    }
}
