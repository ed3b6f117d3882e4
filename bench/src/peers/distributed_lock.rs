//! The published crates `distributed-lock-postgres` and `distributed-lock-mysql` 0.2:
//! PostgreSQL advisory locks and MariaDB's `GET_LOCK` behind their `DistributedLock`
//! API. They are built on sqlx 0.8, so they get a pool of that sqlx of their own,
//! sized and set up as the benchmark's (no ping before each use).

use std::str::FromStr;
use std::time::Duration;

use distributed_lock_core::error::LockError;
use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_mysql::handle::MySqlLockHandle;
use distributed_lock_mysql::lock::MySqlDistributedLock;
use distributed_lock_mysql::MySqlLockProvider;
use distributed_lock_postgres::handle::PostgresLockHandle;
use distributed_lock_postgres::lock::PostgresDistributedLock;
use distributed_lock_postgres::PostgresLockProvider;
use sqlock::Dialect;

use crate::failure::Failure;

/// How long connecting may take, and how long a lock waits for a pooled connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A provider of the crate for the database, on a pool of its own (kept, to close).
#[derive(Clone)]
pub(crate) enum Provider {
    Postgres(std::sync::Arc<PostgresLockProvider>, sqlx08::PgPool),
    MySql(std::sync::Arc<MySqlLockProvider>, sqlx08::MySqlPool),
}

fn failure(what: &str, e: impl std::fmt::Display) -> Failure {
    Failure::Other(format!("distributed-lock: {what}: {e}"))
}

impl Provider {
    /// Connects to `url` with a pool of at most `size` connections; `None` on SQLite.
    pub(crate) async fn connect(
        url: &str,
        dialect: Dialect,
        size: u32,
    ) -> Result<Option<Self>, Failure> {
        let unreachable = |e: sqlx08::Error| {
            Failure::Unavailable(format!("distributed-lock: cannot connect: {e}"))
        };
        Ok(Some(match dialect {
            Dialect::Postgres => {
                let options = sqlx08::postgres::PgConnectOptions::from_str(url)
                    .map_err(|e| Failure::Usage(format!("invalid database url: {e}")))?;
                let pool = sqlx08::postgres::PgPoolOptions::new()
                    .max_connections(size)
                    .test_before_acquire(false)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect_with(options)
                    .await
                    .map_err(unreachable)?;
                let provider = PostgresLockProvider::builder()
                    .pool(pool.clone())
                    .build()
                    .await
                    .map_err(|e| failure("provider", e))?;
                Self::Postgres(provider.into(), pool)
            }
            Dialect::MySql => {
                let options = sqlx08::mysql::MySqlConnectOptions::from_str(url)
                    .map_err(|e| Failure::Usage(format!("invalid database url: {e}")))?;
                let pool = sqlx08::mysql::MySqlPoolOptions::new()
                    .max_connections(size)
                    .test_before_acquire(false)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect_with(options)
                    .await
                    .map_err(unreachable)?;
                let provider = MySqlLockProvider::builder()
                    .pool(pool.clone())
                    .build()
                    .await
                    .map_err(|e| failure("provider", e))?;
                Self::MySql(provider.into(), pool)
            }
            _ => return Ok(None),
        }))
    }

    /// Closes the crate's pool: its connections end.
    pub(crate) async fn close(&self) {
        match self {
            Self::Postgres(_, pool) => pool.close().await,
            Self::MySql(_, pool) => pool.close().await,
        }
    }
}

/// One worker's lock of the crate: the lock of its key, and its handle while held.
pub(crate) enum Worker {
    Postgres {
        provider: std::sync::Arc<PostgresLockProvider>,
        lock: Option<(String, PostgresDistributedLock)>,
        held: Option<PostgresLockHandle>,
    },
    MySql {
        provider: std::sync::Arc<MySqlLockProvider>,
        lock: Option<(String, MySqlDistributedLock)>,
        held: Option<MySqlLockHandle>,
    },
}

/// The lock of `key` from `provider`, made once per key as a user keeps it.
fn lock_of<'a, P: LockProvider>(
    provider: &P,
    slot: &'a mut Option<(String, P::Lock)>,
    key: &str,
) -> &'a P::Lock {
    if slot.as_ref().is_none_or(|(k, _)| k != key) {
        *slot = Some((key.to_owned(), provider.create_lock(key)));
    }
    &slot.as_ref().expect("BUG: the lock was just made").1
}

impl Worker {
    pub(crate) fn new(provider: &Provider) -> Self {
        match provider {
            Provider::Postgres(p, _) => Self::Postgres {
                provider: p.clone(),
                lock: None,
                held: None,
            },
            Provider::MySql(p, _) => Self::MySql {
                provider: p.clone(),
                lock: None,
                held: None,
            },
        }
    }

    /// `DistributedLock::try_acquire`.
    pub(crate) async fn try_acquire(&mut self, key: &str) -> Result<bool, Failure> {
        let e = |e| failure("try_acquire", e);
        match self {
            Self::Postgres {
                provider,
                lock,
                held,
            } => {
                *held = lock_of(&**provider, lock, key)
                    .try_acquire()
                    .await
                    .map_err(e)?;
                Ok(held.is_some())
            }
            Self::MySql {
                provider,
                lock,
                held,
            } => {
                *held = lock_of(&**provider, lock, key)
                    .try_acquire()
                    .await
                    .map_err(e)?;
                Ok(held.is_some())
            }
        }
    }

    /// `DistributedLock::acquire` with `timeout`: whether it was granted in time.
    pub(crate) async fn acquire(&mut self, key: &str, timeout: Duration) -> Result<bool, Failure> {
        let outcome = match self {
            Self::Postgres {
                provider,
                lock,
                held,
            } => lock_of(&**provider, lock, key)
                .acquire(Some(timeout))
                .await
                .map(|h| *held = Some(h)),
            Self::MySql {
                provider,
                lock,
                held,
            } => lock_of(&**provider, lock, key)
                .acquire(Some(timeout))
                .await
                .map(|h| *held = Some(h)),
        };
        match outcome {
            Ok(()) => Ok(true),
            Err(LockError::Timeout(_)) => Ok(false),
            Err(e) => Err(failure("acquire", e)),
        }
    }

    /// `LockHandle::release`.
    pub(crate) async fn release(&mut self) -> Result<(), Failure> {
        let not_held = || Failure::Other("distributed-lock: released but not held".into());
        let e = |e| failure("release", e);
        match self {
            Self::Postgres { held, .. } => held.take().ok_or_else(not_held)?.release().await,
            Self::MySql { held, .. } => held.take().ok_or_else(not_held)?.release().await,
        }
        .map_err(e)
    }
}
