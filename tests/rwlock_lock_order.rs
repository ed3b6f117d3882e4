//! PostgreSQL: every statement that locks a hold of a name in shared mode and the
//! name's own row locks the hold first, then the name: a renewal, a release, an
//! extension, a read's grant, the write side's release. Two statements that took them
//! in opposite orders would deadlock (PostgreSQL breaks the tie after its
//! `deadlock_timeout`, a second, by aborting one: a renewal that keeps losing so can let
//! a short lease lapse by the holder's clock).
//!
//! Many readers of one name, each on a handle of its own with a short TTL, take and
//! give back their reads for twenty seconds while their watchdogs renew them (and a
//! few handles downgrade writes to reads on a second name); the test runs in a
//! database of its own, so that the server's count of deadlocks in it
//! (`pg_stat_database.deadlocks`) counts this test's alone, and it must stay zero.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlock::{Dialect, Locker};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

/// The readers of the one name.
const READERS: usize = 50;
/// The handles that downgrade writes to reads on the second name, and its other readers.
const DOWNGRADERS: usize = 4;
/// How long the readers go on.
const RUN: Duration = Duration::from_secs(20);
/// The TTL of every hold: renewed every third of it.
const TTL: Duration = Duration::from_secs(1);
/// A bound on any one wait.
const DEADLINE: Duration = Duration::from_secs(30);

/// A number from `0..n` drawn from the clock, for hold times that vary.
fn vary(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) % n
}

/// Deadlocks PostgreSQL has counted in the database `db`, once none of its sessions is
/// left: a session reports its counts by the time it leaves `pg_stat_activity`.
async fn deadlocks(admin: &PgPool, db: &str) -> anyhow::Result<i64> {
    let gone = common::eventually(|| async {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                .bind(db)
                .fetch_one(admin)
                .await?;
        Ok(left == 0)
    })
    .await?;
    anyhow::ensure!(gone, "the sessions of {db} did not end");
    let n: Option<i64> =
        sqlx::query_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = $1")
            .bind(db)
            .fetch_optional(admin)
            .await?;
    Ok(n.unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_and_releases_of_shared_holds_never_deadlock() -> anyhow::Result<()> {
    for b in common::backends_of("rw_lock_order", &[Dialect::Postgres]).await {
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(b.url())
            .await?;
        let db = format!("sqlock_lock_order_{}", std::process::id());
        admin
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
            )))
            .await?;
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
            .await?;
        let (base, _) = b.url().rsplit_once('/').context("a database URL")?;
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .acquire_timeout(DEADLINE)
            .connect(&format!("{base}/{db}"))
            .await?;
        let locker = Locker::builder(pool.clone())
            .table("lock_order")
            .ttl(TTL)
            .build()?;
        locker.create_table().await?;
        let before = deadlocks_now(&admin, &db).await?;

        let stop = Arc::new(AtomicBool::new(false));
        let cycles = Arc::new(AtomicU64::new(0));
        let lost = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..READERS + 2 * DOWNGRADERS {
            let handle = locker.new_handle();
            let (stop, cycles, lost) = (stop.clone(), cycles.clone(), lost.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if i >= READERS + DOWNGRADERS {
                        // A downgrade: the write side, its read, the write let go.
                        // A grant whose answer outran its TTL, under this load, is tried
                        // again.
                        let write = match handle.write_lock("down").acquire_timeout(DEADLINE).await
                        {
                            Err(sqlock::Error::GrantExpired { .. }) => continue,
                            other => other?,
                        };
                        let read = match handle.read_lock("down").try_acquire().await {
                            Err(sqlock::Error::GrantExpired { .. }) => {
                                write.release().await?;
                                continue;
                            }
                            Ok(Some(read)) => read,
                            // Under this load the write may have lapsed meanwhile.
                            Ok(None) => {
                                lost.fetch_add(1, Ordering::Relaxed);
                                write.release().await?;
                                continue;
                            }
                            Err(e) => return Err(e.into()),
                        };
                        tokio::time::sleep(Duration::from_millis(vary(200))).await;
                        if !write.release().await? {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(vary(400))).await;
                        if !read.release().await? {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        let name = if i < READERS { "doc" } else { "down" };
                        let read = match handle.read_lock(name).acquire_timeout(DEADLINE).await {
                            Err(sqlock::Error::GrantExpired { .. }) => continue,
                            other => other?,
                        };
                        // Held across a renewal or two now and then.
                        tokio::time::sleep(Duration::from_millis(vary(800))).await;
                        if read.is_lost() || !read.release().await? {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            }));
        }
        tokio::time::sleep(RUN).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await??;
        }
        let cycles = cycles.load(Ordering::Relaxed);
        let lost = lost.load(Ordering::Relaxed);
        drop(locker);
        pool.close().await;
        let after = deadlocks(&admin, &db).await?;
        admin
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
            )))
            .await?;
        println!(
            "{cycles} holds taken and given back, {lost} lost; deadlocks {before} before, \
             {after} after"
        );
        anyhow::ensure!(cycles > 0, "nothing was held");
        assert_eq!(after, before, "deadlocks between renewals and releases");
    }
    Ok(())
}

/// Deadlocks PostgreSQL has counted in `db` so far (sessions of it may still be open:
/// a fresh database has none to report).
async fn deadlocks_now(admin: &PgPool, db: &str) -> anyhow::Result<i64> {
    let n: Option<i64> =
        sqlx::query_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = $1")
            .bind(db)
            .fetch_optional(admin)
            .await?;
    Ok(n.unwrap_or(0))
}
