//! Deadlines name the right error: a deadline reached while the lock is held by
//! another owner is `Error::Timeout`, also when the request's own attempt has the
//! pool's only connection at that moment; `LockRequest::timeout` bounds `acquire` too;
//! with `try_acquire` it still means one attempt; and every waiting primitive tells an
//! exhausted pool from a timeout.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{Dialect, Error, Locker, Strategy};
use tokio::time::timeout;

/// A liveness bound only.
const GUARD: Duration = Duration::from_secs(10);

const DEADLINE: Duration = Duration::from_millis(300);

/// Each backend with each strategy it has: for-update on the servers only.
async fn cases(name: &str) -> Vec<(common::Backend, Strategy)> {
    let mut out = Vec::new();
    for b in common::backends(name).await {
        for s in [Strategy::Lease, Strategy::Insert, Strategy::ForUpdate] {
            if s == Strategy::ForUpdate && b.dialect == Dialect::Sqlite {
                continue;
            }
            out.push((b.clone(), s));
        }
    }
    out
}

/// A pool of one connection, used by nothing but the waiter's own attempts: at the
/// deadline the answer is `Timeout`, never `PoolExhausted`. The waiter polls almost
/// without pause, so that its deadline often falls while an attempt is in flight; every
/// case runs at once, each in a task of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_on_a_one_connection_pool_is_a_timeout() -> anyhow::Result<()> {
    const ROUNDS: usize = 40;
    for b in common::backends("dl_one_conn").await {
        b.fresh_table().await?;
    }
    let mut runs = Vec::new();
    for (b, strategy) in cases("dl_one_conn").await {
        let what = format!("{} {strategy}", b.dialect);
        let key = format!("{strategy}-key");
        let holder = b.builder().await?.strategy(strategy).build()?;
        let g = holder.try_acquire(&key).await?.expect("free");
        let waiter = Locker::builder(b.pool_with(1).await?)
            .table(&b.table)
            .strategy(strategy)
            .poll_interval(Duration::from_micros(200), Duration::from_millis(1))
            .build()?;
        runs.push(tokio::spawn(async move {
            let (mut exhausted, mut other) = (0, Vec::new());
            for _ in 0..ROUNDS {
                match timeout(GUARD, waiter.acquire_timeout(&key, DEADLINE)).await {
                    Ok(Err(Error::Timeout { .. })) => {}
                    Ok(Err(Error::PoolExhausted)) => exhausted += 1,
                    r => other.push(format!("{r:?}")),
                }
            }
            let mut problems = Vec::new();
            if exhausted > 0 {
                problems.push(format!(
                    "{what}: {exhausted} of {ROUNDS} acquire_timeout({DEADLINE:?}) calls said \
                     PoolExhausted, though the only connection was taken by their own attempt"
                ));
            }
            if !other.is_empty() {
                problems.push(format!(
                    "{what}: expected Error::Timeout, got {}",
                    other.join(", ")
                ));
            }
            assert!(g.release().await?, "{what}");
            anyhow::Ok(problems)
        }));
    }
    let mut problems = Vec::new();
    for run in runs {
        problems.extend(run.await??);
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// `lock(k).timeout(d).acquire()` gives up at the deadline, as `acquire_timeout(d)`.
/// Every case runs at once, each in a task of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_timeout_bounds_acquire() -> anyhow::Result<()> {
    for b in common::backends("dl_request").await {
        b.fresh_table().await?;
    }
    let mut runs = Vec::new();
    for (b, strategy) in cases("dl_request").await {
        let what = format!("{} {strategy}", b.dialect);
        let key = format!("{strategy}-key");
        let holder = b.builder().await?.strategy(strategy).build()?;
        let g = holder.try_acquire(&key).await?.expect("free");
        let waiter = b.builder().await?.strategy(strategy).build()?;
        runs.push(tokio::spawn(async move {
            let r = timeout(GUARD, waiter.lock(&key).timeout(DEADLINE).acquire()).await;
            let problem = match r {
                Ok(Err(Error::Timeout { .. })) => None,
                Err(_) => Some(format!(
                    "{what}: lock(k).timeout({DEADLINE:?}).acquire() did not return within \
                     {GUARD:?}"
                )),
                Ok(r) => Some(format!("{what}: expected Error::Timeout, got {r:?}")),
            };
            assert!(g.release().await?, "{what}");
            anyhow::Ok(problem)
        }));
    }
    let mut problems = Vec::new();
    for run in runs {
        problems.extend(run.await??);
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// With `try_acquire`, a request timeout still means one attempt: `None` at once on a
/// held key, not a wait of the timeout's length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_timeout_leaves_try_acquire_one_attempt() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in common::backends("dl_try").await {
        b.fresh_table().await?;
    }
    for (b, strategy) in cases("dl_try").await {
        let what = format!("{} {strategy}", b.dialect);
        let key = format!("{strategy}-key");
        let holder = b.builder().await?.strategy(strategy).build()?;
        let g = holder.try_acquire(&key).await?.expect("free");
        let waiter = b.builder().await?.strategy(strategy).build()?;
        // Longer than the guard: a call that waited for it would not answer in time.
        let request = waiter
            .lock(&key)
            .timeout(Duration::from_secs(30))
            .try_acquire();
        match timeout(GUARD, request).await {
            Ok(Ok(None)) => {}
            r => problems.push(format!("{what}: expected Ok(None) at once, got {r:?}")),
        }
        assert!(g.release().await?, "{what}");
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// The same, made certain: the waiter's one connection is taken by its own attempt,
/// which waits in the database for a row another transaction holds (a holder's fenced
/// transaction on PostgreSQL, a writer's on SQLite) while the deadline passes. The
/// answer is `Timeout`: the pool served the attempt, it is not exhausted. MariaDB's
/// acquisitions never wait on a row lock, so they answer within the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_met_inside_the_database_is_a_timeout() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for b in common::backends("dl_in_db").await {
        let holder = b.fresh_table().await?;
        for strategy in [Strategy::Lease, Strategy::Insert] {
            let key = format!("{strategy}-key");
            let g = holder
                .lock(&key)
                .strategy(strategy)
                .try_acquire()
                .await?
                .expect("free");
            // What the waiter's attempt waits behind, held until the deadline is past.
            let other = b.pool().await?;
            let blocker = match &other {
                sqlock::DbPool::Postgres(p) => {
                    let mut tx = p.begin().await?;
                    g.fence(&mut *tx).await?;
                    Blocker::Postgres(tx)
                }
                sqlock::DbPool::MySql(p) => {
                    let mut tx = p.begin().await?;
                    g.fence(&mut *tx).await?;
                    Blocker::MySql(tx)
                }
                sqlock::DbPool::Sqlite(p) => {
                    let mut conn = p.acquire().await?;
                    sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut *conn).await?;
                    Blocker::Sqlite(conn)
                }
                _ => anyhow::bail!("unknown pool"),
            };
            let waiter = Locker::builder(b.pool_with(1).await?)
                .table(&b.table)
                .strategy(strategy)
                .build()?;
            match timeout(GUARD, waiter.acquire_timeout(&key, DEADLINE)).await {
                Ok(Err(Error::Timeout { .. })) => {}
                r => problems.push(format!(
                    "{} {strategy}: expected Timeout, got {r:?}",
                    b.dialect
                )),
            }
            blocker.end().await?;
            assert!(g.release().await?, "{} {strategy}", b.dialect);
            other.close().await;
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// A transaction in the way of the waiter's attempt.
enum Blocker {
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
    Sqlite(sqlx::pool::PoolConnection<sqlx::Sqlite>),
}

impl Blocker {
    async fn end(self) -> anyhow::Result<()> {
        match self {
            Self::Postgres(tx) => tx.rollback().await?,
            Self::MySql(tx) => tx.rollback().await?,
            Self::Sqlite(mut conn) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
            }
        }
        Ok(())
    }
}

/// Takes the only connection of `pool` away until the returned sender is dropped.
async fn take_only_connection(
    pool: &sqlock::DbPool,
) -> anyhow::Result<tokio::sync::oneshot::Sender<()>> {
    async fn hold<DB: sqlx::Database>(
        pool: &sqlx::Pool<DB>,
    ) -> anyhow::Result<tokio::sync::oneshot::Sender<()>> {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let connection = pool.acquire().await?;
        tokio::spawn(async move {
            let _ = rx.await;
            drop(connection);
        });
        Ok(tx)
    }
    match pool {
        sqlock::DbPool::Postgres(p) => hold(p).await,
        sqlock::DbPool::MySql(p) => hold(p).await,
        sqlock::DbPool::Sqlite(p) => hold(p).await,
        _ => anyhow::bail!("unknown pool"),
    }
}

/// Every waiting primitive shares one wait: a deadline met while no attempt could have
/// a connection (the pool's only one taken elsewhere for the whole wait) is
/// `PoolExhausted`; with that connection back and the primitive held by another
/// handle, the same wait ends in `Timeout`. A lock, a fair lock, a multi-lock, a read,
/// a write, a semaphore's permit and an election's campaign, on every backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wait_tells_an_exhausted_pool_from_a_timeout() -> anyhow::Result<()> {
    for b in common::backends("dl_exhausted").await {
        b.fresh_table().await?;
        let other = b.locker().await?;
        let pool = b.pool_with(1).await?;
        let waiter = Locker::builder(pool.clone())
            .table(&b.table)
            .poll_interval(Duration::from_millis(1), Duration::from_millis(5))
            .build()?;
        // Each primitive's wait, bounded by DEADLINE.
        let lock = || async { waiter.acquire_timeout("k-lock", DEADLINE).await.map(drop) };
        let fair = || async {
            waiter
                .lock("k-fair")
                .strategy(Strategy::Fair)
                .acquire_timeout(DEADLINE)
                .await
                .map(drop)
        };
        let elect = || async {
            waiter
                .election("k-elect")
                .campaign_timeout(DEADLINE)
                .await
                .map(drop)
        };
        let many = || async {
            waiter
                .lock_many(&["k-many-a", "k-many-b"])
                .acquire_timeout(DEADLINE)
                .await
                .map(drop)
        };
        let read = || async {
            waiter
                .read_lock("k-rw-r")
                .acquire_timeout(DEADLINE)
                .await
                .map(drop)
        };
        let write = || async {
            waiter
                .write_lock("k-rw-w")
                .acquire_timeout(DEADLINE)
                .await
                .map(drop)
        };
        let permit = || async {
            waiter
                .semaphore("k-sem", 1)
                .acquire_timeout(DEADLINE)
                .await
                .map(drop)
        };

        let taken = take_only_connection(&pool).await?;
        let answers = [
            ("lock", timeout(GUARD, lock()).await?),
            ("fair lock", timeout(GUARD, fair()).await?),
            ("multi-lock", timeout(GUARD, many()).await?),
            ("read", timeout(GUARD, read()).await?),
            ("write", timeout(GUARD, write()).await?),
            ("semaphore", timeout(GUARD, permit()).await?),
            ("election", timeout(GUARD, elect()).await?),
        ];
        for (what, answer) in answers {
            assert!(
                matches!(answer, Err(Error::PoolExhausted)),
                "{} {what}, no connection to be had: {answer:?}",
                b.dialect
            );
        }
        drop(taken);

        // Held elsewhere, the pool free: a timeout. (The cut-off attempts above, which
        // had their connection at last, give back whatever they took meanwhile: the
        // other handle waits for that.)
        let held = (
            other.acquire_timeout("k-lock", GUARD).await?,
            other
                .lock("k-fair")
                .strategy(Strategy::Fair)
                .acquire_timeout(GUARD)
                .await?,
            other.election("k-elect").campaign_timeout(GUARD).await?,
            other.acquire_timeout("k-many-b", GUARD).await?,
            other.write_lock("k-rw-r").acquire_timeout(GUARD).await?,
            other.read_lock("k-rw-w").acquire_timeout(GUARD).await?,
            other.semaphore("k-sem", 1).acquire_timeout(GUARD).await?,
        );
        let answers = [
            ("lock", timeout(GUARD, lock()).await?),
            ("fair lock", timeout(GUARD, fair()).await?),
            ("multi-lock", timeout(GUARD, many()).await?),
            ("read", timeout(GUARD, read()).await?),
            ("write", timeout(GUARD, write()).await?),
            ("semaphore", timeout(GUARD, permit()).await?),
            ("election", timeout(GUARD, elect()).await?),
        ];
        for (what, answer) in answers {
            assert!(
                matches!(answer, Err(Error::Timeout { .. })),
                "{} {what}, held elsewhere: {answer:?}",
                b.dialect
            );
        }
        drop(held);
    }
    Ok(())
}
