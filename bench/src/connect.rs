//! The pool a run measures through, chosen for measuring.
//!
//! One connection per worker and a few spare, no ping before each use (sqlx pings by
//! default, which would add a round trip to every cycle of the library and the raw
//! baseline alike), a bounded connect whose failure names its cause, and SQLite in WAL
//! mode with a busy timeout, as the `sqlock` tool sets them.

use std::str::FromStr;
use std::time::Duration;

use sqlock::{DbPool, Dialect};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{ConnectOptions, Connection as _};

use crate::failure::Failure;

/// The database used when no URL is given: the `sqlock` tool's embedded default.
pub(crate) const DEFAULT_DATABASE_URL: &str = "sqlite:sqlock.db";

/// How long connecting may take before the database counts as unreachable; also how
/// long a statement waits for a pooled connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long SQLite waits for another writer before reporting it busy.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL from `--database-url`, else `SQLOCK_DATABASE_URL`, else `DATABASE_URL`,
/// else [`DEFAULT_DATABASE_URL`], as the `sqlock` tool finds it.
pub(crate) fn database_url(flag: Option<&str>) -> String {
    flag.map(str::to_owned)
        .or_else(|| std::env::var("SQLOCK_DATABASE_URL").ok())
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned())
}

/// Connects to `url` with a pool of at most `max_connections`.
///
/// On a server, one connection is made directly first: a pool retries a refused
/// connection until its timeout and then reports only that it timed out, while the
/// direct attempt fails at once with its cause. The pool then connects lazily.
pub(crate) async fn connect(url: &str, max_connections: u32) -> Result<DbPool, Failure> {
    let bad_url = |e: sqlx::Error| Failure::Usage(format!("invalid database url: {e}"));
    let dialect = Dialect::from_url(url).ok_or_else(|| {
        Failure::Usage("unsupported database url: expected postgres://, mysql:// or sqlite:".into())
    })?;
    Ok(match dialect {
        Dialect::Postgres => {
            let options = PgConnectOptions::from_str(url).map_err(bad_url)?;
            probe(&options).await?;
            PgPoolOptions::new()
                .max_connections(max_connections)
                .test_before_acquire(false)
                .acquire_timeout(CONNECT_TIMEOUT)
                .connect_lazy_with(options)
                .into()
        }
        Dialect::MySql => {
            let options = MySqlConnectOptions::from_str(url).map_err(bad_url)?;
            probe(&options).await?;
            MySqlPoolOptions::new()
                .max_connections(max_connections)
                .test_before_acquire(false)
                .acquire_timeout(CONNECT_TIMEOUT)
                .connect_lazy_with(options)
                .into()
        }
        Dialect::Sqlite => {
            let options = SqliteConnectOptions::from_str(url)
                .map_err(bad_url)?
                .create_if_missing(true)
                // The workers share the file: readers must not block the writer, and a
                // writer waits for another rather than failing at once.
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT);
            // Eager: opening a local file fails at once, with its cause.
            SqlitePoolOptions::new()
                .max_connections(max_connections)
                .test_before_acquire(false)
                .acquire_timeout(CONNECT_TIMEOUT)
                .connect_with(options)
                .await
                .map_err(|e| unreachable(&e))?
                .into()
        }
        // A dialect a newer library knows and this benchmark does not.
        other => {
            return Err(Failure::Usage(format!(
                "the {other} dialect is not supported"
            )))
        }
    })
}

/// One direct connection, closed again, to learn whether the server can be used.
async fn probe<O>(options: &O) -> Result<(), Failure>
where
    O: ConnectOptions,
    O::Connection: Sized,
{
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            // Closing politely is a courtesy to the server; failing to is no error.
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(unreachable(&e)),
        Err(_) => Err(Failure::Unavailable(format!(
            "cannot connect to the database: no answer within {}s",
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

/// The URL itself is left out of the message: it may carry a password.
fn unreachable(e: &sqlx::Error) -> Failure {
    Failure::Unavailable(format!("cannot connect to the database: {e}"))
}

/// A pool of a few connections on `db`'s server that connects unlike any other of this
/// process (its statement cache's size is the worker's own), as another process's
/// would as far as the library can tell.
pub(crate) async fn apart(db: &DbPool, me: usize) -> Result<DbPool, Failure> {
    let cache = 64 + me;
    let unreachable =
        |e: sqlx::Error| Failure::Unavailable(format!("connecting a worker apart: {e}"));
    Ok(match db {
        DbPool::Postgres(p) => {
            let options = p
                .connect_options()
                .as_ref()
                .clone()
                .statement_cache_capacity(cache);
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await
                .map_err(unreachable)?
                .into()
        }
        DbPool::MySql(p) => {
            let options = p
                .connect_options()
                .as_ref()
                .clone()
                .statement_cache_capacity(cache);
            sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await
                .map_err(unreachable)?
                .into()
        }
        DbPool::Sqlite(p) => {
            let options = p
                .connect_options()
                .as_ref()
                .clone()
                .statement_cache_capacity(cache);
            sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await
                .map_err(unreachable)?
                .into()
        }
        _ => return Err(Failure::Other("a pool of an unknown database".into())),
    })
}
