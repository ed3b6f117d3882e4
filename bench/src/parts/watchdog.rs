//! Leases held rather than cycled: the watchdog's renewals of many leases, and
//! acquisition in a large table.

use std::time::{Duration, Instant};

use sqlock::{DbPool, Dialect, LockGuard, Locker, Strategy, TableName};
use tokio::task::JoinSet;

use super::count;
use super::parts::{Progress, ScaleRun, WatchdogRun, TTL};
use super::raw::{self, RawStatements, Values};
use super::stats::Samples;
use super::{db_failure, KEY_PREFIX};
use crate::args::BenchArgs;
use crate::Failure;

/// The watchdog part's TTL: renewals every second (a third of it).
const WATCHDOG_TTL: Duration = Duration::from_secs(3);

/// How long the watchdog part counts ticks once every lease is held.
const WATCHDOG_WINDOW: Duration = Duration::from_millis(3_500);

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

/// Rows in the small table of the scale part.
const SMALL_ROWS: u64 = 1_000;

/// Rows per statement when the scale part fills a table.
const FILL_CHUNK: u64 = 100_000;

/// Takes `keys` on one handle with a few tasks at once.
async fn take_all(locker: &Locker, keys: Vec<String>) -> Result<Vec<LockGuard>, Failure> {
    let mut set = JoinSet::new();
    let per = keys.len().div_ceil(tasks(locker.dialect())).max(1);
    for chunk in keys.chunks(per) {
        let (locker, chunk) = (locker.clone(), chunk.to_vec());
        set.spawn(async move {
            let mut guards = Vec::with_capacity(chunk.len());
            for k in chunk {
                match locker.try_acquire(&k).await? {
                    Some(g) => guards.push(g),
                    None => return Err(Failure::Other(format!("lock {k:?} was busy"))),
                }
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
        renew_mean_us: client.mean_micros("update"),
        acquire_secs,
    })
}

/// Acquisition latency in a table of 1,000 rows and in one of `rows`, alternating.
pub(crate) async fn scale(
    db: &DbPool,
    table: &TableName,
    rows: u64,
    args: &BenchArgs,
    progress: &Progress,
) -> Result<ScaleRun, Failure> {
    let big_name = format!("{table}_big");
    let big_table = TableName::new(&big_name)?;
    let small = Locker::builder(db.clone())
        .table(table.as_str())
        .ttl(TTL)
        .build()?;
    let big = Locker::builder(db.clone())
        .table(big_name.as_str())
        .ttl(TTL)
        .build()?;
    let existed = super::table_exists(db, &big_table).await;
    big.create_table().await?;
    let outcome = scale_in(db, (&small, &big), rows, args, progress).await;
    let cleaned = if existed {
        super::exec(db, super::delete_bench_rows(db.dialect(), &big_table)).await
    } else {
        super::drop_table(db, &big_table).await
    };
    let run = outcome?;
    cleaned.map_err(db_failure)?;
    Ok(run)
}

async fn scale_in(
    db: &DbPool,
    (small, big): (&Locker, &Locker),
    rows: u64,
    args: &BenchArgs,
    progress: &Progress,
) -> Result<ScaleRun, Failure> {
    let started = Instant::now();
    progress.note(&format!("scale: filling {SMALL_ROWS} rows"));
    fill(db, small.table(), 1, SMALL_ROWS)
        .await
        .map_err(|e| fill_failure(db.dialect(), e))?;
    let mut from = 1;
    while from <= rows {
        let to = (from + FILL_CHUNK - 1).min(rows);
        progress.note(&format!("scale: filling rows {from}..{to} of {rows}"));
        fill(db, big.table(), from, to)
            .await
            .map_err(|e| fill_failure(db.dialect(), e))?;
        from = to + 1;
    }
    for t in [small.table(), big.table()] {
        super::exec(db, analyze(db.dialect(), t))
            .await
            .map_err(db_failure)?;
    }
    let fill_secs = started.elapsed().as_secs_f64();
    let slice = args.duration / args.rounds;
    let (mut s, mut b) = (Samples::default(), Samples::default());
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for round in 0..args.rounds {
        progress.note(&format!("scale: round {}/{}", round + 1, args.rounds));
        for (locker, n, into) in [(small, SMALL_ROWS, &mut s), (big, rows, &mut b)] {
            let deadline = Instant::now() + slice;
            while Instant::now() < deadline {
                // A random row of the table each time, as a large table is used.
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let key = format!("{KEY_PREFIX}fill-{}", 1 + seed % n);
                let t = Instant::now();
                if let Some(g) = locker.try_acquire(&key).await? {
                    into.push(t.elapsed());
                    g.release().await?;
                }
            }
        }
    }
    let raw_stmts = RawStatements::new(db.dialect(), big.table());
    let values = Values {
        key: format!("{KEY_PREFIX}fill-{}", rows / 2),
        owner: big.owner().to_string(),
        strategy: Strategy::Lease,
        ttl_us: TTL.as_micros() as i64,
        token: 1,
    };
    let mut explain = Vec::new();
    for (name, st) in [
        ("lease_acquire", &raw_stmts.acquire),
        ("lease_release", &raw_stmts.lease_release),
    ] {
        let lines = match raw::explain(db, st, &values).await {
            Ok(lines) => lines,
            Err(e) => vec![format!("(no plan: {e})")],
        };
        explain.push((name.to_owned(), lines));
    }
    Ok(ScaleRun {
        small_rows: SMALL_ROWS,
        big_rows: rows,
        small: s,
        big: b,
        fill_secs,
        explain,
    })
}

/// Inserts free lease rows `KEY_PREFIX fill-from` to `fill-to` in one statement.
async fn fill(db: &DbPool, table: &TableName, from: u64, to: u64) -> Result<u64, sqlx::Error> {
    let cols = "(lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, \
                lock_duration, expires_at, hold_count, fencing_token)";
    let t = super::quoted(db.dialect(), table);
    let p = KEY_PREFIX;
    let sql = match db.dialect() {
        Dialect::Postgres => format!(
            "INSERT INTO {t} {cols} SELECT '{p}fill-' || g, '', 'lease', FALSE, now(), now(), 0, \
             now(), 0, g FROM generate_series({from}, {to}) AS g ON CONFLICT DO NOTHING"
        ),
        Dialect::MySql => format!(
            "INSERT IGNORE INTO {t} {cols} SELECT CONCAT('{p}fill-', seq), '', 'lease', FALSE, \
             UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 0, UTC_TIMESTAMP(6), 0, seq \
             FROM seq_{from}_to_{to}"
        ),
        _ => format!(
            "WITH RECURSIVE g(n) AS (SELECT {from} UNION ALL SELECT n + 1 FROM g WHERE n < {to}) \
             INSERT OR IGNORE INTO {t} {cols} SELECT '{p}fill-' || n, '', 'lease', 0, 0, 0, 0, 0, \
             0, n FROM g"
        ),
    };
    super::exec(db, sql).await
}

/// A failed fill, with a hint where MySQL lacks what the fill uses on MariaDB.
fn fill_failure(dialect: Dialect, e: sqlx::Error) -> Failure {
    match dialect {
        Dialect::MySql => Failure::Other(format!(
            "cannot fill the scale part's table: {e}\nhint: the fill uses MariaDB's SEQUENCE \
             engine (seq_1_to_N); on other servers leave out --scale-rows"
        )),
        _ => db_failure(e),
    }
}

fn analyze(dialect: Dialect, table: &TableName) -> String {
    match dialect {
        Dialect::MySql => format!("ANALYZE TABLE `{table}`"),
        _ => format!("ANALYZE \"{table}\""),
    }
}
