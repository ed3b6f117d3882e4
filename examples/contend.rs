//! Several workers contend for one lock on a SQLite file, as separate processes would,
//! and print who held it with which fencing token.
//!
//! ```text
//! cargo run --example contend
//! ```
//!
//! Each worker has its own `Locker` handle, so its own owner id. The lock is a lease
//! with a short TTL; each worker holds it for a moment, releases it and tries again.

use std::time::Duration;

use anyhow::Context;
use sqlock::Locker;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

const WORKERS: usize = 4;
const ROUNDS: usize = 3;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::temp_dir().join("sqlock-contend-example.db");
    // A demo starts from a fresh file each run.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    // WAL and a busy timeout let several connections, or processes, share the file.
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

    let first = Locker::builder(pool)
        .ttl(Duration::from_secs(5))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .build()?;
    println!(
        "{WORKERS} workers contend for \"report\" in {}",
        path.display()
    );

    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let locker = first.new_handle();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker.acquire("report").await?;
                println!(
                    "worker {worker} (owner {}) holds {:?} with token {}, until {}",
                    &guard.owner().to_string()[..8],
                    guard.key(),
                    guard.fencing_token(),
                    guard.expires_at().format("%H:%M:%S%.3f UTC"),
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
                anyhow::ensure!(guard.release().await?, "lost the lock while holding it");
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    println!(
        "done: {} grants, never two holders at once",
        WORKERS * ROUNDS
    );
    Ok(())
}
