//! The `sqlock` command-line tool: parses the command line, connects, runs one command,
//! and maps every outcome to a documented exit status.
//!
//! `main.rs` only calls [`main`]; tests call [`run_with_args`] or run the binary. Every
//! failure becomes a [`Failure`], and [`exit_status`] turns each kind into one of the
//! named exit codes below, in one exhaustive match.

// `deny`, not `forbid`: `tree` needs one `unsafe` block, `pre_exec` for the command's
// parent-death signal on Linux, allowed there alone.
#![deny(unsafe_code)]

mod args;
mod connect;
mod duration;
mod elect;
mod limit;
mod manual;
mod ops;
mod run;
mod tree;
mod watcher;

use std::ffi::OsString;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;
use sqlock::{Dialect, Locker};

pub use args::{Cli, Command, ElectArgs, RunArgs};
pub use connect::{default_database, ROOT_DEFAULT_DATABASE, USER_DEFAULT_DATABASE};

/// Bad usage or input: a bad key, duration, table name or strategy, an unknown
/// command or option, an unsupported URL (`EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// The database is unreachable or the lock table is missing (`EX_UNAVAILABLE`).
pub const EXIT_UNAVAILABLE: i32 = 69;
/// Anything unexpected: a database error sqlock does not handle, a failed migration
/// (`EX_SOFTWARE`).
pub const EXIT_SOFTWARE: i32 = 70;
/// `run`: the lock was not acquired, busy with `--no-wait` or still busy when `--wait`
/// ran out; `release --force`: the lock was not held; `status`: the lock is free;
/// `leader`: nobody leads
/// (`EX_TEMPFAIL`: try again later).
pub const EXIT_NOT_ACQUIRED: i32 = 75;
/// `run`: the lock was lost while the command ran, which was stopped; `elect`: so was
/// the leadership (without `--again`).
pub const EXIT_LOST: i32 = 76;
/// `release --force`: the key is held by a for-update lock, which cannot be released
/// by force: it ends with its holder's transaction (`EX_NOPERM`).
pub const EXIT_ROW_LOCKED: i32 = 77;
/// `run`: the command exists but could not be executed (as shells report it).
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// `run`: the command was not found (as shells report it).
pub const EXIT_NOT_FOUND: i32 = 127;

/// How long closing the pool may take before the tool exits anyway.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a command failed, as far as the exit status is concerned. Each carries the
/// message printed on stderr (lowercase, after `sqlock: `).
#[derive(Debug)]
pub enum Failure {
    /// Bad usage or input.
    Usage(String),
    /// The database cannot be used.
    Unavailable(String),
    /// The lock was not acquired.
    NotAcquired(String),
    /// There was no lock to release, or no leader to show: an answer, which the
    /// command printed (with `--json`, as its JSON object) before failing with it.
    NotHeld(String),
    /// The lock was lost.
    Lost(String),
    /// The lock cannot be released by force: a for-update lock.
    RowLocked(String),
    /// The command to run could not be executed.
    CannotExecute(String),
    /// The command to run was not found.
    NotFound(String),
    /// Anything else.
    Other(String),
}

/// The exit status of each kind of failure.
pub fn exit_status(failure: &Failure) -> i32 {
    match failure {
        Failure::Usage(_) => EXIT_USAGE,
        Failure::Unavailable(_) => EXIT_UNAVAILABLE,
        Failure::NotAcquired(_) | Failure::NotHeld(_) => EXIT_NOT_ACQUIRED,
        Failure::Lost(_) => EXIT_LOST,
        Failure::RowLocked(_) => EXIT_ROW_LOCKED,
        Failure::CannotExecute(_) => EXIT_CANNOT_EXECUTE,
        Failure::NotFound(_) => EXIT_NOT_FOUND,
        Failure::Other(_) => EXIT_SOFTWARE,
    }
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Self::Usage(m)
            | Self::Unavailable(m)
            | Self::NotAcquired(m)
            | Self::NotHeld(m)
            | Self::Lost(m)
            | Self::RowLocked(m)
            | Self::CannotExecute(m)
            | Self::NotFound(m)
            | Self::Other(m) => m,
        }
    }
}

impl From<sqlock::Error> for Failure {
    fn from(e: sqlock::Error) -> Self {
        use sqlock::Error as E;
        match e {
            E::EmptyKey
            | E::KeyTooLong { .. }
            | E::KeyContainsNul
            | E::TtlTooShort { .. }
            | E::TtlTooLong { .. }
            | E::InvalidTableName { .. }
            | E::InvalidBatch { .. }
            | E::InvalidSchedule { .. }
            | E::InvalidIdentity { .. }
            | E::UpgradeRefused { .. }
            | E::ReservedMarker { .. }
            | E::MixedHolds { .. } => Self::Usage(e.to_string()),
            // The semaphore's: a permit's key, N out of range, N unlike the others'.
            E::ReservedKey { .. }
            | E::InvalidPermits { .. }
            | E::InvalidPermitCount { .. }
            | E::PermitsMismatch { .. } => Self::Usage(e.to_string()),
            E::SchedulerUnavailable { .. } => Self::Unavailable(e.to_string()),
            E::MissingSweepProcedure { ref name, .. } => Self::Unavailable(format!(
                "the sweep procedure {name:?} does not exist: run `sqlock migrate` (or \
                 `sqlock schema` for another --table) to create it"
            )),
            // The library's message names its own API; the tool's user wants the tool.
            E::MissingTable { ref table, .. } => Self::Unavailable(missing_table(table)),
            // The library prints durations as Rust's Debug does (501.024989ms); the tool
            // prints them as it reads them (501ms).
            E::Timeout {
                ref key, waited, ..
            } => Self::NotAcquired(format!(
                "timed out after {} waiting for lock {key:?}",
                duration::human(waited)
            )),
            // The key was free, but the grant came back after its TTL: try again
            // later, or with a longer --ttl.
            E::GrantExpired {
                ref key, ttl, took, ..
            } => Self::NotAcquired(format!(
                "lock {key:?} was granted, but the answer took {}, longer than its ttl of \
                 {}: the grant was given back; use a --ttl well above the database's round \
                 trip",
                duration::human(took),
                duration::human(ttl)
            )),
            // Met elsewhere than `release --force` (which answers it with a code of its
            // own, see `ops::release`): a row locked for longer than the tool waits.
            E::RowLocked { .. } => Self::NotAcquired(e.to_string()),
            E::LockLost { .. } | E::LeadershipLost { .. } => Self::Lost(e.to_string()),
            // The tool turns presence on only where the check allowed it; should the
            // marker still fail (its file, its connection), say how to go without.
            E::PresenceUnavailable { .. } => Self::Unavailable(format!(
                "{e}; pass --no-presence (or set SQLOCK_NO_PRESENCE=1) to hold the lock \
                 without it"
            )),
            E::PoolExhausted | E::NotMariaDb { .. } | E::GaleraCluster { .. } => {
                Self::Unavailable(e.to_string())
            }
            // The tool refuses the first itself before connecting; the second is the
            // operator's --transaction-pooling on a server that is not PostgreSQL.
            E::StrategyUnsupported { .. } | E::FenceNotApplicable { .. } => {
                Self::Usage(e.to_string())
            }
            E::SettingUnsupported { .. } => Self::Usage(format!(
                "--transaction-pooling (SQLOCK_TRANSACTION_POOLING) is for PostgreSQL \
                 behind a transaction-pooling proxy: {e}"
            )),
            E::Database(ref db) if is_pooler_error(db) => Self::Unavailable(format!(
                "the server answered as it does behind a transaction-pooling proxy such as \
                 PgBouncer, where a prepared statement stays on a server connection other \
                 clients get ({db}): pass --transaction-pooling, or set \
                 SQLOCK_TRANSACTION_POOLING=1"
            )),
            E::Database(ref db) if is_connection_error(db) => Self::Unavailable(chain(&e)),
            // `sqlock::Error` is non-exhaustive: a variant added later is unexpected here.
            _ => Self::Other(chain(&e)),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::Other(e.to_string())
    }
}

/// Errors that say the database cannot be reached, rather than that a statement
/// failed.
fn is_connection_error(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
    )
}

/// PostgreSQL's answers to a named prepared statement that a transaction-pooling proxy
/// left on another server connection: duplicate_prepared_statement (42P05), and
/// invalid_sql_statement_name (26000, "prepared statement does not exist").
fn is_pooler_error(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "42P05" || code == "26000")
}

fn missing_table(table: &str) -> String {
    let how = if table == sqlock::DEFAULT_TABLE {
        "run `sqlock migrate` once against this database, or apply sqlock's migrations \
         with sqlx-cli"
            .to_owned()
    } else {
        format!(
            "run `sqlock --table {table} migrate` once against this database, or apply \
             the DDL of `sqlock --table {table} schema`"
        )
    };
    format!("lock table {table:?} does not exist\nhint: {how}")
}

/// An error and its sources, on one line: `database error: <the cause>`.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = own_text(e);
    let mut source = e.source();
    while let Some(s) = source {
        // Many errors print their source's message in their own: say each cause once.
        let next = own_text(s);
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// An error and its causes, each said once, in the tool's words (see [`chain`]).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    chain(e)
}

/// What one error says of itself: a server's message without sqlx's framing, without
/// PostgreSQL's source line in its own code ("... at line 948") and without MariaDB's
/// error number ("1054 (42S22): ..."), which tell the user nothing new.
fn own_text(e: &(dyn std::error::Error + 'static)) -> String {
    let text = match e.downcast_ref::<sqlx::Error>() {
        Some(sqlx::Error::Database(db)) => db.message().to_owned(),
        _ => e.to_string(),
    };
    tidy(&text).to_owned()
}

/// `text` without a PostgreSQL source line at its end and a MariaDB error number at
/// its start.
fn tidy(text: &str) -> &str {
    let mut text = text;
    if let Some((head, line)) = text.rsplit_once(" at line ") {
        if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) {
            text = head;
        }
    }
    // "1054 (42S22): message"
    if let Some((number, rest)) = text.split_once(" (") {
        if let Some((state, message)) = rest.split_once("): ") {
            let digits = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
            if digits && state.len() == 5 && state.bytes().all(|b| b.is_ascii_alphanumeric()) {
                text = message;
            }
        }
    }
    text
}

/// Runs the tool with the process's arguments and returns its exit status.
///
/// The binary is also the watcher `sqlock run` starts beside its command (see
/// `watcher.rs`): started with `__sqlock-watch` as its only argument, it watches
/// rather than parsing a command line.
pub fn main() -> i32 {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == watcher::WATCH_ARG)
    {
        return watcher::main();
    }
    run_with_args(std::env::args_os())
}

/// Runs the tool with these arguments (the first is the program name) and returns
/// its exit status. Messages go to stderr, output to stdout.
pub fn run_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let json = wants_json(&args);
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let status = clap_failure(&e);
            if json && status != 0 {
                print_json_error(&clap_message(&e), status);
            }
            return status;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let failure = Failure::Other(format!("cannot start the runtime: {e}"));
            return report(&failure, json);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(status) => status,
        Err(failure) => report(&failure, json),
    }
}

/// Whether `--json` was asked for, before any `--` (after it, the words are the
/// command's): then a failure is also printed on stdout as a JSON object, so that a
/// script reading the output as JSON reads one in every case.
fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// A failure as a JSON object on stdout: `{"error": MESSAGE, "exit_status": N}`.
fn print_json_error(message: &str, status: i32) {
    println!(
        "{}",
        serde_json::json!({ "error": message, "exit_status": status })
    );
}

/// Prints a failure on stderr (and, with `json`, as JSON on stdout), and returns its
/// exit status.
fn report(failure: &Failure, json: bool) -> i32 {
    let status = exit_status(failure);
    eprintln!("sqlock: {}", failure.message());
    // `NotHeld` is an answer the command printed already, JSON included.
    if json && !matches!(failure, Failure::NotHeld(_)) {
        print_json_error(failure.message(), status);
    }
    status
}

/// A clap error's message: its first line, as the tool prints it.
fn clap_message(e: &clap::Error) -> String {
    if let Some((name, source)) = value_error(e) {
        return format!("{name}: {source}");
    }
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    text.lines().next().unwrap_or_default().to_owned()
}

/// `--help` and `--version` print on stdout and succeed; every other clap error is a
/// usage error (clap itself would exit 2), printed in the tool's own voice.
fn clap_failure(e: &clap::Error) -> i32 {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!("sqlock: a command is required\n");
            eprint!("{}", e.render());
            EXIT_USAGE
        }
        // A value our own parser refused: its message alone, after the option's name,
        // rather than clap's "invalid value" before it (a duration that is too long is
        // not "invalid").
        ErrorKind::ValueValidation if value_error(e).is_some() => {
            if let Some((name, source)) = value_error(e) {
                eprintln!("sqlock: {name}: {source}");
            }
            EXIT_USAGE
        }
        _ => {
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            eprint!("sqlock: {text}");
            if let Some(word) = command_without_separator(e) {
                eprintln!(
                    "hint: the command to run goes after `--`, as in \
                     `sqlock run KEY -- {word} ...` (or `sqlock elect NAME -- {word} ...`)"
                );
            }
            EXIT_USAGE
        }
    }
}

/// The first word of a command given without `--` before it (`sqlock run job echo hi`):
/// clap sees an argument it does not know, which is no option.
fn command_without_separator(e: &clap::Error) -> Option<&str> {
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) if !arg.starts_with('-') => Some(arg),
        _ => None,
    }
}

/// The option (`--ttl`) or argument (`KEY`) whose value a parser refused, and why.
fn value_error(e: &clap::Error) -> Option<(&str, &(dyn std::error::Error + 'static))> {
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    // "--ttl <DUR>" or "<KEY>".
    let name = arg.split(' ').next().unwrap_or(arg);
    let name = name.trim_start_matches('<').trim_end_matches('>');
    Some((name, std::error::Error::source(e)?))
}

async fn dispatch(cli: Cli) -> Result<i32, Failure> {
    // What needs no connection: generated text, and DDL (which needs only a dialect).
    match &cli.command {
        Command::Completions { shell } => return manual::completions(*shell),
        Command::Man { command, dir } => return manual::man(command.as_deref(), dir.as_deref()),
        _ => {}
    }
    if let Command::Schema {
        dialect: Some(dialect),
        json,
    } = cli.command
    {
        return ops::schema(dialect, &cli.table, json);
    }
    let database = connect::database(cli.database_url.as_deref())?;
    if let Command::Schema { json, .. } = cli.command {
        return ops::schema(connect::dialect(&database.url)?, &cli.table, json);
    }
    if let Command::Run(args) = &cli.command {
        run::check(args, connect::dialect(&database.url)?)?;
    }
    let pooling = cli.transaction_pooling || connect::transaction_pooling_from_env();
    // Only what takes locks (or is told to make the table) creates a SQLite file: the
    // others answer a missing one as an empty table, without leaving a file behind.
    let creates = matches!(
        cli.command,
        Command::Run(_)
            | Command::Elect(_)
            | Command::Migrate { .. }
            | Command::Sweep { every: Some(_), .. }
    );
    let pool = connect::connect(&database, pooling, creates).await?;
    // On PostgreSQL, where notifications can work: an operator's revocation of the
    // lock a `run` or `elect` holds reaches it at once rather than at its next renewal,
    // a resignation wakes the other candidates at once rather than at their next poll,
    // and a fair waiter is woken by the notification naming it (a transaction-pooling
    // proxy cannot deliver them).
    let holds = matches!(cli.command, Command::Run(_) | Command::Elect(_));
    let mut builder = Locker::builder(pool.clone())
        .table(cli.table.as_str())
        .transaction_pooling(pooling);
    if holds && pool.dialect() == Dialect::Postgres && !pooling {
        builder = builder.notify_waiters(true);
    }
    let mut locker = builder.clone().build()?;
    if holds && !cli.no_presence && !connect::no_presence_from_env() {
        // Presence where it is safe: the check asks the server once (a Galera node
        // says no), and a server that cannot be asked is left to the commands.
        if locker.check_presence().await.is_ok() {
            locker = builder.presence(true).build()?;
        }
    }
    if pool.dialect() == Dialect::Sqlite && !matches!(cli.command, Command::Migrate { .. }) {
        // The embedded default needs no set-up step. Servers never get tables made
        // behind the operator's back: there a missing table is an error.
        locker.create_table().await?;
    }
    let outcome = match cli.command {
        Command::Run(args) => run::run(&locker, args).await,
        Command::Elect(args) => elect::elect(&locker, args).await,
        Command::Leader { name, json } => elect::leader(&locker, &name, json).await,
        Command::List { json } => ops::list(&locker, json).await,
        Command::Status { key, json } => ops::status(&locker, &key, json).await,
        Command::Release {
            key,
            json,
            holder_gone,
            ..
        } => ops::release(&locker, &key, holder_gone, json).await,
        Command::Sweep {
            unschedule: true,
            json,
            ..
        } => ops::unschedule_sweep(&locker, json).await,
        Command::Sweep {
            grace,
            schedule: Some(every),
            batch,
            json,
            ..
        } => ops::schedule_sweep(&locker, every, grace, batch, json).await,
        Command::Sweep {
            grace,
            every,
            batch,
            json,
            ..
        } => ops::sweep(&locker, grace, every, batch, json).await,
        Command::Migrate { json } => ops::migrate(&locker, json).await,
        Command::Schema { .. } | Command::Completions { .. } | Command::Man { .. } => {
            unreachable!("BUG: answered before connecting")
        }
    };
    // Say goodbye to the server rather than drop the sockets, which servers log as
    // errors; never wait long for it.
    drop(locker);
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, pool.close()).await;
    outcome
}

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn server_messages_lose_their_source_lines_and_numbers() {
        assert_eq!(
            tidy("database \"x\" does not exist at line 948"),
            "database \"x\" does not exist"
        );
        assert_eq!(
            tidy("1054 (42S22): Unknown column 'lock_key' in 'SELECT'"),
            "Unknown column 'lock_key' in 'SELECT'"
        );
        assert_eq!(tidy("the line at line one"), "the line at line one");
        assert_eq!(tidy("a (b): c"), "a (b): c");
    }
}
