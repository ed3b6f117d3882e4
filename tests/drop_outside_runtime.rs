//! No Drop panics: a guard dropped on a thread without a tokio runtime, or after the
//! runtime it was acquired on was shut down, drops quietly, and its lock ends all the
//! same (a for-update lock's transaction is rolled back; a lease is released or lapses
//! at its short TTL), so another handle takes the key.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use sqlock::{LockGuard, Locker, Strategy};
use tokio::runtime::Runtime;

/// A liveness bound only.
const GUARD: Duration = Duration::from_secs(10);

/// The lease TTL: a lease dropped without a runtime may lapse rather than be released,
/// and then is free well within `GUARD`.
const TTL: Duration = Duration::from_secs(2);

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".to_owned())
}

/// Drops the guard on a plain thread, outside any runtime: the panic's message if it
/// panicked.
fn drop_on_a_plain_thread(guard: LockGuard) -> Result<(), String> {
    std::thread::spawn(move || drop(guard))
        .join()
        .map_err(|p| panic_message(&*p))
}

/// Drops the guard here (a thread whose runtime is gone): the panic's message if it
/// panicked.
fn drop_here(guard: LockGuard) -> Result<(), String> {
    std::panic::catch_unwind(AssertUnwindSafe(move || drop(guard))).map_err(|p| panic_message(&*p))
}

/// The strategies to try on a backend, with the key each uses.
fn cases(b: &common::Backend, strategies: &[Strategy]) -> Vec<(Strategy, String)> {
    strategies
        .iter()
        .filter(|&&s| s != Strategy::ForUpdate || b.dialect != sqlock::Dialect::Sqlite)
        .map(|&s| (s, format!("{s}-key")))
        .collect()
}

async fn acquire(
    b: &common::Backend,
    strategy: Strategy,
    key: &str,
) -> anyhow::Result<(Locker, LockGuard)> {
    let holder = b.builder().await?.strategy(strategy).ttl(TTL).build()?;
    let g = holder.try_acquire(key).await?.expect("the key is free");
    Ok((holder, g))
}

/// Whether another handle takes the key within `GUARD`.
async fn taken_by_another(
    b: &common::Backend,
    strategy: Strategy,
    key: &str,
) -> anyhow::Result<bool> {
    let other = b.builder().await?.strategy(strategy).build()?;
    Ok(
        match tokio::time::timeout(GUARD, other.acquire(key)).await {
            Ok(g) => {
                assert!(g?.release().await?);
                true
            }
            Err(_) => false,
        },
    )
}

/// Acquires on a runtime, drops the guard on a thread without one, then checks on the
/// runtime that the key is free for another handle.
fn dropped_on_a_plain_thread(name: &str, strategies: &[Strategy]) -> anyhow::Result<()> {
    let rt = runtime();
    let mut problems = Vec::new();
    for b in rt.block_on(common::backends(name)) {
        rt.block_on(b.fresh_table())?;
        for (strategy, key) in cases(&b, strategies) {
            let what = format!("{} {strategy}", b.dialect);
            let (holder, guard) = rt.block_on(acquire(&b, strategy, &key))?;
            if let Err(msg) = drop_on_a_plain_thread(guard) {
                problems.push(format!(
                    "{what}: dropping the guard on a thread without a runtime panicked: {msg}"
                ));
            }
            if !rt.block_on(taken_by_another(&b, strategy, &key))? {
                problems.push(format!(
                    "{what}: another handle could not take the key within {GUARD:?} after \
                     the guard was dropped"
                ));
            }
            rt.block_on(async move { drop(holder) });
        }
    }
    drop(rt);
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// Acquires on a runtime, shuts the runtime down, drops the guard on this thread, then
/// checks on a new runtime that the key is free for another handle.
fn dropped_after_the_runtime_shut_down(name: &str, strategies: &[Strategy]) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    let backends = runtime().block_on(common::backends(name));
    for b in backends {
        runtime().block_on(b.fresh_table())?;
        for (strategy, key) in cases(&b, strategies) {
            let what = format!("{} {strategy}", b.dialect);
            let rt = runtime();
            let (holder, guard) = rt.block_on(acquire(&b, strategy, &key))?;
            drop(rt);
            if let Err(msg) = drop_here(guard) {
                problems.push(format!(
                    "{what}: dropping the guard after its runtime shut down panicked: {msg}"
                ));
            }
            if let Err(msg) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(holder))) {
                problems.push(format!(
                    "{what}: dropping the handle after its runtime shut down panicked: {}",
                    panic_message(&*msg)
                ));
            }
            if !runtime().block_on(taken_by_another(&b, strategy, &key))? {
                problems.push(format!(
                    "{what}: another handle could not take the key within {GUARD:?} after \
                     the guard was dropped"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

#[test]
fn for_update_guard_dropped_on_a_thread_without_a_runtime() -> anyhow::Result<()> {
    dropped_on_a_plain_thread("dor_fu_thread", &[Strategy::ForUpdate])
}

#[test]
fn lease_and_insert_guards_dropped_on_a_thread_without_a_runtime() -> anyhow::Result<()> {
    dropped_on_a_plain_thread("dor_lease_thread", &[Strategy::Lease, Strategy::Insert])
}

#[test]
fn for_update_guard_dropped_after_its_runtime_shut_down() -> anyhow::Result<()> {
    dropped_after_the_runtime_shut_down("dor_fu_shutdown", &[Strategy::ForUpdate])
}

#[test]
fn lease_and_insert_guards_dropped_after_their_runtime_shut_down() -> anyhow::Result<()> {
    dropped_after_the_runtime_shut_down("dor_lease_shutdown", &[Strategy::Lease, Strategy::Insert])
}
