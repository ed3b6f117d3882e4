//! The lost signal never fires later than the moment another owner could be granted
//! the key: not after an explicit extension to a longer TTL, and not after a re-entry
//! with a longer TTL, when the holder's renewals then start failing.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{timeout, Instant};

/// How the holder comes to hold the key for longer than its first TTL.
#[derive(Debug, Clone, Copy)]
enum Longer {
    /// `extend(30s)` on a lease taken with a TTL of one second.
    Extend,
    /// A second hold of the same handle, with a TTL of 30 seconds.
    Reentry,
}

const SHORT: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(8);
/// A liveness bound: the fixed library grants the key after about `LONG`.
const GUARD: Duration = Duration::from_secs(60);
/// Slack between the lost signal and the grant, on top of the lateness of the
/// runtime's own timers measured while the test waits (`Lateness`): the signal can be
/// no more punctual than the scheduler that runs the watchdog.
const SLACK: Duration = Duration::from_millis(200);

/// How late, at most, a timer of this runtime fired while it was watched: tickers on
/// the local set (where the lost signal is awaited) and on the worker threads (where
/// the watchdog runs) each sleep 5 ms at a time and note by how much they overslept.
#[derive(Clone, Default)]
struct Lateness(Arc<AtomicU64>);

impl Lateness {
    fn watch(&self, stop: &Arc<AtomicBool>) {
        let tick = |late: Lateness, stop: Arc<AtomicBool>| async move {
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let over = asked.elapsed().saturating_sub(Duration::from_millis(5));
                late.0.fetch_max(
                    u64::try_from(over.as_micros()).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
            }
        };
        tokio::task::spawn_local(tick(self.clone(), stop.clone()));
        tokio::spawn(tick(self.clone(), stop.clone()));
    }

    fn max(&self) -> Duration {
        Duration::from_micros(self.0.load(Ordering::Relaxed))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_by_the_next_grant_after_an_extension() -> anyhow::Result<()> {
    on_every_backend("lx_extend", Longer::Extend).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_by_the_next_grant_after_a_longer_reentry() -> anyhow::Result<()> {
    on_every_backend("lx_reentry", Longer::Reentry).await
}

/// Runs the scenario on every backend at once (each waits out about `LONG` when the
/// library is right), and fails with every backend's problem.
async fn on_every_backend(name: &str, how: Longer) -> anyhow::Result<()> {
    // Local tasks: the scenario awaits a `LostSignal`, whose future need not be `Send`
    // for this test to say what it checks.
    let local = tokio::task::LocalSet::new();
    let problems = local
        .run_until(async {
            let mut runs = Vec::new();
            for b in common::backends(name).await {
                let dialect = b.dialect;
                runs.push((dialect, tokio::task::spawn_local(scenario(b, how))));
            }
            let mut problems = Vec::new();
            for (dialect, run) in runs {
                if let Some(p) = run.await?? {
                    problems.push(format!("{dialect} ({how:?}): {p}"));
                }
            }
            anyhow::Ok(problems)
        })
        .await?;
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    Ok(())
}

/// Holds the key for `LONG` with a lease of TTL `SHORT`, lets renewals run, then cuts
/// the holder off its database; another handle waits for the key. The lost signal must
/// have fired by the time the other handle is granted the key.
async fn scenario(b: common::Backend, how: Longer) -> anyhow::Result<Option<String>> {
    b.fresh_table().await?;
    let h1 = b.locker().await?;
    let h2 = b.locker().await?;
    let key = "k";
    let mut first = h1.lock(key).ttl(SHORT).acquire().await?;
    let mut guards = Vec::new();
    match how {
        Longer::Extend => assert!(first.extend(LONG).await?, "{}: extend", b.dialect),
        Longer::Reentry => {
            let second = h1.lock(key).ttl(LONG).acquire().await?;
            assert_eq!(second.hold_count(), 2, "{}: a re-entry", b.dialect);
            guards.push(second);
        }
    }
    let mut lost = first.lost();
    guards.push(first);
    // Only lets a renewal or two happen; nothing below rests on how many did.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(
        guards.iter().all(|g| !g.is_lost()),
        "{}: lost while renewals worked",
        b.dialect
    );
    // Renewals fail from now on.
    let (lateness, stop) = (Lateness::default(), Arc::new(AtomicBool::new(false)));
    lateness.watch(&stop);
    h1.pool().close().await;
    let closed = Instant::now();
    let (granted, fired) = tokio::join!(
        async {
            let g = timeout(GUARD, h2.acquire(key)).await;
            (g, Instant::now())
        },
        async {
            let reason = timeout(GUARD, lost.wait()).await;
            (reason, Instant::now())
        },
    );
    stop.store(true, Ordering::Relaxed);
    let (grant, granted_at) = granted;
    let (reason, fired_at) = fired;
    let grant = match grant {
        Ok(g) => g?,
        Err(_) => {
            return Ok(Some(format!(
                "the other handle was not granted the key within {GUARD:?}"
            )))
        }
    };
    assert!(grant.release().await?);
    drop(guards); // their pool is closed: nothing is sent
    if reason.is_err() {
        return Ok(Some(format!(
            "the lost signal did not fire within {GUARD:?}, though another owner was \
             granted the key {:?} after the holder's pool closed",
            granted_at - closed
        )));
    }
    let late = lateness.max();
    if fired_at > granted_at + SLACK + late {
        return Ok(Some(format!(
            "the lost signal fired {:?} after another owner was granted the key (granted \
             {:?} after the holder's pool closed, lost {:?} after; the runtime's timers \
             were up to {late:?} late meanwhile)",
            fired_at - granted_at,
            granted_at - closed,
            fired_at - closed
        )));
    }
    Ok(None)
}
