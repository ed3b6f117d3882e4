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
/// DATABASE_URL, else the embedded default: the SQLite file
/// $HOME/.local/state/sqlock/sqlock.db (/var/lib/sqlock/sqlock.db for root), the same
/// wherever sqlock is started, so that a user's cron jobs and shells lock through one
/// file (created on first use, in WAL mode; XDG_STATE_HOME is not read, since cron
/// does not set it). On SQLite the lock table is created on first use; on PostgreSQL and
/// MariaDB run `sqlock migrate` (or sqlx-cli) once: there a missing table is an error.
/// Only `run`, `elect`, `migrate` and `sweep --every` create a SQLite file that does not
/// exist; the other commands answer as for an empty table (no locks held).
///
/// Durations read 500ms, 30s, 5m, 1h30m, 2d (units ms, s, m, h, d, largest first,
/// each once), at most 3650d.
///
/// With --json, a failure is printed on stdout as {"error": MESSAGE, "exit_status": N}
/// as well as on stderr as text, so that a script reading the output as JSON reads one
/// in every case.
///
/// Exit status:
///   0    success; for `run` and `elect`, the command's own status (128+N when
///        signal N ended it); for `status`, the lock is held
///   64   bad usage or input: key, duration, table name, strategy, a --limit other
///        than the semaphore's N, any usage error
///   69   the database is unreachable, or the lock table is missing
///   70   an unexpected database or internal error
///   75   `run`: the lock was not acquired (busy with --no-wait, or --wait ran out);
///        `release --force`: the lock was not held; `status`: the lock is free
///        (or its holder gone); `leader`: nobody leads
///   76   `run`: the lock was lost (or revoked by `release --force`) while the
///        command ran; `elect`: leadership was lost while the command ran (without
///        --again)
///   77   `release --force`: the key is held by a for-update lock, which ends only
///        with its holder's transaction
///   126  `run`, `elect`: the command could not be executed (permission denied)
///   127  `run`, `elect`: the command was not found
#[derive(Debug, Parser)]
#[command(name = "sqlock", version, verbatim_doc_comment, max_term_width = 100)]
pub struct Cli {
    /// The database: postgres://user@host/db, mysql://user@host/db, sqlite:/path/locks.db
    /// [default: $HOME/.local/state/sqlock/sqlock.db, /var/lib/sqlock/sqlock.db for root].
    /// Given three times or more, to `run`: independent databases, and the command runs
    /// under a quorum lock held on a majority of them (the plain lease only).
    #[arg(long, global = true, value_name = "URL", action = clap::ArgAction::Append)]
    pub database_url: Vec<String>,

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
    ///     and sqlock exits 76; if an operator revoked it (`release --force`, heard at
    ///     the next renewal, at once on PostgreSQL), sqlock gives it back once the
    ///     group is empty, so that the next holder never runs beside this command;
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
    /// once. sqlock itself keeps running (and renewing) until then, and exits with the
    /// command's status at the end of the period. SIGINT, SIGTERM or SIGHUP during that
    /// wait (or earlier, while the command ran) ends it: the lock is released as soon
    /// as the command is over, and sqlock exits with the command's status.
    ///
    /// With --limit N, at most N copies run at once across hosts: each takes one of
    /// the N permits of the semaphore KEY (a lease each, renewed the same way), and
    /// gets SQLOCK_LIMIT and SQLOCK_PERMIT (the permit's key) besides. Every copy must
    /// say the same N. A killed copy's permit comes back at its TTL.
    ///
    /// One KEY, one holder: whatever the mode, a run holds KEY, and a run of another
    /// mode on KEY (or `sqlock elect` on election:NAME for KEY election:NAME) is busy
    /// meanwhile. Only --shared runs share KEY with each other, and --limit runs while
    /// permits are left.
    ///
    /// Exit status: the command's (128+N when signal N ended it); 75 when the lock
    /// (or a permit) was not acquired; 76 when it was lost; 126/127 when the command
    /// cannot run.
    #[command(verbatim_doc_comment)]
    Run(RunArgs),

    /// Run a long-lived command while this process leads the election NAME
    ///
    /// sqlock campaigns (waits) until it leads, then runs the command with the term in
    /// its environment: SQLOCK_ELECTION, SQLOCK_LEADER_ID, SQLOCK_TERM (also as
    /// SQLOCK_FENCING_TOKEN: the term is the fencing token of the election's lease,
    /// strictly rising from one leader to the next), SQLOCK_KEY and SQLOCK_OWNER.
    ///
    /// The election is a lease on the key election:NAME with a 15 s TTL by default,
    /// renewed while the command runs. The command is supervised as `run` supervises
    /// its own (signals passed on to its process group, a watcher that kills the group
    /// should sqlock die, presence where it is safe):
    ///   - if leadership is lost (a pause past the TTL, a cut from the database, an
    ///     operator's `release --force election:NAME`), the whole group gets SIGTERM,
    ///     then SIGKILL after 2 s; sqlock exits 76, or with --again campaigns again and
    ///     starts the command anew when it leads again;
    ///   - when the command exits, sqlock resigns at once (the next candidate leads
    ///     without waiting for the TTL) and exits with the command's status.
    ///
    /// sqlock says on stderr when it campaigns and when it leads (stdout is the
    /// command's); a signal while it campaigns ends the campaign (128+N).
    /// `sqlock leader NAME` tells who leads.
    ///
    /// Exit status: the command's (128+N when signal N ended it); 76 when leadership
    /// was lost (without --again); 126/127 when the command cannot run.
    #[command(verbatim_doc_comment)]
    Elect(ElectArgs),

    /// Print who leads the election NAME: identity, term, since when
    ///
    /// Read from the election's live lease and the identity recorded for its term, in
    /// one statement, on the database clock.
    ///
    /// Exit status: 0 when a leader was printed; 75 when nobody leads (with --json,
    /// after printing {"election": NAME, "leader": null}).
    #[command(verbatim_doc_comment)]
    Leader {
        /// Print a JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// The election's name: 1 to 246 bytes of UTF-8, no NUL.
        #[arg(value_parser = parse_election)]
        name: String,
    },

    /// List the locks held now
    ///
    /// Each with its key, strategy, owner, fencing token, when it was taken, how long
    /// until it expires (database time) and how many fair waiters are queued for it.
    /// For-update locks are not listed: they live in their holder's transaction.
    ///
    /// Then the semaphores (`run --limit`), each with N, how many permits are held,
    /// and a line per holder. With --json their permits are in the array as locks,
    /// with "semaphore" (its name) and "permits" (N) besides.
    #[command(verbatim_doc_comment)]
    List {
        /// Print a JSON array of objects instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// Show who holds the lock on KEY: owner, fencing token, strategy, expiry
    ///
    /// Times are the database's. A for-update lock is not seen (it lives in its
    /// holder's transaction): its key shows as free. A holder with presence whose
    /// process died shows as gone, and its key as free: the next acquirer takes it at
    /// once. A name that shared runs (--shared) hold shows its readers and the
    /// exclusive runs waiting behind them (waiting, never holding), a read whose holder
    /// died apart (gone: the next exclusive run drops it); with --json, "readers",
    /// "gone_readers", "waiting_writers" (owners) and "writer". A --limit name shows
    /// how many of its permits are held, a permit whose holder died apart (gone, the
    /// next copy's at once); with --json, "permits" (N), "permits_held",
    /// "permit_holders", "permits_gone" and "gone_permit_holders".
    ///
    /// Exit status: 0 when the lock is held; 75 when it is free or its holder gone (for
    /// a --shared or --limit name: no read or permit held by a live holder).
    #[command(verbatim_doc_comment)]
    Status {
        /// Print a JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// The lock's key.
        #[arg(value_parser = parse_key)]
        key: String,
    },

    /// Take a lock from its holder: an operator's escape hatch
    ///
    /// By default the lock is revoked, and no two holders ever run at once: the key
    /// stays busy for everyone while its holder is told, stops and gives it back. The
    /// holder's `sqlock run` hears of it at its next renewal (at once on PostgreSQL),
    /// stops its command (SIGTERM, then SIGKILL after 2 s), gives the lock back and
    /// exits 76. The key is free once the holder has given it back, or at the lease's
    /// expiry as it stood when revoked, whichever comes first: that instant is printed
    /// (with --json, "free_by" and "free_in_ms"). A holder that never gives it back (a
    /// paused or unreachable process) keeps the key until then. The holder's fenced
    /// writes still pass meanwhile: nobody else can hold the key. A name held in
    /// shared mode has each of its reads or permits revoked (new ones may come
    /// meanwhile); a fair lock goes to its next waiter when given back.
    ///
    /// With --holder-gone the lock is released at once, as for a holder known to be
    /// dead: the key is free now, and its fencing token moves on, but a holder that
    /// still runs goes on until its next renewal (a third of its TTL), overlapping the
    /// next holder.
    ///
    /// Exit status: 0 when a held lock was revoked (or released, with --holder-gone);
    /// 75 when nothing was held; 77 when a for-update lock holds the key (it cannot be
    /// released by force: end its holder's transaction or session).
    #[command(verbatim_doc_comment)]
    Release {
        /// Required: taking another owner's lock is never implicit.
        #[arg(long, required = true)]
        force: bool,
        /// Release at once instead of revoking: only for a holder known to be gone, as
        /// a live one runs on until its next renewal, beside the next holder.
        #[arg(long)]
        holder_gone: bool,
        /// Print a JSON object instead of text.
        #[arg(long)]
        json: bool,
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
    ///
    /// With --json each result is one JSON object on a line of its own.
    #[command(verbatim_doc_comment)]
    Sweep {
        /// Only rows that expired at least this long ago.
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse,
              default_value = "0s", allow_hyphen_values = true)]
        grace: Duration,
        /// Keep sweeping at this interval until SIGINT or SIGTERM.
        #[arg(long, value_name = "DUR", value_parser = parse_interval,
              conflicts_with_all = ["schedule", "unschedule"], allow_hyphen_values = true)]
        every: Option<Duration>,
        /// Schedule the sweep inside the database, every DUR (whole seconds; pg_cron
        /// before 1.5 takes whole minutes that divide an hour, hours that divide a
        /// day, or 1d).
        #[arg(long, value_name = "DUR", value_parser = parse_interval,
              conflicts_with = "unschedule", allow_hyphen_values = true)]
        schedule: Option<Duration>,
        /// Remove the sweep scheduled inside the database.
        #[arg(long)]
        unschedule: bool,
        /// At most this many rows per delete statement (1 to 100000).
        #[arg(long, value_name = "N", default_value_t = 1000,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(sqlock::MAX_SWEEP_BATCH)),
              allow_negative_numbers = true)]
        batch: u32,
        /// Print JSON objects, one a line, instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Create the lock table (sqlock's migrations; the DDL for another --table)
    Migrate {
        /// Print a JSON object instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Print the lock table's DDL for --table, without connecting
    Schema {
        /// postgres, mysql or sqlite; defaults to the database URL's.
        #[arg(long, value_name = "DIALECT", value_parser = parse_dialect)]
        dialect: Option<Dialect>,
        /// Print a JSON object (dialect, table, ddl) instead of the DDL itself.
        #[arg(long)]
        json: bool,
    },

    /// Print a shell completion script, generated from this command line
    ///
    /// Load it in the current shell, or install it where the shell looks:
    ///   bash:  source <(sqlock completions bash)
    ///          sqlock completions bash > /etc/bash_completion.d/sqlock
    ///   zsh:   sqlock completions zsh > "${fpath[1]}/_sqlock"
    ///   fish:  sqlock completions fish > ~/.config/fish/completions/sqlock.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Print the manual page, generated from this command line
    ///
    /// `sqlock man` is sqlock(1), `sqlock man run` is sqlock-run(1); `--dir DIR`
    /// writes every page there instead (sqlock.1, sqlock-run.1, ...). Read one with
    /// `sqlock man | man -l -`.
    #[command(verbatim_doc_comment)]
    Man {
        /// A command whose page to print (run, list, status, ...).
        command: Option<String>,
        /// Write every page, as NAME.1 files, into this existing directory.
        #[arg(long, value_name = "DIR", conflicts_with = "command", value_parser = parse_dir)]
        dir: Option<std::path::PathBuf>,
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
    /// At least 1s: a shorter lease could not be kept by renewals on a loaded machine.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_ttl,
          allow_hyphen_values = true)]
    pub ttl: Duration,

    /// Wait at most this long for the lock, then exit 75 (default: as long as it takes).
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse,
          conflicts_with = "no_wait", allow_hyphen_values = true)]
    pub wait: Option<Duration>,

    /// Do not wait: exit 75 at once when the lock is held elsewhere.
    #[arg(long)]
    pub no_wait: bool,

    /// Keep the lock at least this long after taking it, even if the command ends
    /// sooner: sqlock keeps running until then; SIGINT or SIGTERM releases at once
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse,
          allow_hyphen_values = true)]
    pub at_least: Option<Duration>,

    /// Take the read side of the read-write lock KEY: runs alongside other --shared
    /// runs of KEY, never with an --exclusive run nor any other lock on KEY; a waiting
    /// --exclusive run makes --shared runs that come after it wait. KEY: at most 212
    /// bytes.
    #[arg(long, conflicts_with_all = ["exclusive", "fair", "strategy", "at_least", "limit"])]
    pub shared: bool,

    /// Take the write side of the read-write lock KEY (the side a run takes unless
    /// --shared): like the plain lock on KEY, busy while --shared runs of KEY are in,
    /// and a --shared run that comes while it waits waits behind it. KEY: at most 212
    /// bytes.
    #[arg(long, conflicts_with_all = ["fair", "strategy", "at_least", "limit"])]
    pub exclusive: bool,

    /// Run at most N copies across hosts: take one of the N permits of the semaphore
    /// KEY (1 to 1000) instead of the lock on KEY; the permits hold KEY together, so a
    /// lock on KEY (and any other run mode) is busy while a copy runs. Every `run
    /// --limit` of KEY must say the same N (another N exits 64). A lease strategy only;
    /// no --at-least.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000),
          conflicts_with_all = ["at_least", "fair"])]
    pub limit: Option<u32>,

    /// The lock's key: 1 to 255 bytes of UTF-8, no NUL (a semaphore's name, with
    /// --limit: 1 to 241 bytes).
    #[arg(value_parser = parse_key)]
    pub key: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `sqlock elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The identity recorded for this candidate's terms, shown by `sqlock leader`
    /// (1 to 255 bytes): how the others reach the leader. Defaults to HOST:PID.
    #[arg(long, value_name = "ID", value_parser = parse_identity)]
    pub id: Option<String>,

    /// The TTL of the election's lease: how long a leader that stopped renewing it
    /// (killed, paused, cut off) stays leader at most. Renewed every third of it; at
    /// least 1s.
    #[arg(long, value_name = "DUR", default_value = "15s", value_parser = parse_ttl)]
    pub ttl: Duration,

    /// Campaign again after leadership was lost, instead of exiting 76, and run the
    /// command anew in the next term.
    #[arg(long)]
    pub again: bool,

    /// The election's name (its lock key is election:NAME): 1 to 246 bytes of UTF-8,
    /// no NUL.
    #[arg(value_parser = parse_election)]
    pub name: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The library's rules for an election's name, checked before connecting as keys are.
fn parse_election(name: &str) -> Result<String, String> {
    if name.len() > sqlock::MAX_ELECTION_NAME_BYTES {
        return Err(name_too_long(
            "an election's name",
            name.len(),
            sqlock::MAX_ELECTION_NAME_BYTES,
            "its lock key is `election:` and the name",
        ));
    }
    sqlock::check::election_name(name).map_err(|e| e.to_string())?;
    Ok(name.to_owned())
}

/// Why a name is refused for its length: `what` it is, and `why` its limit is not
/// the key's (what else its key, or its rows' keys, hold within 255 bytes).
pub(crate) fn name_too_long(what: &str, len: usize, max: usize, why: &str) -> String {
    format!(
        "{what} is {len} bytes long, the limit is {max} bytes: {why}, within the {} \
         bytes of a key",
        sqlock::MAX_KEY_BYTES
    )
}

/// The library's own check of a leader's identity, before connecting.
fn parse_identity(id: &str) -> Result<String, sqlock::Error> {
    sqlock::check::identity(id)?;
    Ok(id.to_owned())
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

/// Through `Dialect::from_str`: its names, `postgresql` and `mariadb`.
fn parse_dialect(name: &str) -> Result<Dialect, sqlock::UnknownDialect> {
    name.parse()
}

/// The library's own key check (it checks again before any SQL): made here too so
/// that a bad key is a usage error even when the database is unreachable.
fn parse_key(key: &str) -> Result<String, sqlock::Error> {
    sqlock::check::key(key)?;
    Ok(key.to_owned())
}

/// The library's TTL range, checked before connecting, as keys are; the limits are
/// given in the unit the user wrote.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    use crate::duration::in_units_of;
    let ttl = crate::duration::parse(text)?;
    if ttl < MIN_TOOL_TTL {
        return Err(format!(
            "ttl of {text} is too short: the minimum is {}, since the lease is renewed \
             every third of its TTL and each renewal must reach the database and come \
             back within that (the default is 30s for run, 15s for elect)",
            in_units_of(MIN_TOOL_TTL, text)
        ));
    }
    if ttl > sqlock::MAX_TTL {
        return Err(format!(
            "ttl of {text} is too long: the maximum is {}",
            in_units_of(sqlock::MAX_TTL, text)
        ));
    }
    Ok(ttl)
}

/// The shortest TTL the tool takes: 1 s. The library allows 10 ms, for a process
/// next to its database that renews in memory-fast round trips; the tool starts a
/// process, runs a command beside its renewals on a machine that may be loaded, and
/// stops the command when a renewal comes back too late, so that a TTL it cannot keep
/// would only stop the command after a few milliseconds.
pub const MIN_TOOL_TTL: Duration = Duration::from_secs(1);

/// Checked while parsing, so a mistyped directory is bad input (64) rather than a
/// failed write.
fn parse_dir(path: &str) -> Result<std::path::PathBuf, String> {
    let dir = std::path::PathBuf::from(path);
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(format!("{path:?} is not an existing directory"))
    }
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
    fn elect_parses_its_contract() {
        let cli = Cli::try_parse_from([
            "sqlock",
            "elect",
            "--id",
            "10.0.0.1:80",
            "--ttl",
            "5s",
            "--again",
            "sched",
            "--",
            "sh",
            "-c",
            "serve",
        ])
        .unwrap();
        let Command::Elect(elect) = cli.command else {
            panic!("not elect")
        };
        assert_eq!(elect.id.as_deref(), Some("10.0.0.1:80"));
        assert_eq!(elect.ttl, Duration::from_secs(5));
        assert!(elect.again);
        assert_eq!(elect.name, "sched");
        assert_eq!(elect.command, ["sh", "-c", "serve"]);
        let long = "n".repeat(sqlock::MAX_ELECTION_NAME_BYTES + 1);
        assert!(Cli::try_parse_from(["sqlock", "leader", &long]).is_err());
    }

    #[test]
    fn the_new_commands_parse() {
        let cli = Cli::try_parse_from(["sqlock", "status", "--json", "nightly"]).unwrap();
        assert!(matches!(cli.command, Command::Status { ref key, json: true } if key == "nightly"));
        let cli = Cli::try_parse_from(["sqlock", "completions", "zsh"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Completions {
                shell: clap_complete::Shell::Zsh
            }
        ));
        let cli = Cli::try_parse_from(["sqlock", "man", "run"]).unwrap();
        assert!(
            matches!(cli.command, Command::Man { command: Some(ref c), dir: None } if c == "run")
        );
        for args in [
            &["list", "--json"][..],
            &["release", "--force", "--json", "k"],
            &["sweep", "--json"],
            &["migrate", "--json"],
            &["schema", "--json"],
        ] {
            let argv = std::iter::once("sqlock").chain(args.iter().copied());
            assert!(Cli::try_parse_from(argv).is_ok(), "{args:?}");
        }
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
            &["run", "--ttl", "-5s", "k", "--", "true"],
            &["run", "--ttl", "4000d", "k", "--", "true"],
            &["run", "--wait", "--no-wait", "k", "--", "true"],
            &["status"],
            &["status", ""],
            &["completions", "tcsh"],
            &["man", "run", "--dir", "x"],
            &["run", "--strategy", "optimistic", "k", "--", "true"],
            &["run", "--wait", "1s", "--no-wait", "k", "--", "true"],
            &["run", "k"],
            &["elect", "", "--", "true"],
            &["elect", &long, "--", "true"],
            &["elect", "--id", "", "n", "--", "true"],
            &["elect", "--ttl", "0s", "n", "--", "true"],
            &["elect", "n"],
            &["leader"],
            &["leader", ""],
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
