//! What a run measured: one row per measurement, the whole run's report, and the
//! figures derived from them that the tables, the files and the targets share.

use sqlock::{Dialect, Strategy};

use crate::count::Snapshot;
use crate::stats::Samples;

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
    /// Acquire+release cycles per second.
    pub(crate) fn per_sec(&self) -> f64 {
        per(self.ops, self.secs)
    }

    /// Adds another round of the same measurement.
    pub(crate) fn absorb(&mut self, round: &Measured) {
        self.ops += round.ops;
        self.busy += round.busy;
        self.secs += round.secs;
        self.latency.extend(&round.latency);
        self.stmts.add(&round.stmts);
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
    /// The library at its defaults, each worker a handle on a pool of its own that
    /// connects unlike the others, as in a process of its own: woken by the holder's
    /// wake lock rather than by this process's wake-ups.
    Apart,
    /// As [`Apart`](Self::Apart), with no waits in the server (`server_waits(0)`):
    /// polling alone, as before wake locks.
    ApartPolling,
    /// No waiter at all: the library's release and acquisition statements sent raw,
    /// back to back on two connections, after each hold (`baseline::raw::handoff`),
    /// the floor under the library's handoff.
    RawStatements,
}

impl Waiting {
    /// How the tables and the files name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Poll => "library, polling",
            Self::Notify => "library, notify",
            Self::InDatabase => "library, in database",
            Self::NativeBlocking => "native, blocking",
            Self::Apart => "library, processes apart",
            Self::ApartPolling => "library, apart, polling",
            Self::RawStatements => "raw, back to back",
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
    /// A queue standing still (the library only): statements per second of the first
    /// waiter, and of each waiter behind it, while one holder keeps the key.
    pub(crate) still: Option<(f64, f64)>,
}

impl Contended {
    /// Statements a waiting worker sends per second of waiting: everything sent but
    /// the releases (one statement each), over the time spent waiting.
    pub(crate) fn waiter_rate(&self) -> f64 {
        per(
            self.stmts.total().saturating_sub(self.grants),
            self.wait_secs,
        )
    }

    /// Grants per second.
    pub(crate) fn per_sec(&self) -> f64 {
        per(self.grants, self.secs)
    }

    /// Adds another round of the same measurement.
    pub(crate) fn absorb(&mut self, round: &Contended) {
        self.grants += round.grants;
        self.secs += round.secs;
        self.handoff.extend(&round.handoff);
        self.wait_secs += round.wait_secs;
        self.stmts.add(&round.stmts);
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
    /// The mean time of one statement in the window (the renewals), in microseconds.
    pub(crate) renew_mean_us: f64,
    pub(crate) acquire_secs: f64,
}

/// One measurement of the rwlock part: acquire+release cycles of one side.
#[derive(Debug, Clone)]
pub(crate) struct RwRun {
    /// `read` (the read side of one read-write lock) or `mutex` (the plain lock on
    /// one key).
    pub(crate) side: &'static str,
    pub(crate) workers: usize,
    pub(crate) cycles: u64,
    pub(crate) secs: f64,
}

/// The scale part's latencies.
#[derive(Debug, Clone)]
pub(crate) struct ScaleRun {
    pub(crate) small_rows: u64,
    pub(crate) big_rows: u64,
    pub(crate) small: Samples,
    pub(crate) big: Samples,
    pub(crate) fill_secs: f64,
    /// Each lease statement's name and its plan in the large table, a line a row.
    pub(crate) explain: Vec<(String, Vec<String>)>,
}

/// One run of the semaphore part: one primitive with one worker count.
#[derive(Debug, Clone)]
pub(crate) struct SemaphoreRun {
    pub(crate) what: &'static str,
    pub(crate) workers: usize,
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    pub(crate) latency: Samples,
}

impl SemaphoreRun {
    /// Acquire+release cycles per second.
    pub(crate) fn per_sec(&self) -> f64 {
        per(self.ops, self.secs)
    }
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
    /// Whether waiters were also measured woken by notification.
    pub(crate) notify: bool,
    pub(crate) uncontended: Vec<Measured>,
    pub(crate) round_trips: Vec<RoundTrips>,
    pub(crate) contended: Vec<Contended>,
    pub(crate) watchdog: Option<WatchdogRun>,
    pub(crate) semaphore: Vec<SemaphoreRun>,
    pub(crate) scale: Option<ScaleRun>,
    pub(crate) peers: Option<PeersRun>,
    /// The rwlock part's measurements.
    pub(crate) rwlock: Vec<RwRun>,
}

impl Report {
    /// The uncontended measurement of `v` with `n` workers.
    pub(crate) fn find(&self, v: Variant, n: usize) -> Option<&Measured> {
        self.uncontended
            .iter()
            .find(|m| m.variant == v && m.workers == n)
    }

    /// The most workers of the uncontended measurements.
    pub(crate) fn most_workers(&self) -> usize {
        self.uncontended
            .iter()
            .map(|m| m.workers)
            .max()
            .unwrap_or(1)
    }
}

/// The worker counts of the peers part's uncontended cycles.
pub(crate) const PEER_WORKERS: [usize; 2] = [1, 8];

/// Who takes the lock in the peers part: sqlock, its statements sent raw, or a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contender {
    /// The library, as its variant's builder options make it (`lease`, `for-update`,
    /// `lease, notify`...).
    Sqlock(&'static str),
    /// The library's lease statements sent raw through sqlx.
    Raw,
    /// sqlx's `PgAdvisoryLock` (PostgreSQL).
    Advisory,
    /// `GET_LOCK` / `RELEASE_LOCK` sent through sqlx (MariaDB).
    GetLock,
    /// The published crate `distributed-lock-postgres` or `distributed-lock-mysql`.
    DistributedLock,
}

impl Contender {
    /// How the tables and the files name it.
    pub(crate) fn label(self, dialect: Dialect) -> String {
        match self {
            Self::Sqlock(v) => format!("sqlock {v}"),
            Self::Raw => "sqlock lease, raw statements".into(),
            Self::Advisory => "sqlx PgAdvisoryLock".into(),
            Self::GetLock => "GET_LOCK (sqlx)".into(),
            Self::DistributedLock if dialect == Dialect::Postgres => {
                "distributed-lock-postgres 0.2".into()
            }
            Self::DistributedLock => "distributed-lock-mysql 0.2".into(),
        }
    }

    /// Whether this is the library itself.
    pub(crate) fn is_sqlock(self) -> bool {
        matches!(self, Self::Sqlock(_))
    }
}

/// One contender's uncontended cycles with some workers, summed over its rounds.
#[derive(Debug, Clone)]
pub(crate) struct PeerCycles {
    pub(crate) who: Contender,
    pub(crate) workers: usize,
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    pub(crate) latency: Samples,
    pub(crate) stmts: Snapshot,
}

impl PeerCycles {
    /// Acquire+release cycles per second.
    pub(crate) fn per_sec(&self) -> f64 {
        per(self.ops, self.secs)
    }
}

/// One contender's handoffs between workers contending for one key.
#[derive(Debug, Clone)]
pub(crate) struct PeerHandoff {
    pub(crate) who: Contender,
    pub(crate) workers: usize,
    pub(crate) grants: u64,
    pub(crate) secs: f64,
    pub(crate) handoff: Samples,
}

/// One contender's crash recoveries: from the SIGKILL of a holder process to the grant
/// to a waiter already waiting.
#[derive(Debug, Clone)]
pub(crate) struct PeerCrash {
    pub(crate) who: Contender,
    /// What frees a dead holder's lock, as the contender is set up.
    pub(crate) freed_by: String,
    pub(crate) recovery: Samples,
}

/// One contender's statements and durable flushes per cycle.
#[derive(Debug, Clone)]
pub(crate) struct PeerFlushes {
    pub(crate) who: Contender,
    /// Cycles per round.
    pub(crate) cycles: u64,
    /// Statements per cycle as sqlx saw them, over every round.
    pub(crate) statements: f64,
    /// The server's flushes per cycle in each round (server-wide counters: other work
    /// on the server only adds, so the least is the contender's own).
    pub(crate) flushes: Vec<f64>,
}

impl PeerFlushes {
    /// The fewest flushes per cycle of any round.
    pub(crate) fn least(&self) -> f64 {
        self.flushes.iter().copied().fold(f64::INFINITY, f64::min)
    }
}

/// The peers part: sqlock beside the peers, in the same rounds.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeersRun {
    pub(crate) cycles: Vec<PeerCycles>,
    pub(crate) handoff: Vec<PeerHandoff>,
    pub(crate) crash: Vec<PeerCrash>,
    pub(crate) flushes: Vec<PeerFlushes>,
    /// The server counter the flushes are read from.
    pub(crate) flush_counter: String,
    /// Whether the distributed-lock crates were built in (the `peers` feature).
    pub(crate) distributed_lock: bool,
}

impl PeersRun {
    /// The cycles of `who` with `n` workers.
    pub(crate) fn cycles_of(&self, who: Contender, n: usize) -> Option<&PeerCycles> {
        self.cycles.iter().find(|c| c.who == who && c.workers == n)
    }
}

/// The throughput of `a` over that of `b`.
pub(crate) fn ratio(a: Option<&Measured>, b: Option<&Measured>) -> Option<f64> {
    let (a, b) = (a?.per_sec(), b?.per_sec());
    (b > 0.0).then(|| a / b)
}

/// `a` per `b`, or 0 where there is no `b`.
pub(crate) fn per(a: u64, b: f64) -> f64 {
    if b > 0.0 {
        a as f64 / b
    } else {
        0.0
    }
}

/// Microseconds (a percentile of samples) in milliseconds; 0 without samples.
pub(crate) fn ms(us: Option<u32>) -> f64 {
    f64::from(us.unwrap_or(0)) / 1000.0
}
