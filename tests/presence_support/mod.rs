//! What the presence tests read on the server of a handle's marker: the marker a lease
//! records, the session that holds it and the sessions that wait for it; and how they
//! end or interrupt one of those sessions, as an operator, a proxy or a timeout would.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context;
use sqlock::{DbPool, Dialect};

use super::common::Backend;

/// A presence marker as a lease records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// PostgreSQL: the marker's key, and the stamp of the server lifetime it was
    /// recorded on (the high 32 bits of the column).
    Postgres { key: i64, stamp: i64 },
    /// MariaDB: the marker's name.
    MySql(String),
}

/// Whose sessions wait for a MariaDB marker: MariaDB does not say which name a
/// `GET_LOCK` waits for, so a waiter is told by its connection.
#[derive(Debug, Clone, Copy)]
pub enum Who<'a> {
    /// The connections of a user of the test's own.
    User(&'a str),
    /// The connections of a process, by their client ports.
    Process(u32),
    /// Any connection (a fault instance, which no other test uses meanwhile).
    Anyone,
}

fn pg(pool: &DbPool) -> anyhow::Result<&sqlx::PgPool> {
    match pool {
        DbPool::Postgres(p) => Ok(p),
        _ => anyhow::bail!("not a PostgreSQL pool"),
    }
}

fn my(pool: &DbPool) -> anyhow::Result<&sqlx::MySqlPool> {
    match pool {
        DbPool::MySql(p) => Ok(p),
        _ => anyhow::bail!("not a MariaDB pool"),
    }
}

/// The marker the lease on `key` records, if it records one.
pub async fn recorded(b: &Backend, admin: &DbPool, key: &str) -> anyhow::Result<Option<Marker>> {
    let sql = format!(
        "SELECT presence_key FROM {} WHERE lock_key = '{key}'",
        b.quoted()
    );
    marker_of(b, admin, sql).await
}

/// The marker the presence column `sql` selects (one row) reads as.
async fn marker_of(b: &Backend, admin: &DbPool, sql: String) -> anyhow::Result<Option<Marker>> {
    let sql = sqlx::AssertSqlSafe(sql);
    Ok(match b.dialect {
        Dialect::Postgres => {
            let v: Option<i64> = sqlx::query_scalar(sql).fetch_one(pg(admin)?).await?;
            v.map(|v| Marker::Postgres {
                key: v & 0x7fff_ffff,
                stamp: v >> 32,
            })
        }
        _ => {
            let v: Option<String> = sqlx::query_scalar(sql).fetch_one(my(admin)?).await?;
            v.map(Marker::MySql)
        }
    })
}

/// The marker the first place of `key`'s fair queue records, if any (the servers: the
/// place of a waiter with presence records its marker, as a lease does).
pub async fn recorded_place(
    b: &Backend,
    admin: &DbPool,
    key: &str,
) -> anyhow::Result<Option<Marker>> {
    let queue = match b.dialect {
        Dialect::MySql => format!("`{}_queue`", b.table),
        _ => format!("\"{}_queue\"", b.table),
    };
    let sql = format!(
        "SELECT presence_key FROM {queue} WHERE lock_key = '{key}' ORDER BY ticket LIMIT 1"
    );
    marker_of(b, admin, sql).await
}

/// The stamp of the PostgreSQL server's current lifetime, as a lease records it.
pub async fn lifetime(admin: &DbPool) -> anyhow::Result<i64> {
    let sql = "SELECT (((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT) \
               # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter)) \
               * 1000000 AS BIGINT), 0)) & 4294967295) << 32) >> 32";
    Ok(sqlx::query_scalar(sql).fetch_one(pg(admin)?).await?)
}

/// The session that holds `m`, and those that wait for it (by `who`, on MariaDB).
pub async fn sessions(
    b: &Backend,
    admin: &DbPool,
    m: &Marker,
    who: Who<'_>,
) -> anyhow::Result<(Option<i64>, Vec<i64>)> {
    match m {
        Marker::Postgres { key, .. } => {
            let sql = format!(
                "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory' \
                 AND classid = 1936813168 AND objid = {key} AND objsubid = 2"
            );
            let rows: Vec<(i32, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(pg(admin)?)
                .await
                .with_context(|| format!("{}: reading pg_locks", b.dialect))?;
            let holder = rows.iter().find(|r| r.1).map(|r| i64::from(r.0));
            let waiters = rows
                .iter()
                .filter(|r| !r.1)
                .map(|r| i64::from(r.0))
                .collect();
            Ok((holder, waiters))
        }
        Marker::MySql(name) => {
            let p = my(admin)?;
            let holder: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
                .bind(name)
                .fetch_one(p)
                .await?;
            let rows: Vec<(i64, String, String)> = sqlx::query_as(
                "SELECT CAST(ID AS SIGNED), USER, HOST FROM information_schema.PROCESSLIST \
                 WHERE STATE = 'User lock'",
            )
            .fetch_all(p)
            .await?;
            let ports = match who {
                Who::Process(pid) => Some(client_ports(pid)?),
                _ => None,
            };
            let waiters = rows
                .into_iter()
                .filter(|(_, user, host)| match who {
                    Who::User(u) => user == u,
                    Who::Process(_) => host
                        .rsplit(':')
                        .next()
                        .and_then(|p| p.parse::<u16>().ok())
                        .is_some_and(|p| ports.as_ref().is_some_and(|ps| ps.contains(&p))),
                    Who::Anyone => true,
                })
                .map(|(id, _, _)| id)
                .collect();
            Ok((holder, waiters))
        }
    }
}

/// Waits until `m` is held and a session waits for it (the handle's standby): those
/// two sessions.
pub async fn watched(
    b: &Backend,
    admin: &DbPool,
    m: &Marker,
    who: Who<'_>,
) -> anyhow::Result<(i64, i64)> {
    match standby(b, admin, m, who).await? {
        (h, Some(w)) => Ok((h, w)),
        (_, None) => anyhow::bail!("{}: no session waits for the marker {m:?}", b.dialect),
    }
}

/// The session that holds `m`, once it is held, and the one that waits for it once
/// one does, or `None` when none did within 30 s: what a test asserts afterwards, so
/// that its first assertions are about what happens to the leases.
pub async fn standby(
    b: &Backend,
    admin: &DbPool,
    m: &Marker,
    who: Who<'_>,
) -> anyhow::Result<(i64, Option<i64>)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (holder, waiters) = sessions(b, admin, m, who).await?;
        match (holder, &waiters[..]) {
            (Some(h), [w]) => return Ok((h, Some(*w))),
            (Some(h), _) if tokio::time::Instant::now() >= deadline => return Ok((h, None)),
            (None, _) if tokio::time::Instant::now() >= deadline => {
                anyhow::bail!("{}: nobody holds the marker {m:?}", b.dialect)
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Ends session `id` on the server (`pg_terminate_backend`, `KILL CONNECTION`).
pub async fn end(b: &Backend, admin: &DbPool, id: i64) -> anyhow::Result<()> {
    match b.dialect {
        Dialect::Postgres => {
            let ended: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT pg_terminate_backend({id})"
            )))
            .fetch_one(pg(admin)?)
            .await?;
            anyhow::ensure!(ended, "session {id} was not ended");
        }
        _ => {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
                .execute(my(admin)?)
                .await
                .with_context(|| format!("KILL CONNECTION {id}"))?;
        }
    }
    Ok(())
}

/// Interrupts the statement session `id` runs (`pg_cancel_backend`, `KILL QUERY`): the
/// session lives on.
pub async fn interrupt(b: &Backend, admin: &DbPool, id: i64) -> anyhow::Result<()> {
    match b.dialect {
        Dialect::Postgres => {
            let sent: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT pg_cancel_backend({id})"
            )))
            .fetch_one(pg(admin)?)
            .await?;
            anyhow::ensure!(sent, "session {id} was not signalled");
        }
        _ => {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL QUERY {id}")))
                .execute(my(admin)?)
                .await?;
        }
    }
    Ok(())
}

/// Whether session `id` still exists on the server.
pub async fn alive(b: &Backend, admin: &DbPool, id: i64) -> anyhow::Result<bool> {
    let n = match b.dialect {
        Dialect::Postgres => {
            b.scalar(
                admin,
                &format!("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = {id}"),
            )
            .await?
        }
        _ => {
            b.scalar(
                admin,
                &format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}"),
            )
            .await?
        }
    };
    Ok(n > 0)
}

/// The local TCP ports of process `pid`'s sockets: its connections' client ports.
pub fn client_ports(pid: u32) -> anyhow::Result<Vec<u16>> {
    let mut inodes = HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(target) = std::fs::read_link(fd?.path()) else {
            continue; // closed meanwhile
        };
        let target = target.to_string_lossy().into_owned();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
        {
            inodes.insert(inode.to_owned());
        }
    }
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(inode)) = (fields.get(1), fields.get(9)) else {
                continue;
            };
            if inodes.contains(*inode) {
                if let Some(port) = local.rsplit(':').next() {
                    ports.push(u16::from_str_radix(port, 16)?);
                }
            }
        }
    }
    Ok(ports)
}
