//! Connections a test can end on the server without touching its neighbours': tagged
//! by application_name on PostgreSQL, opened as a user of their own on MariaDB.

use std::str::FromStr;

use sqlock::{DbPool, Dialect};
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::Executor;

use super::Backend;

/// How a killable pool is set up.
#[derive(Debug, Clone, Copy)]
pub struct Killable {
    /// The tag: an application_name, or a MariaDB user name (16 bytes at most).
    pub name: &'static str,
    pub max_connections: u32,
    /// Not pinged before use, so that a kill hits the next statement.
    pub ping: bool,
    /// Sessions end a transaction left idle this many seconds.
    pub idle_timeout_s: Option<u32>,
}

/// A pool whose connections [`kill`] ends.
pub async fn pool(b: &Backend, k: Killable) -> anyhow::Result<DbPool> {
    let idle = k.idle_timeout_s;
    Ok(match b.dialect {
        Dialect::Postgres => {
            let options =
                PgConnectOptions::from_str(&super::postgres_url())?.application_name(k.name);
            PgPoolOptions::new()
                .max_connections(k.max_connections)
                .test_before_acquire(k.ping)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        if let Some(s) = idle {
                            let set = format!("SET idle_in_transaction_session_timeout = '{s}s'");
                            conn.execute(sqlx::AssertSqlSafe(set)).await?;
                        }
                        Ok(())
                    })
                })
                .connect_with(options)
                .await?
                .into()
        }
        _ => {
            let admin = b.pool().await?;
            let name = k.name;
            b.script(
                &admin,
                &format!(
                    "CREATE USER IF NOT EXISTS '{name}'@'127.0.0.1' IDENTIFIED BY 'kill';
                     GRANT ALL PRIVILEGES ON *.* TO '{name}'@'127.0.0.1';"
                ),
            )
            .await?;
            let options = MySqlConnectOptions::from_str(&super::mysql_url())?
                .username(name)
                .password("kill");
            MySqlPoolOptions::new()
                .max_connections(k.max_connections)
                .test_before_acquire(k.ping)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        if let Some(s) = idle {
                            let set = format!("SET SESSION idle_transaction_timeout = {s}");
                            conn.execute(sqlx::AssertSqlSafe(set)).await?;
                        }
                        Ok(())
                    })
                })
                .connect_with(options)
                .await?
                .into()
        }
    })
}

/// MariaDB's error for a KILL of a connection that has ended already (ER_NO_SUCH_THREAD).
const NO_SUCH_THREAD: u16 = 1094;

/// Ends, on the server, every connection tagged `name`; returns how many it ended. A
/// connection that ended by itself between the listing and its kill is not counted;
/// any other failure to kill one is an error.
pub async fn kill(b: &Backend, admin: &DbPool, name: &str) -> anyhow::Result<i64> {
    match b.dialect {
        Dialect::Postgres => {
            // pg_terminate_backend answers false (with a warning) for a backend that
            // is gone already, and fails on any other cause.
            b.scalar(
                admin,
                &format!(
                    "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) AS ended \
                     FROM pg_stat_activity WHERE application_name = '{name}') t WHERE ended"
                ),
            )
            .await
        }
        _ => {
            let DbPool::MySql(p) = admin else {
                anyhow::bail!("not a MariaDB pool")
            };
            let ids: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{name}'"
            )))
            .fetch_all(p)
            .await?;
            let mut killed = 0;
            for id in &ids {
                let kill = format!("KILL CONNECTION {id}");
                match sqlx::raw_sql(sqlx::AssertSqlSafe(kill)).execute(p).await {
                    Ok(_) => killed += 1,
                    Err(sqlx::Error::Database(e))
                        if e.try_downcast_ref::<MySqlDatabaseError>()
                            .is_some_and(|e| e.number() == NO_SUCH_THREAD) => {}
                    Err(e) => anyhow::bail!("KILL CONNECTION {id} ({name}): {e}"),
                }
            }
            Ok(killed)
        }
    }
}
