//! Read-write locks beside the mutex: acquire+release cycles per second of the read
//! side of one read-write lock, and of the plain lock on one key, with 1 and 8
//! workers (each on a handle of its own). Readers share, so the read side's rate can
//! grow with workers where the mutex's cannot.

use std::time::{Duration, Instant};

use sqlock::{DbPool, Locker, TableName};
use tokio::task::JoinSet;

use crate::args::BenchArgs;
use crate::failure::Failure;
use crate::figures::RwRun;
use crate::progress::Progress;
use crate::table::{KEY_PREFIX, TTL};

/// The worker counts measured.
pub(crate) const WORKERS: [usize; 2] = [1, 8];

/// Measures each side for each worker count, `args.duration` each.
pub(crate) async fn rwlock(
    db: &DbPool,
    table: &TableName,
    args: &BenchArgs,
    progress: &Progress,
) -> Result<Vec<RwRun>, Failure> {
    let base = Locker::builder(db.clone())
        .table(table.as_str())
        .ttl(TTL)
        .poll_interval(args.poll, args.poll)
        .build()?;
    let mut runs = Vec::new();
    for workers in WORKERS {
        for read in [true, false] {
            let what = if read { "read lock" } else { "mutex" };
            progress.note(&format!("rwlock: {what}, {workers} workers"));
            let cycles = cycles(&base, workers, read, args.duration).await?;
            runs.push(RwRun {
                side: if read { "read" } else { "mutex" },
                workers,
                cycles,
                secs: args.duration.as_secs_f64(),
            });
        }
    }
    Ok(runs)
}

/// Cycles of `workers` handles in `window`: each takes the read side of one lock (or
/// the plain lock on one key) and gives it back, again and again.
async fn cycles(
    base: &Locker,
    workers: usize,
    read: bool,
    window: Duration,
) -> Result<u64, Failure> {
    let key = format!("{KEY_PREFIX}rw");
    let deadline = Instant::now() + window;
    let mut set = JoinSet::new();
    for _ in 0..workers {
        let (locker, key) = (base.new_handle(), key.clone());
        set.spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                let guard = if read {
                    locker.read_lock(&key).acquire_timeout(left).await
                } else {
                    locker.acquire_timeout(&key, left).await
                };
                match guard {
                    Ok(g) => {
                        g.release().await?;
                        n += 1;
                    }
                    // The window is over: a wait that ran out, or one that never had
                    // a connection of the pool the other workers share (a read's wait
                    // says so as a lock's does).
                    Err(sqlock::Error::Timeout { .. } | sqlock::Error::PoolExhausted) => break,
                    Err(e) => return Err(e),
                }
            }
            Ok(n)
        });
    }
    let mut total = 0;
    while let Some(done) = set.join_next().await {
        total += done
            .map_err(|e| Failure::Other(format!("a worker panicked: {e}")))?
            .map_err(Failure::from)?;
    }
    Ok(total)
}
