//! The strategies: how a lock is held in the table, each protocol written once over
//! the database layer.
//!
//! - [`lease`]: the lease and the insert strategies (a row with owner and expiry);
//! - [`for_update`]: a row lock in an open transaction, and
//!   [`held_transaction`]: that transaction while it is held;
//! - [`fair`]: a queue of waiters served in order, each handed the lock in turn;
//! - [`election`]: a leader's claim of its term, once its lease is granted;
//! - [`attempt`]: the cancel-safe attempt every acquisition goes through, and
//!   [`lock_wait`]: the wait of one lock around it, over the shared [`wait`];
//! - [`held`]: a lock held, its release and its drop, under every guard;
//! - [`release`]: giving a row's lock back (and a fair lock's handoff), below them all;
//! - [`handle`]: the state of the handle they work for.
//!
//! Besides, [`semaphore`] takes k permits of a semaphore at once, each a lease, and
//! [`quorum`] a lease on a majority of independent databases.
//!
//! A request comes in as an [`Ask`]; a grant goes out as a [`Hold`] and the [`LockId`]
//! that names it. A guard holds both and delegates to the hold; which strategy it is
//! matters here only.

// The semaphore's acquisition: its permits are leases, taken k at once.
pub(crate) mod semaphore;

pub(crate) mod attempt;
pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod for_update;
pub(crate) mod grant;
pub(crate) mod handle;
pub(crate) mod held;
pub(crate) mod held_transaction;
pub(crate) mod landing;
pub(crate) mod lease;
pub(crate) mod lock_wait;
pub(crate) mod multi;
pub(crate) mod quorum;
pub(crate) mod release;
pub(crate) mod rwlock;
pub(crate) mod wait;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::db::Dialect;
use crate::support::error::{Error, Result};
use crate::support::lost::{LostReason, LostSignal};
use crate::support::strategy_kind::Strategy;

pub(crate) use self::grant::{Ask, Granted, LockId};
use self::handle::Handle;
use self::held_transaction::{LentTransaction, TxHold};
use self::lease::{LeaseHold, Renewal};

/// Refuses a strategy the server cannot hold, before any SQL is sent.
pub(crate) fn check_strategy(strategy: Strategy, dialect: Dialect) -> Result<()> {
    if strategy == Strategy::ForUpdate && !dialect.has_row_locks() {
        return Err(Error::StrategyUnsupported {
            strategy: strategy.name(),
            dialect: dialect.name(),
        });
    }
    Ok(())
}

/// How long an attempt of `strategy` may wait in the database for a lock another
/// transaction holds, with `left` of the caller's deadline to go (`None`: no
/// deadline); `None` when it must not wait at all. Only a for-update attempt waits
/// there (see [`for_update::wait_slice`]); the others poll.
pub(crate) fn wait_in_database(
    strategy: Strategy,
    dialect: Dialect,
    left: Option<Duration>,
) -> Option<Duration> {
    match strategy {
        Strategy::ForUpdate => for_update::wait_slice(dialect, left),
        Strategy::Lease | Strategy::Insert | Strategy::Fair => None,
    }
}

/// What a guard holds: a lease (or insert) registration, or a for-update transaction.
#[derive(Debug)]
pub(crate) enum Hold {
    Lease(LeaseHold),
    Tx(Arc<TxHold>),
}

impl Hold {
    /// Starts holding what an attempt took for `ask`: a lease is registered with the
    /// watchdog, a transaction gets its keepalive.
    pub(crate) fn start(
        handle: &Handle,
        ask: &Ask,
        granted: Granted,
        sent: Instant,
        renewal: Renewal,
    ) -> (Self, LockId, LostSignal) {
        let id = |token| ask.id(token);
        match granted {
            Granted::Lease(grant) => {
                let id = id(grant.token);
                let (hold, lost) = LeaseHold::start(handle, &id, &grant, sent, renewal);
                (Self::Lease(hold), id, lost)
            }
            Granted::Tx(tx, check, token) => {
                let id = id(token);
                let keepalive = handle.settings.keepalive;
                let owner = handle.owner_text.clone();
                let meter = handle.meter.clone();
                let (hold, lost) = TxHold::start(tx, check, id.clone(), owner, keepalive, meter);
                (Self::Tx(hold), id, LostSignal::from(lost))
            }
        }
    }

    /// When the lock expires unless extended: a for-update lock never does.
    pub(crate) fn expires_at(&self) -> DateTime<Utc> {
        match self {
            Self::Lease(l) => l.expires_at(),
            Self::Tx(_) => DateTime::<Utc>::MAX_UTC,
        }
    }

    /// How many holds the owner had right after the grant.
    pub(crate) fn hold_count(&self) -> u32 {
        match self {
            Self::Lease(l) => l.hold_count(),
            Self::Tx(_) => 1,
        }
    }

    /// The reason a lock ended that its release found not held, when nothing said.
    pub(crate) fn default_loss(&self) -> LostReason {
        match self {
            Self::Lease(_) => LostReason::NotHeld,
            Self::Tx(_) => LostReason::TransactionEnded,
        }
    }

    /// Whether a fence check in the holder's own transaction applies: a for-update
    /// lock's own transaction is fenced already.
    pub(crate) fn fenceable(&self) -> bool {
        matches!(self, Self::Lease(_))
    }

    /// The for-update lock's transaction, while it is held.
    pub(crate) async fn transaction(&self) -> Option<LentTransaction<'_>> {
        match self {
            Self::Lease(_) => None,
            Self::Tx(hold) => hold.transaction().await,
        }
    }

    /// Pushes a lease's expiry to at least `ttl` from now; a for-update lock has none,
    /// and lasts while its transaction does.
    pub(crate) async fn extend(
        &mut self,
        handle: &Handle,
        id: &LockId,
        ttl: Duration,
        lost: &LostSignal,
    ) -> Result<bool> {
        match self {
            Self::Lease(l) => l.extend(handle, id, ttl).await,
            Self::Tx(_) => Ok(!lost.is_lost()),
        }
    }

    /// Ends the lock: a lease is released, a transaction committed. Whether it was
    /// still held.
    pub(crate) async fn release(&self, handle: &Handle, id: &LockId) -> Result<bool> {
        match self {
            Self::Lease(l) => l.release(handle, id).await,
            Self::Tx(hold) => hold.commit().await,
        }
    }

    /// Ends the lock discarding the holder's work: a transaction is rolled back, a
    /// lease released.
    pub(crate) async fn rollback(&self, handle: &Handle, id: &LockId) -> Result<()> {
        match self {
            Self::Lease(l) => l.release(handle, id).await.map(drop),
            Self::Tx(hold) => hold.rollback().await,
        }
    }

    /// Ends the lock without waiting, on the runtime the caller has entered: a lease is
    /// released in the background, a transaction dropped (and so rolled back). `wake`,
    /// the key's wake lock, is let go once that is done.
    pub(crate) fn end_in_background(
        &self,
        handle: &Arc<Handle>,
        id: LockId,
        wake: Option<crate::keepers::wake_lock::WakeHold>,
    ) {
        match self {
            Self::Lease(l) => l.release_in_background(handle, id, wake),
            Self::Tx(hold) => hold.abandon(),
        }
    }
}
