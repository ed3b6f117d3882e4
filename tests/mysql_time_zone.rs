//! MariaDB sessions in different time zones agree on who holds a lease: expiry is
//! computed and compared with UTC_TIMESTAMP(6), which no session time_zone moves.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::time::Duration;

use chrono::Utc;
use sqlock::{Dialect, Locker};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::Executor;

async fn pool_in_zone(zone: &'static str) -> anyhow::Result<sqlx::MySqlPool> {
    Ok(MySqlPoolOptions::new()
        .max_connections(2)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                conn.execute(sqlx::AssertSqlSafe(format!("SET time_zone = '{zone}'")))
                    .await?;
                Ok(())
            })
        })
        .connect(&common::mysql_url())
        .await?)
}

#[tokio::test]
async fn sessions_in_other_time_zones_agree() -> anyhow::Result<()> {
    let backends = common::backends_of("mysql_tz", &[Dialect::MySql]).await;
    for b in backends {
        b.fresh_table().await?;
        let east = Locker::builder(pool_in_zone("+09:00").await?)
            .table(&b.table)
            .build()?;
        let west = Locker::builder(pool_in_zone("-07:00").await?)
            .table(&b.table)
            .build()?;

        let g = east
            .lock("k")
            .ttl(Duration::from_secs(3600))
            .try_acquire()
            .await?
            .expect("k");
        // The expiry is an hour from now in UTC, not nine hours off.
        let off = (g.expires_at() - (Utc::now() + chrono::Duration::hours(1))).num_seconds();
        assert!(off.abs() < 120, "expiry {} is {off}s off", g.expires_at());
        // Sixteen hours apart in session time, both see a live lease.
        assert!(
            west.try_acquire("k").await?.is_none(),
            "west took a live lease"
        );
        assert!(g.release().await?);

        // A short lease lapses for the other zone after its TTL, not hours later or sooner.
        let short = west
            .lock("k")
            .ttl(Duration::from_millis(300))
            .auto_renew(false)
            .try_acquire()
            .await?
            .expect("k");
        assert!(
            east.try_acquire("k").await?.is_none(),
            "east took a live lease"
        );
        let taken = east.acquire_timeout("k", Duration::from_secs(20)).await?;
        assert!(taken.fencing_token() > short.fencing_token());
        assert!(taken.release().await?);
    }
    Ok(())
}
