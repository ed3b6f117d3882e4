//! The command line: where to measure, what, for how long, and where the results go.
//!
//! clap takes the help text from the doc comments below. Everything that can be
//! checked without a database is checked here, as the arguments are parsed, so bad
//! input exits 64 before any connection is made.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use sqlock::{Strategy, TableName};

/// Measure sqlock's lock throughput, latency and handoff on this database.
///
/// Runs in a table of its own: sqlock_bench unless --table names another (never the
/// default lock table), created for the run and dropped after it; it refuses a table
/// that holds other locks. In one run: acquire+release throughput and latency per
/// strategy with 1 and more workers on distinct keys, against the same statements sent
/// raw, the server's native locks and, with --redis-url, Redis; handoff latency and
/// statements per waiter with workers contending for one key; the watchdog's
/// statements per tick with many leases held; with --scale-rows, latency in a large
/// table and the plans of the lock statements; with --parts peers, sqlock beside
/// sqlx's PgAdvisoryLock, MariaDB's GET_LOCK and (built with the peers feature) the
/// distributed-lock crates: uncontended cycles with 1 and 8 workers, handoff, recovery
/// from a holder process killed with SIGKILL, statements and durable flushes per cycle.
/// Results go to stdout as tables, progress to stderr.
///
/// The database URL comes from --database-url, else SQLOCK_DATABASE_URL, else
/// DATABASE_URL, else sqlite:sqlock.db. Durations read 500ms, 3s, 1m.
///
/// Exit status: 0 on success; 64 bad usage or input; 69 the database or Redis is
/// unreachable; 70 anything else.
#[derive(Debug, Parser)]
#[command(
    name = "sqlock-bench",
    version,
    verbatim_doc_comment,
    max_term_width = 100
)]
pub(crate) struct BenchArgs {
    /// The database: postgres://user@host/db, mysql://user@host/db, sqlite:bench.db.
    #[arg(long, value_name = "URL")]
    pub(crate) database_url: Option<String>,

    /// The table to work in: lower-case letters, digits and '_', at most 40 bytes (36
    /// with --scale-rows, whose large table is NAME_big).
    #[arg(long, value_name = "NAME", default_value = crate::table::BENCH_TABLE,
          value_parser = parse_table)]
    pub(crate) table: TableName,

    /// How long each measurement runs, split into rounds that alternate with its
    /// baselines.
    #[arg(long, value_name = "DUR", default_value = "3s", value_parser = parse_interval)]
    pub(crate) duration: Duration,

    /// How many rounds each measurement is split into (1 to 100).
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) rounds: u32,

    /// The worker counts of the uncontended runs, each on keys of its own (1 to 256).
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_value = "1,2,4,8",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) workers: Vec<u32>,

    /// Workers waiting for one key while another holds it, in the contended runs
    /// (1 to 64).
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) waiters: u32,

    /// How long each contended measurement runs, split into rounds as --duration is.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_interval)]
    pub(crate) contended_duration: Duration,

    /// How long a contended holder keeps the lock.
    #[arg(long, value_name = "DUR", default_value = "50ms", value_parser = parse_duration)]
    pub(crate) hold: Duration,

    /// How often a contended waiter polls, unless woken by notification: the library's
    /// poll interval, as both its minimum and maximum (each wait is drawn from its
    /// upper half, so 100ms means about 13 polls a second).
    #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = parse_interval)]
    pub(crate) poll: Duration,

    /// The strategies to measure (default: every one the database supports).
    #[arg(long, value_name = "STRATEGY,...", value_delimiter = ',', value_parser = parse_strategy)]
    pub(crate) strategies: Vec<Strategy>,

    /// The parts to run: uncontended, contended, watchdog, scale (scale also needs
    /// --scale-rows), semaphore (a permit of 8 with 1 and 8 workers, beside the mutex),
    /// rwlock (read-lock cycles beside the mutex's, 1 and 8 workers), and peers
    /// (PostgreSQL and MariaDB only; not run unless named).
    #[arg(long, value_name = "PART,...", value_delimiter = ',',
          default_value = "uncontended,contended,watchdog,scale,semaphore,rwlock",
          value_parser = ["uncontended", "contended", "watchdog", "scale", "semaphore", "rwlock",
                          "peers"])]
    pub(crate) parts: Vec<String>,

    /// How many times each contender of the peers part has its holder killed (1 to 100).
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) crashes: u32,

    /// Cycles per round of the peers part's statements and flushes (10 to 100000).
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(10..=100_000))]
    pub(crate) flush_cycles: u64,

    /// The TTL of the leases whose holder the peers part kills.
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = parse_interval)]
    pub(crate) crash_ttl: Duration,

    /// Leases one handle holds while the watchdog's ticks are counted (0 skips it).
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub(crate) leases: u32,

    /// Also measure acquisition latency with this many rows in the table against
    /// 1,000 rows, and print the plans of the lock statements (1000000 takes a while
    /// to load).
    #[arg(long, value_name = "ROWS",
          value_parser = clap::value_parser!(u64).range(2_000..=100_000_000))]
    pub(crate) scale_rows: Option<u64>,

    /// A Redis server to compare with (SET NX PX and an owner-checked delete); needs
    /// the benchmark built with the redis-baseline feature.
    #[arg(long, value_name = "URL")]
    pub(crate) redis_url: Option<String>,

    /// Write the results as JSON to this file ('-' for stdout, then without the tables).
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,

    /// Write the results as CSV (part,variant,strategy,workers,metric,value) to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) csv: Option<PathBuf>,

    /// Draw throughput against workers per strategy as an SVG chart in this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,

    /// The peers part's holder process, which the run starts and kills (hidden).
    #[command(subcommand)]
    pub(crate) hidden: Option<Hidden>,
}

/// What the benchmark runs itself as; not for users.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Hidden {
    /// Take a lock, say `held` on stdout, and hold it until killed.
    #[command(name = "__hold", hide = true)]
    Hold(HoldArgs),
}

/// The lock a holder process takes.
#[derive(Debug, clap::Args)]
pub(crate) struct HoldArgs {
    /// The contender: a sqlock variant of the crash part, or a peer.
    #[arg(long)]
    pub(crate) contender: String,
    /// The key to hold.
    #[arg(long)]
    pub(crate) key: String,
    /// The TTL of the lease, for the sqlock variants.
    #[arg(long, value_parser = parse_interval)]
    pub(crate) ttl: Duration,
}

impl BenchArgs {
    /// Whether the part `name` is to run.
    pub(crate) fn part(&self, name: &str) -> bool {
        self.parts.iter().any(|p| p == name)
    }

    /// The most workers of the uncontended runs.
    pub(crate) fn most_workers(&self) -> u32 {
        self.workers.iter().copied().max().unwrap_or(1)
    }
}

/// A table name the library accepts, and never its default lock table, which the
/// benchmark does not touch.
fn parse_table(name: &str) -> Result<TableName, String> {
    if name == sqlock::DEFAULT_TABLE {
        return Err(format!(
            "{name} is the default lock table: the benchmark works in a table of its own"
        ));
    }
    TableName::new(name).map_err(|e| e.to_string())
}

/// Through `Strategy::from_str`, so every strategy the library knows is accepted.
fn parse_strategy(name: &str) -> Result<Strategy, sqlock::UnknownStrategy> {
    name.parse()
}

/// A duration such as 50ms, 3s or 1m.
fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// A duration longer than zero: a measurement of no time measures nothing.
fn parse_interval(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err("the interval must be longer than zero".into()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        BenchArgs::command().debug_assert();
    }

    #[test]
    fn defaults_measure_every_part() {
        let args = BenchArgs::try_parse_from(["sqlock-bench"]).unwrap();
        assert_eq!(args.table.as_str(), "sqlock_bench");
        assert_eq!(args.duration, Duration::from_secs(3));
        assert_eq!(args.hold, Duration::from_millis(50));
        assert_eq!(args.workers, [1, 2, 4, 8]);
        assert!(args.part("scale") && args.part("watchdog"));
        assert!(!args.part("peers") && args.hidden.is_none());
        assert_eq!(args.crash_ttl, Duration::from_secs(2));
        assert_eq!(args.most_workers(), 8);
    }

    #[test]
    fn bad_input_is_refused_while_parsing() {
        for args in [
            &["--workers", "0"][..],
            &["--workers", "1,x"],
            &["--duration", "0s"],
            &["--parts", "everything"],
            &["--strategies", "optimistic"],
            &["--scale-rows", "10"],
            &["--table", "Bad-Name"],
            &["--table", "sqlock_locks"],
        ] {
            let argv = std::iter::once("sqlock-bench").chain(args.iter().copied());
            assert!(BenchArgs::try_parse_from(argv).is_err(), "{args:?}");
        }
    }
}
