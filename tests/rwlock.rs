//! Read-write locks (`Locker::read_lock` / `write_lock`): readers share, a writer
//! excludes everyone, a waiting writer makes later readers wait (writer preference),
//! a writer may downgrade, a dead reader's hold comes back at its TTL, and random
//! cancellation leaves nothing held; on every backend.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlock::{Error, SweepOptions};

/// A bound on waits that are expected to end much sooner.
const DEADLINE: Duration = Duration::from_secs(30);

/// Waits, up to a bound, until `f` holds.
async fn eventually<F, Fut>(mut f: F) -> anyhow::Result<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    for _ in 0..1000 {
        if f().await? {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(false)
}

/// How many live rows of the table have a key starting with `prefix`.
async fn live(b: &common::Backend, pool: &sqlock::DbPool, prefix: &str) -> anyhow::Result<i64> {
    let t = b.quoted();
    let now = match b.dialect {
        sqlock::Dialect::Postgres => "statement_timestamp()",
        sqlock::Dialect::MySql => "UTC_TIMESTAMP(6)",
        _ => "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
    };
    b.scalar(
        pool,
        &format!(
            "SELECT COUNT(*) FROM {t} WHERE lock_key LIKE '{prefix}%' AND locked AND expires_at > {now}"
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes() -> anyhow::Result<()> {
    for b in common::backends("rw_basic").await {
        let a = b.fresh_table().await?;
        let (c, w) = (a.new_handle(), a.new_handle());
        let ra = a.read_lock("doc").acquire_timeout(DEADLINE).await?;
        let rc = c.read_lock("doc").acquire_timeout(DEADLINE).await?;
        assert_eq!(ra.key(), format!("doc@read:{}", a.owner()));
        // Readers in: no writer.
        assert!(w.write_lock("doc").try_acquire().await?.is_none());
        let waited = w
            .write_lock("doc")
            .acquire_timeout(Duration::from_millis(100))
            .await;
        assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
        assert!(ra.release().await?);
        assert!(w.write_lock("doc").try_acquire().await?.is_none());
        assert!(rc.release().await?);
        // No reader: the writer, with a token above every read's.
        let write = w.write_lock("doc").acquire_timeout(DEADLINE).await?;
        assert_eq!(write.key(), "doc");
        assert!(a.read_lock("doc").try_acquire().await?.is_none());
        assert!(c.write_lock("doc").try_acquire().await?.is_none());
        let t = write.fencing_token();
        assert!(write.release().await?);
        let again = c.write_lock("doc").acquire_timeout(DEADLINE).await?;
        assert!(again.fencing_token() > t, "{}", b.dialect);
        assert!(again.release().await?);
        // A plain lock on the name counts as a writer for readers.
        let plain = w.acquire("doc").await?;
        assert!(a.read_lock("doc").try_acquire().await?.is_none());
        plain.release().await?;
        // Re-entry of a read, and no upgrade.
        let r1 = a.read_lock("doc").acquire().await?;
        let r2 = a.read_lock("doc").acquire().await?;
        assert_eq!(r2.hold_count(), 2);
        assert!(matches!(
            a.write_lock("doc").try_acquire().await,
            Err(Error::UpgradeRefused { .. })
        ));
        r2.release().await?;
        r1.release().await?;
        // Bad names before SQL.
        assert!(matches!(
            a.read_lock("").try_acquire().await,
            Err(Error::EmptyKey)
        ));
        let long = "n".repeat(sqlock::MAX_RWLOCK_NAME_BYTES + 1);
        assert!(matches!(
            a.write_lock(&long).acquire().await,
            Err(Error::KeyTooLong { .. })
        ));
        assert_eq!(b.held_rows(a.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// Ordered arrivals: a reader holds; a writer arrives and is confirmed waiting (its
/// intent row is live); a reader arriving after it waits behind it, although only a
/// reader holds; the writer goes first once the first reader leaves, then the late
/// reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_goes_before_later_readers() -> anyhow::Result<()> {
    for b in common::backends("rw_pref").await {
        let first = b.fresh_table().await?;
        let pool = first.pool().clone();
        let (writer, late) = (first.new_handle(), first.new_handle());
        let held = first.read_lock("pref").acquire_timeout(DEADLINE).await?;
        let w = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write_lock("pref").acquire_timeout(DEADLINE).await }
        });
        // The writer is waiting once its intent is live.
        let waiting = eventually(|| {
            let (b, pool) = (&b, &pool);
            async move { Ok(live(b, pool, "pref@write:").await? == 1) }
        })
        .await?;
        assert!(
            waiting,
            "{}: the writer never recorded its intent",
            b.dialect
        );
        assert!(!w.is_finished());
        // The late reader waits, although only a reader holds.
        assert!(late.read_lock("pref").try_acquire().await?.is_none());
        let r = tokio::spawn({
            let late = late.clone();
            async move { late.read_lock("pref").acquire_timeout(DEADLINE).await }
        });
        // The first reader re-enters its own read: no waiting for itself.
        let again = first.read_lock("pref").try_acquire().await?;
        assert!(again.is_some(), "{}: a re-entered read waited", b.dialect);
        assert!(again.unwrap().release().await?);
        assert!(held.release().await?);
        let write = w.await??;
        // While the writer holds, the late reader cannot have been granted.
        assert!(
            !r.is_finished(),
            "{}: a reader got in with the writer",
            b.dialect
        );
        // The granted writer's intent goes (in the background).
        let gone = eventually(|| {
            let (b, pool) = (&b, &pool);
            async move { Ok(live(b, pool, "pref@write:").await? == 0) }
        })
        .await?;
        assert!(gone, "{}: the intent stayed", b.dialect);
        assert!(
            !r.is_finished(),
            "{}: a reader got in with the writer",
            b.dialect
        );
        assert!(write.release().await?);
        let read = r.await??;
        assert!(read.release().await?);
        println!("{}: writer before the later reader", b.dialect);
    }
    Ok(())
}

/// A writer takes the read side and gives up the write side: no moment free for
/// another writer, and other readers get in once the write is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_downgrades() -> anyhow::Result<()> {
    for b in common::backends("rw_down").await {
        let w = b.fresh_table().await?;
        let (reader, other_writer) = (w.new_handle(), w.new_handle());
        let write = w.write_lock("down").acquire_timeout(DEADLINE).await?;
        // Another writer waits (its intent recorded); the downgrade is granted anyway.
        let ow = tokio::spawn({
            let other_writer = other_writer.clone();
            async move {
                other_writer
                    .write_lock("down")
                    .acquire_timeout(DEADLINE)
                    .await
            }
        });
        let pool = w.pool().clone();
        let waiting = eventually(|| {
            let (b, pool) = (&b, &pool);
            async move { Ok(live(b, pool, "down@write:").await? == 1) }
        })
        .await?;
        assert!(waiting);
        let read = w.read_lock("down").try_acquire().await?;
        let read = read.expect("a writer's read is granted at once");
        assert!(write.release().await?);
        // Read-held now: the waiting writer still waits; with its intent live, a new
        // reader waits behind it (writer preference).
        let got = reader.read_lock("down").try_acquire().await?;
        assert!(
            got.is_none(),
            "{}: a reader got in past a waiting writer: {:?} / {:?}",
            b.dialect,
            w.list().await?,
            ow.is_finished()
        );
        assert!(!ow.is_finished());
        assert!(read.release().await?);
        let second = ow.await??;
        assert!(reader.read_lock("down").try_acquire().await?.is_none());
        assert!(second.release().await?);
        let r = reader.read_lock("down").try_acquire().await?.expect("free");
        r.release().await?;
    }
    Ok(())
}

/// A reader that stops renewing (as a crashed holder does) blocks a writer until its
/// TTL, then not; the sweeper clears its expired read hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_readers_hold_comes_back_at_its_ttl() -> anyhow::Result<()> {
    for b in common::backends("rw_dead").await {
        let dead = b.fresh_table().await?;
        let writer = dead.new_handle();
        let read = dead
            .read_lock("gone")
            .ttl(Duration::from_millis(300))
            .auto_renew(false)
            .acquire()
            .await?;
        let key = read.key().to_owned();
        // The holder vanishes without a release.
        std::mem::forget(read);
        assert!(writer.write_lock("gone").try_acquire().await?.is_none());
        let write = writer.write_lock("gone").acquire_timeout(DEADLINE).await?;
        assert!(write.release().await?);
        b.expire(dead.pool(), &key).await?;
        let swept = dead.sweep(SweepOptions::new()).await?;
        assert!(
            swept >= 1,
            "{}: the expired read hold was not swept",
            b.dialect
        );
        assert!(dead.lock_info(&key).await?.is_none());
    }
    Ok(())
}

/// Workers on handles of their own read and write at random under a history checker:
/// a writer never overlaps anyone, readers did overlap, write tokens rise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_of_readers_and_writers() -> anyhow::Result<()> {
    #[derive(Default)]
    struct State {
        readers: usize,
        writers: usize,
        most_readers: usize,
        last_write_token: i64,
        writes: usize,
    }
    for b in common::backends("rw_history").await {
        let base = b.fresh_table().await?;
        let state: Arc<Mutex<State>> = Arc::default();
        let mut tasks = Vec::new();
        for worker in 0..6u64 {
            let handle = b
                .builder()
                .await?
                .poll_interval(Duration::from_millis(1), Duration::from_millis(10))
                .build()?;
            let state = state.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..12u64 {
                    let write = (worker * 7 + round * 3) % 5 == 0;
                    let side = if write {
                        handle.write_lock("hist")
                    } else {
                        handle.read_lock("hist")
                    };
                    let guard = side.acquire_timeout(DEADLINE).await?;
                    {
                        let mut s = state.lock().unwrap();
                        if write {
                            assert_eq!((s.readers, s.writers), (0, 0), "a writer overlapped");
                            assert!(guard.fencing_token() > s.last_write_token);
                            s.last_write_token = guard.fencing_token();
                            s.writers += 1;
                            s.writes += 1;
                        } else {
                            assert_eq!(s.writers, 0, "a reader overlapped a writer");
                            s.readers += 1;
                            s.most_readers = s.most_readers.max(s.readers);
                        }
                    }
                    // Readers stay a while so that they meet.
                    tokio::time::sleep(Duration::from_millis(if write { 1 } else { 20 })).await;
                    {
                        let mut s = state.lock().unwrap();
                        if write {
                            s.writers -= 1;
                        } else {
                            s.readers -= 1;
                        }
                    }
                    assert!(guard.release().await?, "a hold was lost");
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let (writes, most_readers) = {
            let s = state.lock().unwrap();
            (s.writes, s.most_readers)
        };
        assert!(writes > 0);
        assert!(most_readers > 1, "{}: readers never overlapped", b.dialect);
        println!(
            "{}: {writes} writes, up to {most_readers} readers at once",
            b.dialect
        );
        assert_eq!(b.held_rows(base.pool()).await?, 0);
    }
    Ok(())
}

/// Read and write acquisitions cut off at random points leave nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_acquisitions_leak_nothing() -> anyhow::Result<()> {
    for b in common::backends("rw_cancel").await {
        b.fresh_table().await?;
        let pool = b.pool_with(4).await?;
        let locker = sqlock::Locker::builder(pool.clone())
            .table(&b.table)
            .ttl(Duration::from_secs(600))
            .poll_interval(Duration::from_micros(200), Duration::from_millis(2))
            .build()?;
        let holder = b.locker().await?;
        for i in 0..200u64 {
            let blocker = match i % 7 {
                0 => holder.read_lock("c").try_acquire().await?,
                3 => holder.write_lock("c").try_acquire().await?,
                _ => None,
            };
            let cut = Duration::from_micros(50 + (i * 137) % 4000);
            let side = if i % 2 == 0 {
                locker.read_lock("c")
            } else {
                locker.write_lock("c")
            };
            if let Ok(g) = tokio::time::timeout(cut, side.acquire()).await {
                drop(g?);
            }
            if let Some(g) = blocker {
                g.release().await?;
            }
        }
        let clean = eventually(|| {
            let (b, pool) = (&b, &pool);
            async move { Ok(b.held_rows(pool).await? == 0) }
        })
        .await?;
        assert!(clean, "{}: a hold stayed after a cut-off", b.dialect);
    }
    Ok(())
}
