//! On a 3-node MariaDB Galera cluster (`scripts/ha.sh galera up`, ports 3311-3313):
//! contenders connected to different nodes, on the same keys, never overlap and see
//! rising tokens with the lease and the insert strategy, the certification failures
//! (error 1213) of the losers never reaching them; the for-update strategy, which
//! Galera cannot make exclusive, is refused with an explanation.

mod common;

use std::time::Duration;

use common::contention::{self, Workload};
use sqlock::{DbPool, Dialect, Error, Locker, Strategy};
use sqlx::mysql::MySqlPoolOptions;

const NODES: [(&str, &str); 3] = [
    (
        "SQLOCK_TEST_GALERA1_URL",
        "mysql://root@127.0.0.1:3311/test",
    ),
    (
        "SQLOCK_TEST_GALERA2_URL",
        "mysql://root@127.0.0.1:3312/test",
    ),
    (
        "SQLOCK_TEST_GALERA3_URL",
        "mysql://root@127.0.0.1:3313/test",
    ),
];

/// The three nodes, each as a backend on the test's table; empty when the cluster is
/// not up and servers are not required.
async fn nodes(name: &str) -> Vec<common::Backend> {
    let mut out = Vec::new();
    for (env, url) in NODES {
        out.extend(common::ha_server(name, Dialect::MySql, env, url).await);
    }
    if out.len() < NODES.len() {
        return Vec::new();
    }
    out
}

/// Held by each test that counts the nodes' conflicts for the whole of it: the counts
/// are the servers', and another such test's conflicts must not pass for its own.
static COUNTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn pool(b: &common::Backend) -> anyhow::Result<DbPool> {
    Ok(MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .connect(b.url())
        .await?
        .into())
}

/// Waits until every node has the table with all its columns, as the first node made
/// it: DDL replicates in total order, but a node may apply the last `ALTER TABLE` of
/// the schema a moment after the first node answered, and the test should not rest on
/// timing.
async fn replicated(nodes: &[common::Backend]) -> anyhow::Result<()> {
    let columns = |b: &common::Backend| {
        format!(
            "SELECT COUNT(*) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME = '{}'",
            b.table
        )
    };
    let Some(first) = nodes.first() else {
        return Ok(());
    };
    let first_pool = pool(first).await?;
    let expected = column_count(first, &first_pool, &columns(first)).await?;
    first_pool.close().await;
    anyhow::ensure!(expected > 0, "the table is not on {}", first.url());
    for b in nodes {
        let pool = pool(b).await?;
        let mut seen = false;
        for _ in 0..200 {
            if column_count(b, &pool, &columns(b)).await? == expected {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::ensure!(
            seen,
            "the table's {expected} columns did not reach {}",
            b.url()
        );
        pool.close().await;
    }
    Ok(())
}

/// The count of the table's columns on one node. A read of the schema takes metadata
/// locks, and a node aborts it with a deadlock error (1213) when a schema change of
/// another test, replicated in total order, needs them: the read is then asked again.
async fn column_count(b: &common::Backend, pool: &DbPool, sql: &str) -> anyhow::Result<i64> {
    let mut aborted = 0;
    loop {
        match b.scalar(pool, sql).await {
            Ok(n) => return Ok(n),
            Err(e) if aborted < 20 && is_deadlock(&e) => {
                aborted += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn is_deadlock(e: &anyhow::Error) -> bool {
    e.downcast_ref::<sqlx::Error>()
        .and_then(|e| e.as_database_error())
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|e| e.number() == 1213)
}

async fn contention_across_nodes(name: &str, strategy: Strategy) -> anyhow::Result<()> {
    let _counting = COUNTING.lock().await;
    let nodes = nodes(name).await;
    let Some(first) = nodes.first() else {
        return Ok(());
    };
    first.fresh_table().await?;
    replicated(&nodes).await?;
    let mut pools = Vec::new();
    for b in &nodes {
        pools.push(pool(b).await?);
    }
    let size = first
        .scalar(
            &pools[0],
            "SELECT CAST(VARIABLE_VALUE AS SIGNED) FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE'",
        )
        .await?;
    assert_eq!(size, 3, "the cluster is not whole");
    let w = Workload {
        strategy,
        tasks_per_pool: 3,
        keys: 2,
        grants: 150,
    };
    let before = conflicts(&nodes, &pools).await?;
    // Any error, certification failures included, fails the run: none may surface.
    contention::run(first, pools.clone(), w).await?;
    let seen = conflicts(&nodes, &pools).await? - before;
    println!("{strategy}: {seen} certification failures and aborts on the nodes, all retried");
    assert!(
        seen > 0,
        "the run never conflicted across nodes: it tested nothing"
    );
    Ok(())
}

/// Certification failures and brute-force aborts so far, summed over the nodes.
async fn conflicts(nodes: &[common::Backend], pools: &[DbPool]) -> anyhow::Result<i64> {
    let mut sum = 0;
    for (b, pool) in nodes.iter().zip(pools) {
        sum += b
            .scalar(
                pool,
                "SELECT CAST(SUM(VARIABLE_VALUE) AS SIGNED) FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME IN ('WSREP_LOCAL_CERT_FAILURES', 'WSREP_LOCAL_BF_ABORTS')",
            )
            .await?;
    }
    Ok(sum)
}

#[tokio::test]
async fn lease_contention_across_galera_nodes() -> anyhow::Result<()> {
    contention_across_nodes("galera_lease", Strategy::Lease).await
}

#[tokio::test]
async fn insert_contention_across_galera_nodes() -> anyhow::Result<()> {
    contention_across_nodes("galera_insert", Strategy::Insert).await
}

#[tokio::test]
async fn for_update_is_refused_on_galera() -> anyhow::Result<()> {
    let nodes = nodes("galera_for_update").await;
    let Some(first) = nodes.first() else {
        return Ok(());
    };
    first.fresh_table().await?;
    replicated(&nodes).await?;
    // A key per node: a read on one node need not see another node's release yet
    // (causal reads are off by default), so the lease check must not depend on it.
    for (i, b) in nodes.iter().enumerate() {
        let key = format!("refused-{i}");
        let locker = Locker::builder(pool(b).await?)
            .table(&b.table)
            .strategy(Strategy::ForUpdate)
            .build()?;
        for outcome in [
            locker.try_acquire(&key).await.map(drop),
            locker
                .acquire_timeout(&key, Duration::from_secs(5))
                .await
                .map(drop),
        ] {
            let err = outcome.expect_err("for-update on a Galera node");
            assert!(matches!(err, Error::GaleraCluster { nodes: 3 }), "{err:?}");
            let text = err.to_string();
            for needed in ["Galera", "FOR UPDATE", "this node only", "lease strategy"] {
                assert!(text.contains(needed), "{needed:?} missing from: {text}");
            }
        }
        // The lease strategy works on the same handle's table.
        let lease = locker.lock(&key).strategy(Strategy::Lease);
        let guard = lease.try_acquire().await?.expect("a free lease");
        assert!(guard.release().await?);
    }
    Ok(())
}

/// Presence is refused on a Galera node, where a `GET_LOCK` name is held on that node
/// only: `check_presence` says so, and a handle with presence fails its first
/// acquisition with the reason; a handle without it works as before.
#[tokio::test]
async fn presence_is_refused_on_galera() -> anyhow::Result<()> {
    let nodes = nodes("galera_presence").await;
    let Some(first) = nodes.first() else {
        return Ok(());
    };
    first.fresh_table().await?;
    replicated(&nodes).await?;
    let plain = Locker::builder(pool(first).await?)
        .table(&first.table)
        .build()?;
    let refused = plain.check_presence().await;
    assert!(
        matches!(&refused, Err(Error::PresenceUnavailable { reason }) if reason.contains("Galera")),
        "{refused:?}"
    );
    let with = Locker::builder(pool(first).await?)
        .table(&first.table)
        .presence(true)
        .build()?;
    let err = with
        .try_acquire("presence")
        .await
        .map(drop)
        .expect_err("refused");
    assert!(matches!(err, Error::PresenceUnavailable { .. }), "{err:?}");
    let guard = plain.try_acquire("presence").await?.expect("a free lease");
    assert!(guard.release().await?);
    Ok(())
}

/// Multi-locks from handles on the three nodes, over overlapping sets of the same keys
/// ({a,b}, {b,c}, {a,c}), never hold a key twice at once and see each key's tokens
/// rise in grant order; the certification failures of the losers never reach them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_locks_across_galera_nodes() -> anyhow::Result<()> {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, Mutex};

    let _counting = COUNTING.lock().await;
    let nodes = nodes("galera_multi").await;
    let Some(first) = nodes.first() else {
        return Ok(());
    };
    first.fresh_table().await?;
    replicated(&nodes).await?;
    let mut pools = Vec::new();
    for b in &nodes {
        pools.push(pool(b).await?);
    }
    let before = conflicts(&nodes, &pools).await?;
    // The keys held now, and each key's last token, as the grants came.
    type Held = (HashSet<String>, HashMap<String, i64>);
    let held: Arc<Mutex<Held>> = Arc::default();
    let sets: [&[&str]; 3] = [&["a", "b"], &["b", "c"], &["a", "c"]];
    // Rounds of 60 sets until the nodes' counters show a conflict the library retried
    // (at most 20 rounds): a run without one would have tested nothing.
    let mut rounds = 0;
    let mut seen = 0;
    while seen == 0 && rounds < 20 {
        rounds += 1;
        let mut tasks = tokio::task::JoinSet::new();
        for (n, pool) in pools.iter().enumerate() {
            for t in 0..2 {
                let locker = Locker::builder(pool.clone()).table(&first.table).build()?;
                let set = sets[(n + t) % sets.len()];
                let held = held.clone();
                tasks.spawn(async move {
                    for _ in 0..10 {
                        let guard = locker
                            .lock_many(set)
                            .acquire_timeout(Duration::from_secs(60))
                            .await?;
                        {
                            let (now, last) = &mut *held.lock().unwrap();
                            for (key, token) in guard.tokens() {
                                anyhow::ensure!(now.insert(key.to_owned()), "{key} held twice");
                                let prev = last.insert(key.to_owned(), token).unwrap_or(0);
                                anyhow::ensure!(token > prev, "{key}: token {token} after {prev}");
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(1..10))).await;
                        {
                            let (now, _) = &mut *held.lock().unwrap();
                            for key in guard.keys() {
                                now.remove(key);
                            }
                        }
                        anyhow::ensure!(guard.release().await?, "a key was lost while held");
                    }
                    anyhow::Ok(())
                });
            }
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        seen = conflicts(&nodes, &pools).await? - before;
    }
    println!(
        "multi-locks: {} sets granted, {seen} certification failures and aborts, all retried",
        rounds * 60
    );
    assert!(
        seen > 0,
        "the multi-locks never conflicted across nodes: they tested nothing"
    );
    Ok(())
}
