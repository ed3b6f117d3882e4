//! The at-least hold (`LockRequest::at_least`), on every backend: a lock released (or
//! dropped) before the hold ends stays taken, by no hold, until that long after it was
//! taken on the database clock, for every owner, its own included, and then frees
//! itself; released after the hold, it frees at once; and two schedulers on two
//! handles, ticking far faster than the period, run a job once per period.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sqlock::{Dialect, Error, LockInfo, Locker, Strategy};

const STRATEGIES: [Strategy; 2] = [Strategy::Lease, Strategy::Insert];

/// A deadline for conditions that take a moment, generous for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// The database's clock, as a lookup of a held key reports it.
fn db_now(info: &LockInfo) -> DateTime<Utc> {
    info.expires_at - TimeDelta::from_std(info.expires_in).expect("in range")
}

/// The lock on `key` as the table shows it, once `ready` says it is as awaited.
async fn lock_info_when(
    locker: &Locker,
    key: &str,
    ready: impl Fn(&LockInfo) -> bool,
) -> anyhow::Result<LockInfo> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(info) = locker.lock_info(key).await? {
            if ready(&info) {
                return Ok(info);
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{key} never became as awaited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_early_release_keeps_the_lock_until_the_hold_ends() -> anyhow::Result<()> {
    for b in common::backends("at_least_kept").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        for strategy in STRATEGIES {
            let d = format!("{} {strategy}", b.dialect);
            let key = format!("kept-{strategy}");
            let hold = Duration::from_secs(600);
            let guard = a
                .lock(&key)
                .strategy(strategy)
                .ttl(Duration::from_secs(30))
                .at_least(hold)
                .try_acquire()
                .await?
                .expect("a free key is granted");
            let token = guard.fencing_token();
            let taken = a.lock_info(&key).await?.expect("held").acquired_at;
            assert!(guard.release().await?, "{d}: the release found it ours");

            let kept = a.lock_info(&key).await?.expect("kept by the at-least hold");
            assert_eq!(kept.owner, a.owner().to_string(), "{d}");
            assert_eq!(kept.fencing_token, token, "{d}");
            assert_eq!(kept.hold_count, 0, "{d}: kept by no hold");
            assert_eq!(kept.acquired_at, taken, "{d}");
            assert_eq!(
                kept.expires_at,
                taken + TimeDelta::from_std(hold)?,
                "{d}: it expires when the hold ends, past its TTL, on the database clock"
            );
            // Busy for every owner, its own included: a hold that ended is not
            // re-entered.
            assert!(other.try_acquire(&key).await?.is_none(), "{d}");
            assert!(
                a.lock(&key)
                    .strategy(strategy)
                    .try_acquire()
                    .await?
                    .is_none(),
                "{d}: the owner re-entered a released lock"
            );
            assert!(
                a.lock_info(&key).await?.is_some_and(|i| i.hold_count == 0),
                "{d}: a refused re-entry left the row as it was"
            );

            // When the hold ends (its expiry moved into the past rather than waited
            // for), the key is free: a new grant, with a higher token.
            b.expire(a.pool(), &key).await?;
            let next = other
                .lock(&key)
                .strategy(strategy)
                .try_acquire()
                .await?
                .expect("free once the hold ended");
            assert!(next.fencing_token() > token, "{d}");
            assert!(next.release().await?, "{d}");
            assert!(a.lock_info(&key).await?.is_none(), "{d}: freed at once");
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_release_after_the_hold_frees_at_once() -> anyhow::Result<()> {
    for b in common::backends("at_least_over").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        for strategy in STRATEGIES {
            let d = format!("{} {strategy}", b.dialect);
            let key = format!("over-{strategy}");
            let hold = Duration::from_millis(50);
            let guard = a
                .lock(&key)
                .strategy(strategy)
                .at_least(hold)
                .try_acquire()
                .await?
                .expect("a free key is granted");
            // Waited for on the database clock: the hold is over.
            let end =
                a.lock_info(&key).await?.expect("held").acquired_at + TimeDelta::from_std(hold)?;
            lock_info_when(&a, &key, |i| db_now(i) >= end).await?;
            assert!(guard.release().await?, "{d}");
            assert!(a.lock_info(&key).await?.is_none(), "{d}: freed at once");
            if strategy == Strategy::Insert {
                let rows = b
                    .scalar(
                        a.pool(),
                        &format!(
                            "SELECT COUNT(*) FROM {} WHERE lock_key = '{key}'",
                            b.quoted()
                        ),
                    )
                    .await?;
                assert_eq!(rows, 0, "{d}: an insert lock's row is deleted");
            }
            let next = other.try_acquire(&key).await?.expect("free");
            assert!(next.release().await?, "{d}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_dropped_guard_keeps_the_hold_too() -> anyhow::Result<()> {
    for b in common::backends("at_least_drop").await {
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        for strategy in STRATEGIES {
            let d = format!("{} {strategy}", b.dialect);
            let key = format!("dropped-{strategy}");
            let hold = Duration::from_secs(600);
            let guard = a
                .lock(&key)
                .strategy(strategy)
                .at_least(hold)
                .try_acquire()
                .await?
                .expect("a free key is granted");
            let taken = a.lock_info(&key).await?.expect("held").acquired_at;
            drop(guard);
            // The release runs in the background: done once no hold is left.
            let kept = lock_info_when(&a, &key, |i| i.hold_count == 0).await?;
            assert_eq!(kept.expires_at, taken + TimeDelta::from_std(hold)?, "{d}");
            assert!(other.try_acquire(&key).await?.is_none(), "{d}");
            b.expire(a.pool(), &key).await?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_last_release_keeps_the_longest_hold_of_a_reentered_key() -> anyhow::Result<()> {
    for b in common::backends("at_least_reentry").await {
        let a = b.fresh_table().await?;
        let d = b.dialect;
        let key = "reentered";
        let hold = Duration::from_secs(600);
        let first = a
            .lock(key)
            .at_least(hold)
            .try_acquire()
            .await?
            .expect("free");
        let second = a.try_acquire(key).await?.expect("a re-entry");
        assert_eq!(second.hold_count(), 2, "{d}");
        let taken = a.lock_info(key).await?.expect("held").acquired_at;
        // The hold that asked for the at-least hold goes first: the other still holds.
        assert!(first.release().await?, "{d}");
        let held = a.lock_info(key).await?.expect("held");
        assert_eq!(held.hold_count, 1, "{d}");
        // The last release keeps the key for the hold the first one asked for.
        assert!(second.release().await?, "{d}");
        let kept = a.lock_info(key).await?.expect("kept");
        assert_eq!(kept.hold_count, 0, "{d}");
        assert_eq!(kept.expires_at, taken + TimeDelta::from_std(hold)?, "{d}");
    }
    Ok(())
}

#[tokio::test]
async fn bad_holds_are_refused_before_any_sql() -> anyhow::Result<()> {
    for b in common::backends("at_least_bad").await {
        let a = b.fresh_table().await?;
        let d = b.dialect;
        let too_long = a
            .lock("k")
            .at_least(sqlock::MAX_TTL + Duration::from_secs(1))
            .try_acquire()
            .await;
        assert!(
            matches!(too_long, Err(Error::TtlTooLong { .. })),
            "{d}: {too_long:?}"
        );
        if b.dialect != Dialect::Sqlite {
            let for_update = a
                .lock("k")
                .strategy(Strategy::ForUpdate)
                .at_least(Duration::from_secs(1))
                .try_acquire()
                .await;
            assert!(
                matches!(for_update, Err(Error::AtLeastUnsupported { .. })),
                "{d}: {for_update:?}"
            );
        }
        // A fair lock goes to its next waiter at its release: no hold to keep.
        let fair = a
            .lock("k")
            .strategy(Strategy::Fair)
            .at_least(Duration::from_secs(1))
            .try_acquire()
            .await;
        assert!(
            matches!(fair, Err(Error::AtLeastUnsupported { .. })),
            "{d}: {fair:?}"
        );
        assert!(a.lock_info("k").await?.is_none(), "{d}: nothing was taken");
    }
    Ok(())
}

/// One run of the job: its grant's token, and when the lease was taken on the
/// database clock.
type Run = (i64, DateTime<Utc>);

/// A replica's in-process scheduler: every `tick` it tries the job's lock with an
/// at-least hold of `period`, and runs the job when it gets it. The job is quick: it
/// records the run, then releases, and notes whether the hold kept the key after the
/// release. Stops once `runs` has `want` runs.
async fn scheduler(
    locker: Locker,
    key: &'static str,
    period: Duration,
    tick: Duration,
    runs: Arc<Mutex<Vec<Run>>>,
    want: usize,
) -> anyhow::Result<usize> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut kept = 0;
    while runs.lock().unwrap().len() < want {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "too few runs");
        if let Some(guard) = locker.lock(key).at_least(period).try_acquire().await? {
            let info = locker
                .lock_info(key)
                .await?
                .expect("held while the job runs");
            assert_eq!(info.fencing_token, guard.fencing_token());
            runs.lock()
                .unwrap()
                .push((guard.fencing_token(), info.acquired_at));
            assert!(guard.release().await?);
            // The job is done; the key stays taken until the period is over, unless
            // this replica was too slow to get here within it.
            if locker
                .lock_info(key)
                .await?
                .is_some_and(|i| i.hold_count == 0 && i.owner == locker.owner().to_string())
            {
                kept += 1;
            }
        }
        tokio::time::sleep(tick).await;
    }
    Ok(kept)
}

#[tokio::test]
async fn two_schedulers_on_two_handles_run_a_job_once_per_period() -> anyhow::Result<()> {
    for b in common::backends("at_least_schedulers").await {
        let d = b.dialect;
        let a = b.fresh_table().await?;
        let other = b.locker().await?;
        let period = Duration::from_millis(700);
        // Ticks far faster than the period: without the hold, a job that ends at once
        // would run again within a tick or two.
        let tick = Duration::from_millis(10);
        let want = 3;
        let runs = Arc::new(Mutex::new(Vec::new()));
        let one = tokio::spawn(scheduler(a, "report", period, tick, runs.clone(), want));
        let two = tokio::spawn(scheduler(other, "report", period, tick, runs.clone(), want));
        let kept = one.await?? + two.await??;
        let runs = runs.lock().unwrap().clone();
        assert!(runs.len() >= want, "{d}: {runs:?}");
        // The hold did keep the key after a job had finished: the test would pass
        // without it otherwise.
        assert!(kept >= 1, "{d}: no run found its key kept after the job");
        for pair in runs.windows(2) {
            let ((t1, at1), (t2, at2)) = (pair[0], pair[1]);
            assert!(t2 > t1, "{d}: {runs:?}");
            assert!(
                at2 - at1 >= TimeDelta::from_std(period)?,
                "{d}: the job ran twice within one period (database clock): {runs:?}"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn releases_that_wake_waiters_keep_the_hold_too() -> anyhow::Result<()> {
    // PostgreSQL's releases that announce a freed key (notify_waiters) are statements
    // of their own.
    for b in common::backends_of("at_least_notify", &[Dialect::Postgres]).await {
        b.fresh_table().await?;
        let a = b.builder().await?.notify_waiters(true).build()?;
        for strategy in STRATEGIES {
            let kept = format!("notify-kept-{strategy}");
            let guard = a
                .lock(&kept)
                .strategy(strategy)
                .at_least(Duration::from_secs(600))
                .try_acquire()
                .await?
                .expect("free");
            assert!(guard.release().await?, "{strategy}");
            let info = a
                .lock_info(&kept)
                .await?
                .expect("kept by the at-least hold");
            assert_eq!(info.hold_count, 0, "{strategy}");
            b.expire(a.pool(), &kept).await?;

            let over = format!("notify-over-{strategy}");
            let hold = Duration::from_millis(50);
            let guard = a
                .lock(&over)
                .strategy(strategy)
                .at_least(hold)
                .try_acquire()
                .await?
                .expect("free");
            let end =
                a.lock_info(&over).await?.expect("held").acquired_at + TimeDelta::from_std(hold)?;
            lock_info_when(&a, &over, |i| db_now(i) >= end).await?;
            assert!(guard.release().await?, "{strategy}");
            assert!(
                a.lock_info(&over).await?.is_none(),
                "{strategy}: freed at once"
            );
        }
    }
    Ok(())
}
