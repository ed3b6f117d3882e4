//! Presence under faults that reach the whole server, on the fault tests' own instances
//! (`scripts/fault-db.sh`, ports 5433 and 3307), never the main ones: MariaDB's
//! `wait_timeout` set server-wide (a test cannot set it for a user), and a restart of
//! the server shorter than the TTL. Run under `flock /tmp/sqlock-fault.lock`, as every
//! test that restarts or reconfigures a fault instance; the tests of this file take
//! turns.
#![cfg(all(feature = "postgres", feature = "mysql"))]

mod common;
mod presence_support;

use presence_support as support;
use presence_support::Who;

use std::time::Duration;

use anyhow::Context;
use sqlock::Dialect;
use tokio::time::Instant;

/// One test of this file at a time: each reconfigures or restarts a fault instance.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The outcome of a test's task: its error, or its panic raised again here.
fn finish(outcome: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    match outcome {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(e.into()),
    }
}

/// Stops or starts a fault server. The script runs as a child process the runtime
/// waits on without blocking, so that the handles under test keep running meanwhile.
async fn fault_db(server: &str, action: &str) -> anyhow::Result<()> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fault-db.sh");
    let status = tokio::process::Command::new("bash")
        .args([script, server, action])
        .status()
        .await?;
    anyhow::ensure!(status.success(), "fault-db.sh {server} {action} failed");
    Ok(())
}

/// MariaDB's `wait_timeout` of one second, a ninth of the TTL, set server-wide: it
/// ends idle pooled connections, as it should, but not the holder's presence
/// connections, which exempt themselves for their session. The marker stays with the
/// same connection, nobody takes the lease and no loss is signalled, over four
/// timeouts. (PostgreSQL's `idle_session_timeout` is tested for a role of the test's
/// own, in `presence.rs`.)
#[tokio::test]
async fn mariadb_wait_timeout_does_not_end_presence() -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    for b in common::fault_servers("presence_wait_timeout").await {
        if b.dialect != Dialect::MySql {
            continue;
        }
        b.fresh_table().await?;
        let admin = b.pool().await?;
        let before = b
            .scalar(&admin, "SELECT CAST(@@GLOBAL.wait_timeout AS SIGNED)")
            .await?;
        b.script(&admin, "SET GLOBAL wait_timeout = 1").await?;
        let task = (b.clone(), admin.clone());
        // A task of its own, so that the setting is restored whatever it does, a
        // failed assertion included.
        let outcome = tokio::spawn(async move {
            let (b, admin) = task;
            // The timeout takes effect: an idle connection opened now is ended.
            let probe = b.pool_with(1).await?;
            let id = b
                .scalar(&probe, "SELECT CAST(CONNECTION_ID() AS SIGNED)")
                .await?;
            assert!(
                common::eventually(|| async { Ok(!support::alive(&b, &admin, id).await?) }).await?,
                "wait_timeout never ended an idle connection"
            );
            let holder = b
                .builder()
                .await?
                .presence(true)
                .ttl(Duration::from_secs(9))
                .build()?;
            let guard = holder.acquire("idle").await?;
            let m = support::recorded(&b, &admin, "idle")
                .await?
                .context("the lease records no marker")?;
            let (h, _) = support::sessions(&b, &admin, &m, Who::Anyone).await?;
            let h = h.context("nobody holds the marker")?;
            let waiter = b.builder().await?.build()?;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(4) {
                assert!(
                    waiter.try_acquire("idle").await?.is_none(),
                    "taken {:?} after the grant, while its holder ran",
                    started.elapsed()
                );
                assert!(!guard.is_lost(), "a loss was signalled");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let (_, w) = support::standby(&b, &admin, &m, Who::Anyone).await?;
            let w = w.context("no standby waited")?;
            assert_eq!(
                support::sessions(&b, &admin, &m, Who::Anyone).await?,
                (Some(h), vec![w]),
                "the presence connections changed"
            );
            assert!(guard.release().await?);
            Ok::<_, anyhow::Error>(())
        })
        .await;
        b.script(&admin, &format!("SET GLOBAL wait_timeout = {before}"))
            .await?;
        finish(outcome)?;
    }
    Ok(())
}

/// A restart of the server shorter than the TTL costs a presence holder nothing, as
/// it costs a holder without presence nothing: the restarted server holds no marker of
/// before its start, and trusts none for a takeover (a lease records the server's
/// lifetime: PostgreSQL's postmaster start, MariaDB's id and start). An acquirer that
/// polls from the moment the server is back never takes the lease; the holder takes
/// its marker back, its lease keeps its token, and no loss is signalled. Leases it is
/// granted afterwards record the marker on the new lifetime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_shorter_than_the_ttl_costs_nothing() -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    for b in common::fault_servers("presence_restart").await {
        let server = match b.dialect {
            Dialect::Postgres => "postgres",
            _ => "mariadb",
        };
        let scenario = b.clone();
        let outcome = tokio::spawn(async move { restart_scenario(&scenario, server).await }).await;
        // Whatever happened, a failed assertion included, leave the instance running
        // for the next test.
        fault_db(server, "start").await?;
        finish(outcome)?;
    }
    Ok(())
}

async fn restart_scenario(b: &common::Backend, server: &str) -> anyhow::Result<()> {
    b.fresh_table().await?;
    let ttl = Duration::from_secs(30);
    let holder = b.builder().await?.presence(true).ttl(ttl).build()?;
    let guard = holder.acquire("restart").await?;
    let token = guard.fencing_token();
    let admin = b.pool().await?;
    let m = support::recorded(b, &admin, "restart")
        .await?
        .context("the lease records no marker")?;
    let (_, standby) = support::standby(b, &admin, &m, Who::Anyone).await?;
    drop(admin);
    let stopped = Instant::now();
    fault_db(server, "stop").await?;
    fault_db(server, "start").await?;
    let down = stopped.elapsed();
    // From the moment the server answers, an acquirer polls; the holder takes its
    // marker back meanwhile, and the polls go on for a second after that.
    let admin = b.pool().await?;
    let waiter = b.builder().await?.build()?;
    let mut polls = 0u32;
    let mut retaken: Option<Instant> = None;
    loop {
        assert!(
            waiter.try_acquire("restart").await?.is_none(),
            "{}: taken after a restart of {down:?} (TTL {ttl:?})",
            b.dialect
        );
        polls += 1;
        if retaken.is_none()
            && support::sessions(b, &admin, &m, Who::Anyone)
                .await?
                .0
                .is_some()
        {
            retaken = Some(Instant::now());
        }
        if retaken.is_some_and(|at| at.elapsed() > Duration::from_secs(1)) {
            break;
        }
        assert!(
            stopped.elapsed() < ttl,
            "{}: the holder never took its marker back",
            b.dialect
        );
    }
    println!(
        "{}: restarted in {down:?} (TTL {ttl:?}): {polls} polls, none granted; the holder \
         took its marker back",
        b.dialect
    );
    // Its renewals go on, and its lease is the one it had.
    let renewed = holder.watchdog_stats().renewed;
    assert!(
        common::eventually(|| async { Ok(holder.watchdog_stats().renewed > renewed) }).await?,
        "{}: the renewals did not resume",
        b.dialect
    );
    let info = holder
        .lock_info("restart")
        .await?
        .with_context(|| format!("{}: the lease is gone", b.dialect))?;
    assert_eq!(info.fencing_token, token, "{}", b.dialect);
    assert!(!guard.is_lost(), "{}: a loss was signalled", b.dialect);
    // A lease granted now records the marker, on the new lifetime.
    let next = holder.acquire("restart-next").await?;
    let recorded = support::recorded(b, &admin, "restart-next").await?;
    match (&m, &recorded) {
        (
            support::Marker::Postgres { key, stamp },
            Some(support::Marker::Postgres { key: k, stamp: s }),
        ) => {
            assert_eq!(k, key, "{}", b.dialect);
            assert_ne!(s, stamp, "{}: the same lifetime after a restart", b.dialect);
            assert_eq!(*s, support::lifetime(&admin).await?, "{}", b.dialect);
        }
        (support::Marker::MySql(name), Some(support::Marker::MySql(n))) => {
            assert_eq!(n, name, "{}", b.dialect);
        }
        _ => anyhow::bail!("{}: recorded {recorded:?} after the restart", b.dialect),
    }
    assert!(next.release().await?);
    assert!(!guard.is_lost(), "{}: a loss was signalled", b.dialect);
    assert!(guard.release().await?, "{}", b.dialect);
    assert!(standby.is_some(), "{}: no standby waited", b.dialect);
    Ok(())
}
