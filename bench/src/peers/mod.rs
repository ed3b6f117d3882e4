//! The contenders of the peers part behind one worker interface: sqlock, its lease
//! statements sent raw, and the peers, each in a module of its own.
//!
//! Every contender takes and gives back the lock of a key through [`PeerWorker`]:
//! at once or not at all, or waiting up to a timeout. sqlx's `PgAdvisoryLock` and
//! MariaDB's `GET_LOCK` run on the benchmark's own pool (sqlx 0.9, the library's); the
//! published `distributed-lock-postgres` / `distributed-lock-mysql` crates, built on
//! sqlx 0.8, only with the `peers` feature, on a pool of their own.

mod advisory;
#[cfg(feature = "peers")]
mod distributed_lock;
mod get_lock;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlock::{DbPool, LockGuard, Locker};

use crate::baseline::raw;
use crate::baseline::statements::{RawStatements, Values};
use crate::failure::{db_failure, Failure};
use crate::figures::Contender;

/// Whether the distributed-lock crates are built in.
pub(crate) const DISTRIBUTED_LOCK: bool = cfg!(feature = "peers");

/// What the workers of a run connect through: the benchmark's pool and, with the
/// `peers` feature, the distributed-lock crates' own.
#[derive(Clone)]
pub(crate) struct PeerPools {
    pub(crate) db: DbPool,
    #[cfg(feature = "peers")]
    distributed_lock: Option<distributed_lock::Provider>,
}

impl PeerPools {
    /// The pools for `db` (reached at `url`), the crates' sized for `size` connections.
    pub(crate) async fn connect(db: &DbPool, url: &str, size: u32) -> Result<Self, Failure> {
        #[cfg(not(feature = "peers"))]
        let _ = (url, size);
        Ok(Self {
            db: db.clone(),
            #[cfg(feature = "peers")]
            distributed_lock: distributed_lock::Provider::connect(url, db.dialect(), size).await?,
        })
    }
}

impl PeerPools {
    /// Closes every pool: their connections end.
    pub(crate) async fn close(&self) {
        self.db.close().await;
        #[cfg(feature = "peers")]
        if let Some(p) = &self.distributed_lock {
            p.close().await;
        }
    }
}

/// One worker of a contender, holding at most one lock at a time.
pub(crate) enum PeerWorker {
    /// The library: a handle of its own, and its guard while it holds the lock.
    Sqlock(Locker, Option<LockGuard>),
    /// The library's lease statements sent raw: whole cycles only.
    Raw(Arc<RawStatements>, Values),
    Advisory(advisory::Advisory),
    GetLock(get_lock::GetLock),
    #[cfg(feature = "peers")]
    DistributedLock(distributed_lock::Worker),
}

impl PeerWorker {
    /// A worker of the library, with a handle of its own made from `locker`.
    pub(crate) fn sqlock(locker: &Locker) -> Self {
        Self::Sqlock(locker.new_handle(), None)
    }

    /// A worker sending the library's lease statements raw, as owner `owner`.
    pub(crate) fn raw(stmts: Arc<RawStatements>, owner: String, ttl: Duration) -> Self {
        Self::Raw(
            stmts,
            Values {
                key: String::new(),
                owner,
                strategy: sqlock::Strategy::Lease,
                ttl_us: i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX),
                token: 0,
            },
        )
    }

    /// A worker of a peer; `None` where the database has no such peer or it is not
    /// built in.
    pub(crate) fn peer(who: Contender, pools: &PeerPools) -> Option<Self> {
        match (who, &pools.db) {
            (Contender::Advisory, DbPool::Postgres(pool)) => {
                Some(Self::Advisory(advisory::Advisory::new(pool.clone())))
            }
            (Contender::GetLock, DbPool::MySql(pool)) => {
                Some(Self::GetLock(get_lock::GetLock::new(pool.clone())))
            }
            #[cfg(feature = "peers")]
            (Contender::DistributedLock, _) => pools
                .distributed_lock
                .as_ref()
                .map(|p| Self::DistributedLock(distributed_lock::Worker::new(p))),
            _ => None,
        }
    }

    /// Takes the lock on `key` at once if it is free; whether it did.
    pub(crate) async fn try_acquire(&mut self, key: &str) -> Result<bool, Failure> {
        match self {
            Self::Sqlock(locker, held) => {
                *held = locker.try_acquire(key).await?;
                Ok(held.is_some())
            }
            Self::Raw(..) => Err(raw_only()),
            Self::Advisory(w) => w.try_acquire(key).await,
            Self::GetLock(w) => w.try_acquire(key).await,
            #[cfg(feature = "peers")]
            Self::DistributedLock(w) => w.try_acquire(key).await,
        }
    }

    /// Takes the lock on `key`, waiting up to `timeout`; whether it did.
    pub(crate) async fn acquire(&mut self, key: &str, timeout: Duration) -> Result<bool, Failure> {
        match self {
            Self::Sqlock(locker, held) => match locker.acquire_timeout(key, timeout).await {
                Ok(g) => {
                    *held = Some(g);
                    Ok(true)
                }
                Err(sqlock::Error::Timeout { .. }) => Ok(false),
                Err(e) => Err(e.into()),
            },
            Self::Raw(..) => Err(raw_only()),
            Self::Advisory(w) => w.acquire(key, timeout).await,
            Self::GetLock(w) => w.acquire(key, timeout).await,
            #[cfg(feature = "peers")]
            Self::DistributedLock(w) => w.acquire(key, timeout).await,
        }
    }

    /// Gives back the lock on `key` that this worker holds.
    pub(crate) async fn release(&mut self, key: &str) -> Result<(), Failure> {
        match self {
            Self::Sqlock(_, held) => {
                let guard = held
                    .take()
                    .ok_or_else(|| Failure::Other("sqlock: released but not held".into()))?;
                if !guard.release().await? {
                    return Err(Failure::Other(format!(
                        "lock {key:?} was lost during the benchmark"
                    )));
                }
                Ok(())
            }
            Self::Raw(..) => Err(raw_only()),
            Self::Advisory(w) => w.release(key).await,
            Self::GetLock(w) => w.release(key).await,
            #[cfg(feature = "peers")]
            Self::DistributedLock(w) => w.release().await,
        }
    }

    /// One acquisition at once and its release: the acquisition's latency, `None`
    /// when the lock was busy.
    pub(crate) async fn cycle(
        &mut self,
        db: &DbPool,
        key: &str,
    ) -> Result<Option<Duration>, Failure> {
        if let Self::Raw(stmts, values) = self {
            if values.key != key {
                key.clone_into(&mut values.key);
            }
            return raw::cycle(db, stmts, values).await.map_err(db_failure);
        }
        let started = Instant::now();
        if !self.try_acquire(key).await? {
            return Ok(None);
        }
        let latency = started.elapsed();
        self.release(key).await?;
        Ok(Some(latency))
    }
}

fn raw_only() -> Failure {
    Failure::Other("BUG: the raw statements are measured in whole cycles only".into())
}
