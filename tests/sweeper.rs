//! The sweeper: bounded batches, grace, rising tokens after a sweep, the background
//! task, and a race against live contenders that must never lose a held lock.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlock::{Error, SweepOptions};
use tokio::time::Instant;

#[tokio::test]
async fn sweep_reclaims_expired_and_released_rows_only() -> anyhow::Result<()> {
    for b in common::backends("sweep_once").await {
        let a = b.fresh_table().await?;
        let mut held = Vec::new();
        for i in 0..3 {
            held.push(a.try_acquire(&format!("held-{i}")).await?.expect("held"));
        }
        for i in 0..15 {
            let g = a.try_acquire(&format!("released-{i}")).await?.expect("r");
            assert!(g.release().await?);
        }
        for i in 0..10 {
            let key = format!("expired-{i}");
            let g = a
                .lock(&key)
                .auto_renew(false)
                .try_acquire()
                .await?
                .expect("e");
            b.expire(a.pool(), &key).await?;
            drop(g);
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // background releases
        let swept = a.sweep(SweepOptions::new().batch(4)).await?;
        assert_eq!(swept, 25, "{}", b.dialect);
        let rows = b
            .scalar(a.pool(), &format!("SELECT COUNT(*) FROM {}", b.quoted()))
            .await?;
        assert_eq!(rows, 3, "{}: only the held rows remain", b.dialect);
        assert_eq!(a.sweep(SweepOptions::new()).await?, 0);
        for g in held {
            assert!(g.release().await?, "{}: a held lock was swept", b.dialect);
        }
    }
    Ok(())
}

#[tokio::test]
async fn grace_keeps_recently_expired_rows() -> anyhow::Result<()> {
    for b in common::backends("sweep_grace").await {
        let a = b.fresh_table().await?;
        assert!(a.try_acquire("k").await?.expect("k").release().await?);
        let hour = SweepOptions::new().grace(Duration::from_secs(3600));
        assert_eq!(a.sweep(hour).await?, 0, "{}", b.dialect);
        assert_eq!(a.sweep(SweepOptions::new()).await?, 1, "{}", b.dialect);
    }
    Ok(())
}

#[tokio::test]
async fn tokens_keep_rising_across_a_sweep() -> anyhow::Result<()> {
    for b in common::backends("sweep_tokens").await {
        let a = b.fresh_table().await?;
        let mut last = 0;
        for _ in 0..3 {
            let g = a.try_acquire("k").await?.expect("k");
            assert!(g.fencing_token() > last, "{}", b.dialect);
            last = g.fencing_token();
            assert!(g.release().await?);
            assert_eq!(a.sweep(SweepOptions::new()).await?, 1, "{}", b.dialect);
        }
    }
    Ok(())
}

/// What the sweeper promises about a row released this instant: the next sweep takes
/// it, also when the release and the sweep fall in the same tick of the database clock
/// (SQLite's has a resolution of a millisecond). Tried many times in a row, so that
/// a bound that is not inclusive would fail here, not now and then elsewhere.
#[tokio::test]
async fn a_row_released_this_instant_is_swept() -> anyhow::Result<()> {
    for b in common::backends("sweep_instant").await {
        let a = b.fresh_table().await?;
        for i in 0..50 {
            assert!(a.try_acquire("k").await?.expect("k").release().await?);
            assert_eq!(
                a.sweep(SweepOptions::new()).await?,
                1,
                "{}: try {i}",
                b.dialect
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn bad_sweep_options_fail_before_any_sql() -> anyhow::Result<()> {
    for b in common::backends("sweep_bad").await {
        let a = b.locker().await?;
        a.pool().close().await;
        let e = a
            .sweep(SweepOptions::new().batch(0))
            .await
            .expect_err("batch 0");
        assert!(matches!(e, Error::InvalidBatch { .. }), "{e:?}");
        let e = a
            .sweep(SweepOptions::new().batch(1_000_000))
            .await
            .expect_err("batch");
        assert!(matches!(e, Error::InvalidBatch { .. }), "{e:?}");
        let e = a
            .sweep(SweepOptions::new().grace(Duration::MAX))
            .await
            .expect_err("grace");
        assert!(matches!(e, Error::TtlTooLong { .. }), "{e:?}");
        let e = a
            .spawn_sweeper(Duration::ZERO, SweepOptions::new())
            .expect_err("interval");
        assert!(matches!(e, Error::TtlTooShort { .. }), "{e:?}");
    }
    Ok(())
}

#[tokio::test]
async fn background_sweeper_reclaims_and_shuts_down() -> anyhow::Result<()> {
    for b in common::backends("sweep_task").await {
        let a = b.fresh_table().await?;
        let sweeper = a.spawn_sweeper(Duration::from_millis(20), SweepOptions::new())?;
        for i in 0..5 {
            assert!(
                a.try_acquire(&format!("k{i}"))
                    .await?
                    .expect("k")
                    .release()
                    .await?
            );
        }
        let started = Instant::now();
        while sweeper.swept() < 5 && started.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let total = sweeper.shutdown().await;
        assert_eq!(total, 5, "{}", b.dialect);
        // Shut down means no more sweeps.
        assert!(a.try_acquire("after").await?.expect("k").release().await?);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let rows = b
            .scalar(a.pool(), &format!("SELECT COUNT(*) FROM {}", b.quoted()))
            .await?;
        assert_eq!(rows, 1, "{}", b.dialect);
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct Hold {
    key: usize,
    token: i64,
    start: Instant,
    end: Instant,
}

/// A sweeper deleting in a loop while 24 owners acquire, hold (some longer than the
/// TTL, kept alive by the watchdog) and release short-TTL leases on 3 keys: no live
/// lock is ever deleted, which the history shows as no overlap and rising tokens, and
/// no holder is told its lock was lost. The watchdog renews every third of the 2 s TTL,
/// so a renewal may be held up for over a second before a lease could lapse for real
/// (which would be no fault of the sweeper). On SQLite, where every write takes the
/// whole database, the sweeper pauses a moment between sweeps, as a real one does, so
/// that it cannot starve the renewals of the write lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sweeping_never_deletes_a_live_lock() -> anyhow::Result<()> {
    const KEYS: usize = 3;
    for b in common::backends("sweep_race").await {
        b.fresh_table().await?;
        let sweeper_handle = b.locker().await?;
        let sqlite = b.dialect == sqlock::Dialect::Sqlite;
        let stop = Arc::new(AtomicBool::new(false));
        let swept = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut total = 0;
                while !stop.load(Ordering::Relaxed) {
                    total += sweeper_handle.sweep(SweepOptions::new().batch(2)).await?;
                    if sqlite {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
                anyhow::Ok(total)
            })
        };
        let history = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let base = b
                .builder()
                .await?
                .ttl(Duration::from_millis(2_000))
                .poll_interval(Duration::from_millis(1), Duration::from_millis(10))
                .build()?;
            for t in 0..8usize {
                let locker = base.new_handle();
                let history = history.clone();
                tasks.push(tokio::spawn(async move {
                    for round in 0..6usize {
                        let key = (t + round) % KEYS;
                        let guard = locker.acquire(&format!("race-{key}")).await?;
                        let start = Instant::now();
                        // A few holds outlast the TTL: only renewals keep them.
                        let hold = if (t + round) % 18 == 0 {
                            2_200
                        } else {
                            (t * 7 + round) % 20
                        };
                        tokio::time::sleep(Duration::from_millis(hold as u64)).await;
                        let end = Instant::now();
                        let token = guard.fencing_token();
                        anyhow::ensure!(!guard.is_lost(), "a held lock was lost");
                        anyhow::ensure!(guard.release().await?, "a held lock was swept");
                        history.lock().unwrap().push(Hold {
                            key,
                            token,
                            start,
                            end,
                        });
                    }
                    anyhow::Ok(())
                }));
            }
        }
        for task in tasks {
            task.await??;
        }
        stop.store(true, Ordering::Relaxed);
        let swept = swept.await??;
        let history = history.lock().unwrap().clone();
        for key in 0..KEYS {
            let mut holds: Vec<_> = history.iter().filter(|h| h.key == key).collect();
            holds.sort_by_key(|h| h.start);
            for w in holds.windows(2) {
                assert!(
                    w[1].start >= w[0].end,
                    "{}: overlap {:?} {:?}",
                    b.dialect,
                    w[0],
                    w[1]
                );
                assert!(
                    w[1].token > w[0].token,
                    "{}: token fell {:?} {:?}",
                    b.dialect,
                    w[0],
                    w[1]
                );
            }
        }
        println!(
            "{}: {} holds on {KEYS} keys while the sweeper reclaimed {swept} rows: no overlap",
            b.dialect,
            history.len()
        );
        assert!(
            swept > 0,
            "{}: the sweeper never raced the contenders",
            b.dialect
        );
    }
    Ok(())
}

/// The sweep keeps the row of a key a live fair waiter is queued for, also when the
/// row is unmarked (a join that met the row locked leaves it so), so that the key is
/// never made a fresh one a fair newcomer could take past the waiter; a row whose
/// queued flag outlived every waiter is reclaimed as any other.
#[tokio::test]
async fn the_sweep_keeps_a_key_fair_waiters_wait_for_and_not_a_flag_they_left() -> anyhow::Result<()>
{
    use common::fair::{queued, until};
    use sqlock::Strategy;
    for b in common::servers("sweep_queued").await {
        b.fresh_table().await?;
        let d = b.dialect;
        let fair = b.builder_apart().await?.strategy(Strategy::Fair).build()?;
        let waiter = b
            .builder_apart()
            .await?
            .strategy(Strategy::Fair)
            .ttl(Duration::from_secs(60))
            .poll_interval(Duration::from_secs(60), Duration::from_secs(60))
            .build()?;
        let t = b.quoted();
        // A row whose flag outlived its waiters: released, then marked by hand.
        let g = fair.try_acquire("left").await?.expect("free");
        assert!(g.release().await?, "{d}");
        b.script(
            fair.pool(),
            &format!("UPDATE {t} SET queued = TRUE WHERE lock_key = 'left'"),
        )
        .await?;
        // A lapsed lease with a live waiter queued behind it, the row unmarked.
        let lapsing = fair
            .lock("waited")
            .ttl(Duration::from_millis(300))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("free");
        let w = waiter.clone();
        let waiting = tokio::spawn(async move { w.acquire("waited").await });
        until(|| async { Ok(queued(&b, &fair, "waited").await? == 1) }).await?;
        b.script(
            fair.pool(),
            &format!("UPDATE {t} SET queued = FALSE WHERE lock_key = 'waited'"),
        )
        .await?;
        let lapsed = format!(
            "SELECT COUNT(*) FROM {t} WHERE lock_key = 'waited' AND expires_at <= {now}",
            now = match d {
                sqlock::Dialect::Postgres => "statement_timestamp()",
                _ => "UTC_TIMESTAMP(6)",
            }
        );
        until(|| async { Ok(b.scalar(fair.pool(), &lapsed).await? == 1) }).await?;
        fair.sweep(SweepOptions::new()).await?;
        let rows = |key: &'static str| {
            let sql = format!("SELECT COUNT(*) FROM {t} WHERE lock_key = '{key}'");
            let (b, pool) = (&b, fair.pool());
            async move { b.scalar(pool, &sql).await }
        };
        assert_eq!(
            rows("left").await?,
            0,
            "{d}: a flag nobody waits for kept its row"
        );
        assert_eq!(
            rows("waited").await?,
            1,
            "{d}: the sweep took the row of a key a live waiter is queued for"
        );
        // The waiter's turn is kept: a newcomer's single try is turned away.
        assert!(
            fair.try_acquire("waited").await?.is_none(),
            "{d}: a newcomer took the key past the queued waiter"
        );
        waiting.abort();
        drop(lapsing);
    }
    Ok(())
}
