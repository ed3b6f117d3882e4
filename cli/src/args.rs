//! The command line: global options and the commands, with their help text.
//!
//! clap takes the help text from the doc comments below. Everything that can be
//! checked without a database is checked here, as the arguments are parsed, so bad
//! input exits 64 before any connection is made (and before a SQLite file is created).

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sqlock::{Dialect, Strategy, TableName};

/// Distributed locks on the relational database you already run.
///
/// The database URL comes from --database-url, else SQLOCK_DATABASE_URL, else
/// DATABASE_URL, else the embedded default sqlite:sqlock.db (created on first use, in
/// WAL mode). On SQLite the lock table is created on first use; on PostgreSQL and
/// MariaDB run `sqlock migrate` (or sqlx-cli) once: there a missing table is an error.
///
/// Durations read 500ms, 30s, 5m, 1h30m (units ms, s, m, h, d).
///
/// Exit status:
///   0    success; for `run`, the command's own status (128+N when signal N ended it)
///   64   bad usage or input: key, duration, table name, strategy, any usage error
///   69   the database is unreachable, or the lock table is missing
///   70   an unexpected database or internal error
///   75   `run`: the lock was not acquired (busy with --no-wait, or --wait ran out);
///        `release --force`: the lock was not held
///   76   `run`: the lock was lost while the command ran
///   126  `run`: the command could not be executed (permission denied)
///   127  `run`: the command was not found
#[derive(Debug, Parser)]
#[command(name = "sqlock", version, verbatim_doc_comment, max_term_width = 100)]
pub struct Cli {
    /// The database: postgres://user@host/db, mysql://user@host/db, sqlite:locks.db.
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,

    /// The database is reached through a transaction-pooling proxy (PgBouncer with
    /// pool_mode = transaction): every statement is sent unnamed, in a transaction of
    /// its own. PostgreSQL only. SQLOCK_TRANSACTION_POOLING=1 in the environment says
    /// the same, for cron entries.
    #[arg(long, global = true)]
    pub transaction_pooling: bool,

    /// Do not keep a presence marker. By default `run` keeps one where it is safe (not
    /// behind --transaction-pooling, not on a Galera node, not on an in-memory SQLite
    /// database): a session lock the server frees when this process dies (on SQLite a
    /// file lock beside the database), so that the next `sqlock run` of the key gets
    /// it at once instead of after the TTL. A `run` paused or cut off from the server
    /// keeps its lease until the server sees its connection close. With presence off,
    /// a killed `run` blocks the key until its lease expires. SQLOCK_NO_PRESENCE=1 in
    /// the environment says the same.
    #[arg(long, global = true)]
    pub no_presence: bool,

    /// The lock table: lower-case letters, digits and '_', at most 40 bytes.
    #[arg(long, global = true, value_name = "NAME",
          default_value = sqlock::DEFAULT_TABLE, value_parser = parse_table)]
    pub table: TableName,

    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding the lock on KEY (a distributed flock for cron)
    ///
    /// The lock is a lease with a 30 s TTL by default, renewed while the command runs;
    /// sqlock waits for it as long as it takes unless told --wait or --no-wait. The
    /// command gets SQLOCK_KEY, SQLOCK_OWNER and SQLOCK_FENCING_TOKEN in its
    /// environment.
    ///
    /// Where it is safe, sqlock keeps a presence marker (see --no-presence): if sqlock
    /// is killed, the next `sqlock run` of the key gets it at once rather than after
    /// the TTL, with a higher fencing token.
    ///
    /// The command runs in a process group of its own, and sqlock answers for every
    /// process in it, including those a shell script or pipeline starts:
    ///   - SIGINT, SIGTERM and SIGHUP sent to sqlock are passed on to the whole group
    ///     (a signal while sqlock still waits for the lock ends the wait: 128+N);
    ///   - if the lock is lost, the whole group gets SIGTERM, then SIGKILL after 2 s,
    ///     and sqlock exits 76;
    ///   - when the command exits, what it left running in its group gets SIGTERM,
    ///     then SIGKILL after 2 s, and the lock is released only once the group is
    ///     empty;
    ///   - if sqlock itself dies, however it dies (SIGKILL, the OOM killer), a watcher
    ///     it started (a second sqlock process that holds nothing) SIGKILLs the whole
    ///     group within a second, in practice within milliseconds.
    ///
    /// Outside the guarantee: a process that leaves the group on purpose (setsid, a
    /// daemon), and a sqlock killed at the same moment as its watcher, sqlock-watch
    /// (pkill -9 sqlock): then only the command itself dies (Linux). With standard
    /// input a terminal, the group gets the terminal's foreground while it runs, so an
    /// interactive command works; job control (Ctrl-Z) is not supported. Tested on
    /// Linux; other Unix systems get the same minus the parent-death signal and
    /// sqlock's reaping of orphans (init reaps them).
    ///
    /// With --at-least the lock stays taken that long after it was taken even if the
    /// command ends sooner, so that a job several hosts schedule a little apart runs
    /// once.
    ///
    /// Exit status: the command's (128+N when signal N ended it); 75 when the lock
    /// was not acquired; 76 when it was lost; 126/127 when the command cannot run.
    #[command(verbatim_doc_comment)]
    Run(RunArgs),

    /// List the locks held now
    ///
    /// Each with its key, strategy, owner, fencing token, when it was taken, how long
    /// until it expires (database time) and how many fair waiters are queued for it.
    /// For-update locks are not listed: they live in their holder's transaction.
    #[command(verbatim_doc_comment)]
    List {
        /// Print a JSON array of objects instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// Release a lock whoever holds it: an operator's escape hatch
    ///
    /// The key's fencing token moves on, so the holder's renewals fail and its
    /// `sqlock run` stops its command and exits 76 within one renewal period.
    ///
    /// Exit status: 0 when a held lock was released; 75 when nothing was held.
    #[command(verbatim_doc_comment)]
    Release {
        /// Required: releasing another owner's lock is never implicit.
        #[arg(long, required = true)]
        force: bool,
        /// The lock's key.
        #[arg(value_parser = parse_key)]
        key: String,
    },

    /// Reclaim the rows of expired and released locks, and print how many
    ///
    /// With --every it keeps going (sweep, print, sleep) until SIGINT or SIGTERM,
    /// then exits 0; a failed sweep after the first is reported and retried.
    ///
    /// With --schedule it sweeps nothing itself: it schedules the sweep inside the
    /// database, to run with no client at all (pg_cron on PostgreSQL, which must be
    /// in shared_preload_libraries and created in this database; an event on
    /// MariaDB, with event_scheduler=ON). --unschedule removes that schedule.
    #[command(verbatim_doc_comment)]
    Sweep {
        /// Only rows that expired at least this long ago.
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse,
              default_value = "0s")]
        grace: Duration,
        /// Keep sweeping at this interval until SIGINT or SIGTERM.
        #[arg(long, value_name = "DUR", value_parser = parse_interval,
              conflicts_with_all = ["schedule", "unschedule"])]
        every: Option<Duration>,
        /// Schedule the sweep inside the database, every DUR (whole seconds; pg_cron
        /// before 1.5 takes whole minutes that divide an hour, hours that divide a
        /// day, or 1d).
        #[arg(long, value_name = "DUR", value_parser = parse_interval,
              conflicts_with = "unschedule")]
        schedule: Option<Duration>,
        /// Remove the sweep scheduled inside the database.
        #[arg(long)]
        unschedule: bool,
        /// At most this many rows per delete statement (1 to 100000).
        #[arg(long, value_name = "N", default_value_t = 1000,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(sqlock::MAX_SWEEP_BATCH)))]
        batch: u32,
    },

    /// Create the lock table (sqlock's migrations; the DDL for another --table)
    Migrate,

    /// Print the lock table's DDL for --table, without connecting
    Schema {
        /// postgres, mysql or sqlite; defaults to the database URL's.
        #[arg(long, value_name = "DIALECT", value_parser = parse_dialect)]
        dialect: Option<Dialect>,
    },
}

/// `sqlock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// How the lock is held: lease, insert, for-update (PostgreSQL and MariaDB) or fair.
    /// A key is held by one strategy at a time: a key another strategy holds is busy.
    #[arg(long, value_name = "STRATEGY", default_value = "lease", value_parser = parse_strategy)]
    pub strategy: Strategy,

    /// Take a turn in the key's queue (the fair strategy, as `--strategy fair`): waiters
    /// get the lock in order of arrival, each release handing it to the next.
    #[arg(long, conflicts_with = "strategy")]
    pub fair: bool,

    /// The lease's TTL; the lease is renewed every third of it while the command runs.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_ttl)]
    pub ttl: Duration,

    /// Wait at most this long for the lock, then exit 75 (default: as long as it takes).
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse,
          conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// Do not wait: exit 75 at once when the lock is held elsewhere.
    #[arg(long)]
    pub no_wait: bool,

    /// Keep the lock at least this long after taking it, even if the command ends sooner
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse)]
    pub at_least: Option<Duration>,

    /// The lock's key: 1 to 255 bytes of UTF-8, no NUL.
    #[arg(value_parser = parse_key)]
    pub key: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl RunArgs {
    /// The strategy the lock is taken with: `--fair` or `--strategy`.
    pub fn strategy(&self) -> Strategy {
        if self.fair {
            Strategy::Fair
        } else {
            self.strategy
        }
    }
}

fn parse_table(name: &str) -> Result<TableName, sqlock::Error> {
    TableName::new(name)
}

/// Through `Strategy::from_str`, so every strategy the library knows is accepted.
fn parse_strategy(name: &str) -> Result<Strategy, sqlock::UnknownStrategy> {
    name.parse()
}

fn parse_dialect(name: &str) -> Result<Dialect, String> {
    match name {
        "postgres" | "postgresql" => Ok(Dialect::Postgres),
        "mysql" | "mariadb" => Ok(Dialect::MySql),
        "sqlite" => Ok(Dialect::Sqlite),
        _ => Err("expected postgres, mysql or sqlite".into()),
    }
}

/// The library's key rules (it checks them again before any SQL): checked here too so
/// that a bad key is a usage error even when the database is unreachable.
fn parse_key(key: &str) -> Result<String, sqlock::Error> {
    if key.is_empty() {
        return Err(sqlock::Error::EmptyKey);
    }
    if key.len() > sqlock::MAX_KEY_BYTES {
        return Err(sqlock::Error::KeyTooLong {
            len: key.len(),
            max: sqlock::MAX_KEY_BYTES,
        });
    }
    if key.contains('\0') {
        return Err(sqlock::Error::KeyContainsNul);
    }
    Ok(key.to_owned())
}

/// The library's TTL range, checked before connecting, as keys are.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = crate::duration::parse(text)?;
    if ttl < sqlock::MIN_TTL {
        return Err(sqlock::Error::TtlTooShort {
            ttl,
            min: sqlock::MIN_TTL,
        }
        .to_string());
    }
    if ttl > sqlock::MAX_TTL {
        return Err(sqlock::Error::TtlTooLong {
            ttl,
            max: sqlock::MAX_TTL,
        }
        .to_string());
    }
    Ok(ttl)
}

/// A zero interval would sweep in a busy loop.
fn parse_interval(text: &str) -> Result<Duration, String> {
    match crate::duration::parse(text)? {
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
        Cli::command().debug_assert();
    }

    #[test]
    fn run_parses_its_contract() {
        let cli = Cli::try_parse_from([
            "sqlock",
            "--table",
            "job_locks",
            "run",
            "--strategy",
            "insert",
            "--ttl",
            "2s",
            "--no-wait",
            "--at-least",
            "1m",
            "nightly",
            "--",
            "sh",
            "-c",
            "echo hi",
        ])
        .unwrap();
        assert_eq!(cli.table.as_str(), "job_locks");
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.strategy, Strategy::Insert);
        assert_eq!(run.ttl, Duration::from_secs(2));
        assert!(run.no_wait);
        assert_eq!(run.at_least, Some(Duration::from_secs(60)));
        assert_eq!(run.command, ["sh", "-c", "echo hi"]);
    }

    #[test]
    fn bad_input_is_refused_while_parsing() {
        let long = "k".repeat(256);
        for args in [
            &["run", "", "--", "true"][..],
            &["run", &long, "--", "true"],
            &["run", "a\0b", "--", "true"],
            &["run", "--ttl", "0s", "k", "--", "true"],
            &["run", "--ttl", "banana", "k", "--", "true"],
            &["run", "--strategy", "optimistic", "k", "--", "true"],
            &["run", "--wait", "1s", "--no-wait", "k", "--", "true"],
            &["run", "k"],
            &["--table", "Bad-Name", "list"],
            &["release", "k"],
            &["sweep", "--batch", "0"],
            &["sweep", "--every", "0s"],
            &["schema", "--dialect", "oracle"],
            &["frobnicate"],
        ] {
            let argv = std::iter::once("sqlock").chain(args.iter().copied());
            assert!(Cli::try_parse_from(argv).is_err(), "{args:?}");
        }
    }
}
