//! Scale: acquisition latency in a large table against a small one, and the plans
//! of the lease statements there.

use std::time::Instant;

use sqlock::{DbPool, Dialect, Locker, Strategy, TableName};

use crate::args::BenchArgs;
use crate::baseline::raw;
use crate::baseline::statements::{RawStatements, Values};
use crate::db::{exec, quoted};
use crate::failure::{db_failure, Failure};
use crate::figures::ScaleRun;
use crate::progress::Progress;
use crate::stats::Samples;
use crate::table::{self, KEY_PREFIX, TTL};

/// Rows in the small table of the scale part.
const SMALL_ROWS: u64 = 1_000;

/// Rows per statement when the scale part fills a table.
const FILL_CHUNK: u64 = 100_000;

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
    let existed = table::exists(db, &big_table).await;
    big.create_table().await?;
    let outcome = scale_in(db, (&small, &big), rows, args, progress).await;
    let cleaned = table::clean_up(db, &big_table, existed).await;
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
        exec(db, analyze(db.dialect(), t))
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
    let raw_stmts = RawStatements::new(db.dialect(), big.table())?;
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
    let t = quoted(db.dialect(), table);
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
    exec(db, sql).await
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
