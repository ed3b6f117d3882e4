//! `sqlock-bench`: measures the sqlock library on the user's own database, beside
//! baselines that do the same work without it, in one run.
//!
//! The run works in a table of its own, which it creates and drops again. Its parts:
//! uncontended acquire+release with several worker counts (library, the same
//! statements sent raw, native locks, Redis), the statements one acquisition and one
//! release send, handoff under contention, the watchdog's statements per tick, and,
//! when asked, latency in a large table and sqlock beside its peers (the `peers` part). Each measurement is split into rounds that
//! alternate with its baselines, so that a change in the machine's load during the run
//! falls on all of them alike.
//!
//! `main.rs` only calls [`main`]. The modules form layers, each using only those
//! below it: this file and `run.rs` on top, then the parts, the output, the
//! baselines and the peers, the figures, and the support at the bottom.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

// The run: its command line, the parts it measures, and what it writes.
mod args;
mod output;
mod parts;
mod run;

// What the parts measure and against what: the baselines, the peers (the
// distributed-lock crates only with the `peers` feature), and the figures.
mod baseline;
mod figures;
mod peers;

// Support: the database and the table, statement counts, samples, progress, failures.
mod connect;
mod count;
mod db;
mod failure;
mod progress;
mod stats;
mod table;

use std::ffi::OsString;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Parser;
use sqlock::{DbPool, Dialect, Locker, Strategy};

use crate::args::{BenchArgs, Hidden, HoldArgs};
use crate::failure::Failure;

pub use failure::{EXIT_SOFTWARE, EXIT_UNAVAILABLE, EXIT_USAGE};

/// Connections beyond one per worker: the watchdog's renewals, a listener, spares.
const SPARE_CONNECTIONS: u32 = 4;

/// How long closing the pool may take before the run ends anyway.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the benchmark with the process's arguments and returns its exit status.
pub fn main() -> i32 {
    run_with_args(std::env::args_os())
}

/// Runs the benchmark with these arguments (the first is the program name) and
/// returns its exit status. Results go to stdout, progress and messages to stderr.
pub fn run_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = match BenchArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => return clap_failure(&e),
    };
    // One thread, as the `sqlock` tool runs: the workers are tasks on it, and the
    // figures stay comparable with earlier runs.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report(&Failure::Other(format!("cannot start the runtime: {e}"))),
    };
    let outcome = match &args.hidden {
        Some(Hidden::Hold(h)) => {
            let outcome = runtime.block_on(hold(&args, h));
            // The holder may still be reading its stdin: do not wait for it.
            runtime.shutdown_background();
            outcome
        }
        None => runtime.block_on(bench(args)),
    };
    match outcome {
        Ok(()) => 0,
        Err(failure) => report(&failure),
    }
}

/// The peers part's holder process: holds a lock until it is killed.
async fn hold(args: &BenchArgs, h: &HoldArgs) -> Result<(), Failure> {
    let url = connect::database_url(args.database_url.as_deref());
    parts::peers::hold(&url, &args.table, h).await
}

/// Prints a failure on stderr and returns its exit status.
fn report(failure: &Failure) -> i32 {
    eprintln!("sqlock-bench: {}", failure.message());
    failure.exit_status()
}

/// `--help` and `--version` print on stdout and succeed; every other clap error is a
/// usage error (clap itself would exit 2).
fn clap_failure(e: &clap::Error) -> i32 {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        _ => {
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            eprint!("sqlock-bench: {text}");
            EXIT_USAGE
        }
    }
}

/// Connects with a pool sized for the workers, runs, and closes the pool.
async fn bench(args: BenchArgs) -> Result<(), Failure> {
    if args.redis_url.is_some() && !cfg!(feature = "redis-baseline") {
        return Err(Failure::Usage(
            "--redis-url needs sqlock-bench built with the redis-baseline feature\nhint: \
             cargo run --release -p sqlock-bench --features redis-baseline -- ..."
                .into(),
        ));
    }
    if !count::install() {
        return Err(Failure::Other(
            "cannot count statements: a tracing subscriber is already installed".into(),
        ));
    }
    let url = connect::database_url(args.database_url.as_deref());
    let mut workers = args.most_workers().max(args.waiters + 1);
    if args.part("peers") {
        workers = workers.max(parts::peers::WORKERS[1] as u32);
    }
    let db = connect::connect(&url, workers + SPARE_CONNECTIONS).await?;
    let outcome = in_table(&db, &url, &args).await;
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, db.close()).await;
    outcome
}

/// Makes the table, runs, leaves the table as it was found whatever happened, and
/// writes the results.
async fn in_table(db: &DbPool, url: &str, args: &BenchArgs) -> Result<(), Failure> {
    let table = &args.table;
    let strategies = strategies(db.dialect(), args)?;
    let existed = table::check_own(db, table).await?;
    let base = Locker::builder(db.clone()).table(table.as_str()).build()?;
    base.create_table().await?;
    let outcome = run::run_all(db, url, table, &base, &strategies, args).await;
    drop(base);
    let cleaned = table::clean_up(db, table, existed).await;
    let report = outcome?;
    if let Err(e) = cleaned {
        eprintln!("sqlock-bench: could not clean up table {table:?}: {e}");
    }
    output::emit(&report, args)
}

/// The strategies asked for (every one by default) that the database can hold.
fn strategies(dialect: Dialect, args: &BenchArgs) -> Result<Vec<Strategy>, Failure> {
    let asked = if args.strategies.is_empty() {
        vec![Strategy::Lease, Strategy::Insert, Strategy::ForUpdate]
    } else {
        args.strategies.clone()
    };
    let held: Vec<Strategy> = asked
        .into_iter()
        .filter(|s| dialect != Dialect::Sqlite || *s != Strategy::ForUpdate)
        .collect();
    if held.is_empty() {
        return Err(Failure::Usage(
            "SQLite has no row locks: choose the lease or insert strategy".into(),
        ));
    }
    Ok(held)
}
