//! A notification is a hint (PostgreSQL, `notify_waiters`): a fair waiter holds only
//! once a statement of its own has found its grant in the table.
//!
//! Two applications whose lock tables share a name in two schemas of one database
//! share the notification channels, and number their waiters' tickets alike: a handoff
//! in one never gives the other's waiter of the same ticket a guard, and a release in
//! one does not wake the other's waiters of the same key. A notification
//! forged with `pg_notify`, naming a waiter's ticket and the current holder's token,
//! gives that waiter nothing and costs it nothing: it keeps its place and is served in
//! its turn.
//!
//! Each test makes its own schemas in the `test` database (their names carry the
//! process id) and drops them at the end; each application's pool finds its table
//! along a `search_path` set in its connect options.

mod common;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlock::{DbPool, Dialect, LockGuard, Locker, Strategy};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};
use tokio::task::JoinHandle;

/// The lock table's name, the same in every schema.
const TABLE: &str = "fair_schemas";

/// So long that within [`DEADLINE`] only a notification wakes a waiter.
const POLL: Duration = Duration::from_secs(300);

/// How long a woken waiter may take to hold.
const DEADLINE: Duration = Duration::from_secs(30);

/// One application: a schema of its own, a pool whose connections find their tables
/// there, and a fair handle with notifications on that pool.
struct App {
    schema: String,
    options: PgConnectOptions,
    pool: PgPool,
    locker: Locker,
}

impl App {
    async fn new(admin: &PgPool, url: &str, name: &str) -> anyhow::Result<Self> {
        let schema = format!("fair_notify_{name}_{}", std::process::id());
        let sql = format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}");
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(admin).await?;
        let options = PgConnectOptions::from_str(url)?.options([("search_path", &schema)]);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options.clone())
            .await?;
        let locker = Locker::builder(DbPool::from(pool.clone()))
            .table(TABLE)
            .strategy(Strategy::Fair)
            .notify_waiters(true)
            .poll_interval(POLL, POLL)
            .ttl(Duration::from_secs(600))
            .build()?;
        locker.create_table().await?;
        Ok(Self {
            schema,
            options,
            pool,
            locker,
        })
    }

    /// A lease handle with notifications, on a pool of its own whose connections are
    /// named `name` (`application_name`): a family of its own, with a listener of its
    /// own.
    async fn lease(&self, name: &str) -> anyhow::Result<Locker> {
        let options = self.options.clone().application_name(name);
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await?;
        Ok(Locker::builder(DbPool::from(pool))
            .table(TABLE)
            .notify_waiters(true)
            .poll_interval(POLL, POLL)
            .ttl(Duration::from_secs(600))
            .build()?)
    }

    async fn scalar(&self, sql: String) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await?)
    }

    /// The ticket of `owner`'s place in `key`'s queue.
    async fn ticket(&self, key: &str, owner: &Locker) -> anyhow::Result<i64> {
        self.scalar(format!(
            "SELECT ticket FROM {TABLE}_queue WHERE lock_key = '{key}' AND lock_owner = '{}'",
            owner.owner()
        ))
        .await
    }

    async fn queued(&self, key: &str) -> anyhow::Result<i64> {
        self.scalar(format!(
            "SELECT COUNT(*) FROM {TABLE}_queue WHERE lock_key = '{key}'"
        ))
        .await
    }

    /// A waiter of `key`, on a handle of the application's family (one listener), in
    /// a task of its own; once its place is in the queue.
    async fn waiter(
        &self,
        key: &str,
    ) -> anyhow::Result<(Locker, JoinHandle<sqlock::Result<LockGuard>>)> {
        let before = self.queued(key).await?;
        let handle = self.locker.new_handle();
        let task = tokio::spawn({
            let (handle, key) = (handle.clone(), key.to_owned());
            async move { handle.acquire(&key).await }
        });
        common::fair::until(|| async { Ok(self.queued(key).await? > before) }).await?;
        Ok((handle, task))
    }

    /// The owner and token of `key`'s holder, as the table shows them.
    async fn holder(&self, key: &str) -> anyhow::Result<(String, i64)> {
        let info = self.locker.lock_info(key).await?.context("held")?;
        Ok((info.owner, info.fencing_token))
    }

    /// A handoff of a key of its own to a waiter of its own, in this application: once it
    /// holds, the application's listener has read every notification sent before the
    /// handoff committed (a listener reads them in order of commit).
    async fn sentinel(&self) -> anyhow::Result<()> {
        let key = format!("sentinel-{}", self.schema);
        let held = self.locker.acquire(&key).await?;
        let (_, waiting) = self.waiter(&key).await?;
        assert!(held.release().await?);
        let g = tokio::time::timeout(DEADLINE, waiting)
            .await
            .context("the sentinel's waiter was not woken")???;
        assert!(g.release().await?);
        // Its task is done; whatever a notification read before woke is scheduled
        // ahead of this one.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    async fn drop_schema(self, admin: &PgPool) -> anyhow::Result<()> {
        self.pool.close().await;
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(admin).await?;
        Ok(())
    }
}

async fn admin(b: &common::Backend) -> anyhow::Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(2)
        .connect(b.url())
        .await?)
}

#[tokio::test]
async fn a_handoff_in_another_schema_gives_nothing_here() -> anyhow::Result<()> {
    for b in common::backends_of("fair_notify_schemas", &[Dialect::Postgres]).await {
        let admin = admin(&b).await?;
        let a = App::new(&admin, b.url(), "a").await?;
        let here = App::new(&admin, b.url(), "b").await?;
        // Tokens here start far from A's, so that a guard with one of A's tokens shows.
        here.scalar(format!("SELECT setval('{TABLE}_fence_seq', 1000000)"))
            .await?;

        // The same ticket in both: each holder took ticket 1, each waiter has 2.
        let held = here.locker.acquire("handoff").await?;
        let (w, mut waiting) = here.waiter("handoff").await?;
        let a_held = a.locker.acquire("handoff").await?;
        let (a_w, a_waiting) = a.waiter("handoff").await?;
        assert_eq!(
            here.ticket("handoff", &w).await?,
            a.ticket("handoff", &a_w).await?
        );

        // A's handoff names its waiter's ticket on the channel both listen on.
        assert!(a_held.release().await?);
        let a_g = tokio::time::timeout(DEADLINE, a_waiting).await???;
        here.sentinel().await?;
        assert!(
            !waiting.is_finished(),
            "a waiter here took a handoff of another schema's table: {:?}",
            (&mut waiting).await.map(|g| g.map(|g| g.fencing_token()))
        );
        assert_eq!(here.holder("handoff").await?.0, held.owner().to_string());
        assert_eq!(
            here.queued("handoff").await?,
            1,
            "the waiter here kept its place"
        );

        // Its own handoff it takes, with this table's grant.
        let token = held.fencing_token();
        assert!(held.release().await?);
        let g = tokio::time::timeout(DEADLINE, waiting).await???;
        assert_eq!(
            here.holder("handoff").await?,
            (w.owner().to_string(), g.fencing_token())
        );
        assert!(g.fencing_token() > token);
        assert!(g.release().await?);
        assert!(a_g.release().await?);
        a.drop_schema(&admin).await?;
        here.drop_schema(&admin).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_forged_notification_grants_nothing() -> anyhow::Result<()> {
    for b in common::backends_of("fair_notify_forged", &[Dialect::Postgres]).await {
        let admin = admin(&b).await?;
        let here = App::new(&admin, b.url(), "forged").await?;
        let held = here.locker.acquire("forged").await?;
        let (w, mut waiting) = here.waiter("forged").await?;
        let ticket = here.ticket("forged", &w).await?;
        let oid = here
            .scalar(format!(
                "SELECT CAST(CAST('{TABLE}' AS regclass) AS oid)::BIGINT"
            ))
            .await?;
        let token = held.fencing_token();

        // Anyone who may call pg_notify names the waiter's ticket with the holder's
        // token, in the payload this version sends and in the one before, and sends
        // some that name nothing.
        let channel = format!("{TABLE}_granted");
        let far = 4_102_444_800_000_000_i64; // 2100-01-01, in microseconds
        for payload in [
            format!("{oid}:{ticket}:{token}:forged"),
            format!("{ticket}:{token}:{far}"),
            format!("{oid}:{ticket}:0:forged"),
            format!("{oid}:{ticket}:{token}"),
            "nonsense".to_owned(),
            String::new(),
        ] {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&channel)
                .bind(&payload)
                .execute(&admin)
                .await?;
        }
        here.sentinel().await?;
        assert!(
            !waiting.is_finished(),
            "a forged notification gave a waiter a guard: {:?}",
            (&mut waiting).await.map(|g| g.map(|g| g.fencing_token()))
        );
        assert_eq!(
            here.holder("forged").await?,
            (held.owner().to_string(), token)
        );
        assert_eq!(here.queued("forged").await?, 1, "the waiter kept its place");

        // Served in its turn.
        assert!(held.release().await?);
        let g = tokio::time::timeout(DEADLINE, waiting).await???;
        assert_eq!(
            here.holder("forged").await?,
            (w.owner().to_string(), g.fencing_token())
        );
        assert!(g.fencing_token() > token);
        assert!(g.release().await?);
        here.drop_schema(&admin).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_release_in_another_schema_wakes_nobody_here() -> anyhow::Result<()> {
    for b in common::backends_of("fair_notify_released", &[Dialect::Postgres]).await {
        let admin = admin(&b).await?;
        let a = App::new(&admin, b.url(), "ra").await?;
        let here = App::new(&admin, b.url(), "rb").await?;
        let name = format!("fair_notify_waiter_{}", std::process::id());
        let holder = here.lease("fair_notify_holder").await?;
        let waiter = here.lease(&name).await?;
        // The waiter's listener is up, and has read past every notification sent before
        // a fair handoff of `key` to a waiter of its family, once that waiter holds. Up
        // before the wait below begins, it wakes nobody on connecting while it waits.
        let handoff = |key: &'static str| {
            let (holder, w) = (holder.clone(), waiter.new_handle());
            let here = &here;
            async move {
                let s = holder.lock(key).strategy(Strategy::Fair).acquire().await?;
                let waiting =
                    tokio::spawn(
                        async move { w.lock(key).strategy(Strategy::Fair).acquire().await },
                    );
                common::fair::until(|| async { Ok(here.queued(key).await? == 1) }).await?;
                assert!(s.release().await?);
                let g = tokio::time::timeout(DEADLINE, waiting).await???;
                assert!(g.release().await?);
                anyhow::Ok(())
            }
        };
        handoff("released-warm").await?;
        let held = holder.acquire("released").await?;
        let mut waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move { waiter.acquire("released").await }
        });
        // Waiting, once its first attempt found the key held (its connection is idle
        // after an acquisition): a guard from then on comes from a wake-up, its polls
        // being minutes apart.
        let attempted = format!(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = '{name}' \
             AND state = 'idle' AND query LIKE '%INSERT INTO \"{TABLE}\"%'"
        );
        common::fair::until(|| async { Ok(here.scalar(attempted.clone()).await? > 0) }).await?;
        assert!(!waiting.is_finished(), "the waiter got a held lock");
        // The lease lapses without a release (nothing announced): only a wake-up sends
        // the waiter to find it free before its next poll.
        here.scalar(format!(
            "WITH e AS (UPDATE {TABLE} SET expires_at = statement_timestamp() \
             - INTERVAL '1 second' WHERE lock_key = 'released' RETURNING 1) SELECT COUNT(*) FROM e"
        ))
        .await?;

        // A release of the same key in the other schema's table, on the shared channel.
        let other = a.lease("fair_notify_other").await?;
        assert!(other.acquire("released").await?.release().await?);
        // The waiter's listener has read past the other schema's release.
        handoff("released-sentinel").await?;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "a release of another schema's table woke a waiter here: {:?}",
            (&mut waiting).await.map(|g| g.map(|g| g.fencing_token()))
        );
        drop(held);
        waiting.abort();
        a.drop_schema(&admin).await?;
        here.drop_schema(&admin).await?;
    }
    Ok(())
}
