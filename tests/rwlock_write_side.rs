//! The write side of a read-write lock is a holder of its own, told apart in the
//! table from every other lock of its owner: the name's row records it as `write`. A
//! read of the same handle is granted beside it only then (a downgrade), never beside
//! a plain lock of the handle on the name, however the two meet (the handle's own
//! checks before any SQL can be passed by two calls at once); and every release of
//! the write side, its guard's or that of an attempt cut off, leaves the name to a
//! live read of its owner. On every backend.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlock::{DbPool, Error, LockGuard, Locker, Strategy};

/// A bound on waits expected to end much sooner.
const DEADLINE: Duration = Duration::from_secs(30);

/// How many times the race below is run per backend.
const ROUNDS: usize = 300;

/// A hold, or `None` for a try refused before any SQL because the other call of the
/// race was granted first and its guard was seen (`Error::MixedHolds`): no hold.
fn held(r: sqlock::Result<Option<LockGuard>>) -> anyhow::Result<Option<LockGuard>> {
    match r {
        Err(Error::MixedHolds { .. }) => Ok(None),
        other => Ok(other?),
    }
}

/// A plain lock and a read of one name, tried at once by one handle (two tasks behind
/// a barrier): both pass the handle's own checks, neither guard being there yet, and
/// the database alone decides. Whenever both are granted, the plain lock is released
/// and the name must stay held for the read: another handle's try is busy, and the
/// read is not lost. (With the write side recorded as a plain lease, a read found the
/// plain lock of its own owner, took it for a write side and was granted; the plain
/// release then freed the name under the read.) At least one of the two is granted
/// each round, and nothing is left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_and_a_read_raced_on_one_handle_never_share_the_name() -> anyhow::Result<()> {
    for b in common::backends("rw_side_race").await {
        let locker = b.fresh_table().await?;
        let other = b.locker().await?;
        let (mut both, mut plain_only, mut read_only) = (0, 0, 0);
        for round in 0..ROUNDS {
            let name = format!("race-{round}");
            let barrier = Arc::new(tokio::sync::Barrier::new(2));
            let plain = tokio::spawn({
                let (locker, name, barrier) = (locker.clone(), name.clone(), barrier.clone());
                async move {
                    barrier.wait().await;
                    locker.try_acquire(&name).await
                }
            });
            let read = tokio::spawn({
                let (locker, name, barrier) = (locker.clone(), name.clone(), barrier.clone());
                async move {
                    barrier.wait().await;
                    locker.read_lock(&name).try_acquire().await
                }
            });
            let (plain, read) = (held(plain.await?)?, held(read.await?)?);
            match (plain, read) {
                (Some(plain), Some(read)) => {
                    both += 1;
                    assert!(plain.release().await?, "{}: the plain lock", b.dialect);
                    let taken = other.try_acquire(&name).await?;
                    let lost = read.is_lost();
                    anyhow::ensure!(
                        taken.is_none() && !lost,
                        "{} round {round}: the plain lock's release freed {name} under a \
                         live read (another handle got it: {}, the read lost: {lost})",
                        b.dialect,
                        taken.is_some()
                    );
                    assert!(read.release().await?, "{}: the read", b.dialect);
                }
                (Some(plain), None) => {
                    plain_only += 1;
                    assert!(plain.release().await?);
                }
                (None, Some(read)) => {
                    read_only += 1;
                    assert!(read.release().await?);
                }
                (None, None) => anyhow::bail!("{} round {round}: neither was granted", b.dialect),
            }
        }
        println!(
            "{}: {ROUNDS} rounds: both {both}, the lock alone {plain_only}, the read alone \
             {read_only}",
            b.dialect
        );
        assert_eq!(b.held_rows(locker.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// Whether `name` is held by `owner` (the write side, an attempt's grant not given back
/// yet).
async fn owned_by(locker: &Locker, name: &str, owner: &str) -> anyhow::Result<bool> {
    Ok(locker
        .lock_info(name)
        .await?
        .is_some_and(|l| l.owner == owner))
}

/// Checks that `name` is held for `read` alone, in shared mode: one read counted,
/// another handle busy, the read not lost; then releases the read and checks the name
/// is free.
async fn left_to_the_read(
    b: &common::Backend,
    other: &Locker,
    name: &str,
    read: LockGuard,
) -> anyhow::Result<()> {
    let info = other.lock_info(name).await?;
    anyhow::ensure!(
        info.as_ref()
            .is_some_and(|l| l.owner.is_empty() && l.strategy == "read" && l.hold_count == 1),
        "{}: {name} is not held by the read alone: {info:?}",
        b.dialect
    );
    anyhow::ensure!(
        other.try_acquire(name).await?.is_none(),
        "{}: another handle got {name} beside a live read",
        b.dialect
    );
    anyhow::ensure!(!read.is_lost(), "{}: the read was lost", b.dialect);
    anyhow::ensure!(read.release().await?, "{}: the read", b.dialect);
    let g = other.try_acquire(name).await?;
    anyhow::ensure!(g.is_some(), "{}: {name} not free after the read", b.dialect);
    anyhow::ensure!(g.context("free")?.release().await?);
    Ok(())
}

/// A write attempt cut off (its caller stopped waiting once its statement was under
/// way) while a read of the same handle is asked: the read is granted beside the
/// attempt's grant as a downgrade, and the attempt's give-back must leave the name to
/// the read, as the write guard's release does; it must not free it. The handle's pool
/// has one connection, held by the test until both are queued for it, so the three
/// meet in one order every time: the attempt's statement, the read's transaction, the
/// give-back. (With the give-back released as a plain lease it freed the name under
/// the read.)
#[tokio::test]
async fn a_write_attempt_cut_off_beside_a_read_leaves_the_name_to_the_read() -> anyhow::Result<()> {
    for b in common::backends("rw_side_cut").await {
        b.fresh_table().await?;
        let pool = b.pool_with(1).await?;
        let locker = Locker::builder(pool.clone()).table(&b.table).build()?;
        let other = b.locker().await?;
        let owner = locker.owner().to_string();
        for round in 0..5 {
            let name = format!("cut-{round}");
            let conn = checkout(&pool).await?;
            let cut = tokio::time::timeout(Duration::ZERO, locker.write_lock(&name).try_acquire());
            let cut = cut.await.map(|r| r.map(|g| g.is_some()));
            anyhow::ensure!(cut.is_err(), "the write attempt was not cut off: {cut:?}");
            let reading = tokio::spawn({
                let (locker, name) = (locker.clone(), name.clone());
                async move { locker.read_lock(&name).try_acquire().await }
            });
            // The read's transaction waits for the connection behind the attempt.
            settle().await;
            drop(conn);
            let read = reading.await??;
            let read = read.context("the read, beside the cut-off write of its handle")?;
            // The give-back has run once the name is no longer the write side's.
            let given_back =
                common::eventually(|| async { Ok(!owned_by(&other, &name, &owner).await?) })
                    .await?;
            anyhow::ensure!(given_back, "{}: the attempt's grant was kept", b.dialect);
            left_to_the_read(&b, &other, &name, read).await?;
        }
        assert_eq!(b.held_rows(other.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// A re-entry of the write side cut off beside a downgrade: the write guard's release
/// gives back one of two holds, and the cut-off re-entry's give-back the last; that
/// one must leave the name to the read. One connection again, held by the test until
/// all are queued for it, so that the order is this: the read (a downgrade), the
/// re-entry, the guard's release (which waits for the read to be held), the give-back.
/// (Released as a plain lease, the give-back freed the name under the read.)
#[tokio::test]
async fn a_write_reentry_cut_off_beside_a_downgrade_leaves_the_name_to_the_read(
) -> anyhow::Result<()> {
    for b in common::backends("rw_side_reentry").await {
        b.fresh_table().await?;
        let pool = b.pool_with(1).await?;
        let locker = Locker::builder(pool.clone()).table(&b.table).build()?;
        let other = b.locker().await?;
        let owner = locker.owner().to_string();
        for round in 0..5 {
            let name = format!("again-{round}");
            let write = locker.write_lock(&name).acquire_timeout(DEADLINE).await?;
            let conn = checkout(&pool).await?;
            let reading = tokio::spawn({
                let (locker, name) = (locker.clone(), name.clone());
                async move { locker.read_lock(&name).try_acquire().await }
            });
            settle().await;
            let cut = tokio::time::timeout(Duration::ZERO, locker.write_lock(&name).try_acquire());
            let cut = cut.await.map(|r| r.map(|g| g.is_some()));
            anyhow::ensure!(cut.is_err(), "the re-entry was not cut off: {cut:?}");
            let releasing = tokio::spawn(write.release());
            settle().await;
            drop(conn);
            let read = reading
                .await??
                .context("a writer's read is granted at once")?;
            assert!(releasing.await??, "{}: the write", b.dialect);
            let given_back =
                common::eventually(|| async { Ok(!owned_by(&other, &name, &owner).await?) })
                    .await?;
            anyhow::ensure!(given_back, "{}: the re-entry was kept", b.dialect);
            left_to_the_read(&b, &other, &name, read).await?;
        }
        assert_eq!(b.held_rows(other.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// The one connection of `pool`, checked out until dropped.
async fn checkout(pool: &DbPool) -> anyhow::Result<Box<dyn std::any::Any + Send>> {
    Ok(match pool {
        DbPool::Postgres(p) => Box::new(p.acquire().await?),
        DbPool::MySql(p) => Box::new(p.acquire().await?),
        DbPool::Sqlite(p) => Box::new(p.acquire().await?),
        _ => anyhow::bail!("unknown pool"),
    })
}

/// Lets every task of this (current-thread) runtime that is ready run until it waits:
/// the tasks spawned before are queued for the connection by then.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// The write side shows as such (`write`, with its owner), and the handle's own mixes
/// of the write side with a lock on the name are refused before any SQL, both ways: a
/// lock does not re-enter the write side (whose release would then leave the name to
/// a read of the handle while the lock holds it), nor the reverse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_side_is_held_and_shown_as_such() -> anyhow::Result<()> {
    for b in common::backends("rw_side_shown").await {
        let locker = b.fresh_table().await?;
        let other = b.locker().await?;
        let write = locker.write_lock("doc").acquire_timeout(DEADLINE).await?;
        let info = other.lock_info("doc").await?.context("held")?;
        assert_eq!(
            (info.strategy.as_str(), info.owner.as_str(), info.hold_count),
            ("write", locker.owner().to_string().as_str(), 1),
            "{}",
            b.dialect
        );
        assert!(other
            .list()
            .await?
            .iter()
            .any(|l| l.key == "doc" && l.strategy == "write"));
        for refused in [
            locker.try_acquire("doc").await.map(drop),
            locker
                .lock("doc")
                .strategy(Strategy::Insert)
                .try_acquire()
                .await
                .map(drop),
            locker
                .lock_many(&["doc", "other"])
                .try_acquire()
                .await
                .map(drop),
        ] {
            assert!(
                matches!(refused, Err(Error::MixedHolds { .. })),
                "{}: {refused:?}",
                b.dialect
            );
        }
        // The write side re-enters itself.
        let again = locker
            .write_lock("doc")
            .try_acquire()
            .await?
            .context("re-entry")?;
        assert_eq!(again.hold_count(), 2, "{}", b.dialect);
        assert!(again.release().await? && write.release().await?);
        let plain = locker.acquire("doc").await?;
        assert_eq!(
            other.lock_info("doc").await?.map(|l| l.strategy),
            Some("lease".to_owned())
        );
        assert!(matches!(
            locker.write_lock("doc").try_acquire().await,
            Err(Error::MixedHolds { .. })
        ));
        assert!(plain.release().await?);
        assert_eq!(b.held_rows(locker.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// PostgreSQL with wake-ups (`notify_waiters`): the write side's release announces the
/// name it frees, as a lock's release does. A plain lock waits for the name with a poll
/// interval far beyond its deadline, so only the wake-up can hand it the name in time.
#[tokio::test]
async fn a_write_sides_release_wakes_a_waiter() -> anyhow::Result<()> {
    const POLL: Duration = Duration::from_secs(60);
    for b in common::backends_of("rw_side_wake", &[sqlock::Dialect::Postgres]).await {
        b.fresh_table().await?;
        let holder = b.builder().await?.notify_waiters(true).build()?;
        let waiter = b
            .builder()
            .await?
            .notify_waiters(true)
            .poll_interval(POLL, POLL)
            .build()?;
        let write = holder.write_lock("woken").acquire_timeout(DEADLINE).await?;
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                waiter
                    .acquire_timeout("woken", Duration::from_secs(8))
                    .await
            }
        });
        // Its first attempt found the name held (had it not been made yet, it would
        // find the name free: no false failure either way).
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "the waiter got a held name");
        assert!(write.release().await?);
        let got = waiting.await?;
        let got = got.map_err(|e| anyhow::anyhow!("the waiter was not woken: {e}"))?;
        assert!(got.release().await?);
    }
    Ok(())
}
