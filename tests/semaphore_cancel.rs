//! Dropping a semaphore's acquisition futures (and its guards' releases) at any point
//! leaves no permit held beyond those the live guards own; deadlines bound the waits.
//! On every backend: a SQLite file, PostgreSQL and MariaDB.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use common::eventually;

use std::time::Duration;

use sqlock::{Dialect, Error, Locker};

async fn fresh(b: &common::Backend) -> anyhow::Result<()> {
    let locker = b.locker().await?;
    let drop = match b.dialect {
        Dialect::MySql => format!("DROP TABLE IF EXISTS `{}_semaphores`", b.table),
        _ => format!("DROP TABLE IF EXISTS \"{}_semaphores\"", b.table),
    };
    b.script(locker.pool(), &drop).await?;
    b.fresh_table().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_cut_off_at_random_leak_no_permit() -> anyhow::Result<()> {
    for b in common::backends("sem_cancel").await {
        fresh(&b).await?;
        let pool = b.pool_with(4).await?;
        let locker = Locker::builder(pool.clone())
            .table(&b.table)
            .ttl(Duration::from_secs(600)) // only a release can free these permits in time
            .poll_interval(Duration::from_micros(200), Duration::from_millis(2))
            .build()?;
        let holder = b.locker().await?;
        let sem = locker.semaphore("cut", 3);
        let blocking = holder.semaphore("cut", 3);
        let mut seed = 0x5eed_u64;
        let (mut completed, mut cut_off) = (0, 0);
        for i in 0..300u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Some permits held elsewhere now and then, so that some futures are cut
            // off while they wait.
            let blocker = match i % 5 {
                0 => blocking.try_acquire_many(2).await?,
                1 => blocking.try_acquire().await?,
                _ => None,
            };
            let k = 1 + u32::try_from((seed >> 33) % 3)?;
            let cut = Duration::from_micros(50 + (seed >> 40) % 4000);
            match tokio::time::timeout(cut, sem.acquire_many(k)).await {
                Ok(g) => {
                    completed += 1;
                    let g = g?;
                    assert_eq!(g.permits(), k);
                    // Its release cut off too, now and then: the drop finishes it.
                    if seed % 2 == 0 {
                        let _ = tokio::time::timeout(cut / 4, g.release()).await;
                    }
                }
                Err(_) => cut_off += 1,
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
            "{}: a permit stayed held after its acquire was cut off",
            b.dialect
        );
        assert!(
            completed > 0 && cut_off > 0,
            "{}: {completed} {cut_off}",
            b.dialect
        );
        // Every permit is free again (an attempt cut off last may still be giving
        // back what it took, for a moment).
        let all = eventually(|| async {
            Ok(match sem.try_acquire_many(3).await? {
                Some(g) => g.release().await?,
                None => false,
            })
        })
        .await?;
        assert!(all, "{}: all N permits can be taken again", b.dialect);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_bound_the_waits() -> anyhow::Result<()> {
    for b in common::backends("sem_deadline").await {
        fresh(&b).await?;
        let locker = b.locker().await?;
        let held = locker.semaphore("d", 2).acquire_many(2).await?;
        let other = locker.new_handle();
        let sem = other.semaphore("d", 2);
        for outcome in [
            sem.acquire_timeout(Duration::from_millis(50)).await,
            sem.acquire_many_timeout(2, Duration::ZERO).await,
            sem.clone()
                .timeout(Duration::from_millis(30))
                .acquire()
                .await,
            sem.clone()
                .timeout(Duration::from_millis(30))
                .acquire_many(1)
                .await,
        ] {
            assert!(
                matches!(outcome, Err(Error::Timeout { .. })),
                "{}: {outcome:?}",
                b.dialect
            );
        }
        assert!(sem.try_acquire().await?.is_none());
        drop(held);
        let clean = eventually(|| async { Ok(sem.try_acquire_many(2).await?.is_some()) }).await?;
        assert!(
            clean,
            "{}: a dropped guard gives its permits back",
            b.dialect
        );
    }
    Ok(())
}
