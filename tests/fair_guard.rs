//! A fair lock (`Strategy::Fair`) held is a lease like any other: the guard it gives has
//! the lease's semantics. The watchdog renews a fair hold past its TTL, also one that
//! came through the queue; `extend` moves the row's expiry, and answers `false` once
//! the hold was revoked (`force_release`), whose holder's release then frees the key;
//! an operator's immediate `force_release_now` fires the holder's lost signal and
//! hands the lock to the first queued waiter in the force release itself (a revoked
//! fair lock's handoff is in `force_release.rs`); a request's `timeout` answers `Error::Timeout` and leaves the queue; the
//! holder re-enters its key while others wait, who wait on until its last release;
//! acquire futures and guards move across tasks. On every backend: a SQLite file,
//! PostgreSQL (with and without notifications) and MariaDB.

mod common;

use common::fair::{lockers, queued, take_turn, until};

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use sqlock::{LockGuard, Locker, LostReason, Strategy};
use tokio::time::Instant;

/// How long any wait of these tests may take before it counts as a failure.
const DEADLINE: Duration = Duration::from_secs(60);

/// A TTL the watchdog keeps up with on a loaded machine, yet short enough that a hold
/// outlives it within seconds.
const SHORT_TTL: Duration = Duration::from_secs(3);

/// Waits until the database clock has passed the guard's first expiry while the row
/// stays the guard's (only renewals can keep it held that long), then checks that it
/// is held: not lost, and busy for `other`.
async fn outlives_its_ttl(probe: &Locker, other: &Locker, guard: &LockGuard) -> anyhow::Result<()> {
    let key = guard.key();
    let first = guard.expires_at();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let info = probe
            .lock_info(key)
            .await?
            .context("the fair hold lapsed: the watchdog did not renew it")?;
        assert_eq!(info.owner, guard.owner().to_string());
        assert_eq!(info.fencing_token, guard.fencing_token());
        assert_eq!(info.strategy, "fair");
        // The database's now, as the lookup's own statement saw it.
        let now = info.expires_at - chrono::Duration::from_std(info.expires_in)?;
        if now > first {
            assert!(info.expires_at > first, "{info:?}, first expiry {first}");
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the database clock stood still");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!guard.is_lost(), "{:?}", guard.lost().reason());
    assert!(other.try_acquire(key).await?.is_none(), "{key}: not busy");
    Ok(())
}

/// The watchdog renews a fair hold past its TTL: a hold on a free key, and a hold a
/// waiter was handed by a release through the queue (taken up by a poll, or, on
/// PostgreSQL with notifications, from the notification naming it).
#[tokio::test]
async fn the_watchdog_renews_a_fair_hold() -> anyhow::Result<()> {
    common::on_each(common::backends("fair_guard_renew").await, |b| async move {
        b.fresh_table().await?;
        for (notify, holder) in lockers(&b, SHORT_TTL).await? {
            let key = format!("renew-{notify}");
            let other = holder.new_handle();
            let guard = holder.acquire(&key).await?;
            outlives_its_ttl(&holder, &other, &guard).await?;

            // Through the queue: handed on by the release.
            let waiter = holder.new_handle();
            let k = key.clone();
            let waiting = tokio::spawn(async move { waiter.acquire(&k).await });
            until(|| async { Ok(queued(&b, &holder, &key).await? == 1) }).await?;
            let held = guard.fencing_token();
            assert!(guard.release().await?);
            let g = tokio::time::timeout(DEADLINE, waiting).await???;
            assert!(g.fencing_token() > held, "{}/{notify}", b.dialect);
            outlives_its_ttl(&holder, &other, &g).await?;
            assert!(g.release().await?);
            assert!(holder.lock_info(&key).await?.is_none());
        }
        Ok(())
    })
    .await
}

/// `extend` on a fair guard moves the row's expiry to the guard's new one; once the
/// hold is revoked it answers `false` and takes nothing back, and the holder's release
/// gives the key back at once.
#[tokio::test]
async fn extend_moves_a_fair_expiry() -> anyhow::Result<()> {
    for b in common::backends("fair_guard_extend").await {
        b.fresh_table().await?;
        for (notify, holder) in lockers(&b, SHORT_TTL).await? {
            let key = format!("extend-{notify}");
            let mut guard = holder.acquire(&key).await?;
            let before = holder.lock_info(&key).await?.context("held")?;
            assert!(guard.extend(Duration::from_secs(120)).await?);
            let info = holder.lock_info(&key).await?.context("held")?;
            assert!(info.expires_at > before.expires_at, "{}", b.dialect);
            assert_eq!(info.expires_at, guard.expires_at(), "{}", b.dialect);
            // Renewals of a 3 s TTL alone would need two minutes to reach this far.
            assert!(
                info.expires_at - info.acquired_at >= chrono::Duration::seconds(120),
                "{}: {info:?}",
                b.dialect
            );
            assert_eq!(info.fencing_token, guard.fencing_token());

            // Revoked: the holder can no longer extend it, and the key stays busy
            // until the holder gives it back, which frees it at once.
            let revoked = holder.force_release(&key).await?.context("held")?;
            assert_eq!(revoked.revoked, 1, "{}", b.dialect);
            assert!(
                !guard.extend(Duration::from_secs(120)).await?,
                "{}",
                b.dialect
            );
            assert!(holder.lock_info(&key).await?.is_some(), "{}", b.dialect);
            assert!(guard.release().await?, "{}", b.dialect);
            assert!(holder.lock_info(&key).await?.is_none(), "{}", b.dialect);
        }
    }
    Ok(())
}

/// An immediate force release (`force_release_now`, for a holder known to be gone)
/// fires the fair holder's lost signal (`NotHeld`), and hands the lock to the first
/// queued waiter within the force release: that waiter polls only every
/// 30 s and is never notified, so only the force release can have made it the row's
/// owner by the time it returns. When that waiter stops waiting, its grant goes on to
/// the waiter behind it, and the queue empties.
#[tokio::test]
async fn force_release_fires_lost_and_hands_on() -> anyhow::Result<()> {
    for b in common::backends("fair_guard_lost").await {
        b.fresh_table().await?;
        for (notify, holder) in lockers(&b, SHORT_TTL).await? {
            let key = format!("lost-{notify}");
            let guard = holder.acquire(&key).await?;
            let mut lost = guard.lost();
            let first = b
                .builder()
                .await?
                .strategy(Strategy::Fair)
                .ttl(Duration::from_secs(120))
                .poll_interval(Duration::from_secs(30), Duration::from_secs(30))
                .build()?;
            let first_owner = first.owner().to_string();
            let k = key.clone();
            let slow = tokio::spawn(async move { first.acquire(&k).await });
            until(|| async { Ok(queued(&b, &holder, &key).await? == 1) }).await?;
            let next = holder.new_handle();
            let k = key.clone();
            let behind = take_turn(next, k);
            until(|| async { Ok(queued(&b, &holder, &key).await? == 2) }).await?;

            let operator = holder.new_handle();
            assert!(operator.force_release_now(&key).await?);
            let info = operator.lock_info(&key).await?.context("not handed on")?;
            assert_eq!(info.owner, first_owner, "{}/{notify}", b.dialect);
            assert!(info.fencing_token > guard.fencing_token(), "{info:?}");
            let reason = tokio::time::timeout(DEADLINE, lost.wait())
                .await
                .context("the lost signal never fired")?;
            assert_eq!(reason, LostReason::NotHeld);
            assert!(guard.is_lost());
            assert!(!guard.release().await?);

            // The first waiter stops waiting: its grant goes to the one behind it.
            slow.abort();
            match slow.await {
                Err(e) => assert!(e.is_cancelled(), "{e}"),
                // Its own poll took the grant up first (a very slow run): the dropped
                // guard gives it back, and on, all the same.
                Ok(taken) => drop(taken?),
            }
            let token = tokio::time::timeout(DEADLINE, behind).await???;
            assert!(token > info.fencing_token, "{}/{notify}", b.dialect);
            until(|| async { Ok(queued(&b, &holder, &key).await? == 0) }).await?;
            until(|| async { Ok(holder.lock_info(&key).await?.is_none()) }).await?;
        }
    }
    Ok(())
}

/// A fair request with a `timeout`, on a handle whose own strategy is the lease, answers
/// `Error::Timeout` while another holds the key, and leaves the queue: the holder's
/// release then frees the key rather than handing it to the departed waiter.
#[tokio::test]
async fn a_fair_request_timeout_leaves_the_queue() -> anyhow::Result<()> {
    for b in common::backends("fair_guard_timeout").await {
        b.fresh_table().await?;
        for (notify, holder) in lockers(&b, Duration::from_secs(10)).await? {
            let key = format!("timeout-{notify}");
            let guard = holder.acquire(&key).await?;
            let requester = b.builder().await?.notify_waiters(notify).build()?;
            // The wait must have joined the queue before its deadline for its leaving
            // to show: longer timeouts until a join was seen.
            let mut timeout = Duration::from_millis(500);
            let mut joined = false;
            while !joined {
                anyhow::ensure!(timeout < DEADLINE, "the request never joined the queue");
                let done = AtomicBool::new(false);
                let request = requester
                    .lock(&key)
                    .strategy(Strategy::Fair)
                    .timeout(timeout);
                let (waited, seen) = tokio::join!(
                    async {
                        let waited = request.acquire().await;
                        done.store(true, Ordering::SeqCst);
                        waited
                    },
                    async {
                        let mut seen = false;
                        while !done.load(Ordering::SeqCst) {
                            seen |= queued(&b, &holder, &key).await? > 0;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        anyhow::Ok(seen)
                    }
                );
                assert!(
                    matches!(waited, Err(sqlock::Error::Timeout { .. })),
                    "{}/{notify}: {waited:?}",
                    b.dialect
                );
                joined = seen?;
                until(|| async { Ok(queued(&b, &holder, &key).await? == 0) }).await?;
                timeout *= 2;
            }
            assert_eq!(holder.lock_info(&key).await?.context("held")?.waiters, 0);
            assert!(guard.release().await?);
            assert!(holder.lock_info(&key).await?.is_none(), "{}", b.dialect);
            let g = requester.lock(&key).strategy(Strategy::Fair).try_acquire();
            assert!(g.await?.context("a free key")?.release().await?);
        }
    }
    Ok(())
}

/// The holder re-enters a fair key (`try_acquire`, then `acquire`) while another handle
/// waits in the queue: same token, rising hold count, no place taken; the waiter waits
/// on through every release but the last, then gets the lock with a higher token.
#[tokio::test]
async fn reentry_while_waiters_are_queued() -> anyhow::Result<()> {
    for b in common::backends("fair_guard_reenter").await {
        b.fresh_table().await?;
        for (notify, holder) in lockers(&b, Duration::from_secs(10)).await? {
            let key = format!("reenter-{notify}");
            let outer = holder.acquire(&key).await?;
            let waiter = holder.new_handle();
            let k = key.clone();
            let waiting = tokio::spawn(async move { waiter.acquire(&k).await });
            until(|| async { Ok(queued(&b, &holder, &key).await? == 1) }).await?;

            let again = holder
                .try_acquire(&key)
                .await?
                .with_context(|| format!("a try re-entry {} {notify}", b.dialect))?;
            assert_eq!(again.hold_count(), 2);
            assert_eq!(again.fencing_token(), outer.fencing_token());
            let inner = tokio::time::timeout(DEADLINE, holder.acquire(&key)).await??;
            assert_eq!(inner.hold_count(), 3);
            assert_eq!(inner.fencing_token(), outer.fencing_token());
            assert_eq!(queued(&b, &holder, &key).await?, 1, "{}", b.dialect);
            let info = holder.lock_info(&key).await?.context("held")?;
            assert_eq!((info.hold_count, info.waiters), (3, 1), "{}", b.dialect);

            for (guard, left) in [(inner, 2), (again, 1)] {
                assert!(guard.release().await?);
                tokio::time::sleep(Duration::from_millis(200)).await;
                assert!(
                    !waiting.is_finished(),
                    "{}/{notify}: served early",
                    b.dialect
                );
                let info = holder.lock_info(&key).await?.context("held")?;
                assert_eq!(info.owner, holder.owner().to_string());
                assert_eq!(info.hold_count, left);
                assert_eq!(info.fencing_token, outer.fencing_token());
            }
            let held = outer.fencing_token();
            assert!(outer.release().await?);
            let g = tokio::time::timeout(DEADLINE, waiting).await???;
            assert!(g.fencing_token() > held, "{}/{notify}", b.dialect);
            assert_eq!(g.hold_count(), 1);
            assert!(g.release().await?);
            // A place whose grant a notification handed over is deleted in the
            // background.
            until(|| async { Ok(queued(&b, &holder, &key).await? == 0) }).await?;
        }
    }
    Ok(())
}

/// A fair acquisition runs inside `tokio::spawn` (its future is `Send + 'static`), on
/// a runtime of several threads, and its guard moves to other tasks: released in one,
/// handed to a waiter spawned in another, extended and released in a third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_futures_and_guards_move_across_tasks() -> anyhow::Result<()> {
    for b in common::backends("fair_guard_spawn").await {
        b.fresh_table().await?;
        for (notify, holder) in lockers(&b, SHORT_TTL).await? {
            let key = format!("spawn-{notify}");
            let (h, k) = (holder.clone(), key.clone());
            let guard = tokio::spawn(async move { h.acquire(&k).await }).await??;
            let (w, k) = (holder.new_handle(), key.clone());
            let waiting =
                tokio::spawn(async move { w.lock(&k).strategy(Strategy::Fair).acquire().await });
            until(|| async { Ok(queued(&b, &holder, &key).await? == 1) }).await?;
            let held = guard.fencing_token();
            assert!(tokio::spawn(async move { guard.release().await }).await??);
            let g = tokio::time::timeout(DEADLINE, waiting).await???;
            assert!(g.fencing_token() > held, "{}/{notify}", b.dialect);
            let (probe, k) = (holder.clone(), key.clone());
            let token = g.fencing_token();
            tokio::spawn(async move {
                let mut g = g;
                assert!(g.extend(Duration::from_secs(60)).await?);
                let info = probe.lock_info(&k).await?.context("held")?;
                assert_eq!(
                    (info.fencing_token, info.expires_at),
                    (token, g.expires_at())
                );
                assert!(g.release().await?);
                anyhow::Ok(())
            })
            .await??;
            assert!(holder.lock_info(&key).await?.is_none());
            until(|| async { Ok(queued(&b, &holder, &key).await? == 0) }).await?;
        }
    }
    Ok(())
}
