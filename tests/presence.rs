//! Presence (`LockerBuilder::presence`): a holder process that dies frees its leases at
//! once, by the marker its session held; one that is paused keeps them until their
//! TTL; one without presence is never taken over; a holder whose presence session alone
//! ended learns it by `lost()` with `PresenceLost`. On every backend: a SQLite file,
//! PostgreSQL and MariaDB.
//!
//! The holders are processes of this very test binary, started with
//! `SQLOCK_PRESENCE_HOLDER` set, running `holder_process` alone: it takes the key and
//! waits to be stopped or killed.

mod common;

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::{Dialect, Error, LockInfo, Locker, LostReason};
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
    let [dialect, table, key, ttl_ms, presence] = parts[..] else {
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
    let locker = b
        .builder()
        .await?
        .presence(presence == "1")
        .ttl(Duration::from_millis(ttl_ms.parse()?))
        .build()?;
    let guard = locker.acquire(key).await?;
    println!("HELD {} {}", guard.fencing_token(), locker.owner());
    let mut lost = guard.lost();
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
    let (child, token, owner, _) = spawn_holder_in(b, key, ttl, presence, None).await?;
    Ok((child, token, owner))
}

/// What a holder process prints, line by line.
type Said = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// [`spawn_holder`], in `cgroup` when given; also returns what it says after holding.
async fn spawn_holder_in(
    b: &common::Backend,
    key: &str,
    ttl: Duration,
    presence: bool,
    cgroup: Option<&std::path::Path>,
) -> anyhow::Result<(Child, i64, String, Said)> {
    let dialect = match b.dialect {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        _ => "sqlite",
    };
    let spec = format!(
        "{dialect}|{}|{key}|{}|{}",
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
    let mut lines = BufReader::new(stdout).lines();
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
        assert!(info(&waiter, key).await?.expires_in > Duration::from_secs(30));
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
            spawn_holder_in(&b, "cut", ttl, true, Some(&cgroup)).await?;
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

#[tokio::test]
async fn a_lost_presence_session_is_signalled() -> anyhow::Result<()> {
    for b in common::servers("presence_session").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let name = "presence_kill";
        let pool = common::kill::pool(
            &b,
            common::kill::Killable {
                name,
                max_connections: 4,
                ping: false,
                idle_timeout_s: None,
            },
        )
        .await?;
        let holder = Locker::builder(pool)
            .table(&b.table)
            .presence(true)
            .ttl(Duration::from_secs(3))
            .build()?;
        let guard = holder.acquire("session").await?;
        let waiter = b.builder().await?.build()?;
        assert!(waiter.try_acquire("session").await?.is_none());
        let killed = common::kill::kill(&b, &admin, name).await?;
        assert!(
            killed >= 2,
            "{}: the pool's and the presence connection",
            b.dialect
        );
        let mut lost = guard.lost();
        let reason = tokio::time::timeout(DEADLINE, lost.wait()).await?;
        assert_eq!(reason, LostReason::PresenceLost, "{}", b.dialect);
        // Its marker is free: another owner may take the key before the TTL.
        let next = waiter.try_acquire("session").await?;
        let next = next.with_context(|| format!("{}: not taken over", b.dialect))?;
        assert!(next.fencing_token() > guard.fencing_token());
        // The holder's pooled connections were killed too: each fails one statement.
        for _ in 0..8 {
            if holder.lock_info("session").await.is_ok() {
                break;
            }
        }
        assert!(
            !guard.release().await?,
            "{}: the old lease released",
            b.dialect
        );
        // The handle takes a new marker for its next lease.
        assert!(next.release().await?);
        let again = holder.acquire("session").await?;
        assert!(waiter.try_acquire("session").await?.is_none());
        assert!(again.release().await?);
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
