//! Semaphores (`Locker::semaphore`): at most N permits held; k permits at once all or
//! nothing, also under contention; N fixed by the first caller, another N refused
//! before any grant; bad input refused before any SQL; a semaphore's permits are out
//! of reach of every lock strategy; a lapsed permit comes back, and its old holder's
//! release frees nobody else's; a sweep never lets N + 1 hold. On every backend: a
//! SQLite file, PostgreSQL and MariaDB.
//!
//! Crashes and pauses of holders in processes of their own are in
//! `semaphore_history.rs`; cut-off acquisitions in `semaphore_cancel.rs`; random
//! interleavings against a model in `semaphore_model.rs`.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{Dialect, Error, Locker, Strategy, SweepOptions};

/// Drops the test's semaphores' table too, then starts from a fresh lock table.
pub async fn fresh(b: &common::Backend) -> anyhow::Result<Locker> {
    let locker = b.locker().await?;
    let drop = match b.dialect {
        Dialect::MySql => format!("DROP TABLE IF EXISTS `{}_semaphores`", b.table),
        _ => format!("DROP TABLE IF EXISTS \"{}_semaphores\"", b.table),
    };
    b.script(locker.pool(), &drop).await?;
    b.fresh_table().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_permits_are_held() -> anyhow::Result<()> {
    for b in common::backends("sem_basic").await {
        let locker = fresh(&b).await?;
        let other = locker.new_handle();
        let sem = locker.semaphore("exports", 2);
        let first = sem.acquire().await?;
        let second = other.semaphore("exports", 2).try_acquire().await?;
        let second = second.expect("a second permit is free");
        assert_ne!(
            first.keys().collect::<Vec<_>>(),
            second.keys().collect::<Vec<_>>(),
            "{}",
            b.dialect
        );
        // A handle takes permits of its own: no re-entry, also on the same handle.
        assert!(sem.try_acquire().await?.is_none(), "{}", b.dialect);
        assert!(other.semaphore("exports", 2).try_acquire().await?.is_none());
        assert_eq!(sem.holders().await?.len(), 2, "{}", b.dialect);
        assert!(first.release().await?, "{}", b.dialect);
        let third = sem.try_acquire().await?.expect("a permit came back");
        assert!(third.fencing_token() > 0);
        assert!(second.release().await?);
        assert!(third.release().await?);
        assert!(sem.holders().await?.is_empty(), "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_permits_are_all_or_nothing() -> anyhow::Result<()> {
    for b in common::backends("sem_many").await {
        let locker = fresh(&b).await?;
        let other = locker.new_handle();
        let mine = locker.semaphore("memory", 5);
        let theirs = other.semaphore("memory", 5);
        let three = mine.acquire_many(3).await?;
        assert_eq!(three.permits(), 3);
        assert_eq!(three.tokens().count(), 3);
        // Three asked, two free: none taken.
        assert!(theirs.try_acquire_many(3).await?.is_none(), "{}", b.dialect);
        assert_eq!(mine.holders().await?.len(), 3, "{}", b.dialect);
        let timed = theirs
            .acquire_many_timeout(3, Duration::from_millis(100))
            .await;
        assert!(matches!(timed, Err(Error::Timeout { .. })), "{timed:?}");
        assert_eq!(mine.holders().await?.len(), 3, "{}", b.dialect);
        let two = theirs.try_acquire_many(2).await?.expect("two are free");
        assert!(mine.try_acquire().await?.is_none(), "{}", b.dialect);
        // A waiter for 4 is granted once the three and one more come back, all at once.
        let waiter = tokio::spawn({
            let theirs = theirs.clone();
            async move {
                theirs
                    .acquire_many_timeout(4, Duration::from_secs(30))
                    .await
            }
        });
        assert!(three.release().await?);
        assert!(two.release().await?);
        let four = waiter.await??;
        assert_eq!(four.permits(), 4, "{}", b.dialect);
        assert_eq!(mine.holders().await?.len(), 4, "{}", b.dialect);
        assert!(four.release().await?);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_n_is_refused_before_any_grant() -> anyhow::Result<()> {
    for b in common::backends("sem_mismatch").await {
        let locker = fresh(&b).await?;
        let held = locker.semaphore("jobs", 2).acquire().await?;
        for other in [1, 3, 1000] {
            let sem = locker.new_handle().semaphore("jobs", other);
            let refused = sem.try_acquire().await;
            assert!(
                matches!(
                    refused,
                    Err(Error::PermitsMismatch { recorded: 2, requested, .. }) if requested == other
                ),
                "{}: {refused:?}",
                b.dialect
            );
            let waited = sem.acquire_timeout(Duration::from_secs(5)).await;
            assert!(
                matches!(waited, Err(Error::PermitsMismatch { .. })),
                "{waited:?}"
            );
        }
        // Nothing was granted to the refused callers.
        assert_eq!(locker.semaphore("jobs", 2).holders().await?.len(), 1);
        let listed = locker.semaphores().await?;
        assert_eq!(listed.len(), 1, "{}", b.dialect);
        assert_eq!((listed[0].name.as_str(), listed[0].permits), ("jobs", 2));
        assert_eq!(listed[0].holders.len(), 1);
        assert_eq!(listed[0].holders[0].key, "semaphore:jobs#0");
        assert!(held.release().await?);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_any_sql() -> anyhow::Result<()> {
    // A table that does not exist: any SQL sent would fail with MissingTable.
    for b in common::backends("sem_bad_input_none").await {
        let locker = b.builder().await?.table("sem_no_such_table").build()?;
        let long = "n".repeat(sqlock::MAX_SEMAPHORE_NAME_BYTES + 1);
        let cases: Vec<(&str, u32, u32)> = vec![
            ("", 2, 1),
            (&long, 2, 1),
            ("nul\0name", 2, 1),
            ("ok", 0, 1),
            ("ok", sqlock::MAX_PERMITS + 1, 1),
            ("ok", 2, 0),
            ("ok", 2, 3),
        ];
        for (name, n, k) in cases {
            let sem = locker.semaphore(name, n);
            let outcome = sem.try_acquire_many(k).await;
            let ok = match outcome {
                Err(Error::EmptyKey) => name.is_empty(),
                Err(Error::KeyTooLong { .. }) => name.len() > sqlock::MAX_SEMAPHORE_NAME_BYTES,
                Err(Error::KeyContainsNul) => name.contains('\0'),
                Err(Error::InvalidPermits { permits, .. }) => permits == n,
                Err(Error::InvalidPermitCount { count, permits }) => count == k && permits == n,
                _ => false,
            };
            assert!(ok, "{} {name:?} {n} {k}: {outcome:?}", b.dialect);
            let waited = sem.acquire_many(k).await;
            assert!(
                !matches!(waited, Err(Error::MissingTable { .. }) | Ok(_)),
                "{waited:?}"
            );
        }
        let ttl = locker
            .semaphore("ok", 2)
            .ttl(Duration::ZERO)
            .try_acquire()
            .await;
        assert!(matches!(ttl, Err(Error::TtlTooShort { .. })), "{ttl:?}");
        // The longest name is accepted (and reaches the missing table).
        let longest = "n".repeat(sqlock::MAX_SEMAPHORE_NAME_BYTES);
        let reached = locker.semaphore(&longest, 1000).try_acquire().await;
        assert!(
            matches!(reached, Err(Error::MissingTable { .. })),
            "{reached:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_out_of_reach_of_every_lock_strategy() -> anyhow::Result<()> {
    for b in common::backends("sem_reserved").await {
        let locker = fresh(&b).await?;
        let permit = locker.semaphore("pool", 1).acquire().await?;
        let key = permit.keys().next().unwrap().to_owned();
        assert_eq!(key, "semaphore:pool#0");
        let mut strategies = vec![Strategy::Lease, Strategy::Insert, Strategy::Fair];
        if b.dialect != Dialect::Sqlite {
            strategies.push(Strategy::ForUpdate);
        }
        let other = locker.new_handle();
        for strategy in strategies {
            for handle in [&locker, &other] {
                for key in [key.as_str(), "semaphore:pool#1", "semaphore:"] {
                    let refused = handle.lock(key).strategy(strategy).try_acquire().await;
                    assert!(
                        matches!(refused, Err(Error::ReservedKey { .. })),
                        "{} {strategy} {key}: {refused:?}",
                        b.dialect
                    );
                }
            }
        }
        assert!(matches!(
            other.acquire(&key).await,
            Err(Error::ReservedKey { .. })
        ));
        assert!(matches!(
            other.with_lock(&key, |_| async {}).await,
            Err(Error::ReservedKey { .. })
        ));
        // The permit is untouched.
        assert!(!permit.is_lost());
        assert!(permit.release().await?, "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_permit_comes_back_and_its_old_release_frees_nobody() -> anyhow::Result<()> {
    for b in common::backends("sem_lapse").await {
        let locker = fresh(&b).await?;
        let pool = b.pool().await?;
        let old = locker
            .semaphore("slots", 2)
            .auto_renew(false)
            .acquire_many(2)
            .await?;
        let other_locker = locker.new_handle();
        let other = other_locker.semaphore("slots", 2);
        assert!(other.try_acquire().await?.is_none());
        // The first permit's lease runs out (moved into the past, not slept through).
        let lapsed = old.keys().next().unwrap().to_owned();
        b.expire(&pool, &lapsed).await?;
        let taken = other
            .try_acquire()
            .await?
            .expect("the lapsed permit came back");
        assert_eq!(
            taken.keys().collect::<Vec<_>>(),
            [lapsed.as_str()],
            "{}",
            b.dialect
        );
        assert!(
            taken.fencing_token() > old.fencing_token(),
            "{}: a slot's tokens rise",
            b.dialect
        );
        assert!(other.try_acquire().await?.is_none(), "{}", b.dialect);
        // The old holder's release gives back its live permit only, and says one was
        // lost.
        assert!(!old.release().await?, "{}", b.dialect);
        let holders = other.holders().await?;
        assert_eq!(holders.len(), 1, "{}", b.dialect);
        assert_eq!(holders[0].key, lapsed);
        assert_eq!(holders[0].owner, other_locker.owner().to_string());
        assert!(taken.release().await?);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_never_lets_n_plus_one_hold() -> anyhow::Result<()> {
    for b in common::backends("sem_sweep").await {
        let locker = fresh(&b).await?;
        let pool = b.pool().await?;
        let sem = locker.semaphore("s", 3);
        let a = sem.acquire().await?;
        let c = sem.acquire_many(2).await?;
        b.expire(&pool, a.keys().next().unwrap()).await?;
        let released = c.keys().map(str::to_owned).collect::<Vec<_>>();
        assert!(c.release().await?);
        // Expired and released rows are swept: the semaphore's slots are rows again
        // when taken.
        assert!(
            locker.sweep(SweepOptions::new()).await? >= 1,
            "{}",
            b.dialect
        );
        let all = sem.acquire_many(3).await?;
        assert_eq!(all.permits(), 3);
        assert!(sem.try_acquire().await?.is_none(), "{}", b.dialect);
        assert_eq!(held_permits(&b, &pool).await?, 3, "{}", b.dialect);
        assert!(
            !a.release().await?,
            "{}: its permit was taken again",
            b.dialect
        );
        assert_eq!(
            held_permits(&b, &pool).await?,
            3,
            "{} {released:?}",
            b.dialect
        );
        assert!(all.release().await?);
    }
    Ok(())
}

/// How many permits are held (live rows of permits' keys; the semaphore's name, held
/// in shared mode beside them, is not one).
async fn held_permits(b: &common::Backend, pool: &sqlock::DbPool) -> anyhow::Result<i64> {
    let now = match b.dialect {
        sqlock::Dialect::Postgres => "statement_timestamp()",
        sqlock::Dialect::MySql => "UTC_TIMESTAMP(6)",
        _ => "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
    };
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE lock_key LIKE 'semaphore:%' AND locked AND expires_at > {now}",
        b.quoted()
    );
    b.scalar(pool, &sql).await
}

fn send_static<T: Send + 'static>(_: T) {}

fn send_sync_static<T: Send + Sync + 'static>() {}

/// A value of any type, for the type checker only.
fn any<T>() -> T {
    unreachable!("only type-checked")
}

/// The semaphore's types and futures can be moved into spawned tasks: only
/// type-checked, never called.
#[allow(dead_code)]
fn bounds() {
    send_sync_static::<sqlock::Semaphore>();
    send_sync_static::<sqlock::SemaphoreGuard>();
    send_sync_static::<sqlock::SemaphoreInfo>();
    let locker: Locker = any();
    let d = Duration::from_millis(1);
    let s = locker.semaphore("s", 2);
    send_static(async move { s.try_acquire().await });
    let s = locker.semaphore("s", 2);
    send_static(async move { s.acquire().await });
    let s = locker.semaphore("s", 2);
    send_static(async move { s.acquire_timeout(d).await });
    let s = locker.semaphore("s", 2);
    send_static(async move { s.try_acquire_many(2).await });
    let s = locker.semaphore("s", 2);
    send_static(async move { s.acquire_many(2).await });
    let s = locker.semaphore("s", 2);
    send_static(async move { s.acquire_many_timeout(2, d).await });
    let s = locker.semaphore("s", 2);
    send_static(async move { s.holders().await });
    let l = locker.clone();
    send_static(async move { l.semaphores().await });
    let g: sqlock::SemaphoreGuard = any();
    send_static(async move { g.release().await });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_taken_and_given_back_in_spawned_tasks() -> anyhow::Result<()> {
    for b in common::backends("sem_spawned").await {
        let locker = fresh(&b).await?;
        let sem = locker.semaphore("spawned", 1);
        let guard = tokio::spawn({
            let sem = sem.clone();
            async move { sem.acquire_many(1).await }
        })
        .await??;
        let mut lost = guard.lost();
        let released = tokio::spawn(async move { guard.release().await }).await??;
        assert!(released, "{}", b.dialect);
        // Released, not lost: the signal never fires.
        assert!(!lost.is_lost());
        let fired = tokio::time::timeout(Duration::from_millis(50), lost.wait()).await;
        assert!(fired.is_err(), "{}", b.dialect);
        assert!(sem.try_acquire().await?.is_some(), "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lost_permit_fires_the_set_s_lost_signal() -> anyhow::Result<()> {
    for b in common::backends("sem_lost").await {
        fresh(&b).await?;
        let locker = b.builder().await?.ttl(Duration::from_secs(3)).build()?;
        let sem = locker.semaphore("lossy", 3);
        let guard = sem.acquire_many(2).await?;
        let mut lost = guard.lost();
        assert!(!guard.is_lost());
        // An operator frees one permit: its renewal finds it gone.
        assert!(
            locker
                .new_handle()
                .force_release_now(guard.keys().nth(1).unwrap())
                .await?
        );
        let reason = tokio::time::timeout(Duration::from_secs(30), lost.wait()).await?;
        assert_eq!(reason, sqlock::LostReason::NotHeld, "{}", b.dialect);
        assert!(guard.is_lost() && guard.lost_reason().is_some());
        // The release gives back the permit still held, and says one was lost.
        assert!(!guard.release().await?, "{}", b.dialect);
        assert!(sem.holders().await?.is_empty(), "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_permits_under_contention_are_all_or_nothing() -> anyhow::Result<()> {
    for b in common::backends("sem_many_race").await {
        let first = fresh(&b).await?;
        let pool = b.pool().await?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A monitor reads how many permits the table holds while the workers race.
        let monitor = tokio::spawn({
            let (b, pool, stop) = (b.clone(), pool.clone(), stop.clone());
            async move {
                let mut most = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    most = most.max(held_permits(&b, &pool).await?);
                    tokio::task::yield_now().await;
                }
                anyhow::Ok(most)
            }
        });
        let mut workers = tokio::task::JoinSet::new();
        for w in 0..6u32 {
            let sem = first.new_handle().semaphore("race", 4);
            workers.spawn(async move {
                let mut granted = 0;
                for i in 0..15u32 {
                    let k = 1 + (w + i) % 3;
                    let got = if i % 2 == 0 {
                        sem.try_acquire_many(k).await?
                    } else {
                        Some(sem.acquire_many_timeout(k, Duration::from_secs(30)).await?)
                    };
                    if let Some(g) = got {
                        anyhow::ensure!(g.permits() == k, "{} of {k}", g.permits());
                        granted += 1;
                        tokio::task::yield_now().await;
                        anyhow::ensure!(g.release().await?, "a permit was lost");
                    }
                }
                anyhow::Ok(granted)
            });
        }
        let mut granted = 0;
        while let Some(w) = workers.join_next().await {
            granted += w??;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let most = monitor.await??;
        assert!(most <= 4, "{}: {most} permits held at once", b.dialect);
        // Every waiting acquisition (7 per worker) was granted.
        assert!(granted >= 42, "{}: {granted}", b.dialect);
        assert_eq!(b.held_rows(&pool).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_semaphore_gives_all_its_permits_at_once() -> anyhow::Result<()> {
    for b in common::backends("sem_largest").await {
        let locker = fresh(&b).await?;
        let n = sqlock::MAX_PERMITS;
        let sem = locker.semaphore("large", n);
        let all = sem.acquire_many(n).await?;
        assert_eq!(all.permits(), n, "{}", b.dialect);
        let slots: std::collections::BTreeSet<&str> = all.keys().collect();
        assert_eq!(slots.len(), n as usize);
        assert!(slots.contains(format!("semaphore:large#{}", n - 1).as_str()));
        assert!(sem.try_acquire().await?.is_none(), "{}", b.dialect);
        assert_eq!(sem.holders().await?.len(), n as usize, "{}", b.dialect);
        assert!(all.release().await?);
        assert!(sem.try_acquire_many(n).await?.is_some(), "{}", b.dialect);
    }
    Ok(())
}

/// A lock held on another key, even a for-update lock, whose row stays locked for its
/// holder's whole transaction, never stands in a semaphore's way, also when its key
/// sorts right before or after the semaphore's permits. On the servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_another_key_is_no_obstacle() -> anyhow::Result<()> {
    for b in common::servers("sem_other_key").await {
        let locker = fresh(&b).await?;
        let other = locker.new_handle();
        let sem = locker.semaphore("q", 2);
        // The permits' rows exist, so that the keys around them are their neighbours.
        let all = sem.acquire_many(2).await?;
        assert!(all.release().await?);
        for held in ["semaphore", "semaphore;", "semaphorf", "a", "z"] {
            let g = other.try_acquire(held).await?.expect("a free key");
            assert!(g.release().await?);
            let fu = other
                .lock(held)
                .strategy(Strategy::ForUpdate)
                .acquire_timeout(Duration::from_secs(30))
                .await?;
            for _ in 0..5 {
                let permits = sem.try_acquire_many(2).await?.unwrap_or_else(|| {
                    panic!("{}: busy while {held} was held for update", b.dialect)
                });
                assert!(permits.release().await?, "{}", b.dialect);
            }
            fu.release().await?;
        }
    }
    Ok(())
}
