//! One durable flush per acquire+release cycle on PostgreSQL: an acquisition waits for
//! its commit to reach disk, a release does not (`synchronous_commit` is off for the
//! release's own transaction, set inside its statement). Counted with the server's own
//! `pg_stat_wal.wal_sync` over many cycles of the lease and the insert strategies, with
//! and without release wake-ups; the counts are printed, and a cycle must make fewer
//! than one and a half flushes on average (two, when a release waited for its own).
//!
//! The only test of its binary, so that no other test of the suite writes to the
//! server while it counts.

mod common;

use std::time::Duration;

use sqlock::{DbPool, Dialect, Locker, Strategy};
use sqlx::postgres::PgPoolOptions;

const CYCLES: i64 = 300;

/// The server's count of WAL syncs, with this session's own pending counts flushed to
/// the shared statistics first (PostgreSQL 15 and later); `None` on an older server.
async fn wal_syncs(conn: &mut sqlx::PgConnection) -> anyhow::Result<Option<i64>> {
    let forced: Result<(), _> = sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .map(drop);
    if forced.is_err() {
        return Ok(None);
    }
    let n: i64 = sqlx::query_scalar("SELECT wal_sync FROM pg_stat_wal")
        .fetch_one(&mut *conn)
        .await?;
    Ok(Some(n))
}

#[tokio::test]
async fn a_cycle_waits_for_one_flush() -> anyhow::Result<()> {
    for b in common::backends_of("durable_flush", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        // One connection, never pinged: every statement of the cycles, and the counts,
        // come from one backend process.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect(b.url())
            .await?;
        for (strategy, notify) in [
            (Strategy::Lease, false),
            (Strategy::Insert, false),
            (Strategy::Lease, true),
        ] {
            let locker = Locker::builder(DbPool::from(pool.clone()))
                .table(&b.table)
                .strategy(strategy)
                .notify_waiters(notify)
                .auto_renew(false)
                .ttl(Duration::from_secs(30))
                .build()?;
            let key = format!("flush-{strategy}-{notify}");
            // Warm: statements prepared, the row there.
            for _ in 0..5 {
                locker.acquire(&key).await?.release().await?;
            }
            let mut conn = pool.acquire().await?;
            let Some(before) = wal_syncs(&mut conn).await? else {
                eprintln!(
                    "NOTE: the server is older than PostgreSQL 15 (no \
                     pg_stat_force_next_flush): durable flushes not counted"
                );
                return Ok(());
            };
            drop(conn);
            for _ in 0..CYCLES {
                assert!(locker.acquire(&key).await?.release().await?);
            }
            let mut conn = pool.acquire().await?;
            let after = wal_syncs(&mut conn).await?.unwrap_or(before);
            let per_cycle = (after - before) as f64 / CYCLES as f64;
            eprintln!(
                "{strategy} (wake-ups {notify}): {} WAL syncs in {CYCLES} cycles, {per_cycle:.2} \
                 per acquire+release",
                after - before
            );
            assert!(
                (after - before) * 2 < CYCLES * 3,
                "{strategy}: {per_cycle:.2} durable flushes per cycle, expected about one"
            );
        }
        pool.close().await;
    }
    Ok(())
}
