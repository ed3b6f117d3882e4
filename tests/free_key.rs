//! A free key is never "busy": `try_acquire` of a key nobody holds grants it, whatever
//! the other keys of the table are going through meanwhile.
//!
//! The adversary here is the for-update strategy's probe of a key that has no row yet:
//! on MariaDB a locking read of a missing primary key takes a gap lock, which blocks an
//! insert of any neighbouring key into that gap, and a lease or insert acquisition does
//! not wait on locks (its lock wait timeout is zero). While one task keeps probing
//! fresh keys with for-update acquisitions, another takes fresh neighbouring keys with
//! each of the other strategies: every one of those must be granted.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use sqlock::Strategy;

/// Fresh keys each contender takes.
const ROUNDS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_key_is_granted_while_neighbours_are_probed() -> anyhow::Result<()> {
    for b in common::servers("free_key").await {
        b.fresh_table().await?;
        for strategy in [Strategy::Lease, Strategy::Insert] {
            let prober = b.builder().await?.strategy(Strategy::ForUpdate).build()?;
            let taker = b.builder().await?.strategy(strategy).build()?;
            let stop = Arc::new(AtomicBool::new(false));
            let probes = Arc::new(AtomicUsize::new(0));
            // Keys `k-<i>-b` are probed while `k-<i>-a`, the next key down, is taken:
            // each probed key's gap is where the taken key goes.
            let probing = {
                let (stop, probes) = (stop.clone(), probes.clone());
                tokio::spawn(async move {
                    let mut i = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("{strategy}-{:05}-b", i % ROUNDS);
                        if let Some(g) = prober.try_acquire(&key).await? {
                            g.rollback().await?;
                        }
                        probes.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                    anyhow::Ok(())
                })
            };
            let mut busy = Vec::new();
            for i in 0..ROUNDS {
                let key = format!("{strategy}-{i:05}-a");
                match taker.try_acquire(&key).await? {
                    Some(g) => drop(g.release().await?),
                    None => busy.push(key),
                }
            }
            stop.store(true, Ordering::Relaxed);
            probing.await??;
            let probes = probes.load(Ordering::Relaxed);
            println!(
                "{} {strategy}: {ROUNDS} free keys taken beside {probes} for-update probes, \
                 {} answered busy",
                b.dialect,
                busy.len()
            );
            // The probes did run alongside: the race was on.
            assert!(
                probes > ROUNDS / 10,
                "{} {strategy}: only {probes} probes",
                b.dialect
            );
            assert!(
                busy.is_empty(),
                "{} {strategy}: free keys answered busy: {busy:?}",
                b.dialect
            );
        }
    }
    Ok(())
}

/// On MariaDB each key shares a fence bucket with other keys, which an acquisition
/// holds for the length of its statement. A free key whose bucket another statement
/// holds is not busy: the acquisition passes over the bucket, is sent again, and takes
/// the key once the bucket is free (here held by hand for a fifth of the second an
/// acquisition keeps trying for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_key_is_granted_while_its_fence_bucket_is_in_use() -> anyhow::Result<()> {
    for b in common::backends_of("free_key_bucket", &[sqlock::Dialect::MySql]).await {
        let locker = b.fresh_table().await?;
        let sqlock::DbPool::MySql(pool) = b.pool().await? else {
            anyhow::bail!("not MariaDB");
        };
        let mut tx = pool.begin().await?;
        let bucket = format!(
            "SELECT bucket FROM `{}_fence` WHERE bucket = CRC32(?) % 1024 FOR UPDATE",
            b.table
        );
        sqlx::query(sqlx::AssertSqlSafe(bucket))
            .bind("k")
            .fetch_one(&mut *tx)
            .await?;
        let held = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            tx.commit().await
        });
        let got = locker.try_acquire("k").await?;
        held.await??;
        let guard = got.ok_or_else(|| anyhow::anyhow!("a free key answered busy"))?;
        assert!(guard.release().await?);
    }
    Ok(())
}
