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

/// PostgreSQL restarts in place when one of its processes crashes (a backend killed,
/// `restart_after_crash`): the postmaster stays, so its start time does not change,
/// but every session ends, the holder's presence connections with them, and every
/// marker is free while the holder is alive. Such a restart costs a presence holder
/// nothing either: the crash discards the server's statistics, which gives the
/// lifetime a new stamp, and the markers of before are not trusted. The holder cannot
/// log in again until the test lets it, so that an acquirer has the whole window to
/// itself; before, it took the lease at once. Then the holder takes its marker back,
/// renews, keeps its token, and signals no loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_restart_costs_a_presence_holder_nothing() -> anyhow::Result<()> {
    const ROLE: &str = "sqlock_p_crash";
    let _turn = TURN.lock().await;
    for b in common::fault_servers("presence_crash").await {
        if b.dialect != Dialect::Postgres {
            continue;
        }
        let scenario = b.clone();
        let outcome = tokio::spawn(async move { crash_scenario(&scenario, ROLE).await }).await;
        // Whatever happened, the role may log in again, for the next run.
        let admin = up(&b).await?;
        b.script(&admin, &format!("ALTER ROLE {ROLE} LOGIN"))
            .await?;
        finish(outcome)?;
    }
    Ok(())
}

/// A pool on `b` once its server answers again (a crash restart takes a moment).
async fn up(b: &common::Backend) -> anyhow::Result<sqlock::DbPool> {
    let started = Instant::now();
    loop {
        match b.pool().await {
            Ok(pool) if b.scalar(&pool, "SELECT CAST(1 AS BIGINT)").await.is_ok() => {
                return Ok(pool)
            }
            _ if started.elapsed() > Duration::from_secs(60) => {
                anyhow::bail!("{}: the server did not come back in 60 s", b.dialect)
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The postmaster's start and the statistics' last reset, in microseconds.
async fn starts(b: &common::Backend, admin: &sqlock::DbPool) -> anyhow::Result<(i64, i64)> {
    let postmaster = b
        .scalar(
            admin,
            "SELECT CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)",
        )
        .await?;
    let reset = b
        .scalar(
            admin,
            "SELECT COALESCE(CAST(extract(epoch FROM stats_reset) * 1000000 AS BIGINT), 0) \
             FROM pg_stat_bgwriter",
        )
        .await?;
    Ok((postmaster, reset))
}

async fn crash_scenario(b: &common::Backend, role: &str) -> anyhow::Result<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    b.fresh_table().await?;
    let admin = b.pool().await?;
    b.script(
        &admin,
        &format!(
            "DO $$ BEGIN CREATE ROLE {role} LOGIN SUPERUSER; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$; ALTER ROLE {role} LOGIN"
        ),
    )
    .await?;
    let url = b.url().replacen("postgres@", &format!("{role}@"), 1);
    let pool: sqlock::DbPool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await?
        .into();
    let ttl = Duration::from_secs(30);
    let holder = sqlock::Locker::builder(pool)
        .table(&b.table)
        .presence(true)
        .ttl(ttl)
        .build()?;
    let guard = holder.acquire("crash").await?;
    let token = guard.fencing_token();
    let m = support::recorded(b, &admin, "crash")
        .await?
        .context("the lease records no marker")?;
    let (_, standby) = support::standby(b, &admin, &m, Who::Anyone).await?;
    anyhow::ensure!(standby.is_some(), "no standby waited");
    let before = starts(b, &admin).await?;
    b.script(&admin, &format!("ALTER ROLE {role} NOLOGIN"))
        .await?;
    // The crash: a backend of the test's own killed, which makes the postmaster end
    // every session and restart the server in place.
    let victim = b
        .scalar(&admin, "SELECT CAST(pg_backend_pid() AS BIGINT)")
        .await?;
    drop(admin);
    let crashed = Instant::now();
    kill(Pid::from_raw(i32::try_from(victim)?), Signal::SIGKILL)?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let admin = up(b).await?;
    let down = crashed.elapsed();
    // The fault took: the same postmaster, a restart all the same, and the marker
    // free, with its holder alive and shut out.
    let after = starts(b, &admin).await?;
    assert_eq!(
        after.0, before.0,
        "the postmaster restarted: not a crash in place"
    );
    assert_ne!(
        after.1, before.1,
        "the statistics survived: no crash restart"
    );
    assert_eq!(
        support::sessions(b, &admin, &m, Who::Anyone).await?,
        (None, vec![]),
        "the holder's presence sessions outlived the crash"
    );
    // An acquirer has the free marker to itself for a second: never granted.
    let waiter = b.builder().await?.build()?;
    let mut polls = 0u32;
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(1) {
        assert!(
            waiter.try_acquire("crash").await?.is_none(),
            "taken after a crash restart of {down:?} (TTL {ttl:?}) while its holder lived"
        );
        polls += 1;
    }
    assert_eq!(
        support::sessions(b, &admin, &m, Who::Anyone).await?.0,
        None,
        "the marker was held during the polls"
    );
    b.script(&admin, &format!("ALTER ROLE {role} LOGIN"))
        .await?;
    support::watched(b, &admin, &m, Who::Anyone).await?;
    println!(
        "crash restart in {down:?} (TTL {ttl:?}): {polls} polls while the marker was free, \
         none granted; the holder took its marker back"
    );
    let renewed = holder.watchdog_stats().renewed;
    assert!(
        common::eventually(|| async { Ok(holder.watchdog_stats().renewed > renewed) }).await?,
        "the renewals did not resume"
    );
    let info = holder
        .lock_info("crash")
        .await?
        .context("the lease is gone")?;
    assert_eq!(info.fencing_token, token);
    assert!(!guard.is_lost(), "a loss was signalled");
    // A lease granted now records the marker on the new lifetime.
    let next = holder.acquire("crash-next").await?;
    match (&m, support::recorded(b, &admin, "crash-next").await?) {
        (
            support::Marker::Postgres { key, stamp },
            Some(support::Marker::Postgres { key: k, stamp: s }),
        ) => {
            assert_eq!(k, *key);
            assert_ne!(s, *stamp, "the same lifetime after a crash restart");
            assert_eq!(s, support::lifetime(&admin).await?);
        }
        (_, recorded) => anyhow::bail!("recorded {recorded:?} after the crash restart"),
    }
    assert!(next.release().await?);
    assert!(guard.release().await?);
    Ok(())
}
