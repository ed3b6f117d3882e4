//! Support for the fair strategy's tests: the handles a test runs with, the queue as
//! the table shows it, and a bounded wait.

use std::time::Duration;

use sqlock::{Dialect, Locker, Strategy};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Backend;

/// How long [`until`] waits for its condition before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The fair handles a test runs with on `b`, with `ttl`: on PostgreSQL, without and
/// with notifications (the bool says which).
pub async fn lockers(b: &Backend, ttl: Duration) -> anyhow::Result<Vec<(bool, Locker)>> {
    let mut out = Vec::new();
    for notify in [false, true] {
        if notify && b.dialect != Dialect::Postgres {
            continue;
        }
        let locker = b
            .builder()
            .await?
            .strategy(Strategy::Fair)
            .notify_waiters(notify)
            .ttl(ttl)
            .build()?;
        out.push((notify, locker));
    }
    Ok(out)
}

/// A fair handle on `b` with `ttl`, polling as the defaults say.
pub async fn locker(b: &Backend, ttl: Duration) -> anyhow::Result<Locker> {
    Ok(b.builder()
        .await?
        .strategy(Strategy::Fair)
        .ttl(ttl)
        .build()?)
}

/// The places in `key`'s queue, live or not.
pub async fn queued(b: &Backend, locker: &Locker, key: &str) -> anyhow::Result<i64> {
    let q = match b.dialect {
        Dialect::MySql => format!("`{}_queue`", b.table),
        _ => format!("\"{}_queue\"", b.table),
    };
    b.scalar(
        locker.pool(),
        &format!("SELECT COUNT(*) FROM {q} WHERE lock_key = '{key}'"),
    )
    .await
}

/// Waits until `check` holds, for [`PATIENCE`] at most.
pub async fn until<F, Fut>(mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + PATIENCE;
    while !check().await? {
        anyhow::ensure!(Instant::now() < deadline, "the condition never held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A waiter's turn, in a task of its own: `locker` waits for `key`, gives it back at
/// once (it must still have been its own) and answers the fencing token it was granted.
pub fn take_turn(locker: Locker, key: impl Into<String>) -> JoinHandle<anyhow::Result<i64>> {
    let key = key.into();
    tokio::spawn(async move {
        let g = locker.acquire(&key).await?;
        let token = g.fencing_token();
        anyhow::ensure!(g.release().await?, "{key}: lost while held");
        Ok(token)
    })
}
