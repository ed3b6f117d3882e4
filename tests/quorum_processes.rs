//! The quorum lock across processes, under faults: worker processes contend for one
//! quorum lock over three independent databases and, under each grant, write a
//! resource fenced by the quorum's token, while the driver pauses holders past the
//! TTL, SIGKILLs one, cuts one worker off one database, crashes each fault server
//! under the workload and then stops two of the three at once.
//!
//! The members: the main PostgreSQL (its lock table in a schema of its own, found
//! along the connections' `search_path`), and the fault tests' PostgreSQL and MariaDB
//! instances (`scripts/fault-db.sh`), which this test crashes, stops and starts. The
//! resource is a table on the main MariaDB, which the faults never touch: a write is
//! accepted only when no higher token has written before it (`token <= ?`), as a
//! resource compares a quorum's token.
//!
//! Checked afterwards, by the history checker (`common/history.rs`) over every
//! process's events: tokens rise in grant order and no two owners share one; no grant
//! came back while another owner's grant was certainly still valid (sent less than a
//! TTL before, not released); no release was confirmed after a higher token was
//! granted. And on the resource: its log of accepted writes has tokens that never go
//! down, every write a worker was told accepted is in it, and the counter counts them.
//!
//! Each fault must be seen to take: a paused holder's write was refused (a higher
//! token wrote meanwhile), the killed holder's lock went to another owner, the cut
//! dropped packets and its worker was granted through the other two databases while
//! it lasted, each crashed server restarted (PostgreSQL's start time moved; MariaDB
//! recovered from its redo log once more) with grants while it was down, and while two
//! were stopped no grant was made and the workers were told the quorum was
//! unreachable.
//!
//! Needs root (nft, cgroups) and the fault servers. It has a main of its own, like
//! `tests/faults.rs`, because the workers are this binary again, started with
//! `--worker`.

mod common;

use std::process::{ExitCode, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use common::history::{self, Event, Kind};
use common::partition::{Direction, Partitions, CGROUP_ENV};
use common::Backend;
use nix::sys::signal::{kill as signal, Signal};
use nix::unistd::Pid;
use sqlock::{Dialect, Error, Locker, Quorum};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::time::{sleep, timeout, Instant};

/// Worker processes contending.
const WORKERS: usize = 4;
/// The quorum lock's TTL: short, so that pauses outlast it.
const TTL: Duration = Duration::from_secs(2);
/// The one key every worker wants.
const KEY: &str = "job";
/// The key a worker tells its writes under, apart from [`KEY`]'s grants and
/// releases: a write to the resource is no confirmation of holding (the resource
/// accepts a stale token until a higher one has written), so the lock's checker never
/// sees one; the resource's log is their check.
const WRITES: &str = "job:write";
/// Every member's lock table, and the resource's tables' prefix.
const TABLE: &str = "quorum_processes";
/// The main PostgreSQL's schema for its member's tables.
const SCHEMA: &str = "sqlock_quorum_processes";
/// How long a worker waits for one acquisition before it tries again.
const WAIT: Duration = Duration::from_secs(2);
/// How long a worker gives a write or a release before its outcome counts as unknown.
const STEP: Duration = Duration::from_secs(5);
/// A bound for what should take far less (a grant among four workers, a server's
/// start), so that a broken build fails rather than hangs. Not a timing assertion.
const LIVENESS: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("quorum_under_faults_across_processes: test");
        }
        return ExitCode::SUCCESS;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = match args.get(1).map(String::as_str) {
        Some("--worker") => rt.block_on(worker(&args[2..])),
        _ => rt.block_on(suite()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quorum_processes: {e:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------
// The worker.

/// Prints one line for the driver, whole, so that a SIGKILL never leaves half of one.
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{line}\n").as_bytes());
    let _ = out.flush();
}

/// The databases a worker is told of.
struct Urls {
    main_pg: String,
    fault_pg: String,
    fault_my: String,
    resource: String,
}

impl Urls {
    fn to_args(&self) -> [&str; 4] {
        [
            &self.main_pg,
            &self.fault_pg,
            &self.fault_my,
            &self.resource,
        ]
    }
}

/// `--worker OWNER SEED MAIN_PG FAULT_PG FAULT_MY RESOURCE`: contends for [`KEY`] until
/// its standard input closes, telling each grant, write and release as an event line
/// (its owner the one it was given), `HOLDING 1` once granted and `UNREACHABLE` when
/// fewer than a majority answered.
async fn worker(args: &[String]) -> anyhow::Result<()> {
    let [owner, seed, main_pg, fault_pg, fault_my, resource] = args else {
        anyhow::bail!("worker arguments: {args:?}");
    };
    // Before any connection is opened: a socket belongs to its maker's cgroup.
    let dir = std::env::var_os(CGROUP_ENV).context("the worker's cgroup")?;
    common::partition::join(std::path::Path::new(&dir))?;
    let pg = |url: &str, schema: Option<&str>| -> anyhow::Result<sqlock::DbPool> {
        let mut options = PgConnectOptions::from_str(url)?;
        if let Some(schema) = schema {
            options = options.options([("search_path", schema)]);
        }
        Ok(PgPoolOptions::new()
            .max_connections(3)
            .acquire_timeout(Duration::from_secs(1))
            .connect_lazy_with(options)
            .into())
    };
    let my = MySqlPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy(fault_my)?;
    let pools = [pg(main_pg, Some(SCHEMA))?, pg(fault_pg, None)?, my.into()];
    let mut members = Vec::new();
    for pool in pools {
        members.push(
            Locker::builder(pool)
                .table(TABLE)
                .ttl(TTL)
                .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
                .build()?,
        );
    }
    let quorum = Quorum::new(members)?;
    let resource = MySqlPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy(resource)?;
    let mut rng = fastrand::Rng::with_seed(seed.parse()?);
    // Runs until the driver closes its standard input, read on a thread of its own.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut input = std::io::stdin().lock();
            let mut buf = [0u8; 64];
            while matches!(input.read(&mut buf), Ok(n) if n > 0) {}
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let event = |key: &str, kind: Kind, token: i64, sent: u64| {
        say(&Event {
            kind,
            key: key.into(),
            owner: owner.clone(),
            token,
            sent,
            ack: history::now(),
        }
        .line());
    };
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let sent = history::now();
        let guard = match quorum.lock(KEY).ttl(TTL).timeout(WAIT).acquire().await {
            Ok(g) => g,
            Err(Error::Timeout { .. }) => continue,
            Err(Error::QuorumUnreachable { .. }) => {
                say("UNREACHABLE");
                sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => {
                say(&format!("ERROR {e}"));
                sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let token = guard.fencing_token();
        event(KEY, Kind::Grant, token, sent);
        say("HOLDING 1");
        // Time holding the lock before the write: a pause here makes a stale writer.
        sleep(Duration::from_millis(rng.u64(30..80))).await;
        let sent = history::now();
        let written = timeout(STEP, write(&resource, token, owner))
            .await
            .unwrap_or(Ok(Kind::Unknown))
            .unwrap_or(Kind::Unknown);
        event(WRITES, written, token, sent);
        let sent = history::now();
        let released = match timeout(STEP, guard.release()).await {
            Ok(Ok(true)) => Kind::Release,
            Ok(Ok(false)) => Kind::ReleaseRefused,
            _ => Kind::Unknown,
        };
        event(KEY, released, token, sent);
        say("HOLDING 0");
    }
    Ok(())
}

/// The resource's tables on the main MariaDB: its counter, and its log of accepted
/// writes in the order they committed.
fn resource_tables() -> (String, String) {
    (format!("{TABLE}_resource"), format!("{TABLE}_writes"))
}

/// One fenced write of the resource: accepted (and logged) unless a higher token has
/// written before, as a resource compares a quorum's token.
async fn write(resource: &MySqlPool, token: i64, owner: &str) -> anyhow::Result<Kind> {
    let (counter, writes) = resource_tables();
    let mut tx = resource.begin().await?;
    let done = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE {counter} SET n = n + 1, token = ? WHERE id = 0 AND token <= ?"
    )))
    .bind(token)
    .bind(token)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        tx.rollback().await?;
        return Ok(Kind::Rejected);
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {writes} (token, owner) VALUES (?, ?)"
    )))
    .bind(token)
    .bind(owner)
    .execute(&mut *tx)
    .await?;
    Ok(match tx.commit().await {
        Ok(()) => Kind::Write,
        Err(_) => Kind::Unknown,
    })
}

// ---------------------------------------------------------------------------------
// The driver.

/// What every worker has said, with `CLOCK_MONOTONIC` moments for the plain lines.
#[derive(Default)]
struct Told {
    events: Vec<Event>,
    /// When a worker said `UNREACHABLE`.
    unreachable: Vec<u64>,
    errors: Vec<String>,
}

/// The driver's request to pause or kill the next worker that says it holds: the
/// reader of that worker's lines signals it at once (before its write), then answers
/// with the worker's place.
type Catch = Arc<Mutex<Option<(Signal, oneshot::Sender<usize>)>>>;

struct Slot {
    child: Child,
    owner: String,
    pid: Pid,
    /// The task reading the worker's lines: done once the worker's output ended.
    reader: tokio::task::JoinHandle<()>,
}

struct Workload {
    urls: Urls,
    net: Partitions,
    told: Arc<Mutex<Told>>,
    catch: Catch,
    slots: Vec<Slot>,
    spawned: usize,
}

impl Workload {
    /// The cgroup of worker place `i`.
    fn cgroup_name(i: usize) -> String {
        format!("sqlock_qp_{i}")
    }

    /// Starts a worker in place `i` (a new owner each time).
    fn spawn(&mut self, i: usize) -> anyhow::Result<Slot> {
        self.spawned += 1;
        let owner = format!("worker-{}", self.spawned);
        let dir = self.net.cgroup(&Self::cgroup_name(i))?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--worker")
            .arg(&owner)
            .arg(self.spawned.to_string())
            .args(self.urls.to_args())
            .env(CGROUP_ENV, &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = Pid::from_raw(i32::try_from(child.id().context("a worker's pid")?)?);
        let mut lines = BufReader::new(child.stdout.take().context("worker stdout")?).lines();
        let (told, catch) = (self.told.clone(), self.catch.clone());
        let reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if line == "HOLDING 1" {
                    if let Some((sig, answer)) = catch.lock().unwrap().take() {
                        let _ = signal(pid, sig);
                        let _ = answer.send(i);
                    }
                } else if line == "UNREACHABLE" {
                    told.lock().unwrap().unreachable.push(history::now());
                } else if let Some(e) = Event::parse(&line) {
                    told.lock().unwrap().events.push(e);
                } else if line.starts_with("ERROR") {
                    told.lock().unwrap().errors.push(line);
                }
            }
        });
        Ok(Slot {
            child,
            owner,
            pid,
            reader,
        })
    }

    /// The events told so far.
    fn events(&self) -> Vec<Event> {
        self.told.lock().unwrap().events.clone()
    }

    /// Waits until an event matching `f` was told; its copy.
    async fn until(&self, what: &str, f: impl Fn(&Event) -> bool) -> anyhow::Result<Event> {
        let deadline = Instant::now() + LIVENESS;
        loop {
            if let Some(e) = self.told.lock().unwrap().events.iter().find(|e| f(e)) {
                return Ok(e.clone());
            }
            anyhow::ensure!(Instant::now() < deadline, "no {what} within {LIVENESS:?}");
            sleep(Duration::from_millis(10)).await;
        }
    }

    /// Signals the next worker that says it holds with `sig`: its place, and the
    /// token of the grant it was caught holding.
    async fn catch_holder(&self, sig: Signal) -> anyhow::Result<(usize, i64)> {
        let (tx, rx) = oneshot::channel();
        *self.catch.lock().unwrap() = Some((sig, tx));
        let i = timeout(LIVENESS, rx)
            .await
            .context("no worker held within the bound")??;
        let owner = self.slots[i].owner.clone();
        // Its grant event came before its HOLDING line.
        let grant = self
            .events()
            .into_iter()
            .filter(|e| e.kind == Kind::Grant && e.owner == owner)
            .max_by_key(|e| e.ack)
            .context("a holder without a grant")?;
        Ok((i, grant.token))
    }

    /// A grant, to anyone, sent after `after` and answered.
    async fn grant_after(&self, what: &str, after: u64) -> anyhow::Result<Event> {
        self.until(what, |e| e.kind == Kind::Grant && e.sent > after)
            .await
    }
}

/// The resource's tables, made afresh on the main MariaDB.
async fn fresh_resource(b: &Backend, pool: &sqlock::DbPool) -> anyhow::Result<()> {
    let (counter, writes) = resource_tables();
    b.script(
        pool,
        &format!(
            "DROP TABLE IF EXISTS {counter}; DROP TABLE IF EXISTS {writes}; \
             CREATE TABLE {counter} (id INT PRIMARY KEY, n BIGINT NOT NULL, token BIGINT NOT NULL); \
             INSERT INTO {counter} VALUES (0, 0, 0); \
             CREATE TABLE {writes} (id BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT NOT NULL, \
             owner VARCHAR(64) NOT NULL)"
        ),
    )
    .await
}

/// When the fault PostgreSQL last started, in microseconds since the epoch.
async fn pg_started(b: &Backend) -> anyhow::Result<i64> {
    let pool = b.pool().await?;
    let sql = "SELECT CAST(EXTRACT(EPOCH FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)";
    let at = b.scalar(&pool, sql).await;
    pool.close().await;
    at
}

/// How often the fault MariaDB recovered from its redo log.
async fn mariadb_recoveries() -> anyhow::Result<u64> {
    let out = Command::new("bash")
        .args([common::FAULT_DB_SCRIPT, "mariadb", "recoveries"])
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "fault-db.sh mariadb recoveries failed"
    );
    Ok(String::from_utf8(out.stdout)?.trim().parse().unwrap_or(0))
}

/// Grants whose whole round fell within `[from, to]`.
fn grants_within(events: &[Event], from: u64, to: u64) -> usize {
    events
        .iter()
        .filter(|e| e.kind == Kind::Grant && e.sent >= from && e.ack <= to)
        .count()
}

async fn suite() -> anyhow::Result<()> {
    let fault = common::fault_servers("quorum_processes").await;
    let mains = common::servers("quorum_processes").await;
    let (Some(fault_pg), Some(fault_my), Some(main_pg), Some(main_my)) = (
        fault.iter().find(|b| b.dialect == Dialect::Postgres),
        fault.iter().find(|b| b.dialect == Dialect::MySql),
        mains.iter().find(|b| b.dialect == Dialect::Postgres),
        mains.iter().find(|b| b.dialect == Dialect::MySql),
    ) else {
        eprintln!("NOTE: the servers are left out: nothing to run the quorum on");
        return Ok(());
    };
    history::self_check();

    // Fresh member tables: the main PostgreSQL's in a schema of its own.
    let admin = main_pg.pool().await?;
    main_pg
        .script(
            &admin,
            &format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"),
        )
        .await?;
    let in_schema = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(PgConnectOptions::from_str(main_pg.url())?.options([("search_path", SCHEMA)]))
        .await?;
    Locker::builder(in_schema.clone())
        .table(TABLE)
        .build()?
        .create_table()
        .await?;
    in_schema.close().await;
    for b in [fault_pg, fault_my] {
        let mut b = b.clone();
        b.table = TABLE.into();
        b.fresh_table().await?;
    }
    let resource_pool = main_my.pool().await?;
    fresh_resource(main_my, &resource_pool).await?;

    let mut w = Workload {
        urls: Urls {
            main_pg: main_pg.url().into(),
            fault_pg: fault_pg.url().into(),
            fault_my: fault_my.url().into(),
            resource: main_my.url().into(),
        },
        net: Partitions::new()?,
        told: Arc::default(),
        catch: Arc::default(),
        slots: Vec::new(),
        spawned: 0,
    };
    for i in 0..WORKERS {
        let slot = w.spawn(i)?;
        w.slots.push(slot);
    }
    let outcome = drive(&mut w, fault_pg).await;
    // However it went: no worker caught any more, every cut healed, the workers
    // stopped (their last lines read), both fault servers up.
    *w.catch.lock().unwrap() = None;
    let _ = w.net.heal_all();
    for slot in &mut w.slots {
        let _ = signal(slot.pid, Signal::SIGCONT);
        drop(slot.child.stdin.take());
    }
    for slot in &mut w.slots {
        if timeout(Duration::from_secs(30), slot.child.wait())
            .await
            .is_err()
        {
            let _ = slot.child.kill().await;
        }
        let _ = timeout(Duration::from_secs(10), &mut slot.reader).await;
    }
    let _ = common::fault_db("postgres", "start").await;
    let _ = common::fault_db("mariadb", "start").await;
    let took = outcome?;
    check(&w, main_my, &resource_pool, &took).await?;
    main_pg
        .script(&admin, &format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .await?;
    Ok(())
}

/// What the driver saw of its faults, to be matched with the events afterwards.
#[derive(Default)]
struct Took {
    /// The pauses that outlasted the TTL: the worker's owner and its token, and when
    /// it was let go on.
    pauses: Vec<(String, i64, u64)>,
    /// The owners killed while they held, each with the token they held.
    killed: Vec<(String, i64)>,
    lines: Vec<String>,
}

/// The faults, one after another, each seen to take.
async fn drive(w: &mut Workload, fault_pg: &Backend) -> anyhow::Result<Took> {
    let mut took = Took::default();
    w.grant_after("a first grant", 0).await?;

    // Holders paused past the TTL, until one's write is refused because a higher
    // token wrote meanwhile (another worker may not have written in time).
    for round in 0.. {
        anyhow::ensure!(
            round < 10,
            "no paused holder's write was refused in 10 pauses"
        );
        let (i, token) = w.catch_holder(Signal::SIGSTOP).await?;
        let owner = w.slots[i].owner.clone();
        // Past the TTL, and until another owner holds: its lease has lapsed by then.
        sleep(TTL + Duration::from_millis(300)).await;
        w.until("a grant to another owner during a pause", |e| {
            e.kind == Kind::Grant && e.owner != owner && e.token > token
        })
        .await?;
        sleep(Duration::from_millis(200)).await;
        signal(w.slots[i].pid, Signal::SIGCONT)?;
        let resumed = history::now();
        took.pauses.push((owner.clone(), token, resumed));
        let wrote = w
            .until("the paused holder's write", |e| {
                e.owner == owner
                    && e.token == token
                    && matches!(e.kind, Kind::Write | Kind::Rejected | Kind::Unknown)
            })
            .await?;
        if wrote.kind == Kind::Rejected {
            took.lines.push(format!(
                "paused {round_n} holder(s) past the TTL: the write of token {token} was refused",
                round_n = round + 1
            ));
            break;
        }
    }

    // A holder killed before its write: its lock goes to another owner, no sooner
    // than its leases lapse (the checker judges its hold as lasting at least a TTL
    // from its request). A kill that landed after the write (the worker's line was
    // read late) is tried again.
    for round in 0.. {
        anyhow::ensure!(
            round < 5,
            "no kill landed before its holder's write in 5 tries"
        );
        let (i, token) = w.catch_holder(Signal::SIGKILL).await?;
        let killed = w.slots[i].owner.clone();
        let _ = w.slots[i].child.wait().await;
        let _ = timeout(Duration::from_secs(10), &mut w.slots[i].reader).await;
        took.killed.push((killed.clone(), token));
        let replacement = w.spawn(i)?;
        w.slots[i] = replacement;
        let next = w
            .until("a grant after the kill", |e| {
                e.kind == Kind::Grant && e.owner != killed && e.token > token
            })
            .await?;
        let events = w.events();
        let grant = events
            .iter()
            .find(|e| e.kind == Kind::Grant && e.owner == killed && e.token == token)
            .context("the killed holder's grant")?
            .clone();
        if events
            .iter()
            .any(|e| e.owner == killed && e.token == token && e.kind != Kind::Grant)
        {
            continue;
        }
        // The hold's end, for the checker: no earlier than its leases' lapse, which
        // is no earlier than a TTL after its request was sent.
        w.told.lock().unwrap().events.push(Event {
            kind: Kind::Expired,
            sent: grant.sent,
            ack: grant.sent,
            ..grant
        });
        took.lines.push(format!(
            "killed the holder of token {token} before its write: token {} went to {}",
            next.token, next.owner
        ));
        break;
    }

    // One worker cut off the fault PostgreSQL both ways: it is granted through the
    // other two while the cut lasts.
    let port = common::port_of(fault_pg.url())?;
    let cut_owner = w.slots[0].owner.clone();
    let cut = w
        .net
        .cut(&Workload::cgroup_name(0), port, Direction::Both)?;
    let cut_at = history::now();
    let granted = w
        .until("a grant to the cut worker during its cut", |e| {
            e.kind == Kind::Grant && e.owner == cut_owner && e.sent > cut_at
        })
        .await;
    // Long enough for its renewals there to have failed.
    sleep(TTL).await;
    let dropped = w.net.heal(cut)?;
    let granted = granted?;
    anyhow::ensure!(
        dropped.total() > 0,
        "the cut dropped no packet, so it tested nothing"
    );
    took.lines.push(format!(
        "cut {cut_owner} off the fault PostgreSQL ({} packets dropped to it, {} from it): \
         granted token {} meanwhile",
        dropped.to_server, dropped.from_server, granted.token
    ));

    // Each fault server crashed under the workload, down a while, and started again.
    for server in ["postgres", "mariadb"] {
        // Under the workload: just after a grant.
        w.grant_after("a grant before the crash", history::now())
            .await?;
        let before = match server {
            "postgres" => pg_started(fault_pg).await?,
            _ => i64::try_from(mariadb_recoveries().await?)?,
        };
        common::fault_db(server, "crash").await?;
        let down_at = history::now();
        sleep(TTL * 2).await;
        w.grant_after("a grant with a server crashed", down_at)
            .await?;
        let up_at = history::now();
        common::fault_db(server, "start").await?;
        let after = match server {
            "postgres" => pg_started(fault_pg).await?,
            _ => i64::try_from(mariadb_recoveries().await?)?,
        };
        anyhow::ensure!(
            after > before,
            "the {server} crash did not take: {before} then {after}"
        );
        let grants = grants_within(&w.events(), down_at, up_at);
        anyhow::ensure!(grants > 0, "no grant while {server} was down");
        took.lines.push(format!(
            "crashed the fault {server}: {grants} grants while it was down, restarted"
        ));
        w.grant_after("a grant after the restart", history::now())
            .await?;
    }

    // Two of three stopped: nothing is granted, the workers hear why; started again,
    // grants resume with tokens still rising (checked with the rest).
    w.grant_after("a grant before the stops", history::now())
        .await?;
    common::fault_db("postgres", "stop").await?;
    common::fault_db("mariadb", "stop").await?;
    let both_down = history::now();
    sleep(TTL * 2).await;
    let both_up = history::now();
    common::fault_db("postgres", "start").await?;
    common::fault_db("mariadb", "start").await?;
    let grants = grants_within(&w.events(), both_down, both_up);
    anyhow::ensure!(
        grants == 0,
        "{grants} grants with two of three databases stopped"
    );
    let heard = {
        let told = w.told.lock().unwrap();
        told.unreachable
            .iter()
            .filter(|&&t| t >= both_down && t <= both_up)
            .count()
    };
    anyhow::ensure!(heard > 0, "no worker was told the quorum was unreachable");
    let resumed = w
        .grant_after("a grant once both started", history::now())
        .await?;
    took.lines.push(format!(
        "stopped two of three: no grant, {heard} unreachable answers; started, token {} granted",
        resumed.token
    ));
    Ok(took)
}

/// The history and the resource, checked; the faults matched with what they did.
async fn check(
    w: &Workload,
    main_my: &Backend,
    resource: &sqlock::DbPool,
    took: &Took,
) -> anyhow::Result<()> {
    let events = w.events();
    // Writes to the resource are not confirmations of holding (the resource accepts a
    // stale token until a higher one has written); their check is the log's.
    let holds: Vec<Event> = events.iter().filter(|e| e.key == KEY).cloned().collect();
    let verdict = history::check_leases(&holds, TTL);
    let written: Vec<&Event> = events.iter().filter(|e| e.key == WRITES).collect();
    let accepted: Vec<&Event> = written
        .iter()
        .copied()
        .filter(|e| e.kind == Kind::Write)
        .collect();
    let rejected = written.iter().filter(|e| e.kind == Kind::Rejected).count();
    println!(
        "quorum across processes: {verdict}; writes accepted {}, refused {rejected}",
        accepted.len()
    );
    for line in &took.lines {
        println!("  {line}");
    }
    let errors = w.told.lock().unwrap().errors.clone();
    if !errors.is_empty() {
        println!("  {} other errors, the first: {}", errors.len(), errors[0]);
    }
    anyhow::ensure!(
        verdict.violations.is_empty(),
        "violations:\n{}",
        verdict.violations.join("\n")
    );
    anyhow::ensure!(verdict.grants >= 20, "only {} grants", verdict.grants);
    // A paused holder's write refused, as the driver saw it.
    anyhow::ensure!(
        took.pauses.iter().any(|(owner, token, _)| written
            .iter()
            .any(|e| e.kind == Kind::Rejected && &e.owner == owner && e.token == *token)),
        "no paused holder's write was refused"
    );

    // The resource's log: tokens never go down in commit order; it holds every write
    // told accepted and at most the unknown ones besides; the counter counts it.
    let (counter, writes) = resource_tables();
    let sqlock::DbPool::MySql(pool) = resource else {
        anyhow::bail!("the resource is on MariaDB");
    };
    let log: Vec<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT token, owner FROM {writes} ORDER BY id"
    )))
    .fetch_all(pool)
    .await?;
    for pair in log.windows(2) {
        anyhow::ensure!(
            pair[0].0 <= pair[1].0,
            "the resource accepted token {} after token {}",
            pair[1].0,
            pair[0].0
        );
    }
    for e in &accepted {
        anyhow::ensure!(
            log.iter().any(|(t, o)| *t == e.token && *o == e.owner),
            "an accepted write is not in the log: {e:?}"
        );
    }
    // Every logged write was made under a grant of its token to its writer.
    for (token, owner) in &log {
        anyhow::ensure!(
            holds
                .iter()
                .any(|e| e.kind == Kind::Grant && e.token == *token && &e.owner == owner),
            "the resource logged a write of token {token} by {owner}, never granted it"
        );
    }
    // Besides those told accepted: the writes whose outcome is unknown, and those of
    // a holder killed after its write committed, before it could say so.
    let unknown = written.iter().filter(|e| e.kind == Kind::Unknown).count();
    let untold = log
        .iter()
        .filter(|(t, o)| {
            took.killed.iter().any(|(k, kt)| k == o && kt == t)
                && !written.iter().any(|e| e.token == *t && &e.owner == o)
        })
        .count();
    anyhow::ensure!(
        log.len() >= accepted.len() && log.len() <= accepted.len() + unknown + untold,
        "{} writes logged, {} told accepted, {unknown} unknown, {untold} by killed holders",
        log.len(),
        accepted.len()
    );
    let n = main_my
        .scalar(resource, &format!("SELECT n FROM {counter} WHERE id = 0"))
        .await?;
    anyhow::ensure!(
        usize::try_from(n)? == log.len(),
        "the counter says {n}, the log {}",
        log.len()
    );
    Ok(())
}
