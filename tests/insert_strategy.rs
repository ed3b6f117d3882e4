//! The unique-insert strategy: a free lock is no row at all; contention, reentrancy,
//! takeover of an expired row, and MariaDB's duplicate-key deadlocks kept from callers.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use common::contention::{run, Workload};
use sqlock::Strategy;

async fn rows(b: &common::Backend, pool: &sqlock::DbPool) -> anyhow::Result<i64> {
    b.scalar(pool, &format!("SELECT COUNT(*) FROM {}", b.quoted()))
        .await
}

#[tokio::test]
async fn a_free_lock_is_no_row() -> anyhow::Result<()> {
    for b in common::backends("insert_basic").await {
        b.fresh_table().await?;
        let a = b.builder().await?.strategy(Strategy::Insert).build()?;
        let other = b.builder().await?.strategy(Strategy::Insert).build()?;
        assert_eq!(rows(&b, a.pool()).await?, 0);
        let g = a.try_acquire("k").await?.expect("k");
        assert_eq!(g.strategy(), Strategy::Insert);
        assert_eq!(rows(&b, a.pool()).await?, 1, "{}", b.dialect);
        assert!(other.try_acquire("k").await?.is_none(), "{}", b.dialect);
        let token = g.fencing_token();
        assert!(g.release().await?);
        assert_eq!(
            rows(&b, a.pool()).await?,
            0,
            "{}: released means deleted",
            b.dialect
        );
        let next = other.try_acquire("k").await?.expect("free");
        assert!(
            next.fencing_token() > token,
            "{}: tokens rise although the row was deleted",
            b.dialect
        );
        assert!(next.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn reentrant_holds_keep_the_row_until_the_last_release() -> anyhow::Result<()> {
    for b in common::backends("insert_reentrant").await {
        b.fresh_table().await?;
        let a = b.builder().await?.strategy(Strategy::Insert).build()?;
        let first = a.try_acquire("k").await?.expect("k");
        let second = a.try_acquire("k").await?.expect("again");
        assert_eq!(second.hold_count(), 2);
        assert_eq!(first.fencing_token(), second.fencing_token());
        assert!(second.release().await?);
        assert_eq!(rows(&b, a.pool()).await?, 1, "{}", b.dialect);
        assert!(first.release().await?);
        assert_eq!(rows(&b, a.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test]
async fn an_expired_row_is_taken_over_inline() -> anyhow::Result<()> {
    for b in common::backends("insert_expired").await {
        b.fresh_table().await?;
        let a = b.builder().await?.strategy(Strategy::Insert).build()?;
        let other = b.builder().await?.strategy(Strategy::Insert).build()?;
        let old = a.try_acquire("k").await?.expect("k");
        b.expire(a.pool(), "k").await?;
        let new = other.try_acquire("k").await?.expect("expired row is free");
        assert!(new.fencing_token() > old.fencing_token());
        assert!(!old.release().await?, "{}", b.dialect);
        assert_eq!(
            rows(&b, a.pool()).await?,
            1,
            "{}: the old holder deleted nothing",
            b.dialect
        );
        assert!(new.release().await?);
        assert_eq!(rows(&b, a.pool()).await?, 0);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_records_no_overlap() -> anyhow::Result<()> {
    for b in common::backends("insert_contention").await {
        b.fresh_table().await?;
        let mut pools = Vec::new();
        for _ in 0..3 {
            pools.push(b.pool().await?);
        }
        let w = Workload {
            strategy: Strategy::Insert,
            tasks_per_pool: 16,
            keys: 2,
            grants: 2_000,
        };
        run(&b, pools, w).await?;
        assert_eq!(
            rows(&b, &b.pool().await?).await?,
            0,
            "{}: rows left behind",
            b.dialect
        );
    }
    Ok(())
}

/// 32 contenders on one hot key: on MariaDB the insert-and-delete pattern deadlocks
/// (error 1213) under contention; none of it may reach a caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_contenders_on_one_key_see_no_error() -> anyhow::Result<()> {
    for b in common::backends("insert_hot").await {
        b.fresh_table().await?;
        let pools = vec![b.pool().await?, b.pool().await?];
        let w = Workload {
            strategy: Strategy::Insert,
            tasks_per_pool: 16,
            keys: 1,
            grants: 1_000,
        };
        run(&b, pools, w).await?;
    }
    Ok(())
}

#[tokio::test]
async fn renewed_insert_lock_outlives_its_ttl_and_sweeps_clean() -> anyhow::Result<()> {
    for b in common::backends("insert_renew").await {
        b.fresh_table().await?;
        let a = b.builder().await?.strategy(Strategy::Insert).build()?;
        let other = b.builder().await?.strategy(Strategy::Insert).build()?;
        // The TTL leaves the watchdog (a tick every third of it) ample slack on a busy
        // machine; the wait below ends when the first expiry has passed on the
        // database clock, however long that takes.
        let g = a
            .lock("k")
            .ttl(Duration::from_secs(2))
            .try_acquire()
            .await?
            .expect("k");
        let first_expiry = g.expires_at();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let info = a.lock_info("k").await?.expect("held");
            let db_now = info.expires_at - chrono::Duration::from_std(info.expires_in)?;
            if db_now > first_expiry {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: the TTL never passed",
                b.dialect
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            other.try_acquire("k").await?.is_none(),
            "{}: renewed",
            b.dialect
        );
        assert!(!g.is_lost());
        // A holder that vanished leaves an expired row; the sweeper reclaims it. The
        // TTL is well above a loaded machine's round trip (a grant whose answer outran
        // it would be given back), and the sweep waits until the database clock says
        // the row expired, however long that takes.
        let dead = a
            .lock("dead")
            .ttl(Duration::from_secs(1))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("dead");
        std::mem::forget(dead); // as if the process died: no release
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while a.lock_info("dead").await?.is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: the dead lock never expired",
                b.dialect
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            a.sweep(sqlock::SweepOptions::new()).await?,
            1,
            "{}",
            b.dialect
        );
        assert!(g.release().await?);
        assert_eq!(rows(&b, a.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}
