//! The fault workload: worker processes hold one primitive of the family over and
//! over (a lock of each strategy, a multi-lock, a semaphore, a read-write lock, an
//! election; with presence and without) and do fenced read-modify-write increments of
//! a counter under each hold, while a fault driver, at random, kills their connections
//! on the server, pauses them past their TTL (SIGSTOP, SIGCONT), SIGKILLs them, cuts
//! the network between one of them and the server (one way or both, shorter or longer
//! than the TTL), and crashes, stops and restarts the server (a crash with a commit at
//! risk, shown lost). The recorded history is checked against each primitive's model
//! (`common/history.rs`, `common/permits.rs`) and the counters against the writes the
//! database accepted; each kind of fault is counted where it met a primitive held.
//!
//! Three phases: every fault but the clock, checked with the lease-timing rule too;
//! every fault with the servers' clock jumping forward past the TTL and back; and the
//! fence check off under pauses, which must lose updates, so the check demonstrably
//! can fail.
//!
//! Runs on the fault tests' own server instances (`scripts/fault-db.sh`: ports 5433
//! and 3307, both under libfaketime), which it restarts and whose clock it moves; the
//! main servers are never touched. Bounded: each phase runs `SQLOCK_FAULT_SECS`
//! seconds (default 30; the third at most 60), about two minutes in all, and a
//! workload that has not yet met what the phase asks of it (enough grants, each kind
//! of fault while held, readers sharing, a clock jump while held) runs on, meeting
//! only the faults still due, until it has, for at most two minutes more. A longer
//! value is the soak run (docs/guarantees.md); it ends with a table of the figures,
//! which it also writes, with the facts of the run and the machine, to the file
//! `SQLOCK_FAULT_RECORD` names (the records the docs publish are in `docs/soak/`).
//!
//! Every cut's rules count the packets they drop; a probe process cut each way before
//! the phases must lose packets, and a phase fails unless, on each server, every
//! direction that was cut had cuts that dropped packets.
//!
//! `SQLOCK_FAULT_ONLY=semaphore,election` (the primitives as the table names them)
//! runs only those, to chase a failure; a workload that found a violation writes every
//! event its workers told to a file it names.
//!
//! It has a main of its own (no test harness) because the workers are this binary
//! again, started with `--worker` (`faults/worker.rs`).

mod common;
#[path = "faults/worker.rs"]
mod worker;

use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use common::history::{self, Event, Kind, Verdict};
use common::partition::{Direction, Dropped, Partitions};
use common::{clock, Backend};
use nix::sys::signal::{kill as signal, Signal};
use nix::unistd::Pid;
use sqlock::{DbPool, Dialect, Strategy};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use worker::{side_tables, Primitive, WorkerArgs, TTL};

/// Worker processes per workload.
const WORKERS: usize = 4;

/// The cgroup a worker moves itself into, so that a partition can single it out.
const CGROUP_ENV: &str = common::partition::CGROUP_ENV;

/// The grants each workload must have had in a phase before it ends: over the two
/// fenced phases, the ten a row of the run's figures asks (`Figures::check`).
const GRANTS_A_PHASE: usize = 5;

/// How much longer than its window a workload may run to meet what the phase asks
/// of it ([`Workload::unmet`]); past that, the phase fails and says what it missed.
fn overtime(run_for: Duration) -> Duration {
    run_for.max(Duration::from_secs(120))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // Test runners that list a binary's tests first (cargo-nextest) see one test.
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("fault_workload: test");
        }
        return ExitCode::SUCCESS;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = if args.get(1).map(String::as_str) == Some("--worker") {
        rt.block_on(async { worker::worker(WorkerArgs::parse(&args[2..])?).await })
    } else if args.get(1).map(String::as_str) == Some(common::partition::PROBE_ARG) {
        rt.block_on(common::partition::probe(&args[2]))
    } else {
        rt.block_on(suite())
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faults: {e:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------
// The driver.

/// Which faults a workload injects.
#[derive(Debug, Clone, Copy)]
struct Faults {
    kills: bool,
    pauses: bool,
    sigkills: bool,
    partitions: bool,
}

const ALL_FAULTS: Faults = Faults {
    kills: true,
    pauses: true,
    sigkills: true,
    partitions: true,
};

const PAUSES_ONLY: Faults = Faults {
    kills: false,
    pauses: true,
    sigkills: false,
    partitions: false,
};

/// A SIGKILLed holder: the moment of the kill ([`history::now`]), and what it held
/// unexpired just before, as the table showed.
type Victim = (u64, Vec<LiveHold>);

/// A key a worker held, as the table showed: its token, and a moment
/// ([`history::now`]) no later than its expiry.
#[derive(Debug)]
struct LiveHold {
    key: String,
    token: i64,
    expires: u64,
}

/// What the driver did.
#[derive(Debug, Default)]
struct Injected {
    kill_rounds: AtomicUsize,
    connections_killed: AtomicUsize,
    pauses: AtomicUsize,
    sigkills: AtomicUsize,
    /// Network cuts shorter than the TTL.
    cuts_short: AtomicUsize,
    /// Network cuts longer than the TTL.
    cuts_long: AtomicUsize,
    /// Cuts by direction: to the server, from the server, both ways.
    cuts_by_direction: [AtomicUsize; 3],
    /// Cuts whose rules dropped at least one packet, by direction.
    cuts_dropping: [AtomicUsize; 3],
    /// Packets the cuts' rules dropped, in all.
    packets_dropped: AtomicU64,
    /// Of the faults aimed at one worker, those that met it holding.
    kills_held: AtomicUsize,
    pauses_held: AtomicUsize,
    sigkills_held: AtomicUsize,
    cuts_held: AtomicUsize,
    /// The holders a SIGKILL ended.
    victims: Mutex<Vec<Victim>>,
}

impl Injected {
    /// Counts a fault aimed at a worker, and whether it met the worker holding.
    fn aimed(count: &AtomicUsize, held: &AtomicUsize, holding: bool) {
        count.fetch_add(1, Ordering::Relaxed);
        if holding {
            held.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The count of faults of `kind` that met a worker holding.
    fn held(&self, kind: &str) -> &AtomicUsize {
        match kind {
            "kill" => &self.kills_held,
            "pause" => &self.pauses_held,
            "sigkill" => &self.sigkills_held,
            _ => &self.cuts_held,
        }
    }

    fn cuts(&self) -> usize {
        self.cuts_short.load(Ordering::Relaxed) + self.cuts_long.load(Ordering::Relaxed)
    }

    fn cuts_dropping(&self) -> usize {
        self.cuts_dropping
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Counts a healed cut and what its rules dropped.
    fn healed(&self, direction: Direction, dropped: Dropped) {
        if dropped.total() > 0 {
            self.cuts_dropping[direction.index()].fetch_add(1, Ordering::Relaxed);
        }
        self.packets_dropped
            .fetch_add(dropped.total(), Ordering::Relaxed);
    }
}

/// Where the faults of the whole server met a workload's primitive held: whether a
/// worker of the workload held it at the moment of each crash, restart and clock jump.
#[derive(Debug, Default)]
struct Exposure {
    /// Each worker's word on whether it holds (after each grant and release), of the
    /// worker process now in its slot.
    holding: Mutex<Vec<Arc<AtomicBool>>>,
    /// Crashes and immediate stops of the server.
    crashes: AtomicUsize,
    /// Clean restarts of the server.
    restarts: AtomicUsize,
    clock_jumps: AtomicUsize,
    /// When the server was crashed ([`history::now`]: from the crash's start to the
    /// server's answer, `u64::MAX` until then), held or not.
    crashed_at: Mutex<Vec<(u64, u64)>>,
}

impl Exposure {
    fn held(&self) -> bool {
        self.holding
            .lock()
            .unwrap()
            .iter()
            .any(|h| h.load(Ordering::Relaxed))
    }

    /// Counts a fault of the server or the clock if it met the primitive held.
    fn met(exposed: &[Arc<Exposure>], count: impl Fn(&Exposure) -> &AtomicUsize) {
        for e in exposed {
            if e.held() {
                count(e).fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What one workload found.
struct Report {
    name: String,
    dialect: Dialect,
    primitive: Primitive,
    presence: bool,
    fence: bool,
    verdict: Verdict,
    /// Whether two readers of different owners surely held at once (read-write only).
    readers_overlapped: bool,
    /// For-update grants a crash rolled back whose token was drawn again.
    reissued: usize,
    injected: Injected,
    exposure: Arc<Exposure>,
    /// What became of each SIGKILLed holder's keys.
    takeovers: Vec<Takeover>,
    /// What the workers told, for a failure's message.
    events: Vec<Event>,
    rows: i64,
    counter: i64,
    distinct: i64,
    falling_tokens: i64,
    errors: usize,
    /// How long the workload took to make its tables before its window opened (a
    /// server fault of the phase may hold it up).
    prepared_in: Duration,
    /// The last error a worker told, if any.
    last_error: String,
    /// How long its workers ran: its window, and the time past it the workload took to
    /// meet what the phase asks.
    ran_for: Duration,
    /// What the phase asked of it that it never met ([`Workload::unmet`]).
    unmet: Vec<&'static str>,
    /// The slowest step a worker told of, past its bound (ms, what it was doing).
    slowest: (u64, String),
    /// The driver's faults and the workers' errors, in order.
    log: Vec<(u64, String)>,
}

impl Report {
    /// The events of the owners the first violation names, as lines in the order
    /// sent; all of the workload's events are written to a file beside, named at the end.
    fn events_near_violation(&self) -> String {
        let Some(first) = self.verdict.violations.first() else {
            return String::new();
        };
        let mut events = self.events.clone();
        events.sort_by_key(|e| e.sent);
        let lines: Vec<String> = events.iter().map(Event::line).collect();
        let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}.events", self.name.replace(' ', "_")));
        let written = match std::fs::write(&file, lines.join("\n")) {
            Ok(()) => format!("every event is in {}", file.display()),
            Err(e) => format!("the events could not be written to {}: {e}", file.display()),
        };
        let named: Vec<String> = lines
            .into_iter()
            .zip(&events)
            .filter(|(_, e)| first.contains(&e.owner))
            .map(|(line, _)| line)
            .take(200)
            .collect();
        format!("{}\n{written}", named.join("\n"))
    }

    fn lost_updates(&self) -> i64 {
        self.rows - self.counter
    }

    /// For a workload that went 20 s or more without a grant, where its events, the
    /// driver's faults and its workers' errors were written, in order, to show what
    /// it stalled on.
    fn stalled(&self) -> Option<String> {
        if self.longest_between_grants() < 20.0 {
            return None;
        }
        let mut lines: Vec<(u64, String)> = self.log.clone();
        lines.extend(self.events.iter().map(|e| (e.ack, e.line())));
        lines.sort();
        let text: Vec<String> = lines
            .into_iter()
            .map(|(at, l)| format!("{at} {l}"))
            .collect();
        let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}.stalled", self.name.replace(' ', "_")));
        Some(match std::fs::write(&file, text.join("\n")) {
            Ok(()) => format!(
                "{} stalled: its history is in {}",
                self.name,
                file.display()
            ),
            Err(e) => format!(
                "{} stalled; its history could not be written: {e}",
                self.name
            ),
        })
    }

    /// The longest time without a grant between two grants of the workload, in s: a
    /// primitive that stalled behind its faults shows here.
    fn longest_between_grants(&self) -> f64 {
        let mut acks: Vec<u64> = self
            .events
            .iter()
            .filter(|e| e.kind == Kind::Grant)
            .map(|e| e.ack)
            .collect();
        acks.sort_unstable();
        let gap = acks.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        Duration::from_nanos(gap).as_secs_f64()
    }

    fn print(&self) {
        let i = &self.injected;
        let [to, from, both] = &i.cuts_by_direction;
        println!(
            "{}: {}; the table holds {} accepted writes, counter {}, lost updates {}, \
             writes out of token order {}; faults: {} kill rounds ({} connections), {} \
             pauses past the TTL, {} workers SIGKILLed, {} network cuts ({} shorter than \
             the TTL, {} longer; {} to the server, {} from it, {} both ways; {} dropped \
             packets, {} in all); {} worker errors; SIGKILLed holders' keys granted \
             again after (ms, before the lease's expiry) {:?}; {} victims in all; \
             prepared in {:.1} s; ran {:.1} s; at most {:.1} s between grants; the slowest \
             step past its bound: {}; the last worker error: {}",
            self.name,
            self.verdict,
            self.rows,
            self.counter,
            self.lost_updates(),
            self.falling_tokens,
            i.kill_rounds.load(Ordering::Relaxed),
            i.connections_killed.load(Ordering::Relaxed),
            i.pauses.load(Ordering::Relaxed),
            i.sigkills.load(Ordering::Relaxed),
            i.cuts(),
            i.cuts_short.load(Ordering::Relaxed),
            i.cuts_long.load(Ordering::Relaxed),
            to.load(Ordering::Relaxed),
            from.load(Ordering::Relaxed),
            both.load(Ordering::Relaxed),
            i.cuts_dropping(),
            i.packets_dropped.load(Ordering::Relaxed),
            self.errors,
            self.takeovers
                .iter()
                .map(|t| (t.after.as_millis(), t.before_expiry))
                .collect::<Vec<_>>(),
            self.injected.victims.lock().unwrap().len(),
            self.prepared_in.as_secs_f64(),
            self.ran_for.as_secs_f64(),
            self.longest_between_grants(),
            match &self.slowest {
                (0, _) => "none".to_owned(),
                (ms, step) => format!("{step} {:.1} s", *ms as f64 / 1000.0),
            },
            if self.last_error.is_empty() {
                "none"
            } else {
                &self.last_error
            },
        );
    }
}

/// One running worker process.
struct Slot {
    tag: String,
    /// The worker's cgroup, when the workload cuts the network.
    cgroup: Option<String>,
    child: Child,
    /// The worker's standard input: closed, it tells the worker to stop.
    stdin: Option<tokio::process::ChildStdin>,
    holding: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    /// The owner the worker holds as, once it said.
    owner: Arc<Mutex<String>>,
}

impl Slot {
    fn pid(&self) -> Option<Pid> {
        self.child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
    }
}

impl Collected {
    fn note(&self, what: String) {
        self.log.lock().unwrap().push((history::now(), what));
    }
}

/// Everything the workers of one workload printed.
#[derive(Default)]
struct Collected {
    events: Mutex<Vec<Event>>,
    errors: AtomicUsize,
    /// The last error a worker told.
    last_error: Mutex<String>,
    /// The slowest step a worker told of (ms, what it was doing), of those that took
    /// longer than their bound.
    slowest: Mutex<(u64, String)>,
    /// The driver's faults and the workers' errors, each as it was made or read
    /// ([`history::now`]), for a workload that stalled (see [`Report::stalled`]).
    log: Mutex<Vec<(u64, String)>>,
    /// The tasks reading the workers' output, each done at its worker's end of output.
    readers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

struct Workload {
    backend: Backend,
    primitive: Primitive,
    presence: bool,
    fence: bool,
    faults: Faults,
    /// The partition rules, when `faults.partitions`.
    net: Option<Arc<Partitions>>,
    /// Whether the servers' clock jumps during the run: then the lease-timing rule,
    /// which reads the database clock as true, does not apply.
    clock_jumps: bool,
    run_for: Duration,
    exposure: Arc<Exposure>,
}

impl Workload {
    fn name(&self) -> String {
        format!(
            "{} {}{} fence {}",
            self.backend.dialect,
            self.primitive,
            if self.presence { " with presence" } else { "" },
            if self.fence { "on" } else { "off" }
        )
    }

    /// The table of the workload: one per primitive and presence setting.
    fn table(primitive: Primitive, presence: bool) -> String {
        format!(
            "faults_{}{}",
            primitive.to_string().replace('-', "_"),
            if presence { "_p" } else { "" }
        )
    }

    fn tag(&self, slot: usize) -> String {
        let s = match self.primitive {
            Primitive::Lock(Strategy::Lease) => 'l',
            Primitive::Lock(Strategy::Insert) => 'i',
            Primitive::Lock(Strategy::Fair) => 'q',
            Primitive::Multi => 'm',
            Primitive::Semaphore => 's',
            Primitive::RwLock => 'r',
            Primitive::Election => 'e',
            _ => 'u',
        };
        format!(
            "sqlock_f{s}{}{}{slot}",
            u8::from(self.presence),
            u8::from(self.fence)
        )
    }

    /// Whether a hold lasts at least its TTL from its request's sending, as the checks
    /// may assume: not for a for-update lock, which ends with its connection (which the
    /// driver kills); nor while the servers' clock jumps; nor with presence, which
    /// hands a dead holder's share on before its TTL (a SIGKILL, or a kill of both
    /// presence connections, which ends the holder's session too).
    fn lease_rule(&self) -> bool {
        self.primitive != Primitive::Lock(Strategy::ForUpdate)
            && !self.clock_jumps
            && !self.presence
    }

    /// What the phase asks of the workload that it has not met yet, given what its
    /// workers told so far: enough grants to mean anything, every kind of fault it
    /// injects met a holder (and a kill ended a connection), two readers of a
    /// read-write lock surely held at once (where the checks can tell, without the
    /// clock jumping), and a clock jump met it held. A workload runs past its window
    /// until all are met (at most [`overtime`]), so that none of them is left to how
    /// the faults happened to fall on a loaded machine.
    fn unmet(&self, injected: &Injected, events: &[Event]) -> Vec<&'static str> {
        let load = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        let mut unmet = Vec::new();
        let grants = events.iter().filter(|e| e.kind == Kind::Grant).count();
        if grants / self.primitive.keys() < GRANTS_A_PHASE {
            unmet.push("enough grants");
        }
        let f = self.faults;
        if f.kills && (load(&injected.kills_held) == 0 || load(&injected.connections_killed) == 0) {
            unmet.push("a kill of connections while held");
        }
        if f.pauses && load(&injected.pauses_held) == 0 {
            unmet.push("a pause while held");
        }
        if f.sigkills && load(&injected.sigkills_held) == 0 {
            unmet.push("a SIGKILL while held");
        }
        if f.partitions && load(&injected.cuts_held) == 0 {
            unmet.push("a network cut while held");
        }
        if self.primitive == Primitive::RwLock
            && !self.clock_jumps
            && !self.readers_overlapped(events)
        {
            unmet.push("two readers surely holding at once");
        }
        if self.clock_jumps && load(&self.exposure.clock_jumps) == 0 {
            unmet.push("a clock jump while held");
        }
        unmet
    }

    /// Whether two readers of different owners surely held at once, by the read-write
    /// model's reckoning of how long a hold surely lasted.
    fn readers_overlapped(&self, events: &[Event]) -> bool {
        let holds = rw_holds(&close_untold(events), self.lease_rule().then_some(TTL));
        history::check_rw(&holds).readers_overlapped
    }

    /// Starts the worker of `slot` with what is left of the run.
    fn spawn(
        &self,
        slot: usize,
        until: Instant,
        collected: &Arc<Collected>,
    ) -> anyhow::Result<Slot> {
        let tag = self.tag(slot);
        let cgroup = self
            .net
            .as_ref()
            .map(|_| format!("sqlock_{}_{tag}", self.backend.dialect));
        let args = WorkerArgs {
            dialect: self.backend.dialect,
            url: self.backend.url().to_owned(),
            table: self.backend.table.clone(),
            primitive: self.primitive,
            presence: self.presence,
            fence: self.fence,
            run_for: until.saturating_duration_since(Instant::now()),
            tag: tag.clone(),
            seed: fastrand::u64(..),
        };
        let mut command = Command::new(std::env::current_exe()?);
        if let (Some(net), Some(name)) = (&self.net, &cgroup) {
            command.env(CGROUP_ENV, net.cgroup(name)?);
        }
        let mut child = command
            .args(args.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take();
        let holding = Arc::new(AtomicBool::new(false));
        {
            let mut flags = self.exposure.holding.lock().unwrap();
            flags.resize_with(WORKERS, Default::default);
            flags[slot] = holding.clone();
        }
        let owner = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().context("worker stdout")?;
        let (flag, events, said) = (holding.clone(), collected.clone(), owner.clone());
        let of = tag.clone();
        let reader = tokio::spawn(async move {
            let collected = events;
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(e) = Event::parse(&line) {
                    collected.events.lock().unwrap().push(e);
                } else if let Some(o) = line.strip_prefix("OWNER ") {
                    *said.lock().unwrap() = o.to_owned();
                } else if let Some(h) = line.strip_prefix("HOLDING ") {
                    flag.store(h == "1", Ordering::Relaxed);
                } else if let Some((ms, step)) =
                    line.strip_prefix("SLOW ").and_then(|s| s.split_once(' '))
                {
                    let ms = ms.parse().unwrap_or(0);
                    let mut slowest = collected.slowest.lock().unwrap();
                    if ms > slowest.0 {
                        *slowest = (ms, step.to_owned());
                    }
                } else if line.starts_with("ERROR") {
                    collected.errors.fetch_add(1, Ordering::Relaxed);
                    collected.note(format!("{of} {line}"));
                    *collected.last_error.lock().unwrap() = line;
                }
            }
        });
        collected.readers.lock().unwrap().push(reader);
        Ok(Slot {
            tag,
            cgroup,
            child,
            stdin,
            holding,
            paused: Arc::new(AtomicBool::new(false)),
            owner,
        })
    }

    /// The workload's tables made afresh, and its workers' MariaDB users: tried again
    /// while a server fault of the phase before (or a slow start) is still in the way.
    async fn prepare(&self) -> anyhow::Result<DbPool> {
        through_faults(&format!("{}: preparing its tables", self.name()), || {
            self.prepare_once()
        })
        .await
    }

    async fn prepare_once(&self) -> anyhow::Result<DbPool> {
        let b = &self.backend;
        let admin = b.fresh_table().await?.pool().clone();
        let (counter, writes) = side_tables(&b.table);
        let id = match b.dialect {
            Dialect::Postgres => "BIGSERIAL PRIMARY KEY",
            _ => "BIGINT AUTO_INCREMENT PRIMARY KEY",
        };
        b.script(
            &admin,
            &format!(
                "DROP TABLE IF EXISTS {counter}; DROP TABLE IF EXISTS {writes};
                 CREATE TABLE {counter} (id BIGINT PRIMARY KEY, n BIGINT NOT NULL);
                 CREATE TABLE {writes} (id {id}, slot BIGINT NOT NULL, value BIGINT NOT NULL,
                     token BIGINT NOT NULL, owner VARCHAR(64) NOT NULL);"
            ),
        )
        .await?;
        for slot in 0..self.primitive.counters() {
            b.script(
                &admin,
                &format!("INSERT INTO {counter} (id, n) VALUES ({slot}, 0)"),
            )
            .await?;
        }
        if b.dialect == Dialect::MySql {
            for slot in 0..WORKERS {
                let user = self.tag(slot);
                b.script(
                    &admin,
                    &format!(
                        "CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY 'fault';
                         GRANT ALL PRIVILEGES ON *.* TO '{user}'@'127.0.0.1';"
                    ),
                )
                .await?;
            }
        }
        Ok(admin)
    }

    async fn run(self) -> anyhow::Result<Report> {
        let b = &self.backend;
        let port = common::port_of(b.url())?;
        let preparing = Instant::now();
        let admin = self.prepare().await?;
        let prepared_in = preparing.elapsed();
        let collected = Arc::new(Collected::default());
        let injected = Injected::default();
        // The window, and how long past it the workload may run to meet what the phase
        // asks of it; workers run until told to stop, at the latest then.
        let until = Instant::now() + self.run_for;
        let latest = until + overtime(self.run_for);
        let mut slots = Vec::new();
        for slot in 0..WORKERS {
            slots.push(self.spawn(slot, latest, &collected)?);
        }
        // The cuts in place, each healed by a task of its own after its length, or
        // early when the run ends; each says what its rules dropped.
        let mut cuts = tokio::task::JoinSet::new();
        let (end_cuts, cuts_ended) = tokio::sync::watch::channel(false);
        // The first faults go through every kind in turn, so that each kind is met at
        // least once in a run (the phase's check asserts it); the rest are drawn.
        let mut injections = 0usize;
        loop {
            // Past the window, the workload goes on only while the phase asks something
            // of it, and then meets faults only of the kinds still due, each aimed at a
            // holder: the other goals (grants, readers sharing) come sooner without.
            let overtime = Instant::now() >= until;
            if overtime
                && (Instant::now() >= latest
                    || self
                        .unmet(&injected, &collected.events.lock().unwrap())
                        .is_empty())
            {
                break;
            }
            // The next fault falls due 300 to 800 ms after the last.
            let next = Instant::now() + Duration::from_millis(fastrand::u64(300..800));
            let mut kinds = Vec::new();
            if self.faults.kills {
                kinds.extend(["kill", "kill"]);
            }
            if self.faults.pauses {
                kinds.extend(["pause", "pause"]);
            }
            if self.faults.sigkills {
                kinds.push("sigkill");
                // Presence is about dead holders: more of them.
                if self.presence {
                    kinds.extend(["sigkill", "sigkill", "sigkill"]);
                }
            }
            if self.faults.partitions {
                kinds.extend(["cut", "cut"]);
            }
            let mut distinct = kinds.clone();
            distinct.dedup();
            // The kinds still due this phase: those that have not met a holder yet, and
            // kills until one has ended a connection (the phase's check asks both).
            let due = |k: &&str| {
                injected.held(k).load(Ordering::Relaxed) == 0
                    || (*k == "kill" && injected.connections_killed.load(Ordering::Relaxed) == 0)
            };
            let unmet: Vec<&str> = distinct.iter().copied().filter(due).collect();
            // Faults hit the holder more often than not: that is where they matter; and
            // always while a kind is due, for which the fault is aimed: from 200 ms
            // after the last until it falls due, it goes as soon as a worker holds and
            // is neither paused nor cut off. A primitive that holds seldom (a queue
            // stalled behind its faults) would otherwise leave it to chance whether each
            // kind meets it; and the faults come no less often for it.
            let free_holder = |slots: &[Slot], i: usize| {
                slots[i].holding.load(Ordering::Relaxed) && !slots[i].paused.load(Ordering::Relaxed)
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            while Instant::now() < next
                && (unmet.is_empty() || !(0..WORKERS).any(|i| free_holder(&slots, i)))
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            while let Some(healed) = cuts.try_join_next() {
                let (direction, dropped) = healed??;
                injected.healed(direction, dropped);
            }
            let holders: Vec<usize> = (0..WORKERS).filter(|&i| free_holder(&slots, i)).collect();
            if overtime && (unmet.is_empty() || holders.is_empty()) {
                continue;
            }
            let target = if !holders.is_empty() && (!unmet.is_empty() || fastrand::f32() < 0.7) {
                holders[fastrand::usize(..holders.len())]
            } else {
                fastrand::usize(..WORKERS)
            };
            // Every worker's tag, for a kill round that found no session of its target.
            let tags: Vec<String> = slots.iter().map(|s| s.tag.clone()).collect();
            let slot = &mut slots[target];
            if slot.paused.load(Ordering::Relaxed) {
                continue;
            }
            let holding = slot.holding.load(Ordering::Relaxed);
            // A holder meets the kind still due that was injected least so far (every
            // kind in turn, whichever met a holder first), so that every kind is shown
            // to reach the primitive held, however seldom a holder is found; the first
            // faults go through every kind in turn either way.
            let injected_of = |k: &str| match k {
                "kill" => injected.kill_rounds.load(Ordering::Relaxed),
                "pause" => injected.pauses.load(Ordering::Relaxed),
                "sigkill" => injected.sigkills.load(Ordering::Relaxed),
                _ => injected.cuts(),
            };
            let least_due = unmet.iter().copied().min_by_key(|k| injected_of(k));
            let kind = match (holding, least_due, distinct.get(injections)) {
                (true, Some(kind), _) | (false, _, Some(&kind)) => kind,
                _ if unmet.contains(&"kill")
                    && injected.connections_killed.load(Ordering::Relaxed) == 0 =>
                {
                    "kill"
                }
                _ => kinds[fastrand::usize(..kinds.len())],
            };
            injections += 1;
            collected.note(format!("{kind} aimed at {} (holding: {holding})", slot.tag));
            match kind {
                "kill" => {
                    let mut n = common::kill::kill(b, &admin, &slot.tag).await.unwrap_or(0);
                    // A worker between statements may have no session open: the round
                    // goes on to the other workers' sessions until it ends one, so that
                    // every round ends a connection (the phase's check asks it of
                    // each phase, which has only a handful of kill rounds).
                    for tag in tags.iter().filter(|t| **t != slot.tag) {
                        if n > 0 {
                            break;
                        }
                        n = common::kill::kill(b, &admin, tag).await.unwrap_or(0);
                    }
                    Injected::aimed(&injected.kill_rounds, injected.held(kind), holding);
                    injected
                        .connections_killed
                        .fetch_add(usize::try_from(n).unwrap_or(0), Ordering::Relaxed);
                }
                "pause" => {
                    let Some(pid) = slot.pid() else { continue };
                    // Past the TTL, so that the lease lapses while the holder sleeps.
                    let pause = TTL + Duration::from_millis(fastrand::u64(300..1300));
                    if signal(pid, Signal::SIGSTOP).is_ok() {
                        Injected::aimed(&injected.pauses, injected.held(kind), holding);
                        slot.paused.store(true, Ordering::Relaxed);
                        let paused = slot.paused.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(pause).await;
                            let _ = signal(pid, Signal::SIGCONT);
                            paused.store(false, Ordering::Relaxed);
                        });
                    }
                }
                "cut" => {
                    let (Some(net), Some(name)) = (&self.net, &slot.cgroup) else {
                        continue;
                    };
                    let d = fastrand::usize(..3);
                    // Half of the cuts end before the lease could lapse, half after.
                    let long = fastrand::bool();
                    let length = if long {
                        TTL + Duration::from_millis(fastrand::u64(500..3000))
                    } else {
                        Duration::from_millis(fastrand::u64(200..800))
                    };
                    let direction = Direction::ALL[d];
                    // Off the runtime's threads: `nft` runs as a process of its own,
                    // and every workload's driver shares those threads.
                    let cut = {
                        let (net, name) = (Arc::clone(net), name.clone());
                        tokio::task::spawn_blocking(move || net.cut(&name, port, direction))
                            .await??
                    };
                    injected.cuts_by_direction[d].fetch_add(1, Ordering::Relaxed);
                    if holding {
                        injected.held(kind).fetch_add(1, Ordering::Relaxed);
                    }
                    if long {
                        injected.cuts_long.fetch_add(1, Ordering::Relaxed);
                    } else {
                        injected.cuts_short.fetch_add(1, Ordering::Relaxed);
                    }
                    slot.paused.store(true, Ordering::Relaxed);
                    let (paused, net) = (slot.paused.clone(), net.clone());
                    let mut ended = cuts_ended.clone();
                    cuts.spawn(async move {
                        tokio::select! {
                            _ = tokio::time::sleep(length) => {}
                            _ = ended.wait_for(|e| *e) => {}
                        }
                        let dropped = tokio::task::spawn_blocking(move || net.heal(cut)).await?;
                        paused.store(false, Ordering::Relaxed);
                        anyhow::Ok((direction, dropped?))
                    });
                }
                _ => {
                    // What the worker holds, as the table has it just before the kill
                    // (its word on holding comes a moment late): read once it is
                    // stopped and what it had sent is done; then its sessions are
                    // ended, so that nothing of it can commit any more, and it is
                    // killed.
                    let owner = slot.owner.lock().unwrap().clone();
                    let held = match slot.pid() {
                        Some(pid) if holding && signal(pid, Signal::SIGSTOP).is_ok() => {
                            tokio::time::sleep(Duration::from_millis(30)).await;
                            let held = live_holds(b, &admin, &owner).await.unwrap_or_default();
                            match sessions_ended(b, &admin, &slot.tag).await {
                                Ok(true) => held,
                                _ => Vec::new(),
                            }
                        }
                        _ => Vec::new(),
                    };
                    let _ = slot.child.start_kill();
                    let killed = history::now();
                    let _ = slot.child.wait().await;
                    Injected::aimed(&injected.sigkills, injected.held(kind), holding);
                    if !held.is_empty() {
                        injected.victims.lock().unwrap().push((killed, held));
                    }
                    *slot = self.spawn(target, latest, &collected)?;
                }
            }
        }
        // Every worker is told to stop (its input closed) and ends at its next turn; a
        // cut one is healed and a paused one woken first. Each cut's rules are read and
        // taken away by their own task (the workloads of a phase share the rule table,
        // so none flushes it).
        let ran_for = self.run_for + Instant::now().saturating_duration_since(until);
        end_cuts.send_replace(true);
        while let Some(healed) = cuts.join_next().await {
            let (direction, dropped) = healed??;
            injected.healed(direction, dropped);
        }
        for slot in &mut slots {
            drop(slot.stdin.take());
            if let Some(pid) = slot.pid() {
                let _ = signal(pid, Signal::SIGCONT);
            }
            match tokio::time::timeout(Duration::from_secs(30), slot.child.wait()).await {
                Ok(status) => {
                    let status = status?;
                    anyhow::ensure!(
                        status.success(),
                        "{}: a worker failed: {status} (the last error told: {})",
                        self.name(),
                        collected.last_error.lock().unwrap()
                    );
                }
                Err(_) => anyhow::bail!("{}: a worker did not stop", self.name()),
            }
        }
        // Every line the workers printed, read to the end of their output.
        let readers = std::mem::take(&mut *collected.readers.lock().unwrap());
        for reader in readers {
            tokio::time::timeout(Duration::from_secs(30), reader)
                .await
                .with_context(|| format!("{}: a worker's output never ended", self.name()))??;
        }
        let events = collected.events.lock().unwrap().clone();
        let unmet = self.unmet(&injected, &events);
        let (counter, writes) = side_tables(&b.table);
        // The workload's figures, read once its workers are done: a server fault that
        // began before the deadline may still be under way, so each read waits it out.
        let name = self.name();
        let scalar = |sql: String| {
            let (admin, name) = (admin.clone(), name.clone());
            async move { through_faults(&format!("{name}: {sql}"), || b.scalar(&admin, &sql)).await }
        };
        let lease_rule = self.lease_rule();
        // A for-update grant a crash rolled back, whose token the next holder got again
        // (a known defect, see docs/guarantees.md): counted, and left out of the
        // history, as the database has it.
        let (events, reissued) = if self.primitive == Primitive::Lock(Strategy::ForUpdate) {
            rolled_back_grants(&events, &self.exposure.crashed_at.lock().unwrap())
        } else {
            (events, 0)
        };
        let closed = close_untold(&events);
        let (mut verdict, readers_overlapped) = match self.primitive {
            Primitive::Semaphore => {
                let ttl = if lease_rule { TTL } else { Duration::ZERO };
                let n = usize::try_from(worker::PERMITS)?;
                (
                    tally(&events, common::permits::check(&closed, n, ttl)),
                    false,
                )
            }
            Primitive::RwLock => {
                let mut holds = rw_holds(&closed, lease_rule.then_some(TTL));
                // A read hold's row is its own: a writer's grant of the name leaves it.
                // Should the clock jump forward past a read's expiry (a writer may come)
                // and back again, the read's row is unexpired once more and its release
                // accepted, though a writer held meanwhile (a known limitation, see
                // docs/guarantees.md): with the clock jumping, only the writes, which
                // share the name's one row, are checked against each other.
                if self.clock_jumps {
                    holds.retain(|h| h.write);
                }
                let v = history::check_rw(&holds);
                let verdict = Verdict {
                    violations: v.violations,
                    ..Verdict::default()
                };
                (tally(&events, verdict), v.readers_overlapped)
            }
            _ if lease_rule => (history::check_leases(&events, TTL), false),
            _ => (history::check(&events), false),
        };
        verdict.violations.truncate(20);
        let takeovers = takeovers(&events, &injected.victims.lock().unwrap(), self.clock_jumps);
        let last_error = collected.last_error.lock().unwrap().clone();
        let slowest = collected.slowest.lock().unwrap().clone();
        let log = std::mem::take(&mut *collected.log.lock().unwrap());
        Ok(Report {
            name: self.name(),
            dialect: b.dialect,
            primitive: self.primitive,
            presence: self.presence,
            fence: self.fence,
            verdict,
            readers_overlapped,
            reissued,
            exposure: self.exposure.clone(),
            takeovers,
            events,
            injected,
            rows: scalar(format!("SELECT COUNT(*) FROM {writes}")).await?,
            counter: scalar(format!(
                "SELECT CAST(SUM(n) AS {}) FROM {counter}",
                match b.dialect {
                    Dialect::Postgres => "BIGINT",
                    _ => "SIGNED",
                }
            ))
            .await?,
            distinct: scalar(format!(
                "SELECT COUNT(*) FROM (SELECT DISTINCT slot, value FROM {writes}) d"
            ))
            .await?,
            falling_tokens: scalar(format!(
                "SELECT COUNT(*) FROM {writes} a JOIN {writes} b \
                 ON b.slot = a.slot AND b.value = a.value + 1 WHERE b.token < a.token"
            ))
            .await?,
            errors: collected.errors.load(Ordering::Relaxed),
            prepared_in,
            last_error,
            ran_for,
            unmet,
            slowest,
            log,
        })
    }
}

/// The events without the for-update holds that a server crash rolled back and whose
/// token a later grant drew again: a hold with no accepted write (its commit never
/// came), a crash after its grant and before the request of a later grant of the same
/// token. Also how many there were.
fn rolled_back_grants(events: &[Event], crashes: &[(u64, u64)]) -> (Vec<Event>, usize) {
    let grants: Vec<&Event> = events.iter().filter(|e| e.kind == Kind::Grant).collect();
    let mut gone: Vec<(&str, &str, i64)> = Vec::new();
    for a in &grants {
        let committed = events.iter().any(|e| {
            e.kind == Kind::Write && e.key == a.key && e.owner == a.owner && e.token == a.token
        });
        let again = grants.iter().any(|b| {
            b.key == a.key
                && b.owner != a.owner
                && b.token == a.token
                && crashes
                    .iter()
                    .any(|(from, to)| *from < b.sent && a.ack < *to)
        });
        if !committed && again {
            gone.push((a.key.as_str(), a.owner.as_str(), a.token));
        }
    }
    let kept = events
        .iter()
        .filter(|e| {
            !gone
                .iter()
                .any(|(k, o, t)| e.key == *k && e.owner == *o && e.token == *t)
        })
        .cloned()
        .collect();
    (kept, gone.len())
}

/// The events, and for the last hold of each owner that never told how it ended (its
/// worker SIGKILLed, perhaps in the middle of its release, which may have gone
/// through), an unknown outcome at the last moment it told of: the lease rule of the
/// semaphore's and the read-write lock's models then leaves that hold's unknown rest
/// out, as the mutex's checker does.
fn close_untold(events: &[Event]) -> Vec<Event> {
    let mut out = events.to_vec();
    let mut last: std::collections::BTreeMap<&str, &Event> = std::collections::BTreeMap::new();
    for g in events.iter().filter(|e| e.kind == Kind::Grant) {
        let entry = last.entry(g.owner.as_str()).or_insert(g);
        if g.ack > entry.ack {
            *entry = g;
        }
    }
    for g in last.into_values() {
        let of_hold = |e: &&Event| e.key == g.key && e.owner == g.owner && e.token == g.token;
        let told = events
            .iter()
            .filter(of_hold)
            .any(|e| matches!(e.kind, Kind::Release | Kind::ReleaseRefused | Kind::Unknown));
        if !told {
            let at = events
                .iter()
                .filter(of_hold)
                .map(|e| e.ack)
                .max()
                .unwrap_or(g.ack);
            out.push(Event {
                kind: Kind::Unknown,
                sent: at,
                ack: at,
                ..g.clone()
            });
        }
    }
    out
}

/// Counts the kinds of events into `verdict`, for the models that check holds only.
fn tally(events: &[Event], mut verdict: Verdict) -> Verdict {
    let count = |k: Kind| events.iter().filter(|e| e.kind == k).count();
    verdict.grants = count(Kind::Grant);
    verdict.writes = count(Kind::Write);
    verdict.releases = count(Kind::Release);
    verdict.rejected = count(Kind::Rejected);
    verdict.unknown = count(Kind::Unknown);
    verdict
}

/// The holds of a read-write lock's history, each until when it surely held: the
/// sending of its accepted release; without one, the sending of its last fenced write
/// the database accepted (a lease, once lapsed, is never held again), or, under the
/// lease rule (`ttl`), its request's sending plus the TTL less a slack for clock rates,
/// ended early by a refused or unknown release or write.
fn rw_holds(events: &[Event], ttl: Option<Duration>) -> Vec<history::RwHold> {
    let mut holds = Vec::new();
    for g in events.iter().filter(|e| e.kind == Kind::Grant) {
        let of_grant = |k: Kind| {
            events
                .iter()
                .filter(|e| {
                    e.kind == k && e.key == g.key && e.owner == g.owner && e.token == g.token
                })
                .map(|e| e.sent)
                .min()
        };
        let end = match of_grant(Kind::Release) {
            Some(released) => released,
            None => {
                let written = of_grant(Kind::Write).unwrap_or(0);
                let lapse = ttl.map_or(0, |ttl| {
                    let ttl = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
                    let slack = ttl / 50 + 20_000_000;
                    [of_grant(Kind::ReleaseRefused), of_grant(Kind::Unknown)]
                        .into_iter()
                        .flatten()
                        .fold(g.sent.saturating_add(ttl).saturating_sub(slack), u64::min)
                });
                written.max(lapse)
            }
        };
        if end > g.ack {
            holds.push(history::RwHold {
                write: !g.key.contains("@read:"),
                owner: g.owner.clone(),
                token: g.token,
                sent: g.sent,
                ack: g.ack,
                end,
            });
        }
    }
    holds
}

/// What became of a SIGKILLed holder's keys: how long after the kill the next holder
/// had them all, and whether it had them before the victim's lease could have expired.
#[derive(Debug, Clone, Copy)]
struct Takeover {
    after: Duration,
    before_expiry: bool,
}

/// For each SIGKILLed holder (`victims`) whose keys were all granted again: the
/// takeover. While the servers' clock jumps (`clock_jumps`) none counts as before the
/// expiry: a jump may have ended the lease early (and a server may see a new offset a
/// moment after it was set).
fn takeovers(events: &[Event], victims: &[Victim], clock_jumps: bool) -> Vec<Takeover> {
    // As the checkers allow for the database clock's rate.
    let slack = u64::try_from((TTL / 50 + Duration::from_millis(20)).as_nanos()).unwrap_or(0);
    let mut found = Vec::new();
    for (killed, held) in victims {
        let next: Option<Vec<(u64, &LiveHold)>> = held
            .iter()
            .map(|h| {
                events
                    .iter()
                    .filter(|e| e.kind == Kind::Grant && e.key == h.key && e.token > h.token)
                    .map(|e| e.ack)
                    .min()
                    .map(|ack| (ack, h))
            })
            .collect();
        let Some(next) = next else { continue };
        let Some(last) = next.iter().map(|(ack, _)| *ack).max() else {
            continue;
        };
        found.push(Takeover {
            after: Duration::from_nanos(last.saturating_sub(*killed)),
            before_expiry: !clock_jumps
                && next
                    .iter()
                    .all(|(ack, h)| ack.saturating_add(slack) < h.expires),
        });
    }
    found
}

/// Ends every session of the worker tagged `tag` on the server and waits until they
/// are gone: whether they went within 2 s.
async fn sessions_ended(b: &Backend, admin: &DbPool, tag: &str) -> anyhow::Result<bool> {
    common::kill::kill(b, admin, tag).await?;
    let left = match b.dialect {
        Dialect::Postgres => {
            format!("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = '{tag}'")
        }
        _ => format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '{tag}'"),
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        if b.scalar(admin, &left).await? == 0 {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(false)
}

/// Runs `attempt` until it succeeds, through the server faults of the phase: a crash,
/// stop or restart resets the driver's connections and refuses new ones for a while.
/// Gives up after 90 s (longer than any fault keeps a server down), with the last
/// error and `what` was being done.
async fn through_faults<T, F, Fut>(what: &str, mut attempt: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let started = Instant::now();
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(e) if started.elapsed() < Duration::from_secs(90) => {
                note_retry(what, &e);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.context(format!("{what} (tried for 90 s)"))),
        }
    }
}

/// Says on standard error that a statement of the driver's was refused and is tried
/// again, so that a run that later fails shows what it met.
fn note_retry(what: &str, e: &anyhow::Error) {
    eprintln!("faults: {what}: {e:#}; trying again");
}

/// The keys `owner` holds unexpired in the workload's table, with their tokens and a
/// moment no later than their expiry: the query's sending plus the time the server
/// said was left.
async fn live_holds(b: &Backend, admin: &DbPool, owner: &str) -> anyhow::Result<Vec<LiveHold>> {
    let t = b.quoted();
    let (left, now, param) = match b.dialect {
        Dialect::Postgres => (
            "CAST(extract(epoch FROM expires_at - clock_timestamp()) * 1000000 AS BIGINT)",
            "clock_timestamp()",
            "$1",
        ),
        _ => (
            "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)",
            "UTC_TIMESTAMP(6)",
            "?",
        ),
    };
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT lock_key, fencing_token, {left} FROM {t} \
         WHERE lock_owner = {param} AND locked AND expires_at > {now}"
    ));
    let sent = history::now();
    let rows: Vec<(String, i64, i64)> = match admin {
        DbPool::Postgres(p) => sqlx::query_as(sql).bind(owner).fetch_all(p).await?,
        DbPool::MySql(p) => sqlx::query_as(sql).bind(owner).fetch_all(p).await?,
        _ => anyhow::bail!("the fault workload runs on the servers"),
    };
    Ok(rows
        .into_iter()
        .map(|(key, token, left_us)| LiveHold {
            key,
            token,
            expires: sent.saturating_add(u64::try_from(left_us).unwrap_or(0) * 1000),
        })
        .collect())
}

/// A fault of the whole server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerFault {
    /// A crash the server restarts from at once. PostgreSQL: its WAL writer is
    /// SIGKILLed, and the postmaster ends every session and restarts the server in
    /// place, shared memory and the WAL not yet written dropped, in a fraction of the
    /// TTL. MariaDB: the server process is SIGKILLed and started again.
    Crash,
    /// A clean stop (a shutdown checkpoint), down for 1.5 s, and a start.
    Restart,
    /// An immediate stop, nothing flushed nor checkpointed (PostgreSQL: the postmaster
    /// sent SIGQUIT and the WAL writer SIGKILLed; MariaDB: SIGKILL), down for 1.5 s,
    /// longer than the TTL, and a start.
    CrashStop,
}

/// The order the server faults of a phase come in: each phase starts with another,
/// so that a run of the default length, which has room for two or three a phase,
/// meets every kind.
fn server_faults_order(phase: usize) -> [ServerFault; 3] {
    use ServerFault::*;
    match phase % 3 {
        0 => [Crash, Restart, CrashStop],
        1 => [CrashStop, Crash, Restart],
        _ => [Restart, CrashStop, Crash],
    }
}

/// What the server faults of one server did in a phase.
#[derive(Debug, Default, Clone, Copy)]
struct ServerFaults {
    restarts: usize,
    crashes: usize,
    /// Crashes that lost work, shown by a probe (PostgreSQL: a commit made just before
    /// the crash, asynchronous, with the WAL writer stopped, gone after it) or by the
    /// server (MariaDB: its log says it recovered from its redo log).
    crashes_shown: usize,
    /// Crashes after which PostgreSQL restarted in place (the postmaster stayed).
    in_place: usize,
    /// The shortest and longest time from a crash or a stop to the server's answer, ms.
    down_min_ms: u128,
    down_max_ms: u128,
}

impl ServerFaults {
    fn add(&mut self, o: &ServerFaults) {
        self.restarts += o.restarts;
        self.crashes += o.crashes;
        self.crashes_shown += o.crashes_shown;
        self.in_place += o.in_place;
        self.down_min_ms = match (self.down_min_ms, o.down_min_ms) {
            (0, m) | (m, 0) => m,
            (a, b) => a.min(b),
        };
        self.down_max_ms = self.down_max_ms.max(o.down_max_ms);
    }

    fn down(&mut self, d: Duration) {
        let ms = d.as_millis().max(1);
        self.down_min_ms = if self.down_min_ms == 0 {
            ms
        } else {
            self.down_min_ms.min(ms)
        };
        self.down_max_ms = self.down_max_ms.max(ms);
    }
}

/// Runs the fault script on a fault server.
async fn fault_script(dialect: Dialect, action: &str) -> anyhow::Result<String> {
    let server = match dialect {
        Dialect::Postgres => "postgres",
        _ => "mariadb",
    };
    let out = Command::new("bash")
        .args(["scripts/fault-db.sh", server, action])
        .stderr(Stdio::inherit())
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "fault-db.sh {server} {action}: {}",
        out.status
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A pool on `b` once its server answers again.
async fn answering(b: &Backend) -> anyhow::Result<DbPool> {
    let started = Instant::now();
    loop {
        if let Ok(pool) = b.pool_with(2).await {
            let one = match b.dialect {
                Dialect::Postgres => "SELECT CAST(1 AS BIGINT)",
                _ => "SELECT CAST(1 AS SIGNED)",
            };
            if b.scalar(&pool, one).await.is_ok() {
                return Ok(pool);
            }
            pool.close().await;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "{}: the server did not answer within 60 s",
            b.dialect
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Continues stopped processes however the crash below ends, an error included.
struct Continue(Vec<Pid>);

impl Drop for Continue {
    fn drop(&mut self) {
        for pid in self.0.drain(..) {
            let _ = signal(pid, Signal::SIGCONT);
        }
    }
}

/// Crashes PostgreSQL with a commit at risk: its WAL writer and every other process
/// of the server that could write the WAL out (the sessions of the workers, the
/// checkpointer, the background writer) are stopped, a probe commits asynchronously
/// (nobody writes it to the kernel then), and the WAL writer is SIGKILLed at once,
/// which makes the postmaster restart the server in place; with `stop_for`, the
/// postmaster is sent SIGQUIT first (an immediate stop), and the server is started
/// again after that long. The stopped processes are continued once the postmaster has
/// told them to quit, which they then do at once. Counts the crash, whether the
/// probe's commit was lost, and whether the server restarted in place.
async fn crash_postgres(
    b: &Backend,
    stop_for: Option<Duration>,
    faults: &mut ServerFaults,
) -> anyhow::Result<()> {
    let admin = b.pool_with(2).await?;
    let DbPool::Postgres(pg) = &admin else {
        anyhow::bail!("not PostgreSQL")
    };
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS faults_crash_probe (id INT PRIMARY KEY, n BIGINT NOT NULL);
         INSERT INTO faults_crash_probe VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
    )
    .execute(pg)
    .await?;
    let walwriter: i32 =
        sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'")
            .fetch_one(pg)
            .await?;
    let started: i64 = sqlx::query_scalar(
        "SELECT CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)",
    )
    .fetch_one(pg)
    .await?;
    let stat = std::fs::read_to_string(format!("/proc/{walwriter}/stat"))?;
    let postmaster: i32 = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(1))
        .context("the WAL writer's parent")?
        .parse()?;
    let walwriter = Pid::from_raw(walwriter);
    // A session that must end with the crash: until it has, the server answering is
    // the server of before, which has not crashed yet (the postmaster learns of the
    // WAL writer's death a moment after the kill).
    let mut witness = pg.acquire().await?;
    let mut probe = pg.begin().await?;
    sqlx::query("SET LOCAL synchronous_commit = off")
        .execute(&mut *probe)
        .await?;
    let committed: i64 =
        sqlx::query_scalar("UPDATE faults_crash_probe SET n = n + 1 WHERE id = 1 RETURNING n")
            .fetch_one(&mut *probe)
            .await?;
    let ours: Vec<i32> = vec![
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *witness)
            .await?,
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *probe)
            .await?,
    ];
    let others: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE pid <> ALL($1) AND backend_type <> 'walwriter'",
    )
    .bind(&ours)
    .fetch_all(&mut *witness)
    .await?;
    let mut resume = Continue(Vec::new());
    for pid in std::iter::once(walwriter).chain(others.into_iter().map(Pid::from_raw)) {
        // A process gone meanwhile is no matter.
        if signal(pid, Signal::SIGSTOP).is_ok() {
            resume.0.push(pid);
        }
    }
    // A stopped process may hold a lock the commit needs: then this crash is given up
    // (the processes go on; the caller tries again).
    match tokio::time::timeout(Duration::from_secs(3), probe.commit()).await {
        Ok(committed) => committed?,
        Err(_) => {
            drop(resume);
            return Ok(());
        }
    }
    if stop_for.is_some() {
        signal(Pid::from_raw(postmaster), Signal::SIGQUIT)?;
    }
    signal(walwriter, Signal::SIGKILL)?;
    let crashed = Instant::now();
    while sqlx::query("SELECT 1").execute(&mut *witness).await.is_ok() {
        anyhow::ensure!(
            crashed.elapsed() < Duration::from_secs(30),
            "the server did not crash"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The postmaster told every process to quit (the witness's session ended): the
    // stopped ones quit on continuing, before writing anything.
    drop(resume);
    drop(witness);
    drop(admin);
    if let Some(down) = stop_for {
        let gone = Instant::now();
        while std::path::Path::new(&format!("/proc/{postmaster}")).exists() {
            anyhow::ensure!(
                gone.elapsed() < Duration::from_secs(30),
                "the postmaster did not stop"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(down).await;
        fault_script(Dialect::Postgres, "start").await?;
    }
    let admin = answering(b).await?;
    faults.down(crashed.elapsed());
    let DbPool::Postgres(pg) = &admin else {
        anyhow::bail!("not PostgreSQL")
    };
    let after: i64 = sqlx::query_scalar("SELECT n FROM faults_crash_probe WHERE id = 1")
        .fetch_one(pg)
        .await?;
    let restarted: i64 = sqlx::query_scalar(
        "SELECT CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)",
    )
    .fetch_one(pg)
    .await?;
    admin.close().await;
    faults.crashes += 1;
    if after < committed {
        faults.crashes_shown += 1;
    }
    if restarted == started {
        faults.in_place += 1;
    }
    Ok(())
}

/// Crashes MariaDB: the server process SIGKILLed (every commit it acknowledged was
/// flushed; what it had not committed is rolled back from its redo and undo logs at
/// the next start, which its log says), started again at once or after `stop_for`.
async fn crash_mariadb(
    b: &Backend,
    stop_for: Option<Duration>,
    faults: &mut ServerFaults,
) -> anyhow::Result<()> {
    let recovered = |text: String| text.parse::<usize>().context("a count of recoveries");
    let before = recovered(fault_script(b.dialect, "recoveries").await?)?;
    fault_script(b.dialect, "crash").await?;
    let crashed = Instant::now();
    if let Some(down) = stop_for {
        tokio::time::sleep(down).await;
    }
    fault_script(b.dialect, "start").await?;
    answering(b).await?.close().await;
    faults.down(crashed.elapsed());
    faults.crashes += 1;
    if recovered(fault_script(b.dialect, "recoveries").await?)? > before {
        faults.crashes_shown += 1;
    }
    Ok(())
}

/// Crashes, restarts and stops a fault server at random moments of the run, in the
/// order `order` gives: 15% to 30% of a run of the default length apart (two or three
/// a phase), about every minute or two in a longer one, never in the last five
/// seconds. A crash that lost nothing (PostgreSQL: the probe's commit survived, since
/// a durable commit of a worker flushed it first) is followed by another at once, up
/// to three, so that the phase shows a crash losing work. Each fault is counted on
/// every workload of `exposed` that held at its moment.
async fn server_faults(
    b: Backend,
    run_for: Duration,
    order: [ServerFault; 3],
    exposed: Vec<Arc<Exposure>>,
) -> anyhow::Result<ServerFaults> {
    let start = Instant::now();
    let until = start + run_for;
    let every = (run_for / 2).min(Duration::from_secs(120));
    let mut faults = ServerFaults::default();
    for kind in order.iter().cycle() {
        let wait = every.mul_f64(0.3 + 0.3 * fastrand::f64());
        if Instant::now() + wait + Duration::from_secs(5) > until {
            break;
        }
        tokio::time::sleep(wait).await;
        let at = history::now();
        let stop_for = Duration::from_millis(1500);
        match kind {
            ServerFault::Restart => {
                Exposure::met(&exposed, |e| &e.restarts);
                fault_script(b.dialect, "stop").await?;
                let stopped = Instant::now();
                tokio::time::sleep(stop_for).await;
                fault_script(b.dialect, "start").await?;
                answering(&b).await?.close().await;
                faults.down(stopped.elapsed());
                faults.restarts += 1;
            }
            crash => {
                let stop_for = (*crash == ServerFault::CrashStop).then_some(stop_for);
                for _ in 0..5 {
                    let shown = faults.crashes_shown;
                    Exposure::met(&exposed, |e| &e.crashes);
                    let at = history::now();
                    for e in &exposed {
                        e.crashed_at.lock().unwrap().push((at, u64::MAX));
                    }
                    match b.dialect {
                        Dialect::Postgres => crash_postgres(&b, stop_for, &mut faults).await?,
                        _ => crash_mariadb(&b, stop_for, &mut faults).await?,
                    }
                    let done = history::now();
                    for e in &exposed {
                        for c in e.crashed_at.lock().unwrap().iter_mut() {
                            if c.0 == at {
                                c.1 = done;
                            }
                        }
                    }
                    if faults.crashes_shown > shown {
                        break;
                    }
                }
            }
        }
        println!(
            "{}: {kind:?} {:.1}s into the run (from {at} to {} on the events' clock)",
            b.dialect,
            start.elapsed().as_secs_f64(),
            history::now()
        );
    }
    Ok(faults)
}

/// What the clock jumper did.
#[derive(Debug, Default, Clone, Copy)]
struct Jumps {
    forward: usize,
    backward: usize,
    /// The furthest the servers' clock was ahead of the true time, and behind, in s.
    ahead: i64,
    behind: i64,
}

/// Moves both fault servers' clock until `ended` says every workload of the phase
/// has ended (a workload's window opens once its tables are made, which a server
/// fault can hold up, so a window fixed at the driver's start could miss a late one).
/// Every 1 to 3 s it jumps, in turn, 2 to 6 s forward (past the 1 s TTL: every lease
/// of the moment lapses at once, its holder still running) and 2 to 8 s back (leases
/// last that much longer), never more than 10 s behind the true time, and puts the
/// true time back at the end. Each jump is counted on every workload of `exposed`
/// that held at its moment.
async fn jump_clock(
    ended: tokio::sync::watch::Receiver<bool>,
    exposed: Vec<Arc<Exposure>>,
) -> anyhow::Result<Jumps> {
    let _true_time = clock::Reset;
    let mut offset = 0_i64;
    let mut jumps = Jumps::default();
    let unmet = |e: &Arc<Exposure>| e.clock_jumps.load(Ordering::Relaxed) == 0;
    'jumps: loop {
        // Paced a jump every 1 to 3 s, and aimed as the other faults are: while a
        // workload has not met a jump held, the driver watches the whole time and
        // jumps as soon as one of those holds (a primitive that holds seldom, a fair
        // queue stalled for a TTL behind each paused head, would slip between paced
        // jumps otherwise), though never sooner than the servers see a jump. Paced
        // jumps wait no longer for an unmet workload to hold: the first each way up
        // to 2 s more, later ones as long as the phase lasts, so that chance never
        // decides whether a seldom holder meets a jump at all.
        let last = Instant::now();
        let next = last + Duration::from_millis(fastrand::u64(1000..3000));
        let aiming = (jumps.backward == 0).then(|| next + Duration::from_secs(2));
        loop {
            if *ended.borrow() {
                break 'jumps;
            }
            let now = Instant::now();
            let waiting = exposed.iter().any(unmet);
            if waiting
                && now >= last + clock::SEEN_WITHIN
                && exposed.iter().any(|e| unmet(e) && e.held())
            {
                break;
            }
            if now >= next && (!waiting || aiming.is_some_and(|a| now >= a)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if jumps.forward == jumps.backward {
            offset += fastrand::i64(2..=6);
            jumps.forward += 1;
        } else {
            offset = (offset - fastrand::i64(2..=8)).max(-10);
            jumps.backward += 1;
        }
        jumps.ahead = jumps.ahead.max(offset);
        jumps.behind = jumps.behind.max(-offset);
        Exposure::met(&exposed, |e| &e.clock_jumps);
        clock::set(offset)?;
    }
    clock::set(0)?;
    Ok(jumps)
}

/// Checks that the servers do follow the offset file, so that a clock phase cannot
/// pass without its jumps: each server's clock reads about 1000 s ahead while the
/// file says so, and the true time again after.
async fn verify_clock(servers: &[Backend]) -> anyhow::Result<()> {
    let _true_time = clock::Reset;
    for (offset, what) in [(1000, "1000 s ahead"), (0, "the true time")] {
        clock::set(offset)?;
        tokio::time::sleep(clock::SEEN_WITHIN).await;
        for b in servers {
            let pool = b.pool().await?;
            let sql = match b.dialect {
                Dialect::Postgres => "SELECT extract(epoch FROM clock_timestamp())::BIGINT",
                _ => "SELECT CAST(UNIX_TIMESTAMP(SYSDATE()) AS SIGNED)",
            };
            let server = b.scalar(&pool, sql).await?;
            let local = i64::try_from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_secs(),
            )?;
            anyhow::ensure!(
                (server - local - offset).abs() <= 5,
                "{}: the fault server's clock reads {} s off the true time, not {what}; \
                 is it running under libfaketime (scripts/fault-db.sh up)?",
                b.dialect,
                server - local
            );
            pool.close().await;
        }
    }
    Ok(())
}

/// The figures of one server, primitive, presence and fence setting, summed over the
/// phases.
#[derive(Debug, Default)]
struct Totals {
    grants: usize,
    rows: i64,
    rejected: usize,
    unknown: usize,
    kill_rounds: usize,
    kills_held: usize,
    connections_killed: usize,
    pauses: usize,
    pauses_held: usize,
    sigkills: usize,
    sigkills_held: usize,
    /// SIGKILLed holders whose keys the next holder had before their lease's expiry.
    quick_takeovers: usize,
    cuts: usize,
    cuts_long: usize,
    cuts_held: usize,
    cuts_dropping: usize,
    packets_dropped: u64,
    crashes_held: usize,
    restarts_held: usize,
    jumps_held: usize,
    violations: usize,
    lost_updates: i64,
    readers_overlapped: bool,
}

/// The name of a server in the tables.
fn server_name(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "PostgreSQL",
        _ => "MariaDB",
    }
}

/// What a row of the table is about: server, primitive (a lock's strategy), presence
/// and fence.
type RowKey = (&'static str, Primitive, bool, bool);

/// One row of the table: what it is about, and its figures.
type Row = (RowKey, Totals);

/// The figures of a whole run, in the order the workloads were first reported.
#[derive(Debug, Default)]
struct Figures {
    rows: Vec<Row>,
    /// The server faults, per server.
    server_faults: Vec<(&'static str, ServerFaults)>,
    jumps: Jumps,
    /// What the calibrating cuts of a probe dropped, per server.
    calibration: Vec<(&'static str, Dropped)>,
    /// How long each phase ran.
    phases: Vec<Duration>,
    /// For-update grants a crash rolled back whose token was drawn again, per server.
    reissued: Vec<(&'static str, usize)>,
}

impl Figures {
    fn add(&mut self, r: &Report) {
        if r.primitive == Primitive::Lock(Strategy::ForUpdate) {
            let server = server_name(r.dialect);
            match self.reissued.iter_mut().find(|(s, _)| *s == server) {
                Some((_, n)) => *n += r.reissued,
                None => self.reissued.push((server, r.reissued)),
            }
        }
        let key = (server_name(r.dialect), r.primitive, r.presence, r.fence);
        let i = match self.rows.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.rows.push((key, Totals::default()));
                self.rows.len() - 1
            }
        };
        let t = &mut self.rows[i].1;
        let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        // A multi-lock's events are told per key; the table counts its sets.
        let keys = r.primitive.keys();
        let (i, e) = (&r.injected, &r.exposure);
        t.grants += r.verdict.grants / keys;
        t.rows += r.rows;
        t.rejected += r.verdict.rejected / keys;
        t.unknown += r.verdict.unknown / keys;
        t.kill_rounds += load(&i.kill_rounds);
        t.kills_held += load(&i.kills_held);
        t.connections_killed += load(&i.connections_killed);
        t.pauses += load(&i.pauses);
        t.pauses_held += load(&i.pauses_held);
        t.sigkills += load(&i.sigkills);
        t.sigkills_held += load(&i.sigkills_held);
        t.quick_takeovers += r.takeovers.iter().filter(|t| t.before_expiry).count();
        t.cuts += i.cuts();
        t.cuts_long += load(&i.cuts_long);
        t.cuts_held += load(&i.cuts_held);
        t.cuts_dropping += i.cuts_dropping();
        t.packets_dropped += i.packets_dropped.load(Ordering::Relaxed);
        t.crashes_held += load(&e.crashes);
        t.restarts_held += load(&e.restarts);
        t.jumps_held += load(&e.clock_jumps);
        t.violations += r.verdict.violations.len();
        t.lost_updates += r.lost_updates();
        t.readers_overlapped |= r.readers_overlapped;
    }

    /// The table of the figures, as docs/guarantees.md shows it.
    fn table(&self) -> String {
        let mut out = String::from(
            "| server | primitive | presence | fence | grants | writes accepted \
             | stale writes rejected | outcome unknown \
             | connection kills (connections; while held) | pauses (while held) \
             | SIGKILLs (while held; taken over before the lease's expiry) \
             | network cuts (longer than the TTL; while held) \
             | cuts that dropped packets (packets) | server crashes while held \
             | clean restarts while held | clock jumps while held \
             | violations | lost updates |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let on = |b: bool| if b { "on" } else { "off" };
        // By server, then in the family's order, the fence on first.
        let mut rows: Vec<&Row> = self.rows.iter().collect();
        rows.sort_by_key(|((server, primitive, presence, fence), _)| {
            let family = FAMILY.iter().position(|f| *f == (*primitive, *presence));
            (*server != "PostgreSQL", family, !fence)
        });
        for ((server, primitive, presence, fence), t) in rows {
            out += &format!(
                "| {server} | {primitive} | {} | {} | {} | {} | {} | {} | {} ({}; {}) \
                 | {} ({}) | {} ({}; {}) | {} ({}; {}) | {} ({}) | {} | {} | {} \
                 | **{}** | **{}** |\n",
                on(*presence),
                on(*fence),
                t.grants,
                t.rows,
                t.rejected,
                t.unknown,
                t.kill_rounds,
                t.connections_killed,
                t.kills_held,
                t.pauses,
                t.pauses_held,
                t.sigkills,
                t.sigkills_held,
                t.quick_takeovers,
                t.cuts,
                t.cuts_long,
                t.cuts_held,
                t.cuts_dropping,
                t.packets_dropped,
                t.crashes_held,
                t.restarts_held,
                t.jumps_held,
                t.violations,
                t.lost_updates
            );
        }
        out
    }

    /// What only the whole run can show, each row of the fenced phases on its own:
    /// enough grants to mean anything, presence hands a SIGKILLed holder's share on
    /// before its TTL, readers of a read-write lock do share it, and, in a run long
    /// enough to have a few server faults a phase (five minutes or more), the server
    /// crashed under every primitive.
    fn check(&self, run_for: Duration) -> anyhow::Result<()> {
        // Presence took a SIGKILLed holder's share before its lease's expiry, on each
        // server (each row's count is in the table; a row alone meets few victims in
        // phase 1 of a short run).
        for server in ["PostgreSQL", "MariaDB"] {
            let of_presence = || {
                self.rows
                    .iter()
                    .filter(|((s, _, presence, fence), _)| *s == server && *presence && *fence)
            };
            let quick: usize = of_presence().map(|(_, t)| t.quick_takeovers).sum();
            let held: usize = of_presence().map(|(_, t)| t.sigkills_held).sum();
            // Timed against a 1 s TTL, on a loaded machine a short run's few victims
            // (those whose holds were read before the kill, a handful a phase) may all
            // have been taken over at their expiry instead: asked of a run long enough
            // to meet many, as the soak's (tests/presence.rs
            // a_killed_holders_key_is_taken_at_once shows the takeover on every run).
            anyhow::ensure!(
                run_for < Duration::from_secs(300) || held == 0 || quick > 0,
                "{server}: no SIGKILLed holder's share was taken before its lease's expiry \
                 with presence ({held} SIGKILLs while held)"
            );
        }
        for ((server, primitive, presence, fence), t) in &self.rows {
            if !fence {
                continue;
            }
            let row = format!(
                "{server} {primitive}{}",
                if *presence { " with presence" } else { "" }
            );
            anyhow::ensure!(
                t.grants >= 10,
                "{row}: too few grants to mean anything ({})",
                t.grants
            );
            anyhow::ensure!(
                *primitive != Primitive::RwLock || t.readers_overlapped,
                "{row}: no two readers ever surely held at once"
            );
            // Every kind of fault met the primitive held: a fault that only ever hits
            // a waiting worker shows nothing about the primitive's guarantees.
            let held = [t.kills_held, t.pauses_held, t.sigkills_held, t.cuts_held];
            anyhow::ensure!(
                held.iter().all(|&n| n > 0),
                "{row}: a kind of fault never met a holder (kills, pauses, SIGKILLs, cuts \
                 while held: {held:?})"
            );
            anyhow::ensure!(
                run_for < Duration::from_secs(300) || t.crashes_held > 0,
                "{row}: the server never crashed while it was held"
            );
        }
        Ok(())
    }

    /// Adds what a phase's server faults did on `server`.
    fn add_server_faults(&mut self, server: &'static str, f: &ServerFaults) {
        match self.server_faults.iter_mut().find(|(s, _)| *s == server) {
            Some((_, total)) => total.add(f),
            None => self.server_faults.push((server, *f)),
        }
    }

    fn summary(&self) -> String {
        let servers: Vec<String> = self
            .server_faults
            .iter()
            .map(|(server, f)| {
                let shown = match *server {
                    "PostgreSQL" => format!(
                        "{} of them lost an unflushed commit made just before, {} restarted \
                         in place",
                        f.crashes_shown, f.in_place
                    ),
                    _ => format!("{} of them recovered from the redo log", f.crashes_shown),
                };
                format!(
                    "{server} {} crashes ({shown}) and {} clean restarts, down {}-{} ms",
                    f.crashes, f.restarts, f.down_min_ms, f.down_max_ms
                )
            })
            .collect();
        let reissued: Vec<String> = self
            .reissued
            .iter()
            .map(|(server, n)| format!("{n} on {server}"))
            .collect();
        format!(
            "server faults: {}; the clock jumped {} times forward and {} back, at most {} s \
             ahead and {} s behind; for-update grants a crash rolled back whose token the \
             next holder drew again (a known defect, left out of the checked history): {}",
            servers.join("; "),
            self.jumps.forward,
            self.jumps.backward,
            self.jumps.ahead,
            self.jumps.behind,
            reissued.join(", ")
        )
    }

    fn print(&self) {
        println!("\nfigures of the whole run ({}):", self.summary());
        print!("{}", self.table());
    }

    /// Writes the figures and the facts of the run and its machine to `path`, as the
    /// record of a soak run (`SQLOCK_FAULT_RECORD`).
    async fn record(
        &self,
        path: &str,
        started: chrono::DateTime<chrono::Utc>,
        secs: u64,
        servers: &[Backend],
    ) -> anyhow::Result<()> {
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(["-C", env!("CARGO_MANIFEST_DIR")])
                .args(args)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default()
        };
        let commit = git(&["rev-parse", "--short=12", "HEAD"]);
        let dirty = !git(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|k| k.trim().to_owned())
            .unwrap_or_default();
        let mut versions = Vec::new();
        for b in servers {
            let pool = b.pool().await?;
            let v: String = match &pool {
                DbPool::Postgres(p) => {
                    sqlx::query_scalar("SHOW server_version")
                        .fetch_one(p)
                        .await?
                }
                DbPool::MySql(p) => sqlx::query_scalar("SELECT VERSION()").fetch_one(p).await?,
                _ => anyhow::bail!("the fault workload runs on the servers"),
            };
            versions.push(format!("{} {v}", server_name(b.dialect)));
            pool.close().await;
        }
        let phases: Vec<String> = self
            .phases
            .iter()
            .zip([
                "1 (every fault but the clock)",
                "2 (the clock jumping too)",
                "3 (the fence off)",
            ])
            .map(|(d, name)| format!("phase {name} {} s", d.as_secs()))
            .collect();
        let total: Duration = self.phases.iter().sum();
        let calibration: Vec<String> = self
            .calibration
            .iter()
            .map(|(s, d)| {
                format!(
                    "{s} {} packets to the server and {} from it",
                    d.to_server, d.from_server
                )
            })
            .collect();
        let text = format!(
            "# Fault workload run of {date}\n\n\
             Written by `tests/faults.rs` at the end of the run. A table of \
             `docs/guarantees.md` that links here shows the figures below, which \
             `tests/soak_record.rs` checks.\n\n\
             - Started {start}, at commit `{commit}`{dirty}.\n\
             - Length: `SQLOCK_FAULT_SECS={secs}`; measured {phases}; {minutes} minutes in \
             all.\n\
             - Machine: {cores} cores ({cpu}), Linux {kernel}.\n\
             - Servers: {versions}, both under libfaketime.\n\
             - Before the phases, cuts of a probe process dropped {calibration}.\n\
             - {summary}.\n\n\
             Phases summed, per server, primitive (a lock by its strategy), presence and \
             fence setting (a multi-lock's grants and outcomes counted per set of keys). \
             \"Network cuts\" counts the cuts made, \"cuts that dropped packets\" those \
             whose nft rules dropped at least one packet, with the packets all of them \
             dropped. \"While held\": a fault aimed at one worker met it holding; a \
             crash, restart or clock jump of the server met a worker of that row \
             holding. \"Taken over before the lease's expiry\": SIGKILLed holders \
             whose every key held unexpired just before the kill (as the table showed, \
             with the time it had left) was granted to the next holder before that \
             expiry, in phase 1 (in phase 2 a clock jump may end a lease early). The \
             table is read with the worker stopped (SIGSTOP) and what it had sent done; \
             then its sessions are ended and it is killed. Presence takes such a share \
             over at once; without it, only a statement of the worker's still running \
             when the table was read can have ended one early (a for-update lock leaves \
             no live row to count).\n\n\
             {table}",
            date = started.format("%Y-%m-%d"),
            start = started.format("%Y-%m-%d %H:%M UTC"),
            dirty = if dirty {
                " with uncommitted changes"
            } else {
                ""
            },
            phases = phases.join(", "),
            minutes = (total.as_secs() + 30) / 60,
            versions = versions.join(" and "),
            calibration = calibration.join("; "),
            summary = self.summary(),
            table = self.table(),
        );
        if let Some(dir) = std::path::Path::new(path).parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, text).with_context(|| format!("writing the record {path}"))?;
        println!("the record of the run is in {path}");
        Ok(())
    }
}

/// What the fenced phases run on each server, each with its presence setting: a lock
/// of every strategy, a multi-lock, a semaphore, a read-write lock and an election, and
/// with presence the primitives that have it.
const FAMILY: [(Primitive, bool); 14] = [
    (Primitive::Lock(Strategy::Lease), false),
    (Primitive::Lock(Strategy::Insert), false),
    (Primitive::Lock(Strategy::ForUpdate), false),
    (Primitive::Lock(Strategy::Fair), false),
    (Primitive::Multi, false),
    (Primitive::Semaphore, false),
    (Primitive::RwLock, false),
    (Primitive::Election, false),
    (Primitive::Lock(Strategy::Lease), true),
    (Primitive::Lock(Strategy::Fair), true),
    (Primitive::Multi, true),
    (Primitive::Semaphore, true),
    (Primitive::RwLock, true),
    (Primitive::Election, true),
];

/// A task of the phase's that ends with it: a phase that fails leaves no server
/// fault or clock jump running behind it (a crash's stopped processes are continued
/// as its task is dropped).
struct Aborting<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The whole family on both servers at once, fenced, with every fault; the servers'
/// clock jumps too when `clock_jumps`. Fails on any violation or lost update.
async fn fenced_phase(
    phase: usize,
    servers: &[Backend],
    net: &Arc<Partitions>,
    clock_jumps: bool,
    run_for: Duration,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    let mut runs = tokio::task::JoinSet::new();
    let mut exposures: Vec<(Dialect, Arc<Exposure>)> = Vec::new();
    // `SQLOCK_FAULT_ONLY` names the primitives to run (as the table names them, comma
    // separated): for chasing a failure of one.
    let only = std::env::var("SQLOCK_FAULT_ONLY").ok();
    let family = FAMILY.into_iter().filter(|(p, _)| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|o| o == p.to_string()))
    });
    for b in servers {
        for (primitive, presence) in family.clone() {
            let mut backend = b.clone();
            backend.table = Workload::table(primitive, presence);
            let exposure = Arc::new(Exposure::default());
            exposures.push((b.dialect, exposure.clone()));
            let w = Workload {
                backend,
                primitive,
                presence,
                fence: true,
                faults: ALL_FAULTS,
                net: Some(net.clone()),
                clock_jumps,
                run_for,
                exposure,
            };
            runs.spawn(w.run());
        }
    }
    let of_server = |d: Dialect| -> Vec<Arc<Exposure>> {
        exposures
            .iter()
            .filter(|(e, _)| *e == d)
            .map(|(_, x)| x.clone())
            .collect()
    };
    let server_faults: Vec<_> = servers
        .iter()
        .map(|b| {
            let order = server_faults_order(phase);
            let exposed = of_server(b.dialect);
            (
                b.dialect,
                Aborting(tokio::spawn(server_faults(
                    b.clone(),
                    run_for,
                    order,
                    exposed,
                ))),
            )
        })
        .collect();
    let all: Vec<Arc<Exposure>> = exposures.iter().map(|(_, x)| x.clone()).collect();
    let (workloads_ended, ended) = tokio::sync::watch::channel(false);
    let jumps = clock_jumps.then(|| Aborting(tokio::spawn(jump_clock(ended, all))));
    let mut reports = Vec::new();
    while let Some(r) = runs.join_next().await {
        reports.push(r??);
    }
    workloads_ended.send_replace(true);
    for (dialect, mut f) in server_faults {
        let f = (&mut f.0).await??;
        println!("{dialect}: server faults {f:?}");
        // Crashes are shown to crash: each server crashed, and a crash lost work
        // (PostgreSQL: an unflushed commit; MariaDB: it recovered from its redo log).
        anyhow::ensure!(f.crashes > 0, "{dialect}: the server never crashed");
        anyhow::ensure!(
            f.crashes_shown > 0,
            "{dialect}: no crash was shown to lose anything ({f:?})"
        );
        figures.add_server_faults(server_name(dialect), &f);
    }
    if let Some(mut j) = jumps {
        let j = (&mut j.0).await??;
        println!(
            "the servers' clock jumped {} times forward and {} back, at most {} s ahead \
             and {} s behind",
            j.forward, j.backward, j.ahead, j.behind
        );
        anyhow::ensure!(
            j.forward > 0 && j.backward > 0,
            "the clock jumped too seldom"
        );
        let f = &mut figures.jumps;
        f.forward += j.forward;
        f.backward += j.backward;
        f.ahead = f.ahead.max(j.ahead);
        f.behind = f.behind.max(j.behind);
    }
    for r in &reports {
        r.print();
        if let Some(stalled) = r.stalled() {
            println!("{stalled}");
        }
        figures.add(r);
    }
    for r in &reports {
        let v = &r.verdict;
        anyhow::ensure!(
            v.violations.is_empty(),
            "{}: {:#?}\nthe events of its workers, in the order sent:\n{}",
            r.name,
            v.violations,
            r.events_near_violation()
        );
        // Each workload, every strategy's alone, met what the phase asks (enough
        // grants, every kind of fault while held, readers sharing, a clock jump while
        // held): a run whose driver never paused, SIGKILLed or cut off a holder would
        // pass without having shown anything. It ran past its window until it had.
        anyhow::ensure!(
            r.unmet.is_empty(),
            "{}: in {:.0} s, never met: {}",
            r.name,
            r.ran_for.as_secs_f64(),
            r.unmet.join(", ")
        );
        let sigkills = r.injected.sigkills.load(Ordering::Relaxed);
        anyhow::ensure!(r.lost_updates() == 0, "{}: lost updates", r.name);
        anyhow::ensure!(
            r.distinct == r.rows,
            "{}: a value was written twice",
            r.name
        );
        anyhow::ensure!(
            r.falling_tokens == 0,
            "{}: a stale token wrote last",
            r.name
        );
        // Every write the client saw accepted is in the table, and nothing else is
        // but writes whose outcome it could not know, and at most one per SIGKILL
        // (a worker killed between its commit and telling of it). A multi-lock's
        // events are told once per key, so each row stands for that many.
        let per_row = r.primitive.keys() as i64;
        let untold = (sigkills as i64) * per_row;
        anyhow::ensure!(
            r.rows * per_row >= v.writes as i64
                && r.rows * per_row <= (v.writes + v.unknown) as i64 + untold,
            "{}: {} writes in the table, {} confirmed, {} unknown, {} workers SIGKILLed",
            r.name,
            r.rows,
            v.writes,
            v.unknown,
            sigkills
        );
    }
    // A cut is shown to cut by its rules' counters: on every server, each direction
    // that was cut had cuts that dropped packets.
    for b in servers {
        let of_server: Vec<&Report> = reports.iter().filter(|r| r.dialect == b.dialect).collect();
        let sum = |f: &dyn Fn(&Injected) -> usize| -> usize {
            of_server.iter().map(|r| f(&r.injected)).sum()
        };
        let cuts = sum(&|i| i.cuts());
        let dropping = sum(&|i| i.cuts_dropping());
        let packets: u64 = of_server
            .iter()
            .map(|r| r.injected.packets_dropped.load(Ordering::Relaxed))
            .sum();
        println!(
            "{}: {dropping} of {cuts} network cuts dropped packets ({packets} packets)",
            b.dialect
        );
        anyhow::ensure!(cuts > 0, "{}: no network cut was made", b.dialect);
        for d in Direction::ALL {
            let made = sum(&|i| i.cuts_by_direction[d.index()].load(Ordering::Relaxed));
            let dropped = sum(&|i| i.cuts_dropping[d.index()].load(Ordering::Relaxed));
            println!(
                "{}: cuts {d}: {dropped} of {made} dropped packets",
                b.dialect
            );
            anyhow::ensure!(
                made == 0 || dropped > 0,
                "{}: none of the {made} cuts {d} dropped a packet",
                b.dialect
            );
        }
    }
    let rejected: usize = reports.iter().map(|r| r.verdict.rejected).sum();
    anyhow::ensure!(
        rejected > 0,
        "no stale write was ever refused: the faults missed"
    );
    Ok(())
}

async fn suite() -> anyhow::Result<()> {
    history::self_check();
    history::self_check_rw();
    let secs = std::env::var("SQLOCK_FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let run_for = Duration::from_secs(secs);
    let started = chrono::Utc::now();
    let servers = common::fault_servers("faults").await;
    if servers.is_empty() {
        return Ok(());
    }
    // Whatever happens below, the rules go and the true time comes back, and the
    // servers are up again: a run cut short by a failure may have stopped one, which
    // the tests after it need.
    let net = Arc::new(Partitions::new()?);
    let _true_time = clock::Reset;
    let outcome = phases(&servers, &net, run_for, started, secs).await;
    for b in &servers {
        if let Err(e) = fault_script(b.dialect, "start").await {
            eprintln!(
                "faults: {}: the server could not be started again: {e:#}",
                b.dialect
            );
        }
    }
    outcome
}

/// The phases of the run, and its record.
async fn phases(
    servers: &[Backend],
    net: &Arc<Partitions>,
    run_for: Duration,
    started: chrono::DateTime<chrono::Utc>,
    secs: u64,
) -> anyhow::Result<()> {
    verify_clock(servers).await?;
    let mut figures = Figures::default();
    // Cuts must cut: a probe's connection to each server, cut each way, drops packets.
    for b in servers {
        let name = format!("sqlock_{}_probe", b.dialect);
        let dropped = net
            .calibrate(&name, b.url(), common::port_of(b.url())?)
            .await?;
        println!(
            "{}: a cut of the probe dropped {} packets to the server and {} from it \
             (cgroup level {})",
            b.dialect,
            dropped.to_server,
            dropped.from_server,
            net.level(&name)
        );
        figures.calibration.push((server_name(b.dialect), dropped));
    }

    println!("== every fault but the clock, fenced");
    let phase = Instant::now();
    fenced_phase(0, servers, net, false, run_for, &mut figures).await?;
    figures.phases.push(phase.elapsed());
    println!("== every fault, the servers' clock jumping, fenced");
    let phase = Instant::now();
    fenced_phase(1, servers, net, true, run_for, &mut figures).await?;
    figures.phases.push(phase.elapsed());

    // The fence off, under pauses: stale holders write, and updates are lost.
    println!("== the fence off");
    let phase = Instant::now();
    let mut runs = tokio::task::JoinSet::new();
    for b in servers {
        let mut backend = b.clone();
        backend.table = "faults_unfenced".into();
        let w = Workload {
            backend,
            primitive: Primitive::Lock(Strategy::Lease),
            presence: false,
            fence: false,
            faults: PAUSES_ONLY,
            net: None,
            clock_jumps: false,
            run_for: run_for.min(Duration::from_secs(60)),
            exposure: Arc::default(),
        };
        runs.spawn(w.run());
    }
    while let Some(r) = runs.join_next().await {
        let r = r??;
        r.print();
        figures.add(&r);
        anyhow::ensure!(
            r.lost_updates() > 0,
            "{}: no update was lost without the fence, so the workload cannot tell",
            r.name
        );
    }
    figures.phases.push(phase.elapsed());
    figures.print();
    figures.check(run_for)?;
    if let Ok(path) = std::env::var("SQLOCK_FAULT_RECORD") {
        figures.record(&path, started, secs, servers).await?;
    }
    println!("fault workload: violations 0 with the fence on; updates lost with it off");
    Ok(())
}
