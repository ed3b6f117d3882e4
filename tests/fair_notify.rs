//! A notification is a hint (PostgreSQL, `notify_waiters`): a fair waiter holds only
//! once a statement of its own has found its grant in the table.
//!
//! Two applications whose lock tables share a name in two schemas of one database
//! share the notification channels, and number their waiters' tickets alike: a handoff
//! in one never gives the other's waiter of the same ticket a guard. A notification
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
            .connect_with(options)
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
            pool,
            locker,
        })
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

    /// A handoff of the key `s` to a waiter of its own, in this application: once it
    /// holds, the application's listener has read every notification sent before the
    /// handoff committed (a listener reads them in order of commit).
    async fn sentinel(&self) -> anyhow::Result<()> {
        let held = self.locker.acquire("s").await?;
        let (_, waiting) = self.waiter("s").await?;
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
        let held = here.locker.acquire("k").await?;
        let (w, mut waiting) = here.waiter("k").await?;
        let a_held = a.locker.acquire("k").await?;
        let (a_w, a_waiting) = a.waiter("k").await?;
        assert_eq!(here.ticket("k", &w).await?, a.ticket("k", &a_w).await?);

        // A's handoff names its waiter's ticket on the channel both listen on.
        assert!(a_held.release().await?);
        let a_g = tokio::time::timeout(DEADLINE, a_waiting).await???;
        here.sentinel().await?;
        assert!(
            !waiting.is_finished(),
            "a waiter here took a handoff of another schema's table: {:?}",
            (&mut waiting).await.map(|g| g.map(|g| g.fencing_token()))
        );
        assert_eq!(here.holder("k").await?.0, held.owner().to_string());
        assert_eq!(here.queued("k").await?, 1, "the waiter here kept its place");

        // Its own handoff it takes, with this table's grant.
        let token = held.fencing_token();
        assert!(held.release().await?);
        let g = tokio::time::timeout(DEADLINE, waiting).await???;
        assert_eq!(
            here.holder("k").await?,
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
        let held = here.locker.acquire("k").await?;
        let (w, mut waiting) = here.waiter("k").await?;
        let ticket = here.ticket("k", &w).await?;
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
            format!("{oid}:{ticket}:{token}:k"),
            format!("{ticket}:{token}:{far}"),
            format!("{oid}:{ticket}:0:k"),
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
        assert_eq!(here.holder("k").await?, (held.owner().to_string(), token));
        assert_eq!(here.queued("k").await?, 1, "the waiter kept its place");

        // Served in its turn.
        assert!(held.release().await?);
        let g = tokio::time::timeout(DEADLINE, waiting).await???;
        assert_eq!(
            here.holder("k").await?,
            (w.owner().to_string(), g.fencing_token())
        );
        assert!(g.fencing_token() > token);
        assert!(g.release().await?);
        here.drop_schema(&admin).await?;
    }
    Ok(())
}
