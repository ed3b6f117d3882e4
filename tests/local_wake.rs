//! A release wakes the waiters of its key in the same process at once, on every
//! backend and without notifications, whichever handle holds and whichever waits:
//! waiters that poll only once a minute are granted the key long before their next
//! poll. Each waiter is seen waiting before the release (a busy answer counted, a place
//! in the queue), so that a grant at its first attempt proves nothing here.
#![cfg(all(
    feature = "metrics",
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite"
))]

mod common;

use std::time::Duration;

use sqlock::{Locker, Strategy};

use common::recorded::counter;

/// The waiters' polls: after a busy answer a waiter looks again 30 s to 60 s later.
const QUIET_POLL: Duration = Duration::from_secs(60);

/// How long a waiter waits for the key: shorter than its first pause, so that only a
/// wake-up can have it granted in time.
const WITHIN: Duration = Duration::from_secs(20);

/// A handle of its own on `b` (not made from another: the wake-up reaches across
/// handle families) that polls every [`QUIET_POLL`].
async fn quiet(b: &common::Backend, strategy: Strategy) -> anyhow::Result<Locker> {
    Ok(b.builder()
        .await?
        .strategy(strategy)
        .ttl(QUIET_POLL * 5)
        .poll_interval(QUIET_POLL, QUIET_POLL)
        .build()?)
}

/// Busy answers counted on `table` for `strategy`.
fn busy(strategy: &str, table: &str) -> u64 {
    counter(&format!(
        "sqlock_busy_total{{strategy={strategy},table={table}}}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_lock_waiter_of_this_process() -> anyhow::Result<()> {
    common::on_each(common::backends("local_wake_lock").await, |b| async move {
        b.fresh_table().await?;
        for (strategy, label) in [(Strategy::Lease, "lease"), (Strategy::Insert, "insert")] {
            let key = format!("wake-{label}");
            let holder = quiet(&b, strategy).await?;
            let waiter = quiet(&b, strategy).await?;
            let guard = holder.acquire(&key).await?;
            let before = busy(label, &b.table);
            let waiting = tokio::spawn({
                let key = key.clone();
                async move { waiter.acquire_timeout(&key, WITHIN).await }
            });
            let seen = common::eventually(|| async { Ok(busy(label, &b.table) > before) }).await?;
            anyhow::ensure!(
                seen,
                "{} {label}: the waiter never found the key busy",
                b.dialect
            );
            let held = guard.fencing_token();
            assert!(guard.release().await?);
            let next = waiting.await?;
            let next = next.map_err(|e| {
                anyhow::anyhow!("{} {label}: not woken by the release: {e}", b.dialect)
            })?;
            assert!(next.fencing_token() > held, "{} {label}", b.dialect);
            assert!(next.release().await?);
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_wakes_the_waiter_it_hands_the_lock_to() -> anyhow::Result<()> {
    common::on_each(common::backends("local_wake_fair").await, |b| async move {
        let base = b.fresh_table().await?;
        let holder = quiet(&b, Strategy::Fair).await?;
        let waiter = quiet(&b, Strategy::Fair).await?;
        let guard = holder.acquire("wake-fair").await?;
        let waiting =
            tokio::spawn(async move { waiter.acquire_timeout("wake-fair", WITHIN).await });
        common::fair::until(|| async {
            Ok(common::fair::queued(&b, &base, "wake-fair").await? == 1)
        })
        .await?;
        let held = guard.fencing_token();
        assert!(guard.release().await?);
        let next = waiting.await?;
        let next =
            next.map_err(|e| anyhow::anyhow!("{}: not woken by the handoff: {e}", b.dialect))?;
        assert!(next.fencing_token() > held, "{}", b.dialect);
        assert!(next.release().await?);
        Ok(())
    })
    .await
}

/// An operator's `force_release_now` in this process wakes the key's waiters here as a
/// holder's release does: the waiter, polling once a minute and seen busy first, is
/// granted long before its next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_now_wakes_a_waiter_of_this_process() -> anyhow::Result<()> {
    common::on_each(common::backends("local_wake_force").await, |b| async move {
        b.fresh_table().await?;
        let key = "wake-force";
        let holder = quiet(&b, Strategy::Lease).await?;
        let waiter = quiet(&b, Strategy::Lease).await?;
        let operator = quiet(&b, Strategy::Lease).await?;
        let guard = holder.acquire(key).await?;
        let before = busy("lease", &b.table);
        let waiting = tokio::spawn(async move { waiter.acquire_timeout(key, WITHIN).await });
        let seen = common::eventually(|| async { Ok(busy("lease", &b.table) > before) }).await?;
        anyhow::ensure!(seen, "{}: the waiter never found the key busy", b.dialect);
        let held = guard.fencing_token();
        assert!(operator.force_release_now(key).await?, "{}", b.dialect);
        let next = waiting
            .await?
            .map_err(|e| anyhow::anyhow!("{}: not woken by the forced release: {e}", b.dialect))?;
        assert!(next.fencing_token() > held, "{}", b.dialect);
        assert!(next.release().await?);
        drop(guard);
        Ok(())
    })
    .await
}
