//! The watchdog under faults: its connections killed on the server, and the server
//! restarted for less and for longer than the TTL. No false loss while the lease is
//! confirmed; a loss signalled no later than the lease's expiry plus one period.
//!
//! Connection kills target only this test's connections (by application_name on
//! PostgreSQL, by a user of their own on MariaDB). Restarts use server instances of
//! the tests' own (`scripts/fault-db.sh`, ports 5433 and 3307), never the main ones.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use sqlock::{Dialect, Locker, LostReason};

const KILL: common::kill::Killable = common::kill::Killable {
    name: "sqlock_wd_kill",
    max_connections: 1,
    ping: false,
    idle_timeout_s: None,
};

#[tokio::test]
async fn killed_connections_cause_no_false_loss() -> anyhow::Result<()> {
    for b in common::servers("wd_kill").await {
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let a = Locker::builder(common::kill::pool(&b, KILL).await?)
            .table(&b.table)
            .build()?;
        let other = b.locker().await?;
        let g = a
            .lock("k")
            .ttl(Duration::from_secs(3))
            .try_acquire()
            .await?
            .expect("k");
        // Each kill is followed by a renewal on a new connection before the next kill:
        // the test is about a killed connection, not about renewals failing for a
        // whole TTL (that loss would be a true one), so it never depends on how the
        // kills and the ticks happen to fall.
        let mut killed = 0;
        for _ in 0..3 {
            let before = a.watchdog_stats();
            killed += common::kill::kill(&b, &admin, KILL.name).await?;
            let started = std::time::Instant::now();
            while a.watchdog_stats().renewed <= before.renewed
                && started.elapsed() < Duration::from_secs(10)
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Recovery: the next ticks run on a new connection.
        let renewed = a.watchdog_stats().renewed;
        let started = std::time::Instant::now();
        while a.watchdog_stats().renewed < renewed + 2
            && started.elapsed() < Duration::from_secs(10)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let s = a.watchdog_stats();
        println!("{}: {killed} connections killed, watchdog {s:?}", b.dialect);
        assert!(killed > 0, "{}: nothing was killed", b.dialect);
        assert!(
            s.failed_ticks > 0,
            "{}: the kills never hit a renewal",
            b.dialect
        );
        assert!(
            s.renewed >= renewed + 2,
            "{}: renewals did not recover",
            b.dialect
        );
        assert!(
            !g.is_lost(),
            "{}: false loss after killed connections",
            b.dialect
        );
        assert!(
            other.try_acquire("k").await?.is_none(),
            "{}: the lease lapsed",
            b.dialect
        );
        assert!(g.release().await?, "{}", b.dialect);
    }
    Ok(())
}

/// Stops or starts a fault server. The script runs as a child process the runtime
/// waits on without blocking, so the watchdog under test keeps running meanwhile.
async fn fault_db(server: &str, action: &str) -> anyhow::Result<()> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fault-db.sh");
    let status = tokio::process::Command::new("bash")
        .args([script, server, action])
        .status()
        .await?;
    anyhow::ensure!(status.success(), "fault-db.sh {server} {action} failed");
    Ok(())
}

/// The renewal period of the short restart, configured.
const PERIOD: Duration = Duration::from_secs(1);

async fn restart_scenarios(b: &common::Backend, server: &str) -> anyhow::Result<()> {
    b.fresh_table().await?;

    // Down for less than the TTL: no loss. A renewal is sent every period and given a
    // period to answer, so an outage of two periods and a half holds one renewal from
    // its start to its end: that renewal fails, and the next ones retry. The lease,
    // confirmed at most a period before the stop, is valid for ten periods: the
    // outage, the server's start and the first renewal after it fit with room to spare.
    let ttl = PERIOD * 10;
    let down = PERIOD * 5 / 2;
    let a = b.builder().await?.ttl(ttl).renew_interval(PERIOD).build()?;
    let other = b.locker().await?;
    let g = a.try_acquire("short").await?.expect("short");
    // Stop right after a renewal (the outage begins when the stop returns).
    let renewed = a.watchdog_stats().renewed;
    let started = std::time::Instant::now();
    while a.watchdog_stats().renewed <= renewed && started.elapsed() < ttl {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = a.watchdog_stats();
    fault_db(server, "stop").await?;
    tokio::time::sleep(down).await;
    fault_db(server, "start").await?;
    let renewed = a.watchdog_stats().renewed;
    let started = std::time::Instant::now();
    while a.watchdog_stats().renewed <= renewed && started.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = a.watchdog_stats();
    println!("{}: restarted within the TTL: watchdog {s:?}", b.dialect);
    assert!(
        s.failed_ticks > before.failed_ticks,
        "{}: no renewal met the outage, so it showed nothing",
        b.dialect
    );
    assert!(
        s.renewed > renewed,
        "{}: renewals did not recover",
        b.dialect
    );
    assert!(
        !g.is_lost(),
        "{}: false loss after a short restart",
        b.dialect
    );
    assert!(other.try_acquire("short").await?.is_none(), "{}", b.dialect);
    assert!(g.release().await?, "{}", b.dialect);

    // Down for longer than the TTL: the signal fires by expiry plus one period.
    let ttl = Duration::from_millis(1_500);
    let period = ttl / 3;
    // A handle of the default renewal period, a third of the TTL.
    let a = b.locker().await?;
    let sent = tokio::time::Instant::now();
    let g = a.lock("long").ttl(ttl).try_acquire().await?.expect("long");
    // The signal is timed by a task of its own, which waits while the server stops:
    // stopping it may take longer than the TTL, and must not count.
    let mut lost = g.lost();
    let fired = tokio::spawn(async move {
        let reason = lost.wait().await;
        (reason, sent.elapsed())
    });
    fault_db(server, "stop").await?;
    let (reason, fired_after) = tokio::time::timeout(Duration::from_secs(20), fired).await??;
    fault_db(server, "start").await?;
    println!(
        "{}: down past the TTL: lost ({reason:?}) {fired_after:?} after acquiring, TTL {ttl:?}",
        b.dialect
    );
    assert_eq!(reason, LostReason::Lapsed, "{}", b.dialect);
    // The bound the watchdog promises, with slack for a busy machine's scheduler.
    assert!(
        fired_after >= ttl,
        "{}: fired before the lease could lapse",
        b.dialect
    );
    assert!(
        fired_after <= ttl + period + Duration::from_secs(1),
        "{}: fired {fired_after:?} after acquiring",
        b.dialect
    );
    drop(g);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restarts_within_and_beyond_the_ttl() -> anyhow::Result<()> {
    for b in common::fault_servers("wd_restart").await {
        let server = match b.dialect {
            Dialect::Postgres => "postgres",
            _ => "mariadb",
        };
        let result = restart_scenarios(&b, server).await;
        // Whatever happened, leave the instance running for the next test.
        fault_db(server, "start").await?;
        result?;
    }
    Ok(())
}
