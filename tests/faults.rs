//! The fault workload: worker processes do fenced read-modify-write increments of a
//! shared counter under one lock while a fault driver, at random, kills their
//! connections on the server, pauses them past their TTL (SIGSTOP, SIGCONT), SIGKILLs
//! them, and restarts the server once. The recorded history is checked against a
//! fenced-mutex model (`common/history.rs`) and the counter against the writes the
//! database accepted. The same workload with the fence check off must lose updates,
//! so the check demonstrably can fail.
//!
//! Runs on the fault tests' own server instances (`scripts/fault-db.sh`: ports 5433
//! and 3307), which it restarts; the main servers are never touched. Bounded: each
//! phase runs `SQLOCK_FAULT_SECS` seconds (default 30), about 90 seconds in all.
//!
//! It has a main of its own (no test harness) because the workers are this binary
//! again, started with `--worker`.

mod common;

use std::process::{ExitCode, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use common::history::{self, Event, Kind, Verdict};
use common::Backend;
use nix::sys::signal::{kill as signal, Signal};
use nix::unistd::Pid;
use sqlock::{DbPool, Dialect, Error, LockGuard, Locker, Strategy};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The lease TTL of the workers: short, so that pauses outlast it often.
const TTL: Duration = Duration::from_secs(1);
/// Worker processes per workload.
const WORKERS: usize = 4;
/// The one key every worker of a workload contends for.
const KEY: &str = "counter";

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
        rt.block_on(async { worker(WorkerArgs::parse(&args[2..])?).await })
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
// The worker process.

/// What a worker is told on its command line.
struct WorkerArgs {
    dialect: Dialect,
    url: String,
    table: String,
    strategy: Strategy,
    fence: bool,
    run_for: Duration,
    tag: String,
    seed: u64,
}

impl WorkerArgs {
    fn to_args(&self) -> Vec<String> {
        vec![
            "--worker".into(),
            self.dialect.to_string(),
            self.url.clone(),
            self.table.clone(),
            self.strategy.to_string(),
            u8::from(self.fence).to_string(),
            self.run_for.as_millis().to_string(),
            self.tag.clone(),
            self.seed.to_string(),
        ]
    }

    fn parse(a: &[String]) -> anyhow::Result<Self> {
        anyhow::ensure!(a.len() == 8, "worker arguments: {a:?}");
        Ok(Self {
            dialect: match a[0].as_str() {
                "postgres" => Dialect::Postgres,
                _ => Dialect::MySql,
            },
            url: a[1].clone(),
            table: a[2].clone(),
            strategy: Strategy::from_str(&a[3])?,
            fence: a[4] == "1",
            run_for: Duration::from_millis(a[5].parse()?),
            tag: a[6].clone(),
            seed: a[7].parse()?,
        })
    }
}

/// Prints one line for the driver. Each line is written whole, so a SIGKILL never
/// leaves half of one.
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{line}\n").as_bytes());
    let _ = out.flush();
}

/// How a write under the lock ended.
enum Outcome {
    Accepted,
    Rejected,
    Unknown,
}

async fn worker(w: WorkerArgs) -> anyhow::Result<()> {
    // Each worker's connections carry its tag (an application_name on PostgreSQL, a
    // user on MariaDB), so the driver can kill exactly this worker's connections.
    let pool: DbPool = match w.dialect {
        Dialect::Postgres => PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy_with(PgConnectOptions::from_str(&w.url)?.application_name(&w.tag))
            .into(),
        _ => MySqlPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy_with(
                MySqlConnectOptions::from_str(&w.url)?
                    .username(&w.tag)
                    .password("fault"),
            )
            .into(),
    };
    let locker = Locker::builder(pool.clone())
        .table(&w.table)
        .strategy(w.strategy)
        .ttl(TTL)
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .keepalive(Duration::from_millis(300))
        .build()?;
    let owner = locker.owner().to_string();
    let mut rng = fastrand::Rng::with_seed(w.seed);
    let deadline = Instant::now() + w.run_for;
    let event = |kind, token, sent| {
        say(&Event {
            kind,
            key: KEY.into(),
            owner: owner.clone(),
            token,
            sent,
            ack: history::now(),
        }
        .line());
    };
    while Instant::now() < deadline {
        let sent = history::now();
        let guard = match locker.acquire_timeout(KEY, Duration::from_secs(2)).await {
            Ok(g) => g,
            Err(Error::Timeout { .. }) => continue,
            Err(e) => {
                say(&format!("ERROR acquire: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let token = guard.fencing_token();
        event(Kind::Grant, token, sent);
        say("HOLDING 1");
        // Time holding the lock before the write: a pause here makes a stale writer.
        tokio::time::sleep(Duration::from_millis(rng.u64(0..60))).await;
        let sent = history::now();
        if w.strategy == Strategy::ForUpdate {
            // The write goes into the lock's own transaction, and commit ends the
            // lock: accepted means both happened.
            let kind = match increment_in_lock(&guard, &w.table, &owner, &mut rng).await {
                Ok(()) => match guard.commit().await {
                    Ok(()) => Kind::Write,
                    Err(_) => Kind::Unknown,
                },
                Err(_) => Kind::Unknown,
            };
            event(kind.clone(), token, sent);
            if kind == Kind::Write {
                event(Kind::Release, token, sent);
            }
        } else {
            let outcome = increment(&pool, &guard, &w, &owner, &mut rng).await;
            let kind = match outcome {
                Ok(Outcome::Accepted) => Kind::Write,
                Ok(Outcome::Rejected) => Kind::Rejected,
                Ok(Outcome::Unknown) | Err(_) => Kind::Unknown,
            };
            event(kind, token, sent);
            let sent = history::now();
            let kind = match guard.release().await {
                Ok(true) => Kind::Release,
                Ok(false) => Kind::ReleaseRefused,
                Err(_) => Kind::Unknown,
            };
            event(kind, token, sent);
        }
        say("HOLDING 0");
    }
    Ok(())
}

/// The counter and the log of accepted writes of a workload's table.
fn side_tables(table: &str) -> (String, String) {
    (format!("{table}_counter"), format!("{table}_writes"))
}

/// A read-modify-write increment in a transaction of the worker's own, fenced by the
/// guard unless the workload turned the fence off. It reads, thinks a while (a pause
/// may land here), and writes what it read plus one, logging the write.
async fn increment(
    pool: &DbPool,
    guard: &LockGuard,
    w: &WorkerArgs,
    owner: &str,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<Outcome> {
    let (counter, writes) = side_tables(&w.table);
    let think = Duration::from_millis(rng.u64(10..80));
    macro_rules! rmw {
        ($p:expr, $ph:expr) => {{
            let mut tx = $p.begin().await?;
            if w.fence {
                match guard.fence(&mut *tx).await {
                    Ok(()) => {}
                    Err(Error::LockLost { .. }) => return Ok(Outcome::Rejected),
                    Err(e) => return Err(e.into()),
                }
            }
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT n FROM {counter} WHERE id = 1"
            )))
            .fetch_one(&mut *tx)
            .await?;
            tokio::time::sleep(think).await;
            let [a, b, c] = $ph;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {counter} SET n = {a} WHERE id = 1"
            )))
            .bind(n + 1)
            .execute(&mut *tx)
            .await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {writes} (value, token, owner) VALUES ({a}, {b}, {c})"
            )))
            .bind(n + 1)
            .bind(guard.fencing_token())
            .bind(owner)
            .execute(&mut *tx)
            .await?;
            match tx.commit().await {
                Ok(()) => Outcome::Accepted,
                Err(_) => Outcome::Unknown,
            }
        }};
    }
    Ok(match pool {
        DbPool::Postgres(p) => rmw!(p, ["$1", "$2", "$3"]),
        DbPool::MySql(p) => rmw!(p, ["?", "?", "?"]),
        _ => anyhow::bail!("the fault workload runs on the servers"),
    })
}

/// The same increment inside a for-update lock's own transaction, which is fenced by
/// its row lock already.
async fn increment_in_lock(
    guard: &LockGuard,
    table: &str,
    owner: &str,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<()> {
    let (counter, writes) = side_tables(table);
    let think = Duration::from_millis(rng.u64(10..80));
    let mut held = guard
        .transaction()
        .await
        .context("a for-update lock lends its transaction")?;
    macro_rules! rmw {
        ($tx:expr, $ph:expr) => {{
            let tx = $tx;
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT n FROM {counter} WHERE id = 1"
            )))
            .fetch_one(&mut **tx)
            .await?;
            tokio::time::sleep(think).await;
            let [a, b, c] = $ph;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {counter} SET n = {a} WHERE id = 1"
            )))
            .bind(n + 1)
            .execute(&mut **tx)
            .await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {writes} (value, token, owner) VALUES ({a}, {b}, {c})"
            )))
            .bind(n + 1)
            .bind(guard.fencing_token())
            .bind(owner)
            .execute(&mut **tx)
            .await?;
        }};
    }
    if let Some(tx) = held.as_postgres_mut() {
        rmw!(tx, ["$1", "$2", "$3"]);
    } else if let Some(tx) = held.as_mysql_mut() {
        rmw!(tx, ["?", "?", "?"]);
    } else {
        anyhow::bail!("the fault workload runs on the servers");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The driver.

/// Which faults a workload injects.
#[derive(Debug, Clone, Copy)]
struct Faults {
    kills: bool,
    pauses: bool,
    sigkills: bool,
}

const ALL_FAULTS: Faults = Faults {
    kills: true,
    pauses: true,
    sigkills: true,
};

const PAUSES_ONLY: Faults = Faults {
    kills: false,
    pauses: true,
    sigkills: false,
};

/// What the driver did.
#[derive(Debug, Default)]
struct Injected {
    kill_rounds: AtomicUsize,
    connections_killed: AtomicUsize,
    pauses: AtomicUsize,
    sigkills: AtomicUsize,
}

/// What one workload found.
struct Report {
    name: String,
    verdict: Verdict,
    injected: Injected,
    rows: i64,
    counter: i64,
    distinct: i64,
    falling_tokens: i64,
    errors: usize,
}

impl Report {
    fn lost_updates(&self) -> i64 {
        self.rows - self.counter
    }

    fn print(&self) {
        let i = &self.injected;
        println!(
            "{}: {}; the table holds {} accepted writes, counter {}, lost updates {}, \
             writes out of token order {}; faults: {} kill rounds ({} connections), {} \
             pauses past the TTL, {} workers SIGKILLed; {} worker errors",
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
            self.errors,
        );
    }
}

/// One running worker process.
struct Slot {
    tag: String,
    child: Child,
    holding: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
}

impl Slot {
    fn pid(&self) -> Option<Pid> {
        self.child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
    }
}

/// Everything the workers of one workload printed.
#[derive(Default)]
struct Collected {
    events: Mutex<Vec<Event>>,
    errors: AtomicUsize,
}

struct Workload {
    backend: Backend,
    strategy: Strategy,
    fence: bool,
    faults: Faults,
    run_for: Duration,
}

impl Workload {
    fn name(&self) -> String {
        format!(
            "{} {} fence {}",
            self.backend.dialect,
            self.strategy,
            if self.fence { "on" } else { "off" }
        )
    }

    fn tag(&self, slot: usize) -> String {
        let s = match self.strategy {
            Strategy::Lease => 'l',
            Strategy::Insert => 'i',
            _ => 'u',
        };
        format!("sqlock_f{s}{}{slot}", u8::from(self.fence))
    }

    /// Starts the worker of `slot` with what is left of the run.
    fn spawn(
        &self,
        slot: usize,
        until: Instant,
        collected: &Arc<Collected>,
    ) -> anyhow::Result<Slot> {
        let tag = self.tag(slot);
        let args = WorkerArgs {
            dialect: self.backend.dialect,
            url: self.backend.url().to_owned(),
            table: self.backend.table.clone(),
            strategy: self.strategy,
            fence: self.fence,
            run_for: until.saturating_duration_since(Instant::now()),
            tag: tag.clone(),
            seed: fastrand::u64(..),
        };
        let mut child = Command::new(std::env::current_exe()?)
            .args(args.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let holding = Arc::new(AtomicBool::new(false));
        let out = child.stdout.take().context("worker stdout")?;
        let (flag, collected) = (holding.clone(), collected.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(e) = Event::parse(&line) {
                    collected.events.lock().unwrap().push(e);
                } else if let Some(h) = line.strip_prefix("HOLDING ") {
                    flag.store(h == "1", Ordering::Relaxed);
                } else if line.starts_with("ERROR") {
                    collected.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(Slot {
            tag,
            child,
            holding,
            paused: Arc::new(AtomicBool::new(false)),
        })
    }

    async fn prepare(&self) -> anyhow::Result<DbPool> {
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
                 CREATE TABLE {counter} (id INT PRIMARY KEY, n BIGINT NOT NULL);
                 INSERT INTO {counter} (id, n) VALUES (1, 0);
                 CREATE TABLE {writes} (id {id}, value BIGINT NOT NULL,
                     token BIGINT NOT NULL, owner VARCHAR(64) NOT NULL);"
            ),
        )
        .await?;
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
        let admin = self.prepare().await?;
        let collected = Arc::new(Collected::default());
        let injected = Injected::default();
        let until = Instant::now() + self.run_for;
        let mut slots = Vec::new();
        for slot in 0..WORKERS {
            slots.push(self.spawn(slot, until, &collected)?);
        }
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(300..800))).await;
            // Faults hit the holder more often than not: that is where they matter.
            let holders: Vec<usize> = (0..WORKERS)
                .filter(|&i| slots[i].holding.load(Ordering::Relaxed))
                .collect();
            let target = if !holders.is_empty() && fastrand::f32() < 0.7 {
                holders[fastrand::usize(..holders.len())]
            } else {
                fastrand::usize(..WORKERS)
            };
            let mut kinds = Vec::new();
            if self.faults.kills {
                kinds.extend(["kill", "kill"]);
            }
            if self.faults.pauses {
                kinds.extend(["pause", "pause"]);
            }
            if self.faults.sigkills {
                kinds.push("sigkill");
            }
            let slot = &mut slots[target];
            if slot.paused.load(Ordering::Relaxed) {
                continue;
            }
            match kinds[fastrand::usize(..kinds.len())] {
                "kill" => {
                    let n = common::kill::kill(b, &admin, &slot.tag).await.unwrap_or(0);
                    injected.kill_rounds.fetch_add(1, Ordering::Relaxed);
                    injected
                        .connections_killed
                        .fetch_add(usize::try_from(n).unwrap_or(0), Ordering::Relaxed);
                }
                "pause" => {
                    let Some(pid) = slot.pid() else { continue };
                    // Past the TTL, so that the lease lapses while the holder sleeps.
                    let pause = TTL + Duration::from_millis(fastrand::u64(300..1300));
                    if signal(pid, Signal::SIGSTOP).is_ok() {
                        injected.pauses.fetch_add(1, Ordering::Relaxed);
                        slot.paused.store(true, Ordering::Relaxed);
                        let paused = slot.paused.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(pause).await;
                            let _ = signal(pid, Signal::SIGCONT);
                            paused.store(false, Ordering::Relaxed);
                        });
                    }
                }
                _ => {
                    let _ = slot.child.start_kill();
                    let _ = slot.child.wait().await;
                    injected.sigkills.fetch_add(1, Ordering::Relaxed);
                    *slot = self.spawn(target, until, &collected)?;
                }
            }
        }
        // Every worker ends on its own at the deadline; a paused one is woken first.
        for slot in &mut slots {
            if let Some(pid) = slot.pid() {
                let _ = signal(pid, Signal::SIGCONT);
            }
            match tokio::time::timeout(Duration::from_secs(30), slot.child.wait()).await {
                Ok(status) => {
                    let status = status?;
                    anyhow::ensure!(
                        status.success(),
                        "{}: a worker failed: {status}",
                        self.name()
                    );
                }
                Err(_) => anyhow::bail!("{}: a worker did not stop", self.name()),
            }
        }
        // Let the readers drain what the workers printed last.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let events = collected.events.lock().unwrap().clone();
        let (counter, writes) = side_tables(&b.table);
        let scalar = |sql: String| {
            let admin = admin.clone();
            async move { b.scalar(&admin, &sql).await }
        };
        Ok(Report {
            name: self.name(),
            // A for-update lock ends with its connection, which the driver kills: only
            // the leased strategies are bound to last their TTL.
            verdict: if self.strategy == Strategy::ForUpdate {
                history::check(&events)
            } else {
                history::check_leases(&events, TTL)
            },
            injected,
            rows: scalar(format!("SELECT COUNT(*) FROM {writes}")).await?,
            counter: scalar(format!("SELECT n FROM {counter}")).await?,
            distinct: scalar(format!("SELECT COUNT(DISTINCT value) FROM {writes}")).await?,
            falling_tokens: scalar(format!(
                "SELECT COUNT(*) FROM {writes} a JOIN {writes} b ON b.value = a.value + 1 \
                 WHERE b.token < a.token"
            ))
            .await?,
            errors: collected.errors.load(Ordering::Relaxed),
        })
    }
}

/// Restarts a fault server once, at a random moment of the middle of the run.
async fn restart_once(dialect: Dialect, run_for: Duration) -> anyhow::Result<()> {
    let at = run_for.mul_f64(0.3 + 0.3 * fastrand::f64());
    tokio::time::sleep(at).await;
    let server = match dialect {
        Dialect::Postgres => "postgres",
        _ => "mariadb",
    };
    let script = |action: &'static str| async move {
        let status = Command::new("bash")
            .args(["scripts/fault-db.sh", server, action])
            .status()
            .await?;
        anyhow::ensure!(status.success(), "fault-db.sh {server} {action}: {status}");
        anyhow::Ok(())
    };
    script("stop").await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    script("start").await?;
    println!(
        "{dialect}: server restarted {:.1}s into the run",
        at.as_secs_f64()
    );
    Ok(())
}

async fn suite() -> anyhow::Result<()> {
    history::self_check();
    let secs = std::env::var("SQLOCK_FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let run_for = Duration::from_secs(secs);
    let servers = common::fault_servers("faults").await;
    if servers.is_empty() {
        return Ok(());
    }
    let with_table = |b: &Backend, table: &str| {
        let mut b = b.clone();
        b.table = table.to_owned();
        b
    };

    // Fenced, with every fault, every strategy on both servers at once.
    let mut runs = tokio::task::JoinSet::new();
    for b in &servers {
        for (strategy, name) in [
            (Strategy::Lease, "faults_lease"),
            (Strategy::Insert, "faults_insert"),
            (Strategy::ForUpdate, "faults_for_update"),
        ] {
            let w = Workload {
                backend: with_table(b, name),
                strategy,
                fence: true,
                faults: ALL_FAULTS,
                run_for,
            };
            runs.spawn(w.run());
        }
    }
    let restarts: Vec<_> = servers
        .iter()
        .map(|b| tokio::spawn(restart_once(b.dialect, run_for)))
        .collect();
    let mut reports = Vec::new();
    while let Some(r) = runs.join_next().await {
        reports.push(r??);
    }
    for r in restarts {
        r.await??;
    }
    for r in &reports {
        r.print();
    }
    for r in &reports {
        let v = &r.verdict;
        anyhow::ensure!(v.violations.is_empty(), "{}: {:#?}", r.name, v.violations);
        anyhow::ensure!(
            v.grants >= 10,
            "{}: too few grants to mean anything",
            r.name
        );
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
        // but writes whose outcome it could not know.
        anyhow::ensure!(
            r.rows >= v.writes as i64 && r.rows <= (v.writes + v.unknown) as i64,
            "{}: {} writes in the table, {} confirmed and {} unknown",
            r.name,
            r.rows,
            v.writes,
            v.unknown
        );
    }
    let rejected: usize = reports.iter().map(|r| r.verdict.rejected).sum();
    anyhow::ensure!(
        rejected > 0,
        "no stale write was ever refused: the faults missed"
    );

    // The fence off, under pauses: stale holders write, and updates are lost.
    let mut runs = tokio::task::JoinSet::new();
    for b in &servers {
        let w = Workload {
            backend: with_table(b, "faults_unfenced"),
            strategy: Strategy::Lease,
            fence: false,
            faults: PAUSES_ONLY,
            run_for,
        };
        runs.spawn(w.run());
    }
    while let Some(r) = runs.join_next().await {
        let r = r??;
        r.print();
        anyhow::ensure!(
            r.lost_updates() > 0,
            "{}: no update was lost without the fence, so the workload cannot tell",
            r.name
        );
    }
    println!("fault workload: violations 0 with the fence on; updates lost with it off");
    Ok(())
}
