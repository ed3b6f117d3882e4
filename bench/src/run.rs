//! One run: the parts asked for, in order, into one report with the conditions they
//! ran under (the server, the machine's CPUs and load).

use sqlock::{DbPool, Locker, Strategy, TableName};

use crate::args::BenchArgs;
use crate::db::server_version;
use crate::failure::{db_failure, Failure};
use crate::figures::Report;
use crate::parts::{contended, peers, rwlock, scale, semaphore, uncontended, watchdog};
use crate::progress::Progress;

/// Runs the parts `args` asks for in `table`, with `base` a handle on it; `url` is
/// where `db` connects, for the peers part's own pools and holder processes.
pub(crate) async fn run_all(
    db: &DbPool,
    url: &str,
    table: &TableName,
    base: &Locker,
    strategies: &[Strategy],
    args: &BenchArgs,
) -> Result<Report, Failure> {
    let progress = Progress::start();
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
        semaphore: Vec::new(),
        scale: None,
        peers: None,
        rwlock: Vec::new(),
    };
    progress.note(&format!(
        "{dialect} {} in table {table}, {} CPUs, load {}",
        report.server,
        report.cpus,
        report.load_before.as_deref().unwrap_or("unknown")
    ));
    if args.part("uncontended") {
        (report.uncontended, report.round_trips) =
            uncontended::measure(db, table, strategies, args, &progress).await?;
    }
    if args.part("contended") {
        (report.contended, report.notify) =
            contended::contended(db, table, strategies, args, &progress).await?;
    }
    if args.part("watchdog") && args.leases > 0 {
        report.watchdog = Some(watchdog::watchdog(base, args.leases, &progress).await?);
    }
    if args.part("semaphore") {
        report.semaphore = semaphore::semaphore(base, args, &progress).await?;
    }
    if let (true, Some(rows)) = (args.part("scale"), args.scale_rows) {
        report.scale = Some(scale::scale(db, table, rows, args, &progress).await?);
    }
    if args.part("rwlock") {
        report.rwlock = rwlock::rwlock(db, table, args, &progress).await?;
    }
    if args.part("peers") {
        report.peers = Some(peers::peers(db, url, table, args, &progress).await?);
    }
    report.load_after = loadavg();
    report.secs = progress.secs();
    progress.note("done");
    Ok(report)
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
