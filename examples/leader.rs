//! Leader election among replicas: one leads at a time, in a term that only grows, and
//! another takes over when it resigns.
//!
//! ```text
//! cargo run --example leader
//! ```
//!
//! Each replica (here a task; in production a process) campaigns in the election
//! "outbox-relay" with an identity of its own. The leader relays for a moment and then
//! resigns, as a replica that shuts down would, and the next candidate leads in a
//! higher term. The term is the lease's fencing token: pass it to what the leader
//! writes, or fence the writes with `LeaderTerm::fence`, so that a deposed leader's
//! late writes are refused.

use std::time::Duration;

use anyhow::Context;
use sqlock::Locker;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

const REPLICAS: usize = 3;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::temp_dir().join("sqlock-leader-example.db");
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
    let locker = Locker::builder(pool)
        .ttl(Duration::from_secs(10))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .build()?;

    let mut replicas = Vec::new();
    for i in 0..REPLICAS {
        let election = locker.election("outbox-relay").id(format!("relay-{i}"));
        replicas.push(tokio::spawn(async move {
            let leadership = election.campaign().await?;
            println!(
                "{} leads in term {}",
                leadership.identity(),
                leadership.term()
            );
            // ... relay the outbox, fenced with leadership.term() ...
            tokio::time::sleep(Duration::from_millis(100)).await;
            // Resigning lets the next candidate in at once, not after the TTL.
            anyhow::ensure!(leadership.resign().await?, "lost the leadership meanwhile");
            anyhow::Ok(())
        }));
    }
    let follower = locker.election("outbox-relay");
    tokio::time::sleep(Duration::from_millis(50)).await;
    if let Some(leader) = follower.leader().await? {
        println!(
            "a follower sees {} leading in term {}",
            leader.identity, leader.term
        );
    }
    for replica in replicas {
        replica.await??;
    }
    Ok(())
}
