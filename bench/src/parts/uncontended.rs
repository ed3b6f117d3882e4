//! The parts of a run, each measuring the library beside its baselines.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlock::{DbPool, Dialect, Locker, Strategy, TableName};
use tokio::task::JoinSet;

use super::count::{self, Snapshot};
use super::raw::{self, RawStatements, Values};
use super::stats::Samples;
use super::{db_failure, KEY_PREFIX};
use crate::args::BenchArgs;
use crate::Failure;

/// The TTL of every lease the benchmark takes: long enough never to lapse in a run.
pub(crate) const TTL: Duration = Duration::from_secs(30);

/// How many round-trip samples are taken per strategy.
const ROUND_TRIP_SAMPLES: u32 = 20;

/// What is measured: the library with a strategy, the same statements sent raw, the
/// server's native lock, or Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Variant {
    Library(Strategy),
    Raw(Strategy),
    Native,
    Redis,
}

impl Variant {
    /// `library`, `raw`, `native` or `redis`.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Self::Library(_) => "library",
            Self::Raw(_) => "raw",
            Self::Native => "native",
            Self::Redis => "redis",
        }
    }

    /// The strategy's name, or what the baseline uses.
    pub(crate) fn strategy(self) -> &'static str {
        match self {
            Self::Library(s) | Self::Raw(s) => s.name(),
            Self::Native => "advisory",
            Self::Redis => "set-nx-px",
        }
    }

    /// How the chart and the tables name it.
    pub(crate) fn label(self) -> String {
        match self {
            Self::Library(s) | Self::Raw(s) => format!("{} {}", s.name(), self.kind()),
            Self::Native => "native lock".into(),
            Self::Redis => "redis".into(),
        }
    }
}

/// One uncontended measurement, summed over its rounds.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    pub(crate) variant: Variant,
    pub(crate) workers: usize,
    pub(crate) ops: u64,
    pub(crate) busy: u64,
    pub(crate) secs: f64,
    pub(crate) latency: Samples,
    pub(crate) stmts: Snapshot,
}

impl Measured {
    pub(crate) fn per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// Statements one acquisition and one release send, by the library's count.
#[derive(Debug, Clone)]
pub(crate) struct RoundTrips {
    pub(crate) strategy: Strategy,
    pub(crate) acquire: f64,
    pub(crate) release: f64,
}

/// How contended waiters wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// The library, polling at `--poll`.
    Poll,
    /// The library, polling at `--poll` and woken by the release (PostgreSQL).
    Notify,
    /// The library's for-update strategy, whose waiters wait in the database.
    InDatabase,
    /// The server's native lock, blocking in the server.
    NativeBlocking,
}

impl Waiting {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Poll => "library, polling",
            Self::Notify => "library, notify",
            Self::InDatabase => "library, in database",
            Self::NativeBlocking => "native, blocking",
        }
    }
}

/// One contended measurement, summed over its rounds.
#[derive(Debug, Clone)]
pub(crate) struct Contended {
    pub(crate) waiting: Waiting,
    pub(crate) strategy: &'static str,
    pub(crate) workers: usize,
    pub(crate) grants: u64,
    pub(crate) secs: f64,
    pub(crate) handoff: Samples,
    pub(crate) stmts: Snapshot,
    /// Seconds the workers spent waiting for the lock, summed.
    pub(crate) wait_secs: f64,
}

impl Contended {
    /// Statements a waiting worker sends per second of waiting: everything sent but
    /// the releases (one statement each), over the time spent waiting.
    pub(crate) fn waiter_rate(&self) -> f64 {
        let sent = self.stmts.total().saturating_sub(self.grants);
        if self.wait_secs > 0.0 {
            sent as f64 / self.wait_secs
        } else {
            0.0
        }
    }
}

/// The watchdog part's counts.
#[derive(Debug, Clone)]
pub(crate) struct WatchdogRun {
    pub(crate) leases: u64,
    pub(crate) ticks: u64,
    pub(crate) statements: u64,
    pub(crate) renewed: u64,
    pub(crate) failed_ticks: u64,
    /// Statements sqlx saw in the window, whoever sent them.
    pub(crate) client_statements: u64,
    /// The mean time of one renewal statement, in microseconds.
    pub(crate) renew_mean_us: f64,
    pub(crate) acquire_secs: f64,
}

/// The scale part's latencies.
#[derive(Debug, Clone)]
pub(crate) struct ScaleRun {
    pub(crate) small_rows: u64,
    pub(crate) big_rows: u64,
    pub(crate) small: Samples,
    pub(crate) big: Samples,
    pub(crate) fill_secs: f64,
    pub(crate) explain: Vec<(String, Vec<String>)>,
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) dialect: Dialect,
    pub(crate) server: String,
    pub(crate) table: String,
    pub(crate) date: String,
    pub(crate) cpus: usize,
    pub(crate) load_before: Option<String>,
    pub(crate) load_after: Option<String>,
    pub(crate) secs: f64,
    pub(crate) notify: bool,
    pub(crate) uncontended: Vec<Measured>,
    pub(crate) round_trips: Vec<RoundTrips>,
    pub(crate) contended: Vec<Contended>,
    pub(crate) watchdog: Option<WatchdogRun>,
    pub(crate) scale: Option<ScaleRun>,
}

/// Progress lines on stderr.
pub(crate) struct Progress {
    started: Instant,
}

impl Progress {
    pub(crate) fn note(&self, what: &str) {
        eprintln!("[{:6.1}s] {what}", self.started.elapsed().as_secs_f64());
    }
}

/// Runs the parts `args` asks for.
pub(crate) async fn run_all(
    db: &DbPool,
    table: &TableName,
    base: &Locker,
    strategies: &[Strategy],
    args: &BenchArgs,
) -> Result<Report, Failure> {
    let progress = Progress {
        started: Instant::now(),
    };
    let dialect = db.dialect();
    let mut report = Report {
        dialect,
        server: server_version(db).await.map_err(db_failure)?,
        table: table.to_string(),
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_before: loadavg(),
        load_after: None,
        secs: 0.0,
        notify: false,
        uncontended: Vec::new(),
        round_trips: Vec::new(),
        contended: Vec::new(),
        watchdog: None,
        scale: None,
    };
    progress.note(&format!(
        "{dialect} {} in table {table}, {} CPUs, load {}",
        report.server,
        report.cpus,
        report.load_before.as_deref().unwrap_or("unknown")
    ));
    let part = |name: &str| args.parts.iter().any(|p| p == name);
    if part("uncontended") {
        let ctx = Ctx::new(db, table, strategies, args)?;
        report.uncontended = uncontended(&ctx, args, &progress).await?;
        report.round_trips = round_trips(&ctx, strategies).await?;
    }
    if part("contended") {
        let (rows, notify) =
            super::contended::contended(db, table, strategies, args, &progress).await?;
        report.contended = rows;
        report.notify = notify;
    }
    if part("watchdog") && args.leases > 0 {
        report.watchdog = Some(super::held::watchdog(base, args.leases, &progress).await?);
    }
    if let (true, Some(rows)) = (part("scale"), args.scale_rows) {
        report.scale = Some(super::held::scale(db, table, rows, args, &progress).await?);
    }
    report.load_after = loadavg();
    report.secs = progress.started.elapsed().as_secs_f64();
    progress.note("done");
    Ok(report)
}

async fn server_version(db: &DbPool) -> Result<String, sqlx::Error> {
    let sql = match db.dialect() {
        Dialect::Postgres => "SELECT version()",
        Dialect::MySql => "SELECT CONCAT(VERSION(), ' ', @@version_comment)",
        _ => "SELECT 'SQLite ' || sqlite_version()",
    };
    let v = super::texts(db, sql.into(), 0).await?;
    Ok(v.into_iter().next().unwrap_or_default())
}

/// The load averages of the last 1, 5 and 15 minutes (Linux).
fn loadavg() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// What the uncontended workers share.
struct Ctx {
    db: DbPool,
    raw: Arc<RawStatements>,
    lockers: HashMap<Strategy, Vec<Locker>>,
    owners: Vec<String>,
    variants: Vec<Variant>,
    redis_url: Option<String>,
}

impl Ctx {
    fn new(
        db: &DbPool,
        table: &TableName,
        strategies: &[Strategy],
        args: &BenchArgs,
    ) -> Result<Arc<Self>, Failure> {
        let most = args.workers.iter().copied().max().unwrap_or(1) as usize;
        let mut lockers = HashMap::new();
        let mut variants = Vec::new();
        for &s in strategies {
            let b = Locker::builder(db.clone())
                .table(table.as_str())
                .strategy(s)
                .ttl(TTL)
                .build()?;
            lockers.insert(s, (0..most).map(|_| b.new_handle()).collect::<Vec<_>>());
            variants.push(Variant::Raw(s));
            variants.push(Variant::Library(s));
        }
        if db.dialect() != Dialect::Sqlite {
            variants.push(Variant::Native);
        }
        if args.redis_url.is_some() {
            variants.push(Variant::Redis);
        }
        let owners = lockers
            .values()
            .next()
            .map(|ls| {
                ls.iter()
                    .map(|l| l.new_handle().owner().to_string())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Arc::new(Self {
            db: db.clone(),
            raw: Arc::new(RawStatements::new(db.dialect(), table)),
            lockers,
            owners,
            variants,
            redis_url: args.redis_url.clone(),
        }))
    }
}

/// One uncontended worker's means.
enum Worker {
    Library(Locker, String),
    Raw(Values),
    Native(String),
    #[cfg(feature = "redis-baseline")]
    Redis(raw::redis_lock::RedisWorker, String, String),
}

impl Worker {
    async fn new(ctx: &Ctx, v: Variant, i: usize) -> Result<Self, Failure> {
        let key = format!("{KEY_PREFIX}{}-{i}", v.strategy());
        Ok(match v {
            Variant::Library(s) => Self::Library(ctx.lockers[&s][i].clone(), key),
            Variant::Raw(s) => Self::Raw(Values {
                key,
                owner: ctx.owners[i].clone(),
                strategy: s,
                ttl_us: TTL.as_micros() as i64,
                token: 0,
            }),
            Variant::Native => Self::Native(key),
            #[cfg(feature = "redis-baseline")]
            Variant::Redis => {
                let url = ctx.redis_url.as_deref().unwrap_or_default();
                let w = raw::redis_lock::RedisWorker::connect(url)
                    .await
                    .map_err(|e| Failure::Unavailable(format!("redis: {e}")))?;
                Self::Redis(w, format!("sqlock-{key}"), ctx.owners[i].clone())
            }
            #[cfg(not(feature = "redis-baseline"))]
            Variant::Redis => {
                let _ = &ctx.redis_url;
                return Err(Failure::Usage(
                    "the redis baseline needs the redis-baseline feature".into(),
                ));
            }
        })
    }

    /// One acquisition and release: the acquisition's latency, `None` when busy.
    async fn cycle(
        &mut self,
        db: &DbPool,
        raw_stmts: &RawStatements,
    ) -> Result<Option<Duration>, Failure> {
        match self {
            Self::Library(locker, key) => {
                let started = Instant::now();
                let Some(guard) = locker.try_acquire(key).await? else {
                    return Ok(None);
                };
                let latency = started.elapsed();
                if !guard.release().await? {
                    return Err(Failure::Other(format!(
                        "lock {key:?} was lost during the benchmark"
                    )));
                }
                Ok(Some(latency))
            }
            Self::Raw(values) => raw::cycle(db, raw_stmts, values).await.map_err(db_failure),
            Self::Native(key) => raw::native_cycle(db, key).await.map_err(db_failure),
            #[cfg(feature = "redis-baseline")]
            Self::Redis(w, key, owner) => w
                .cycle(key, owner, TTL)
                .await
                .map_err(|e| Failure::Other(format!("redis: {e}"))),
        }
    }
}

/// Runs `v` with `n` workers for `d`.
async fn run_uncontended(
    ctx: &Arc<Ctx>,
    v: Variant,
    n: usize,
    d: Duration,
) -> Result<Measured, Failure> {
    let mut workers = Vec::with_capacity(n);
    for i in 0..n {
        workers.push(Worker::new(ctx, v, i).await?);
    }
    let before = count::snapshot();
    let started = Instant::now();
    let deadline = started + d;
    let mut set = JoinSet::new();
    for mut w in workers {
        let ctx = ctx.clone();
        set.spawn(async move {
            let (mut ops, mut busy, mut latency) = (0u64, 0u64, Samples::default());
            while Instant::now() < deadline {
                match w.cycle(&ctx.db, &ctx.raw).await? {
                    Some(l) => {
                        ops += 1;
                        latency.push(l);
                    }
                    None => busy += 1,
                }
            }
            Ok::<_, Failure>((ops, busy, latency))
        });
    }
    let mut m = Measured {
        variant: v,
        workers: n,
        ops: 0,
        busy: 0,
        secs: 0.0,
        latency: Samples::default(),
        stmts: Snapshot::default(),
    };
    while let Some(joined) = set.join_next().await {
        let (ops, busy, latency) =
            joined.map_err(|e| Failure::Other(format!("a worker failed: {e}")))??;
        m.ops += ops;
        m.busy += busy;
        m.latency.extend(&latency);
    }
    m.secs = started.elapsed().as_secs_f64();
    m.stmts = count::snapshot().since(&before);
    Ok(m)
}

/// Every variant with every worker count, in rounds that alternate the variants.
async fn uncontended(
    ctx: &Arc<Ctx>,
    args: &BenchArgs,
    progress: &Progress,
) -> Result<Vec<Measured>, Failure> {
    let most = args.workers.iter().copied().max().unwrap_or(1) as usize;
    let warm = (args.duration / 10).clamp(Duration::from_millis(50), Duration::from_millis(300));
    progress.note("uncontended: warming up (connections opened, statements prepared)");
    for &v in &ctx.variants {
        run_uncontended(ctx, v, most, warm).await?;
    }
    let slice = args.duration / args.rounds;
    let mut out = Vec::new();
    for &n in &args.workers {
        let n = n as usize;
        let mut acc: Vec<Option<Measured>> = vec![None; ctx.variants.len()];
        for round in 0..args.rounds {
            progress.note(&format!(
                "uncontended: {n} worker(s), round {}/{}",
                round + 1,
                args.rounds
            ));
            let order: Vec<usize> = if round % 2 == 0 {
                (0..ctx.variants.len()).collect()
            } else {
                (0..ctx.variants.len()).rev().collect()
            };
            for i in order {
                let m = run_uncontended(ctx, ctx.variants[i], n, slice).await?;
                acc[i] = Some(match acc[i].take() {
                    None => m,
                    Some(mut a) => {
                        a.ops += m.ops;
                        a.busy += m.busy;
                        a.secs += m.secs;
                        a.latency.extend(&m.latency);
                        for k in 0..count::KINDS.len() {
                            a.stmts.by_kind[k] += m.stmts.by_kind[k];
                            a.stmts.micros[k] += m.stmts.micros[k];
                        }
                        a
                    }
                });
            }
        }
        out.extend(acc.into_iter().flatten());
    }
    Ok(out)
}

/// Counts the statements of single acquisitions and releases, one at a time.
async fn round_trips(ctx: &Arc<Ctx>, strategies: &[Strategy]) -> Result<Vec<RoundTrips>, Failure> {
    let mut out = Vec::new();
    for &s in strategies {
        let locker = &ctx.lockers[&s][0];
        let key = format!("{KEY_PREFIX}{}-rt", s.name());
        let (mut acquire, mut release) = (0u64, 0u64);
        for _ in 0..ROUND_TRIP_SAMPLES {
            let a = count::snapshot();
            let guard = locker.try_acquire(&key).await?;
            let b = count::snapshot();
            if let Some(g) = guard {
                g.release().await?;
            }
            let c = count::snapshot();
            acquire += b.since(&a).total();
            release += c.since(&b).total();
        }
        out.push(RoundTrips {
            strategy: s,
            acquire: acquire as f64 / f64::from(ROUND_TRIP_SAMPLES),
            release: release as f64 / f64::from(ROUND_TRIP_SAMPLES),
        });
    }
    Ok(out)
}
