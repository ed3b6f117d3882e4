//! The watchdog: renewals in one statement per tick, the lost signal, hold caps, and
//! renewal stopping at release.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{Error, LostReason};

#[tokio::test]
async fn held_lease_outlives_its_ttl() -> anyhow::Result<()> {
    for b in common::backends("wd_outlives").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let g = a
            .lock("k")
            .ttl(Duration::from_millis(1_500))
            .try_acquire()
            .await?
            .expect("k");
        // 2.4 s in all, past the TTL: only renewals (every 500 ms) keep the lease, and
        // a tick may be a second late on a busy machine without a lapse.
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                other.try_acquire("k").await?.is_none(),
                "{}: lease lapsed",
                b.dialect
            );
        }
        assert!(!g.is_lost(), "{}", b.dialect);
        assert!(g.release().await?, "{}", b.dialect);
        assert!(
            // Alive 2.4 s after a grant of 1.5 s: at least two renewals.
            a.watchdog_stats().renewed >= 2,
            "{}: {:?}",
            b.dialect,
            a.watchdog_stats()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_leases_cost_at_most_two_statements_a_tick() -> anyhow::Result<()> {
    for b in common::backends("wd_thousand").await {
        let a = b.fresh_table().await?;
        let ttl = Duration::from_secs(3);
        let mut guards = Vec::new();
        for i in 0..1000 {
            let key = format!("lease-{i}");
            guards.push(a.lock(&key).ttl(ttl).try_acquire().await?.expect("free"));
        }
        let before = a.watchdog_stats();
        // Three ticks of one second each, then one lease taken away by force so that a
        // tick must also find out which one was lost.
        tokio::time::sleep(Duration::from_millis(3_200)).await;
        let other = b.locker().await?;
        assert!(other.force_release_now("lease-7").await?);
        // The next tick finds the loss; a bound only, as a tick may be late.
        tokio::time::timeout(Duration::from_secs(30), guards[7].lost().wait()).await?;
        let s = a.watchdog_stats();
        let ticks = s.ticks - before.ticks;
        let statements = s.statements - before.statements;
        println!(
            "{}: 1000 leases held by one handle: {ticks} ticks, {statements} statements, {} renewals, {} lost",
            b.dialect,
            s.renewed - before.renewed,
            s.lost
        );
        assert!(ticks >= 3, "{}: {s:?}", b.dialect);
        assert!(
            statements <= 2 * ticks,
            "{}: more than 2 statements a tick: {s:?}",
            b.dialect
        );
        assert_eq!(s.lost, 1, "{}", b.dialect);
        assert!(guards[7].is_lost());
        assert_eq!(guards[7].lost().reason(), Some(LostReason::NotHeld));
        assert!(guards
            .iter()
            .enumerate()
            .all(|(i, g)| i == 7 || !g.is_lost()));
        for (i, g) in guards.into_iter().enumerate() {
            assert_eq!(g.release().await?, i != 7, "{} lease-{i}", b.dialect);
        }
    }
    Ok(())
}

#[tokio::test]
async fn force_release_fires_the_lost_signal_within_a_period() -> anyhow::Result<()> {
    for b in common::backends("wd_force").await {
        let a = b.fresh_table().await?;
        let operator = b.locker().await?;
        let ttl = Duration::from_millis(900); // renewed every 300 ms
        let mut g = a.lock("k").ttl(ttl).try_acquire().await?.expect("k");
        let token = g.fencing_token();
        let mut lost = g.lost();
        assert!(operator.force_release_now("k").await?, "{}", b.dialect);
        assert!(
            !operator.force_release_now("k").await?,
            "{}: nothing left to release",
            b.dialect
        );
        // One renewal period, plus slack for a loaded machine.
        let reason = tokio::time::timeout(Duration::from_secs(3), lost.wait())
            .await
            .unwrap_or_else(|_| panic!("{}: lost signal did not fire", b.dialect));
        assert_eq!(reason, LostReason::NotHeld);
        assert!(g.is_lost());
        assert!(
            !g.extend(ttl).await?,
            "{}: extend after force release",
            b.dialect
        );
        let next = operator
            .try_acquire("k")
            .await?
            .expect("free after force release");
        assert!(next.fencing_token() > token, "{}", b.dialect);
        assert!(!g.release().await?, "{}", b.dialect);
        assert!(next.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn release_and_drop_stop_renewal_at_once() -> anyhow::Result<()> {
    for b in common::backends("wd_stop").await {
        let a = b.fresh_table().await?;
        let ttl = Duration::from_secs(3); // renewed every second
                                          // A lease kept the whole time, so the watchdog keeps ticking.
        let keep = a.lock("keep").ttl(ttl).try_acquire().await?.expect("keep");
        let released = a.lock("released").ttl(ttl).try_acquire().await?.expect("r");
        let dropped = a.lock("dropped").ttl(ttl).try_acquire().await?.expect("d");
        assert!(released.release().await?);
        drop(dropped);
        let t = b.quoted();
        let pool = a.pool().clone();
        let free =
            |key: &str| format!("SELECT COUNT(*) FROM {t} WHERE lock_key = '{key}' AND NOT locked");
        // The dropped guard's release runs in the background.
        let dropped_free = common::eventually(|| {
            let (b, pool, sql) = (&b, &pool, free("dropped"));
            async move { Ok(b.scalar(pool, &sql).await? == 1) }
        })
        .await?;
        assert!(
            dropped_free,
            "{}: the dropped guard's row stayed held",
            b.dialect
        );
        let snapshot = |key: &str| {
            format!(
                "SELECT COUNT(*) FROM {t} WHERE lock_key = '{key}' AND lock_time = (SELECT lock_time FROM sqlock_snap WHERE k = '{key}')"
            )
        };
        b.script(&pool, "DROP TABLE IF EXISTS sqlock_snap").await?;
        b.script(
            &pool,
            &format!("CREATE TABLE sqlock_snap AS SELECT lock_key AS k, lock_time FROM {t}"),
        )
        .await?;
        // Two ticks at least after the snapshot, one of which renewed the kept lease:
        // a renewal of the others would have come with it.
        let ticks = a.watchdog_stats().ticks;
        let renewed =
            common::eventually(|| {
                let (a, b, pool, sql) = (&a, &b, &pool, snapshot("keep"));
                async move {
                    Ok(a.watchdog_stats().ticks >= ticks + 2 && b.scalar(pool, &sql).await? == 0)
                }
            })
            .await?;
        assert!(renewed, "{}: the watchdog stopped renewing keep", b.dialect);
        for key in ["released", "dropped"] {
            assert_eq!(
                b.scalar(&pool, &free(key)).await?,
                1,
                "{} {key} is free",
                b.dialect
            );
            assert_eq!(
                b.scalar(&pool, &snapshot(key)).await?,
                1,
                "{}: a renewal touched {key} after its release",
                b.dialect
            );
        }
        assert!(keep.release().await?);
        b.script(&pool, "DROP TABLE sqlock_snap").await?;
    }
    Ok(())
}

#[tokio::test]
async fn hold_cap_stops_renewal_and_fires_at_expiry() -> anyhow::Result<()> {
    for b in common::backends("wd_cap").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let g = a
            .lock("k")
            .ttl(Duration::from_millis(300))
            .max_hold(Duration::from_millis(400))
            .try_acquire()
            .await?
            .expect("k");
        let mut lost = g.lost();
        let reason = tokio::time::timeout(Duration::from_secs(5), lost.wait()).await?;
        assert_eq!(reason, LostReason::HoldCapReached, "{}", b.dialect);
        let taken = other.acquire_timeout("k", Duration::from_secs(5)).await?;
        assert!(!g.release().await?);
        assert!(taken.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn unrenewed_lease_fires_at_its_expiry() -> anyhow::Result<()> {
    for b in common::backends("wd_unrenewed").await {
        let a = b.fresh_table().await?;
        let g = a
            .lock("k")
            .ttl(Duration::from_millis(200))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("k");
        let mut lost = g.lost();
        let reason = tokio::time::timeout(Duration::from_secs(5), lost.wait()).await?;
        assert_eq!(reason, LostReason::HoldCapReached, "{}", b.dialect);
        drop(g);
    }
    Ok(())
}

#[tokio::test]
async fn with_lock_cancels_the_work_when_the_lock_is_lost() -> anyhow::Result<()> {
    for b in common::backends("wd_with_lock").await {
        let a = b.fresh_table().await?;
        let operator = b.locker().await?;
        // The operator releases the key once the work has begun, so under the lock.
        let (begun, started) = tokio::sync::oneshot::channel::<()>();
        let killer = tokio::spawn(async move {
            started.await?;
            operator
                .force_release_now("k")
                .await
                .map_err(anyhow::Error::from)
        });
        let result = a
            .lock("k")
            .ttl(Duration::from_secs(3))
            .run(|_token| async move {
                let _ = begun.send(());
                tokio::time::sleep(Duration::from_secs(30)).await;
                "finished"
            })
            .await;
        assert!(killer.await??, "{}", b.dialect);
        match result {
            Err(Error::LockLost { key, reason }) => {
                assert_eq!(key, "k");
                assert_eq!(reason, LostReason::NotHeld);
            }
            other => panic!("{}: expected LockLost, got {other:?}", b.dialect),
        }
        // And when nothing goes wrong, the work's value comes back and the lock is free.
        let v = a.with_lock("k", |token| async move { token }).await?;
        assert!(v > 0);
        assert!(
            a.new_handle().try_acquire("k").await?.is_some(),
            "{}",
            b.dialect
        );
    }
    Ok(())
}

/// A holder whose process stalls (here: its runtime's only thread blocks) past its TTL
/// loses the lock to another handle; when it resumes, its signal fires and its release
/// reports the lock was not held.
#[tokio::test]
async fn paused_holder_learns_it_lost_the_lock() -> anyhow::Result<()> {
    for b in common::backends("wd_paused").await {
        let other = b.fresh_table().await?;
        let (acquired_tx, acquired_rx) = tokio::sync::oneshot::channel();
        let holder_backend = b.clone();
        let holder = std::thread::spawn(move || -> anyhow::Result<(LostReason, bool)> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let a = holder_backend.locker().await?;
                let g = a
                    .lock("k")
                    .ttl(Duration::from_millis(400))
                    .try_acquire()
                    .await?
                    .expect("k");
                let _ = acquired_tx.send(g.fencing_token());
                // The pause: nothing on this runtime runs, renewals included.
                std::thread::sleep(Duration::from_millis(1_500));
                let mut lost = g.lost();
                let reason = tokio::time::timeout(Duration::from_secs(5), lost.wait()).await?;
                let released = g.release().await?;
                Ok((reason, released))
            })
        });
        let old_token = acquired_rx.await?;
        let taken = other.acquire_timeout("k", Duration::from_secs(10)).await?;
        assert!(taken.fencing_token() > old_token);
        let (reason, released) = tokio::task::spawn_blocking(move || holder.join())
            .await?
            .map_err(|_| anyhow::anyhow!("holder thread panicked"))??;
        assert!(
            matches!(reason, LostReason::NotHeld | LostReason::Lapsed),
            "{}: {reason:?}",
            b.dialect
        );
        assert!(
            !released,
            "{}: the paused holder's release must report not held",
            b.dialect
        );
        assert!(
            taken.release().await?,
            "{}: the new holder keeps its lock",
            b.dialect
        );
    }
    Ok(())
}

/// An explicit extension moves the point from which the lost signal counts: a lease
/// without renewal extended past its TTL is not reported lost at the old expiry, and
/// an extension asking for less keeps the later expiry, where the signal then fires.
#[tokio::test]
async fn extend_moves_the_lost_signal_with_the_expiry() -> anyhow::Result<()> {
    for b in common::backends("wd_extend").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let mut g = a
            .lock("k")
            .ttl(Duration::from_millis(300))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("k");
        // Sent no earlier than this: the lease is valid until at least then plus 3 s.
        let extended_at = tokio::time::Instant::now();
        assert!(g.extend(Duration::from_secs(3)).await?);
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(!g.is_lost(), "{}: lost at the old expiry", b.dialect);
        assert!(other.try_acquire("k").await?.is_none(), "{}", b.dialect);
        // An extension never shortens a lease: the 3 s expiry stays, and the lost
        // signal fires there, not 200 ms from now.
        let before = g.expires_at();
        assert!(g.extend(Duration::from_millis(200)).await?);
        assert!(g.expires_at() >= before, "{}: extend shortened", b.dialect);
        assert!(!g.is_lost(), "{}", b.dialect);
        let mut lost = g.lost();
        tokio::time::timeout(Duration::from_secs(5), lost.wait()).await?;
        // Not at the shorter extension's end (about 1 s after `extended_at`): the
        // signal counts to the 3 s expiry the database kept. A lower bound, which a
        // slow machine only makes easier to meet.
        let fired = extended_at.elapsed();
        assert!(
            fired >= Duration::from_secs(3),
            "{}: lost() fired {fired:?} after the 3 s extension was sent, before the \
             lease's expiry: the shorter extension shortened it",
            b.dialect
        );
        assert!(g.release().await.is_ok());
        // A cap too large to represent is no cap, and no panic.
        let capped = a
            .lock("cap")
            .max_hold(Duration::MAX)
            .try_acquire()
            .await?
            .expect("cap");
        assert!(capped.release().await?);
    }
    Ok(())
}
