//! Multi-locks under contention from processes (this test binary re-executed as
//! workers) taking overlapping key sets, with a holder SIGKILLed and a holder
//! SIGSTOPped past its TTL, checked per key by the fenced-mutex history model: no two
//! holds of a key overlap, a key's tokens rise in grant order, no valid lease is taken
//! over. On every backend.
//!
//! Each worker prints one event line per key of each grant and of each release, with
//! `CLOCK_MONOTONIC` timestamps taken before the request was sent and after its answer
//! came back. A set's release answers for the whole set (whether every key was still
//! held), so its keys' lines share the stretch of that one call: a release the database
//! accepted confirms every key, a refused one confirms none.
//!
//! The killed holder's keys come back at their final expiry, renewals included, no
//! sooner: right after the kill the test reads its rows (still its own: the other
//! workers wait for the test's word before they try) and their expiries, on the
//! database clock; every later grant of those keys must be at or after them on that
//! clock (each worker reports its grant's database time), and the model is told the
//! expiries.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use common::history::{self, Event, GrantedAt, Kind};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::Dialect;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The environment variable that makes the test binary a worker.
const WORKER: &str = "SQLOCK_MULTI_WORKER";

/// The workers' TTL: a killed or stopped holder's keys come back this long after their
/// last renewal.
const TTL: Duration = Duration::from_secs(1);

/// A bound on every wait of the scenario (none of them is a timing assertion).
const DEADLINE: Duration = Duration::from_secs(60);

/// The key sets the workers take: each overlaps every other.
const SETS: [&[&str]; 4] = [&["a", "b"], &["b", "c"], &["a", "c"], &["a", "b", "c"]];

/// One line a worker printed, parsed: an event, that the worker is ready, or a grant's
/// time on the database clock.
#[derive(Debug, Clone)]
enum Said {
    Ready,
    Event(Event),
    GrantedAt(GrantedAt),
}

fn parse(line: &str) -> Option<Said> {
    // The test harness may print its own words before a line of ours.
    if line.contains("READY") {
        return Some(Said::Ready);
    }
    if let Some(g) = GrantedAt::parse(line) {
        return Some(Said::GrantedAt(g));
    }
    Event::parse(&line[line.find("EVENT ")?..]).map(Said::Event)
}

/// Prints one event per key of `keys`.
fn say(kind: Kind, keys: &[(String, i64)], owner: &str, sent: u64, ack: u64) {
    for (key, token) in keys {
        let e = Event {
            kind: kind.clone(),
            key: key.clone(),
            owner: owner.to_owned(),
            token: *token,
            sent,
            ack,
        };
        println!("{}", e.line());
    }
}

/// A worker: waits for a line on its stdin, then takes its key set again and again
/// until SIGTERM. A victim takes its set at once, and holds it until killed, or until
/// lost (stopped past its TTL, then resumed).
///
/// With each grant it prints first, per key, the grant's time on the database clock:
/// its lease's expiry as the grant reported it (the grant's statement's time plus the
/// TTL; a guard's expiry changes only with an explicit extend, never called here),
/// less the TTL. The test checks that against the table's `acquired_at` for the
/// killed holder.
#[tokio::test]
async fn multi_worker_process() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(WORKER) else {
        return Ok(());
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dialect, table, set, role] = parts[..] else {
        anyhow::bail!("bad {WORKER}: {spec}");
    };
    let dialect = match dialect {
        "postgres" => Dialect::Postgres,
        "mysql" => Dialect::MySql,
        _ => Dialect::Sqlite,
    };
    let keys = SETS[set.parse::<usize>()?];
    let b = common::backends_of(table, &[dialect])
        .await
        .pop()
        .context("the worker's backend")?;
    let locker = b
        .builder()
        .await?
        .ttl(TTL)
        .poll_interval(Duration::from_millis(5), Duration::from_millis(40))
        .build()?;
    let owner = locker.owner().to_string();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("READY");
    if role != "victim" {
        let mut go = String::new();
        BufReader::new(tokio::io::stdin())
            .read_line(&mut go)
            .await?;
    }
    let ttl_us = i64::try_from(TTL.as_micros())?;
    loop {
        let sent = history::now();
        let guard = tokio::select! {
            g = locker.lock_many(keys).acquire() => g?,
            _ = terminate.recv() => return Ok(()),
        };
        let ack = history::now();
        let tokens: Vec<(String, i64)> = guard.tokens().map(|(k, t)| (k.to_owned(), t)).collect();
        anyhow::ensure!(tokens.len() == keys.len(), "not every key held: {tokens:?}");
        for g in guard.guards() {
            let at = g.expires_at().timestamp_micros() - ttl_us;
            println!(
                "{}",
                GrantedAt::line(g.key(), &owner, g.fencing_token(), at)
            );
        }
        say(Kind::Grant, &tokens, &owner, sent, ack);
        if role == "victim" {
            // Held until killed, or until lost; the watchdog renews it meanwhile.
            guard.lost().wait().await;
        } else {
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        let sent = history::now();
        let still = guard.release().await?;
        let ack = history::now();
        let kind = if still {
            Kind::Release
        } else {
            Kind::ReleaseRefused
        };
        say(kind, &tokens, &owner, sent, ack);
        if role == "victim" {
            return Ok(());
        }
        // A pause between rounds, so that a set whose keys are each often taken by
        // others also finds them all free at once now and then.
        tokio::time::sleep(Duration::from_millis(20 + jitter_ms())).await;
    }
}

/// A few milliseconds of jitter from the clock, so the workers do not run in step.
fn jitter_ms() -> u64 {
    history::now() % 20
}

/// The workers' lines, as they come.
struct Lines {
    tx: mpsc::UnboundedSender<(usize, String)>,
    rx: mpsc::UnboundedReceiver<(usize, String)>,
    events: Vec<(usize, Event)>,
    granted_at: Vec<GrantedAt>,
    ready: usize,
    text: Vec<(usize, String)>,
}

impl Lines {
    fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            rx,
            events: Vec::new(),
            granted_at: Vec::new(),
            ready: 0,
            text: Vec::new(),
        }
    }

    fn keep(&mut self, worker: usize, text: String) -> Option<(usize, Event)> {
        let said = parse(&text);
        self.text.push((worker, text));
        match said? {
            Said::Ready => {
                self.ready += 1;
                None
            }
            Said::Event(e) => {
                self.events.push((worker, e.clone()));
                Some((worker, e))
            }
            Said::GrantedAt(g) => {
                self.granted_at.push(g);
                None
            }
        }
    }

    /// Waits for an event that `f` accepts (one already seen counts); every line on the
    /// way is kept.
    async fn until(
        &mut self,
        what: &str,
        f: impl Fn(usize, &Event) -> bool,
    ) -> anyhow::Result<Event> {
        if let Some((_, e)) = self.events.iter().find(|(w, e)| f(*w, e)) {
            return Ok(e.clone());
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let (worker, text) = self.next(deadline, what).await?;
            if let Some((w, e)) = self.keep(worker, text) {
                if f(w, &e) {
                    return Ok(e);
                }
            }
        }
    }

    /// Waits until `n` workers in all said they are ready.
    async fn ready(&mut self, n: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + DEADLINE;
        while self.ready < n {
            let (worker, text) = self.next(deadline, "the workers' start").await?;
            self.keep(worker, text);
        }
        Ok(())
    }

    async fn next(&mut self, deadline: Instant, what: &str) -> anyhow::Result<(usize, String)> {
        let tail: Vec<_> = self.text.iter().rev().take(40).collect();
        tokio::time::timeout_at(deadline, self.rx.recv())
            .await
            .with_context(|| format!("waiting for {what}; last lines: {tail:?}"))?
            .context("every worker ended")
    }

    /// Whatever is already there.
    fn drain(&mut self) {
        while let Ok((worker, text)) = self.rx.try_recv() {
            self.keep(worker, text);
        }
    }

    fn grants(&self) -> usize {
        self.events
            .iter()
            .filter(|(_, e)| e.kind == Kind::Grant)
            .count()
    }
}

fn spawn(
    b: &common::Backend,
    set: usize,
    role: &str,
    idx: usize,
    lines: &Lines,
) -> anyhow::Result<Child> {
    let dialect = match b.dialect {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        _ => "sqlite",
    };
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "multi_worker_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER, format!("{dialect}|{}|{set}|{role}", b.table))
        .env("SQLOCK_TEST_PARENT_PID", std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("the worker's stdout")?;
    let tx = lines.tx.clone();
    tokio::spawn(async move {
        let mut out = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = out.next_line().await {
            if tx.send((idx, line)).is_err() {
                return;
            }
        }
    });
    Ok(child)
}

fn signal(child: &Child, sig: Signal) -> anyhow::Result<()> {
    let pid = child.id().context("the worker has exited")?;
    kill(Pid::from_raw(i32::try_from(pid)?), sig)?;
    Ok(())
}

/// Whether the process is stopped (SIGSTOP), by its state in /proc.
fn stopped(child: &Child) -> anyhow::Result<bool> {
    let pid = child.id().context("the worker has exited")?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .context("the process state")?;
    Ok(state == 'T')
}

/// Waits for all the grant lines of worker `idx`'s set: key and token of each.
async fn grants_of(lines: &mut Lines, idx: usize, set: usize) -> anyhow::Result<Vec<Event>> {
    let mut out = Vec::new();
    for key in SETS[set] {
        out.push(
            lines
                .until("a victim's grant", |w, e| {
                    w == idx && e.kind == Kind::Grant && e.key == *key
                })
                .await?,
        );
    }
    Ok(out)
}

/// Whether `e` is another owner's grant of one of `held`'s keys with a higher token,
/// requested after `after`.
fn replaces(e: &Event, held: &[Event], after: u64) -> bool {
    e.kind == Kind::Grant
        && e.sent > after
        && held
            .iter()
            .any(|h| h.key == e.key && h.owner != e.owner && e.token > h.token)
}

/// Tells a waiting worker to start.
async fn go(child: &mut Child) -> anyhow::Result<()> {
    let stdin = child.stdin.as_mut().context("the worker's stdin")?;
    stdin.write_all(b"GO\n").await?;
    stdin.flush().await?;
    Ok(())
}

#[test]
fn the_checker_catches_what_it_must() {
    history::self_check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_take_overlapping_sets_with_a_kill_and_a_pause() -> anyhow::Result<()> {
    for b in common::backends("mproc_multi").await {
        b.fresh_table().await?;
        let mut lines = Lines::new();
        let admin = b.pool().await?;
        // Everyone else started and waiting for the word to go, then a holder of
        // {a, b} that holds until it is killed, killed as soon as it holds: its lease
        // is a second long, and starting the others beside it could starve its renewals
        // on a busy machine.
        let mut workers = Vec::new();
        for (i, set) in (0..SETS.len()).enumerate() {
            workers.push(spawn(&b, set, "worker", i + 1, &lines)?);
        }
        lines.ready(workers.len()).await?;
        let mut victim = spawn(&b, 0, "victim", 0, &lines)?;
        let killed_set = grants_of(&mut lines, 0, 0).await?;
        signal(&victim, Signal::SIGKILL)?;
        let killed_at = history::now();
        let status = victim.wait().await?;
        assert_eq!(
            status.signal(),
            Some(Signal::SIGKILL as i32),
            "{}: the victim was not killed",
            b.dialect
        );
        // Its rows now that nothing renews them: still its own (nobody else has tried
        // yet), with their final expiries on the database clock.
        let mut dead = Vec::new();
        for g in &killed_set {
            let row = history::dead_row(&b, &admin, &g.key, &g.owner, g.token).await?;
            // The grant times the workers print are the table's: its own (printed
            // before its grant's events, so already read) is its row's acquired_at.
            let at = lines
                .granted_at
                .iter()
                .find(|a| a.key == g.key && a.owner == g.owner && a.token == g.token)
                .with_context(|| format!("{}: no database time for {g:?}", b.dialect))?;
            assert_eq!(
                at.db_us, row.acquired_us,
                "{}: a grant's database time as the workers print it is not the table's",
                b.dialect
            );
            dead.push(row);
        }
        let clock = history::DbClock::read(&b, &admin).await?;
        for w in &mut workers {
            go(w).await?;
        }
        // Its keys come back at their expiry: another worker gets one, token higher.
        lines
            .until("a grant of the killed holder's key", |_, e| {
                replaces(e, &killed_set, killed_at)
            })
            .await?;
        // A holder of {a, b, c} that holds until it is lost: stopped past its TTL,
        // then resumed.
        let mut paused = spawn(&b, 3, "victim", 9, &lines)?;
        let paused_set = grants_of(&mut lines, 9, 3).await?;
        signal(&paused, Signal::SIGSTOP)?;
        // The signal is delivered in its own time: the state says when it was.
        let deadline = Instant::now() + DEADLINE;
        while !stopped(&paused)? {
            anyhow::ensure!(
                Instant::now() < deadline,
                "{}: the holder did not stop",
                b.dialect
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let stopped_at = history::now();
        // Replaced: another owner is granted one of its keys while it is stopped.
        lines
            .until("a grant of the paused holder's key", |_, e| {
                replaces(e, &paused_set, stopped_at)
            })
            .await?;
        assert!(stopped(&paused)?, "{}: the holder woke too soon", b.dialect);
        signal(&paused, Signal::SIGCONT)?;
        let released = lines
            .until("the paused holder's release", |w, e| {
                w == 9 && e.kind != Kind::Grant
            })
            .await?;
        assert_eq!(
            released.kind,
            Kind::ReleaseRefused,
            "{}: a replaced holder's release was accepted",
            b.dialect
        );
        assert!(paused.wait().await?.success());
        // More rounds for the checker: sixty grants of a key more than so far.
        let target = lines.grants() + 60;
        while lines.grants() < target {
            let deadline = Instant::now() + DEADLINE;
            let (worker, text) = lines.next(deadline, "sixty more grants").await?;
            lines.keep(worker, text);
        }
        for w in &workers {
            signal(w, Signal::SIGTERM)?;
        }
        for w in &mut workers {
            let status = tokio::time::timeout(DEADLINE, w.wait()).await??;
            assert!(status.success(), "{}: a worker failed", b.dialect);
        }
        lines.drain();
        // The killed holder's keys were granted to nobody else before their expiry, on
        // the database clock: it held them from before anyone else tried, and every
        // other grant of them came after.
        for (g, row) in killed_set.iter().zip(&dead) {
            let later: Vec<&Event> = lines
                .events
                .iter()
                .map(|(_, e)| e)
                .filter(|e| e.kind == Kind::Grant && e.key == g.key && e.owner != g.owner)
                .collect();
            assert!(
                !later.is_empty(),
                "{}: {} never granted again",
                b.dialect,
                g.key
            );
            for e in later {
                let at = lines
                    .granted_at
                    .iter()
                    .find(|a| a.key == e.key && a.owner == e.owner && a.token == e.token)
                    .with_context(|| format!("{}: no database time for {e:?}", b.dialect))?;
                assert!(
                    at.db_us >= row.expires_us,
                    "{}: {} was granted at {} µs ({e:?}), before the killed holder's lease \
                     expired at {} µs",
                    b.dialect,
                    g.key,
                    at.db_us,
                    row.expires_us
                );
            }
        }
        // The model, per key, the killed holder's keys held until their expiry.
        let mut events: Vec<Event> = lines.events.iter().map(|(_, e)| e.clone()).collect();
        events.extend(
            killed_set
                .iter()
                .zip(&dead)
                .map(|(g, row)| clock.expired(&g.key, row)),
        );
        let verdict = history::check_leases(&events, TTL);
        assert!(
            verdict.violations.is_empty(),
            "{}: {:?}",
            b.dialect,
            verdict.violations
        );
        assert!(verdict.releases > 0, "{}: no release confirmed", b.dialect);
        println!(
            "{}: {verdict} (per key) over keys a, b, c from 6 processes taking overlapping sets, a \
             holder killed (its keys taken again only after their expiry) and one paused \
             past its TTL and replaced",
            b.dialect
        );
    }
    Ok(())
}
