//! sqlock's metrics exported for Prometheus, and the scrape printed.
//!
//! ```text
//! cargo run --example prometheus --features metrics
//! ```
//!
//! sqlock records through the `metrics` facade (feature `metrics`); the application
//! installs an exporter once, at start-up, before it builds its handles. Here that is
//! `metrics-exporter-prometheus` without its HTTP listener: the example renders the
//! scrape itself. A service would serve `handle.render()` on its `/metrics` route, or
//! turn on the exporter's own listener (its `http-listener` feature).

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use sqlock::Locker;
use sqlx::sqlite::SqlitePoolOptions;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await?;
    sqlock::migrate(&pool).await?;
    let locker = Locker::builder(pool)
        .ttl(Duration::from_secs(10))
        // The keys here are a few fixed job names, so they can be a label.
        .metrics_key_label(true)
        .build()?;
    let other = locker.new_handle();

    // A grant, a busy answer, a timeout, a release and a handoff.
    let guard = locker.acquire("nightly-report").await?;
    assert!(other.try_acquire("nightly-report").await?.is_none());
    let timed_out = other
        .acquire_timeout("nightly-report", Duration::from_millis(50))
        .await;
    assert!(matches!(timed_out, Err(sqlock::Error::Timeout { .. })));
    let waiter = tokio::spawn({
        let other = other.clone();
        async move { other.acquire("nightly-report").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await?;
    waiter.await??.release().await?;

    print!("{}", prometheus.render());
    Ok(())
}
