//! The SELECT ... FOR UPDATE strategy: the lock is a row lock in the guard's open
//! transaction. Contention, independence of keys, the lent transaction, connection
//! kills and idle-session killers, small pools, and SQLite refusing it.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use common::contention::{run, Workload};
use sqlock::{Dialect, Error, Locker, LostReason, Strategy};
use sqlx::Executor;

/// Two connections of a pool the test can end on the server.
fn killable(name: &'static str, idle_timeout_s: Option<u32>) -> common::kill::Killable {
    common::kill::Killable {
        name,
        max_connections: 2,
        ping: true,
        idle_timeout_s,
    }
}

async fn handle(b: &common::Backend) -> anyhow::Result<Locker> {
    Ok(b.builder().await?.strategy(Strategy::ForUpdate).build()?)
}

#[tokio::test]
async fn held_row_lock_excludes_others_until_commit() -> anyhow::Result<()> {
    for b in common::servers("fu_basic").await {
        b.fresh_table().await?;
        let a = handle(&b).await?;
        let other = handle(&b).await?;
        let g = a.try_acquire("k").await?.expect("k");
        assert_eq!(g.strategy(), Strategy::ForUpdate);
        assert!(other.try_acquire("k").await?.is_none(), "{}", b.dialect);
        let e = other
            .acquire_timeout("k", Duration::from_millis(1_500))
            .await
            .expect_err("held");
        assert!(matches!(e, Error::Timeout { .. }), "{}: {e:?}", b.dialect);
        let token = g.fencing_token();
        g.commit().await?;
        let next = other.try_acquire("k").await?.expect("free after commit");
        assert!(next.fencing_token() > token, "{}", b.dialect);
        assert!(next.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn waiter_is_handed_the_lock_when_the_holder_commits() -> anyhow::Result<()> {
    for b in common::servers("fu_waiter").await {
        b.fresh_table().await?;
        let a = handle(&b).await?;
        let other = handle(&b).await?;
        let g = a.try_acquire("k").await?.expect("k");
        let waiter = tokio::spawn(async move { other.acquire("k").await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "{}", b.dialect);
        g.commit().await?;
        let got = waiter.await??;
        assert!(got.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn sqlite_refuses_it_before_any_sql() -> anyhow::Result<()> {
    for b in common::backends_of("fu_sqlite", &[Dialect::Sqlite]).await {
        let pool = b.pool().await?;
        pool.close().await;
        let e = Locker::builder(pool.clone())
            .strategy(Strategy::ForUpdate)
            .build()
            .expect_err("sqlite");
        assert!(matches!(e, Error::StrategyUnsupported { .. }), "{e:?}");
        assert!(e.to_string().contains("lease or insert"), "{e}");
        let lease = Locker::new(pool)?;
        let e = lease
            .lock("k")
            .strategy(Strategy::ForUpdate)
            .try_acquire()
            .await
            .expect_err("sqlite");
        assert!(matches!(e, Error::StrategyUnsupported { .. }), "{e:?}");
    }
    Ok(())
}

#[tokio::test]
async fn the_holders_writes_commit_or_roll_back_with_the_lock() -> anyhow::Result<()> {
    for b in common::servers("fu_tx").await {
        b.fresh_table().await?;
        let a = handle(&b).await?;
        let admin = b.pool().await?;
        let work = format!("{}_work", b.table);
        b.script(
            &admin,
            &format!("DROP TABLE IF EXISTS {work}; CREATE TABLE {work} (n INTEGER)"),
        )
        .await?;
        for (n, commit) in [(1, false), (2, true)] {
            let g = a.try_acquire("k").await?.expect("k");
            {
                let mut tx = g
                    .transaction()
                    .await
                    .expect("a for-update guard lends its transaction");
                let sql = format!("INSERT INTO {work} (n) VALUES ({n})");
                if let Some(pg) = tx.as_postgres_mut() {
                    pg.execute(sqlx::AssertSqlSafe(sql)).await?;
                } else if let Some(my) = tx.as_mysql_mut() {
                    my.execute(sqlx::AssertSqlSafe(sql)).await?;
                }
            }
            if commit {
                g.commit().await?;
            } else {
                g.rollback().await?;
            }
        }
        let rows = b
            .scalar(&admin, &format!("SELECT COUNT(*) FROM {work}"))
            .await?;
        let kept = b
            .scalar(&admin, &format!("SELECT COUNT(*) FROM {work} WHERE n = 2"))
            .await?;
        assert_eq!(
            (rows, kept),
            (1, 1),
            "{}: only the committed write stays",
            b.dialect
        );
        // A lease guard lends no transaction.
        let lease = b
            .locker()
            .await?
            .try_acquire("lease")
            .await?
            .expect("lease");
        assert!(lease.transaction().await.is_none());
        assert!(lease.release().await?);
        b.script(&admin, &format!("DROP TABLE {work}")).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_records_no_overlap() -> anyhow::Result<()> {
    for b in common::servers("fu_contention").await {
        b.fresh_table().await?;
        let mut pools = Vec::new();
        for _ in 0..3 {
            pools.push(b.pool_with(16).await?);
        }
        let w = Workload {
            strategy: Strategy::ForUpdate,
            tasks_per_pool: 16,
            keys: 2,
            grants: 1_000,
        };
        run(&b, pools, w).await?;
    }
    Ok(())
}

#[tokio::test]
async fn different_keys_never_block_each_other() -> anyhow::Result<()> {
    for b in common::servers("fu_keys").await {
        b.fresh_table().await?;
        let a = handle(&b).await?;
        let other = handle(&b).await?;
        let mut held = Vec::new();
        for i in 0..5 {
            held.push(a.try_acquire(&format!("k{i}")).await?.expect("k"));
        }
        // Only the five rows are locked, never the table: other keys, new or not, are free.
        for key in ["k5", "k6", "zzz", "a"] {
            let g = other.try_acquire(key).await?;
            assert!(
                g.is_some(),
                "{}: {key} was blocked by other keys' locks",
                b.dialect
            );
            assert!(g.expect("k").release().await?);
        }
        for g in held {
            g.commit().await?;
        }
    }
    Ok(())
}

/// A held row lock is invisible to the other strategies' statements on other keys: in a
/// table of a few rows (where MariaDB's planner would rather scan than use the primary
/// key) the watchdog still renews a lease and an insert lock, and an operator still
/// force-releases a third key, while a for-update holder sits on its row for several
/// TTLs.
#[tokio::test]
async fn a_held_row_lock_holds_up_no_renewal_of_other_keys() -> anyhow::Result<()> {
    for b in common::servers("fu_renewals").await {
        b.fresh_table().await?;
        let leased = b.builder().await?.ttl(Duration::from_millis(900)).build()?;
        let lease = leased.try_acquire("b-lease").await?.expect("free");
        let inserted = leased.new_handle();
        let insert = inserted
            .lock("c-insert")
            .strategy(Strategy::Insert)
            .try_acquire()
            .await?
            .expect("free");
        // Taken last, as the third row of a table its statistics still call empty; it
        // sits first in key order, where a scan meets it before the others.
        let fu = handle(&b).await?;
        let row_lock = fu.try_acquire("a-row-lock").await?.expect("free");
        let other = b.locker().await?;
        let victim = other.try_acquire("d-forced").await?.expect("free");
        assert!(
            other.force_release_now("d-forced").await?,
            "{}: a force release was held up by another key's row lock",
            b.dialect
        );
        assert!(
            !victim.release().await?,
            "{}: the forced lock was still ours",
            b.dialect
        );
        // Three TTLs: only renewals keep the two leases.
        tokio::time::sleep(Duration::from_millis(2_700)).await;
        for g in [&lease, &insert] {
            assert!(
                !g.is_lost(),
                "{}: {} was lost while another key was row-locked: {:?}",
                b.dialect,
                g.key(),
                g.lost().reason()
            );
        }
        for h in [&leased, &inserted] {
            assert!(h.watchdog_stats().renewed >= 2, "{}", b.dialect);
        }
        assert!(lease.release().await?, "{}", b.dialect);
        assert!(insert.release().await?, "{}", b.dialect);
        row_lock.commit().await?;
    }
    Ok(())
}

/// DistributedLock's TestLockAbandonment and TestBrokenConnectionDoesNotCorruptPool,
/// and the holder whose connection is killed: the lock is free at once for the next
/// waiter, the holder's uncommitted work is rolled back, its lost signal fires, and
/// its pool goes on working.
#[tokio::test]
async fn killed_holder_frees_the_lock_at_once_and_loses_its_work() -> anyhow::Result<()> {
    for b in common::servers("fu_killed").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let work = format!("{}_work", b.table);
        b.script(
            &admin,
            &format!("DROP TABLE IF EXISTS {work}; CREATE TABLE {work} (n INTEGER)"),
        )
        .await?;
        let a = Locker::builder(common::kill::pool(&b, killable("sqlock_fu_killed", None)).await?)
            .table(&b.table)
            .strategy(Strategy::ForUpdate)
            .keepalive(Duration::from_millis(200))
            .build()?;
        let other = handle(&b).await?;
        let g = a.try_acquire("k").await?.expect("k");
        {
            let mut tx = g.transaction().await.expect("tx");
            let sql = format!("INSERT INTO {work} (n) VALUES (1)");
            if let Some(pg) = tx.as_postgres_mut() {
                pg.execute(sqlx::AssertSqlSafe(sql)).await?;
            } else if let Some(my) = tx.as_mysql_mut() {
                my.execute(sqlx::AssertSqlSafe(sql)).await?;
            }
        }
        let waiter =
            tokio::spawn(async move { other.acquire_timeout("k", Duration::from_secs(20)).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        common::kill::kill(&b, &admin, "sqlock_fu_killed").await?;
        let got = waiter.await??; // freed by the server, not by a TTL
        let mut lost = g.lost();
        let reason = tokio::time::timeout(Duration::from_secs(5), lost.wait()).await?;
        assert_eq!(reason, LostReason::ConnectionLost, "{}", b.dialect);
        assert!(
            !g.release().await?,
            "{}: a killed lock is not ours",
            b.dialect
        );
        let rows = b
            .scalar(&admin, &format!("SELECT COUNT(*) FROM {work}"))
            .await?;
        assert_eq!(
            rows, 0,
            "{}: the killed holder's work was committed",
            b.dialect
        );
        assert!(got.release().await?);
        // Abandonment: a guard dropped without commit frees the lock, and the pool with
        // a killed connection in its past still serves.
        drop(a.try_acquire("k2").await?.expect("k2"));
        let again = a.acquire_timeout("k2", Duration::from_secs(10)).await?;
        assert!(again.release().await?, "{}", b.dialect);
        b.script(&admin, &format!("DROP TABLE {work}")).await?;
    }
    Ok(())
}

/// DistributedLock's TestKeepaliveProtectsFromIdleSessionKiller: a server that ends
/// transactions idle for a second does not end a lock whose keepalive runs more often;
/// without the keepalive it does, and the lost signal says so.
#[tokio::test]
async fn keepalive_protects_from_an_idle_session_killer() -> anyhow::Result<()> {
    for b in common::servers("fu_idle").await {
        b.fresh_table().await?;
        let kept =
            Locker::builder(common::kill::pool(&b, killable("sqlock_fu_idle", Some(1))).await?)
                .table(&b.table)
                .strategy(Strategy::ForUpdate)
                .keepalive(Duration::from_millis(300))
                .build()?;
        let g = kept.try_acquire("kept").await?.expect("kept");
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        assert!(
            !g.is_lost(),
            "{}: the idle killer ended a kept-alive lock",
            b.dialect
        );
        g.commit().await?;

        let idle =
            Locker::builder(common::kill::pool(&b, killable("sqlock_fu_idle", Some(1))).await?)
                .table(&b.table)
                .strategy(Strategy::ForUpdate)
                .keepalive(Duration::from_millis(2_000))
                .build()?;
        let g = idle.try_acquire("idle").await?.expect("idle");
        let mut lost = g.lost();
        let reason = tokio::time::timeout(Duration::from_secs(10), lost.wait()).await?;
        assert_eq!(reason, LostReason::ConnectionLost, "{}", b.dialect);
        assert!(
            matches!(g.commit().await, Err(Error::LockLost { .. })),
            "{}",
            b.dialect
        );
    }
    Ok(())
}

/// DistributedLock's TestHighConcurrencyWithSmallPool, and pool exhaustion: holders
/// hold connections, so a pool of two serves many tasks one pair at a time, and an
/// acquisition that cannot get a connection says so at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_pools_serve_in_turn_and_exhaustion_is_a_clear_error() -> anyhow::Result<()> {
    for b in common::servers("fu_small").await {
        b.fresh_table().await?;
        let pool = b.pool_with(2).await?;
        let base = Locker::builder(pool.clone())
            .table(&b.table)
            .strategy(Strategy::ForUpdate)
            .build()?;
        let mut tasks = Vec::new();
        for i in 0..12 {
            let locker = base.new_handle();
            tasks.push(tokio::spawn(async move {
                let g = locker
                    .acquire_timeout(&format!("k{}", i % 3), Duration::from_secs(30))
                    .await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                g.commit().await?;
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let one = b.pool_with(1).await?;
        let holder = Locker::builder(one)
            .table(&b.table)
            .strategy(Strategy::ForUpdate)
            .build()?;
        let g = holder.try_acquire("a").await?.expect("a");
        let e = holder
            .new_handle()
            .acquire_timeout("b", Duration::from_millis(500))
            .await
            .expect_err("no connection left");
        assert!(matches!(e, Error::PoolExhausted), "{}: {e:?}", b.dialect);
        assert!(e.to_string().contains("pool"), "{e}");
        g.commit().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_acquisitions_leave_no_lock_and_no_connection() -> anyhow::Result<()> {
    for b in common::servers("fu_cancel").await {
        b.fresh_table().await?;
        let pool = b.pool_with(4).await?;
        let a = Locker::builder(pool.clone())
            .table(&b.table)
            .strategy(Strategy::ForUpdate)
            .build()?;
        let holder = handle(&b).await?;
        for i in 0..60u64 {
            let key = format!("k{}", i % 3);
            let blocker = if i % 5 == 0 {
                holder.try_acquire(&key).await?
            } else {
                None
            };
            let cut = Duration::from_micros(200 + (i * 997) % 20_000);
            if let Ok(g) = tokio::time::timeout(cut, a.acquire(&key)).await {
                g?.commit().await?;
            }
            if let Some(g) = blocker {
                g.commit().await?;
            }
        }
        // Abandoned attempts end within a one-second wait slice, then roll back.
        let started = std::time::Instant::now();
        let check = handle(&b).await?;
        for key in ["k0", "k1", "k2"] {
            let g = check.acquire_timeout(key, Duration::from_secs(10)).await?;
            g.commit().await?;
        }
        let idle = loop {
            let idle = match &pool {
                sqlock::DbPool::Postgres(p) => p.num_idle() as u32 == p.size(),
                sqlock::DbPool::MySql(p) => p.num_idle() as u32 == p.size(),
                _ => true,
            };
            if idle || started.elapsed() > Duration::from_secs(10) {
                break idle;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(idle, "{}: a connection stayed taken", b.dialect);
    }
    Ok(())
}
