//! Many owners on few keys: the recorded history shows no two holds of a key overlap
//! and tokens rise in grant order.
//!
//! 3 independent pools (as 3 processes would have) x 16 tasks, each task a handle of
//! its own, on 2 keys, until at least 2,000 grants were recorded per backend.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use common::contention::{run, Workload};
use sqlock::{Dialect, Strategy};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::Executor;

const POOLS: usize = 3;

const LEASE: Workload = Workload {
    strategy: Strategy::Lease,
    tasks_per_pool: 16,
    keys: 2,
    grants: 2_000,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_two_holds_overlap_and_tokens_rise() -> anyhow::Result<()> {
    for b in common::backends("contention").await {
        b.fresh_table().await?;
        let mut pools = Vec::new();
        for _ in 0..POOLS {
            pools.push(b.pool().await?);
        }
        run(&b, pools, LEASE).await?;
    }
    Ok(())
}

/// The same under SERIALIZABLE isolation (as ShedLock runs its suite again): the
/// servers then abort more statements with serialization failures, which sqlock must
/// retry as contention, never surface and never take as a grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_overlap_under_serializable_isolation() -> anyhow::Result<()> {
    for b in common::servers("contention_serial").await {
        b.fresh_table().await?;
        let mut pools = Vec::new();
        for _ in 0..POOLS {
            let pool: sqlock::DbPool = match b.dialect {
                Dialect::Postgres => PgPoolOptions::new()
                    .max_connections(8)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            conn.execute("SET default_transaction_isolation = 'serializable'")
                                .await?;
                            Ok(())
                        })
                    })
                    .connect(&common::postgres_url())
                    .await?
                    .into(),
                _ => MySqlPoolOptions::new()
                    .max_connections(8)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                                .await?;
                            Ok(())
                        })
                    })
                    .connect(&common::mysql_url())
                    .await?
                    .into(),
            };
            pools.push(pool);
        }
        let quarter = Workload {
            grants: LEASE.grants / 4,
            ..LEASE
        };
        run(&b, pools, quarter).await?;
    }
    Ok(())
}
