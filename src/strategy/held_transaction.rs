//! A held for-update lock: its open transaction, lent to the holder, checked by a
//! keepalive and whenever a loan ends, and ended by commit, rollback or drop.

// Built without a server feature (SQLite only), the strategy has nothing to run on:
// the code stays, refusing it, and its parameters go unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(unused_variables, dead_code)
)]

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{watch, MappedMutexGuard, Mutex, MutexGuard, Notify};

use crate::db::statement::Statement;
use crate::db::values::Held;
use crate::db::DbTransaction;
use crate::support::error::Error;
use crate::support::lost::LostReason;
use crate::support::metrics::Meter;

use super::grant::LockId;

/// The open transaction of a for-update lock, lent to the holder by
/// [`LockGuard::transaction`](crate::LockGuard::transaction): derefs to
/// [`DbTransaction`].
///
/// When it is dropped (the holder is done with it for now), the lock checks its
/// transaction at once, in the background: a statement the holder ran may have failed
/// and ended it (a deadlock on MariaDB rolls the whole transaction back and frees the
/// row lock; any error on PostgreSQL leaves the transaction able only to roll back).
/// The guard's [lost signal](crate::LockGuard::lost) then fires, and
/// [`commit`](crate::LockGuard::commit) answers [`Error::LockLost`]. After a statement
/// of yours failed, run nothing more in it: on MariaDB a later statement would run on
/// its own, outside the lock.
#[derive(Debug)]
pub struct LentTransaction<'a> {
    tx: MappedMutexGuard<'a, DbTransaction>,
    hold: &'a TxHold,
}

impl std::ops::Deref for LentTransaction<'_> {
    type Target = DbTransaction;

    fn deref(&self) -> &DbTransaction {
        &self.tx
    }
}

impl std::ops::DerefMut for LentTransaction<'_> {
    fn deref_mut(&mut self) -> &mut DbTransaction {
        &mut self.tx
    }
}

/// Asks the lock to check its transaction now; see the type's docs.
impl Drop for LentTransaction<'_> {
    fn drop(&mut self) {
        self.hold.lent.store(true, Ordering::Release);
        self.hold.check_now.notify_one();
    }
}

/// A held for-update lock: the transaction, shared between the guard and its
/// keepalive task.
#[derive(Debug)]
pub(crate) struct TxHold {
    tx: Mutex<Option<DbTransaction>>,
    lost: watch::Sender<Option<LostReason>>,
    keepalive: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Wakes the keepalive to check the transaction at once.
    check_now: Arc<Notify>,
    /// Whether the transaction was lent since it was last checked.
    lent: AtomicBool,
    /// Whether the transaction still shows the grant (`for_update_check.sql`).
    check: Statement<Held<'static>>,
    /// The grant, for the check.
    id: LockId,
    /// The grant's owner, for the check.
    owner: String,
    /// The handle's metrics, for a loss.
    meter: Meter,
}

impl TxHold {
    /// Wraps a transaction that holds a row lock, and starts its keepalive, which
    /// checks the transaction every `every` and whenever it comes back from a loan.
    pub(crate) fn start(
        tx: DbTransaction,
        check: Statement<Held<'static>>,
        id: LockId,
        owner: String,
        every: Duration,
        meter: Meter,
    ) -> (Arc<Self>, watch::Receiver<Option<LostReason>>) {
        let (lost, rx) = watch::channel(None);
        let check_now = Arc::new(Notify::new());
        let hold = Arc::new(Self {
            tx: Mutex::new(Some(tx)),
            lost,
            keepalive: std::sync::Mutex::new(None),
            check_now: check_now.clone(),
            lent: AtomicBool::new(false),
            check,
            id,
            owner,
            meter,
        });
        let weak = Arc::downgrade(&hold);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    () = check_now.notified() => {}
                }
                let Some(hold) = weak.upgrade() else { return };
                let mut slot = hold.tx.lock().await;
                let Some(tx) = slot.as_mut() else { return };
                hold.lent.store(false, Ordering::Release);
                if let Err(reason) = hold.check_transaction(tx).await {
                    hold.fire(reason);
                    return;
                }
            }
        });
        *hold.keepalive.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        (hold, rx)
    }

    /// Tells the holder that its lock is lost, and why.
    fn fire(&self, reason: LostReason) {
        self.meter.lost(self.id.strategy, &self.id.key, reason);
        tracing::warn!(key = %self.id.key, strategy = %self.id.strategy, owner = %self.owner,
            token = self.id.token, %reason,
            "a for-update lock's transaction ended; the lock is lost");
        self.lost.send_replace(Some(reason));
    }

    /// The transaction, while the lock is held.
    pub(crate) async fn transaction(&self) -> Option<LentTransaction<'_>> {
        if self.lost.borrow().is_some() {
            return None;
        }
        let tx = MutexGuard::try_map(self.tx.lock().await, Option::as_mut).ok()?;
        Some(LentTransaction { tx, hold: self })
    }

    fn stop_keepalive(&self) {
        if let Some(task) = self
            .keepalive
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }

    /// Commits, ending the lock. `Ok(false)` when the transaction was already gone
    /// (its connection ended, or a failed statement of the holder rolled it back): the
    /// lock had been lost and nothing was committed.
    pub(crate) async fn commit(&self) -> Result<bool, Error> {
        // The transaction first, then the keepalive stopped: a check under way finishes
        // (and records what it found) rather than being cut off half way.
        let mut slot = self.tx.lock().await;
        self.stop_keepalive();
        let Some(mut tx) = slot.take() else {
            return Ok(false);
        };
        drop(slot);
        if self.lost.borrow().is_some() {
            let _ = tx.rollback().await;
            return Ok(false);
        }
        // The holder's own statements may have ended the transaction: a COMMIT would
        // then answer as if all was well (PostgreSQL turns it into a rollback, MariaDB
        // commits whatever ran after the rollback on its own).
        if self.lent.swap(false, Ordering::AcqRel) {
            if let Err(reason) = self.check_transaction(&mut tx).await {
                self.fire(reason);
                let _ = tx.rollback().await;
                return Ok(false);
            }
        }
        match tx.commit().await {
            Ok(()) => Ok(true),
            Err(e) if connection_gone(&e) => {
                self.fire(LostReason::ConnectionLost);
                Ok(false)
            }
            Err(e) => Err(Error::Database(e)),
        }
    }

    /// Rolls back, ending the lock.
    pub(crate) async fn rollback(&self) -> Result<(), Error> {
        self.stop_keepalive();
        match self.tx.lock().await.take() {
            Some(tx) => match tx.rollback().await {
                Err(e) if !connection_gone(&e) => Err(Error::Database(e)),
                // A connection that is gone has rolled back already.
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// Whether the transaction still holds the lock: `Err` with the reason when it is
    /// gone.
    async fn check_transaction(&self, tx: &mut DbTransaction) -> Result<(), LostReason> {
        match tx.exists(&self.check, &self.id.held(&self.owner)).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(LostReason::TransactionEnded),
            Err(e) if connection_gone(&e) => Err(LostReason::ConnectionLost),
            Err(_) => Err(LostReason::TransactionEnded),
        }
    }

    /// Ends the lock without waiting: the transaction is dropped, and sqlx rolls it
    /// back when the connection goes back to the pool. Needs a runtime context (the
    /// connection's return is spawned on it).
    pub(crate) fn abandon(&self) {
        self.stop_keepalive();
        if let Ok(mut slot) = self.tx.try_lock() {
            slot.take();
        }
    }
}

/// Whether a failed statement means the connection is gone (so the server has ended
/// the transaction and its locks).
fn connection_gone(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed
    ) || e
        .as_database_error()
        .is_some_and(|d| d.message().contains("terminat") || d.message().contains("killed"))
}
