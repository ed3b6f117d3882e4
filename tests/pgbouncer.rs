//! Behind PgBouncer in transaction pooling mode (`scripts/ha.sh pgbouncer up`, port
//! 6433, in front of the main PostgreSQL): with `transaction_pooling(true)` every
//! strategy keeps mutual exclusion under contention from several pools, and without it
//! sqlx's named prepared statements fail there, so the setting is needed.

mod common;

use std::time::Duration;

use common::contention::{self, Workload};
use sqlock::{DbPool, Dialect, Error, Locker, Strategy};
use sqlx::postgres::PgPoolOptions;

const PGBOUNCER_URL: &str = "postgres://postgres@127.0.0.1:6433/test";

async fn pgbouncer(name: &str) -> Vec<common::Backend> {
    common::ha_server(
        name,
        Dialect::Postgres,
        "SQLOCK_TEST_PGBOUNCER_URL",
        PGBOUNCER_URL,
    )
    .await
}

/// A pool through PgBouncer, as an application would have: the pool's own pings off,
/// as the documentation advises for lock-heavy pools.
async fn pool(b: &common::Backend, size: u32) -> anyhow::Result<DbPool> {
    Ok(PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .connect(b.url())
        .await?
        .into())
}

async fn contention(name: &str, strategy: Strategy) -> anyhow::Result<()> {
    for b in pgbouncer(name).await {
        b.fresh_table().await?;
        let mut pools = Vec::new();
        for _ in 0..3 {
            pools.push(pool(&b, 4).await?);
        }
        let w = Workload {
            strategy,
            tasks_per_pool: 3,
            keys: 2,
            grants: 150,
        };
        contention::run_with(&b, pools, w, |builder| builder.transaction_pooling(true)).await?;
    }
    Ok(())
}

#[tokio::test]
async fn lease_contention_through_pgbouncer() -> anyhow::Result<()> {
    contention("pgb_lease", Strategy::Lease).await
}

#[tokio::test]
async fn insert_contention_through_pgbouncer() -> anyhow::Result<()> {
    contention("pgb_insert", Strategy::Insert).await
}

#[tokio::test]
async fn for_update_contention_through_pgbouncer() -> anyhow::Result<()> {
    contention("pgb_for_update", Strategy::ForUpdate).await
}

#[tokio::test]
async fn renewal_extension_and_listing_through_pgbouncer() -> anyhow::Result<()> {
    for b in pgbouncer("pgb_watchdog").await {
        b.fresh_table().await?;
        let locker = Locker::builder(pool(&b, 4).await?)
            .table(&b.table)
            .transaction_pooling(true)
            .ttl(Duration::from_millis(1_500))
            .build()?;
        let other = locker.new_handle();
        let mut guard = locker.acquire("renewed").await?;
        // Several TTLs: only the watchdog's renewals keep it.
        // (renewed every 500 ms; a tick may be late by a second on a busy machine).
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert!(!guard.is_lost(), "renewals through PgBouncer failed");
        assert!(other.try_acquire("renewed").await?.is_none());
        assert!(locker.watchdog_stats().renewed >= 3);
        assert!(guard.extend(Duration::from_secs(5)).await?);
        let listed = locker.list().await?;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].fencing_token, guard.fencing_token());
        assert!(guard.release().await?);
        assert!(other.force_release_now("nothing-held").await.is_ok());
        assert!(other.force_release("nothing-held").await?.is_none());
    }
    Ok(())
}

/// The plain mode (sqlx's named, cached prepared statements) breaks behind a
/// transaction-pooling PgBouncer: each client connection names its statements
/// `sqlx_s_1`, `sqlx_s_2`, ... and PgBouncer hands the server connections round, so a
/// statement is soon prepared twice on one server connection, or looked for on one
/// where it never was.
#[tokio::test]
async fn plain_statements_fail_through_pgbouncer() -> anyhow::Result<()> {
    for b in pgbouncer("pgb_plain").await {
        b.fresh_table().await?;
        let mut lockers = Vec::new();
        for _ in 0..4 {
            lockers.push(
                Locker::builder(pool(&b, 1).await?)
                    .table(&b.table)
                    .build()?,
            );
        }
        let mut failure = None;
        'rounds: for round in 0..100 {
            for locker in &lockers {
                let outcome = async {
                    let key = format!("plain-{round}");
                    if let Some(guard) = locker.try_acquire(&key).await? {
                        guard.release().await?;
                    }
                    Ok::<_, Error>(())
                }
                .await;
                if let Err(e) = outcome {
                    failure = Some(e);
                    break 'rounds;
                }
            }
        }
        let Some(e) = failure else {
            panic!("named prepared statements worked through PgBouncer in transaction mode");
        };
        let Error::Database(source) = &e else {
            panic!("not a database error: {e:?}");
        };
        let code = source
            .as_database_error()
            .and_then(|d| d.code())
            .map(|c| c.into_owned());
        // 42P05 duplicate_prepared_statement, 26000 invalid_sql_statement_name
        // ("prepared statement does not exist"), 08P01 a protocol violation.
        assert!(
            matches!(code.as_deref(), Some("42P05" | "26000" | "08P01")),
            "unexpected failure: {source} ({code:?})"
        );
        println!("plain mode through PgBouncer failed as expected: {source}");
    }
    Ok(())
}
