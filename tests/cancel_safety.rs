//! Dropping acquisition futures at any point leaves no lock held and no connection
//! taken; deadlines bound waits. For the lease, the insert and the fair strategy (the
//! for-update strategy's own cancel test is in for_update.rs).
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use common::eventually;

use std::time::Duration;

use sqlock::Strategy;

/// The strategies whose acquisition these tests cut off.
const STRATEGIES: [Strategy; 3] = [Strategy::Lease, Strategy::Insert, Strategy::Fair];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_cut_off_by_timeouts_leaks_nothing() -> anyhow::Result<()> {
    for (b, strategy) in with_strategies(common::backends("cancel_loop").await) {
        b.fresh_table().await?;
        let pool = b.pool_with(4).await?;
        let locker = sqlock::Locker::builder(pool.clone())
            .table(&b.table)
            .strategy(strategy)
            .ttl(Duration::from_secs(600)) // only a release can free these rows in time
            .poll_interval(Duration::from_micros(200), Duration::from_millis(2))
            .build()?;
        let holder = b.builder().await?.strategy(strategy).build()?;
        let mut completed = 0;
        for i in 0..300u64 {
            let key = format!("k{}", i % 5);
            // A contended key now and then, so that some futures are cut off while waiting.
            let blocker = if i % 7 == 0 {
                holder.try_acquire(&key).await?
            } else {
                None
            };
            let cut = Duration::from_micros(50 + (i * 137) % 3000);
            if let Ok(g) = tokio::time::timeout(cut, locker.acquire(&key)).await {
                completed += 1;
                drop(g?);
            }
            if let Some(g) = blocker {
                g.release().await?;
            }
        }
        let clean = eventually(|| {
            let (b, pool) = (&b, &pool);
            async move { Ok(b.held_rows(pool).await? == 0) }
        })
        .await?;
        assert!(
            clean,
            "{} {strategy}: a lock stayed held after its acquire was cut off",
            b.dialect
        );
        // A fair waiter cut off leaves the queue too.
        let queue = match b.dialect {
            sqlock::Dialect::MySql => format!("`{}_queue`", b.table),
            _ => format!("\"{}_queue\"", b.table),
        };
        let left = eventually(|| {
            let (b, pool, queue) = (&b, &pool, &queue);
            async move {
                Ok(b.scalar(pool, &format!("SELECT COUNT(*) FROM {queue}"))
                    .await?
                    == 0)
            }
        })
        .await?;
        assert!(
            left,
            "{} {strategy}: a cut-off waiter stayed queued",
            b.dialect
        );
        let idle = eventually(|| {
            let pool = pool.clone();
            async move { Ok(pool_is_idle(&pool)) }
        })
        .await?;
        assert!(
            idle,
            "{} {strategy}: a connection was not returned to the pool",
            b.dialect
        );
        // And the pool still works.
        let g = locker
            .try_acquire("after")
            .await?
            .expect("the pool is usable");
        assert!(g.release().await?);
        println!(
            "{} {strategy}: 300 acquisitions cut off at random ({completed} completed), table \
             and pool clean",
            b.dialect
        );
    }
    Ok(())
}

/// Each backend once per strategy of [`STRATEGIES`].
fn with_strategies(backends: Vec<common::Backend>) -> Vec<(common::Backend, Strategy)> {
    backends
        .into_iter()
        .flat_map(|b| STRATEGIES.map(|s| (b.clone(), s)))
        .collect()
}

fn pool_is_idle(pool: &sqlock::DbPool) -> bool {
    match pool {
        sqlock::DbPool::Postgres(p) => p.num_idle() as u32 == p.size(),
        sqlock::DbPool::MySql(p) => p.num_idle() as u32 == p.size(),
        sqlock::DbPool::Sqlite(p) => p.num_idle() as u32 == p.size(),
        _ => false,
    }
}

#[tokio::test]
async fn deadline_is_honoured() -> anyhow::Result<()> {
    for (b, strategy) in with_strategies(common::backends("cancel_deadline").await) {
        b.fresh_table().await?;
        let a = b.builder().await?.strategy(strategy).build()?;
        let other = b.builder().await?.strategy(strategy).build()?;
        let g = a.try_acquire("k").await?.expect("k");
        let timeout = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let err = other.acquire_timeout("k", timeout).await.expect_err("held");
        let elapsed = started.elapsed();
        match err {
            sqlock::Error::Timeout { key, waited } => {
                assert_eq!(key, "k");
                assert!(
                    waited >= timeout,
                    "{} {strategy}: gave up early, after {waited:?}",
                    b.dialect
                );
            }
            other => panic!(
                "{} {strategy}: expected a timeout, got {other:?}",
                b.dialect
            ),
        }
        assert!(elapsed >= timeout);
        // Generous slack: this checks that the deadline bounds the wait (rather than
        // waiting for the holder), not speed, on a machine that may be loaded.
        assert!(
            elapsed < timeout + Duration::from_secs(10),
            "{} {strategy}: {elapsed:?}",
            b.dialect
        );
        assert!(g.release().await?);
        // A free lock is granted within a deadline (a long one: whether it is granted
        // is the point, not how fast).
        let got = other.acquire_timeout("k", Duration::from_secs(30)).await?;
        assert!(got.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn waiter_gets_the_lock_when_it_is_released() -> anyhow::Result<()> {
    for b in common::backends("cancel_waiter").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let g = a.try_acquire("k").await?.expect("k");
        let token = g.fencing_token();
        let waiter = tokio::spawn(async move { other.acquire("k").await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "{}: waiter did not wait", b.dialect);
        assert!(g.release().await?);
        let got = waiter.await??;
        assert!(got.fencing_token() > token);
        assert!(got.release().await?);
    }
    Ok(())
}
