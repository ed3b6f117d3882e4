//! Read-write locks under contention from processes (this test binary re-executed as
//! workers), with a reader SIGKILLed while it holds and a writer SIGSTOPped past its
//! TTL, checked by a history model: a writer never overlaps anyone, readers did
//! overlap, write tokens rise in grant order. On every backend.
//!
//! Each worker prints one line per grant and per release, with `CLOCK_MONOTONIC`
//! timestamps taken before the request was sent and after its answer came back. A hold
//! surely lasted from its grant's answer to the sending of a release the database
//! accepted (or, with no such release, to its grant's sending plus the TTL: a lease
//! lasts at least that long); the model compares these stretches only. The killed
//! reader's hold lasted until the expiry its row shows after the kill (renewals
//! included): the test reads it there, and no write may be granted before it, on the
//! database clock (each writer reads that clock as soon as it holds) as in the model.
//!
//! Two readers surely overlap: on their first read, each waits (bounded) until the
//! other holds too, told by a marker file the other writes once it holds, before
//! releasing; then they read at random like the rest.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
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

/// The directory of the pair of readers' markers, for a worker.
const MARKS: &str = "SQLOCK_RW_MARKS";

/// The workers' TTL: a killed or stopped holder's hold comes back this long after its
/// last renewal.
const TTL: Duration = Duration::from_secs(2);

/// A bound on every wait of the scenario (none of them is a timing assertion).
const DEADLINE: Duration = Duration::from_secs(60);

/// The read-write lock the workers share.
const NAME: &str = "procs";

/// How long a reader of the pair waits for the other to hold too: a bound, not a
/// timing assertion.
const PAIR_WAIT: Duration = Duration::from_secs(30);

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
    /// For a write's grant, the database clock (µs) read while it held: no earlier
    /// than the grant on that clock. 0 otherwise.
    db: i64,
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
        db: f.next().and_then(|d| d.parse().ok()).unwrap_or(0),
    })
}

/// The marker a reader of the pair writes once it holds.
fn marker(marks: &Path, idx: usize) -> PathBuf {
    marks.join(format!("holds-{idx}"))
}

/// A worker: takes its side of the lock again and again until SIGTERM. A victim
/// (`reader-victim`, `writer-victim`) takes it once and holds it until killed or lost.
/// A `pair-reader` (1 or 2) holds its first read until the other one holds too.
#[tokio::test]
async fn rw_worker_process() -> anyhow::Result<()> {
    let Ok(spec) = std::env::var(WORKER) else {
        return Ok(());
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dialect, table, role, idx] = parts[..] else {
        anyhow::bail!("bad {WORKER}: {spec}");
    };
    let idx: usize = idx.parse()?;
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
    let mut paired = role != "pair-reader";
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
        let ack = history::now();
        // A write's database time, read while it holds: an upper bound of its grant's.
        let db = if write {
            history::db_now_us(&b, locker.pool()).await?
        } else {
            0
        };
        println!("RW grant {side} {owner} {token} {sent} {ack} {db}");
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
        if !paired {
            // The pair: this reader holds; it releases once the other holds too.
            paired = true;
            let marks = PathBuf::from(std::env::var(MARKS)?);
            std::fs::write(marker(&marks, idx), b"holds\n")?;
            let other = marker(&marks, 3 - idx);
            let deadline = Instant::now() + PAIR_WAIT;
            while !other.exists() {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "reader {idx}: the other reader of the pair never held"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        } else {
            // Readers stay a while, so that they may meet at random too.
            let hold = if write { 2 } else { 25 };
            tokio::time::sleep(Duration::from_millis(hold)).await;
        }
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

fn spawn(
    b: &common::Backend,
    role: &str,
    idx: usize,
    lines: &Lines,
    marks: &Path,
) -> anyhow::Result<Child> {
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
        .env(WORKER, format!("{dialect}|{}|{role}|{idx}", b.table))
        .env(MARKS, marks)
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

/// Slack for the database clock and `CLOCK_MONOTONIC` running at slightly different
/// rates, as `history.rs` allows: 2% of the TTL plus 20 ms.
fn slack() -> u64 {
    u64::try_from((TTL / 50 + Duration::from_millis(20)).as_nanos()).unwrap_or(u64::MAX)
}

/// The holds of a history, each with the stretch in which it surely held: from its
/// grant's answer to the sending of its accepted release, or, with none, to its
/// grant's sending plus the TTL, or to the `CLOCK_MONOTONIC` moment of its final expiry
/// (`expired`: owner, token, moment) when the table told it after its holder was
/// killed, less the slack.
fn holds(lines: &[Line], expired: &[(String, i64, u64)]) -> Vec<history::RwHold> {
    let ttl = u64::try_from(TTL.as_nanos()).unwrap_or(u64::MAX);
    lines
        .iter()
        .filter(|l| l.what == "grant")
        .map(|g| {
            let lapse = expired
                .iter()
                .filter(|(owner, token, _)| *owner == g.owner && *token == g.token)
                .map(|&(_, _, at)| at)
                .fold(g.sent.saturating_add(ttl), u64::max)
                .saturating_sub(slack());
            let end = lines
                .iter()
                .find(|r| {
                    r.what == "release"
                        && r.owner == g.owner
                        && r.token == g.token
                        && r.sent >= g.ack
                })
                .map_or(lapse, |r| r.sent);
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
    // A killed reader renewed its hold until 10 s: a write granted at 5 s, past its
    // grant's TTL, overlapped it; one granted after its expiry did not.
    let line = |what: &str, write, owner: &str, token, sent, ack| Line {
        worker: 0,
        what: what.to_owned(),
        write,
        owner: owner.to_owned(),
        token,
        sent,
        ack,
        db: 0,
    };
    let s = 1_000_000_000;
    let expired = [("dead".to_owned(), 1, 10 * s)];
    let early = [
        line("grant", false, "dead", 1, 0, 1),
        line("grant", true, "w", 2, 1, 5 * s),
        line("release", true, "w", 2, 6 * s, 6 * s + 1),
    ];
    assert!(history::check_rw(&holds(&early, &[])).violations.is_empty());
    assert_eq!(
        history::check_rw(&holds(&early, &expired)).violations.len(),
        1
    );
    let mut late = early.clone();
    late[1].ack = 10 * s + 1;
    late[2].sent = 11 * s;
    assert!(history::check_rw(&holds(&late, &expired))
        .violations
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_read_and_write_with_a_kill_and_a_pause() -> anyhow::Result<()> {
    for b in common::backends("rw_procs").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let marks = std::env::temp_dir().join(format!(
            "sqlock-rw-pair-{}-{}",
            std::process::id(),
            b.dialect
        ));
        let _ = std::fs::remove_dir_all(&marks);
        std::fs::create_dir_all(&marks)?;
        let mut lines = Lines::new();
        // Two readers that hold at once for sure: each releases its first read only
        // once the other holds too.
        let mut workers = Vec::new();
        for i in 1..=2 {
            workers.push(spawn(&b, "pair-reader", i, &lines, &marks)?);
        }
        for i in 1..=2 {
            lines
                .until("a reader of the pair holding", |l| {
                    l.worker == i && l.what == "grant"
                })
                .await?;
        }
        // A reader that holds until it is killed, killed as soon as it holds (starting
        // other processes beside it could starve its renewals on a busy machine), and
        // the writers, which come after the pair holds (a waiting writer would keep the
        // second of the pair out) and after the victim's read.
        let mut victim = spawn(&b, "reader-victim", 0, &lines, &marks)?;
        let held = lines
            .until("the victim's read", |l| l.worker == 0 && l.what == "grant")
            .await?;
        for i in 3..=4 {
            workers.push(spawn(&b, "writer", i, &lines, &marks)?);
        }
        signal(&victim, Signal::SIGKILL)?;
        let killed_at = history::now();
        let status = victim.wait().await?;
        assert_eq!(
            status.signal(),
            Some(9),
            "{}: the victim was not killed",
            b.dialect
        );
        // Its read hold as the table has it now that nothing renews it: still its own,
        // with its final expiry on the database clock.
        let read_key = format!("{NAME}@read:{}", held.owner);
        let dead = history::dead_row(&b, &admin, &read_key, &held.owner, held.token).await?;
        let clock = history::DbClock::read(&b, &admin).await?;
        // Its read comes back at that expiry, no sooner: a writer gets in after the
        // kill, on the database clock not before the expiry.
        let first = lines
            .until("a write after the kill", |l| {
                l.what == "grant" && l.write && l.sent > killed_at
            })
            .await?;
        assert!(
            first.db >= dead.expires_us,
            "{}: a writer got in at {} µs, before the killed reader's hold expired at {} µs",
            b.dialect,
            first.db,
            dead.expires_us
        );
        // A writer that holds until it is lost: stopped past its TTL, then resumed.
        let mut paused = spawn(&b, "writer-victim", 9, &lines, &marks)?;
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
        // No write at all before the killed reader's expiry, on the database clock:
        // every writer started after its read was granted, and it never released.
        let early: Vec<&Line> = lines
            .seen
            .iter()
            .filter(|l| l.what == "grant" && l.write && l.db < dead.expires_us)
            .collect();
        assert!(
            early.is_empty(),
            "{}: writes granted before the killed reader's hold expired at {} µs: {early:?}",
            b.dialect,
            dead.expires_us
        );
        // The model, the killed reader's hold lasting until its expiry.
        let expired = [(
            held.owner.clone(),
            held.token,
            clock.earliest(dead.expires_us),
        )];
        let verdict = history::check_rw(&holds(&lines.seen, &expired));
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
            "{}: {} holds ({writes} writes) from 6 processes, a reader killed (no write \
             before its expiry), a writer paused past its TTL and replaced; no writer \
             overlapped anyone",
            b.dialect,
            verdict.reads + verdict.writes
        );
        let _ = std::fs::remove_dir_all(&marks);
    }
    Ok(())
}
