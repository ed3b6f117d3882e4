//! A contention workload with a recorded history: many owners on few keys, each
//! critical section logged with its token and its start and end on one monotonic
//! clock, and a shared counter per key that only mutual exclusion keeps exact. The
//! grants and releases also go through the fenced-mutex model of [`super::history`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlock::{DbPool, Locker, LockerBuilder, Strategy};
use tokio::time::Instant;

use super::history::{self, Event, Kind};
use super::Backend;

/// The contenders' lease TTL: far beyond any hold, so no lease here ever lapses.
const TTL: Duration = Duration::from_secs(60);

/// One critical section.
#[derive(Debug, Clone)]
pub struct Hold {
    pub key: usize,
    pub token: i64,
    pub start: Instant,
    pub end: Instant,
}

/// The shape of a run.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub strategy: Strategy,
    pub tasks_per_pool: usize,
    pub keys: usize,
    pub grants: usize,
}

/// Runs the workload: each pool (as a process of its own would have) gets
/// `tasks_per_pool` tasks, each a handle of its own, spread over the keys; they take
/// turns until `grants` critical sections were recorded. Panics on any overlap, token
/// that did not rise, or lost update; returns the history.
pub async fn run(b: &Backend, pools: Vec<DbPool>, w: Workload) -> anyhow::Result<Vec<Hold>> {
    run_with(b, pools, w, |builder| builder).await
}

/// As [`run`], with each pool's handle set up by `configure` as well (connection modes
/// such as transaction pooling).
pub async fn run_with(
    b: &Backend,
    pools: Vec<DbPool>,
    w: Workload,
    configure: impl Fn(LockerBuilder) -> LockerBuilder,
) -> anyhow::Result<Vec<Hold>> {
    let history = Arc::new(Mutex::new(Vec::<Hold>::new()));
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let granted = Arc::new(AtomicUsize::new(0));
    let counters: Arc<Vec<AtomicUsize>> =
        Arc::new((0..w.keys).map(|_| AtomicUsize::new(0)).collect());
    let owners = pools.len() * w.tasks_per_pool;
    let mut tasks = Vec::new();
    for pool in pools {
        let base = configure(Locker::builder(pool))
            .table(&b.table)
            .strategy(w.strategy)
            .ttl(TTL)
            .poll_interval(Duration::from_millis(1), Duration::from_millis(8))
            .build()?;
        for t in 0..w.tasks_per_pool {
            let locker = base.new_handle();
            let (history, granted, counters) = (history.clone(), granted.clone(), counters.clone());
            let events = events.clone();
            let key = t % w.keys;
            tasks.push(tokio::spawn(async move {
                let name = format!("hot-{key}");
                while granted.load(Ordering::Relaxed) < w.grants {
                    let sent = history::now();
                    let guard = locker.acquire(&name).await?;
                    let (owner, token) = (guard.owner().to_string(), guard.fencing_token());
                    let event = |kind, sent| Event {
                        kind,
                        key: name.clone(),
                        owner: owner.clone(),
                        token,
                        sent,
                        ack: history::now(),
                    };
                    let grant = event(Kind::Grant, sent);
                    let start = Instant::now();
                    let seen = counters[key].load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counters[key].store(seen + 1, Ordering::SeqCst);
                    let end = Instant::now();
                    let sent = history::now();
                    anyhow::ensure!(guard.release().await?, "a held lock was lost");
                    events
                        .lock()
                        .unwrap()
                        .extend([grant, event(Kind::Release, sent)]);
                    history.lock().unwrap().push(Hold {
                        key,
                        token,
                        start,
                        end,
                    });
                    granted.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    let history = history.lock().unwrap().clone();
    check(&history, w.keys);
    // No faults here: every lock, a for-update one included, ends only by its release
    // or its expiry, so the lease rule holds for all three strategies.
    let verdict = history::check_leases(&events.lock().unwrap(), TTL);
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    for key in 0..w.keys {
        let holds = history.iter().filter(|h| h.key == key).count();
        assert_eq!(
            counters[key].load(Ordering::SeqCst),
            holds,
            "key {key}: lost updates"
        );
    }
    println!(
        "{} {}: {} grants by {} owners on {} keys, no overlap, tokens rising",
        b.dialect,
        w.strategy,
        history.len(),
        owners,
        w.keys
    );
    assert!(history.len() >= w.grants);
    Ok(history)
}

/// Per key, in order of start: each hold starts after the one before it ended, with a
/// higher token.
pub fn check(history: &[Hold], keys: usize) {
    for key in 0..keys {
        let mut holds: Vec<_> = history.iter().filter(|h| h.key == key).collect();
        holds.sort_by_key(|h| h.start);
        for pair in holds.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                b.start >= a.end,
                "key {key}: holds overlap: {a:?} and {b:?}"
            );
            assert!(
                b.token > a.token,
                "key {key}: token did not rise: {a:?} then {b:?}"
            );
        }
    }
}
