//! PostgreSQL failover with a synchronous standby (`scripts/ha.sh standby up`: primary
//! on 5434, standby on 5435, `synchronous_commit = remote_apply`): a lease is held, the
//! primary is stopped at once and the standby promoted, well within the TTL. The
//! application reaches the database through one stable address, as it would through a
//! virtual IP, a DNS name or HAProxy; here a small TCP relay in the test, switched to
//! the promoted server when it is promoted. After the pools reconnect, the holder's
//! renewals succeed and it never loses the lease, no contender got the lock meanwhile,
//! and tokens keep rising.
//!
//! The test promotes the standby, so the pair is spent afterwards: `scripts/ha.sh
//! standby up` builds it again.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlock::{Dialect, Locker};
use sqlx::postgres::PgPoolOptions;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const PRIMARY_URL: &str = "postgres://postgres@127.0.0.1:5434/test";
const STANDBY_URL: &str = "postgres://postgres@127.0.0.1:5435/test";
/// Long beside the failover (a few seconds of stopping and promoting, on a busy
/// machine more), so that renewals resuming before it is the thing tested.
const TTL: Duration = Duration::from_secs(30);

/// A TCP relay on a loopback port of its own that forwards each new connection to
/// the port it is pointed at now.
struct Relay {
    port: u16,
    target: Arc<AtomicU16>,
}

impl Relay {
    async fn start(target: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let target = Arc::new(AtomicU16::new(target));
        let to = target.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let port = to.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    // A server that is down refuses the relay, and the client sees its
                    // connection closed, as it would with the server itself.
                    if let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Ok(Self { port, target })
    }

    fn point_at(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/test", self.port)
    }
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(5432)
}

fn failover() -> anyhow::Result<()> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ha.sh");
    let status = Command::new("bash")
        .args([script, "standby", "failover"])
        .status()?;
    anyhow::ensure!(status.success(), "ha.sh standby failover failed");
    Ok(())
}

/// A failover spends the pair, so the test makes it ready first when it runs on the
/// script's own pair (nothing happens when the pair is up and healthy). A pair named by
/// the environment is the caller's to prepare.
fn standby_up() -> anyhow::Result<()> {
    if std::env::var_os("SQLOCK_TEST_HA_PRIMARY_URL").is_some()
        || std::env::var_os("SQLOCK_TEST_HA_STANDBY_URL").is_some()
    {
        return Ok(());
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ha.sh");
    let status = Command::new("bash")
        .args([script, "standby", "up"])
        .status()?;
    if !status.success() {
        // Then the pair is unreachable, which the checks below report (an error where
        // servers are required).
        eprintln!("NOTE: ha.sh standby up failed ({status})");
    }
    Ok(())
}

#[tokio::test]
async fn a_lease_survives_a_failover_to_a_synchronous_standby() -> anyhow::Result<()> {
    let name = "ha_failover";
    tokio::task::spawn_blocking(standby_up).await??;
    let primary = common::ha_server(
        name,
        Dialect::Postgres,
        "SQLOCK_TEST_HA_PRIMARY_URL",
        PRIMARY_URL,
    )
    .await;
    let standby = common::ha_server(
        name,
        Dialect::Postgres,
        "SQLOCK_TEST_HA_STANDBY_URL",
        STANDBY_URL,
    )
    .await;
    let (Some(primary), Some(standby)) = (primary.first(), standby.first()) else {
        return Ok(());
    };
    let standby_pool = standby.pool().await?;
    anyhow::ensure!(
        standby
            .scalar(&standby_pool, "SELECT pg_is_in_recovery()::INT::INT8")
            .await?
            == 1,
        "the standby on {} was promoted already: run `scripts/ha.sh standby up` first",
        standby.url()
    );
    standby_pool.close().await;
    primary.fresh_table().await?;

    let relay = Relay::start(port_of(primary.url())).await?;
    let pool = || {
        PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy(&relay.url())
    };
    let holder = Locker::builder(pool()?)
        .table(&primary.table)
        .ttl(TTL)
        .renew_interval(Duration::from_millis(500))
        .build()?;
    let contender = Locker::builder(pool()?).table(&primary.table).build()?;

    let guard = holder.acquire("leader").await?;
    let first = guard.fencing_token();

    // A contender tries all along, through the outage and after it.
    let stop = Arc::new(AtomicBool::new(false));
    let stolen = Arc::new(AtomicUsize::new(0));
    let tries = {
        let (contender, stop, stolen) = (contender.clone(), stop.clone(), stolen.clone());
        tokio::spawn(async move {
            let mut errors = 0usize;
            while !stop.load(Ordering::SeqCst) {
                match contender.try_acquire("leader").await {
                    Ok(Some(g)) => {
                        stolen.fetch_add(1, Ordering::SeqCst);
                        let _ = g.release().await;
                    }
                    Ok(None) => {}
                    Err(_) => errors += 1, // the outage
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            errors
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    let stopped = Instant::now();
    tokio::task::spawn_blocking(failover).await??;
    relay.point_at(port_of(standby.url()));
    // The old primary is gone: every renewal counted from here reached the new one.
    let renewed_before = holder.watchdog_stats().renewed;
    println!(
        "primary stopped and standby promoted in {:?}",
        stopped.elapsed()
    );

    // Renewals reach the promoted server through the reconnected pool, well before
    // the lease could lapse (the test is bounded by the TTL, not by a timed claim).
    let deadline = stopped + TTL - Duration::from_secs(2);
    let mut renewed_after = 0;
    while Instant::now() < deadline {
        let stats = holder.watchdog_stats();
        if stats.renewed >= renewed_before + 3 {
            renewed_after = stats.renewed - renewed_before;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stats = holder.watchdog_stats();
    // A renewal may fail once on a connection to the old primary; with sqlx's default
    // ping before each use the pool usually drops such a connection unseen.
    println!("watchdog after the failover: {stats:?}");
    assert!(
        renewed_after >= 3,
        "renewals did not resume on the promoted server before the TTL: {stats:?}"
    );
    assert!(
        !guard.is_lost(),
        "a false loss: {:?}",
        guard.lost().reason()
    );

    stop.store(true, Ordering::SeqCst);
    let errors = tries.await?;
    println!("the contender's attempts failed {errors} times during the outage");
    assert_eq!(
        stolen.load(Ordering::SeqCst),
        0,
        "a contender got the lock while it was held"
    );

    // The promoted server has the grant the primary made (remote_apply), with its token.
    let listed = holder.list().await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].owner, holder.owner().to_string());
    assert_eq!(listed[0].fencing_token, first);

    assert!(guard.release().await?, "the lease was not ours at release");
    let next = contender
        .acquire_timeout("leader", Duration::from_secs(5))
        .await?;
    assert!(
        next.fencing_token() > first,
        "tokens rise across the failover: {first} then {}",
        next.fencing_token()
    );
    assert!(next.release().await?);
    Ok(())
}
