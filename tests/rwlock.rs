//! Read-write locks (`Locker::read_lock` / `write_lock`): readers share, a writer
//! excludes everyone, a waiting writer makes later readers wait (writer preference),
//! a writer may downgrade, a dead reader's hold comes back at its TTL, and random
//! cancellation leaves nothing held; on every backend.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use common::eventually;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlock::{Error, Strategy, SweepOptions};

/// A bound on waits that are expected to end much sooner.
const DEADLINE: Duration = Duration::from_secs(30);

/// Whether the name is held in shared mode by `reads` reads: no owner, `read` as its
/// strategy, the reads counted.
async fn held_by_reads(locker: &sqlock::Locker, name: &str, reads: u32) -> anyhow::Result<bool> {
    Ok(locker
        .lock_info(name)
        .await?
        .is_some_and(|l| l.owner.is_empty() && l.strategy == "read" && l.hold_count == reads))
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
        // A read's key is the lock's name; its own row is internal.
        assert_eq!(ra.key(), "doc");
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

/// A downgrade whose write guard is dropped rather than released: the background
/// release leaves the name to the read as an explicit release does, with no moment
/// free: a lock on the name is busy at every look until the name shows held by the
/// read (in shared mode), and then another reader gets in and a writer does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_write_leaves_the_name_to_its_read() -> anyhow::Result<()> {
    for b in common::backends("rw_down_drop").await {
        let holder = b.fresh_table().await?;
        let (other, plain) = (holder.new_handle(), holder.new_handle());
        let write = holder
            .write_lock("dropped")
            .acquire_timeout(DEADLINE)
            .await?;
        let read = holder.read_lock("dropped").try_acquire().await?;
        let read = read.expect("a writer's read is granted at once");
        drop(write);
        let end = tokio::time::Instant::now() + DEADLINE;
        while !held_by_reads(&holder, "dropped", 1).await? {
            assert!(
                plain.try_acquire("dropped").await?.is_none(),
                "{}: the name was free between the write and the read",
                b.dialect
            );
            assert!(
                tokio::time::Instant::now() < end,
                "{}: never left to the read",
                b.dialect
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            plain.try_acquire("dropped").await?.is_none(),
            "{}",
            b.dialect
        );
        assert!(other.write_lock("dropped").try_acquire().await?.is_none());
        let shared = other.read_lock("dropped").try_acquire().await?;
        assert!(shared.expect("readers share").release().await?);
        assert!(read.release().await?);
        assert_eq!(b.held_rows(holder.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// PostgreSQL: a downgrade's write side released while the read's release is under
/// way in another transaction (which freed the read, and left the name alone: it was
/// the writer's then) must see that release's outcome, not the read as its snapshot
/// shows it: the name is left free, not counting a read that is gone. The read's
/// release is played by hand (the read's row freed in a transaction kept open) so that
/// the two meet for sure; the write's release waits for it, and is let go once a
/// session of the test's own is seen waiting on a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_released_beside_a_read_release_leaves_no_count() -> anyhow::Result<()> {
    for b in common::backends_of("rw_down_race", &[sqlock::Dialect::Postgres]).await {
        let holder = b.fresh_table().await?;
        let write = holder.write_lock("race").acquire_timeout(DEADLINE).await?;
        let read = holder.read_lock("race").try_acquire().await?;
        let read = read.expect("a writer's read is granted at once");
        let sqlock::DbPool::Postgres(pg) = b.pool().await? else {
            anyhow::bail!("a PostgreSQL pool")
        };
        let mut tx = pg.begin().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {} SET locked = FALSE, hold_count = 0 WHERE lock_key = $1",
            b.quoted()
        )))
        .bind(format!("race@read:{}", holder.owner()))
        .execute(&mut *tx)
        .await?;
        let releasing = tokio::spawn(write.release());
        let waits = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%\"{}\"%'",
            b.table
        );
        let end = tokio::time::Instant::now() + DEADLINE;
        let look = b.pool().await?;
        while !releasing.is_finished() && b.scalar(&look, &waits).await? == 0 {
            anyhow::ensure!(
                tokio::time::Instant::now() < end,
                "the release neither ended nor waited"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tx.commit().await?;
        assert!(releasing.await??, "the write was its own");
        let info = holder.lock_info("race").await?;
        assert!(
            info.is_none(),
            "the name counts a read that is gone: {info:?}"
        );
        assert!(!read.release().await?);
    }
    Ok(())
}

/// A reader that stops renewing (as a crashed holder does) blocks a writer until its
/// lease lapses on the database clock, then not; the sweeper clears its expired read
/// hold. The lapse is brought forward in the table (the read's row and the name's,
/// which expire together) rather than waited for, so that no step of the test has to
/// come before a deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_readers_hold_comes_back_at_its_ttl() -> anyhow::Result<()> {
    for b in common::backends("rw_dead").await {
        let dead = b.fresh_table().await?;
        let writer = dead.new_handle();
        let read = dead
            .read_lock("gone")
            .ttl(Duration::from_secs(600))
            .auto_renew(false)
            .acquire()
            .await?;
        let key = format!("gone@read:{}", dead.owner());
        // The holder vanishes without a release.
        std::mem::forget(read);
        assert!(writer.write_lock("gone").try_acquire().await?.is_none());
        // A writer that waits is let in once the read's lease lapses.
        let w = writer.clone();
        let waiting = tokio::spawn(async move { w.write_lock("gone").acquire().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "{}: let in past a live read",
            b.dialect
        );
        // Its TTL runs out: the read's row, and the name's, which the read's renewals
        // kept no shorter than the read.
        b.expire(dead.pool(), &key).await?;
        b.expire(dead.pool(), "gone").await?;
        let write = tokio::time::timeout(DEADLINE, waiting).await???;
        assert!(write.release().await?);
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
/// a writer never overlaps anyone, readers did overlap, write tokens rise. That
/// readers share is made sure of first: two readers each hold the read side and wait
/// (bounded) until both hold before releasing.
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
        // Two readers at once for sure: each holds until both hold.
        let both = Arc::new(tokio::sync::Barrier::new(2));
        let mut pair = Vec::new();
        for _ in 0..2 {
            let handle = b.locker().await?;
            let state = state.clone();
            let both = both.clone();
            pair.push(tokio::spawn(async move {
                let guard = handle.read_lock("hist").acquire_timeout(DEADLINE).await?;
                {
                    let mut s = state.lock().unwrap();
                    assert_eq!(s.writers, 0, "a reader overlapped a writer");
                    s.readers += 1;
                    s.most_readers = s.most_readers.max(s.readers);
                }
                tokio::time::timeout(DEADLINE, both.wait())
                    .await
                    .map_err(|_| anyhow::anyhow!("the other reader never held"))?;
                state.lock().unwrap().readers -= 1;
                assert!(guard.release().await?, "a hold was lost");
                anyhow::Ok(())
            }));
        }
        for t in pair {
            t.await??;
        }
        assert_eq!(
            state.lock().unwrap().most_readers,
            2,
            "{}: the two readers did not hold at once",
            b.dialect
        );
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

/// The TTL of holds the watchdog must keep alive in the tests below: renewed every
/// second (a third of it), so a renewal has two seconds to spare.
const RENEWED_TTL: Duration = Duration::from_secs(3);

/// How often the bounded waits below look again.
const POLL: Duration = Duration::from_millis(20);

/// Waits, up to [`DEADLINE`], until the live row of `key` shows an expiry later than
/// `granted` (a renewal moved it) and the database clock has passed `granted` (the hold
/// outlived the expiry it was granted with). Fails at once if the row is not held.
async fn outlives_its_grant(
    locker: &sqlock::Locker,
    key: &str,
    granted: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<()> {
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        let Some(info) = locker.lock_info(key).await? else {
            anyhow::bail!("{key} is no longer held (granted until {granted})");
        };
        // The database clock, as the lookup read it.
        let now = info.expires_at - chrono::TimeDelta::from_std(info.expires_in)?;
        if info.expires_at > granted && now > granted {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < end,
            "{key}: after {DEADLINE:?}, expiry {} (granted {granted}), database clock {now}",
            info.expires_at
        );
        tokio::time::sleep(POLL).await;
    }
}

/// How many rows of the table, live or not, have the key `key`: a released lease
/// leaves its row, so this tells whether `key` was ever taken.
async fn rows_of(b: &common::Backend, pool: &sqlock::DbPool, key: &str) -> anyhow::Result<i64> {
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE lock_key = '{key}'",
        b.quoted()
    );
    b.scalar(pool, &sql).await
}

/// Waits, up to [`DEADLINE`], until a reader on `handle` is granted `name`.
async fn reader_gets_in(
    handle: &sqlock::Locker,
    name: &str,
) -> anyhow::Result<Option<sqlock::LockGuard>> {
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(guard) = handle.read_lock(name).try_acquire().await? {
            return Ok(Some(guard));
        }
        if tokio::time::Instant::now() >= end {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The watchdog renews read holds as it renews write holds: a read hold and a write
/// hold (on another name), both with a 3 s TTL, are each seen renewed in the table
/// (expiry later than the one granted) and live after the database clock passed the
/// expiry they were granted with; neither fired its lost signal, a writer is still
/// refused on the read-held name and a reader on the write-held one, and both release
/// as still theirs. Without renewal the first wait would fail (the row would lapse
/// unrenewed), and the refusals would not hold past the original expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_holds_are_renewed_alike() -> anyhow::Result<()> {
    for b in common::backends("rw_renew").await {
        let reader = b.fresh_table().await?;
        let (writer, other) = (reader.new_handle(), reader.new_handle());
        let read = reader
            .read_lock("shared")
            .ttl(RENEWED_TTL)
            .acquire_timeout(DEADLINE)
            .await?;
        let write = writer
            .write_lock("sole")
            .ttl(RENEWED_TTL)
            .acquire_timeout(DEADLINE)
            .await?;
        assert_eq!(read.key(), "shared");
        assert_eq!(write.key(), "sole");
        let (read_granted, write_granted) = (read.expires_at(), write.expires_at());
        let read_row = format!("shared@read:{}", reader.owner());
        outlives_its_grant(&other, &read_row, read_granted)
            .await
            .map_err(|e| e.context(format!("{}: the read hold", b.dialect)))?;
        outlives_its_grant(&other, write.key(), write_granted)
            .await
            .map_err(|e| e.context(format!("{}: the write hold", b.dialect)))?;
        assert!(!read.is_lost(), "{}: the read hold was lost", b.dialect);
        assert!(!write.is_lost(), "{}: the write hold was lost", b.dialect);
        assert!(
            other.write_lock("shared").try_acquire().await?.is_none(),
            "{}: a writer got in past a renewed read hold",
            b.dialect
        );
        assert!(
            other.read_lock("sole").try_acquire().await?.is_none(),
            "{}: a reader got in past a renewed write hold",
            b.dialect
        );
        assert!(
            read.release().await?,
            "{}: the read was not ours",
            b.dialect
        );
        assert!(
            write.release().await?,
            "{}: the write was not ours",
            b.dialect
        );
        assert_eq!(b.held_rows(reader.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// A read hold obtained by a downgrade (the holder of the write side takes the read
/// side, then gives up the write side) is renewed like any read: with a 3 s TTL it is
/// seen renewed in the table and live after the database clock passed its granted
/// expiry, not lost, still keeps a writer out, shares with another reader, and
/// releases as still its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgraded_read_is_renewed() -> anyhow::Result<()> {
    for b in common::backends("rw_down_renew").await {
        let holder = b.fresh_table().await?;
        let other = holder.new_handle();
        let write = holder
            .write_lock("down")
            .ttl(RENEWED_TTL)
            .acquire_timeout(DEADLINE)
            .await?;
        let read = holder
            .read_lock("down")
            .ttl(RENEWED_TTL)
            .try_acquire()
            .await?
            .expect("a writer's read is granted at once");
        assert!(write.release().await?);
        assert_eq!(read.key(), "down");
        let read_row = format!("down@read:{}", holder.owner());
        outlives_its_grant(&other, &read_row, read.expires_at())
            .await
            .map_err(|e| e.context(format!("{}: the downgraded read", b.dialect)))?;
        assert!(
            !read.is_lost(),
            "{}: the downgraded read was lost",
            b.dialect
        );
        assert!(
            other.write_lock("down").try_acquire().await?.is_none(),
            "{}: a writer got in past a renewed downgraded read",
            b.dialect
        );
        let shared = other.read_lock("down").try_acquire().await?;
        let shared = shared.expect("readers share a downgraded read");
        assert!(shared.release().await?);
        assert!(
            read.release().await?,
            "{}: the read was not ours",
            b.dialect
        );
        assert_eq!(b.held_rows(holder.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// A waiting writer whose acquisition is dropped withdraws its intent (and its hold of
/// the name): while a reader holds the name, a writer (TTL 600 s) waits, confirmed by
/// its live intent row `name@write:<owner>`, and a new reader is refused (writer
/// preference); once the writer's task is aborted, a new reader gets in, long before
/// the intent's TTL, so only the withdrawal can have let it in. The same with a writer
/// whose `acquire_timeout` answers `Error::Timeout`: tried with growing timeouts until
/// one of the attempts is seen to have taken its intent (its row is in the table), the
/// intent is no longer live once the timeout is answered and a new reader gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_stops_waiting_withdraws_its_intent() -> anyhow::Result<()> {
    const WRITER_TTL: Duration = Duration::from_secs(600);
    for b in common::backends("rw_withdraw").await {
        let first = b.fresh_table().await?;
        let pool = first.pool().clone();
        let (writer, late) = (first.new_handle(), first.new_handle());

        // An aborted task.
        let held = first.read_lock("aborted").acquire_timeout(DEADLINE).await?;
        let intent = format!("aborted@write:{}", writer.owner());
        let w = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write_lock("aborted").ttl(WRITER_TTL).acquire().await }
        });
        let waiting = eventually(|| {
            let (first, intent) = (&first, &intent);
            async move { Ok(first.lock_info(intent).await?.is_some()) }
        })
        .await?;
        assert!(
            waiting,
            "{}: the writer never recorded its intent",
            b.dialect
        );
        assert!(
            first.list().await?.iter().any(|l| l.key == intent),
            "{}: the intent is not listed",
            b.dialect
        );
        assert!(
            !w.is_finished(),
            "{}: the writer got in past a read",
            b.dialect
        );
        assert!(
            late.read_lock("aborted").try_acquire().await?.is_none(),
            "{}: a reader got in past a waiting writer",
            b.dialect
        );
        w.abort();
        assert!(w.await.is_err_and(|e| e.is_cancelled()));
        let read = reader_gets_in(&late, "aborted").await?;
        let read = read.unwrap_or_else(|| {
            panic!(
                "{}: an aborted writer's intent kept a reader out for {DEADLINE:?}",
                b.dialect
            )
        });
        assert!(first.lock_info(&intent).await?.is_none(), "{}", b.dialect);
        // The name is held by the reads alone (in shared mode), not by the writer.
        assert!(held_by_reads(&first, "aborted", 2).await?, "{}", b.dialect);
        assert!(read.release().await?);
        assert!(held.release().await?);

        // A timeout.
        let held = first.read_lock("timed").acquire_timeout(DEADLINE).await?;
        let intent = format!("timed@write:{}", writer.owner());
        let mut timeout = Duration::from_millis(100);
        for _ in 0..8 {
            let waited = writer
                .write_lock("timed")
                .ttl(WRITER_TTL)
                .acquire_timeout(timeout)
                .await;
            assert!(
                matches!(waited, Err(Error::Timeout { .. })),
                "{}: {waited:?}",
                b.dialect
            );
            if rows_of(&b, &pool, &intent).await? > 0 {
                break;
            }
            timeout *= 2;
        }
        assert_eq!(
            rows_of(&b, &pool, &intent).await?,
            1,
            "{}: no timed attempt took its intent",
            b.dialect
        );
        assert!(
            first.lock_info(&intent).await?.is_none(),
            "{}: the intent outlived the timeout",
            b.dialect
        );
        let read = reader_gets_in(&late, "timed").await?;
        let read = read.unwrap_or_else(|| {
            panic!(
                "{}: a timed-out writer kept a reader out for {DEADLINE:?}",
                b.dialect
            )
        });
        assert!(held_by_reads(&first, "timed", 2).await?, "{}", b.dialect);
        assert!(read.release().await?);
        assert!(held.release().await?);
        assert_eq!(b.held_rows(&pool).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// A read hold's lost signal: an operator's `force_release` of the read row fires the
/// read guard's `lost()` with `LostReason::NotHeld` (the watchdog's next renewal finds
/// the token moved on), the name is free for a writer, and the guard's release then
/// answers that the hold was no longer its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_released_read_fires_its_lost_signal() -> anyhow::Result<()> {
    for b in common::backends("rw_lost").await {
        let reader = b.fresh_table().await?;
        let (operator, writer) = (reader.new_handle(), reader.new_handle());
        let read = reader
            .read_lock("forced")
            .ttl(RENEWED_TTL)
            .acquire_timeout(DEADLINE)
            .await?;
        let mut lost = read.lost();
        assert!(!read.is_lost());
        assert!(
            operator
                .force_release_now(&format!("forced@read:{}", reader.owner()))
                .await?,
            "{}: nothing live was released",
            b.dialect
        );
        let reason = tokio::time::timeout(DEADLINE, lost.wait()).await;
        let reason = reason.unwrap_or_else(|_| {
            panic!(
                "{}: the lost signal did not fire within {DEADLINE:?}",
                b.dialect
            )
        });
        assert_eq!(reason, sqlock::LostReason::NotHeld, "{}", b.dialect);
        assert!(read.is_lost());
        let write = writer.write_lock("forced").try_acquire().await?;
        let write = write.expect("the name is free once its only read was released");
        assert!(
            !read.release().await?,
            "{}: a force-released read released as its own",
            b.dialect
        );
        assert!(write.release().await?);
        assert_eq!(b.held_rows(reader.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// A lock held on another key, even a for-update lock, whose row stays locked for its
/// holder's whole transaction, never stands in a read's or a writer's way, also when its
/// key sorts right after the name's read holds and intents. On the servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_another_key_is_no_obstacle() -> anyhow::Result<()> {
    for b in common::servers("rw_other_key").await {
        let locker = b.fresh_table().await?;
        let other = locker.new_handle();
        for held in ["doc@x", "doc@write;", "doc@read;", "dob", "e"] {
            let g = other.try_acquire(held).await?.expect("a free key");
            assert!(g.release().await?);
            let fu = other
                .lock(held)
                .strategy(Strategy::ForUpdate)
                .acquire_timeout(DEADLINE)
                .await?;
            for _ in 0..5 {
                let read = locker.read_lock("doc").try_acquire().await?;
                let read = read.unwrap_or_else(|| {
                    panic!(
                        "{}: a read was busy while {held} was held for update",
                        b.dialect
                    )
                });
                assert!(read.release().await?, "{}", b.dialect);
                let write = locker.write_lock("doc").try_acquire().await?;
                let write = write.unwrap_or_else(|| {
                    panic!(
                        "{}: a write was busy while {held} was held for update",
                        b.dialect
                    )
                });
                assert!(write.release().await?, "{}", b.dialect);
            }
            fu.release().await?;
        }
    }
    Ok(())
}

/// `Locker::rwlocks` shows each read-write lock by its name: its readers, a waiting
/// writer as waiting (not as the holder), and then the writer holding; a name no
/// read-write lock uses is not among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlocks_show_readers_waiting_writers_and_the_writer() -> anyhow::Result<()> {
    for b in common::backends("rw_listed").await {
        let a = b.fresh_table().await?;
        let (c, w) = (a.new_handle(), a.new_handle());
        let plain = a.try_acquire("plain").await?.expect("free");
        let ra = a.read_lock("doc").acquire_timeout(DEADLINE).await?;
        let rc = c.read_lock("doc").acquire_timeout(DEADLINE).await?;
        let writer = {
            let w = w.clone();
            tokio::spawn(async move { w.write_lock("doc").acquire_timeout(DEADLINE).await })
        };
        // The writer's intent is in place once a new reader must wait.
        let waiting = || async {
            let locks = a.rwlocks().await?;
            anyhow::Ok(locks.first().is_some_and(|l| !l.waiting_writers.is_empty()))
        };
        assert!(
            eventually(waiting).await?,
            "{}: the writer never waited",
            b.dialect
        );
        let locks = a.rwlocks().await?;
        assert_eq!(locks.len(), 1, "{}: {locks:?}", b.dialect);
        let doc = &locks[0];
        assert_eq!(doc.name, "doc");
        assert!(
            doc.writer.is_none(),
            "{}: a waiting writer holds nothing",
            b.dialect
        );
        let mut readers: Vec<&str> = doc.readers.iter().map(|l| l.owner.as_str()).collect();
        readers.sort_unstable();
        let (ao, co, wo) = (
            a.owner().to_string(),
            c.owner().to_string(),
            w.owner().to_string(),
        );
        let mut expected = vec![ao.as_str(), co.as_str()];
        expected.sort_unstable();
        assert_eq!(readers, expected, "{}", b.dialect);
        assert_eq!(doc.waiting_writers.len(), 1);
        assert_eq!(doc.waiting_writers[0].owner, wo);
        assert!(ra.release().await? && rc.release().await?);
        let held = writer.await??;
        let locks = a.rwlocks().await?;
        assert_eq!(locks.len(), 1, "{}: {locks:?}", b.dialect);
        let doc = &locks[0];
        assert_eq!(
            doc.writer.as_ref().map(|l| l.owner.as_str()),
            Some(wo.as_str())
        );
        assert!(
            doc.readers.is_empty() && doc.waiting_writers.is_empty(),
            "{doc:?}"
        );
        assert!(held.release().await? && plain.release().await?);
        assert!(a.rwlocks().await?.is_empty(), "{}", b.dialect);
    }
    Ok(())
}
