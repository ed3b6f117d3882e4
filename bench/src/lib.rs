//! `sqlock bench`: measures the library on the user's own database, beside baselines
//! that do the same work without it, in one run.
//!
//! The run works in a table of its own, which it creates and drops again. Its parts:
//! uncontended acquire+release with several worker counts (library, the same
//! statements sent raw, native locks, Redis), the statements one acquisition and one
//! release send, handoff under contention, the watchdog's statements per tick, and,
//! when asked, latency in a large table. Each measurement is split into rounds that
//! alternate with its baselines, so that a change in the machine's load during the run
//! falls on all of them alike.

mod contended;
mod count;
mod held;
mod parts;
mod raw;
mod report;
mod stats;
mod svg;

use std::time::Duration;

use sqlock::{DbPool, Dialect, Locker, Strategy, TableName};

use crate::args::BenchArgs;
use crate::Failure;

/// The table the benchmark uses when `--table` names the default lock table, which
/// it never touches.
const BENCH_TABLE: &str = "sqlock_bench";

/// Every key the benchmark writes starts with this, so that a table holding other
/// keys is recognised and refused.
pub(crate) const KEY_PREFIX: &str = "bench-";

/// Connections beyond one per worker: the watchdog's renewals, a listener, spares.
const SPARE_CONNECTIONS: u32 = 4;

/// `sqlock bench`: runs the parts asked for, prints the tables, writes the files.
pub(crate) async fn bench(url: &str, table: &TableName, args: BenchArgs) -> Result<i32, Failure> {
    if args.redis_url.is_some() && !cfg!(feature = "redis-baseline") {
        return Err(Failure::Usage(
            "--redis-url needs sqlock built with the redis-baseline feature\nhint: cargo run \
             --release -p sqlock-cli --features redis-baseline -- bench ..."
                .into(),
        ));
    }
    let table = if table.as_str() == sqlock::DEFAULT_TABLE {
        TableName::new(BENCH_TABLE)?
    } else {
        table.clone()
    };
    if !count::install() {
        return Err(Failure::Other(
            "cannot count statements: a tracing subscriber is already installed".into(),
        ));
    }
    let max_workers = args.workers.iter().copied().max().unwrap_or(1);
    let pool_size = max_workers.max(args.waiters + 1) + SPARE_CONNECTIONS;
    let db = crate::connect::connect_sized(url, pool_size).await?;
    let outcome = prepared(&db, &table, args).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), db.close()).await;
    outcome
}

/// Makes the table, runs, and drops the table again whatever happened.
async fn prepared(db: &DbPool, table: &TableName, args: BenchArgs) -> Result<i32, Failure> {
    let dialect = db.dialect();
    let existed = table_exists(db, table).await;
    if existed {
        let others = count_other_keys(db, table).await.map_err(db_failure)?;
        if others > 0 {
            return Err(Failure::Usage(format!(
                "table {table:?} has {others} rows of locks that are not the benchmark's: give \
                 the benchmark a table of its own with --table"
            )));
        }
    }
    let base = Locker::builder(db.clone()).table(table.as_str()).build()?;
    base.create_table().await?;
    let strategies: Vec<Strategy> = if args.strategies.is_empty() {
        vec![Strategy::Lease, Strategy::Insert, Strategy::ForUpdate]
    } else {
        args.strategies.clone()
    }
    .into_iter()
    .filter(|s| dialect != Dialect::Sqlite || *s != Strategy::ForUpdate)
    .collect();
    if strategies.is_empty() {
        return Err(Failure::Usage(
            "SQLite has no row locks: choose the lease or insert strategy".into(),
        ));
    }
    let outcome = parts::run_all(db, table, &base, &strategies, &args).await;
    drop(base);
    let cleaned = if existed {
        exec(db, delete_bench_rows(dialect, table)).await
    } else {
        drop_table(db, table).await
    };
    let report = outcome?;
    if let Err(e) = cleaned {
        eprintln!("sqlock: could not clean up table {table:?}: {e}");
    }
    report::emit(&report, &args)?;
    Ok(0)
}

/// Whether the library can wake waiters by notification on this database
/// (`LockerBuilder::notify_waiters`: PostgreSQL's LISTEN/NOTIFY).
pub(crate) fn notify_available(dialect: Dialect) -> bool {
    dialect == Dialect::Postgres
}

/// A failed statement of the benchmark's own.
pub(crate) fn db_failure(e: sqlx::Error) -> Failure {
    Failure::Other(format!("database error: {e}"))
}

/// Runs `$body` with `$pool` bound to the concrete sqlx pool.
macro_rules! on_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            DbPool::Postgres($pool) => $body,
            DbPool::MySql($pool) => $body,
            DbPool::Sqlite($pool) => $body,
            _ => Err(sqlx::Error::Protocol(
                "a database this tool does not know".into(),
            )),
        }
    };
}

/// Runs one statement of the benchmark's own (no values bound) for its effect.
pub(crate) async fn exec(db: &DbPool, sql: String) -> Result<u64, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(sql);
    on_pool!(db, |pool| sqlx::raw_sql(sql)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
}

/// Runs a query and reads column `col` of every row as text.
pub(crate) async fn texts(
    db: &DbPool,
    sql: String,
    col: usize,
) -> Result<Vec<String>, sqlx::Error> {
    use sqlx::Row;
    let sql = sqlx::AssertSqlSafe(sql);
    on_pool!(db, |pool| {
        let rows = sqlx::query(sql).fetch_all(pool).await?;
        rows.iter().map(|r| r.try_get::<String, _>(col)).collect()
    })
}

/// Runs a query whose first row's first column is a number.
pub(crate) async fn number(db: &DbPool, sql: String) -> Result<i64, sqlx::Error> {
    use sqlx::Row;
    let sql = sqlx::AssertSqlSafe(sql);
    on_pool!(db, |pool| sqlx::query(sql)
        .fetch_one(pool)
        .await
        .and_then(|r| r.try_get::<i64, _>(0)))
}

/// The table's name quoted for the dialect (it is a validated plain identifier).
pub(crate) fn quoted(dialect: Dialect, table: &TableName) -> String {
    match dialect {
        Dialect::MySql => format!("`{table}`"),
        _ => format!("\"{table}\""),
    }
}

pub(crate) async fn table_exists(db: &DbPool, table: &TableName) -> bool {
    let sql = format!("SELECT COUNT(*) FROM {}", quoted(db.dialect(), table));
    number(db, sql).await.is_ok()
}

async fn count_other_keys(db: &DbPool, table: &TableName) -> Result<i64, sqlx::Error> {
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE lock_key NOT LIKE '{KEY_PREFIX}%'",
        quoted(db.dialect(), table)
    );
    number(db, sql).await
}

pub(crate) fn delete_bench_rows(dialect: Dialect, table: &TableName) -> String {
    format!(
        "DELETE FROM {} WHERE lock_key LIKE '{KEY_PREFIX}%'",
        quoted(dialect, table)
    )
}

/// Drops the table and what its DDL made beside it.
pub(crate) async fn drop_table(db: &DbPool, t: &TableName) -> Result<u64, sqlx::Error> {
    let statements = match db.dialect() {
        Dialect::Postgres => vec![
            format!(r#"DROP TABLE IF EXISTS "{t}""#),
            format!(r#"DROP SEQUENCE IF EXISTS "{t}_fence_seq""#),
        ],
        Dialect::MySql => vec![
            format!("DROP TABLE IF EXISTS `{t}`"),
            format!("DROP TABLE IF EXISTS `{t}_fence`"),
            format!("DROP SEQUENCE IF EXISTS `{t}_fence_seq`"),
        ],
        _ => vec![
            format!(r#"DROP TRIGGER IF EXISTS "{t}_fence_floor""#),
            format!(r#"DROP TABLE IF EXISTS "{t}""#),
            format!(r#"DROP TABLE IF EXISTS "{t}_fence""#),
        ],
    };
    for s in statements {
        exec(db, s).await?;
    }
    Ok(0)
}
