//! The baselines: the same work as the library's, done without it.
//!
//! The library's own statements sent raw through sqlx, the servers' native locks, and
//! Redis; each measured in the same rounds as the library.

pub(crate) mod native;
pub(crate) mod raw;
#[cfg(feature = "redis-baseline")]
pub(crate) mod redis_lock;
pub(crate) mod statements;
