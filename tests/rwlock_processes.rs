//! Read-write locks under contention from processes (this test binary re-executed as
//! workers), with a reader SIGKILLed while it holds and a writer SIGSTOPped past its
//! TTL, checked by a history model: a writer never overlaps anyone, readers did
//! overlap, write tokens rise in grant order. On every backend.
//!
//! Each worker prints one line per grant and per release, with `CLOCK_MONOTONIC`
//! timestamps taken before the request was sent and after its answer came back. A hold
//! surely lasted from its grant's answer to the sending of a release the database
//! accepted (or, with no such release, to its grant's sending plus the TTL: a lease
//! lasts at least that long); the model compares these stretches only.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use common::history;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlock::Dialect;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The environment variable that makes the test binary a worker.
const WORKER: &str = "SQLOCK_RW_WORKER";

/// The workers' TTL: a killed or stopped holder's hold comes back this long after its
/// last renewal.
const TTL: Duration = Duration::from_secs(2);

/// A bound on every wait of the scenario (none of them is a timing assertion).
const DEADLINE: Duration = Duration::from_secs(60);

/// The read-write lock the workers share.
const NAME: &str = "procs";

/// One line a worker printed: a grant or a release.
#[derive(Debug, Clone)]
struct Line {
    worker: usize,
    what: String,
    write: bool,
    owner: String,
    token: i64,
    sent: u64,
    ack: u64,
}

fn parse(worker: usize, line: &str) -> Option<Line> {
    // The test harness may print its own words before the first line.
    let at = line.find("RW ")?;
    let mut f = line[at + 3..].split(' ');
    Some(Line {
        worker,
        what: f.next()?.to_owned(),
        write: f.next()? == "write",
        owner: f.next()?.to_owned(),
        token: f.next()?.parse().ok()?,
        sent: f.next()?.parse().ok()?,
        ack: f.next()?.parse().ok()?,
    })
}

/// A worker: takes its side of the lock again and again until SIGTERM. A victim
/// (`reader-victim`, `writer-victim`) takes it once and holds it until killed or lost.
#[tokio::test]
async fn rw_worker_process() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(WORKER) else {
        return Ok(());
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dialect, table, role] = parts[..] else {
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
        .ttl(TTL)
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .build()?;
    let owner = locker.owner().to_string();
    let write = role.starts_with("writer");
    let side = if write { "write" } else { "read" };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let sent = history::now();
        let request = if write {
            locker.write_lock(NAME)
        } else {
            locker.read_lock(NAME)
        };
        let guard = tokio::select! {
            g = request.acquire() => g?,
            _ = terminate.recv() => return Ok(()),
        };
        let token = guard.fencing_token();
        println!("RW grant {side} {owner} {token} {sent} {}", history::now());
        if role.ends_with("victim") {
            // Held until killed, or until lost (stopped past the TTL, then resumed).
            let reason = guard.lost().wait().await;
            let sent = history::now();
            let still = guard.release().await?;
            let what = if still { "release" } else { "refused" };
            println!("RW {what} {side} {owner} {token} {sent} {}", history::now());
            println!("LOST {reason}");
            return Ok(());
        }
        // Readers stay long enough to meet each other.
        let hold = if write { 2 } else { 25 };
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let sent = history::now();
        let still = guard.release().await?;
        let what = if still { "release" } else { "refused" };
        println!("RW {what} {side} {owner} {token} {sent} {}", history::now());
        if write {
            // A pause between writes, or two writers would keep readers out for good
            // (writer preference).
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
}

/// The workers' lines, as they come.
struct Lines {
    tx: mpsc::UnboundedSender<(usize, String)>,
    rx: mpsc::UnboundedReceiver<(usize, String)>,
    seen: Vec<Line>,
    text: Vec<(usize, String)>,
}

impl Lines {
    fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            rx,
            seen: Vec::new(),
            text: Vec::new(),
        }
    }

    /// Waits for a line that `f` accepts; every line on the way is kept.
    async fn until(&mut self, what: &str, f: impl Fn(&Line) -> bool) -> anyhow::Result<Line> {
        if let Some(l) = self.seen.iter().find(|l| f(l)) {
            return Ok(l.clone());
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let (worker, text) = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .with_context(|| format!("waiting for {what}: {:?}", self.text))?
                .context("every worker ended")?;
            self.text.push((worker, text.clone()));
            if let Some(l) = parse(worker, &text) {
                self.seen.push(l.clone());
                if f(&l) {
                    return Ok(l);
                }
            }
        }
    }

    /// Whatever is already there.
    fn drain(&mut self) {
        while let Ok((worker, text)) = self.rx.try_recv() {
            self.text.push((worker, text.clone()));
            if let Some(l) = parse(worker, &text) {
                self.seen.push(l);
            }
        }
    }
}

fn spawn(b: &common::Backend, role: &str, idx: usize, lines: &Lines) -> anyhow::Result<Child> {
    let dialect = match b.dialect {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        _ => "sqlite",
    };
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "rw_worker_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER, format!("{dialect}|{}|{role}", b.table))
        .env("SQLOCK_TEST_PARENT_PID", std::process::id().to_string())
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

/// The holds of a history, each with the stretch in which it surely held: from its
/// grant's answer to the sending of its accepted release, or to its grant's sending
/// plus the TTL.
fn holds(lines: &[Line]) -> Vec<history::RwHold> {
    let ttl = u64::try_from(TTL.as_nanos()).unwrap_or(u64::MAX);
    lines
        .iter()
        .filter(|l| l.what == "grant")
        .map(|g| {
            let end = lines
                .iter()
                .find(|r| {
                    r.what == "release"
                        && r.owner == g.owner
                        && r.token == g.token
                        && r.sent >= g.ack
                })
                .map_or(g.sent.saturating_add(ttl), |r| r.sent);
            history::RwHold {
                write: g.write,
                owner: g.owner.clone(),
                token: g.token,
                sent: g.sent,
                ack: g.ack,
                end,
            }
        })
        .collect()
}

#[test]
fn the_checker_catches_what_it_must() {
    history::self_check_rw();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_read_and_write_with_a_kill_and_a_pause() -> anyhow::Result<()> {
    for b in common::backends("rw_procs").await {
        b.fresh_table().await?;
        let mut lines = Lines::new();
        // A reader that holds until it is killed.
        let mut victim = spawn(&b, "reader-victim", 0, &lines)?;
        let held = lines.until("the victim's read", |l| l.worker == 0).await?;
        let mut workers = Vec::new();
        for i in 1..=2 {
            workers.push(spawn(&b, "reader", i, &lines)?);
        }
        // Readers get in beside the victim; the writers come after.
        lines
            .until("a reader beside the victim", |l| {
                l.what == "grant" && !l.write && l.owner != held.owner
            })
            .await?;
        for i in 3..=4 {
            workers.push(spawn(&b, "writer", i, &lines)?);
        }
        signal(&victim, Signal::SIGKILL)?;
        let killed_at = history::now();
        let status = victim.wait().await?;
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "{}: the victim was not killed",
            b.dialect
        );
        // Its read comes back at its TTL: a writer gets in after the kill.
        lines
            .until("a write after the kill", |l| {
                l.what == "grant" && l.write && l.sent > killed_at
            })
            .await?;
        // A writer that holds until it is lost: stopped past its TTL, then resumed.
        let mut paused = spawn(&b, "writer-victim", 9, &lines)?;
        let write = lines
            .until("the paused writer's grant", |l| {
                l.worker == 9 && l.what == "grant"
            })
            .await?;
        signal(&paused, Signal::SIGSTOP)?;
        // The signal is delivered in its own time: the state says when it was.
        let deadline = Instant::now() + DEADLINE;
        while !stopped(&paused)? {
            anyhow::ensure!(
                Instant::now() < deadline,
                "{}: the writer did not stop",
                b.dialect
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let stopped_at = history::now();
        // Replaced: another owner is granted after the stop.
        lines
            .until("a grant after the pause", |l| {
                l.what == "grant" && l.owner != write.owner && l.sent > stopped_at
            })
            .await?;
        assert!(stopped(&paused)?, "{}: the writer woke too soon", b.dialect);
        signal(&paused, Signal::SIGCONT)?;
        let refused = lines
            .until("the paused writer's release", |l| {
                l.worker == 9 && l.what != "grant"
            })
            .await?;
        assert_eq!(
            refused.what, "refused",
            "{}: a replaced writer still held",
            b.dialect
        );
        assert!(paused.wait().await?.success());
        // More rounds for the checker: twenty grants more than so far.
        let target = lines.seen.iter().filter(|l| l.what == "grant").count() + 20;
        let counted = std::cell::Cell::new(0);
        lines
            .until("twenty more grants", |l| {
                if l.what == "grant" {
                    counted.set(counted.get() + 1);
                }
                counted.get() >= target
            })
            .await?;
        for w in &workers {
            signal(w, Signal::SIGTERM)?;
        }
        for w in &mut workers {
            let status = tokio::time::timeout(DEADLINE, w.wait()).await??;
            assert!(status.success(), "{}: a worker failed", b.dialect);
        }
        lines.drain();
        // The model.
        let verdict = history::check_rw(&holds(&lines.seen));
        assert!(
            verdict.violations.is_empty(),
            "{}: {:?}",
            b.dialect,
            verdict.violations
        );
        assert!(
            verdict.readers_overlapped,
            "{}: readers never overlapped",
            b.dialect
        );
        let writes = verdict.writes;
        println!(
            "{}: {} holds ({writes} writes) from 6 processes, a reader killed, a writer \
             paused past its TTL and replaced; no writer overlapped anyone",
            b.dialect,
            verdict.reads + verdict.writes
        );
    }
    Ok(())
}
