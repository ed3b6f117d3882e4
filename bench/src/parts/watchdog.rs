//! The watchdog: one handle holds many leases while its renewals are counted.

use std::time::{Duration, Instant};

use sqlock::{Dialect, LockGuard, Locker};
use tokio::task::JoinSet;

use crate::count;
use crate::failure::Failure;
use crate::figures::WatchdogRun;
use crate::progress::Progress;
use crate::table::KEY_PREFIX;

/// The watchdog part's TTL: renewals every second (a third of it).
const WATCHDOG_TTL: Duration = Duration::from_secs(3);

/// How long the watchdog part counts ticks once every lease is held.
const WATCHDOG_WINDOW: Duration = Duration::from_millis(3_500);

/// How long taking one of the watchdog part's leases may wait when it is reported
/// busy.
const TAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Tasks that take or give back the watchdog part's leases at once.
const WATCHDOG_TASKS: usize = 8;

/// Tasks that take or give back leases at once on SQLite. A SQLite database has one
/// writer at a time: more tasks only queue in its busy handler, which sleeps in steps
/// of up to 100 ms and makes taking 10,000 leases several times slower than one
/// task does.
const SQLITE_TASKS: usize = 1;

/// How many tasks take or give back many leases at once on `dialect`.
fn tasks(dialect: Dialect) -> usize {
    if dialect == Dialect::Sqlite {
        SQLITE_TASKS
    } else {
        WATCHDOG_TASKS
    }
}

/// Takes `keys` on one handle with a few tasks at once.
async fn take_all(locker: &Locker, keys: Vec<String>) -> Result<Vec<LockGuard>, Failure> {
    let mut set = JoinSet::new();
    let per = keys.len().div_ceil(tasks(locker.dialect())).max(1);
    for chunk in keys.chunks(per) {
        let (locker, chunk) = (locker.clone(), chunk.to_vec());
        set.spawn(async move {
            let mut guards = Vec::with_capacity(chunk.len());
            for k in chunk {
                let guard = match locker.try_acquire(&k).await? {
                    Some(g) => g,
                    // Nobody else holds the benchmark's keys, but on MariaDB an attempt
                    // that finds the key's fence bucket locked by another task's
                    // acquisition counts as contention, and try_acquire reports the
                    // key busy once its few quick retries are spent: wait for it.
                    None => match locker.acquire_timeout(&k, TAKE_TIMEOUT).await {
                        Ok(g) => g,
                        Err(sqlock::Error::Timeout { .. }) => {
                            return Err(Failure::Other(format!(
                                "lock {k:?} was busy for {TAKE_TIMEOUT:?}"
                            )))
                        }
                        Err(e) => return Err(e.into()),
                    },
                };
                guards.push(guard);
            }
            Ok::<_, Failure>(guards)
        });
    }
    let mut all = Vec::with_capacity(keys.len());
    while let Some(joined) = set.join_next().await {
        all.extend(joined.map_err(|e| Failure::Other(format!("a task failed: {e}")))??);
    }
    Ok(all)
}

/// Gives `guards` back with a few tasks at once.
async fn give_all(dialect: Dialect, guards: Vec<LockGuard>) -> Result<(), Failure> {
    let per = guards.len().div_ceil(tasks(dialect)).max(1);
    let mut set = JoinSet::new();
    let mut guards = guards;
    while !guards.is_empty() {
        let chunk: Vec<LockGuard> = guards.drain(..per.min(guards.len())).collect();
        set.spawn(async move {
            for g in chunk {
                g.release().await?;
            }
            Ok::<_, Failure>(())
        });
    }
    while let Some(joined) = set.join_next().await {
        joined.map_err(|e| Failure::Other(format!("a task failed: {e}")))??;
    }
    Ok(())
}

/// One handle holds `leases` leases while its watchdog's ticks are counted.
pub(crate) async fn watchdog(
    base: &Locker,
    leases: u32,
    progress: &Progress,
) -> Result<WatchdogRun, Failure> {
    let locker = Locker::builder(base.pool().clone())
        .table(base.table().as_str())
        .ttl(WATCHDOG_TTL)
        .build()?;
    progress.note(&format!("watchdog: taking {leases} leases on one handle"));
    let keys: Vec<String> = (0..leases).map(|i| format!("{KEY_PREFIX}wd-{i}")).collect();
    let started = Instant::now();
    let guards = take_all(&locker, keys).await?;
    let acquire_secs = started.elapsed().as_secs_f64();
    progress.note(&format!(
        "watchdog: holding {leases} leases for {:.1}s (renewed every {:?})",
        WATCHDOG_WINDOW.as_secs_f64(),
        WATCHDOG_TTL / 3
    ));
    let (s0, c0) = (locker.watchdog_stats(), count::snapshot());
    tokio::time::sleep(WATCHDOG_WINDOW).await;
    let (s1, c1) = (locker.watchdog_stats(), count::snapshot());
    let client = c1.since(&c0);
    progress.note("watchdog: releasing");
    give_all(locker.dialect(), guards).await?;
    Ok(WatchdogRun {
        leases: u64::from(leases),
        ticks: s1.ticks - s0.ticks,
        statements: s1.statements - s0.statements,
        renewed: s1.renewed - s0.renewed,
        failed_ticks: s1.failed_ticks - s0.failed_ticks,
        client_statements: client.total(),
        // Every statement of the window, not the UPDATEs alone: MariaDB's renewal
        // opens with SET STATEMENT, which the counter files under "other".
        renew_mean_us: client.mean_micros(),
        acquire_secs,
    })
}
