//! The sweeper: reclaims rows of expired and released locks, so the table does not
//! grow forever.
//!
//! It deletes in bounded batches, oldest expiry first, and each delete checks expiry
//! again on the row as it stands under the row lock, so a lease renewed or taken while
//! a sweep ran is never deleted. Fencing tokens keep rising for a key whose row was
//! swept. Three ways to run it: [`Locker::sweep`](crate::Locker::sweep) once,
//! [`Locker::spawn_sweeper`](crate::Locker::spawn_sweeper) in the background, and the
//! command-line tool's `sweep` from cron.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::db::retry::{retry_contention, retry_failure};
use crate::db::values::Sweep;
use crate::db::Db;
use crate::support::error::{Class, Error, Result};
use crate::support::validate::{MAX_TTL, MIN_TTL};

/// The largest batch a sweep deletes in one statement.
pub const MAX_SWEEP_BATCH: u32 = 100_000;

/// What a sweep reclaims, and how much at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "options do nothing until passed to a sweep"]
pub struct SweepOptions {
    grace: Duration,
    batch: u32,
}

impl Default for SweepOptions {
    fn default() -> Self {
        Self {
            grace: Duration::ZERO,
            batch: 1_000,
        }
    }
}

impl SweepOptions {
    /// The defaults: no grace, batches of 1,000 rows.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reclaim only rows that expired at least this long ago (on the database clock),
    /// to keep a recently released lock's row, and its owner, visible for a while.
    /// Defaults to zero.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How many rows one delete statement may reclaim, so that it never holds many row
    /// locks at once. Defaults to 1,000; at most [`MAX_SWEEP_BATCH`].
    pub fn batch(mut self, rows: u32) -> Self {
        self.batch = rows;
        self
    }

    /// The options checked, as one batch of the sweep takes them.
    pub(crate) fn batch_values(&self) -> Result<Sweep<'static>> {
        if self.grace > MAX_TTL {
            return Err(Error::TtlTooLong {
                ttl: self.grace,
                max: MAX_TTL,
            });
        }
        if self.batch == 0 || self.batch > MAX_SWEEP_BATCH {
            return Err(Error::InvalidBatch {
                batch: self.batch,
                max: MAX_SWEEP_BATCH,
            });
        }
        Ok(Sweep {
            grace_us: i64::try_from(self.grace.as_micros()).unwrap_or(i64::MAX),
            limit: i64::from(self.batch),
            claimed: "",
        })
    }
}

/// Reclaims expired rows batch by batch; see [`Locker::sweep`](crate::Locker::sweep).
pub(crate) async fn sweep(db: &Db, options: SweepOptions) -> Result<u64> {
    sweep_unless(db, options, None).await
}

/// [`sweep`], which stops before its next batch once `stop` says so (the background
/// sweeper's, told to shut down): a statement once sent is always waited for, so
/// that nothing of a sweep happens after its task has ended.
async fn sweep_unless(
    db: &Db,
    options: SweepOptions,
    stop: Option<&watch::Receiver<bool>>,
) -> Result<u64> {
    let span = tracing::info_span!("sqlock.sweep", table = %db.table(), batch = options.batch,
        grace = ?options.grace, rows = tracing::field::Empty);
    let swept = sweep_batches(db, options, stop)
        .instrument(span.clone())
        .await;
    if let Ok(rows) = swept {
        span.record("rows", rows);
    }
    swept
}

/// The batches of one sweep, in its span; none more once `stop` says so.
async fn sweep_batches(
    db: &Db,
    options: SweepOptions,
    stop: Option<&watch::Receiver<bool>>,
) -> Result<u64> {
    let batch = options.batch_values()?;
    let mut total = 0;
    loop {
        if stop.is_some_and(|s| *s.borrow()) {
            return Ok(total);
        }
        let deleted = match retry_contention(|| db.sweep(&batch)).await {
            Ok(n) => n,
            // Rows that stay locked (a long transaction) are left for the next sweep.
            Err(e) if total > 0 => {
                tracing::warn!(error = %e, reclaimed = total, "sweep stopped early");
                return Ok(total);
            }
            Err(e) => return Err(e),
        };
        total += deleted;
        if stop.is_some_and(|s| *s.borrow()) {
            return Ok(total);
        }
        if deleted < u64::from(options.batch) {
            let places = sweep_queue(db, &batch).await;
            sweep_markers(db).await;
            return Ok(total + places);
        }
    }
}

/// Removes the presence marker files of processes that are gone and no longer needed
/// for a takeover (SQLite). Not counted among the rows; a failure is logged and left
/// for the next sweep.
async fn sweep_markers(db: &Db) {
    match db.sweep_markers().await {
        Ok(0) => {}
        Ok(removed) => tracing::debug!(removed, "removed presence marker files of gone processes"),
        Err(f) => tracing::warn!(error = %f.error, "sweeping presence marker files failed"),
    }
}

/// Reclaims the lapsed places of the fair strategy's queue (waiters that died), batch
/// by batch: how many. A failure is logged and left for the next sweep; a table
/// without a queue (its migration not applied) has none to reclaim.
async fn sweep_queue(db: &Db, batch: &Sweep<'_>) -> u64 {
    let mut total = 0;
    loop {
        match retry_failure(|| db.fair_sweep(batch)).await {
            Ok(n) => {
                total += n;
                if n < u64::try_from(batch.limit).unwrap_or(u64::MAX) {
                    return total;
                }
            }
            Err(f) if f.class == Class::MissingTable => return total,
            Err(f) => {
                tracing::warn!(error = %f.error, "sweeping the fair queue failed");
                return total;
            }
        }
    }
}

/// Sweeps every `every` in a task; see [`Locker::spawn_sweeper`](crate::Locker::spawn_sweeper).
pub(crate) fn spawn(db: Db, every: Duration, options: SweepOptions) -> Result<SweeperHandle> {
    options.batch_values()?;
    if every < MIN_TTL {
        return Err(Error::TtlTooShort {
            ttl: every,
            min: MIN_TTL,
        });
    }
    let (stop, mut stopped) = watch::channel(false);
    let swept = Arc::new(AtomicU64::new(0));

    let counter = swept.clone();
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stopped.wait_for(|s| *s) => return,
                _ = ticks.tick() => {}
            }
            // Not cut off by a stop: a statement cut off may still run in the server
            // (or SQLite's worker thread) after the task has ended. The sweep stops
            // before its next batch instead.
            match sweep_unless(&db, options, Some(&stopped)).await {
                Ok(n) => {
                    counter.fetch_add(n, Ordering::Relaxed);
                    if n > 0 {
                        tracing::debug!(rows = n, "sweeper reclaimed expired locks");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "sweep failed; trying again next interval"),
            }
            if *stopped.borrow() {
                return;
            }
        }
    });
    Ok(SweeperHandle { stop, task, swept })
}

/// A background sweeper started by [`Locker::spawn_sweeper`](crate::Locker::spawn_sweeper).
///
/// Dropping the handle stops the sweeper too, without waiting: between sweeps at once, and
/// a sweep under way before its next batch.
#[derive(Debug)]
#[must_use = "dropping the handle stops the sweeper"]
pub struct SweeperHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    swept: Arc<AtomicU64>,
}

impl SweeperHandle {
    /// Rows reclaimed so far.
    pub fn swept(&self) -> u64 {
        self.swept.load(Ordering::Relaxed)
    }

    /// Stops the sweeper and waits until it has stopped: a sweep in flight stops
    /// before its next batch, once the statement under way has answered, so that
    /// nothing of it happens after this returns (a statement still waiting for a
    /// connection of an exhausted pool is waited for too, at most the pool's acquire
    /// timeout). Returns the rows reclaimed in all.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the sweeper is told to stop before the first await; dropping the future
    /// only stops waiting for it.
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
    /// let sweeper = locker.spawn_sweeper(Duration::from_secs(300), SweepOptions::new())?;
    /// // ... the application runs ...
    /// println!("reclaimed {} rows", sweeper.shutdown().await);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(mut self) -> u64 {
        self.stop.send_replace(true);
        let _ = (&mut self.task).await;
        self.swept()
    }
}

impl Drop for SweeperHandle {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
