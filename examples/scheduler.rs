//! A job scheduled in-process on several replicas, run once per period: the at-least
//! hold (`LockRequest::at_least`, ShedLock's `lockAtLeastFor`).
//!
//! ```text
//! cargo run --example scheduler
//! ```
//!
//! Each replica (here a task with a `Locker` handle of its own, as a process of its own
//! would have) has a timer that fires every period, a little apart from the others'.
//! At each tick every replica tries the job's lock; the first gets it and runs the job.
//! The job takes a moment, far less than the period, so without more the replicas
//! whose timers fire a little later would find the key free again and run the job a
//! second time. The at-least hold keeps the lock for most of the period after it was
//! taken, even though the job released it, so the later replicas find it busy.
//!
//! Choose the hold shorter than the period (by more than the replicas' timers drift
//! apart), so the next period's first tick finds the key free, and longer than the
//! spread of the replicas' ticks within a period. Copy this onto a file or server
//! database shared by the replicas: PostgreSQL or MariaDB, or a SQLite file on one host.

use std::time::Duration;

use anyhow::Context;
use sqlock::Locker;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

/// How often the job runs.
const PERIOD: Duration = Duration::from_secs(1);
/// How long each run keeps the lock after it was taken: most of the period.
const AT_LEAST: Duration = Duration::from_millis(800);
/// How far apart the replicas' timers fire within a period.
const OFFSETS_MS: [u64; 3] = [0, 40, 120];
/// How many periods the demo runs for.
const PERIODS: u32 = 5;

/// The job: it must run once per period across all replicas.
async fn send_report(replica: usize, token: i64) {
    println!("replica {replica} sends the report (fencing token {token})");
    tokio::time::sleep(Duration::from_millis(30)).await;
}

/// One replica's scheduler: at each tick, the job if the lock is free.
async fn replica(replica: usize, locker: Locker, offset: Duration) -> anyhow::Result<u32> {
    let start = tokio::time::Instant::now() + offset;
    let mut ticks = tokio::time::interval_at(start, PERIOD);
    let mut ran = 0;
    for _ in 0..PERIODS {
        ticks.tick().await;
        let request = locker.lock("daily-report").at_least(AT_LEAST);
        match request.try_acquire().await? {
            Some(guard) => {
                send_report(replica, guard.fencing_token()).await;
                ran += 1;
                // Released at once, but kept for the rest of AT_LEAST: a replica whose
                // timer fires later in this period finds it busy.
                anyhow::ensure!(guard.release().await?, "the lock was lost during the job");
            }
            None => println!("replica {replica}: already run this period"),
        }
    }
    Ok(ran)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::temp_dir().join("sqlock-scheduler-example.db");
    // A demo starts from a fresh file each run.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(5));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .with_context(|| format!("opening {}", path.display()))?;
    sqlock::migrate(&pool).await?;
    let first = Locker::builder(pool).ttl(Duration::from_secs(10)).build()?;

    let mut replicas = Vec::new();
    for (i, offset) in OFFSETS_MS.into_iter().enumerate() {
        let locker = first.new_handle();
        replicas.push(tokio::spawn(replica(
            i,
            locker,
            Duration::from_millis(offset),
        )));
    }
    let mut runs = 0;
    for r in replicas {
        runs += r.await??;
    }
    println!(
        "{runs} runs in {PERIODS} periods on {} replicas",
        OFFSETS_MS.len()
    );
    Ok(())
}
