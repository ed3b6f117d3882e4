//! One key, one strategy, enforced by the database: whichever strategy holds a key,
//! a request of another strategy for it finds it held. It neither takes the key over
//! nor waits for the whole hold: `try_acquire` says `None` at once and a deadline ends
//! in `Error::Timeout`, while the holder keeps its lock and releases it as its own.
//! Afterwards the other strategy takes the key.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{Dialect, Error, Strategy};
use tokio::time::timeout;

/// A liveness bound only: the calls under it answer in milliseconds when they work.
const GUARD: Duration = Duration::from_secs(10);

const STRATEGIES: [Strategy; 3] = [Strategy::Lease, Strategy::Insert, Strategy::ForUpdate];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_excludes_the_other_strategies() -> anyhow::Result<()> {
    holder_excludes_the_others(common::backends("xs_lease").await, Strategy::Lease).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_lock_excludes_the_other_strategies() -> anyhow::Result<()> {
    holder_excludes_the_others(common::backends("xs_insert").await, Strategy::Insert).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_for_update_lock_excludes_the_other_strategies() -> anyhow::Result<()> {
    holder_excludes_the_others(common::servers("xs_for_update").await, Strategy::ForUpdate).await
}

/// Every other strategy against a holder of `holder`, each pair on a key of its own;
/// the pairs with the for-update strategy on the servers only. Every pair is checked,
/// and the test fails with the list of everything that went wrong.
async fn holder_excludes_the_others(
    backends: Vec<common::Backend>,
    holder: Strategy,
) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in backends {
        b.fresh_table().await?;
        for contender in STRATEGIES {
            let for_update = holder == Strategy::ForUpdate || contender == Strategy::ForUpdate;
            if contender == holder || (for_update && b.dialect == Dialect::Sqlite) {
                continue;
            }
            let found = check_pair(&b, holder, contender).await?;
            problems.extend(
                found
                    .into_iter()
                    .map(|p| format!("{}, {holder} holder, {contender} contender: {p}", b.dialect)),
            );
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// What went wrong when a `holder` lock on a key meets `contender` requests for it.
async fn check_pair(
    b: &common::Backend,
    holder: Strategy,
    contender: Strategy,
) -> anyhow::Result<Vec<String>> {
    let key = format!("{holder}-holds-{contender}-asks");
    let mut problems = Vec::new();
    let a = b.locker().await?;
    let other = b.locker().await?;
    let g = a
        .lock(&key)
        .strategy(holder)
        .try_acquire()
        .await?
        .expect("the key is free");

    match timeout(GUARD, other.lock(&key).strategy(contender).try_acquire()).await {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(taken))) => {
            problems.push("try_acquire took a key another strategy holds".to_owned());
            let _ = taken.rollback().await;
        }
        Ok(Err(e)) => problems.push(format!("try_acquire failed: {e:?}")),
        Err(_) => problems.push(format!("try_acquire did not return within {GUARD:?}")),
    }

    let waited = other
        .lock(&key)
        .strategy(contender)
        .acquire_timeout(Duration::from_millis(300));
    match timeout(GUARD, waited).await {
        Ok(Err(Error::Timeout { .. })) => {}
        Ok(Ok(taken)) => {
            problems.push("acquire_timeout(300ms) took a key another strategy holds".to_owned());
            let _ = taken.rollback().await;
        }
        Ok(Err(e)) => problems.push(format!(
            "acquire_timeout(300ms): expected Error::Timeout, got {e:?}"
        )),
        Err(_) => problems.push(format!(
            "acquire_timeout(300ms) did not return within {GUARD:?}"
        )),
    }

    if g.is_lost() {
        problems.push(format!(
            "the holder's lost signal fired: {:?}",
            g.lost().reason()
        ));
    }
    // For a for-update holder, release commits.
    match timeout(GUARD, g.release()).await {
        Ok(Ok(true)) => {}
        other => problems.push(format!(
            "the holder's release: expected Ok(true), got {other:?}"
        )),
    }

    // Free now: the other strategy takes it.
    match timeout(GUARD, other.lock(&key).strategy(contender).try_acquire()).await {
        Ok(Ok(Some(taken))) => match taken.release().await {
            Ok(true) => {}
            r => problems.push(format!(
                "the contender's release after taking the freed key: {r:?}"
            )),
        },
        r => problems.push(format!(
            "after the holder's release, try_acquire: expected Some, got {r:?}"
        )),
    }
    Ok(problems)
}

/// A lease holder that lapsed, whose key a for-update lock then took, is told so at
/// once by every call it still makes: its renewal, release, extension and fenced check
/// neither wait on the for-update holder's row lock nor take anything from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_holder_never_waits_on_the_for_update_holder() -> anyhow::Result<()> {
    for b in common::servers("xs_lapsed").await {
        let d = b.dialect;
        let stale = b.fresh_table().await?;
        let mut old = stale
            .lock("k")
            .ttl(Duration::from_millis(300))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("free");
        // Wait, by the database's own clock, until the lease has expired.
        let now = match d {
            Dialect::Postgres => "clock_timestamp()",
            _ => "UTC_TIMESTAMP(6)",
        };
        let expired = format!(
            "SELECT count(*) FROM {} WHERE lock_key = 'k' AND expires_at <= {now}",
            b.quoted()
        );
        while b.scalar(stale.pool(), &expired).await? == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let fu = b.locker().await?;
        let held = fu
            .lock("k")
            .strategy(Strategy::ForUpdate)
            .try_acquire()
            .await?
            .expect("the lease lapsed: the key is free");

        let fenced = timeout(GUARD, async {
            match stale.pool() {
                sqlock::DbPool::Postgres(p) => {
                    let mut tx = p.begin().await?;
                    old.fence(&mut *tx).await
                }
                sqlock::DbPool::MySql(p) => {
                    let mut tx = p.begin().await?;
                    old.fence(&mut *tx).await
                }
                _ => unreachable!("servers only"),
            }
        })
        .await?;
        assert!(
            matches!(fenced, Err(Error::LockLost { .. })),
            "{d}: fence: {fenced:?}"
        );
        let extended = timeout(GUARD, old.extend(Duration::from_secs(30))).await??;
        assert!(!extended, "{d}: extended a lapsed lease");
        let released = timeout(GUARD, old.release()).await??;
        assert!(!released, "{d}: released a lapsed lease");
        assert!(!held.is_lost(), "{d}: the for-update holder lost its lock");
        assert!(held.release().await?, "{d}");
    }
    Ok(())
}
