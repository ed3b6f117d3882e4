//! sqlx's `PgAdvisoryLock`: a session advisory lock on a connection of the pool, held
//! as its users hold it, with the connection kept out of the pool while it is held.

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgAdvisoryLock, PgPool};
use sqlx::{Either, Postgres};

use crate::failure::{db_failure, Failure};

/// One worker's `PgAdvisoryLock`: the lock of its key, and the connection holding it.
pub(crate) struct Advisory {
    pool: PgPool,
    /// The lock of the last key used, with that key: made once, as a user keeps it.
    lock: Option<(String, PgAdvisoryLock)>,
    held: Option<PoolConnection<Postgres>>,
}

impl Advisory {
    pub(crate) fn new(pool: PgPool) -> Self {
        Self {
            pool,
            lock: None,
            held: None,
        }
    }

    /// The lock of `key` (its name hashed to a number by sqlx).
    fn lock(&mut self, key: &str) -> PgAdvisoryLock {
        match &self.lock {
            Some((k, lock)) if k == key => lock.clone(),
            _ => {
                let lock = PgAdvisoryLock::new(key);
                self.lock = Some((key.to_owned(), lock.clone()));
                lock
            }
        }
    }

    /// `PgAdvisoryLock::try_acquire`; the guard is leaked so that the connection stays
    /// with this worker until [`release`](Self::release).
    pub(crate) async fn try_acquire(&mut self, key: &str) -> Result<bool, Failure> {
        let lock = self.lock(key);
        let conn = self.pool.acquire().await.map_err(db_failure)?;
        match lock.try_acquire(conn).await.map_err(db_failure)? {
            Either::Left(guard) => {
                self.held = Some(guard.leak());
                Ok(true)
            }
            Either::Right(_conn) => Ok(false),
        }
    }

    /// `PgAdvisoryLock::acquire`, which waits in the server with no timeout of its own:
    /// bounded here by `timeout`.
    pub(crate) async fn acquire(&mut self, key: &str, timeout: Duration) -> Result<bool, Failure> {
        let lock = self.lock(key);
        let conn = self.pool.acquire().await.map_err(db_failure)?;
        match tokio::time::timeout(timeout, lock.acquire(conn)).await {
            Ok(guard) => {
                self.held = Some(guard.map_err(db_failure)?.leak());
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    /// `PgAdvisoryLock::force_release` on the connection that holds it (the statement
    /// a guard's `release_now` sends).
    pub(crate) async fn release(&mut self, key: &str) -> Result<(), Failure> {
        let lock = self.lock(key);
        let conn = self
            .held
            .take()
            .ok_or_else(|| Failure::Other("PgAdvisoryLock: released but not held".into()))?;
        let (_conn, released) = lock.force_release(conn).await.map_err(db_failure)?;
        if !released {
            return Err(Failure::Other(format!(
                "PgAdvisoryLock: {key:?} was not held at its release"
            )));
        }
        Ok(())
    }
}
