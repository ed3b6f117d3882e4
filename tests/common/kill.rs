//! Connections a test can end on the server without touching its neighbours': tagged
//! by application_name on PostgreSQL, opened as a user of their own on MariaDB.

use std::str::FromStr;

use sqlock::{DbPool, Dialect};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
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

/// Ends, on the server, every connection tagged `name`; returns how many there were.
pub async fn kill(b: &Backend, admin: &DbPool, name: &str) -> anyhow::Result<i64> {
    match b.dialect {
        Dialect::Postgres => {
            b.scalar(
                admin,
                &format!(
                    "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE application_name = '{name}'"
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
            for id in &ids {
                // It may have ended already.
                let _ = b.script(admin, &format!("KILL CONNECTION {id}")).await;
            }
            Ok(ids.len() as i64)
        }
    }
}
