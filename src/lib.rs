//! Distributed locks on the relational database you already run.
//!
//! sqlock gives processes on one or many hosts mutual exclusion through a table in
//! PostgreSQL, MariaDB or SQLite: no Redis, no ZooKeeper. A lock is a **lease**, a row
//! per key with an owner and an expiry decided by the database clock, so a crashed
//! holder never blocks the others for longer than its TTL; every grant carries a
//! **fencing token** that only grows, so the resource behind the lock can turn away a
//! holder whose lease lapsed.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), sqlock::Error> {
//! use std::time::Duration;
//! use sqlock::Locker;
//! use sqlx::sqlite::SqlitePoolOptions;
//!
//! let pool = SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
//! sqlock::migrate(&pool).await?;
//!
//! let locker = Locker::builder(pool).ttl(Duration::from_secs(10)).build()?;
//! let other = locker.new_handle(); // another owner, as another process would be
//!
//! let guard = locker.acquire("daily-billing").await?;
//! assert!(other.try_acquire("daily-billing").await?.is_none()); // held
//! assert!(guard.release().await?);                            // it was still ours
//! assert!(other.try_acquire("daily-billing").await?.is_some()); // free again
//! # Ok(())
//! # }
//! ```
//!
//! The same lease elects a leader among replicas: [`Locker::election`] makes a
//! candidate in a named [`Election`], whose leader's **term** is the lease's fencing
//! token, and [`Election::lead`] runs the leader's work for as long as leadership
//! lasts.
//!
//! A [`Semaphore`] ([`Locker::semaphore`]) lets at most N holders in at once, each
//! permit a lease of its own on the same table; k permits are taken all or none.
//!
//! # Features
//!
//! - `sqlite` (default): SQLite through sqlx's bundled library.
//! - `postgres`: PostgreSQL 12 or later.
//! - `mysql`: MariaDB 10.6 or later. (MySQL has neither `INSERT ... RETURNING` nor
//!   sequences; sqlock reports [`Error::NotMariaDb`] there.)
//! - `metrics`: counters, histograms and a gauge through the `metrics` facade (see
//!   below).
//!
//! # Scheduled jobs
//!
//! Replicas that each run a job on a timer run it once per period with an at-least
//! hold, [`LockRequest::at_least`]: the lock is kept until that long after it was
//! taken even when the job finished early, then frees itself.
//!
//! # Metrics and tracing
//!
//! With the feature `metrics`, sqlock records through the `metrics` facade, to
//! whichever recorder the application installed (before building its handles):
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `sqlock_grants_total` | counter | locks granted |
//! | `sqlock_busy_total` | counter | attempts that found the lock busy |
//! | `sqlock_timeouts_total` | counter | acquisitions that gave up at their deadline |
//! | `sqlock_losses_total` | counter | held locks found lost, by `reason` ([`LostReason`] in snake case) |
//! | `sqlock_renewals_total` | counter | leases the watchdog renewed |
//! | `sqlock_renewal_failures_total` | counter | renewals that failed or got no answer in time |
//! | `sqlock_statements_total` | counter | statements sent |
//! | `sqlock_wake_lock_statements_total` | counter | statements that took, let go of or waited for wake locks, and set up the connections that do (see `LockerBuilder::server_waits`) |
//! | `sqlock_acquire_seconds` | histogram | start of an acquisition to its grant, waiting included |
//! | `sqlock_held_seconds` | histogram | grant to the guard's release or drop |
//! | `sqlock_handoff_seconds` | histogram | for an acquisition that waited: its last busy answer to its grant, at most the time the lock stood free before this waiter took it |
//! | `sqlock_locks_held` | gauge | guards held by this process |
//!
//! Labels: `strategy` and `table` (`table` alone on the renewal and statement
//! counters), and `key` only for a handle built with
//! `LockerBuilder::metrics_key_label(true)`: keys are unbounded, and each would be a
//! series of its own. Without the feature nothing is recorded and nothing is linked.
//!
//! Through `tracing`, each acquisition runs in a span `sqlock.acquire` and each
//! release in `sqlock.release` (fields `key`, `strategy`, `owner`, `token`), each
//! renewal tick in `sqlock.renew` (debug level: `table`, `owner`, `ttl`, `leases`; one
//! statement renews many keys), each sweep in `sqlock.sweep` (`table`, `batch`,
//! `grace`, `rows`). A lost lock is a `warn` event with its key, owner, token and
//! reason; a busy answer a `debug` one.
//!
//! # Poolers and clusters
//!
//! - Behind PgBouncer in transaction pooling mode, set
//!   [`LockerBuilder::transaction_pooling`]: every statement is then unnamed and runs in
//!   a transaction of its own, which keeps it on one server connection.
//! - On a MariaDB Galera cluster the lease and insert strategies work from any node
//!   (certification failures are retried as contention); the for-update strategy is
//!   refused there, since `SELECT ... FOR UPDATE` locks a row on one node only.
//! - Across a PostgreSQL failover to a synchronous standby (`remote_apply`) every
//!   granted lease survives, and the watchdog rides out an outage shorter than the TTL.
//! - A release wakes the waiters of its key in the same process at once, on every
//!   database; on PostgreSQL, [`LockerBuilder::notify_waiters`] wakes those of other
//!   processes too, instead of leaving them to their next poll.
//!
//! The project's `docs/deployment.md` says which strategy suits which setup, and why.
//!
//! # Schema
//!
//! The lock table comes from the migrations in `migrations/<dialect>/`: apply them with
//! [`migrate`], with sqlx-cli, or take the DDL from [`schema`] for a table of another
//! name. Every statement sqlock sends lives in `sql/<dialect>/`.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
compile_error!("sqlock needs at least one of the features `postgres`, `mysql`, `sqlite`");

// The layers, each importing only from those below it: the public API; the strategies
// (with the handle state they share); the keepers; the database layer; support.
mod api;
pub use api::check;
mod db;
mod keepers;
mod strategy;
mod support;

pub use api::admin::{LockInfo, Revocation, MAX_LISTED};
pub use api::builder::{
    LockerBuilder, DEFAULT_KEEPALIVE, DEFAULT_NOTIFY_POLL_MAX, DEFAULT_NOTIFY_POLL_MIN,
    DEFAULT_POLL_MAX, DEFAULT_POLL_MIN, DEFAULT_SERVER_WAITS, DEFAULT_TTL,
};
pub use api::election::{Election, DEFAULT_OBSERVE_POLL};
pub use api::guard::LockGuard;
pub use api::leadership::{LeaderTerm, Leadership};
pub use api::locker::Locker;
pub use api::multi::{MultiLockGuard, MultiLockRequest, MAX_MULTI_LOCK_KEYS};
pub use api::observe::{Leader, LeaderWatch};
pub use api::quorum::{
    Quorum, QuorumGuard, QuorumRequest, DEFAULT_QUORUM_SERVER_TIMEOUT, MIN_QUORUM_MEMBERS,
};
pub use api::request::LockRequest;
pub use api::rwlock::{RwLockRequest, MAX_RWLOCK_NAME_BYTES};
pub use api::rwlock_info::RwLockInfo;
// Semaphores (`Locker::semaphore`).
pub use api::permits::SemaphoreGuard;
pub use api::semaphore::{Semaphore, SemaphoreInfo};
pub use db::fence::FenceConnection;
// What `FenceConnection`'s sealed method names; not for use outside sqlock.
#[doc(hidden)]
pub use db::fence::{FenceCheck, FenceQuery};
pub use db::schema::{migrate, schema, MIGRATIONS_TABLE};
pub use db::{DbPool, DbTransaction, Dialect, UnknownDialect};
pub use keepers::scheduled_sweep::{ScheduledSweep, MAX_SWEEP_INTERVAL, SCHEDULED_SWEEP_BATCHES};
pub use keepers::sweeper::{SweepOptions, SweeperHandle, MAX_SWEEP_BATCH};
pub use keepers::watchdog::WatchdogStats;
pub use strategy::held_transaction::LentTransaction;
pub use support::error::{Error, Result};
pub use support::lost::{LostReason, LostSignal};
pub use support::strategy_kind::{Strategy, UnknownStrategy};
pub use support::validate::{
    TableName, DEFAULT_TABLE, MAX_ELECTION_NAME_BYTES, MAX_IDENTITY_BYTES, MAX_KEY_BYTES,
    MAX_TABLE_NAME_BYTES, MAX_TTL, MIN_TTL,
};
pub use support::validate::{MAX_PERMITS, MAX_SEMAPHORE_NAME_BYTES};

/// Not part of the public API: hidden, unstable, free to change in any release.
///
/// What the project's own benchmark needs to send the library's statements raw, as a
/// handle renders them.
#[doc(hidden)]
pub mod __private {
    pub use crate::db::rendered::{prepared, statement, RenderedStatement};
}

/// The README's examples, compiled and run as doctests.
#[cfg(all(doctest, feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
