//! Presence across a PostgreSQL failover to a synchronous standby (`scripts/ha.sh
//! standby up`: primary on 5434, standby on 5435, `synchronous_commit =
//! remote_apply`), well within the TTL: the promoted server holds none of the old
//! primary's presence markers, and trusts none of them for a takeover (a lease records
//! the stamp of its server's lifetime, and a promoted standby has its own postmaster
//! start). A contender polling from the moment the promoted server answers never takes
//! the lease; the holder takes its marker back on the promoted server, keeps its lease
//! and token, and signals no loss. The application reaches the database through one
//! stable address, a small TCP relay switched to the promoted server, as in
//! `failover.rs`.
//!
//! The test promotes the standby, so the pair is spent afterwards: it makes the pair
//! ready first (`scripts/ha.sh standby up`).

mod common;
mod presence_support;

use presence_support as support;
use presence_support::Who;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlock::{Dialect, Locker};
use sqlx::postgres::PgPoolOptions;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const PRIMARY_URL: &str = "postgres://postgres@127.0.0.1:5434/test";
const STANDBY_URL: &str = "postgres://postgres@127.0.0.1:5435/test";
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

fn ha(action: &str) -> anyhow::Result<()> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ha.sh");
    let status = Command::new("bash")
        .args([script, "standby", action])
        .status()?;
    anyhow::ensure!(status.success(), "ha.sh standby {action} failed");
    Ok(())
}

#[tokio::test]
async fn a_failover_shorter_than_the_ttl_costs_a_presence_holder_nothing() -> anyhow::Result<()> {
    let name = "presence_failover";
    if std::env::var_os("SQLOCK_TEST_HA_PRIMARY_URL").is_none()
        && std::env::var_os("SQLOCK_TEST_HA_STANDBY_URL").is_none()
        && tokio::task::spawn_blocking(|| ha("up")).await?.is_err()
    {
        eprintln!("NOTE: ha.sh standby up failed");
    }
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
    primary.fresh_table().await?;
    let on_primary = primary.pool().await?;

    let relay = Relay::start(common::port_of(primary.url())?).await?;
    let pool = || {
        PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy(&relay.url())
    };
    let holder = Locker::builder(pool()?)
        .table(&primary.table)
        .presence(true)
        .ttl(TTL)
        .renew_interval(Duration::from_millis(500))
        .build()?;
    let contender = Locker::builder(pool()?).table(&primary.table).build()?;
    let guard = holder.acquire("leader").await?;
    let token = guard.fencing_token();
    let m = support::recorded(primary, &on_primary, "leader")
        .await?
        .context("the lease records no marker")?;
    let (_, standby_waits) = support::standby(primary, &on_primary, &m, Who::Anyone).await?;
    on_primary.close().await;

    // A contender tries all along, through the outage and after it.
    let stop = Arc::new(AtomicBool::new(false));
    let stolen = Arc::new(AtomicUsize::new(0));
    let tries = {
        let (contender, stop, stolen) = (contender.clone(), stop.clone(), stolen.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if let Ok(Some(g)) = contender.try_acquire("leader").await {
                    stolen.fetch_add(1, Ordering::SeqCst);
                    let _ = g.release().await;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    let stopped = Instant::now();
    tokio::task::spawn_blocking(|| ha("failover")).await??;
    relay.point_at(common::port_of(standby.url())?);
    println!(
        "primary stopped and standby promoted in {:?}",
        stopped.elapsed()
    );

    // The holder takes its marker back on the promoted server, and the contender goes
    // on trying for a second after that.
    let on_promoted = standby.pool().await?;
    let mut retaken: Option<Instant> = None;
    while retaken.is_none_or(|at| at.elapsed() < Duration::from_secs(1)) {
        assert_eq!(
            stolen.load(Ordering::SeqCst),
            0,
            "a contender took the lease {:?} after the failover began",
            stopped.elapsed()
        );
        if retaken.is_none()
            && support::sessions(standby, &on_promoted, &m, Who::Anyone)
                .await?
                .0
                .is_some()
        {
            retaken = Some(Instant::now());
        }
        assert!(
            stopped.elapsed() < TTL,
            "the holder never took its marker back on the promoted server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::SeqCst);
    tries.await?;
    assert_eq!(
        stolen.load(Ordering::SeqCst),
        0,
        "a contender took the lease after the failover"
    );
    assert!(!guard.is_lost(), "a loss: {:?}", guard.lost().reason());
    let listed = holder.list().await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].fencing_token, token);
    // A lease granted now records the marker with the promoted server's lifetime.
    let next = holder.acquire("after").await?;
    match support::recorded(standby, &on_promoted, "after").await? {
        Some(support::Marker::Postgres { key, stamp }) => {
            let support::Marker::Postgres { key: k, stamp: s } = m else {
                unreachable!()
            };
            assert_eq!(key, k);
            assert_ne!(
                stamp, s,
                "the promoted server has the old primary's lifetime"
            );
            assert_eq!(stamp, support::lifetime(&on_promoted).await?);
        }
        other => anyhow::bail!("recorded {other:?} after the failover"),
    }
    assert!(next.release().await?);
    assert!(guard.release().await?, "the lease was not ours at release");
    assert!(standby_waits.is_some(), "no standby waited for the marker");
    Ok(())
}
