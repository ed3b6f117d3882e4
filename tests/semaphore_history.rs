//! A semaphore under contention from processes of its own, with a holder killed
//! (SIGKILL) and one paused past its TTL (SIGSTOP), checked against the model of N
//! permits (`common/permits.rs`): never more than N held at once, nor a slot twice,
//! and tokens rise per slot. The killed holder's permit comes back, and not before
//! its expiry on the database clock: right after the kill the test reads its row
//! (still its own: the churners wait for the test's word before they start) and its
//! final expiry; every later grant of its slot, the churners' and the test's, must be
//! at or after it on that clock, and the model is told it. The paused holder is still
//! stopped when its permit is taken, and its release afterwards says it had lost it
//! and frees nobody else's. On every backend: a SQLite file, PostgreSQL and MariaDB.
//!
//! The workers are this very test binary, started with `SQLOCK_SEM_WORKER` set,
//! running `worker_process` alone: a churner waits for a line on its stdin, then takes
//! one or two permits at a time and gives them back, a victim takes one permit and
//! waits for a line to release it. Each prints its events as `history.rs` lines, and
//! after each grant its time on the database clock (`GRANTED_AT`).
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use common::history::{now, DbClock, Event, GrantedAt, Kind};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::{Dialect, Locker, SemaphoreGuard};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// What a worker is told: `dialect|table|name|n|ttl_ms|mode|rounds`.
const WORKER: &str = "SQLOCK_SEM_WORKER";

/// The semaphore's name, N, and its permits' TTL.
const NAME: &str = "history";
const N: u32 = 3;
const TTL: Duration = Duration::from_millis(1500);

/// How long any wait of these tests may take before it counts as a failure.
const DEADLINE: Duration = Duration::from_secs(90);

fn dialect_name(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        _ => "sqlite",
    }
}

/// A grant's time on the database clock (µs): its permits' expiry as the grant
/// reported it (the grant's statement's time plus the TTL; a guard's expiry changes
/// only with an explicit extend, never called here), less the TTL. The test checks it
/// against the table's `acquired_at` for the killed holder.
fn granted_at(g: &SemaphoreGuard) -> i64 {
    g.expires_at().timestamp_micros() - i64::try_from(TTL.as_micros()).unwrap_or(i64::MAX)
}

/// The `GRANTED_AT key owner token µs` lines of a grant, one per permit.
fn granted_at_lines(g: &SemaphoreGuard, owner: &str) -> Vec<String> {
    let at = granted_at(g);
    g.tokens()
        .map(|(key, token)| GrantedAt::line(key, owner, token, at))
        .collect()
}

/// The events of a guard's grant (or release), one per permit.
fn events(kind: Kind, g: &SemaphoreGuard, owner: &str, sent: u64, ack: u64) -> Vec<Event> {
    g.tokens()
        .map(|(key, token)| Event {
            kind: kind.clone(),
            key: key.to_owned(),
            owner: owner.to_owned(),
            token,
            sent,
            ack,
        })
        .collect()
}

/// Releases `g`, with the events of its permits' release.
async fn release(g: SemaphoreGuard, owner: &str) -> anyhow::Result<(bool, Vec<Event>)> {
    let (keys, tokens) = (
        g.keys().map(str::to_owned).collect::<Vec<_>>(),
        g.tokens().map(|(_, t)| t).collect::<Vec<_>>(),
    );
    let sent = now();
    let held = g.release().await?;
    let ack = now();
    let kind = if held {
        Kind::Release
    } else {
        Kind::ReleaseRefused
    };
    let events = keys
        .into_iter()
        .zip(tokens)
        .map(|(key, token)| Event {
            kind: kind.clone(),
            key,
            owner: owner.to_owned(),
            token,
            sent,
            ack,
        })
        .collect();
    Ok((held, events))
}

/// The worker: runs only in a process started by [`spawn`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(WORKER) else {
        return Ok(());
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dialect, table, name, n, ttl_ms, mode, rounds] = parts[..] else {
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
    let locker = b
        .builder()
        .await?
        .ttl(Duration::from_millis(ttl_ms.parse()?))
        .poll_interval(Duration::from_millis(2), Duration::from_millis(20))
        .build()?;
    let owner = locker.owner().to_string();
    let sem = locker
        .semaphore(name, n.parse()?)
        .ttl(Duration::from_millis(ttl_ms.parse()?));
    let print = |events: Vec<Event>| {
        for e in events {
            println!("{}", e.line());
        }
    };
    if mode == "victim" {
        let sent = now();
        let g = sem.acquire_timeout(DEADLINE).await?;
        print(events(Kind::Grant, &g, &owner, sent, now()));
        for l in granted_at_lines(&g, &owner) {
            println!("{l}");
        }
        println!("HELD {}", g.keys().next().unwrap_or_default());
        let mut line = String::new();
        BufReader::new(tokio::io::stdin())
            .read_line(&mut line)
            .await?;
        let (held, released) = release(g, &owner).await?;
        print(released);
        println!("RELEASED {held}");
        return Ok(());
    }
    // A churner: once told to start, one or two permits at a time, held for a moment.
    println!("READY");
    let mut go = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut go)
        .await?;
    let mut seed = u64::from(std::process::id());
    for _ in 0..rounds.parse::<u32>()? {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = 1 + u32::try_from((seed >> 33) % 2)?;
        let sent = now();
        let g = sem.acquire_many_timeout(k, DEADLINE).await?;
        anyhow::ensure!(g.permits() == k, "{} permits of {k}", g.permits());
        print(events(Kind::Grant, &g, &owner, sent, now()));
        for l in granted_at_lines(&g, &owner) {
            println!("{l}");
        }
        tokio::time::sleep(Duration::from_millis((seed >> 40) % 15)).await;
        print(release(g, &owner).await?.1);
    }
    println!("DONE");
    Ok(())
}

/// A worker process, with its output's lines.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<String>,
}

/// What the workers and the test saw: the events, and the grants' database times.
#[derive(Debug, Default)]
struct Seen {
    events: Vec<Event>,
    granted_at: Vec<GrantedAt>,
}

impl Seen {
    /// Keeps `line` if it is an event or a grant's time; says whether it was.
    fn keep(&mut self, line: &str) -> bool {
        // The test harness prints the test's name with no line break after it, so the
        // worker's first line may follow it.
        if let Some(e) = line.find("EVENT ").and_then(|at| Event::parse(&line[at..])) {
            self.events.push(e);
        } else if let Some(g) = GrantedAt::parse(line) {
            self.granted_at.push(g);
        } else {
            return false;
        }
        true
    }
}

impl Worker {
    /// The next line starting with `prefix`; the events and grant times before it go to
    /// `seen`.
    async fn until(&mut self, prefix: &str, seen: &mut Seen) -> anyhow::Result<String> {
        let wait = async {
            while let Some(line) = self.lines.recv().await {
                if seen.keep(&line) {
                    continue;
                } else if let Some(at) = line.find(prefix) {
                    return Ok(line[at..].to_owned());
                }
            }
            anyhow::bail!("the worker ended before saying {prefix}")
        };
        tokio::time::timeout(DEADLINE, wait).await?
    }

    fn pid(&self) -> anyhow::Result<Pid> {
        let id = self.child.id().context("a running worker")?;
        Ok(Pid::from_raw(i32::try_from(id)?))
    }
}

async fn spawn(b: &common::Backend, mode: &str, rounds: u32) -> anyhow::Result<Worker> {
    let spec = format!(
        "{}|{}|{NAME}|{N}|{}|{mode}|{rounds}",
        dialect_name(b.dialect),
        b.table,
        TTL.as_millis()
    );
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "worker_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER, spec)
        .env("SQLOCK_TEST_PARENT_PID", std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdin = child.stdin.take().context("the worker's stdin")?;
    let stdout = child.stdout.take().context("the worker's stdout")?;
    let (tx, lines) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(Worker {
        child,
        stdin,
        lines,
    })
}

/// Whether process `pid` is stopped (by SIGSTOP): its state in `/proc`.
fn stopped(pid: Pid) -> anyhow::Result<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The state follows the command's name, which is in parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .context("a process state")?;
    Ok(state == "T" || state == "t")
}

/// Waits, up to [`DEADLINE`], until the signal that stops `pid` has been delivered.
async fn until_stopped(pid: Pid) -> anyhow::Result<bool> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::time::Instant::now() < deadline {
        if stopped(pid)? {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(false)
}

/// Takes permits one at a time until it holds the one on `slot`, then gives back the
/// others: its guard, with the events and database times of every grant and release
/// on the way. The others are kept meanwhile, so each grant is of a slot not tried
/// yet (a holder is never granted a slot it holds): the wanted one comes within N
/// grants once it is free, whether others take and give back permits meanwhile or not.
async fn take_slot(locker: &Locker, slot: &str, seen: &mut Seen) -> anyhow::Result<SemaphoreGuard> {
    let owner = locker.owner().to_string();
    let sem = locker.semaphore(NAME, N).ttl(TTL);
    let take = async {
        let mut others = Vec::new();
        let wanted = loop {
            let sent = now();
            let g = sem.acquire().await?;
            seen.events
                .extend(self::events(Kind::Grant, &g, &owner, sent, now()));
            for l in granted_at_lines(&g, &owner) {
                seen.keep(&l);
            }
            if g.keys().eq([slot]) {
                break g;
            }
            anyhow::ensure!(
                others.len() + 1 < N as usize,
                "{} other permits taken on the way to {slot}",
                others.len() + 1
            );
            others.push(g);
        };
        for g in others {
            seen.events.extend(release(g, &owner).await?.1);
        }
        anyhow::Ok(wanted)
    };
    tokio::time::timeout(DEADLINE, take).await?
}

#[test]
fn the_checker_finds_n_plus_one_a_slot_taken_twice_and_falling_tokens() {
    let ev = |kind, key: &str, owner: &str, token, sent, ack| Event {
        kind,
        key: key.into(),
        owner: owner.into(),
        token,
        sent,
        ack,
    };
    let ttl = Duration::from_secs(10);
    let ok = [
        ev(Kind::Grant, "s#0", "a", 1, 0, 10),
        ev(Kind::Grant, "s#1", "b", 2, 0, 10),
        ev(Kind::Release, "s#0", "a", 1, 20, 30),
        ev(Kind::Grant, "s#0", "c", 3, 25, 40),
    ];
    assert!(common::permits::check(&ok, 2, ttl).violations.is_empty());
    assert!(!common::permits::check(&ok[..2], 1, ttl)
        .violations
        .is_empty());
    let twice = [
        ev(Kind::Grant, "s#0", "a", 1, 0, 10),
        ev(Kind::Grant, "s#0", "b", 2, 11, 12),
    ];
    assert!(!common::permits::check(&twice, 5, ttl).violations.is_empty());
    let falling = [
        ev(Kind::Grant, "s#0", "a", 5, 0, 10),
        ev(Kind::Release, "s#0", "a", 5, 11, 12),
        ev(Kind::Grant, "s#0", "b", 4, 13, 14),
    ];
    assert!(!common::permits::check(&falling, 5, ttl)
        .violations
        .is_empty());
    // A killed holder renewed its permit until 30 s: its slot taken at 20 s, past its
    // grant's TTL, was taken twice; at 31 s it was not.
    let s = 1_000_000_000;
    let early = [
        ev(Kind::Grant, "s#0", "a", 1, 0, 10),
        ev(Kind::Expired, "s#0", "a", 1, 30 * s, 30 * s + 1),
        ev(Kind::Grant, "s#0", "b", 2, 19 * s, 20 * s),
    ];
    assert!(common::permits::check(&early[..1], 5, ttl)
        .violations
        .is_empty());
    assert!(
        common::permits::check(&[early[0].clone(), early[2].clone()], 5, ttl)
            .violations
            .is_empty()
    );
    assert!(!common::permits::check(&early, 5, ttl).violations.is_empty());
    let mut late = early.clone();
    late[2].ack = 31 * s;
    assert!(common::permits::check(&late, 5, ttl).violations.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_permits_hold_through_contention_kills_and_pauses() -> anyhow::Result<()> {
    if std::env::var(WORKER).is_ok() {
        return Ok(());
    }
    for b in common::backends("sem_history").await {
        let d = b.dialect;
        let locker = {
            let l = b.locker().await?;
            let drop = match d {
                Dialect::MySql => format!("DROP TABLE IF EXISTS `{}_semaphores`", b.table),
                _ => format!("DROP TABLE IF EXISTS \"{}_semaphores\"", b.table),
            };
            b.script(l.pool(), &drop).await?;
            b.fresh_table().await?;
            b.builder()
                .await?
                .ttl(TTL)
                .poll_interval(Duration::from_millis(2), Duration::from_millis(20))
                .build()?
        };
        let mut seen = Seen::default();
        let mut killed = spawn(&b, "victim", 0).await?;
        let killed_slot = killed.until("HELD ", &mut seen).await?[5..].to_owned();
        let killed_grant = seen
            .events
            .iter()
            .find(|e| e.kind == Kind::Grant && e.key == killed_slot)
            .cloned()
            .context("the killed holder's grant")?;
        let mut paused = spawn(&b, "victim", 0).await?;
        let paused_slot = paused.until("HELD ", &mut seen).await?[5..].to_owned();
        // The churners start, and wait for the word to go.
        let mut churners = Vec::new();
        for _ in 0..3 {
            let mut c = spawn(&b, "churn", 25).await?;
            c.until("READY", &mut seen).await?;
            churners.push(c);
        }

        // The paused holder stops renewing; the killed one is gone.
        kill(paused.pid()?, Signal::SIGSTOP)?;
        assert!(
            until_stopped(paused.pid()?).await?,
            "{d}: the holder was paused"
        );
        kill(killed.pid()?, Signal::SIGKILL)?;
        let status = killed.child.wait().await?;
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{d}: the holder was killed");
        while let Ok(line) = killed.lines.try_recv() {
            seen.keep(&line);
        }
        // Its permit's row now that nothing renews it: still its own (nobody else has
        // tried yet), with its final expiry on the database clock.
        let dead = common::history::dead_row(
            &b,
            locker.pool(),
            &killed_slot,
            &killed_grant.owner,
            killed_grant.token,
        )
        .await?;
        // The grant times the workers print are the table's: the killed holder's (printed
        // before it said HELD) is its row's acquired_at.
        let at = seen
            .granted_at
            .iter()
            .find(|g| g.key == killed_slot && g.owner == killed_grant.owner)
            .context("the killed holder's grant time")?;
        assert_eq!(
            at.db_us, dead.acquired_us,
            "{d}: a grant's database time as the workers print it is not the table's"
        );
        let clock = DbClock::read(&b, locker.pool()).await?;
        seen.events.push(clock.expired(&killed_slot, &dead));
        for c in &mut churners {
            c.stdin.write_all(b"GO\n").await?;
            c.stdin.flush().await?;
        }

        // The killed holder's permit comes back (not before its expiry: checked below,
        // with every other grant of its slot).
        let retaken = take_slot(&locker, &killed_slot, &mut seen).await?;
        let owner = locker.owner().to_string();
        let sem = locker.semaphore(NAME, N).ttl(TTL);
        seen.events.extend(release(retaken, &owner).await?.1);

        // The paused holder's permit is taken while it is still stopped.
        let replaced = take_slot(&locker, &paused_slot, &mut seen).await?;
        assert!(
            stopped(paused.pid()?)?,
            "{d}: the paused holder was running when it was replaced"
        );
        kill(paused.pid()?, Signal::SIGCONT)?;
        paused.stdin.write_all(b"GO\n").await?;
        let said = paused.until("RELEASED ", &mut seen).await?;
        assert_eq!(said, "RELEASED false", "{d}: the paused holder's release");
        assert!(
            sem.holders()
                .await?
                .iter()
                .any(|h| h.key == paused_slot && h.owner == owner),
            "{d}: the paused holder's release freed its successor's permit"
        );
        let (held, released) = release(replaced, &owner).await?;
        assert!(held, "{d}: the successor's permit was lost");
        seen.events.extend(released);

        for mut c in churners {
            c.until("DONE", &mut seen).await?;
            assert!(c.child.wait().await?.success(), "{d}: a churner failed");
        }
        // No grant of the killed holder's slot before its expiry, on the database
        // clock: it held the slot from before anyone else tried, so every other grant
        // of it came after, the test's retaking among them.
        let later: Vec<&Event> = seen
            .events
            .iter()
            .filter(|e| {
                e.kind == Kind::Grant && e.key == killed_slot && e.owner != killed_grant.owner
            })
            .collect();
        assert!(
            !later.is_empty(),
            "{d}: the killed holder's slot never came back"
        );
        for e in later {
            let at = seen
                .granted_at
                .iter()
                .find(|g| g.key == e.key && g.owner == e.owner && g.token == e.token)
                .with_context(|| format!("{d}: no database time for {e:?}"))?;
            assert!(
                at.db_us >= dead.expires_us,
                "{d}: the killed holder's permit was taken at {} µs ({e:?}), before its \
                 expiry at {} µs",
                at.db_us,
                dead.expires_us
            );
        }
        let events = &seen.events;
        let verdict = common::permits::check(events, N as usize, TTL);
        println!("{d}: {verdict}");
        assert!(
            verdict.violations.is_empty(),
            "{d}: {:#?}",
            verdict.violations
        );
        assert!(verdict.grants >= 75, "{d}: {verdict}");
        // Every permit granted was given back or refused back, but the killed
        // holder's.
        let ended = events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Release | Kind::ReleaseRefused))
            .count();
        assert_eq!(ended + 1, verdict.grants, "{d}: every grant is on record");
    }
    Ok(())
}
