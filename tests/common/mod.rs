//! Test support: the backends every test runs on, each with a table of the test's own.
//!
//! PostgreSQL and MariaDB are reached at `SQLOCK_TEST_POSTGRES_URL` and
//! `SQLOCK_TEST_MYSQL_URL` (defaults: the loopback servers `scripts/db-up.sh` starts).
//! SQLite needs no server: each test gets a file of its own. When a server cannot be
//! reached, the test fails if `CI=true` or `SQLOCK_REQUIRE_SERVERS=1`, and otherwise
//! says loudly on stderr which backend it left out.

#![allow(dead_code, unreachable_pub)]

pub mod clock;
pub mod contention;
pub mod fair;
pub mod history;
pub mod kill;
pub mod partition;
pub mod permits;
#[cfg(feature = "metrics")]
pub mod recorded;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use sqlock::{DbPool, Dialect, Locker, LockerBuilder};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

pub const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// Waits until `f` holds, polling every 10 ms for 30 s at most (background releases and
/// renewals take a moment on a loaded machine): whether it held.
pub async fn eventually<F, Fut>(mut f: F) -> anyhow::Result<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        if f().await? {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f().await
}

/// One database to run a test on, with a lock table named after the test.
#[derive(Debug, Clone)]
pub struct Backend {
    pub dialect: Dialect,
    pub table: String,
    url: String,
}

fn servers_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("SQLOCK_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// Whether the servers are left out on purpose (`SQLOCK_TEST_SQLITE_ONLY=1`, the quick
/// path of `scripts/quick-test.sh`): then every test runs on SQLite alone, and a test
/// of the servers alone runs on nothing. Refused beside a requirement of the servers.
fn sqlite_only() -> bool {
    let only = std::env::var("SQLOCK_TEST_SQLITE_ONLY").is_ok_and(|v| v == "1");
    assert!(
        !(only && servers_required()),
        "SQLOCK_TEST_SQLITE_ONLY=1 leaves out the servers that CI=true or \
         SQLOCK_REQUIRE_SERVERS=1 requires"
    );
    only
}

pub fn postgres_url() -> String {
    std::env::var("SQLOCK_TEST_POSTGRES_URL").unwrap_or_else(|_| POSTGRES_URL.into())
}

pub fn mysql_url() -> String {
    std::env::var("SQLOCK_TEST_MYSQL_URL").unwrap_or_else(|_| MYSQL_URL.into())
}

/// The SQLite file of a test's table: named after the test process, or after the
/// process in `SQLOCK_TEST_PARENT_PID`, for a helper process of a test that must open
/// its parent's file.
fn sqlite_path(table: &str) -> PathBuf {
    let pid = std::env::var("SQLOCK_TEST_PARENT_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or_else(std::process::id);
    std::env::temp_dir().join(format!("sqlock-test-{pid}-{table}.db"))
}

/// The backends a test runs on: SQLite always, the servers when reachable (or required).
/// `name` becomes the test's table name, so tests never share rows.
pub async fn backends(name: &str) -> Vec<Backend> {
    backends_of(name, &[Dialect::Sqlite, Dialect::Postgres, Dialect::MySql]).await
}

/// Runs `body` on every one of `backends` at once, each in a task of its own, and
/// waits for them all: the backends share nothing (each has a server or a file of its
/// own), so a test that waits out TTLs waits them out once rather than once per
/// backend. A body's panic is raised again here; the first error comes back with its
/// backend named.
pub async fn on_each<F, Fut>(backends: Vec<Backend>, body: F) -> anyhow::Result<()>
where
    F: Fn(Backend) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut runs = tokio::task::JoinSet::new();
    for b in backends {
        let dialect = b.dialect;
        let run = body(b);
        runs.spawn(async move { (dialect, run.await) });
    }
    let mut first = None;
    while let Some(done) = runs.join_next().await {
        match done {
            Ok((_, Ok(()))) => {}
            Ok((dialect, Err(e))) => {
                first.get_or_insert(e.context(format!("on {dialect}")));
            }
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => return Err(e.into()),
        }
    }
    first.map_or(Ok(()), Err)
}

/// The server backends only (PostgreSQL and MariaDB).
pub async fn servers(name: &str) -> Vec<Backend> {
    backends_of(name, &[Dialect::Postgres, Dialect::MySql]).await
}

pub async fn backends_of(name: &str, dialects: &[Dialect]) -> Vec<Backend> {
    let urls = dialects.iter().map(|&d| {
        let url = match d {
            Dialect::Postgres => postgres_url(),
            Dialect::MySql => mysql_url(),
            _ => format!("sqlite://{}", sqlite_path(name).display()),
        };
        (d, url)
    });
    connect_all(name, urls.collect()).await
}

/// The server instances of the fault tests' own (`scripts/fault-db.sh up`), which those
/// tests stop and start: `SQLOCK_TEST_FAULT_POSTGRES_URL`, `SQLOCK_TEST_FAULT_MYSQL_URL`.
pub async fn fault_servers(name: &str) -> Vec<Backend> {
    let pg = std::env::var("SQLOCK_TEST_FAULT_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5433/test".into());
    let my = std::env::var("SQLOCK_TEST_FAULT_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3307/test".into());
    connect_all(name, vec![(Dialect::Postgres, pg), (Dialect::MySql, my)]).await
}

/// The fault instances' script, which the tests that stop, crash and start them run.
pub const FAULT_DB_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fault-db.sh");

/// Runs `scripts/fault-db.sh <server> <action>` (`postgres` or `mysql`; `stop`,
/// `start`, `crash`, ...): done when the script is.
pub async fn fault_db(server: &str, action: &str) -> anyhow::Result<()> {
    let status = tokio::process::Command::new("bash")
        .args([FAULT_DB_SCRIPT, server, action])
        .status()
        .await?;
    anyhow::ensure!(status.success(), "fault-db.sh {server} {action}: {status}");
    Ok(())
}

/// The port of a loopback server URL.
pub fn port_of(url: &str) -> anyhow::Result<u16> {
    let authority = url.split('/').nth(2).context("a server URL")?;
    let port = authority.rsplit(':').next().context("a port")?;
    port.parse().with_context(|| format!("the port of {url}"))
}

/// A server of the pooler and cluster tests' own (`scripts/ha.sh up`): the URL in the
/// environment variable `env`, or `default`. Empty when it cannot be reached and
/// servers are not required; a failure when they are.
pub async fn ha_server(name: &str, dialect: Dialect, env: &str, default: &str) -> Vec<Backend> {
    let url = std::env::var(env).unwrap_or_else(|_| default.into());
    connect_all(name, vec![(dialect, url)]).await
}

async fn connect_all(name: &str, urls: Vec<(Dialect, String)>) -> Vec<Backend> {
    let mut out = Vec::new();
    for (dialect, url) in urls {
        if dialect != Dialect::Sqlite && sqlite_only() {
            continue;
        }
        let backend = Backend {
            dialect,
            table: name.to_owned(),
            url,
        };
        match backend.pool().await {
            Ok(pool) => {
                pool.close().await;
                out.push(backend);
            }
            Err(e) if servers_required() || dialect == Dialect::Sqlite => {
                panic!("{dialect} is required but cannot be reached: {e:#}")
            }
            Err(e) => eprintln!(
                "NOTE: {dialect} unreachable, test {name} runs without it ({e:#}); \
                 run scripts/db-up.sh and scripts/fault-db.sh up, or set CI=true to make \
                 this an error"
            ),
        }
    }
    out
}

impl Backend {
    /// The database URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The SQLite database file of the test's table.
    pub fn sqlite_file(&self) -> PathBuf {
        sqlite_path(&self.table)
    }

    /// A new, independent pool: as another process would have.
    pub async fn pool(&self) -> anyhow::Result<DbPool> {
        self.pool_with(8).await
    }

    pub async fn pool_with(&self, max_connections: u32) -> anyhow::Result<DbPool> {
        self.connect(max_connections, None).await
    }

    /// A new pool of `max_connections`, its statement cache `cache` long when set
    /// (sqlx's default otherwise).
    async fn connect(&self, max_connections: u32, cache: Option<usize>) -> anyhow::Result<DbPool> {
        use std::str::FromStr;
        let timeout = Duration::from_secs(10);
        Ok(match self.dialect {
            Dialect::Postgres => {
                let mut options = sqlx::postgres::PgConnectOptions::from_str(&self.url)?;
                if let Some(cache) = cache {
                    options = options.statement_cache_capacity(cache);
                }
                PgPoolOptions::new()
                    .max_connections(max_connections)
                    .acquire_timeout(timeout)
                    .connect_with(options)
                    .await
                    .with_context(|| format!("connecting to {}", self.url))?
                    .into()
            }
            Dialect::MySql => {
                let mut options = sqlx::mysql::MySqlConnectOptions::from_str(&self.url)?;
                if let Some(cache) = cache {
                    options = options.statement_cache_capacity(cache);
                }
                MySqlPoolOptions::new()
                    .max_connections(max_connections)
                    .acquire_timeout(timeout)
                    .connect_with(options)
                    .await
                    .with_context(|| format!("connecting to {}", self.url))?
                    .into()
            }
            _ => {
                let mut options = SqliteConnectOptions::new()
                    .filename(sqlite_path(&self.table))
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(10));
                if let Some(cache) = cache {
                    options = options.statement_cache_capacity(cache);
                }
                SqlitePoolOptions::new()
                    .max_connections(max_connections)
                    .acquire_timeout(timeout)
                    .connect_with(options)
                    .await?
                    .into()
            }
        })
    }

    /// A builder on a new pool, set to this test's table; with
    /// `SQLOCK_TEST_SERVER_WAITS=0` in the environment, its waiters never wait in the
    /// server (`LockerBuilder::server_waits`), so that the suite can be run with that
    /// off too.
    pub async fn builder(&self) -> anyhow::Result<LockerBuilder> {
        let builder = Locker::builder(self.pool().await?).table(&self.table);
        Ok(match std::env::var("SQLOCK_TEST_SERVER_WAITS") {
            Ok(n) => builder.server_waits(n.parse()?),
            Err(_) => builder,
        })
    }

    /// A builder on a new pool that connects unlike the others of this process, as
    /// another process's would as far as sqlock can tell: its statement cache holds one
    /// statement fewer than sqlx's default (nothing else changes). Releases of its
    /// handles do not wake this process's other waiters, nor theirs its own (wake-ups
    /// within a process reach only handles whose pools connect alike), so a test sees
    /// what notifications or polls wake alone.
    pub async fn builder_apart(&self) -> anyhow::Result<LockerBuilder> {
        self.builder_apart_as(0).await
    }

    /// [`builder_apart`](Self::builder_apart) for the `n`th process of a test that needs
    /// several apart (0 to 9): each connects unlike every other.
    pub async fn builder_apart_as(&self, n: usize) -> anyhow::Result<LockerBuilder> {
        const APART: usize = 99;
        let pool = self.connect(8, Some(APART - n.min(9))).await?;
        Ok(Locker::builder(pool).table(&self.table))
    }

    /// A handle on a new pool, on this test's table.
    pub async fn locker(&self) -> anyhow::Result<Locker> {
        Ok(self.builder().await?.build()?)
    }

    /// Drops and creates the test's table, so the test starts from nothing.
    pub async fn fresh_table(&self) -> anyhow::Result<Locker> {
        let locker = self.locker().await?;
        let t = &self.table;
        let drop = match self.dialect {
            Dialect::Postgres => {
                format!(
                    "DROP TABLE IF EXISTS \"{t}\"; DROP SEQUENCE IF EXISTS \"{t}_fence_seq\"; \
                     DROP TABLE IF EXISTS \"{t}_leaders\"; DROP TABLE IF EXISTS \"{t}_queue\"; \
                     DROP TABLE IF EXISTS \"{t}_quorum\";"
                )
            }
            Dialect::MySql => {
                format!("DROP TABLE IF EXISTS `{t}`; DROP TABLE IF EXISTS `{t}_fence`; DROP SEQUENCE IF EXISTS `{t}_fence_seq`; DROP TABLE IF EXISTS `{t}_leaders`; DROP TABLE IF EXISTS `{t}_queue`; DROP TABLE IF EXISTS `{t}_quorum`;")
            }
            _ => format!(
                "DROP TABLE IF EXISTS \"{t}\"; DROP TABLE IF EXISTS \"{t}_fence\"; \
                 DROP TRIGGER IF EXISTS \"{t}_fence_floor\"; DROP TABLE IF EXISTS \"{t}_leaders\"; \
                 DROP TABLE IF EXISTS \"{t}_queue\"; DROP TABLE IF EXISTS \"{t}_quorum\";"
            ),
        };
        self.script(locker.pool(), &drop).await?;
        locker.create_table().await?;
        Ok(locker)
    }

    /// Runs raw SQL (test set-up and inspection only).
    pub async fn script(&self, pool: &DbPool, sql: &str) -> anyhow::Result<()> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match pool {
            DbPool::Postgres(p) => {
                sqlx::raw_sql(sql).execute(p).await?;
            }
            DbPool::MySql(p) => {
                sqlx::raw_sql(sql).execute(p).await?;
            }
            DbPool::Sqlite(p) => {
                sqlx::raw_sql(sql).execute(p).await?;
            }
            _ => anyhow::bail!("unknown pool"),
        }
        Ok(())
    }

    /// A query that returns one integer.
    pub async fn scalar(&self, pool: &DbPool, sql: &str) -> anyhow::Result<i64> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        Ok(match pool {
            DbPool::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
            DbPool::MySql(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
            DbPool::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
            _ => anyhow::bail!("unknown pool"),
        })
    }

    /// The table name quoted for this dialect, for hand-written test SQL.
    pub fn quoted(&self) -> String {
        match self.dialect {
            Dialect::MySql => format!("`{}`", self.table),
            _ => format!("\"{}\"", self.table),
        }
    }

    /// Makes the lease on `key` look expired by moving its expiry into the past, as
    /// if its TTL had run out (rather than sleeping through a TTL).
    pub async fn expire(&self, pool: &DbPool, key: &str) -> anyhow::Result<()> {
        let t = self.quoted();
        let sql = match self.dialect {
            Dialect::Postgres => format!(
                "UPDATE {t} SET expires_at = statement_timestamp() - INTERVAL '1 second' WHERE lock_key = '{key}'"
            ),
            Dialect::MySql => format!(
                "UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE lock_key = '{key}'"
            ),
            _ => format!(
                "UPDATE {t} SET expires_at = expires_at - 3600000000 WHERE lock_key = '{key}'"
            ),
        };
        self.script(pool, &sql).await
    }

    /// Deletes the row of `key`, as the sweeper would.
    pub async fn delete_row(&self, pool: &DbPool, key: &str) -> anyhow::Result<()> {
        let sql = format!("DELETE FROM {} WHERE lock_key = '{key}'", self.quoted());
        self.script(pool, &sql).await
    }

    /// How many rows of the table are held (locked and unexpired).
    pub async fn held_rows(&self, pool: &DbPool) -> anyhow::Result<i64> {
        let t = self.quoted();
        let now = match self.dialect {
            Dialect::Postgres => "statement_timestamp()",
            Dialect::MySql => "UTC_TIMESTAMP(6)",
            _ => "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
        };
        self.scalar(
            pool,
            &format!("SELECT COUNT(*) FROM {t} WHERE locked AND expires_at > {now}"),
        )
        .await
    }
}
