//! The database clock jumping while locks are held, on the fault tests' own server
//! instances, which run under libfaketime (`scripts/fault-db.sh`).
//!
//! A forward jump past a lease's expiry ends the lease at once on the database: another
//! owner may be granted the key (with a higher token) while the first holder still
//! counts its lease as valid on its own monotonic clock. What keeps this safe is the
//! fence, which refuses the deposed holder's writes, and the renewal, which finds the
//! lease gone at the holder's next tick, so `lost()` fires then rather than at the
//! holder's own count of its TTL. A for-update lock has no expiry and does not notice.
//! Backward jumps only make leases last longer; the fault workload (`tests/faults.rs`)
//! shows them costing no safety.
#![cfg(all(feature = "postgres", feature = "mysql"))]

mod common;

use std::time::Duration;

use common::clock;
use sqlock::{DbPool, Error, LockGuard, Locker, Strategy};
use tokio::time::{timeout, Instant};

/// Long, so that nothing here can lapse by the true clock while the test runs.
const TTL: Duration = Duration::from_secs(20);
/// The holder's renewal period (and a for-update holder's keepalive).
const TICK: Duration = Duration::from_millis(500);
/// Well past the TTL, and no further: a scheduler inside the server (pg_cron) that ran
/// during the jump may wait for the true time to catch up before its next job.
const JUMP_S: i64 = 40;

/// Runs the guard's fence in a transaction of `pool`; whether the fence let it through.
async fn fence_admits(pool: &DbPool, guard: &LockGuard) -> anyhow::Result<bool> {
    macro_rules! fenced {
        ($p:expr) => {{
            let mut tx = $p.begin().await?;
            match guard.fence(&mut *tx).await {
                Ok(()) => {
                    tx.commit().await?;
                    true
                }
                Err(Error::LockLost { .. }) => false,
                Err(e) => return Err(e.into()),
            }
        }};
    }
    Ok(match pool {
        DbPool::Postgres(p) => fenced!(p),
        DbPool::MySql(p) => fenced!(p),
        _ => anyhow::bail!("a server pool"),
    })
}

/// The holder's renewal period as it runs on this machine: the longest gap between
/// consecutive renewals, over three of them.
async fn measured_period(holder: &Locker) -> anyhow::Result<Duration> {
    let mut ticks = holder.watchdog_stats().ticks;
    let mut last: Option<Instant> = None;
    let mut longest = Duration::ZERO;
    let mut gaps = 0;
    let deadline = Instant::now() + TTL / 2;
    while gaps < 3 {
        anyhow::ensure!(Instant::now() < deadline, "the holder's renewals stopped");
        tokio::time::sleep(Duration::from_millis(2)).await;
        let now = holder.watchdog_stats().ticks;
        if now != ticks {
            ticks = now;
            let at = Instant::now();
            if let Some(prev) = last {
                longest = longest.max(at - prev);
                gaps += 1;
            }
            last = Some(at);
        }
    }
    Ok(longest)
}

/// One test for both servers and every strategy, one after the other: the clock file
/// moves both servers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_jump_deposes_leases_and_the_fence_and_renewal_notice() -> anyhow::Result<()> {
    let servers = common::fault_servers("clock_jumps").await;
    let _true_time = clock::Reset;
    for b in &servers {
        for strategy in [Strategy::Lease, Strategy::Insert] {
            clock::set(0)?;
            tokio::time::sleep(clock::SEEN_WITHIN).await;
            let what = format!("{} {strategy}", b.dialect);
            let first = b.fresh_table().await?;
            let pool = first.pool().clone();
            let builder = || async move {
                anyhow::Ok(
                    b.builder()
                        .await?
                        .strategy(strategy)
                        .ttl(TTL)
                        .renew_interval(TICK)
                        .build()?,
                )
            };
            let holder = builder().await?;
            let other = builder().await?;
            let held = holder.acquire("k").await?;
            assert!(other.try_acquire("k").await?.is_none(), "{what}: busy");
            assert!(fence_admits(&pool, &held).await?, "{what}: fence before");
            let period = measured_period(&holder).await?;
            // When the lost signal fires, seen as it happens.
            let mut signal = held.lost();
            let fired = tokio::spawn(async move {
                let reason = signal.wait().await;
                (reason, Instant::now())
            });

            clock::set(JUMP_S)?;
            let jumped = Instant::now();
            tokio::time::sleep(clock::SEEN_WITHIN).await;
            // The lease lapsed with the jump: the other owner is granted it at once.
            let taken = other
                .try_acquire("k")
                .await?
                .unwrap_or_else(|| panic!("{what}: not granted after a {JUMP_S} s jump"));
            assert!(
                taken.fencing_token() > held.fencing_token(),
                "{what}: token {} after {}",
                taken.fencing_token(),
                held.fencing_token()
            );
            assert!(
                !fence_admits(&pool, &held).await?,
                "{what}: the deposed holder's fence let it write"
            );
            // The holder's next renewal finds the lease gone: the signal comes with
            // it, not at the holder's own count of its 20 s. The next renewal starts
            // within a period of the jump and answers within one (a renewal is given
            // a period), so two measured periods bound it; one in flight at the jump
            // may still have renewed. Two seconds of slack for a busy machine still
            // tell it from the holder's own count of its 20 s.
            let (reason, at) = timeout(TTL - Duration::from_secs(5), fired)
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{what}: lost() had not fired {:?} after the jump",
                        jumped.elapsed()
                    )
                })?;
            let after = at.saturating_duration_since(jumped);
            println!("{what}: lost ({reason}) {after:?} after the jump, renewal period {period:?}");
            assert!(
                after <= period * 2 + Duration::from_secs(2),
                "{what}: lost() fired {after:?} after the jump, past two renewal periods \
                 ({period:?} each, measured) and slack"
            );
            assert!(!held.release().await?, "{what}: the deposed release");
            assert!(fence_admits(&pool, &taken).await?, "{what}: the new holder");
            assert!(taken.release().await?, "{what}: the new holder's release");
        }

        // A for-update lock has no expiry: the jump changes nothing.
        clock::set(0)?;
        tokio::time::sleep(clock::SEEN_WITHIN).await;
        let what = format!("{} for-update", b.dialect);
        let row = b
            .builder()
            .await?
            .strategy(Strategy::ForUpdate)
            .keepalive(TICK)
            .build()?;
        let other = b.builder().await?.strategy(Strategy::ForUpdate).build()?;
        let held = row.acquire("u").await?;
        clock::set(JUMP_S)?;
        tokio::time::sleep(TICK * 3).await;
        assert!(other.try_acquire("u").await?.is_none(), "{what}: busy");
        assert!(!held.is_lost(), "{what}: lost after a jump");
        held.commit().await?;
        assert!(
            other.try_acquire("u").await?.is_some(),
            "{what}: free after commit"
        );
    }
    Ok(())
}
