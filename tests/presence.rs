//! Presence (`LockerBuilder::presence`): a holder process that dies frees its leases at
//! once, by the marker its session held; one that is paused keeps them until their
//! TTL; one without presence is never taken over. On the servers: a killed presence
//! connection, or an idle timeout, costs the holder nothing; a lease records only a
//! marker held as it is granted; a takeover while both of a holder's presence
//! connections are gone is signalled to it by `lost()` with `PresenceLost` at once. On
//! every backend where it applies: a SQLite file, PostgreSQL and MariaDB. Restarts and
//! server-wide timeouts are in `presence_faults.rs`.
//!
//! The holders are processes of this very test binary, started with
//! `SQLOCK_PRESENCE_HOLDER` set, running `holder_process` alone: it takes the key and
//! waits to be stopped or killed.

mod common;
mod presence_support;

use presence_support as support;
use presence_support::Who;

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::{DbPool, Dialect, Error, LockInfo, Locker, LostReason, Strategy};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// What a holder process is told: dialect, table, key, TTL in milliseconds, presence.
const HOLDER: &str = "SQLOCK_PRESENCE_HOLDER";

/// The cgroup a holder process moves itself into, for a network cut.
const CGROUP: &str = "SQLOCK_PRESENCE_CGROUP";

/// How long any wait of these tests may take before it counts as a failure.
const DEADLINE: Duration = Duration::from_secs(30);

/// The holder: runs only in a process started by [`spawn_holder`].
#[tokio::test]
async fn holder_process() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(HOLDER) else {
        return Ok(());
    };
    // Into a cgroup of its own first, when the test cuts its network.
    if let Ok(dir) = std::env::var(CGROUP) {
        common::partition::join(std::path::Path::new(&dir))?;
    }
    let parts: Vec<&str> = spec.split('|').collect();
    let [dialect, table, key, ttl_ms, presence, what] = parts[..] else {
        anyhow::bail!("bad {HOLDER}: {spec}");
    };
    let dialect = match dialect {
        "postgres" => Dialect::Postgres,
        "mysql" => Dialect::MySql,
        _ => Dialect::Sqlite,
    };
    let b = common::backends_of(table, &[dialect])
        .await
        .pop()
        .context("the holder's backend")?;
    let strategy = if what == "fair" {
        Strategy::Fair
    } else {
        Strategy::default()
    };
    let locker = b
        .builder()
        .await?
        .presence(presence == "1")
        .strategy(strategy)
        .ttl(Duration::from_millis(ttl_ms.parse()?))
        .build()?;
    // What to hold: the lock `key` (`lock`; `fair`: of the fair strategy, waiting in
    // its queue), a permit of the semaphore `key` of N permits (`permit:N`), or a read
    // of the read-write lock `key` (`read`).
    let (token, mut lost, _held): (i64, sqlock::LostSignal, Box<dyn std::any::Any + Send>) =
        match what.strip_prefix("permit:") {
            Some(n) => {
                let g = locker.semaphore(key, n.parse()?).acquire().await?;
                (g.fencing_token(), g.lost(), Box::new(g))
            }
            None if what == "read" => {
                let g = locker.read_lock(key).acquire().await?;
                (g.fencing_token(), g.lost(), Box::new(g))
            }
            None => {
                let g = locker.acquire(key).await?;
                (g.fencing_token(), g.lost(), Box::new(g))
            }
        };
    println!("HELD {token} {}", locker.owner());
    tokio::spawn(async move {
        let reason = lost.wait().await;
        println!("LOST {reason:?}");
    });
    // What the holder's own connections see, for a test that cuts them off: each
    // probe on the holder's pool answers or times out.
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let probe = tokio::time::timeout(Duration::from_millis(150), locker.lock_info(key));
        match probe.await {
            Ok(_) => println!("PROBE answered"),
            Err(_) => println!("PROBE timed out"),
        }
    }
}

/// A holder process of `key`; returns it once it holds the key, with its token and
/// owner.
async fn spawn_holder(
    b: &common::Backend,
    key: &str,
    ttl: Duration,
    presence: bool,
) -> anyhow::Result<(Child, i64, String)> {
    let (child, token, owner, mut said) =
        spawn_holder_in(b, key, ttl, presence, None, "lock").await?;
    // Read to the end: a holder whose output nobody reads would die of a broken pipe
    // at its next line, and free its marker by itself.
    tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });
    Ok((child, token, owner))
}

/// What a holder process prints, line by line.
type Said = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// Starts a holder process of `key` (in `cgroup` when given), which goes on to take
/// it; returns it at once, with what it says.
fn start_holder(
    b: &common::Backend,
    key: &str,
    ttl: Duration,
    presence: bool,
    cgroup: Option<&std::path::Path>,
    what: &str,
) -> anyhow::Result<(Child, Said)> {
    let dialect = match b.dialect {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        _ => "sqlite",
    };
    let spec = format!(
        "{dialect}|{}|{key}|{}|{}|{what}",
        b.table,
        ttl.as_millis(),
        u8::from(presence)
    );
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args([
            "holder_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLDER, spec)
        .env("SQLOCK_TEST_PARENT_PID", std::process::id().to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = cgroup {
        command.env(CGROUP, dir);
    }
    let mut child = command.spawn()?;
    let stdout = child.stdout.take().context("the holder's stdout")?;
    Ok((child, BufReader::new(stdout).lines()))
}

/// [`spawn_holder`], in `cgroup` when given; also returns what it says after holding.
async fn spawn_holder_in(
    b: &common::Backend,
    key: &str,
    ttl: Duration,
    presence: bool,
    cgroup: Option<&std::path::Path>,
    what: &str,
) -> anyhow::Result<(Child, i64, String, Said)> {
    let (child, mut lines) = start_holder(b, key, ttl, presence, cgroup, what)?;
    let held = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            // The harness may have begun the line with the test's name.
            if let Some(at) = line.find("HELD ") {
                return Ok::<_, anyhow::Error>(Some(line[at + 5..].to_owned()));
            }
        }
        Ok(None)
    })
    .await
    .context("the holder took too long")??
    .context("the holder ended without holding the key")?;
    let (token, owner) = held.split_once(' ').context("the holder's line")?;
    Ok((child, token.parse()?, owner.to_owned(), lines))
}

fn signal(child: &Child, sig: Signal) -> anyhow::Result<()> {
    let pid = child.id().context("the holder has exited")?;
    kill(Pid::from_raw(i32::try_from(pid)?), sig)?;
    Ok(())
}

async fn info(locker: &Locker, key: &str) -> anyhow::Result<LockInfo> {
    locker
        .lock_info(key)
        .await?
        .with_context(|| format!("{key} is not held"))
}

/// Whether the fence still passes for `owner` and `token` on `key`: the check
/// `guard.fence` makes, as the old holder's transaction would make it.
async fn fence_passes(
    b: &common::Backend,
    locker: &Locker,
    key: &str,
    owner: &str,
    token: i64,
) -> anyhow::Result<bool> {
    let now = match b.dialect {
        Dialect::Postgres => "clock_timestamp()",
        Dialect::MySql => "UTC_TIMESTAMP(6)",
        _ => "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
    };
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE lock_key = '{key}' AND lock_owner = '{owner}' \
         AND fencing_token = {token} AND locked AND expires_at > {now}",
        b.quoted()
    );
    Ok(b.scalar(locker.pool(), &sql).await? > 0)
}

#[tokio::test]
async fn a_killed_holders_key_is_taken_at_once() -> anyhow::Result<()> {
    for b in common::backends("presence_killed").await {
        b.fresh_table().await?;
        // The waiter with presence and without: any acquisition may take the lease.
        for waiter_presence in [true, false] {
            let key = format!("killed-{waiter_presence}");
            let ttl = Duration::from_secs(60);
            let (mut child, token, owner) = spawn_holder(&b, &key, ttl, true).await?;
            let waiter = b
                .builder()
                .await?
                .presence(waiter_presence)
                .ttl(ttl)
                .build()?;
            assert!(
                waiter.try_acquire(&key).await?.is_none(),
                "{}: a live holder's key was taken",
                b.dialect
            );
            let before = info(&waiter, &key).await?;
            if b.dialect != Dialect::Sqlite {
                // Killed with both of its presence connections open: the holder's
                // idle, the standby's waiting for the marker.
                let admin = b.pool().await?;
                let m = support::recorded(&b, &admin, &key)
                    .await?
                    .context("the lease records no marker")?;
                let pid = child.id().context("the holder has exited")?;
                support::watched(&b, &admin, &m, Who::Process(pid)).await?;
            }
            signal(&child, Signal::SIGKILL)?;
            let killed = Instant::now();
            child.wait().await?;
            let guard = loop {
                if let Some(g) = waiter.try_acquire(&key).await? {
                    break g;
                }
                assert!(killed.elapsed() < DEADLINE, "{}: never taken", b.dialect);
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            let took = killed.elapsed();
            let after = info(&waiter, &key).await?;
            eprintln!(
                "{} (waiter presence {waiter_presence}): SIGKILLed holder's key granted {took:?} \
                 after the kill (TTL {ttl:?})",
                b.dialect
            );
            assert!(
                after.acquired_at < before.expires_at,
                "{}: taken at {} only, after the old lease's expiry {}",
                b.dialect,
                after.acquired_at,
                before.expires_at
            );
            assert!(guard.fencing_token() > token, "{}: tokens rise", b.dialect);
            assert!(
                !fence_passes(&b, &waiter, &key, &owner, token).await?,
                "{}: the dead holder's token still passes the fence",
                b.dialect
            );
            assert!(guard.release().await?);
        }
    }
    Ok(())
}

/// A semaphore's permit is a lease with presence too: a SIGKILLed holder's permit is
/// shown gone and taken by the next acquisition at once, long before its TTL, with a
/// token above the dead holder's, which the fence then refuses.
#[tokio::test]
async fn a_killed_holders_permit_is_taken_at_once() -> anyhow::Result<()> {
    for b in common::backends("presence_permit").await {
        b.fresh_table().await?;
        for waiter_presence in [true, false] {
            let name = format!("permit-{waiter_presence}");
            let slot = format!("semaphore:{name}#0");
            let ttl = Duration::from_secs(60);
            let (mut spawned, token, owner, mut said) =
                spawn_holder_in(&b, &name, ttl, true, None, "permit:1").await?;
            tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });
            let waiter = b
                .builder()
                .await?
                .presence(waiter_presence)
                .ttl(ttl)
                .build()?;
            let semaphore = waiter.semaphore(&name, 1);
            assert!(
                semaphore.try_acquire().await?.is_none(),
                "{}: a live holder's permit was taken",
                b.dialect
            );
            let before = semaphore.holders().await?;
            assert_eq!(before.len(), 1, "{}: the holder's permit", b.dialect);
            assert!(
                !before[0].holder_gone,
                "{}: a live holder shown gone",
                b.dialect
            );
            if b.dialect != Dialect::Sqlite {
                let admin = b.pool().await?;
                let m = support::recorded(&b, &admin, &slot)
                    .await?
                    .context("the permit records no marker")?;
                let pid = spawned.id().context("the holder has exited")?;
                support::watched(&b, &admin, &m, Who::Process(pid)).await?;
            }
            signal(&spawned, Signal::SIGKILL)?;
            let killed = Instant::now();
            spawned.wait().await?;
            // Shown gone before anyone takes it: the server has ended the holder's
            // sessions once its socket closed (a moment after the kill).
            loop {
                let now = semaphore.holders().await?;
                if now.first().is_some_and(|h| h.holder_gone) {
                    break;
                }
                assert!(
                    killed.elapsed() < DEADLINE,
                    "{}: never shown gone",
                    b.dialect
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let guard = loop {
                if let Some(g) = semaphore.try_acquire().await? {
                    break g;
                }
                assert!(killed.elapsed() < DEADLINE, "{}: never taken", b.dialect);
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            eprintln!(
                "{} (waiter presence {waiter_presence}): SIGKILLed holder's permit granted \
                 {:?} after the kill (TTL {ttl:?})",
                b.dialect,
                killed.elapsed()
            );
            assert!(guard.fencing_token() > token, "{}: tokens rise", b.dialect);
            assert_eq!(guard.keys().collect::<Vec<_>>(), [slot.as_str()]);
            assert!(
                !fence_passes(&b, &waiter, &slot, &owner, token).await?,
                "{}: the dead holder's token still passes the fence",
                b.dialect
            );
            // One holder: the taker's, shown as live.
            let after = semaphore.holders().await?;
            assert_eq!(after.len(), 1, "{}", b.dialect);
            assert_eq!(after[0].owner, waiter.owner().to_string(), "{}", b.dialect);
            assert!(!after[0].holder_gone, "{}", b.dialect);
            assert!(
                after[0].acquired_at < before[0].expires_at,
                "{}: taken at {} only, after the dead permit's expiry {}",
                b.dialect,
                after[0].acquired_at,
                before[0].expires_at
            );
            assert!(guard.release().await?);
        }
    }
    Ok(())
}

/// A fair locker of the test's, polling fast, with `presence` and a lease of `ttl`.
async fn fair_locker(b: &common::Backend, presence: bool, ttl: Duration) -> anyhow::Result<Locker> {
    Ok(b.builder()
        .await?
        .strategy(Strategy::Fair)
        .presence(presence)
        .poll_interval(Duration::from_millis(2), Duration::from_millis(20))
        .ttl(ttl)
        .build()?)
}

/// Whether `n` waiters or more are soon queued for `key`, as `locker` sees them.
async fn queued(locker: &Locker, key: &str, n: u64) -> anyhow::Result<bool> {
    common::eventually(|| async {
        Ok(locker.lock_info(key).await?.is_some_and(|i| i.waiters >= n))
    })
    .await
}

/// A fair lock is a lease with presence too, however it was granted: a holder that
/// was handed the lock from the queue (the grant made by the releaser's step, which
/// knows no marker of the holder's, and the marker recorded as the holder took the
/// grant up) and is SIGKILLed leaves the lock to the next waiter in the queue at once,
/// long before its TTL, with a token above the dead holder's, which the fence then
/// refuses.
#[tokio::test]
async fn a_killed_fair_holders_lock_is_handed_to_the_next_waiter_at_once() -> anyhow::Result<()> {
    for b in common::backends("presence_fair").await {
        b.fresh_table().await?;
        for waiter_presence in [true, false] {
            let key = format!("fair-{waiter_presence}");
            let ttl = Duration::from_secs(60);
            let b = &b;
            // The holder process queues behind a holder of the test's, and is handed
            // the lock by its release.
            let first = fair_locker(b, false, ttl).await?;
            let released = first.acquire(&key).await?;
            let spawned = {
                let (b, key) = ((*b).clone(), key.clone());
                tokio::spawn(
                    async move { spawn_holder_in(&b, &key, ttl, true, None, "fair").await },
                )
            };
            assert!(
                queued(&first, &key, 1).await?,
                "{}: the holder never queued",
                b.dialect
            );
            assert!(released.release().await?);
            let (mut child, token, owner, mut said) = spawned.await??;
            tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });
            let before = info(&first, &key).await?;
            assert_eq!(before.owner, owner, "{}: the holder's grant", b.dialect);
            assert!(
                !before.holder_gone,
                "{}: a live holder shown gone",
                b.dialect
            );
            // The next waiter, queued behind the holder.
            let waiter = fair_locker(b, waiter_presence, ttl).await?;
            let waiting = {
                let (waiter, key) = (waiter.clone(), key.clone());
                tokio::spawn(async move {
                    let guard = waiter.lock(&key).timeout(DEADLINE).acquire().await;
                    (guard, Instant::now())
                })
            };
            assert!(
                queued(&first, &key, 1).await?,
                "{}: the waiter never queued",
                b.dialect
            );
            if b.dialect != Dialect::Sqlite {
                // The grant recorded the marker as the holder took it up; the holder is
                // killed with both of its presence connections open.
                let admin = b.pool().await?;
                let m = support::recorded(b, &admin, &key)
                    .await?
                    .context("the fair grant records no marker")?;
                let pid = child.id().context("the holder has exited")?;
                support::watched(b, &admin, &m, Who::Process(pid)).await?;
            }
            signal(&child, Signal::SIGKILL)?;
            let killed = Instant::now();
            child.wait().await?;
            let (guard, granted) = waiting.await?;
            let guard = guard?;
            let took = granted - killed;
            let after = info(&waiter, &key).await?;
            eprintln!(
                "{} (waiter presence {waiter_presence}): SIGKILLed fair holder's lock handed \
                 on {took:?} after the kill (TTL {ttl:?})",
                b.dialect
            );
            assert_eq!(after.owner, waiter.owner().to_string(), "{}", b.dialect);
            assert!(
                after.acquired_at < before.expires_at,
                "{}: taken at {} only, after the old lease's expiry {}",
                b.dialect,
                after.acquired_at,
                before.expires_at
            );
            assert!(guard.fencing_token() > token, "{}: tokens rise", b.dialect);
            assert!(
                !fence_passes(b, &waiter, &key, &owner, token).await?,
                "{}: the dead holder's token still passes the fence",
                b.dialect
            );
            assert!(guard.release().await?);
        }
    }
    Ok(())
}

/// A waiter with presence that is SIGKILLed while it waits in the fair queue costs the
/// waiters behind it nothing: the release hands the lock to the dead waiter's place
/// (which lasts its TTL), the grant records the marker the place recorded, and the next
/// waiter finds the lock free at once, long before the dead place or grant would
/// lapse, with a higher token.
#[tokio::test]
async fn a_killed_fair_waiters_grant_is_handed_past_it_at_once() -> anyhow::Result<()> {
    for b in common::backends("presence_fair_waiter").await {
        b.fresh_table().await?;
        let key = "fair-waiter";
        let ttl = Duration::from_secs(60);
        let first = fair_locker(&b, false, ttl).await?;
        let held = first.acquire(key).await?;
        // The waiter process queues first, the test's waiter behind it.
        let (mut child, mut said) = start_holder(&b, key, ttl, true, None, "fair")?;
        tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });
        assert!(
            queued(&first, key, 1).await?,
            "{}: the waiter process never queued",
            b.dialect
        );
        let waiter = fair_locker(&b, true, ttl).await?;
        let waiting = {
            let (waiter, key) = (waiter.clone(), key.to_owned());
            tokio::spawn(async move {
                let guard = waiter.lock(&key).timeout(DEADLINE).acquire().await;
                (guard, Instant::now())
            })
        };
        assert!(
            queued(&first, key, 2).await?,
            "{}: the test's waiter never queued",
            b.dialect
        );
        if b.dialect != Dialect::Sqlite {
            // The dead waiter's place records its marker, held by its process alone.
            let admin = b.pool().await?;
            let m = support::recorded_place(&b, &admin, key)
                .await?
                .context("the waiter's place records no marker")?;
            let pid = child.id().context("the waiter process has exited")?;
            support::watched(&b, &admin, &m, Who::Process(pid)).await?;
        }
        signal(&child, Signal::SIGKILL)?;
        child.wait().await?;
        let before = info(&first, key).await?;
        let released = Instant::now();
        assert!(held.release().await?);
        let (guard, granted) = waiting.await?;
        let guard = guard?;
        let after = info(&waiter, key).await?;
        eprintln!(
            "{}: the lock was handed past a SIGKILLed fair waiter {:?} after the release \
             (TTL {ttl:?})",
            b.dialect,
            granted - released
        );
        assert_eq!(after.owner, waiter.owner().to_string(), "{}", b.dialect);
        // Granted well within the dead waiter's place and its grant, which last the TTL
        // from the kill at least: on the database's clock, before the first holder's
        // lease (taken before the kill, for the same TTL) would have expired.
        assert!(
            after.acquired_at < before.expires_at,
            "{}: taken at {} only, after {}",
            b.dialect,
            after.acquired_at,
            before.expires_at
        );
        assert!(
            guard.fencing_token() > before.fencing_token + 1,
            "{}: a grant to the dead waiter came between: tokens {} then {}",
            b.dialect,
            before.fencing_token,
            guard.fencing_token()
        );
        assert!(guard.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn a_stopped_holders_key_waits_for_its_ttl() -> anyhow::Result<()> {
    for b in common::backends("presence_stopped").await {
        b.fresh_table().await?;
        let key = "stopped";
        let (mut child, token, owner) = spawn_holder(&b, key, Duration::from_secs(3), true).await?;
        let waiter = b.builder().await?.presence(true).build()?;
        signal(&child, Signal::SIGSTOP)?;
        // The expiry the stopped holder's last renewal left (a renewal in flight can
        // only push it later).
        let lease = info(&waiter, key).await?;
        assert!(lease.expires_in > Duration::ZERO);
        assert!(
            waiter.try_acquire(key).await?.is_none(),
            "{}: a stopped holder's key was taken before its TTL",
            b.dialect
        );
        let started = Instant::now();
        let guard = loop {
            if let Some(g) = waiter.try_acquire(key).await? {
                break g;
            }
            assert!(started.elapsed() < DEADLINE, "{}: never lapsed", b.dialect);
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let after = info(&waiter, key).await?;
        assert!(
            after.acquired_at >= lease.expires_at,
            "{}: taken at {}, before the stopped holder's lease expired at {}",
            b.dialect,
            after.acquired_at,
            lease.expires_at
        );
        assert!(guard.fencing_token() > token);
        assert!(!fence_passes(&b, &waiter, key, &owner, token).await?);
        signal(&child, Signal::SIGCONT)?;
        signal(&child, Signal::SIGKILL)?;
        child.wait().await?;
        assert!(guard.release().await?);
    }
    Ok(())
}

#[tokio::test]
async fn a_holder_without_presence_is_not_taken_over() -> anyhow::Result<()> {
    for b in common::backends("presence_without").await {
        b.fresh_table().await?;
        let key = "without";
        let (mut child, _, _) = spawn_holder(&b, key, Duration::from_secs(60), false).await?;
        let waiter = b.builder().await?.presence(true).build()?;
        signal(&child, Signal::SIGKILL)?;
        child.wait().await?;
        // As many tries as a takeover needed at most above, and more.
        for _ in 0..50 {
            assert!(
                waiter.try_acquire(key).await?.is_none(),
                "{}: a holder without presence was taken over",
                b.dialect
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left = info(&waiter, key).await?;
        assert!(left.expires_in > Duration::from_secs(30));
        assert!(
            !left.holder_gone,
            "{}: a holder without presence cannot be told gone",
            b.dialect
        );
    }
    Ok(())
}

/// `lock_info` and `list` say whether a holder is gone: not while a holder with
/// presence lives, yes once it was SIGKILLed (its lease still unexpired), and no more
/// once the next acquirer took the key, which it does at once.
#[tokio::test]
async fn lock_info_says_when_a_holder_is_gone() -> anyhow::Result<()> {
    for b in common::backends("presence_gone").await {
        b.fresh_table().await?;
        let key = "gone";
        let (mut child, token, owner) =
            spawn_holder(&b, key, Duration::from_secs(60), true).await?;
        let observer = b.locker().await?;
        let live = info(&observer, key).await?;
        assert_eq!(
            (live.owner.as_str(), live.fencing_token),
            (owner.as_str(), token)
        );
        assert!(!live.holder_gone, "{}: a live holder said gone", b.dialect);
        signal(&child, Signal::SIGKILL)?;
        child.wait().await?;
        let started = Instant::now();
        let gone = loop {
            let now = info(&observer, key).await?;
            if now.holder_gone {
                break now;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{}: a SIGKILLed holder never said gone",
                b.dialect
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(gone.owner, owner);
        assert!(gone.expires_in > Duration::from_secs(30), "{gone:?}");
        let listed = observer.list().await?;
        assert!(
            listed.iter().any(|l| l.key == key && l.holder_gone),
            "{}: {listed:?}",
            b.dialect
        );
        let next = b.builder().await?.presence(true).build()?;
        let g = next
            .try_acquire(key)
            .await?
            .context("the gone holder's key is free to the next acquirer")?;
        let taken = info(&observer, key).await?;
        assert!(
            taken.fencing_token > token && !taken.holder_gone,
            "{}: {taken:?}",
            b.dialect
        );
        assert!(g.release().await?);
    }
    Ok(())
}

/// A network cut between a holder process and the server, shorter than the TTL, both
/// ways: the server keeps the holder's presence session (it learns of a dead peer only
/// from TCP, far later), so no acquisition takes the key during the cut, and after it
/// the holder goes on holding, with no loss signalled.
#[tokio::test]
async fn a_short_network_cut_frees_nothing() -> anyhow::Result<()> {
    use common::partition::{Direction, Partitions};
    for b in common::servers("presence_cut").await {
        b.fresh_table().await?;
        let port: u16 = b
            .url()
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .context("the server's port")?
            .parse()?;
        let parts = Partitions::new()?;
        let name = format!("sqlock-presence-cut-{}", std::process::id());
        let cgroup = parts.cgroup(&name)?;
        let ttl = Duration::from_secs(6);
        let (mut child, token, _, mut said) =
            spawn_holder_in(&b, "cut", ttl, true, Some(&cgroup), "lock").await?;
        let waiter = b.builder().await?.presence(true).build()?;
        let cut = parts.cut(&name, port, Direction::Both)?;
        let started = Instant::now();
        let mut cut_off = false;
        while started.elapsed() < Duration::from_millis(1500) {
            assert!(
                waiter.try_acquire("cut").await?.is_none(),
                "{}: taken during a short cut",
                b.dialect
            );
            while let Ok(line) =
                tokio::time::timeout(Duration::from_millis(20), said.next_line()).await
            {
                let line = line?.unwrap_or_default();
                assert!(!line.contains("LOST"), "{}: {line}", b.dialect);
                cut_off |= line.contains("PROBE timed out");
            }
        }
        let dropped = parts.heal(cut)?;
        assert!(
            dropped.to_server > 0 && dropped.from_server > 0,
            "{}: the cut dropped {dropped:?}, so it tested nothing",
            b.dialect
        );
        assert!(cut_off, "{}: the holder was never cut off", b.dialect);
        // Two renewal periods after the cut, and more: held all along, nothing lost.
        let healed = Instant::now();
        while healed.elapsed() < ttl {
            assert!(waiter.try_acquire("cut").await?.is_none(), "{}", b.dialect);
            while let Ok(line) =
                tokio::time::timeout(Duration::from_millis(20), said.next_line()).await
            {
                let line = line?.unwrap_or_default();
                assert!(!line.contains("LOST"), "{}: {line}", b.dialect);
            }
        }
        let lease = info(&waiter, "cut").await?;
        assert_eq!(lease.fencing_token, token, "{}", b.dialect);
        assert!(lease.expires_in > Duration::ZERO);
        signal(&child, Signal::SIGKILL)?;
        child.wait().await?;
    }
    Ok(())
}

#[tokio::test]
async fn handles_with_and_without_presence_exclude_each_other() -> anyhow::Result<()> {
    for b in common::backends("presence_mixed").await {
        b.fresh_table().await?;
        let with = b.builder().await?.presence(true).build()?;
        let without = b.builder().await?.build()?;
        assert!(with.has_presence() && !without.has_presence());
        for (holder, waiter) in [(&with, &without), (&without, &with)] {
            let guard = holder.acquire("mixed").await?;
            assert!(
                waiter.try_acquire("mixed").await?.is_none(),
                "{}",
                b.dialect
            );
            // Re-entry keeps the one lease.
            let again = holder.acquire("mixed").await?;
            assert_eq!(again.fencing_token(), guard.fencing_token());
            assert!(again.release().await?);
            let first = guard.fencing_token();
            assert!(guard.release().await?);
            let next = waiter.acquire("mixed").await?;
            assert!(next.fencing_token() > first);
            assert!(next.release().await?);
        }
        // A sibling has a presence of its own: it excludes its parent.
        let sibling = with.new_handle();
        let guard = with.acquire("sibling").await?;
        assert!(sibling.try_acquire("sibling").await?.is_none());
        assert!(guard.release().await?);
    }
    Ok(())
}

/// A pool on PostgreSQL as a role of the test's own (a superuser, so that it may use
/// the test's table), made able to log in, with `setup` run for it first (an `ALTER
/// ROLE ... SET`, say); on MariaDB a pool of a user of the test's own.
async fn own_pool(
    b: &common::Backend,
    admin: &sqlock::DbPool,
    name: &'static str,
    setup: &str,
) -> anyhow::Result<sqlock::DbPool> {
    match b.dialect {
        Dialect::Postgres => {
            b.script(
                admin,
                &format!(
                    "DO $$ BEGIN CREATE ROLE {name} LOGIN SUPERUSER; \
                     EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
                     ALTER ROLE {name} LOGIN; {setup}"
                ),
            )
            .await?;
            let url = b.url().replacen("postgres@", &format!("{name}@"), 1);
            Ok(sqlx::postgres::PgPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(10))
                .connect(&url)
                .await?
                .into())
        }
        _ => {
            let pool = common::kill::pool(
                b,
                common::kill::Killable {
                    name,
                    max_connections: 4,
                    ping: true,
                    idle_timeout_s: None,
                },
            )
            .await?;
            b.script(
                admin,
                &format!("ALTER USER '{name}'@'127.0.0.1' ACCOUNT UNLOCK"),
            )
            .await?;
            Ok(pool)
        }
    }
}

/// Opens every connection `pool` may have (each taken while the others are held), and
/// leaves them idle in it: a pool whose role may not log in any more goes on with
/// those.
async fn warm(pool: &sqlock::DbPool) -> anyhow::Result<()> {
    match pool {
        DbPool::Postgres(p) => {
            let mut held = Vec::new();
            while held.len() < p.options().get_max_connections() as usize {
                held.push(p.acquire().await?);
            }
        }
        DbPool::MySql(p) => {
            let mut held = Vec::new();
            while held.len() < p.options().get_max_connections() as usize {
                held.push(p.acquire().await?);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Lets the role or user `name` open connections again, or not: its open ones live on.
async fn logins(
    b: &common::Backend,
    admin: &sqlock::DbPool,
    name: &str,
    allowed: bool,
) -> anyhow::Result<()> {
    let sql = match (b.dialect, allowed) {
        (Dialect::Postgres, true) => format!("ALTER ROLE {name} LOGIN"),
        (Dialect::Postgres, false) => format!("ALTER ROLE {name} NOLOGIN"),
        (_, true) => format!("ALTER USER '{name}'@'127.0.0.1' ACCOUNT UNLOCK"),
        (_, false) => format!("ALTER USER '{name}'@'127.0.0.1' ACCOUNT LOCK"),
    };
    b.script(admin, &sql).await
}

/// Who holds the handle's marker on MariaDB: a user of the test's own.
fn who(b: &common::Backend, name: &'static str) -> Who<'static> {
    match b.dialect {
        Dialect::Postgres => Who::Anyone,
        _ => Who::User(name),
    }
}

/// The connection that holds a handle's marker ends (killed by an operator, a proxy,
/// a timeout): the handle's standby connection, which waits for the marker, has it in
/// the same step, so that no other owner can ever find it free, and the leases that
/// record it stay the holder's, with no loss signalled. The same when the standby's
/// wait is interrupted, or the standby itself ends. Leases granted afterwards record
/// the marker, held by the former standby.
#[tokio::test]
async fn a_killed_presence_connection_costs_nothing() -> anyhow::Result<()> {
    const NAME: &str = "sqlock_p_handoff";
    for b in common::servers("presence_handoff").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let holder = Locker::builder(own_pool(&b, &admin, NAME, "").await?)
            .table(&b.table)
            .presence(true)
            .ttl(Duration::from_secs(9))
            .build()?;
        let guard = holder.acquire("handoff").await?;
        let token = guard.fencing_token();
        let waiter = b.builder().await?.build()?;
        let m = support::recorded(&b, &admin, "handoff")
            .await?
            .with_context(|| format!("{}: the lease records no marker", b.dialect))?;
        let (mut h, standby) = support::standby(&b, &admin, &m, who(&b, NAME)).await?;
        let mut w = standby.unwrap_or_default();
        for round in 0..3 {
            support::end(&b, &admin, h).await?;
            // Until the handle has a standby again, the marker is the former
            // standby's, and the key is never free for another owner.
            let (next_h, next_w) = loop {
                assert!(
                    waiter.try_acquire("handoff").await?.is_none(),
                    "{}: taken after the marker's connection was killed (round {round})",
                    b.dialect
                );
                let (holder_now, waiters) =
                    support::sessions(&b, &admin, &m, who(&b, NAME)).await?;
                assert!(
                    holder_now.is_some(),
                    "{}: the marker was free after its connection was killed (round {round})",
                    b.dialect
                );
                if let (Some(nh), [nw]) = (holder_now, &waiters[..]) {
                    if nh != h && *nw != nh {
                        break (nh, *nw);
                    }
                }
            };
            assert!(standby.is_some(), "{}: no standby waited", b.dialect);
            assert_eq!(next_h, w, "{}: the standby took the marker", b.dialect);
            assert!(!support::alive(&b, &admin, h).await?, "{}", b.dialect);
            (h, w) = (next_h, next_w);
        }
        // A wait interrupted (a statement cancelled, not the session): nothing changes.
        support::interrupt(&b, &admin, w).await?;
        // The standby alone ends: the holder keeps the marker, another standby waits.
        let (h2, _) = loop {
            let now = support::sessions(&b, &admin, &m, who(&b, NAME)).await?;
            assert_eq!(now.0, Some(h), "{}: the holder changed", b.dialect);
            if let [nw] = now.1[..] {
                break (h, nw);
            }
        };
        let (_, w) = support::watched(&b, &admin, &m, who(&b, NAME)).await?;
        support::end(&b, &admin, w).await?;
        let (h3, _) = loop {
            assert!(
                waiter.try_acquire("handoff").await?.is_none(),
                "{}",
                b.dialect
            );
            let now = support::sessions(&b, &admin, &m, who(&b, NAME)).await?;
            if let (Some(nh), [nw]) = (now.0, &now.1[..]) {
                if *nw != w {
                    break (nh, *nw);
                }
            }
        };
        assert_eq!(h3, h2, "{}: the holder changed", b.dialect);
        assert!(!guard.is_lost(), "{}: a loss was signalled", b.dialect);
        assert_eq!(info(&waiter, "handoff").await?.fencing_token, token);
        // The leases that recorded the marker were checked, and found the holder's.
        let renewed = holder.watchdog_stats().renewed;
        assert!(
            common::eventually(|| async { Ok(holder.watchdog_stats().renewed > renewed) }).await?,
            "{}: the watchdog stopped renewing",
            b.dialect
        );
        assert!(!guard.is_lost(), "{}: a loss was signalled", b.dialect);
        // A lease granted now records the marker, which the former standby holds.
        let next = holder.acquire("handoff-next").await?;
        assert_eq!(
            support::recorded(&b, &admin, "handoff-next").await?,
            Some(m.clone()),
            "{}",
            b.dialect
        );
        assert!(waiter.try_acquire("handoff-next").await?.is_none());
        assert!(next.release().await?);
        assert!(guard.release().await?, "{}", b.dialect);
    }
    Ok(())
}

/// The connection that holds a handle's marker ends, and the handle is granted another
/// key at once: the lease records the marker only if a session holds it as it is
/// granted, so that a marker it records is held (by the handle's standby, which took
/// it over) and no other owner can take that lease. (A handle that trusted a session
/// checked moments before recorded a marker nobody held, and lost that lease to the
/// next acquirer.)
#[tokio::test]
async fn a_lease_records_only_a_marker_a_session_holds() -> anyhow::Result<()> {
    for b in common::servers("presence_recorded").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let holder = b
            .builder()
            .await?
            .presence(true)
            .ttl(Duration::from_millis(1500))
            .build()?;
        let first = holder.acquire("first").await?;
        let m = support::recorded(&b, &admin, "first")
            .await?
            .with_context(|| format!("{}: the lease records no marker", b.dialect))?;
        let (h, _) = support::sessions(&b, &admin, &m, Who::Anyone).await?;
        support::end(&b, &admin, h.context("nobody holds the marker")?).await?;
        let second = holder.acquire("second").await?;
        if let Some(recorded) = support::recorded(&b, &admin, "second").await? {
            assert!(
                common::eventually(|| async {
                    Ok(support::sessions(&b, &admin, &recorded, Who::Anyone)
                        .await?
                        .0
                        .is_some())
                })
                .await?,
                "{}: the lease recorded a marker nobody holds",
                b.dialect
            );
        }
        let waiter = b.builder().await?.build()?;
        for _ in 0..20 {
            assert!(
                waiter.try_acquire("second").await?.is_none(),
                "{}: the lease granted after the marker's connection ended was taken",
                b.dialect
            );
        }
        assert!(second.release().await?);
        assert!(first.release().await?);
    }
    Ok(())
}

/// Both of a handle's presence connections end (the standby, then the holder), and
/// the handle cannot connect again (its role or user may not log in): its marker is
/// free. A lease the handle is granted then records no marker (a plain lease: no other
/// owner can take it before its TTL). A lease that recorded the marker before may be
/// taken by another owner at once, and the holder learns it from its own check of the
/// leases that record a marker no standby watches, well within the bound printed (its
/// watchdog alone would tell only at its next tick, 20 s later). Once the handle can
/// connect again, it takes its marker back, and its leases record it again.
#[tokio::test]
async fn a_takeover_while_both_presence_connections_are_gone_is_signalled() -> anyhow::Result<()> {
    const NAME: &str = "sqlock_p_ended";
    for b in common::servers("presence_ended").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let pool = own_pool(&b, &admin, NAME, "").await?;
        let holder = Locker::builder(pool.clone())
            .table(&b.table)
            .presence(true)
            .ttl(Duration::from_secs(60))
            .build()?;
        let first = holder.acquire("first").await?;
        let mut lost = first.lost();
        let m = support::recorded(&b, &admin, "first")
            .await?
            .with_context(|| format!("{}: the lease records no marker", b.dialect))?;
        let (h, w) = support::standby(&b, &admin, &m, who(&b, NAME)).await?;
        warm(&pool).await?;
        logins(&b, &admin, NAME, false).await?;
        let outcome = async {
            if let Some(w) = w {
                support::end(&b, &admin, w).await?;
            }
            support::end(&b, &admin, h).await?;
            assert!(
                common::eventually(|| async {
                    Ok(support::sessions(&b, &admin, &m, who(&b, NAME))
                        .await?
                        .0
                        .is_none())
                })
                .await?,
                "{}: the marker is still held",
                b.dialect
            );
            // Granted on the pool's open connection, after the marker's sessions ended:
            // no marker recorded.
            let second = holder
                .try_acquire("second")
                .await?
                .with_context(|| format!("{}: the second key was not granted", b.dialect))?;
            assert_eq!(
                support::recorded(&b, &admin, "second").await?,
                None,
                "{}: a lease recorded a marker no connection holds",
                b.dialect
            );
            // Another owner takes the first lease at once (its marker is free) ...
            let waiter = b.builder().await?.build()?;
            let taken = waiter
                .try_acquire("first")
                .await?
                .with_context(|| format!("{}: a free marker's lease not taken", b.dialect))?;
            let taken_at = Instant::now();
            assert!(taken.fencing_token() > first.fencing_token());
            // ... and never the second, a plain lease.
            assert!(
                waiter.try_acquire("second").await?.is_none(),
                "{}",
                b.dialect
            );
            // The holder learns of the takeover from its check, not at its next tick.
            let reason = tokio::time::timeout(Duration::from_secs(5), lost.wait())
                .await
                .with_context(|| {
                    format!("{}: the takeover was not signalled within 5 s", b.dialect)
                })?;
            println!(
                "{}: a takeover while both presence connections were gone was signalled \
                 {:?} after it (TTL 60 s, a watchdog tick every 20 s)",
                b.dialect,
                taken_at.elapsed()
            );
            assert_eq!(reason, LostReason::PresenceLost, "{}", b.dialect);
            assert!(!second.is_lost(), "{}", b.dialect);
            assert!(taken.release().await?);
            assert!(w.is_some(), "{}: no standby waited", b.dialect);
            Ok::<_, anyhow::Error>(second)
        }
        .await;
        logins(&b, &admin, NAME, true).await?;
        let second = outcome?;
        // The handle takes its marker back, and records it again.
        support::watched(&b, &admin, &m, who(&b, NAME)).await?;
        let third = holder.acquire("third").await?;
        assert_eq!(
            support::recorded(&b, &admin, "third").await?,
            Some(m.clone()),
            "{}",
            b.dialect
        );
        assert!(third.release().await?);
        assert!(second.release().await?);
        assert!(
            !first.release().await?,
            "{}: the taken lease released",
            b.dialect
        );
    }
    Ok(())
}

/// A takeover keeps the dead holder's marker until it commits, so that the holder
/// cannot take it back meanwhile; it keeps it in shared mode, so that the holder's own
/// acquisition running meanwhile does not mistake the taker for its own session and
/// record a marker that is free the moment the takeover commits. PostgreSQL only (a
/// MariaDB takeover holds the row, not the name). The takeover is slowed by a trigger
/// of the test's own so that the holder's acquisition runs inside it every time;
/// before, that lease recorded the marker and a third owner took it right after.
#[tokio::test]
async fn a_takeover_in_progress_is_not_mistaken_for_the_holders_marker() -> anyhow::Result<()> {
    const NAME: &str = "sqlock_p_taking";
    for b in common::backends_of("presence_taking", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let table = b.quoted();
        b.script(
            &admin,
            &format!(
                "CREATE OR REPLACE FUNCTION sqlock_test_slow_takeover() RETURNS trigger \
                 LANGUAGE plpgsql AS $$ BEGIN \
                 IF NEW.lock_key = 'first' AND NEW.lock_owner <> OLD.lock_owner THEN \
                 PERFORM pg_sleep(2); END IF; RETURN NEW; END $$; \
                 CREATE TRIGGER sqlock_test_slow AFTER UPDATE ON {table} \
                 FOR EACH ROW EXECUTE FUNCTION sqlock_test_slow_takeover()"
            ),
        )
        .await?;
        let pool = own_pool(&b, &admin, NAME, "").await?;
        let holder = Locker::builder(pool.clone())
            .table(&b.table)
            .presence(true)
            .ttl(Duration::from_secs(60))
            .build()?;
        let first = holder.acquire("first").await?;
        let m = support::recorded(&b, &admin, "first")
            .await?
            .context("the lease records no marker")?;
        let support::Marker::Postgres { key, .. } = m.clone() else {
            anyhow::bail!("not a PostgreSQL marker: {m:?}");
        };
        let (h, w) = support::watched(&b, &admin, &m, Who::Anyone).await?;
        warm(&pool).await?;
        logins(&b, &admin, NAME, false).await?;
        let outcome = async {
            support::end(&b, &admin, w).await?;
            support::end(&b, &admin, h).await?;
            assert!(
                common::eventually(|| async {
                    Ok(support::sessions(&b, &admin, &m, Who::Anyone)
                        .await?
                        .0
                        .is_none())
                })
                .await?,
                "the marker is still held"
            );
            // The takeover, held open by the trigger with the marker taken.
            let taker = b.builder().await?.build()?;
            let taking = tokio::spawn(async move {
                let guard = taker.try_acquire("first").await?;
                Ok::<_, sqlock::Error>((taker, guard))
            });
            let held = format!(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                 AND classid = 1936813168 AND objid = {key} AND objsubid = 2 AND granted"
            );
            assert!(
                common::eventually(|| async { Ok(b.scalar(&admin, &held).await? > 0) }).await?,
                "the takeover never took the marker"
            );
            // The holder's acquisition meanwhile, on its pool's open connection.
            let second = holder
                .try_acquire("second")
                .await?
                .context("the second key was not granted")?;
            assert!(
                !taking.is_finished(),
                "the takeover ended before the holder's acquisition: the test proves nothing"
            );
            let (taker, taken) = taking.await??;
            let taken = taken.context("the dead marker's lease was not taken")?;
            assert_eq!(
                support::recorded(&b, &admin, "second").await?,
                None,
                "a lease recorded the marker a takeover held"
            );
            assert!(
                taker.try_acquire("second").await?.is_none(),
                "the holder's second lease was taken"
            );
            assert!(taken.release().await?);
            Ok::<_, anyhow::Error>(second)
        }
        .await;
        logins(&b, &admin, NAME, true).await?;
        b.script(&admin, &format!("DROP TRIGGER sqlock_test_slow ON {table}"))
            .await?;
        let second = outcome?;
        assert!(second.release().await?);
        assert!(!first.release().await?, "the taken lease released");
    }
    Ok(())
}

/// A multi-lock records the marker on each of its keys as a lease does, only while a
/// session holds it, and its keys are checked as leases are: with both of the handle's
/// presence connections gone (and no way to open another), a multi-lock granted then
/// records no marker, another owner takes the earlier multi-lock's keys at once, by a
/// single acquisition and by a multi-lock of its own, and the holder's `lost()` fires.
#[tokio::test]
async fn a_multi_lock_records_and_loses_its_marker_as_a_lease_does() -> anyhow::Result<()> {
    const NAME: &str = "sqlock_p_multi";
    for b in common::servers("presence_multi").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let pool = own_pool(&b, &admin, NAME, "").await?;
        let holder = Locker::builder(pool.clone())
            .table(&b.table)
            .presence(true)
            .ttl(Duration::from_secs(60))
            .build()?;
        let first = holder
            .lock_many(&["m-a", "m-b"])
            .try_acquire()
            .await?
            .with_context(|| format!("{}: the first multi-lock", b.dialect))?;
        let m = support::recorded(&b, &admin, "m-a")
            .await?
            .with_context(|| format!("{}: the multi-lock records no marker", b.dialect))?;
        assert_eq!(support::recorded(&b, &admin, "m-b").await?, Some(m.clone()));
        let (h, w) = support::standby(&b, &admin, &m, who(&b, NAME)).await?;
        warm(&pool).await?;
        logins(&b, &admin, NAME, false).await?;
        let outcome = async {
            if let Some(w) = w {
                support::end(&b, &admin, w).await?;
            }
            support::end(&b, &admin, h).await?;
            assert!(
                common::eventually(|| async {
                    Ok(support::sessions(&b, &admin, &m, who(&b, NAME))
                        .await?
                        .0
                        .is_none())
                })
                .await?,
                "{}: the marker is still held",
                b.dialect
            );
            let second = holder
                .lock_many(&["m-c", "m-d"])
                .try_acquire()
                .await?
                .with_context(|| format!("{}: the second multi-lock", b.dialect))?;
            for key in ["m-c", "m-d"] {
                assert_eq!(
                    support::recorded(&b, &admin, key).await?,
                    None,
                    "{}: {key} recorded a marker no connection holds",
                    b.dialect
                );
            }
            let waiter = b.builder().await?.build()?;
            let single = waiter.try_acquire("m-a").await?;
            let single = single.with_context(|| format!("{}: m-a not taken", b.dialect))?;
            let multi = waiter.lock_many(&["m-b", "m-e"]).try_acquire().await?;
            let multi = multi.with_context(|| format!("{}: m-b not taken", b.dialect))?;
            assert!(
                waiter
                    .lock_many(&["m-c", "m-f"])
                    .try_acquire()
                    .await?
                    .is_none(),
                "{}: a multi-lock that recorded no marker was taken",
                b.dialect
            );
            let reason = tokio::time::timeout(Duration::from_secs(5), first.lost().wait())
                .await
                .with_context(|| format!("{}: no loss signalled within 5 s", b.dialect))?;
            assert_eq!(reason, LostReason::PresenceLost, "{}", b.dialect);
            assert!(!second.is_lost(), "{}", b.dialect);
            assert!(single.release().await?);
            assert!(multi.release().await?);
            assert!(w.is_some(), "{}: no standby waited", b.dialect);
            Ok::<_, anyhow::Error>(second)
        }
        .await;
        logins(&b, &admin, NAME, true).await?;
        assert!(outcome?.release().await?);
        assert!(!first.release().await?, "{}", b.dialect);
    }
    Ok(())
}

/// A read of a read-write lock records the handle's marker too: SIGKILLed readers are
/// shown gone, and a writer waiting for the name drops their reads at once (two of
/// them, in one transaction), long before their TTL, while a live reader's read stays
/// and keeps the writer out: the name counts that read alone, so the writer gets the
/// name as soon as the live reader releases, with a token above the dead reads', which
/// the fence then refuses.
#[tokio::test]
async fn killed_readers_reads_are_dropped_for_the_writer_at_once() -> anyhow::Result<()> {
    for b in common::backends("presence_read").await {
        b.fresh_table().await?;
        for waiter_presence in [true, false] {
            let name = format!("rw-{waiter_presence}");
            let ttl = Duration::from_secs(60);
            let mut dead = Vec::new();
            for _ in 0..2 {
                let (spawned, token, owner, mut said) =
                    spawn_holder_in(&b, &name, ttl, true, None, "read").await?;
                tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });
                dead.push((spawned, token, owner));
            }
            let live = b.builder().await?.ttl(ttl).build()?;
            let live_read = live.read_lock(&name).try_acquire().await?;
            let live_read = live_read.context("the live reader's read")?;
            let waiter = b
                .builder()
                .await?
                .presence(waiter_presence)
                .ttl(ttl)
                .build()?;
            assert!(
                waiter.write_lock(&name).try_acquire().await?.is_none(),
                "{}: live readers' name was written",
                b.dialect
            );
            let readers = |w: &Locker| {
                let (w, name) = (w.clone(), name.clone());
                async move {
                    let all = w.rwlocks().await?;
                    let rw = all.into_iter().find(|rw| rw.name == name);
                    Ok::<_, anyhow::Error>(rw.map(|rw| rw.readers).unwrap_or_default())
                }
            };
            let before = readers(&waiter).await?;
            assert_eq!(before.len(), 3, "{}: the readers", b.dialect);
            assert!(
                before.iter().all(|r| !r.holder_gone),
                "{}: a live reader shown gone",
                b.dialect
            );
            if b.dialect != Dialect::Sqlite {
                let admin = b.pool().await?;
                for (spawned, _, owner) in &dead {
                    let read = format!("{name}@read:{owner}");
                    let m = support::recorded(&b, &admin, &read)
                        .await?
                        .context("the read records no marker")?;
                    let pid = spawned.id().context("the reader has exited")?;
                    support::watched(&b, &admin, &m, Who::Process(pid)).await?;
                }
            }
            for (spawned, _, _) in &dead {
                signal(spawned, Signal::SIGKILL)?;
            }
            let killed = Instant::now();
            for (spawned, _, _) in &mut dead {
                spawned.wait().await?;
            }
            loop {
                let now = readers(&waiter).await?;
                if now.iter().filter(|r| r.holder_gone).count() == 2 {
                    break;
                }
                assert!(
                    killed.elapsed() < DEADLINE,
                    "{}: never shown gone",
                    b.dialect
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            // The writer's tries drop the dead reads, and stay busy: a live read holds.
            loop {
                let tried = waiter.write_lock(&name).try_acquire().await?;
                assert!(tried.is_none(), "{}: written beside a live read", b.dialect);
                let now = readers(&waiter).await?;
                if now.len() == 1 {
                    assert_eq!(now[0].owner, live.owner().to_string(), "{}", b.dialect);
                    break;
                }
                assert!(killed.elapsed() < DEADLINE, "{}: never dropped", b.dialect);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            assert!(live_read.release().await?);
            let guard = loop {
                if let Some(g) = waiter.write_lock(&name).try_acquire().await? {
                    break g;
                }
                assert!(killed.elapsed() < DEADLINE, "{}: never written", b.dialect);
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            eprintln!(
                "{} (waiter presence {waiter_presence}): two SIGKILLed readers' reads dropped \
                 and the name written {:?} after the kill (TTL {ttl:?})",
                b.dialect,
                killed.elapsed()
            );
            let after = info(&waiter, &name).await?;
            let first_expiry = before.iter().map(|r| r.expires_at).min().unwrap();
            assert!(
                after.acquired_at < first_expiry,
                "{}: written at {} only, after the dead reads' expiry {first_expiry}",
                b.dialect,
                after.acquired_at,
            );
            assert_eq!(after.owner, waiter.owner().to_string(), "{}", b.dialect);
            for (_, token, owner) in &dead {
                let read = format!("{name}@read:{owner}");
                assert!(guard.fencing_token() > *token, "{}: tokens rise", b.dialect);
                assert!(
                    !fence_passes(&b, &waiter, &read, owner, *token).await?,
                    "{}: a dead reader's token still passes the fence",
                    b.dialect
                );
            }
            assert!(
                readers(&waiter).await?.is_empty(),
                "{}: a read is listed",
                b.dialect
            );
            assert!(guard.release().await?);
        }
    }
    Ok(())
}

/// A permit records the handle's marker as a lease does, only while a session holds
/// it, and is lost as a lease is: with both presence connections ended, a permit taken
/// meanwhile records nothing and stays its holder's, while the one that recorded the
/// marker is taken by another handle and its holder told `PresenceLost`.
#[tokio::test]
async fn a_permit_records_and_loses_its_marker_as_a_lease_does() -> anyhow::Result<()> {
    const NAME: &str = "sqlock_p_permit";
    for b in common::servers("presence_permit_marker").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let pool = own_pool(&b, &admin, NAME, "").await?;
        let holder = Locker::builder(pool.clone())
            .table(&b.table)
            .presence(true)
            .ttl(Duration::from_secs(60))
            .build()?;
        let semaphore = holder.semaphore("p-sem", 2);
        let first = semaphore
            .try_acquire()
            .await?
            .with_context(|| format!("{}: the first permit", b.dialect))?;
        let m = support::recorded(&b, &admin, "semaphore:p-sem#0")
            .await?
            .with_context(|| format!("{}: the permit records no marker", b.dialect))?;
        let (h, w) = support::standby(&b, &admin, &m, who(&b, NAME)).await?;
        warm(&pool).await?;
        logins(&b, &admin, NAME, false).await?;
        let outcome = async {
            if let Some(w) = w {
                support::end(&b, &admin, w).await?;
            }
            support::end(&b, &admin, h).await?;
            assert!(
                common::eventually(|| async {
                    Ok(support::sessions(&b, &admin, &m, who(&b, NAME))
                        .await?
                        .0
                        .is_none())
                })
                .await?,
                "{}: the marker is still held",
                b.dialect
            );
            let second = semaphore
                .try_acquire()
                .await?
                .with_context(|| format!("{}: the second permit", b.dialect))?;
            assert_eq!(
                support::recorded(&b, &admin, "semaphore:p-sem#1").await?,
                None,
                "{}: a permit recorded a marker no connection holds",
                b.dialect
            );
            let waiter = b.builder().await?.build()?;
            let theirs = waiter.semaphore("p-sem", 2);
            let taken = theirs.try_acquire().await?;
            let taken = taken.with_context(|| format!("{}: slot 0 not taken", b.dialect))?;
            assert_eq!(taken.keys().collect::<Vec<_>>(), ["semaphore:p-sem#0"]);
            assert!(
                theirs.try_acquire().await?.is_none(),
                "{}: a permit that recorded no marker was taken",
                b.dialect
            );
            let reason = tokio::time::timeout(Duration::from_secs(5), first.lost().wait())
                .await
                .with_context(|| format!("{}: no loss signalled within 5 s", b.dialect))?;
            assert_eq!(reason, LostReason::PresenceLost, "{}", b.dialect);
            assert!(!second.is_lost(), "{}", b.dialect);
            assert!(taken.release().await?);
            assert!(w.is_some(), "{}: no standby waited", b.dialect);
            Ok::<_, anyhow::Error>(second)
        }
        .await;
        logins(&b, &admin, NAME, true).await?;
        assert!(outcome?.release().await?);
        assert!(!first.release().await?, "{}", b.dialect);
    }
    Ok(())
}

/// A read records the handle's marker as a lease does, only while a session holds it,
/// and is lost as a lease is: with both presence connections ended, a read taken
/// meanwhile records nothing and stays its holder's, while the one that recorded the
/// marker is dropped by a writer and its holder told `PresenceLost`.
#[tokio::test]
async fn a_read_records_and_loses_its_marker_as_a_lease_does() -> anyhow::Result<()> {
    const NAME: &str = "sqlock_p_read";
    for b in common::servers("presence_read_marker").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let pool = own_pool(&b, &admin, NAME, "").await?;
        let holder = Locker::builder(pool.clone())
            .table(&b.table)
            .presence(true)
            .ttl(Duration::from_secs(60))
            .build()?;
        let owner = holder.owner().to_string();
        let first = holder
            .read_lock("r-a")
            .try_acquire()
            .await?
            .with_context(|| format!("{}: the first read", b.dialect))?;
        let m = support::recorded(&b, &admin, &format!("r-a@read:{owner}"))
            .await?
            .with_context(|| format!("{}: the read records no marker", b.dialect))?;
        let (h, w) = support::standby(&b, &admin, &m, who(&b, NAME)).await?;
        warm(&pool).await?;
        logins(&b, &admin, NAME, false).await?;
        let outcome = async {
            if let Some(w) = w {
                support::end(&b, &admin, w).await?;
            }
            support::end(&b, &admin, h).await?;
            assert!(
                common::eventually(|| async {
                    Ok(support::sessions(&b, &admin, &m, who(&b, NAME))
                        .await?
                        .0
                        .is_none())
                })
                .await?,
                "{}: the marker is still held",
                b.dialect
            );
            let second = holder
                .read_lock("r-b")
                .try_acquire()
                .await?
                .with_context(|| format!("{}: the second read", b.dialect))?;
            assert_eq!(
                support::recorded(&b, &admin, &format!("r-b@read:{owner}")).await?,
                None,
                "{}: a read recorded a marker no connection holds",
                b.dialect
            );
            let waiter = b.builder().await?.build()?;
            let taken = waiter.write_lock("r-a").try_acquire().await?;
            let taken = taken.with_context(|| format!("{}: r-a not written", b.dialect))?;
            assert!(
                waiter.write_lock("r-b").try_acquire().await?.is_none(),
                "{}: a read that recorded no marker was dropped",
                b.dialect
            );
            let reason = tokio::time::timeout(Duration::from_secs(5), first.lost().wait())
                .await
                .with_context(|| format!("{}: no loss signalled within 5 s", b.dialect))?;
            assert_eq!(reason, LostReason::PresenceLost, "{}", b.dialect);
            assert!(!second.is_lost(), "{}", b.dialect);
            assert!(taken.release().await?);
            assert!(w.is_some(), "{}: no standby waited", b.dialect);
            Ok::<_, anyhow::Error>(second)
        }
        .await;
        logins(&b, &admin, NAME, true).await?;
        assert!(outcome?.release().await?);
        assert!(!first.release().await?, "{}", b.dialect);
    }
    Ok(())
}

/// A fair grant records the handle's marker as a lease does, only while a session
/// holds it, and is lost as a lease is: with both presence connections ended, a fair
/// grant taken meanwhile records nothing and stays its holder's, while the one that
/// recorded the marker goes to the next fair acquirer and its holder is told
/// `PresenceLost`.
#[tokio::test]
async fn a_fair_grant_records_and_loses_its_marker_as_a_lease_does() -> anyhow::Result<()> {
    const NAME: &str = "sqlock_p_fair";
    for b in common::servers("presence_fair_marker").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let pool = own_pool(&b, &admin, NAME, "").await?;
        let holder = Locker::builder(pool.clone())
            .table(&b.table)
            .strategy(Strategy::Fair)
            .presence(true)
            .ttl(Duration::from_secs(60))
            .build()?;
        let first = holder
            .try_acquire("f-a")
            .await?
            .with_context(|| format!("{}: the first fair grant", b.dialect))?;
        let m = support::recorded(&b, &admin, "f-a")
            .await?
            .with_context(|| format!("{}: the fair grant records no marker", b.dialect))?;
        let (h, w) = support::standby(&b, &admin, &m, who(&b, NAME)).await?;
        warm(&pool).await?;
        logins(&b, &admin, NAME, false).await?;
        let outcome = async {
            if let Some(w) = w {
                support::end(&b, &admin, w).await?;
            }
            support::end(&b, &admin, h).await?;
            assert!(
                common::eventually(|| async {
                    Ok(support::sessions(&b, &admin, &m, who(&b, NAME))
                        .await?
                        .0
                        .is_none())
                })
                .await?,
                "{}: the marker is still held",
                b.dialect
            );
            let second = holder
                .try_acquire("f-b")
                .await?
                .with_context(|| format!("{}: the second fair grant", b.dialect))?;
            assert_eq!(
                support::recorded(&b, &admin, "f-b").await?,
                None,
                "{}: a fair grant recorded a marker no connection holds",
                b.dialect
            );
            let waiter = fair_locker(&b, true, Duration::from_secs(60)).await?;
            // The sessions are gone from the server's list; MariaDB may let go of
            // their named locks a moment later, so the take is tried until it is
            // granted (a bound for liveness, far below the 60 s TTL that a take
            // through the lease's expiry would need).
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let taken = loop {
                if let Some(g) = waiter.try_acquire("f-a").await? {
                    break g;
                }
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "{}: f-a not taken",
                    b.dialect
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert!(
                taken.fencing_token() > first.fencing_token(),
                "{}: the token did not rise",
                b.dialect
            );
            assert!(
                waiter.try_acquire("f-b").await?.is_none(),
                "{}: a fair grant that recorded no marker was taken",
                b.dialect
            );
            let reason = tokio::time::timeout(Duration::from_secs(5), first.lost().wait())
                .await
                .with_context(|| format!("{}: no loss signalled within 5 s", b.dialect))?;
            assert_eq!(reason, LostReason::PresenceLost, "{}", b.dialect);
            assert!(!second.is_lost(), "{}", b.dialect);
            assert!(taken.release().await?);
            assert!(w.is_some(), "{}: no standby waited", b.dialect);
            Ok::<_, anyhow::Error>(second)
        }
        .await;
        logins(&b, &admin, NAME, true).await?;
        assert!(outcome?.release().await?);
        assert!(!first.release().await?, "{}", b.dialect);
    }
    Ok(())
}

/// An idle timeout shorter than a third of the TTL (PostgreSQL's
/// `idle_session_timeout`, set for a role of the test's own) ends the holder's idle
/// pooled connections, as it should, but not its presence connections: the marker
/// stays with the same session, nobody takes the lease, and no loss is signalled, over
/// four timeouts. MariaDB's `wait_timeout` is tested on the fault instance
/// (`tests/presence_faults.rs`): a test cannot set it for a user.
#[tokio::test]
async fn an_idle_timeout_does_not_end_presence() -> anyhow::Result<()> {
    const NAME: &str = "sqlock_p_idle";
    for b in common::backends_of("presence_idle", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let setup = format!("ALTER ROLE {NAME} SET idle_session_timeout = '1s'");
        let pool = own_pool(&b, &admin, NAME, &setup).await?;
        let task = (b.clone(), admin.clone());
        // A task of its own, so that the role is reset whatever it does, a failed
        // assertion included.
        let outcome = tokio::spawn(async move {
            let (b, admin) = task;
            // The timeout takes effect: an idle session of the role is ended.
            let DbPool::Postgres(p) = &pool else {
                anyhow::bail!("not a PostgreSQL pool")
            };
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(p)
                .await?;
            assert!(
                common::eventually(|| async {
                    Ok(!support::alive(&b, &admin, i64::from(pid)).await?)
                })
                .await?,
                "idle_session_timeout never ended an idle session"
            );
            let holder = Locker::builder(pool.clone())
                .table(&b.table)
                .presence(true)
                .ttl(Duration::from_secs(9))
                .build()?;
            let guard = holder.acquire("idle").await?;
            let m = support::recorded(&b, &admin, "idle")
                .await?
                .context("the lease records no marker")?;
            let (h, _) = support::sessions(&b, &admin, &m, Who::Anyone).await?;
            let h = h.context("nobody holds the marker")?;
            let waiter = b.builder().await?.build()?;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(4) {
                assert!(
                    waiter.try_acquire("idle").await?.is_none(),
                    "taken {:?} after the grant, while its holder ran",
                    started.elapsed()
                );
                assert!(!guard.is_lost(), "a loss was signalled");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let (_, w) = support::standby(&b, &admin, &m, Who::Anyone).await?;
            let w = w.context("no standby waited")?;
            assert_eq!(
                support::sessions(&b, &admin, &m, Who::Anyone).await?,
                (Some(h), vec![w]),
                "the presence connections changed"
            );
            assert!(guard.release().await?);
            Ok::<_, anyhow::Error>(())
        })
        .await;
        b.script(
            &admin,
            &format!("ALTER ROLE {NAME} RESET idle_session_timeout"),
        )
        .await?;
        match outcome {
            Ok(result) => result?,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    Ok(())
}

#[tokio::test]
async fn presence_is_refused_where_it_cannot_work() -> anyhow::Result<()> {
    let memory = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await?;
    let refused = Locker::builder(memory.clone()).presence(true).build();
    assert!(
        matches!(refused, Err(Error::PresenceUnavailable { .. })),
        "{refused:?}"
    );
    let plain = Locker::new(memory)?;
    assert!(matches!(
        plain.check_presence().await,
        Err(Error::PresenceUnavailable { .. })
    ));
    for b in common::backends("presence_refused").await {
        let locker = b.locker().await?;
        locker.check_presence().await?;
        if b.dialect == Dialect::Postgres {
            let pooled = b
                .builder()
                .await?
                .transaction_pooling(true)
                .presence(true)
                .build();
            assert!(
                matches!(pooled, Err(Error::PresenceUnavailable { .. })),
                "{pooled:?}"
            );
            let probe = b.builder().await?.transaction_pooling(true).build()?;
            assert!(probe.check_presence().await.is_err());
        }
    }
    Ok(())
}

/// The marker file of a killed SQLite holder is swept once no lease of its owner can
/// be taken over any more, never while one can, and a live handle's never.
#[tokio::test]
async fn the_sweep_removes_the_marker_files_of_gone_processes_when_unneeded() -> anyhow::Result<()>
{
    for b in common::backends_of("presence_files", &[Dialect::Sqlite]).await {
        let operator = b.fresh_table().await?;
        let live = b.builder().await?.presence(true).build()?;
        let mine = live
            .try_acquire("live-holder's")
            .await?
            .context("a free key")?;
        let ttl = Duration::from_secs(60);
        let (mut child, _, owner) = spawn_holder(&b, "files", ttl, true).await?;
        signal(&child, Signal::SIGKILL)?;
        child.wait().await?;
        let db = b.url().trim_start_matches("sqlite://");
        let dir = std::path::PathBuf::from(format!(
            "{}-sqlock-presence",
            std::fs::canonicalize(db)?.display()
        ));
        let dead = dir.join(&owner);
        let alive = dir.join(live.owner().to_string());
        assert!(
            dead.exists() && alive.exists(),
            "the markers are files in {dir:?}"
        );

        // The dead owner's lease is live: its marker is what lets it be taken at once.
        operator.sweep(sqlock::SweepOptions::new()).await?;
        assert!(
            dead.exists(),
            "a marker still needed for a takeover was swept"
        );
        let taken = operator
            .try_acquire("files")
            .await?
            .context("a dead holder's key")?;
        assert!(dead.exists());

        // Taken over: no lease of the dead owner is left, so its marker goes.
        operator.sweep(sqlock::SweepOptions::new()).await?;
        assert!(
            !dead.exists(),
            "a gone process's marker file was left behind"
        );
        assert!(alive.exists(), "a live handle's marker file was swept");
        assert!(live.try_acquire("another").await?.is_some());
        assert!(taken.release().await?);
        assert!(mine.release().await?);
    }
    Ok(())
}

/// A waiter's polls in [`a_waiter_waits_in_the_server_for_a_killed_holder`]: after a
/// busy answer it looks again 30 s to 60 s later.
#[cfg(feature = "metrics")]
const QUIET_POLL: Duration = Duration::from_secs(60);

/// How many sessions of this process wait for the marker `m` in the server (on
/// PostgreSQL, in the shared form: the holder's standby waits exclusively).
async fn waiting_here(
    b: &common::Backend,
    admin: &DbPool,
    m: &support::Marker,
) -> anyhow::Result<usize> {
    if let support::Marker::Postgres { key, .. } = m {
        let DbPool::Postgres(p) = admin else {
            anyhow::bail!("not a PostgreSQL pool");
        };
        let sql = format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1936813168 \
             AND objid = {key} AND objsubid = 2 AND mode = 'ShareLock' AND NOT granted"
        );
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(p)
            .await?;
        return Ok(usize::try_from(n)?);
    }
    let (_, waiters) = support::sessions(b, admin, m, Who::Process(std::process::id())).await?;
    Ok(waiters.len())
}

/// Waiting in the server (`LockerBuilder::server_waits`): a waiter that polls once a
/// minute, seen waiting (a lease waiter busy, a fair waiter queued first) and then
/// waiting in the server for a holder's marker, is granted the key within moments of
/// the holder's SIGKILL, long before its next poll, with a higher token. With server
/// waits off, the same waiter never waits in the server, and is still waiting after
/// the kill. For the lease and the fair lock; the servers (SQLite has no marker to
/// wait on).
#[cfg(feature = "metrics")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_waits_in_the_server_for_a_killed_holder() -> anyhow::Result<()> {
    use common::recorded::counter;
    /// Shorter than the waiter's first pause: only a wake-up can have it granted.
    const WITHIN: Duration = Duration::from_secs(20);
    for b in common::backends("presence_server_wait").await {
        if b.dialect == Dialect::Sqlite {
            continue;
        }
        b.fresh_table().await?;
        let busy_id = format!("sqlock_busy_total{{strategy=lease,table={}}}", b.table);
        for (strategy, what) in [(Strategy::Lease, "lock"), (Strategy::Fair, "fair")] {
            for waits in [2, 0] {
                let key = format!("server-wait-{strategy}-{waits}");
                let ttl = Duration::from_secs(300);
                let (mut child, token, _, mut said) =
                    spawn_holder_in(&b, &key, ttl, true, None, what).await?;
                tokio::spawn(async move { while let Ok(Some(_)) = said.next_line().await {} });
                let admin = b.pool().await?;
                let m = support::recorded(&b, &admin, &key)
                    .await?
                    .context("the lease records no marker")?;
                let pid = child.id().context("the holder has exited")?;
                support::watched(&b, &admin, &m, Who::Process(pid)).await?;
                let waiter = b
                    .builder()
                    .await?
                    .strategy(strategy)
                    .ttl(ttl)
                    .poll_interval(QUIET_POLL, QUIET_POLL)
                    .server_waits(waits)
                    .build()?;
                let before = counter(&busy_id);
                let waiting = tokio::spawn({
                    let key = key.clone();
                    let waiter = waiter.clone();
                    async move { waiter.acquire_timeout(&key, WITHIN).await }
                });
                let seen = match strategy {
                    Strategy::Fair => queued(&waiter, &key, 1).await?,
                    _ => common::eventually(|| async { Ok(counter(&busy_id) > before) }).await?,
                };
                anyhow::ensure!(
                    seen,
                    "{} {strategy} ({waits}): the waiter never waited",
                    b.dialect
                );
                if waits > 0 {
                    let in_server = common::eventually(|| async {
                        Ok(waiting_here(&b, &admin, &m).await? > 0)
                    })
                    .await?;
                    anyhow::ensure!(
                        in_server,
                        "{} {strategy}: the waiter never waited in the server for the marker",
                        b.dialect
                    );
                } else {
                    assert_eq!(
                        waiting_here(&b, &admin, &m).await?,
                        0,
                        "{} {strategy}: a waiter with server waits off waits in the server",
                        b.dialect
                    );
                }
                signal(&child, Signal::SIGKILL)?;
                let killed = Instant::now();
                child.wait().await?;
                if waits == 0 {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    assert!(
                        !waiting.is_finished(),
                        "{} {strategy}: a polling waiter was granted before its next poll",
                        b.dialect
                    );
                    waiting.abort();
                    continue;
                }
                let guard = waiting.await?.map_err(|e| {
                    anyhow::anyhow!(
                        "{} {strategy}: not granted at the holder's kill: {e}",
                        b.dialect
                    )
                })?;
                eprintln!(
                    "{} {strategy}: a killed holder's key granted to a waiter in the server \
                     {:?} after the kill",
                    b.dialect,
                    killed.elapsed()
                );
                assert!(
                    guard.fencing_token() > token,
                    "{} {strategy}: tokens rise",
                    b.dialect
                );
                assert!(guard.release().await?);
            }
        }
    }
    Ok(())
}
