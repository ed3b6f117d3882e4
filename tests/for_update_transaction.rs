//! A for-update hold owns a clean transaction: the holder's own statements in it run
//! under the pool's settings (no lock timeout of the library's own left behind), and a
//! holder's statement that ends the transaction (a deadlock victim on MariaDB, any
//! error on PostgreSQL) ends the lock: the lost signal fires, commit says the lock was
//! lost, and the key is free for others.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{DbPool, Dialect, Error, LockGuard, Locker, Strategy};
use sqlx::Executor;
use tokio::time::timeout;

/// A liveness bound only.
const GUARD: Duration = Duration::from_secs(10);

async fn for_update(b: &common::Backend, pool: DbPool) -> anyhow::Result<Locker> {
    Ok(Locker::builder(pool)
        .table(&b.table)
        .strategy(Strategy::ForUpdate)
        // Far beyond the test: the keepalive's round trip is not what ends the lock.
        .keepalive(Duration::from_secs(60))
        .build()?)
}

fn pg(pool: &DbPool) -> &sqlx::PgPool {
    match pool {
        DbPool::Postgres(p) => p,
        _ => unreachable!("a PostgreSQL pool"),
    }
}

fn my(pool: &DbPool) -> &sqlx::MySqlPool {
    match pool {
        DbPool::MySql(p) => p,
        _ => unreachable!("a MariaDB pool"),
    }
}

/// The lock's first attempt, or its waiting acquisition: the two set up the row lock
/// in different ways.
#[derive(Debug, Clone, Copy)]
enum Take {
    Try,
    Wait,
}

async fn take(locker: &Locker, key: &str, how: Take) -> anyhow::Result<LockGuard> {
    Ok(match how {
        Take::Try => locker.try_acquire(key).await?.expect("the key is free"),
        Take::Wait => timeout(GUARD, locker.acquire(key)).await??,
    })
}

fn sqlstate(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
}

fn mysql_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .map(|d| d.number())
}

/// The lent transaction's `lock_timeout` is the one the pool's connections have.
#[tokio::test]
async fn postgres_lent_transaction_keeps_the_pools_lock_timeout() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in common::backends_of("fut_lock_timeout", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let pool = b.pool_with(2).await?;
        let before: String = sqlx::query_scalar("SHOW lock_timeout")
            .fetch_one(pg(&pool))
            .await?;
        let locker = for_update(&b, pool.clone()).await?;
        for how in [Take::Try, Take::Wait] {
            let g = take(&locker, "k", how).await?;
            let seen: String = {
                let mut tx = g.transaction().await.expect("a for-update guard lends one");
                let tx = tx.as_postgres_mut().expect("postgres");
                sqlx::query_scalar("SHOW lock_timeout")
                    .fetch_one(&mut **tx)
                    .await?
            };
            assert!(g.release().await?, "{how:?}");
            if seen != before {
                problems.push(format!(
                    "{how:?}: lock_timeout in the lent transaction is {seen:?}, the pool's \
                     connections have {before:?}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// The holder's own UPDATE of a row another session has locked for a while waits for
/// it, as in any transaction, rather than failing with 55P03; and it commits with the
/// lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_holder_statements_wait_for_row_locks() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in common::backends_of("fut_row_wait", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let work = format!("{}_work", b.table);
        b.script(
            &admin,
            &format!(
                "DROP TABLE IF EXISTS {work}; \
                 CREATE TABLE {work} (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); \
                 INSERT INTO {work} VALUES (1, 0)"
            ),
        )
        .await?;
        let locker = for_update(&b, b.pool().await?).await?;
        for (round, how) in [Take::Try, Take::Wait].into_iter().enumerate() {
            let g = take(&locker, "k", how).await?;
            // Another session holds the row for two seconds, then commits its +100.
            let mut other = pg(&admin).begin().await?;
            other
                .execute(sqlx::AssertSqlSafe(format!(
                    "UPDATE {work} SET n = n + 100 WHERE id = 1"
                )))
                .await?;
            let releaser = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                other.commit().await
            });
            let outcome = {
                let mut tx = g.transaction().await.expect("a for-update guard lends one");
                let tx = tx.as_postgres_mut().expect("postgres");
                let update = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE {work} SET n = n + 1 WHERE id = 1"
                )))
                .execute(&mut **tx);
                timeout(GUARD, update).await
            };
            releaser.await??;
            match outcome {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => problems.push(format!(
                    "{how:?}: the holder's UPDATE of a row locked by another session failed \
                     instead of waiting: SQLSTATE {:?}: {e}",
                    sqlstate(&e)
                )),
                Err(_) => problems.push(format!(
                    "{how:?}: the holder's UPDATE did not return within {GUARD:?}"
                )),
            }
            match g.release().await {
                Ok(true) => {}
                r => problems.push(format!("{how:?}: release: expected Ok(true), got {r:?}")),
            }
            let n = b
                .scalar(
                    &admin,
                    &format!("SELECT n::BIGINT FROM {work} WHERE id = 1"),
                )
                .await?;
            let expected = 101 * (round as i64 + 1);
            if n != expected {
                problems.push(format!(
                    "{how:?}: the row holds {n}, not {expected}: the holder's write did not \
                     commit with the lock"
                ));
                b.script(
                    &admin,
                    &format!("UPDATE {work} SET n = {expected} WHERE id = 1"),
                )
                .await?;
            }
        }
        b.script(&admin, &format!("DROP TABLE {work}")).await?;
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// PostgreSQL: a failing statement in the lent transaction aborts it, and with it the
/// lock: the lost signal fires, commit reports the loss, and another handle takes the
/// key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_failed_statement_ends_the_lock() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in common::backends_of("fut_pg_failed", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let locker = for_update(&b, b.pool().await?).await?;
        let g = locker.try_acquire("k").await?.expect("the key is free");
        let mut lost = g.lost();
        {
            let mut tx = g.transaction().await.expect("a for-update guard lends one");
            let tx = tx.as_postgres_mut().expect("postgres");
            let e = sqlx::query("SELECT 1/0")
                .execute(&mut **tx)
                .await
                .expect_err("division by zero");
            assert_eq!(sqlstate(&e).as_deref(), Some("22012"), "{e}");
        } // the borrow ends here
        problems.extend(check_lock_ended(&b, g, &mut lost).await?);
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// MariaDB: the lent transaction chosen as a deadlock's victim (ER 1213) was rolled
/// back by the server, its row lock with it: the lost signal fires, commit reports the
/// loss, and another handle takes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_deadlock_victim_ends_the_lock() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in common::backends_of("fut_my_deadlock", &[Dialect::MySql]).await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let work = format!("{}_work", b.table);
        let junk = format!("{}_junk", b.table);
        b.script(
            &admin,
            &format!(
                "DROP TABLE IF EXISTS {work}; DROP TABLE IF EXISTS {junk}; \
                 CREATE TABLE {work} (id INTEGER PRIMARY KEY, n INTEGER NOT NULL) ENGINE=InnoDB; \
                 CREATE TABLE {junk} (n INTEGER NOT NULL) ENGINE=InnoDB; \
                 INSERT INTO {work} VALUES (1, 0), (2, 0)"
            ),
        )
        .await?;
        let locker = for_update(&b, b.pool().await?).await?;
        let g = locker.try_acquire("k").await?.expect("the key is free");
        let mut lost = g.lost();
        let blocked = {
            let mut tx = g.transaction().await.expect("a for-update guard lends one");
            let lent = tx.as_mysql_mut().expect("mariadb");
            lent.execute(sqlx::AssertSqlSafe(format!(
                "UPDATE {work} SET n = n + 1 WHERE id = 1"
            )))
            .await?;
            // The other session writes many rows first, so that InnoDB picks the lighter
            // lent transaction as the deadlock's victim.
            let mut other = my(&admin).begin().await?;
            let other_id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
                .fetch_one(&mut *other)
                .await?;
            for sql in [
                format!("INSERT INTO {junk} (n) SELECT seq FROM seq_1_to_200"),
                format!("UPDATE {work} SET n = n + 10 WHERE id = 2"),
            ] {
                other.execute(sqlx::AssertSqlSafe(sql)).await?;
            }
            let cross = format!("UPDATE {work} SET n = n + 10 WHERE id = 1");
            let blocked = tokio::spawn(async move {
                let r = other.execute(sqlx::AssertSqlSafe(cross)).await;
                (other, r)
            });
            // Until the other session waits for the lent transaction's row.
            let waiting = format!(
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX \
                 WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id = {other_id}"
            );
            let started = std::time::Instant::now();
            while b.scalar(&admin, &waiting).await? == 0 {
                // Said apart, so that a failure here tells which it was: the update
                // went through (the lent transaction held no row lock) or it waited
                // where the server does not show it.
                if blocked.is_finished() {
                    let (_, r) = blocked.await?;
                    anyhow::bail!("the other session's update did not wait: {r:?}");
                }
                if started.elapsed() > GUARD {
                    let seen: Vec<(u64, String)> = sqlx::query_as(
                        "SELECT trx_mysql_thread_id, trx_state FROM information_schema.INNODB_TRX",
                    )
                    .fetch_all(my(&admin))
                    .await?;
                    anyhow::bail!(
                        "the other session (connection {other_id}) never showed a lock \
                         wait; transactions seen: {seen:?}"
                    );
                }
                // InnoDB refreshes the snapshot INNODB_TRX is read from only when it
                // has not been read for 100 ms: a faster poll would see the snapshot
                // taken before the other session began to wait, for ever.
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let e = lent
                .execute(sqlx::AssertSqlSafe(format!(
                    "UPDATE {work} SET n = n + 1 WHERE id = 2"
                )))
                .await
                .expect_err("the lent transaction is the deadlock's victim");
            assert_eq!(mysql_number(&e), Some(1213), "{e}");
            blocked
        }; // the borrow ends here
        let (other, r) = blocked.await?;
        r?;
        other.rollback().await?;
        problems.extend(check_lock_ended(&b, g, &mut lost).await?);
        b.script(&admin, &format!("DROP TABLE {work}; DROP TABLE {junk}"))
            .await?;
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// After the holder's transaction ended under it: the lost signal fires within the
/// guard, the guard says it is lost, commit reports `LockLost`, and another handle
/// takes the key (the row lock is gone).
async fn check_lock_ended(
    b: &common::Backend,
    g: LockGuard,
    lost: &mut sqlock::LostSignal,
) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let d = b.dialect;
    match timeout(GUARD, lost.wait()).await {
        Ok(_) => {}
        Err(_) => problems.push(format!(
            "{d}: the lost signal did not fire within {GUARD:?} after the holder's \
             transaction ended"
        )),
    }
    if !g.is_lost() {
        problems.push(format!("{d}: is_lost() is false"));
    }
    match timeout(GUARD, g.commit()).await {
        Ok(Err(Error::LockLost { .. })) => {}
        r => problems.push(format!(
            "{d}: commit: expected Err(Error::LockLost), got {r:?}"
        )),
    }
    let other = for_update(b, b.pool().await?).await?;
    match timeout(GUARD, other.acquire_timeout("k", GUARD)).await {
        Ok(Ok(next)) => assert!(next.release().await?),
        r => problems.push(format!("{d}: another handle could not take the key: {r:?}")),
    }
    Ok(problems)
}
