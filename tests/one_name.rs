//! One name, one holder, across every primitive: a name held through one primitive is
//! busy for every other (a lock of each strategy, a fair lock, a semaphore's permits,
//! a read-write lock's read and write sides, a multi-lock that names it, an election
//! on it), or the mix is refused with a typed error before any SQL. Only reads share
//! with reads, and permits with permits while some are free. On every backend.
//!
//! Each pair is tried both ways, holder and challenger on handles of their own pools
//! (as two processes), without waiting: the challenger is busy while the holder holds,
//! and gets the name once the holder let it go. An election's name `E` is the key
//! `election:E`, so every name here is of that shape and every primitive takes it.
//! Besides: reads and permits kept alive by the watchdog past several TTLs keep the
//! name from a plain locker all along (their renewals push the name), across a
//! downgrade too; a reader or a permit holder killed (SIGKILL) keeps the name busy
//! until its hold's expiry on the database clock, and no later than the name's.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use common::history;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::{
    Dialect, Error, Leadership, LockGuard, Locker, MultiLockGuard, SemaphoreGuard, Strategy,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// A bound on waits expected to end much sooner.
const DEADLINE: Duration = Duration::from_secs(30);

/// The primitives that can hold a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum P {
    Lease,
    Insert,
    ForUpdate,
    Fair,
    /// A permit of the semaphore of the name, of `PERMITS` permits.
    Semaphore,
    Read,
    Write,
    /// A multi-lock of the name and another key.
    Multi,
    /// The election `E` of the name `election:E`.
    Election,
}

const ALL: [P; 9] = [
    P::Lease,
    P::Insert,
    P::ForUpdate,
    P::Fair,
    P::Semaphore,
    P::Read,
    P::Write,
    P::Multi,
    P::Election,
];

/// The semaphores' N: more than one, so that a permit is left while one is held.
const PERMITS: u32 = 3;

/// Whether `b` may hold the name beside `a`'s hold: reads with reads, permits with
/// permits (one of `PERMITS` held).
fn shares(a: P, b: P) -> bool {
    matches!((a, b), (P::Read, P::Read) | (P::Semaphore, P::Semaphore))
}

/// What holds a name.
#[derive(Debug)]
enum Held {
    Guard(LockGuard),
    Permits(SemaphoreGuard),
    Multi(MultiLockGuard),
    Leader(Leadership),
}

impl Held {
    /// Gives it back: whether it was still held.
    async fn release(self) -> anyhow::Result<bool> {
        Ok(match self {
            Self::Guard(g) => g.release().await?,
            Self::Permits(g) => g.release().await?,
            Self::Multi(g) => g.release().await?,
            Self::Leader(l) => l.resign().await?,
        })
    }
}

/// `p` on the election `name`'s key, `election:<name>`, tried once without waiting.
async fn try_take(locker: &Locker, p: P, name: &str) -> anyhow::Result<Option<Held>> {
    let key = format!("election:{name}");
    let lock = |strategy| locker.lock(&key).strategy(strategy).try_acquire();
    Ok(match p {
        P::Lease => lock(Strategy::Lease).await?.map(Held::Guard),
        P::Insert => lock(Strategy::Insert).await?.map(Held::Guard),
        P::ForUpdate => lock(Strategy::ForUpdate).await?.map(Held::Guard),
        P::Fair => lock(Strategy::Fair).await?.map(Held::Guard),
        P::Semaphore => locker
            .semaphore(&key, PERMITS)
            .try_acquire()
            .await?
            .map(Held::Permits),
        P::Read => locker.read_lock(&key).try_acquire().await?.map(Held::Guard),
        P::Write => locker
            .write_lock(&key)
            .try_acquire()
            .await?
            .map(Held::Guard),
        P::Multi => locker
            .lock_many(&[key.clone(), format!("{key}-also")])
            .try_acquire()
            .await?
            .map(Held::Multi),
        P::Election => locker
            .election(name)
            .try_campaign()
            .await?
            .map(Held::Leader),
    })
}

/// The primitives a backend has: the for-update strategy on the servers only.
fn primitives(dialect: Dialect) -> Vec<P> {
    ALL.into_iter()
        .filter(|&p| p != P::ForUpdate || dialect != Dialect::Sqlite)
        .collect()
}

/// Every ordered pair: the holder takes the name, the challenger tries it once and is
/// busy (or shares, for reads and permits), then gets it once the holder is gone. The
/// holder and the challenger are handles on pools of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pair_of_primitives_excludes_on_one_name() -> anyhow::Result<()> {
    for b in common::backends("one_name_pairs").await {
        let holder = b.fresh_table().await?;
        let challenger = b.locker().await?;
        let mut tried = 0;
        // Every pair is tried, and every wrong answer reported together.
        let mut wrong = Vec::new();
        for a in primitives(b.dialect) {
            for c in primitives(b.dialect) {
                let name = format!("{a:?}-{c:?}").to_lowercase();
                let what = format!("{}: {a:?} holds {name}, {c:?} tries", b.dialect);
                let held = try_take(&holder, a, &name)
                    .await
                    .with_context(|| what.clone())?
                    .with_context(|| format!("{what}: the holder did not get a free name"))?;
                let got = try_take(&challenger, c, &name)
                    .await
                    .with_context(|| what.clone())?;
                if got.is_some() != shares(a, c) {
                    wrong.push(format!("{a:?} holds, {c:?} granted {}", got.is_some()));
                }
                if let Some(g) = got {
                    g.release().await?;
                }
                anyhow::ensure!(held.release().await?, "{what}: the holder lost it");
                // Free again: the challenger gets it.
                let got = try_take(&challenger, c, &name)
                    .await
                    .with_context(|| what.clone())?
                    .with_context(|| format!("{what}: not granted once the holder was gone"))?;
                anyhow::ensure!(got.release().await?, "{what}: lost after the grant");
                tried += 1;
            }
        }
        anyhow::ensure!(
            wrong.is_empty(),
            "{}: {} of {tried} pairs wrong: {wrong:#?}",
            b.dialect,
            wrong.len()
        );
        // Nothing is left held: every release freed the name.
        let left = challenger.list().await?;
        anyhow::ensure!(left.is_empty(), "{}: left held: {left:?}", b.dialect);
        println!("{}: {tried} pairs", b.dialect);
    }
    Ok(())
}

/// Reads of several holders, and permits of several holders, share the name and count
/// on it: it shows held in shared mode (no owner, the mode as its strategy, the holds
/// counted), stays busy for a lock until the last of them is gone, and is free then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holds_count_on_the_name_until_the_last_is_gone() -> anyhow::Result<()> {
    for b in common::backends("one_name_count").await {
        let first = b.fresh_table().await?;
        let (second, third, locker) = (b.locker().await?, b.locker().await?, b.locker().await?);
        for (mode, p) in [("read", P::Read), ("semaphore", P::Semaphore)] {
            let name = format!("count-{mode}");
            let key = format!("election:{name}");
            let mut held = Vec::new();
            for h in [&first, &second, &third] {
                held.push(try_take(h, p, &name).await?.context("a shared hold")?);
            }
            let info = locker.lock_info(&key).await?.context("the name is held")?;
            assert_eq!(
                (info.strategy.as_str(), info.owner.as_str(), info.hold_count),
                (mode, "", 3),
                "{}: {info:?}",
                b.dialect
            );
            while let Some(h) = held.pop() {
                assert!(
                    locker.try_acquire(&key).await?.is_none(),
                    "{}: a lock got {key} with {} {mode} holds left",
                    b.dialect,
                    held.len() + 1
                );
                assert!(h.release().await?);
            }
            assert!(locker.lock_info(&key).await?.is_none(), "{}", b.dialect);
            let g = locker.try_acquire(&key).await?.context("free at last")?;
            assert!(g.release().await?);
        }
    }
    Ok(())
}

/// Keys of the shapes of a read-write lock's holds are refused to every primitive, as a
/// semaphore's permits are; and a handle's own holds of a name refuse the mixes whose
/// release would free the name under another hold: a read beside a lock on the name
/// (not the write side), a lock beside a read. All before any SQL: on a pool that is
/// closed, so that a statement sent would fail otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_names_and_mixed_holds_are_refused_before_sql() -> anyhow::Result<()> {
    for b in common::backends("one_name_refused").await {
        let locker = b.fresh_table().await?;
        let owner = locker.owner();
        for key in [format!("doc@read:{owner}"), "doc@write:x".to_owned()] {
            let refused = |r: sqlock::Result<()>| matches!(r, Err(Error::ReservedMarker { ref key, .. }) if key.contains('@'));
            assert!(refused(locker.try_acquire(&key).await.map(drop)), "{key}");
            assert!(refused(
                locker
                    .lock(&key)
                    .strategy(Strategy::Fair)
                    .try_acquire()
                    .await
                    .map(drop)
            ));
            assert!(refused(
                locker.read_lock(&key).try_acquire().await.map(drop)
            ));
            assert!(refused(
                locker.write_lock(&key).try_acquire().await.map(drop)
            ));
            assert!(refused(
                locker.lock_many(&["a", &key]).try_acquire().await.map(drop)
            ));
            assert!(refused(
                locker.semaphore(&key, 2).try_acquire().await.map(drop)
            ));
            assert!(refused(
                locker
                    .election(key.trim_start_matches("doc"))
                    .try_campaign()
                    .await
                    .map(drop)
            ));
        }
        let plain = locker.acquire("mixed").await?;
        let read = locker.new_handle();
        let r = read.read_lock("mixed").try_acquire().await?;
        assert!(r.is_none(), "{}: a read beside another's lock", b.dialect);
        // The same handle: refused.
        assert!(matches!(
            locker.read_lock("mixed").try_acquire().await,
            Err(Error::MixedHolds { .. })
        ));
        assert!(plain.release().await?);
        let r = locker.read_lock("mixed").acquire().await?;
        for refused in [
            locker.try_acquire("mixed").await.map(drop),
            locker
                .lock("mixed")
                .strategy(Strategy::Insert)
                .try_acquire()
                .await
                .map(drop),
            locker
                .lock_many(&["mixed", "other"])
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
        assert!(matches!(
            locker.write_lock("mixed").try_acquire().await,
            Err(Error::UpgradeRefused { .. })
        ));
        assert!(r.release().await?);
        // Nothing of these reached the table but the read and the lock.
        assert_eq!(b.held_rows(locker.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// The TTL of the holds the watchdog keeps alive below: renewed every 500 ms, with a
/// second to spare.
const RENEWED_TTL: Duration = Duration::from_millis(1500);

/// Tries the lock on `key` on `locker` every 10 ms until `stop`, and counts the grants
/// (each given back at once).
fn keep_trying(
    locker: Locker,
    key: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<anyhow::Result<u64>> {
    let granted = AtomicU64::new(0);
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            if let Some(g) = locker.try_acquire(&key).await? {
                granted.fetch_add(1, Ordering::Relaxed);
                g.release().await?;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(granted.load(Ordering::Relaxed))
    })
}

/// Waits until the database clock is past `until` (µs).
async fn db_clock_past(b: &common::Backend, locker: &Locker, until: i64) -> anyhow::Result<()> {
    let end = tokio::time::Instant::now() + DEADLINE;
    while history::db_now_us(b, locker.pool()).await? <= until {
        anyhow::ensure!(
            tokio::time::Instant::now() < end,
            "the database clock stood still"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// A read, a permit, and a read taken by a downgrade, each kept alive by the watchdog
/// past three TTLs (TTL 1.5 s), with a plain locker trying the name every 10 ms all the
/// while: it is never granted while the hold lives, as the name's row is renewed in
/// the very statement that renews the hold, and it gets the name at once after the
/// release. The downgrade's write and read are renewed together for two TTLs first;
/// once the write is released, another reader gets in, and a writer does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_shared_holds_keep_the_name_past_their_ttl() -> anyhow::Result<()> {
    common::on_each(common::backends("one_name_renewed").await, |b| async move {
        let holder = b.fresh_table().await?.new_handle();
        let holder = Locker::builder(holder.pool().clone())
            .table(&b.table)
            .ttl(RENEWED_TTL)
            .build()?;
        let other = b.locker().await?;
        for case in ["read", "permit", "downgrade"] {
            let name = format!("renewed-{case}");
            let stop = Arc::new(AtomicBool::new(false));
            // The plain locker tries from the grant on.
            let trying = |stop: &Arc<AtomicBool>| {
                keep_trying(other.new_handle(), name.clone(), stop.clone())
            };
            let mut write = None;
            let (held, trying) = match case {
                "read" => {
                    let g = holder.read_lock(&name).acquire_timeout(DEADLINE).await?;
                    (Held::Guard(g), trying(&stop))
                }
                "permit" => {
                    let g = holder.semaphore(&name, PERMITS);
                    let g = g.acquire_timeout(DEADLINE).await?;
                    (Held::Permits(g), trying(&stop))
                }
                _ => {
                    let w = holder.write_lock(&name).acquire_timeout(DEADLINE).await?;
                    let trying = trying(&stop);
                    let r = holder.read_lock(&name).try_acquire().await?;
                    let r = r.context("a writer's read is granted at once")?;
                    // Write and read renewed together for two TTLs.
                    let until =
                        r.expires_at().timestamp_micros() + i64::try_from(RENEWED_TTL.as_micros())?;
                    db_clock_past(&b, &other, until).await?;
                    assert!(!w.is_lost() && !r.is_lost(), "{}: lost", b.dialect);
                    write = Some(w);
                    (Held::Guard(r), trying)
                }
            };
            if let Some(w) = write.take() {
                assert!(w.release().await?, "{}: the write", b.dialect);
                let reader = other.read_lock(&name).try_acquire().await?;
                let reader = reader.context("a reader shares a downgraded read")?;
                assert!(reader.release().await?);
                assert!(
                    other.write_lock(&name).try_acquire().await?.is_none(),
                    "{}: a writer beside a downgraded read",
                    b.dialect
                );
            }
            let (granted_until, lost) = match &held {
                Held::Guard(g) => (g.expires_at(), g.lost()),
                Held::Permits(g) => (g.expires_at(), g.lost()),
                _ => unreachable!(),
            };
            // Three TTLs past the expiry the hold had at its grant.
            let until =
                granted_until.timestamp_micros() + 2 * i64::try_from(RENEWED_TTL.as_micros())?;
            db_clock_past(&b, &other, until).await?;
            assert!(!lost.is_lost(), "{} {case}: the hold was lost", b.dialect);
            stop.store(true, Ordering::Relaxed);
            let granted = trying.await??;
            assert_eq!(
                granted, 0,
                "{} {case}: a plain lock was granted while the hold lived",
                b.dialect
            );
            assert!(held.release().await?, "{} {case}", b.dialect);
            let g = other.try_acquire(&name).await?;
            assert!(
                g.is_some(),
                "{} {case}: not free after the release",
                b.dialect
            );
            assert!(g.unwrap().release().await?);
        }
        Ok(())
    })
    .await
}

/// A read extended past its TTL pushes its name as far, in the same transaction: the
/// name's expiry is never earlier than the read's, on every backend, for a read of a
/// name held by reads and for a downgrade's read (its name held by the writer); and an
/// extension of a read that lost its name (released by force) extends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_read_pushes_its_name() -> anyhow::Result<()> {
    for b in common::backends("one_name_extend").await {
        let reader = b.fresh_table().await?;
        let other = b.locker().await?;
        let far = Duration::from_secs(3600);
        let name_expiry = |name: &'static str| {
            let other = other.clone();
            async move {
                anyhow::Ok(
                    other
                        .lock_info(name)
                        .await?
                        .with_context(|| format!("{name} is held"))?
                        .expires_at,
                )
            }
        };
        let mut shared = reader.read_lock("extended").acquire().await?;
        assert!(shared.extend(far).await?, "{}", b.dialect);
        assert!(
            name_expiry("extended").await? >= shared.expires_at(),
            "{}: the name expires before its extended read",
            b.dialect
        );
        let write = reader.write_lock("downgraded").acquire().await?;
        let mut read = reader.read_lock("downgraded").try_acquire().await?;
        let read_ref = read.as_mut().context("a writer's read")?;
        assert!(read_ref.extend(far).await?, "{}", b.dialect);
        assert!(write.release().await?);
        assert!(
            name_expiry("downgraded").await? >= read_ref.expires_at(),
            "{}: the downgraded name expires before its extended read",
            b.dialect
        );
        assert!(other.force_release_now("extended").await?);
        assert!(
            !shared.extend(far).await?,
            "{}: extended a released read",
            b.dialect
        );
        assert!(read.context("read")?.release().await?);
        assert!(!shared.release().await?);
        assert_eq!(b.held_rows(reader.pool()).await?, 0, "{}", b.dialect);
    }
    Ok(())
}

/// An operator's release of a name held by reads (or permits) releases the name with
/// every read (permit) of it, in one transaction: the name is free for a lock at once,
/// and each holder's lost signal fires. The release of one read releases it alone, and
/// the name counts one read less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_releasing_a_shared_name_releases_its_holds() -> anyhow::Result<()> {
    for b in common::backends("one_name_force").await {
        let operator = b.fresh_table().await?;
        let builder = || async { anyhow::Ok(b.builder().await?.ttl(RENEWED_TTL).build()?) };
        let (r1, r2) = (builder().await?, builder().await?);
        for p in [P::Read, P::Semaphore] {
            let name = format!("forced-{p:?}").to_lowercase();
            let key = format!("election:{name}");
            let h1 = try_take(&r1, p, &name).await?.context("first")?;
            let h2 = try_take(&r2, p, &name).await?.context("second")?;
            let lost = match &h1 {
                Held::Guard(g) => g.lost(),
                Held::Permits(g) => g.lost(),
                _ => unreachable!(),
            };
            assert!(
                operator.force_release_now(&key).await?,
                "{} {p:?}",
                b.dialect
            );
            let g = operator.try_acquire(&key).await?;
            assert!(g.is_some(), "{} {p:?}: the name stayed held", b.dialect);
            let mut lost = lost;
            let reason = tokio::time::timeout(DEADLINE, lost.wait()).await?;
            assert_eq!(reason, sqlock::LostReason::NotHeld, "{}", b.dialect);
            assert!(!h1.release().await?, "{} {p:?}", b.dialect);
            assert!(!h2.release().await?, "{} {p:?}", b.dialect);
            assert!(g.unwrap().release().await?);
        }
        // One read at a time.
        let a = r1.read_lock("one").acquire().await?;
        let c = r2.read_lock("one").acquire().await?;
        assert!(
            operator
                .force_release_now(&format!("one@read:{}", r1.owner()))
                .await?
        );
        assert_eq!(
            operator.lock_info("one").await?.map(|l| l.hold_count),
            Some(1)
        );
        assert!(operator.try_acquire("one").await?.is_none());
        assert!(
            operator
                .force_release_now(&format!("one@read:{}", r2.owner()))
                .await?
        );
        let g = operator.try_acquire("one").await?;
        assert!(
            g.is_some(),
            "{}: the last read's release kept the name",
            b.dialect
        );
        assert!(g.unwrap().release().await?);
        assert!(!a.release().await? && !c.release().await?);
    }
    Ok(())
}

/// The environment variable that makes the test binary a worker: `dialect|table|kind`.
const WORKER: &str = "SQLOCK_ONE_NAME_WORKER";

/// The workers' name and TTL.
const CRASH_NAME: &str = "crashed";
const CRASH_TTL: Duration = Duration::from_secs(2);

/// A worker: takes a read (`read`) or a permit (`permit`) of `CRASH_NAME` with the
/// watchdog on, says `HELD key owner token`, and holds until it is killed.
#[tokio::test]
async fn one_name_worker_process() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(WORKER) else {
        return Ok(());
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dialect, table, kind] = parts[..] else {
        anyhow::bail!("bad {WORKER}: {spec}");
    };
    let dialect = match dialect {
        "postgres" => Dialect::Postgres,
        "mysql" => Dialect::MySql,
        _ => Dialect::Sqlite,
    };
    let b = common::backends_of(table, &[dialect])
        .await
        .pop()
        .context("the worker's backend")?;
    let locker = b.builder().await?.ttl(CRASH_TTL).build()?;
    let owner = locker.owner().to_string();
    let (key, token) = if kind == "read" {
        let g = locker
            .read_lock(CRASH_NAME)
            .acquire_timeout(DEADLINE)
            .await?;
        let held = (format!("{CRASH_NAME}@read:{owner}"), g.fencing_token());
        std::mem::forget(g);
        held
    } else {
        let g = locker
            .semaphore(CRASH_NAME, PERMITS)
            .acquire_timeout(DEADLINE)
            .await?;
        let held = (g.keys().next().unwrap().to_owned(), g.fencing_token());
        std::mem::forget(g);
        held
    };
    println!("HELD {key} {owner} {token}");
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
}

/// A reader, and a permit holder, killed (SIGKILL) after their watchdog renewed them:
/// the name stays busy for a lock until the dead hold's expiry on the database clock
/// (no grant is made before it), and is granted no later than the name's own expiry
/// (which is no earlier than the hold's) plus a margin, for the poll: the dead
/// holder's count on the name goes with the name's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shared_holder_keeps_the_name_until_its_expiry() -> anyhow::Result<()> {
    common::on_each(common::backends("one_name_crash").await, |b| async move {
        let locker = b.fresh_table().await?;
        let admin = b.pool().await?;
        for kind in ["read", "permit"] {
            let dialect = match b.dialect {
                Dialect::Postgres => "postgres",
                Dialect::MySql => "mysql",
                _ => "sqlite",
            };
            let mut child = Command::new(std::env::current_exe()?)
                .args([
                    "one_name_worker_process",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER, format!("{dialect}|{}|{kind}", b.table))
                .env("SQLOCK_TEST_PARENT_PID", std::process::id().to_string())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let stdout = child.stdout.take().context("the worker's stdout")?;
            let mut lines = BufReader::new(stdout).lines();
            let held = tokio::time::timeout(DEADLINE, async {
                while let Some(line) = lines.next_line().await? {
                    if let Some(at) = line.find("HELD ") {
                        return anyhow::Ok(line[at + 5..].to_owned());
                    }
                }
                anyhow::bail!("the worker ended without holding")
            })
            .await??;
            let mut f = held.split(' ');
            let (key, owner, token) = (
                f.next().context("key")?.to_owned(),
                f.next().context("owner")?.to_owned(),
                f.next().context("token")?.parse::<i64>()?,
            );
            // Renewed at least once (its expiry moved), so the name was pushed by a
            // renewal, not only by the grant.
            let granted = history::dead_row(&b, &admin, &key, &owner, token).await?;
            let end = tokio::time::Instant::now() + DEADLINE;
            loop {
                let row = history::dead_row(&b, &admin, &key, &owner, token).await?;
                if row.expires_us > granted.expires_us {
                    break;
                }
                anyhow::ensure!(
                    tokio::time::Instant::now() < end,
                    "{} {kind}: never renewed",
                    b.dialect
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            kill(
                Pid::from_raw(i32::try_from(child.id().context("pid")?)?),
                Signal::SIGKILL,
            )?;
            let status = child.wait().await?;
            assert!(
                !status.success(),
                "{} {kind}: the worker was not killed",
                b.dialect
            );
            // Nothing renews them now: their final expiries.
            let dead = history::dead_row(&b, &admin, &key, &owner, token).await?;
            let name = history::lock_row(&b, &admin, CRASH_NAME)
                .await?
                .context("the name's row")?;
            assert!(
                name.locked && name.owner.is_empty() && name.expires_us >= dead.expires_us,
                "{} {kind}: the name {name:?} is not held as long as the hold {dead:?}",
                b.dialect
            );
            // A lock polls the name until it gets it.
            let granted_at = loop {
                if let Some(g) = locker.try_acquire(CRASH_NAME).await? {
                    let at = history::db_now_us(&b, &admin).await?;
                    assert!(g.release().await?);
                    break at;
                }
                anyhow::ensure!(
                    tokio::time::Instant::now() < end + DEADLINE,
                    "{} {kind}: the name was never free",
                    b.dialect
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert!(
                granted_at >= dead.expires_us,
                "{} {kind}: a lock got the name at {granted_at} µs, before the killed \
                 holder's expiry at {} µs",
                b.dialect,
                dead.expires_us
            );
            // The poll's period and a loaded machine's delays: two seconds, well under
            // the hold's renewals' reach if the name were never freed.
            let margin = 2_000_000;
            assert!(
                granted_at <= name.expires_us + margin,
                "{} {kind}: the name was granted at {granted_at} µs, long after its expiry \
                 at {} µs",
                b.dialect,
                name.expires_us
            );
            println!(
                "{} {kind}: killed hold expired at {} µs, the name at {} µs, a lock got it at \
                 {granted_at} µs",
                b.dialect, dead.expires_us, name.expires_us
            );
        }
        Ok(())
    })
    .await
}
