//! An operator's force release: by default a revocation that never lets two holders
//! run at once (`Locker::force_release`), and, for a holder known to be gone, the
//! immediate release (`Locker::force_release_now`).
//!
//! A revoked lock stays busy for everyone, its holder included, until the holder gives
//! it back (its release answers `true` and frees the key at once) or until the expiry
//! it had when revoked, on the database clock, never before; the holder's renewals and
//! extensions fail, and its lost signal fires with `LostReason::Revoked` (on
//! PostgreSQL, with notifications, at once rather than at its next tick). A revoked
//! fair lock goes to its waiters in their order; a name held in shared mode has each
//! of its reads and permits revoked. On every backend: a SQLite file, PostgreSQL and
//! MariaDB.

mod common;

use common::fair::{queued, take_turn, until};

use std::time::Duration;

use anyhow::Context;
use sqlock::{Dialect, Locker, LostReason, Strategy};
use tokio::time::Instant;

/// A long TTL: the revoked lease would outlive every test, were it not given back.
const LONG_TTL: Duration = Duration::from_secs(60);

/// How often the holders of these tests renew, so that a revocation is heard within a
/// second without notifications.
const RENEW_EVERY: Duration = Duration::from_millis(200);

/// How long any wait of these tests may take before it counts as a failure.
const DEADLINE: Duration = Duration::from_secs(30);

/// A holder that renews often, with `strategy`.
async fn holder(b: &common::Backend, strategy: Strategy) -> anyhow::Result<Locker> {
    Ok(b.builder()
        .await?
        .strategy(strategy)
        .ttl(LONG_TTL)
        .renew_interval(RENEW_EVERY)
        .build()?)
}

/// A revoked lease or insert lock: busy for every other owner and for its holder until
/// the holder gives it back; the holder's lost signal fires with `Revoked`, its
/// extension fails, its release answers `true` and frees the key at once. Before the
/// fix the key was free at once, while the holder still ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_lock_is_busy_until_its_holder_gives_it_back() -> anyhow::Result<()> {
    for b in common::backends("revoke_busy").await {
        b.fresh_table().await?;
        let other = b.locker().await?;
        for strategy in [Strategy::Lease, Strategy::Insert] {
            let d = format!("{}/{strategy:?}", b.dialect);
            let key = format!("busy-{strategy:?}");
            let holding = holder(&b, strategy).await?;
            let mut guard = holding.acquire(&key).await?;
            let mut lost = guard.lost();

            let r = other
                .force_release(&key)
                .await?
                .context("nothing revoked")?;
            assert_eq!(r.revoked, 1, "{d}");
            assert_eq!(r.lock.owner, holding.owner().to_string(), "{d}");
            assert_eq!(r.lock.fencing_token, guard.fencing_token(), "{d}");
            assert_eq!(r.lock.hold_count, 0, "{d}");
            assert!(r.lock.expires_at >= guard.expires_at(), "{d}: {r:?}");

            // Busy for everyone, the holder's own handle included.
            assert!(
                other.try_acquire(&key).await?.is_none(),
                "{d}: free at once"
            );
            assert!(
                holding.try_acquire(&key).await?.is_none(),
                "{d}: re-entered"
            );
            let reason = tokio::time::timeout(DEADLINE, lost.wait())
                .await
                .with_context(|| format!("{d}: the lost signal never fired"))?;
            assert_eq!(reason, LostReason::Revoked, "{d}");
            assert!(!guard.extend(LONG_TTL).await?, "{d}: extended");
            // Still busy after the holder heard of it: only its give-back frees it.
            assert!(
                other.try_acquire(&key).await?.is_none(),
                "{d}: freed unasked"
            );
            let info = other.lock_info(&key).await?.context("freed")?;
            assert_eq!(info.fencing_token, guard.fencing_token(), "{d}");
            // Asked again: nothing left to revoke, the same expiry.
            let again = other.force_release(&key).await?.context("not held")?;
            assert_eq!(again.revoked, 0, "{d}");
            assert_eq!(again.lock.expires_at, r.lock.expires_at, "{d}");

            assert!(guard.release().await?, "{d}: the give-back was refused");
            let next = other.try_acquire(&key).await?;
            let next = next.with_context(|| format!("{d}: not free once given back"))?;
            assert!(next.fencing_token() > r.lock.fencing_token, "{d}");
            assert!(next.release().await?);
        }
        assert!(other.force_release("never-held").await?.is_none());
    }
    Ok(())
}

/// A holder that never gives the lock back (its lease not renewed: a frozen process)
/// keeps the key until the expiry it had when revoked, on the database clock, and not
/// a moment before: the next grant is taken at or after it. Before the fix the key
/// was taken at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_never_gives_back_keeps_the_key_until_its_expiry() -> anyhow::Result<()> {
    for b in common::backends("revoke_lapse").await {
        b.fresh_table().await?;
        let frozen = b.builder().await?.auto_renew(false).build()?;
        let other = b.locker().await?;
        let guard = frozen
            .lock("frozen")
            .ttl(Duration::from_secs(3))
            .acquire()
            .await?;
        let r = other
            .force_release("frozen")
            .await?
            .context("nothing revoked")?;
        assert_eq!(r.revoked, 1, "{}", b.dialect);
        // Polled until free: the grant that gets it must come at or after the expiry.
        let next = loop {
            if let Some(g) = other.try_acquire("frozen").await? {
                break g;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let info = other.lock_info("frozen").await?.context("not held")?;
        assert_eq!(info.fencing_token, next.fencing_token());
        assert!(
            info.acquired_at >= r.lock.expires_at,
            "{}: taken at {} before the revoked lease's expiry {}",
            b.dialect,
            info.acquired_at,
            r.lock.expires_at
        );
        assert!(!guard.release().await?, "{}", b.dialect);
        assert!(next.release().await?);
    }
    Ok(())
}

/// On PostgreSQL, a holder whose family listens for notifications hears of the
/// revocation at once: its lost signal fires long before its next renewal (a third of
/// a 60 s TTL after the grant). Without the notification the loss could come no
/// sooner than that tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_holder_hears_at_once() -> anyhow::Result<()> {
    for b in common::backends_of("revoke_notify", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let holding = b
            .builder()
            .await?
            .ttl(LONG_TTL)
            .notify_waiters(true)
            .build()?;
        let operator = b.locker().await?;
        let sent = Instant::now();
        let guard = holding.acquire("heard").await?;
        let mut lost = guard.lost();
        assert!(operator.force_release("heard").await?.is_some());
        let tick = sent + LONG_TTL / 3;
        let reason = tokio::time::timeout_at(tick - Duration::from_secs(1), lost.wait())
            .await
            .context("the loss came only with the renewal tick")?;
        assert_eq!(reason, LostReason::Revoked);
        assert_eq!(holding.watchdog_stats().failed_ticks, 0);
        assert!(guard.release().await?);
        assert!(operator.try_acquire("heard").await?.is_some());
    }
    Ok(())
}

/// A revoked fair lock goes to its queued waiters in their order once its holder gives
/// it back: nobody takes it before, and the first waiter, then the second, get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_get_a_revoked_lock_in_order() -> anyhow::Result<()> {
    for b in common::backends("revoke_fair").await {
        b.fresh_table().await?;
        let holding = holder(&b, Strategy::Fair).await?;
        let guard = holding.acquire("fair").await?;
        let mut lost = guard.lost();
        let waiter = || async {
            anyhow::Ok(
                b.builder()
                    .await?
                    .strategy(Strategy::Fair)
                    .poll_interval(Duration::from_millis(20), Duration::from_millis(100))
                    .build()?,
            )
        };
        let first = take_turn(waiter().await?, "fair");
        until(|| async { Ok(queued(&b, &holding, "fair").await? == 1) }).await?;
        let second = take_turn(waiter().await?, "fair");
        until(|| async { Ok(queued(&b, &holding, "fair").await? == 2) }).await?;

        let operator = b.locker().await?;
        let r = operator.force_release("fair").await?.context("not held")?;
        assert_eq!(r.revoked, 1, "{}", b.dialect);
        assert_eq!(r.lock.waiters, 2, "{}", b.dialect);
        let reason = tokio::time::timeout(DEADLINE, lost.wait()).await?;
        assert_eq!(reason, LostReason::Revoked, "{}", b.dialect);
        // Nobody was handed it meanwhile: the queue is whole, the holder's row stays.
        assert_eq!(queued(&b, &holding, "fair").await?, 2, "{}", b.dialect);
        let info = operator.lock_info("fair").await?.context("freed")?;
        assert_eq!(info.fencing_token, guard.fencing_token(), "{}", b.dialect);
        assert!(!first.is_finished() && !second.is_finished());

        let token = guard.fencing_token();
        assert!(guard.release().await?, "{}", b.dialect);
        let t1 = tokio::time::timeout(DEADLINE, first).await???;
        let t2 = tokio::time::timeout(DEADLINE, second).await???;
        assert!(token < t1 && t1 < t2, "{}", b.dialect);
    }
    Ok(())
}

/// A name held in shared mode has each of its reads revoked: the name stays busy for a
/// writer until every read gave itself back, each read's lost signal fires with
/// `Revoked`; the key of one permit revokes that permit alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holds_are_each_revoked() -> anyhow::Result<()> {
    for b in common::backends("revoke_shared").await {
        let d = b.dialect;
        let table = b.locker().await?;
        let drop = match d {
            Dialect::MySql => format!("DROP TABLE IF EXISTS `{}_semaphores`", b.table),
            _ => format!("DROP TABLE IF EXISTS \"{}_semaphores\"", b.table),
        };
        b.script(table.pool(), &drop).await?;
        b.fresh_table().await?;
        let (a, c) = (
            holder(&b, Strategy::Lease).await?,
            holder(&b, Strategy::Lease).await?,
        );
        let operator = b.locker().await?;
        let ra = a.read_lock("shared").acquire().await?;
        let rc = c.read_lock("shared").acquire().await?;
        let (mut la, mut lc) = (ra.lost(), rc.lost());
        let r = operator
            .force_release("shared")
            .await?
            .context("not held")?;
        assert_eq!(r.revoked, 2, "{d}");
        assert_eq!(r.lock.hold_count, 2, "{d}");
        for lost in [&mut la, &mut lc] {
            let reason = tokio::time::timeout(DEADLINE, lost.wait()).await?;
            assert_eq!(reason, LostReason::Revoked, "{d}");
        }
        let writer = b.locker().await?;
        assert!(
            writer.write_lock("shared").try_acquire().await?.is_none(),
            "{d}"
        );
        assert!(ra.release().await?, "{d}");
        assert!(
            writer.write_lock("shared").try_acquire().await?.is_none(),
            "{d}"
        );
        assert!(rc.release().await?, "{d}");
        let w = writer.write_lock("shared").try_acquire().await?;
        assert!(
            w.context("free once both reads gave back")?
                .release()
                .await?
        );

        // One permit of two: that one alone.
        let sem = a.semaphore("pool", 2);
        let one = sem.acquire().await?;
        let two = c.semaphore("pool", 2).acquire().await?;
        let r = operator
            .force_release(one.keys().next().unwrap())
            .await?
            .context("not held")?;
        assert_eq!(r.revoked, 1, "{d}");
        let reason = tokio::time::timeout(DEADLINE, one.lost().wait()).await?;
        assert_eq!(reason, LostReason::Revoked, "{d}");
        assert!(!two.is_lost(), "{d}");
        let third = operator.semaphore("pool", 2);
        assert!(
            third.try_acquire().await?.is_none(),
            "{d}: the revoked slot freed"
        );
        assert!(one.release().await?, "{d}");
        let got = third.try_acquire().await?.context("the slot given back")?;
        assert!(got.release().await? && two.release().await?);
    }
    Ok(())
}

/// A revoked lock taken with an at-least hold is freed by its holder's give-back at
/// once: a revoked lease never outlasts the expiry it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_at_least_hold_frees_when_given_back() -> anyhow::Result<()> {
    for b in common::backends("revoke_at_least").await {
        b.fresh_table().await?;
        let holding = holder(&b, Strategy::Lease).await?;
        let other = b.locker().await?;
        let guard = holding
            .lock("job")
            .at_least(Duration::from_secs(3600))
            .acquire()
            .await?;
        assert!(other.force_release("job").await?.is_some());
        assert!(guard.release().await?, "{}", b.dialect);
        let next = other.try_acquire("job").await?;
        assert!(next.is_some(), "{}: kept by the at-least hold", b.dialect);
    }
    Ok(())
}

/// `force_release_now`, for a holder known to be gone, keeps the immediate release:
/// the key is free at once, and the holder learns of it as `NotHeld`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_now_frees_at_once() -> anyhow::Result<()> {
    for b in common::backends("revoke_now").await {
        b.fresh_table().await?;
        let holding = holder(&b, Strategy::Lease).await?;
        let other = b.locker().await?;
        let guard = holding.acquire("gone").await?;
        let mut lost = guard.lost();
        assert!(other.force_release_now("gone").await?);
        let next = other.try_acquire("gone").await?;
        assert!(next.is_some(), "{}: not free at once", b.dialect);
        let reason = tokio::time::timeout(DEADLINE, lost.wait()).await?;
        assert_eq!(reason, LostReason::NotHeld, "{}", b.dialect);
        assert!(!guard.release().await?);
    }
    Ok(())
}

/// An election's lease revoked: the leader's `lost()` fires with `Revoked`, no other
/// candidate leads until the leader resigns (gives the lease back), and then one does,
/// with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_leader_ends_its_term_when_it_resigns() -> anyhow::Result<()> {
    for b in common::backends("revoke_elect").await {
        b.fresh_table().await?;
        let d = b.dialect;
        let leader = holder(&b, Strategy::Lease).await?;
        let rival = b.locker().await?;
        let leading = leader.election("lead").campaign().await?;
        let mut lost = leading.lost();
        let key = leader.election("lead").key().to_owned();
        let r = rival.force_release(&key).await?.context("not held")?;
        assert_eq!(r.revoked, 1, "{d}");
        let reason = tokio::time::timeout(DEADLINE, lost.wait()).await?;
        assert_eq!(reason, LostReason::Revoked, "{d}");
        assert!(
            rival.election("lead").try_campaign().await?.is_none(),
            "{d}: elected beside a leader still running"
        );
        let term = leading.term();
        assert!(leading.resign().await?, "{d}");
        let next = rival.election("lead").try_campaign().await?;
        let next = next.with_context(|| format!("{d}: nobody leads once it resigned"))?;
        assert!(next.term() > term, "{d}");
        assert!(next.resign().await?);
    }
    Ok(())
}

/// A for-update lock is refused both ways, with `Error::RowLocked`, and its holder
/// keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_for_update_lock_is_refused() -> anyhow::Result<()> {
    for b in common::servers("revoke_for_update").await {
        b.fresh_table().await?;
        let holding = b.builder().await?.strategy(Strategy::ForUpdate).build()?;
        let operator = b.locker().await?;
        let guard = holding.acquire("row").await?;
        match operator.force_release("row").await {
            Err(sqlock::Error::RowLocked { key }) => assert_eq!(key, "row"),
            other => panic!("{}: revoked a for-update lock: {other:?}", b.dialect),
        }
        match operator.force_release_now("row").await {
            Err(sqlock::Error::RowLocked { key }) => assert_eq!(key, "row"),
            other => panic!("{}: released a for-update lock: {other:?}", b.dialect),
        }
        assert!(!guard.is_lost(), "{}", b.dialect);
        assert!(
            operator.try_acquire("row").await?.is_none(),
            "{}",
            b.dialect
        );
        guard.release().await?;
    }
    Ok(())
}

/// The immediate release of a name held by reads releases them and the name in one
/// transaction, then the name as any lock: a read granted between the two must keep
/// its name. A reader takes and gives back reads in a loop while the operator releases
/// the name at once again and again and a plain locker polls: whenever the plain
/// locker is granted, no read granted since the last release of its holds is live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_granted_during_an_immediate_release_keeps_its_name() -> anyhow::Result<()> {
    for b in common::backends("fr_now_shared").await {
        let operator = b.fresh_table().await?;
        let reader = b.builder().await?.ttl(LONG_TTL).build()?;
        let plain = b.builder().await?.ttl(LONG_TTL).build()?;
        let read_key = format!("doc@read:{}", reader.owner());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reads = {
            let (reader, stop) = (reader.clone(), stop.clone());
            tokio::spawn(async move {
                let mut granted = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(Some(g)) = reader.read_lock("doc").try_acquire().await {
                        granted += 1;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        let _ = g.release().await;
                    }
                }
                granted
            })
        };
        let forces = {
            let (operator, stop) = (operator.clone(), stop.clone());
            tokio::spawn(async move {
                let mut calls = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if operator.force_release_now("doc").await.is_ok() {
                        calls += 1;
                    }
                }
                calls
            })
        };
        let started = Instant::now();
        let mut granted = 0;
        while started.elapsed() < Duration::from_secs(4) {
            if let Some(g) = plain.try_acquire("doc").await? {
                granted += 1;
                // A read whose row is live with its holds, seen while the plain lock
                // is still this grant (the operator may release either at any time:
                // the name read after the read row, with the grant's token), held
                // beside it.
                let read = operator.lock_info(&read_key).await?;
                let name = operator.lock_info("doc").await?;
                let still_ours = name.as_ref().is_some_and(|n| {
                    n.owner == plain.owner().to_string() && n.fencing_token == g.fencing_token()
                });
                let overlap = still_ours && read.as_ref().is_some_and(|r| r.hold_count > 0);
                g.release().await?;
                assert!(
                    !overlap,
                    "{}: a plain lock was granted beside a live read: {read:?}",
                    b.dialect
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (reads, forces) = (reads.await?, forces.await?);
        eprintln!(
            "{}: {reads} reads, {forces} immediate releases, {granted} plain grants",
            b.dialect
        );
        assert!(reads > 0 && forces > 0, "{}: nothing raced", b.dialect);
    }
    Ok(())
}
