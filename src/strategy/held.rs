//! A lock held, below the API: what a hold keeps on its handle from its grant to its
//! end (the keys the handle holds, its metrics), its release, and what its drop does.
//! [`LockGuard`](crate::LockGuard) is this with the public API around it; a read-write
//! writer's intent, which no caller ever sees, is this alone.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::keepers::server_wait::Started;
use crate::keepers::wake::{self, HeldHere};
use crate::keepers::wake_lock::WakeHold;
use crate::support::error::Result;
use crate::support::lost::LostSignal;

use super::handle::Handle;
use super::{Hold, LockId};

/// A held lock: its grant, what the strategy holds, and its lost signal.
///
/// Dropped without a [`release`](Self::release), it gives the lock back in the
/// background, on the runtime of the drop or, outside of one, on the runtime it was
/// taken on; never blocking, never panicking (see [`LockGuard`](crate::LockGuard)'s
/// docs, which promise it to callers).
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) handle: Arc<Handle>,
    /// What names the grant: key, strategy, token.
    pub(crate) id: LockId,
    pub(crate) lost: LostSignal,
    /// What the strategy holds: a lease registration or a transaction.
    pub(crate) hold: Hold,
    /// Set once the lock was given back, so that Drop does not do it again.
    released: bool,
    /// The runtime the lock was acquired on, for a drop outside of any runtime.
    runtime: tokio::runtime::Handle,
    /// When the hold began, for the metrics of its time held.
    granted_at: std::time::Instant,
    /// The key's wake lock, asked for while a lease is held and let go once it has
    /// been given back (`keepers/wake_lock.rs`).
    wake: Option<WakeHold>,
    /// The hold counted in this process's wake-up registry, so that a waiter of the
    /// key here waits for the release's wake-up rather than in the server
    /// (`keepers/wake.rs`).
    _here: Option<HeldHere>,
}

impl Held {
    /// The hold of the grant `id`, counted on its handle from now until its end (with
    /// the at-least hold it asked for, if any).
    pub(crate) fn new(
        handle: Arc<Handle>,
        id: LockId,
        hold: Hold,
        lost: LostSignal,
        at_least: Option<Duration>,
    ) -> Self {
        handle.hold_started(&id.key, id.strategy, at_least, id.rw_write);
        handle.meter.hold_began(id.strategy, &id.key);
        // A for-update lock's waiters wait on its row in the server already; a hold of
        // a name in shared mode (a read, a permit) has no waiter of its own key.
        let (wake, here) = match &hold {
            Hold::Lease(_) if crate::db::values::Parent::of(&id.key).is_none() => (
                handle.wake_locks.hold(&id.key),
                Some(wake::hold_here(&handle.wake_scope, &id.key)),
            ),
            _ => (None, None),
        };
        Self {
            wake,
            _here: here,
            handle,
            id,
            lost,
            hold,
            released: false,
            runtime: tokio::runtime::Handle::current(),
            granted_at: std::time::Instant::now(),
        }
    }

    /// Has the key's wake lock taken at once: the hold was granted after a wait, so
    /// others are likely to wait for it too (see `keepers/wake_lock.rs`). `turn`, the
    /// wait in the server that woke this waiter, keeps the key's wake turn until then.
    pub(crate) fn contended(self, turn: Option<Started>) -> Self {
        if let Some(w) = &self.wake {
            w.hurry(turn);
        }
        self
    }

    /// Gives the hold back: whether the lock was still ours. A lease's renewal stops
    /// before the release is sent, and its wake lock is let go after it. Not cancel
    /// safe: dropped, the release may or may not have happened, and nothing is retried
    /// (the lease lapses at its expiry).
    pub(crate) async fn release(mut self) -> Result<bool> {
        self.released = true;
        let span = self.id.release_span(&self.handle.owner_text);
        let released = self
            .hold
            .release(&self.handle, &self.id)
            .instrument(span.clone())
            .await;
        if let Ok(false) = released {
            span.in_scope(|| tracing::warn!("released a lock that was no longer held"));
        }
        released
    }

    /// Ends a for-update hold by rolling its transaction back (a lease is released).
    pub(crate) async fn rollback(mut self) -> Result<()> {
        self.released = true;
        let span = self.id.release_span(&self.handle.owner_text);
        self.hold
            .rollback(&self.handle, &self.id)
            .instrument(span)
            .await
    }
}

/// Gives the lock back in the background (see the type's docs), and ends the hold's
/// count on its handle.
impl Drop for Held {
    fn drop(&mut self) {
        if !self.released {
            // Outside of any runtime, the one the lock was taken on does the work: sqlx
            // spawns a dropped connection's return to its pool, and would panic without.
            let runtime =
                tokio::runtime::Handle::try_current().unwrap_or_else(|_| self.runtime.clone());
            let _entered = runtime.enter();
            let id = self.id.clone();
            // Before the hold is uncounted: the release keeps the key for the at-least
            // hold the key's guards asked for, this one's included. The wake lock is
            // let go once the release is done.
            self.hold
                .end_in_background(&self.handle, id, self.wake.take());
        }
        self.handle.hold_ended(&self.id.key, self.id.rw_write);
        let held = self.granted_at.elapsed();
        self.handle
            .meter
            .hold_ended(self.id.strategy, &self.id.key, held);
    }
}
