//! MariaDB's `GET_LOCK` / `RELEASE_LOCK`, sent through sqlx on a connection of the pool
//! kept out of the pool while the lock is held.

use std::time::Duration;

use sqlx::mysql::MySqlPool;
use sqlx::pool::PoolConnection;
use sqlx::{MySql, Row};

use crate::failure::{db_failure, Failure};

/// One worker's `GET_LOCK`: the connection holding the lock, while it does.
pub(crate) struct GetLock {
    pool: MySqlPool,
    held: Option<PoolConnection<MySql>>,
}

impl GetLock {
    pub(crate) fn new(pool: MySqlPool) -> Self {
        Self { pool, held: None }
    }

    /// `GET_LOCK(key, secs)`: whether the lock was granted within `secs` seconds (0: at
    /// once or not at all).
    async fn get(&mut self, key: &str, secs: i64) -> Result<bool, Failure> {
        let mut conn = self.pool.acquire().await.map_err(db_failure)?;
        let got: Option<i64> = sqlx::query("SELECT GET_LOCK(?, ?)")
            .bind(key)
            .bind(secs)
            .fetch_one(&mut *conn)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(db_failure)?;
        if got == Some(1) {
            self.held = Some(conn);
            return Ok(true);
        }
        Ok(false)
    }

    /// `GET_LOCK(key, 0)`.
    pub(crate) async fn try_acquire(&mut self, key: &str) -> Result<bool, Failure> {
        self.get(key, 0).await
    }

    /// `GET_LOCK(key, timeout)`, in whole seconds rounded up, as the server takes them.
    pub(crate) async fn acquire(&mut self, key: &str, timeout: Duration) -> Result<bool, Failure> {
        let secs = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        self.get(key, i64::try_from(secs).unwrap_or(i64::MAX)).await
    }

    /// `RELEASE_LOCK(key)` on the connection that holds it.
    pub(crate) async fn release(&mut self, key: &str) -> Result<(), Failure> {
        let mut conn = self
            .held
            .take()
            .ok_or_else(|| Failure::Other("GET_LOCK: released but not held".into()))?;
        let released: Option<i64> = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(key)
            .fetch_one(&mut *conn)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(db_failure)?;
        if released != Some(1) {
            return Err(Failure::Other(format!(
                "GET_LOCK: {key:?} was not held at its release"
            )));
        }
        Ok(())
    }
}
