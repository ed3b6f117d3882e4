//! The strategies: how a lock is held in the table, each protocol written once over
//! the dialect layer.
//!
//! - [`lease`]: the lease and the insert strategies (a row with owner and expiry);
//! - [`for_update`]: a row lock in an open transaction, and
//!   [`held_transaction`]: that transaction while it is held;
//! - [`attempt`]: the cancel-safe attempt every acquisition goes through.
//!
//! A guard holds a [`Hold`] and delegates to it; which strategy it is matters here
//! only.

pub(crate) mod attempt;
pub(crate) mod for_update;
pub(crate) mod held_transaction;
pub(crate) mod lease;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::error::Result;
use crate::lost::{LostReason, LostSignal};
use crate::sql::Args;
use crate::table::LockTable;

use self::attempt::Granted;
use self::held_transaction::{LentTransaction, TxHold};
use self::lease::{LeaseHold, Renewal};

/// What a guard holds: a lease (or insert) registration, or a for-update transaction.
#[derive(Debug)]
pub(crate) enum Hold {
    Lease(LeaseHold),
    Tx(Arc<TxHold>),
}

impl Hold {
    /// Starts holding what an attempt took: a lease is registered with the watchdog,
    /// a transaction gets its keepalive. `args.token` is set to the grant's.
    pub(crate) fn start(
        table: &LockTable,
        args: &mut Args,
        granted: Granted,
        sent: Instant,
        renewal: Renewal,
    ) -> (Self, LostSignal) {
        match granted {
            Granted::Lease(grant) => {
                args.token = grant.token;
                let (hold, lost) = LeaseHold::start(table, args, &grant, sent, renewal);
                (Self::Lease(hold), lost)
            }
            Granted::Tx(tx, token) => {
                args.token = token;
                let keepalive = table.settings.keepalive;
                let (hold, lost) = TxHold::start(tx, &table.stmts, args.clone(), keepalive);
                (Self::Tx(hold), LostSignal::from(lost))
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

    /// Pushes a lease's expiry; a for-update lock has none, and lasts while its
    /// transaction does.
    pub(crate) async fn extend(
        &mut self,
        table: &LockTable,
        args: &Args,
        lost: &LostSignal,
    ) -> Result<bool> {
        match self {
            Self::Lease(l) => l.extend(table, args).await,
            Self::Tx(_) => Ok(!lost.is_lost()),
        }
    }

    /// Ends the lock: a lease is released, a transaction committed. Whether it was
    /// still held.
    pub(crate) async fn release(&self, table: &LockTable, args: &Args) -> Result<bool> {
        match self {
            Self::Lease(l) => l.release(table, args).await,
            Self::Tx(hold) => hold.commit().await,
        }
    }

    /// Ends the lock discarding the holder's work: a transaction is rolled back, a
    /// lease released.
    pub(crate) async fn rollback(&self, table: &LockTable, args: &Args) -> Result<()> {
        match self {
            Self::Lease(l) => l.release(table, args).await.map(drop),
            Self::Tx(hold) => hold.rollback().await,
        }
    }

    /// Ends the lock without waiting, on the runtime the caller has entered: a lease is
    /// released in the background, a transaction dropped (and so rolled back).
    pub(crate) fn end_in_background(&self, table: &Arc<LockTable>, args: Args) {
        match self {
            Self::Lease(l) => l.release_in_background(table, args),
            Self::Tx(hold) => hold.abandon(),
        }
    }
}
