//! The sweeper scheduled inside the database: a pg_cron job or a MariaDB event reclaims
//! expired rows while no client sweeps, and leaves live locks (a held lease, a held
//! for-update lock) alone; the procedure behind it keeps the sweep's rules and its
//! bound on batches; each missing piece gets an error that says what to set.
//!
//! Runs on the fault tests' own server instances (`scripts/fault-db.sh`), which load
//! pg_cron (jobs run from database `test`) and run MariaDB's event scheduler; the main
//! servers' configuration is never changed.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{Dialect, Error, Locker, Strategy, SweepOptions};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The tests that switch MariaDB's event scheduler off take this, and so does the one
/// that needs it on.
static EVENT_SCHEDULER: Mutex<()> = Mutex::const_new(());

/// pg_cron before 1.5 schedules by the minute: a job runs at the next full minute.
fn interval(dialect: Dialect) -> Duration {
    match dialect {
        Dialect::Postgres => Duration::from_secs(60),
        _ => Duration::from_secs(1),
    }
}

async fn rows_like(b: &common::Backend, pool: &sqlock::DbPool, prefix: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE lock_key LIKE '{prefix}%'",
        b.quoted()
    );
    b.scalar(pool, &sql).await.expect("count rows")
}

#[tokio::test]
async fn a_scheduled_sweep_reclaims_expired_rows_with_no_client_sweeping() -> anyhow::Result<()> {
    let _scheduler = EVENT_SCHEDULER.lock().await;
    for b in common::fault_servers("sched_sweep").await {
        let a = b.fresh_table().await?;
        a.unschedule_sweep().await?; // left by an interrupted earlier run
        let mut last = 0;
        for i in 0..12 {
            let g = a
                .try_acquire(&format!("released-{i}"))
                .await?
                .expect("free");
            last = last.max(g.fencing_token());
            assert!(g.release().await?);
        }
        let held = a
            .lock("held")
            .ttl(Duration::from_secs(600))
            .try_acquire()
            .await?
            .expect("free");
        let row = a
            .lock("row")
            .strategy(Strategy::ForUpdate)
            .try_acquire()
            .await?
            .expect("free");

        // Batches of 5: the 12 rows take three batches of the procedure.
        let every = interval(b.dialect);
        let job = a
            .schedule_sweep(every, SweepOptions::new().batch(5))
            .await?;
        assert_eq!(job.name, format!("{}_sweep", b.table));
        assert_eq!(job.job_id.is_some(), b.dialect == Dialect::Postgres);

        // From here on no client sweeps: another process only watches the table.
        let observer = b.pool().await?;
        let deadline = Instant::now() + every + Duration::from_secs(90);
        while rows_like(&b, &observer, "released-").await > 0 {
            assert!(
                Instant::now() < deadline,
                "{}: the scheduled sweep did not run within {:?}",
                b.dialect,
                every + Duration::from_secs(90)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        // The live locks are untouched, and their holders still hold them.
        let info = a
            .lock_info("held")
            .await?
            .expect("the held lease is listed");
        assert_eq!(info.fencing_token, held.fencing_token(), "{}", b.dialect);
        assert!(!held.lost().is_lost(), "{}", b.dialect);
        assert_eq!(rows_like(&b, &observer, "row").await, 1, "{}", b.dialect);
        row.release().await?;
        assert!(
            held.release().await?,
            "{}: a held lease was swept",
            b.dialect
        );

        // Tokens keep rising for a key whose row was swept.
        let again = a.try_acquire("released-0").await?.expect("free");
        assert!(again.fencing_token() > last, "{}", b.dialect);
        again.release().await?;

        assert!(a.unschedule_sweep().await?, "{}", b.dialect);
        assert!(!a.unschedule_sweep().await?, "{}", b.dialect);
        observer.close().await;
    }
    Ok(())
}

#[tokio::test]
async fn the_procedure_keeps_live_locks_and_its_bound_on_batches() -> anyhow::Result<()> {
    for b in common::fault_servers("sched_proc").await {
        let a = b.fresh_table().await?;
        for i in 0..5 {
            let g = a
                .try_acquire(&format!("released-{i}"))
                .await?
                .expect("free");
            assert!(g.release().await?);
        }
        let held = a.try_acquire("held").await?.expect("free");
        // A released row a live fair place waits for (unmarked, as a join that met the
        // row locked leaves it) stays; one whose queued flag outlived its waiters goes.
        for key in ["waited", "left"] {
            let g = a.try_acquire(key).await?.expect("free");
            assert!(g.release().await?);
        }
        let (place, flag) = match b.dialect {
            Dialect::Postgres => (
                format!(
                    "INSERT INTO \"{t}_queue\" (lock_key, lock_owner, expires_at) \
                     VALUES ('waited', 'w', statement_timestamp() + INTERVAL '1 hour')",
                    t = b.table
                ),
                format!(
                    "UPDATE \"{}\" SET queued = TRUE WHERE lock_key = 'left'",
                    b.table
                ),
            ),
            _ => (
                format!(
                    "INSERT INTO `{t}_queue` (lock_key, lock_owner, expires_at) \
                     VALUES ('waited', 'w', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
                    t = b.table
                ),
                format!(
                    "UPDATE `{}` SET queued = TRUE WHERE lock_key = 'left'",
                    b.table
                ),
            ),
        };
        b.script(a.pool(), &place).await?;
        b.script(a.pool(), &flag).await?;
        let call = |batch: u32, batches: u32| match b.dialect {
            Dialect::Postgres => format!("CALL \"{}_sweep\"({batch}, 0, {batches})", b.table),
            _ => format!("CALL `{}_sweep`({batch}, 0, {batches}, @n)", b.table),
        };
        // One batch of 2, then at most 100 batches of 2: the rest.
        b.script(a.pool(), &call(2, 1)).await?;
        assert_eq!(
            rows_like(&b, a.pool(), "released-").await,
            3,
            "{}",
            b.dialect
        );
        b.script(a.pool(), &call(2, 100)).await?;
        assert_eq!(
            rows_like(&b, a.pool(), "released-").await,
            0,
            "{}",
            b.dialect
        );
        assert_eq!(
            rows_like(&b, a.pool(), "waited").await,
            1,
            "{}: the row of a key a fair waiter is queued for was swept",
            b.dialect
        );
        assert_eq!(
            rows_like(&b, a.pool(), "left").await,
            0,
            "{}: a queued flag nobody waits for kept its row",
            b.dialect
        );
        assert!(
            held.release().await?,
            "{}: a held lease was swept",
            b.dialect
        );
        // Bad arguments are refused by the procedure itself.
        assert!(
            b.script(a.pool(), &call(0, 1)).await.is_err(),
            "{}",
            b.dialect
        );
    }
    Ok(())
}

#[tokio::test]
async fn each_missing_piece_has_its_own_error() -> anyhow::Result<()> {
    // MariaDB's scheduler is asked after before the procedure: another test's turning
    // it off would answer first.
    let _scheduler = EVENT_SCHEDULER.lock().await;
    // SQLite has no scheduler, and says what to use instead.
    for b in common::backends_of("sched_sqlite", &[Dialect::Sqlite]).await {
        let a = b.fresh_table().await?;
        let e = a
            .schedule_sweep(Duration::from_secs(60), SweepOptions::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::SchedulerUnavailable { hint, .. } if hint.contains("spawn_sweeper")),
            "{e}"
        );
        assert!(matches!(
            a.unschedule_sweep().await,
            Err(Error::SchedulerUnavailable { .. })
        ));
    }
    for b in common::fault_servers("sched_missing").await {
        let a = b.fresh_table().await?;
        // Intervals a scheduler cannot keep, before any SQL.
        for every in [Duration::ZERO, Duration::from_millis(1500)] {
            assert!(matches!(
                a.schedule_sweep(every, SweepOptions::new()).await,
                Err(Error::InvalidSchedule { .. })
            ));
        }
        if b.dialect == Dialect::Postgres {
            // pg_cron 1.4 schedules by the minute; 90 s is no cron schedule at all.
            for secs in [30, 90] {
                assert!(matches!(
                    a.schedule_sweep(Duration::from_secs(secs), SweepOptions::new())
                        .await,
                    Err(Error::InvalidSchedule { .. })
                ));
            }
        }

        // A table created by an earlier version: no procedure.
        let drop = match b.dialect {
            Dialect::Postgres => format!("DROP PROCEDURE \"{}_sweep\"", b.table),
            _ => format!("DROP PROCEDURE `{}_sweep`", b.table),
        };
        b.script(a.pool(), &drop).await?;
        let e = a
            .schedule_sweep(interval(b.dialect), SweepOptions::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::MissingSweepProcedure { name, .. } if *name == format!("{}_sweep", b.table)),
            "{}: {e}",
            b.dialect
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_database_without_the_scheduler_is_told_what_to_set() -> anyhow::Result<()> {
    for b in common::fault_servers("sched_off").await {
        match b.dialect {
            Dialect::Postgres => {
                // pg_cron on this instance runs its jobs from `test`, not `postgres`.
                let url = b.url().replace("/test", "/postgres");
                let pool = sqlx::PgPool::connect(&url).await?;
                let other = Locker::builder(pool).table(&b.table).build()?;
                other.create_table().await?;
                let e = other
                    .schedule_sweep(Duration::from_secs(60), SweepOptions::new())
                    .await
                    .unwrap_err();
                assert!(
                    matches!(&e, Error::SchedulerUnavailable { hint, .. }
                        if hint.contains("cron.database_name = 'postgres'")),
                    "{e}"
                );
                assert!(!other.unschedule_sweep().await?);
                other.pool().close().await;
            }
            _ => {
                let _scheduler = EVENT_SCHEDULER.lock().await;
                let a = b.fresh_table().await?;
                b.script(a.pool(), "SET GLOBAL event_scheduler = OFF")
                    .await?;
                let result = a
                    .schedule_sweep(Duration::from_secs(1), SweepOptions::new())
                    .await;
                b.script(a.pool(), "SET GLOBAL event_scheduler = ON")
                    .await?;
                let e = result.unwrap_err();
                assert!(
                    matches!(&e, Error::SchedulerUnavailable { hint, .. }
                        if hint.contains("event_scheduler=ON")),
                    "{e}"
                );
            }
        }
    }
    Ok(())
}
