//! Fenced writes: a holder's own transaction checks the lock first, so a holder that
//! lost its lease (paused past its TTL, say) cannot write.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{DbPool, Error, LockGuard, SemaphoreGuard};
use sqlx::Executor;

/// What fences a write: a lock, or a semaphore's permits.
#[derive(Clone, Copy)]
enum Holder<'a> {
    Lock(&'a LockGuard),
    Permits(&'a SemaphoreGuard),
}

impl<'a> From<&'a LockGuard> for Holder<'a> {
    fn from(g: &'a LockGuard) -> Self {
        Self::Lock(g)
    }
}

impl<'a> From<&'a SemaphoreGuard> for Holder<'a> {
    fn from(g: &'a SemaphoreGuard) -> Self {
        Self::Permits(g)
    }
}

/// Runs the holder's fence and then an increment of the test's counter in one
/// transaction on `pool`; returns whether it committed.
async fn fenced_increment<'a>(
    pool: &DbPool,
    holder: impl Into<Holder<'a>>,
    counter: &str,
) -> anyhow::Result<bool> {
    let holder = holder.into();
    let bump = sqlx::AssertSqlSafe(format!("UPDATE {counter} SET n = n + 1"));
    macro_rules! fenced {
        ($p:expr) => {{
            let mut tx = $p.begin().await?;
            let fenced = match holder {
                Holder::Lock(g) => g.fence(&mut *tx).await,
                Holder::Permits(g) => g.fence(&mut *tx).await,
            };
            match fenced {
                Ok(()) => {
                    tx.execute(bump).await?;
                    tx.commit().await?;
                    true
                }
                Err(Error::LockLost { .. }) => false,
                Err(e) => return Err(e.into()),
            }
        }};
    }
    Ok(match pool {
        DbPool::Postgres(p) => fenced!(p),
        DbPool::MySql(p) => fenced!(p),
        DbPool::Sqlite(p) => fenced!(p),
        _ => anyhow::bail!("unknown pool"),
    })
}

/// A counter table of the backend's test, at 0, made anew: its name.
async fn new_counter(b: &common::Backend, pool: &DbPool) -> anyhow::Result<String> {
    let counter = format!("{}_counter", b.table);
    b.script(pool, &format!("DROP TABLE IF EXISTS {counter}"))
        .await?;
    b.script(pool, &format!("CREATE TABLE {counter} (n BIGINT NOT NULL)"))
        .await?;
    b.script(pool, &format!("INSERT INTO {counter} (n) VALUES (0)"))
        .await?;
    Ok(counter)
}

#[tokio::test]
async fn a_stale_holder_cannot_write() -> anyhow::Result<()> {
    for b in common::backends("fence_stale").await {
        let a = b.fresh_table().await?;
        let pool = a.pool().clone();
        let counter = new_counter(&b, &pool).await?;
        let other = b.locker().await?;

        let g = a
            .lock("k")
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("k");
        assert!(
            fenced_increment(&pool, &g, &counter).await?,
            "{}",
            b.dialect
        );
        // The lease lapses (as for a paused holder) and another owner takes it.
        b.expire(&pool, "k").await?;
        let next = other.try_acquire("k").await?.expect("taken over");
        assert!(
            !fenced_increment(&pool, &g, &counter).await?,
            "{}: stale write accepted",
            b.dialect
        );
        assert!(
            fenced_increment(&pool, &next, &counter).await?,
            "{}",
            b.dialect
        );
        let n = b.scalar(&pool, &format!("SELECT n FROM {counter}")).await?;
        assert_eq!(
            n, 2,
            "{}: exactly the two fenced writes of live holders",
            b.dialect
        );
        assert!(next.release().await?);
        b.script(&pool, &format!("DROP TABLE {counter}")).await?;
    }
    Ok(())
}

/// A semaphore's permits fence as a lock does: a permit whose lease lapsed and whose
/// slot another owner took cannot write, while the new holder of the slot can.
#[tokio::test]
async fn a_stale_permit_cannot_write() -> anyhow::Result<()> {
    for b in common::backends("fence_permit").await {
        let a = b.fresh_table().await?;
        let pool = a.pool().clone();
        let counter = new_counter(&b, &pool).await?;
        let other = b.locker().await?;
        let stale = a
            .semaphore("exports", 1)
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("a permit");
        assert!(
            fenced_increment(&pool, &stale, &counter).await?,
            "{}",
            b.dialect
        );
        // The permit lapses (as for a paused holder) and another owner takes its slot.
        b.expire(&pool, stale.keys().next().unwrap()).await?;
        let next = other
            .semaphore("exports", 1)
            .try_acquire()
            .await?
            .expect("the slot taken over");
        assert!(next.keys().eq(stale.keys()), "{}", b.dialect);
        assert!(
            !fenced_increment(&pool, &stale, &counter).await?,
            "{}: a stale permit's write accepted",
            b.dialect
        );
        assert!(
            fenced_increment(&pool, &next, &counter).await?,
            "{}",
            b.dialect
        );
        let n = b.scalar(&pool, &format!("SELECT n FROM {counter}")).await?;
        assert_eq!(n, 2, "{}: the two writes of live holders only", b.dialect);
        assert!(next.release().await?);
        assert!(!stale.release().await?, "{}", b.dialect);
        b.script(&pool, &format!("DROP TABLE {counter}")).await?;
    }
    Ok(())
}

/// On the servers the check holds a shared row lock: a takeover of the lapsed lease
/// waits until the fenced transaction has committed, so the two never interleave.
#[tokio::test]
async fn a_takeover_waits_for_the_fenced_transaction() -> anyhow::Result<()> {
    for b in common::servers("fence_wait").await {
        let a = b.fresh_table().await?;
        let pool = a.pool().clone();
        let other = b.locker().await?;
        let g = a
            .lock("k")
            .ttl(Duration::from_millis(300))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("k");
        macro_rules! hold_fence {
            ($p:expr) => {{
                let mut tx = $p.begin().await?;
                g.fence(&mut *tx).await?;
                tokio::time::sleep(Duration::from_millis(500)).await; // the lease lapses meanwhile
                let taker = tokio::spawn(async move {
                    let t = std::time::Instant::now();
                    let got = other.acquire_timeout("k", Duration::from_secs(10)).await;
                    (got, t.elapsed())
                });
                tokio::time::sleep(Duration::from_millis(700)).await;
                assert!(
                    !taker.is_finished(),
                    "{}: the takeover did not wait",
                    b.dialect
                );
                tx.commit().await?;
                let (got, _) = taker.await?;
                assert!(got?.release().await?);
            }};
        }
        match &pool {
            DbPool::Postgres(p) => hold_fence!(p),
            DbPool::MySql(p) => hold_fence!(p),
            _ => anyhow::bail!("not a server"),
        }
        assert!(!g.release().await?, "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test]
async fn fence_refuses_another_dialects_connection() -> anyhow::Result<()> {
    let sqlite = common::backends_of("fence_other", &[sqlock::Dialect::Sqlite]).await;
    let pg = common::servers("fence_other").await;
    let (Some(s), Some(p)) = (
        sqlite.first(),
        pg.iter().find(|b| b.dialect == sqlock::Dialect::Postgres),
    ) else {
        return Ok(());
    };
    let a = s.fresh_table().await?;
    let g = a.try_acquire("k").await?.expect("k");
    let DbPool::Postgres(pool) = p.pool().await? else {
        anyhow::bail!("pg")
    };
    let mut conn = pool.acquire().await?;
    let e = g.fence(&mut *conn).await.expect_err("wrong dialect");
    assert!(matches!(e, Error::FenceNotApplicable { .. }), "{e:?}");
    assert!(g.release().await?);
    Ok(())
}
