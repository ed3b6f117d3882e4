//! Every public future is `Send + 'static` when its inputs are owned, so that it can be
//! spawned; the public handle and guard types are `Send + Sync + 'static`. Checked by
//! the compiler: `bounds` is only type-checked, never called. One real test then
//! spawns a lost signal's wait and a `with_lock` on SQLite.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{
    DbPool, Dialect, Election, LeaderTerm, LeaderWatch, Leadership, LockGuard, Locker, LostReason,
    LostSignal, MultiLockGuard, Quorum, QuorumGuard, Semaphore, SemaphoreGuard, SweepOptions,
    SweeperHandle,
};

fn send_static<T: Send + 'static>(_: T) {}

fn send_sync_static<T: Send + Sync + 'static>() {}

fn send_sync_clone_static<T: Send + Sync + Clone + 'static>() {}

/// A value of any type, for the type checker only.
fn any<T>() -> T {
    unreachable!("only type-checked")
}

#[allow(dead_code)]
fn bounds() {
    send_sync_static::<LockGuard>();
    send_sync_clone_static::<Locker>();

    // Quorum locks: the request built inside the future from the owned quorum.
    send_sync_clone_static::<Quorum>();
    send_sync_static::<QuorumGuard>();
    let quorum: Quorum = any();
    let q = quorum.clone();
    send_static(async move { q.lock("k").try_acquire().await });
    let q = quorum.clone();
    send_static(async move { q.lock("k").timeout(Duration::ZERO).acquire().await });
    let guard: QuorumGuard = any();
    send_static(async move { guard.release().await });

    let locker: Locker = any();
    let d = Duration::from_millis(1);
    let l = locker.clone();
    send_static(async move { l.try_acquire("k").await });
    let l = locker.clone();
    send_static(async move { l.acquire("k").await });
    let l = locker.clone();
    send_static(async move { l.acquire_timeout("k", d).await });
    let l = locker.clone();
    send_static(async move { l.with_lock("k", |token| async move { token }).await });
    let l = locker.clone();
    send_static(async move { l.force_release("k").await });
    let l = locker.clone();
    send_static(async move { l.force_release_now("k").await });
    let l = locker.clone();
    send_static(async move { l.list().await });
    let l = locker.clone();
    send_static(async move { l.lock_info("k").await });
    let l = locker.clone();
    send_static(async move { l.sweep(SweepOptions::new()).await });
    let l = locker.clone();
    send_static(async move { l.create_table().await });
    let l = locker.clone();
    send_static(async move { l.check_presence().await });

    // LockRequest, built inside the future from the owned handle.
    let l = locker.clone();
    send_static(async move { l.lock("k").ttl(d).try_acquire().await });
    let l = locker.clone();
    send_static(async move { l.lock("k").ttl(d).acquire().await });
    let l = locker.clone();
    send_static(async move { l.lock("k").ttl(d).acquire_timeout(d).await });
    let l = locker.clone();
    send_static(async move {
        l.lock("k")
            .timeout(d)
            .run(|token| async move { token })
            .await
    });

    // Elections: the candidate, its leadership and term, and a follower's watch.
    send_sync_clone_static::<Election>();
    send_sync_static::<Leadership>();
    send_sync_clone_static::<LeaderTerm>();
    send_sync_static::<LeaderWatch>();
    let e = locker.election("e");
    send_static(async move { e.campaign().await });
    let e = locker.election("e");
    send_static(async move { e.campaign_timeout(d).await });
    let e = locker.election("e");
    send_static(async move { e.try_campaign().await });
    let e = locker.election("e");
    send_static(async move { e.leader().await });
    let e = locker.election("e");
    send_static(async move { e.lead(|term| async move { term.term() }).await });
    let e = locker.election("e");
    send_static(async move { e.lead_until_done(|term| async move { term.term() }).await });
    let mut w: LeaderWatch = any();
    send_static(async move { w.changed().await });
    let leadership: Leadership = any();
    send_static(async move { leadership.resign().await });

    let g: LockGuard = any();
    send_static(async move { g.release().await });
    let mut g: LockGuard = any();
    send_static(async move { g.extend(d).await });
    let g: LockGuard = any();
    send_static(async move { g.commit().await });
    let g: LockGuard = any();
    send_static(async move { g.rollback().await });
    let g: LockGuard = any();
    send_static(async move {
        let tx = g.transaction().await;
        let lent = tx.is_some();
        drop(tx);
        (g, lent)
    });
    let g: LockGuard = any();
    let pg: sqlx::PgPool = any();
    send_static(async move {
        let mut conn = pg.acquire().await?;
        g.fence(&mut *conn).await?;
        anyhow::Ok(())
    });

    // Multi-locks: the request's futures, built inside the future from the owned
    // handle, and the guard's.
    send_sync_static::<MultiLockGuard>();
    let l = locker.clone();
    send_static(async move { l.lock_many(&["a", "b"]).ttl(d).try_acquire().await });
    let l = locker.clone();
    send_static(async move { l.lock_many(&["a", "b"]).acquire().await });
    let l = locker.clone();
    send_static(async move { l.lock_many(&["a", "b"]).timeout(d).acquire_timeout(d).await });
    let g: MultiLockGuard = any();
    send_static(async move { g.release().await });
    let g: MultiLockGuard = any();
    let pg: sqlx::PgPool = any();
    send_static(async move {
        let mut conn = pg.acquire().await?;
        g.fence(&mut *conn).await?;
        anyhow::Ok(())
    });

    // Read-write locks: both sides' futures; their guards are lock guards.
    let l = locker.clone();
    send_static(async move { l.read_lock("rw").ttl(d).try_acquire().await });
    let l = locker.clone();
    send_static(async move { l.read_lock("rw").acquire().await });
    let l = locker.clone();
    send_static(async move { l.write_lock("rw").acquire_timeout(d).await });
    let l = locker.clone();
    send_static(async move { l.rwlocks().await });

    // Semaphores: the semaphore, its futures, and its guard's.
    send_sync_clone_static::<Semaphore>();
    send_sync_static::<SemaphoreGuard>();
    let sem = locker.semaphore("s", 3);
    send_static(async move { sem.try_acquire().await });
    let sem = locker.semaphore("s", 3);
    send_static(async move { sem.acquire().await });
    let sem = locker.semaphore("s", 3);
    send_static(async move { sem.acquire_timeout(d).await });
    let sem = locker.semaphore("s", 3);
    send_static(async move { sem.try_acquire_many(2).await });
    let sem = locker.semaphore("s", 3);
    send_static(async move { sem.acquire_many(2).await });
    let sem = locker.semaphore("s", 3);
    send_static(async move { sem.acquire_many_timeout(2, d).await });
    let sem = locker.semaphore("s", 3);
    send_static(async move { sem.holders().await });
    let l = locker.clone();
    send_static(async move { l.semaphores().await });
    let g: SemaphoreGuard = any();
    send_static(async move { g.release().await });
    let g: SemaphoreGuard = any();
    let pg: sqlx::PgPool = any();
    send_static(async move {
        let mut conn = pg.acquire().await?;
        g.fence(&mut *conn).await?;
        anyhow::Ok(())
    });

    let mut lost: LostSignal = any();
    send_static(async move { lost.wait().await });

    let sweeper: SweeperHandle = any();
    send_static(async move { sweeper.shutdown().await });

    let pool: DbPool = any();
    send_static(async move { sqlock::migrate(&pool).await });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_wait_and_with_lock_run_in_spawned_tasks() -> anyhow::Result<()> {
    for b in common::backends_of("bounds_spawn", &[Dialect::Sqlite]).await {
        let locker = b.fresh_table().await?;
        let operator = b.locker().await?;
        let g = locker
            .lock("k")
            .ttl(Duration::from_millis(900))
            .try_acquire()
            .await?
            .expect("free");
        let mut lost = g.lost();
        let waiter = tokio::spawn(async move { lost.wait().await });
        assert!(operator.force_release_now("k").await?);
        let reason = tokio::time::timeout(Duration::from_secs(10), waiter).await??;
        assert_eq!(reason, LostReason::NotHeld);
        assert!(!g.release().await?);

        let l = locker.clone();
        let token =
            tokio::spawn(async move { l.with_lock("k2", |token| async move { token }).await })
                .await??;
        assert!(token > 0);
    }
    Ok(())
}
