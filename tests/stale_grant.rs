//! A grant is never handed out stale: an acquisition whose statement waited in the
//! database longer than its own TTL (here behind the old holder's fenced transaction,
//! which keeps a shared lock on the row) would carry an expiry already in the past.
//! Such a grant is given back, and the answer says why: the key was free, so it is
//! not "busy" but `Error::GrantExpired`. A waiting call tries again instead.
//!
//! PostgreSQL only: there an acquisition waits for a row a transaction holds. MariaDB's
//! acquisitions never wait on a row lock (their lock wait timeout is zero), and
//! SQLite's statements read the clock only once they have the database.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{DbPool, Dialect, Error};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_waited_past_its_ttl_is_not_handed_out() -> anyhow::Result<()> {
    for b in common::backends_of("stale_grant", &[Dialect::Postgres]).await {
        let holder = b.fresh_table().await?;
        let DbPool::Postgres(pool) = holder.pool().clone() else {
            anyhow::bail!("not PostgreSQL");
        };
        let old = holder
            .lock("k")
            .ttl(Duration::from_secs(1))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("free");

        // The old holder's fenced transaction keeps a shared lock on the row.
        let mut fenced = pool.begin().await?;
        old.fence(&mut *fenced).await?;

        // Wait, by the database's own clock, until the old lease has expired.
        let expired = format!(
            "SELECT count(*) FROM {} WHERE lock_key = 'k' AND expires_at <= clock_timestamp()",
            b.quoted()
        );
        while b.scalar(holder.pool(), &expired).await? == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // The next owner's takeover now waits for the fenced transaction.
        let next = b.locker().await?;
        let waiter = tokio::spawn(async move {
            let got = next
                .lock("k")
                .ttl(Duration::from_secs(1))
                .try_acquire()
                .await;
            (next, got)
        });
        let waiting = format!(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE '%{}%'",
            b.table
        );
        while b.scalar(holder.pool(), &waiting).await? == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // At least this long: the waiting statement's own TTL (1 s) is then past when
        // it is granted. A sleep never ends early, so this is a lower bound.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        fenced.commit().await?;

        let (next, got) = waiter.await?;
        match got {
            Err(Error::GrantExpired { ttl, took, .. }) => {
                assert_eq!(ttl, Duration::from_secs(1));
                assert!(took >= ttl, "took {took:?}");
            }
            other => panic!("expected Error::GrantExpired, got {other:?}"),
        }
        // It was given back: the row is free again, and a waiting call takes it.
        let valid = format!(
            "SELECT count(*) FROM {} WHERE lock_key = 'k' AND locked \
             AND expires_at > clock_timestamp()",
            b.quoted()
        );
        let started = std::time::Instant::now();
        while b.scalar(holder.pool(), &valid).await? != 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "never given back"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let guard = next
            .lock("k")
            .ttl(Duration::from_secs(1))
            .acquire_timeout(Duration::from_secs(10))
            .await?;
        assert!(guard.release().await?);
        drop(next);
        drop(old.release().await);
    }
    Ok(())
}
