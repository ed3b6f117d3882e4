//! The Redis baseline: `SET key owner NX PX ttl`, then a Lua script that deletes the
//! key only while it still holds the owner (the usual single-instance Redis lock).

use std::time::{Duration, Instant};

/// One worker's connection.
pub(crate) struct RedisWorker {
    conn: redis::aio::MultiplexedConnection,
    release: redis::Script,
}

impl RedisWorker {
    /// Connects to `url`.
    pub(crate) async fn connect(url: &str) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let release = redis::Script::new(
            "if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) else return 0 end",
        );
        Ok(Self { conn, release })
    }

    /// One acquisition and release; the acquisition's latency, or `None` when busy.
    pub(crate) async fn cycle(
        &mut self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<Duration>, String> {
        let started = Instant::now();
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            .query_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        let latency = started.elapsed();
        if set.is_none() {
            return Ok(None);
        }
        let _: i64 = self
            .release
            .key(key)
            .arg(owner)
            .invoke_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Some(latency))
    }
}
