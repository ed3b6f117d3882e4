//! The `sqlock` command-line tool: parses the command line, connects, runs one command,
//! and maps every outcome to a documented exit status.
//!
//! `main.rs` only calls [`main`]; tests call [`run_with_args`] or run the binary. Every
//! failure becomes a [`Failure`], and [`exit_status`] turns each kind into one of the
//! named exit codes below, in one exhaustive match.

// `deny`, not `forbid`: `tree` needs one `unsafe` block, `pre_exec` for the command's
// parent-death signal on Linux, allowed there alone.
#![deny(unsafe_code)]

mod acquire;
mod args;
mod connect;
mod duration;
mod elect;
mod failure;
mod held;
mod listing;
mod manual;
mod ops;
mod quorum;
mod quorum_view;
mod run;
mod show;
mod tree;
mod watcher;

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;

pub use args::{Cli, Command, ElectArgs, RunArgs};
pub use connect::{default_database, ROOT_DEFAULT_DATABASE, USER_DEFAULT_DATABASE};
pub use failure::{
    exit_status, Failure, EXIT_CANNOT_EXECUTE, EXIT_LOST, EXIT_NOT_ACQUIRED, EXIT_NOT_FOUND,
    EXIT_ROW_LOCKED, EXIT_SOFTWARE, EXIT_UNAVAILABLE, EXIT_USAGE,
};

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
    if cli.database_url.len() > 1 {
        return quorum::dispatch(cli).await;
    }
    let database = connect::database(cli.database_url.first().map(String::as_str))?;
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
    let holds = matches!(cli.command, Command::Run(_) | Command::Elect(_));
    let migrates = matches!(cli.command, Command::Migrate { .. });
    let presence = !cli.no_presence && !connect::no_presence_from_env();
    let (pool, locker) = connect::open(
        &database,
        &cli.table,
        connect::Opening {
            pooling,
            creates,
            holds,
            presence,
            migrates,
        },
    )
    .await?;
    let outcome = match cli.command {
        Command::Run(args) => run::run(held::Target::Locker(&locker), args).await,
        Command::Elect(args) => elect::elect(&locker, args).await,
        Command::Leader { name, json } => elect::leader(&locker, &name, json).await,
        Command::List { json } => listing::list(&locker, json).await,
        Command::Status { key, json } => listing::status(&locker, &key, json).await,
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
    let _ = tokio::time::timeout(connect::CLOSE_TIMEOUT, pool.close()).await;
    outcome
}
