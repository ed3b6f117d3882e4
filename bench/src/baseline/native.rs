//! The native baseline: the servers' own session locks, PostgreSQL's advisory locks
//! and MariaDB's `GET_LOCK`, with nothing written to a table.

use std::time::{Duration, Instant};

use sqlock::DbPool;

/// A number for a key, for PostgreSQL's advisory locks (FNV-1a).
fn key_number(key: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// A connection holding or taking a server's native session lock: PostgreSQL's
/// advisory locks or MariaDB's `GET_LOCK`. Session locks belong to their connection, so
/// a lock and its unlock go through the same one.
pub(crate) enum NativeConn {
    /// PostgreSQL: `pg_try_advisory_lock` / `pg_advisory_lock` / `pg_advisory_unlock`.
    Postgres(sqlx::pool::PoolConnection<sqlx::Postgres>),
    /// MariaDB: `GET_LOCK(key, 0)` / `GET_LOCK(key, 10)` / `RELEASE_LOCK`.
    MySql(sqlx::pool::PoolConnection<sqlx::MySql>),
}

impl NativeConn {
    /// A connection of the pool; an error on SQLite, which has no such locks.
    pub(crate) async fn acquire(db: &DbPool) -> Result<Self, sqlx::Error> {
        match db {
            DbPool::Postgres(pool) => Ok(Self::Postgres(pool.acquire().await?)),
            DbPool::MySql(pool) => Ok(Self::MySql(pool.acquire().await?)),
            _ => Err(sqlx::Error::Protocol("SQLite has no native lock".into())),
        }
    }

    /// Takes the lock on `key`: at once or not at all, or with `wait`, waiting for it.
    pub(crate) async fn lock(&mut self, key: &str, wait: bool) -> Result<bool, sqlx::Error> {
        use sqlx::Row;
        match self {
            Self::Postgres(conn) => {
                let n = key_number(key);
                if wait {
                    sqlx::query("SELECT pg_advisory_lock($1)")
                        .bind(n)
                        .execute(&mut **conn)
                        .await?;
                    return Ok(true);
                }
                sqlx::query("SELECT pg_try_advisory_lock($1)")
                    .bind(n)
                    .fetch_one(&mut **conn)
                    .await?
                    .try_get(0)
            }
            Self::MySql(conn) => {
                let got: Option<i64> = sqlx::query("SELECT GET_LOCK(?, ?)")
                    .bind(key)
                    .bind(if wait { 10_i64 } else { 0 })
                    .fetch_one(&mut **conn)
                    .await?
                    .try_get(0)?;
                Ok(got == Some(1))
            }
        }
    }

    /// Gives the lock on `key` back.
    pub(crate) async fn unlock(&mut self, key: &str) -> Result<(), sqlx::Error> {
        match self {
            Self::Postgres(conn) => sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(key_number(key))
                .execute(&mut **conn)
                .await
                .map(drop),
            Self::MySql(conn) => sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(key)
                .execute(&mut **conn)
                .await
                .map(drop),
        }
    }
}

/// One acquisition and release of the server's native lock on `key`, on a connection
/// taken from the pool for the two statements.
pub(crate) async fn cycle(db: &DbPool, key: &str) -> Result<Option<Duration>, sqlx::Error> {
    let mut conn = NativeConn::acquire(db).await?;
    let started = Instant::now();
    if !conn.lock(key, false).await? {
        return Ok(None);
    }
    let latency = started.elapsed();
    conn.unlock(key).await?;
    Ok(Some(latency))
}
