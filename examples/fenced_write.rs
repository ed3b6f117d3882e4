//! A fenced write in a request handler: the handler takes the lock of the record it
//! changes, and its write commits only if the lock is still its own at commit time.
//!
//! ```text
//! cargo run --example fenced_write
//! ```
//!
//! The handler is a plain async function, as any web framework would call it: take the
//! lock of the account (waiting a bounded time), open a transaction, check the lock
//! first in it (`LockGuard::fence`), write, commit, release. Two requests for one
//! account then run one after the other and both deposits count. Then a holder is
//! paused past its lease (as a long GC pause or a stopped VM would), another request
//! takes the lock over, and the paused holder's write is refused instead of landing
//! on top of the newer one.

use std::time::Duration;

use anyhow::Context;
use sqlock::{Error, LockGuard, Locker};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::SqlitePool;

/// What the handler answers: a status code and a body.
#[derive(Debug)]
struct Response {
    status: u16,
    body: String,
}

/// `POST /accounts/{account}/deposit?amount=N`, as a framework would route it.
async fn deposit(locker: &Locker, pool: &SqlitePool, account: i64, amount: i64) -> Response {
    let key = format!("account-{account}");
    let guard = match locker.acquire_timeout(&key, Duration::from_secs(2)).await {
        Ok(guard) => guard,
        Err(Error::Timeout { .. }) => return answer(409, "the account is busy, try again"),
        Err(e) => return answer(500, &e.to_string()),
    };
    match write(&guard, pool, account, amount).await {
        Ok(balance) => {
            // Whether it was still ours tells nothing new here: the write was fenced.
            let _ = guard.release().await;
            answer(200, &format!("balance {balance}"))
        }
        Err(Error::LockLost { .. }) => answer(409, "the lock was lost; nothing was written"),
        Err(e) => answer(500, &e.to_string()),
    }
}

/// The fenced write: the lock's check comes first in the transaction, so the check and
/// the write commit together or not at all.
async fn write(
    guard: &LockGuard,
    pool: &SqlitePool,
    account: i64,
    amount: i64,
) -> Result<i64, Error> {
    let mut tx = pool.begin().await?;
    guard.fence(&mut *tx).await?;
    let balance: i64 = sqlx::query_scalar(
        "UPDATE accounts SET balance = balance + ? WHERE id = ? RETURNING balance",
    )
    .bind(amount)
    .bind(account)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(balance)
}

fn answer(status: u16, body: &str) -> Response {
    Response {
        status,
        body: body.to_owned(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::temp_dir().join("sqlock-fenced-write-example.db");
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
    sqlx::raw_sql("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL); INSERT INTO accounts VALUES (7, 0);")
        .execute(&pool)
        .await?;

    // Two servers' handlers, each with its handle (its own owner id).
    let one = Locker::builder(pool.clone()).build()?;
    let two = one.new_handle();
    let (a, b) = tokio::join!(deposit(&one, &pool, 7, 10), deposit(&two, &pool, 7, 5));
    println!("request a: {} {}", a.status, a.body);
    println!("request b: {} {}", b.status, b.body);

    // A holder paused past its lease: a short TTL, no renewal, and a sleep standing in
    // for the pause. Another handler takes the lock over meanwhile.
    let paused = one
        .lock("account-7")
        .ttl(Duration::from_millis(200))
        .auto_renew(false)
        .acquire()
        .await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let c = deposit(&two, &pool, 7, 1).await;
    println!("request c, after the takeover: {} {}", c.status, c.body);
    match write(&paused, &pool, 7, 1_000_000).await {
        Err(Error::LockLost { .. }) => println!("the paused holder's write was refused"),
        other => anyhow::bail!("the paused holder's write was not refused: {other:?}"),
    }
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 7")
        .fetch_one(&pool)
        .await?;
    println!("final balance {balance}: 10 + 5 + 1");
    Ok(())
}
