//! The fault workload's worker process: holds one primitive over and over, and under
//! each hold does a fenced read-modify-write increment of a counter, telling the driver
//! every grant, write and release as a `history.rs` event line.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlock::{
    DbPool, Dialect, Error, FenceConnection, Leadership, LockGuard, Locker, MultiLockGuard,
    SemaphoreGuard, Strategy,
};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::time::Instant;

use crate::common::history::{self, Event, Kind};

/// The lease TTL of the workers: short, so that pauses outlast it often.
pub const TTL: Duration = Duration::from_secs(1);
/// How often a worker's leases are renewed.
pub const RENEW_EVERY: Duration = Duration::from_millis(300);
/// The one name every worker of a workload contends for.
pub const KEY: &str = "counter";
/// The second key a multi-lock workload takes with [`KEY`], all or none.
pub const KEY2: &str = "counter-2";
/// The permits of the semaphore workload: each guards a counter of its own.
pub const PERMITS: u32 = 2;

/// How long a worker waits for the statements of one step under a hold (its write,
/// its release): a row lock a statement waits for may be held by a session whose
/// client is gone (cut off) until the server notices, and a connection whose server
/// crashed during a cut learns it only at its next retransmission, which TCP's
/// back-off may put many seconds after the cut healed. Past it, the step's outcome
/// is unknown, as the checks then take it.
const STATEMENTS_WAIT: Duration = Duration::from_secs(5);

/// What a workload's workers hold.
///
/// - a lock of one strategy, checked against the fenced-mutex model;
/// - a multi-lock of [`KEY`] and [`KEY2`] (leases), every key checked against the mutex
///   model, writes fenced by both tokens;
/// - a semaphore of [`PERMITS`] permits (one taken at a time), checked against the
///   model of N permits, each permit's writes going to its slot's counter;
/// - a read-write lock, half of the grants reads, checked against the read-write
///   model, the writers' writes fenced by the write side;
/// - an election, one leader per term, the leader's writes fenced by its term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    Lock(Strategy),
    Multi,
    Semaphore,
    RwLock,
    Election,
}

impl std::fmt::Display for Primitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Lock(s) => s.fmt(f),
            Self::Multi => f.write_str("multi-lock"),
            Self::Semaphore => f.write_str("semaphore"),
            Self::RwLock => f.write_str("read-write"),
            Self::Election => f.write_str("election"),
        }
    }
}

impl FromStr for Primitive {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "multi-lock" => Self::Multi,
            "semaphore" => Self::Semaphore,
            "read-write" => Self::RwLock,
            "election" => Self::Election,
            s => Self::Lock(Strategy::from_str(s)?),
        })
    }
}

impl Primitive {
    /// How many keys a grant takes: each event is told once per key.
    pub fn keys(self) -> usize {
        match self {
            Self::Multi => 2,
            _ => 1,
        }
    }

    /// The counters of the workload's table: one per permit for the semaphore.
    pub fn counters(self) -> u32 {
        match self {
            Self::Semaphore => PERMITS,
            _ => 1,
        }
    }

    /// Whether the lock's own transaction is what fences its writes.
    fn in_lock(self) -> bool {
        self == Self::Lock(Strategy::ForUpdate)
    }
}

/// What a worker is told on its command line.
pub struct WorkerArgs {
    pub dialect: Dialect,
    pub url: String,
    pub table: String,
    pub primitive: Primitive,
    pub presence: bool,
    pub fence: bool,
    pub run_for: Duration,
    pub tag: String,
    pub seed: u64,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--worker".into(),
            self.dialect.to_string(),
            self.url.clone(),
            self.table.clone(),
            self.primitive.to_string(),
            u8::from(self.presence).to_string(),
            u8::from(self.fence).to_string(),
            self.run_for.as_millis().to_string(),
            self.tag.clone(),
            self.seed.to_string(),
        ]
    }

    pub fn parse(a: &[String]) -> anyhow::Result<Self> {
        anyhow::ensure!(a.len() == 9, "worker arguments: {a:?}");
        Ok(Self {
            dialect: match a[0].as_str() {
                "postgres" => Dialect::Postgres,
                _ => Dialect::MySql,
            },
            url: a[1].clone(),
            table: a[2].clone(),
            primitive: Primitive::from_str(&a[3])?,
            presence: a[4] == "1",
            fence: a[5] == "1",
            run_for: Duration::from_millis(a[6].parse()?),
            tag: a[7].clone(),
            seed: a[8].parse()?,
        })
    }
}

/// Prints one line for the driver. Each line is written whole, so a SIGKILL never
/// leaves half of one.
pub fn say(line: &str) {
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

impl From<anyhow::Result<Outcome>> for Kind {
    fn from(o: anyhow::Result<Outcome>) -> Self {
        match o {
            Ok(Outcome::Accepted) => Kind::Write,
            Ok(Outcome::Rejected) => Kind::Rejected,
            Ok(Outcome::Unknown) | Err(_) => Kind::Unknown,
        }
    }
}

/// One hold of the workload's primitive.
enum Held {
    /// A lock of any strategy, or the write side of a read-write lock.
    Lock(LockGuard),
    /// A read of a read-write lock.
    Read(LockGuard),
    Multi(MultiLockGuard),
    Permit(SemaphoreGuard),
    Leader(Leadership),
}

impl Held {
    /// The keys the hold took, each with its token (a leader's: its term).
    fn tokens(&self) -> Vec<(String, i64)> {
        match self {
            Self::Lock(g) => vec![(g.key().to_owned(), g.fencing_token())],
            // Told by the read's own row (the name's read by this owner), as the
            // history checker tells reads from the write side.
            Self::Read(g) => vec![(format!("{}@read:{}", g.key(), g.owner()), g.fencing_token())],
            Self::Multi(m) => m.tokens().map(|(k, t)| (k.to_owned(), t)).collect(),
            Self::Permit(p) => p.tokens().map(|(k, t)| (k.to_owned(), t)).collect(),
            Self::Leader(l) => vec![(l.key().to_owned(), l.term())],
        }
    }

    /// The counter the hold's writes go to: its slot for a permit, else the one.
    fn counter(&self) -> anyhow::Result<i64> {
        match self {
            Self::Permit(p) => {
                let key = p.keys().next().context("a permit without a key")?;
                let slot = key.rsplit('#').next().context("a slot's key")?;
                Ok(slot.parse()?)
            }
            _ => Ok(0),
        }
    }

    /// Whether the hold writes: a reader of a read-write lock only reads.
    fn writes(&self) -> bool {
        !matches!(self, Self::Read(_))
    }

    /// The fence checks of the hold, first in the write's transaction.
    async fn fence<C: FenceConnection>(&self, conn: &mut C) -> sqlock::Result<()> {
        match self {
            Self::Lock(g) | Self::Read(g) => g.fence(conn).await,
            Self::Multi(m) => {
                for g in m.guards() {
                    g.fence(&mut *conn).await?;
                }
                Ok(())
            }
            Self::Permit(p) => p.fence(conn).await,
            Self::Leader(l) => l.fence(conn).await,
        }
    }

    /// Gives the hold back: whether it was still held. A multi-lock or a permit that
    /// was not wholly held any more is an unknown outcome, which the checker treats as
    /// the hold's end, no more.
    async fn release(self) -> Kind {
        let released = match self {
            Self::Lock(g) | Self::Read(g) => g.release().await,
            Self::Leader(l) => l.resign().await,
            Self::Multi(m) => {
                return match m.release().await {
                    Ok(true) => Kind::Release,
                    Ok(false) | Err(_) => Kind::Unknown,
                }
            }
            Self::Permit(p) => p.release().await,
        };
        match released {
            Ok(true) => Kind::Release,
            Ok(false) => Kind::ReleaseRefused,
            Err(_) => Kind::Unknown,
        }
    }
}

/// A pool whose connections carry the worker's tag (an application_name on
/// PostgreSQL, a user on MariaDB), so that the driver can kill exactly this worker's
/// connections; presence's connections carry it too.
fn pool(w: &WorkerArgs) -> anyhow::Result<DbPool> {
    Ok(match w.dialect {
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
    })
}

/// What a worker takes its holds from: its handle, and the semaphore and the
/// election made once (a candidate has a handle of its own, with its own presence
/// connections).
struct Source {
    locker: Locker,
    semaphore: sqlock::Semaphore,
    election: sqlock::Election,
}

/// Waits up to 2 s for the workload's primitive: `None` when the wait ran out.
async fn acquire(
    from: &Source,
    w: &WorkerArgs,
    rng: &mut fastrand::Rng,
) -> sqlock::Result<Option<Held>> {
    let wait = Duration::from_secs(2);
    let locker = &from.locker;
    let held = match w.primitive {
        Primitive::Lock(_) => locker.acquire_timeout(KEY, wait).await.map(Held::Lock),
        Primitive::Multi => locker
            .lock_many(&[KEY, KEY2])
            .acquire_timeout(wait)
            .await
            .map(Held::Multi),
        Primitive::Semaphore => from.semaphore.acquire_timeout(wait).await.map(Held::Permit),
        Primitive::RwLock if rng.bool() => locker
            .read_lock(KEY)
            .acquire_timeout(wait)
            .await
            .map(Held::Read),
        Primitive::RwLock => locker
            .write_lock(KEY)
            .acquire_timeout(wait)
            .await
            .map(Held::Lock),
        Primitive::Election => from.election.campaign_timeout(wait).await.map(Held::Leader),
    };
    match held {
        Ok(h) => Ok(Some(h)),
        Err(Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

pub async fn worker(w: WorkerArgs) -> anyhow::Result<()> {
    // Before any connection is opened: a socket belongs to its maker's cgroup.
    if let Some(dir) = std::env::var_os(crate::CGROUP_ENV) {
        crate::common::partition::join(std::path::Path::new(&dir))?;
    }
    let pool = pool(&w)?;
    let strategy = match w.primitive {
        Primitive::Lock(s) => s,
        _ => Strategy::Lease,
    };
    let locker = Locker::builder(pool.clone())
        .table(&w.table)
        .strategy(strategy)
        .ttl(TTL)
        .presence(w.presence)
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .keepalive(RENEW_EVERY)
        .build()?;
    let from = Source {
        semaphore: locker.semaphore(KEY, PERMITS).ttl(TTL),
        election: locker.election(KEY).ttl(TTL),
        locker,
    };
    // A candidate holds with an owner of its own.
    let owner = match w.primitive {
        Primitive::Election => from.election.locker().owner().to_string(),
        _ => from.locker.owner().to_string(),
    };
    // The driver learns who this worker is, to find its holds after a SIGKILL.
    say(&format!("OWNER {owner}"));
    let mut rng = fastrand::Rng::with_seed(w.seed);
    // The worker runs until the driver closes its standard input (once the workload
    // has met what the phase asks of it), or at the latest `run_for`. Read on a thread
    // of its own, which never holds up the process's exit.
    let deadline = Instant::now() + w.run_for;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
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
    // A worker that has not ended 20 s after it was told to stop (or after its
    // deadline) says what it was doing and exits, from a thread of its own (the
    // runtime's threads may be what is stuck).
    let doing = std::sync::Arc::new(std::sync::Mutex::new("starting"));
    {
        let (doing, stop) = (doing.clone(), stop.clone());
        std::thread::spawn(move || {
            while Instant::now() < deadline && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
            }
            std::thread::sleep(Duration::from_secs(20));
            say(&format!("ERROR stuck: {}", doing.lock().unwrap()));
            std::process::exit(3);
        });
    }
    // A step that took longer than its bound plus the longest pause the driver makes
    // (acquiring waits 2 s, a write or release 5 s; a pause lasts up to 2.3 s) is told
    // to the driver, which shows the slowest.
    let began = std::sync::Mutex::new(("starting", Instant::now()));
    let now_doing = |what: &'static str| {
        *doing.lock().unwrap() = what;
        let (step, at) = std::mem::replace(&mut *began.lock().unwrap(), (what, Instant::now()));
        let bound = if step == "acquiring" { 5 } else { 8 };
        if at.elapsed() > Duration::from_secs(bound) {
            say(&format!("SLOW {} {step}", at.elapsed().as_millis()));
        }
    };
    let events = |kind: Kind, tokens: &[(String, i64)], sent| {
        for (key, token) in tokens {
            say(&Event {
                kind: kind.clone(),
                key: key.clone(),
                owner: owner.clone(),
                token: *token,
                sent,
                ack: history::now(),
            }
            .line());
        }
    };
    while Instant::now() < deadline && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let sent = history::now();
        now_doing("acquiring");
        let held = match acquire(&from, &w, &mut rng).await {
            Ok(Some(h)) => h,
            Ok(None) => continue,
            Err(e) => {
                say(&format!("ERROR acquire: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let tokens = held.tokens();
        anyhow::ensure!(
            tokens.len() == w.primitive.keys(),
            "{} granted {tokens:?}",
            w.primitive
        );
        events(Kind::Grant, &tokens, sent);
        say("HOLDING 1");
        // Time holding the lock before the write: a pause here makes a stale writer.
        tokio::time::sleep(Duration::from_millis(rng.u64(0..60))).await;
        let sent = history::now();
        now_doing("writing");
        match held {
            Held::Lock(guard) if w.primitive.in_lock() => {
                // The write goes into the lock's own transaction, and commit ends the
                // lock: accepted means both happened. Bounded, as every statement a
                // worker sends under a hold (see `STATEMENTS_WAIT`).
                let written = async {
                    match increment_in_lock(&guard, &w.table, &owner, &mut rng).await {
                        Ok(()) => match guard.commit().await {
                            Ok(()) => Kind::Write,
                            Err(_) => Kind::Unknown,
                        },
                        Err(_) => Kind::Unknown,
                    }
                };
                let kind = tokio::time::timeout(STATEMENTS_WAIT, written)
                    .await
                    .unwrap_or(Kind::Unknown);
                events(kind.clone(), &tokens, sent);
                if kind == Kind::Write {
                    events(Kind::Release, &tokens, sent);
                }
            }
            held => {
                if held.writes() {
                    let written = tokio::time::timeout(
                        STATEMENTS_WAIT,
                        increment(&pool, &held, &w, &owner, &mut rng),
                    )
                    .await
                    .unwrap_or(Ok(Outcome::Unknown));
                    events(written.into(), &tokens, sent);
                } else {
                    // A reader holds a while, as a writer does.
                    tokio::time::sleep(Duration::from_millis(rng.u64(10..80))).await;
                }
                let sent = history::now();
                now_doing("releasing");
                let released = tokio::time::timeout(STATEMENTS_WAIT, held.release())
                    .await
                    .unwrap_or(Kind::Unknown);
                events(released, &tokens, sent);
            }
        }
        say("HOLDING 0");
    }
    now_doing("ending");
    Ok(())
}

/// The counters and the log of accepted writes of a workload's table.
pub fn side_tables(table: &str) -> (String, String) {
    (format!("{table}_counter"), format!("{table}_writes"))
}

/// A read-modify-write increment of the hold's counter in a transaction of the
/// worker's own, fenced by the hold unless the workload turned the fence off. It
/// reads, thinks a while (a pause may land here), and writes what it read plus one,
/// logging the write with the hold's first token.
async fn increment(
    pool: &DbPool,
    held: &Held,
    w: &WorkerArgs,
    owner: &str,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<Outcome> {
    let (counter, writes) = side_tables(&w.table);
    let think = Duration::from_millis(rng.u64(10..80));
    // The first key's token orders the writes (a multi-lock's keys are granted
    // together, so the first key's tokens rise as the grants do).
    let token = held.tokens().first().context("no token")?.1;
    let slot = held.counter()?;
    macro_rules! rmw {
        ($p:expr, $ph:expr) => {{
            let mut tx = $p.begin().await?;
            if w.fence {
                match held.fence(&mut *tx).await {
                    Ok(()) => {}
                    Err(Error::LockLost { .. }) => return Ok(Outcome::Rejected),
                    Err(e) => return Err(e.into()),
                }
            }
            let [a, b, c, d] = $ph;
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT n FROM {counter} WHERE id = {a}"
            )))
            .bind(slot)
            .fetch_one(&mut *tx)
            .await?;
            tokio::time::sleep(think).await;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {counter} SET n = {a} WHERE id = {b}"
            )))
            .bind(n + 1)
            .bind(slot)
            .execute(&mut *tx)
            .await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {writes} (slot, value, token, owner) VALUES ({a}, {b}, {c}, {d})"
            )))
            .bind(slot)
            .bind(n + 1)
            .bind(token)
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
        DbPool::Postgres(p) => rmw!(p, ["$1", "$2", "$3", "$4"]),
        DbPool::MySql(p) => rmw!(p, ["?", "?", "?", "?"]),
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
                "SELECT n FROM {counter} WHERE id = 0"
            )))
            .fetch_one(&mut **tx)
            .await?;
            tokio::time::sleep(think).await;
            let [a, b, c] = $ph;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {counter} SET n = {a} WHERE id = 0"
            )))
            .bind(n + 1)
            .execute(&mut **tx)
            .await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {writes} (slot, value, token, owner) VALUES (0, {a}, {b}, {c})"
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
