//! A set of lock guards held as one, under the multi-lock's and the semaphore's
//! guards: one lost signal for the set, its keys and tokens, its fence, and one
//! release with one cancel-safety story.

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::db::fence::FenceConnection;
use crate::support::error::{Error, Result};
use crate::support::lost::{LostReason, LostSignal};

use super::guard::LockGuard;

/// Guards taken together: a multi-lock's keys, a semaphore's permits.
#[derive(Debug)]
pub(crate) struct GuardSet {
    /// In the order the set was granted in (a multi-lock's keys sorted, a semaphore's
    /// permits by slot).
    guards: Vec<LockGuard>,
    lost: LostSignal,
    /// The tasks that fire `lost` when a guard of the set is lost; stopped with the
    /// set.
    watchers: Vec<JoinHandle<()>>,
}

impl GuardSet {
    /// The set of `guards` (one at least). A set of one has that guard's own signal;
    /// a larger set one that the first guard lost fires, with its reason.
    pub(crate) fn new(guards: Vec<LockGuard>) -> Self {
        let (lost, watchers) = match guards.as_slice() {
            [one] => (one.lost(), Vec::new()),
            _ => {
                let (tx, rx) = watch::channel(None);
                let tx = std::sync::Arc::new(tx);
                let watchers = guards
                    .iter()
                    .map(|guard| {
                        let mut signal = guard.lost();
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            let reason = signal.wait().await;
                            // The first guard lost names the reason; the signal stays
                            // fired.
                            tx.send_if_modified(|now| {
                                now.is_none() && now.replace(reason).is_none()
                            });
                        })
                    })
                    .collect();
                (LostSignal::from(rx), watchers)
            }
        };
        Self {
            guards,
            lost,
            watchers,
        }
    }

    pub(crate) fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.guards.iter().map(LockGuard::key)
    }

    pub(crate) fn tokens(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        self.guards.iter().map(|g| (g.key(), g.fencing_token()))
    }

    /// The earliest expiry of the set's leases, as last renewed.
    pub(crate) fn expires_at(&self) -> DateTime<Utc> {
        self.guards
            .iter()
            .map(LockGuard::expires_at)
            .min()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    pub(crate) fn lost(&self) -> LostSignal {
        self.lost.clone()
    }

    /// Whether a guard of the set was lost: the set's signal, or a guard's own (which
    /// may have fired a moment before the set's watcher forwarded it).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_lost() || self.guards.iter().any(LockGuard::is_lost)
    }

    /// Why the first guard of the set lost was lost, if one was.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.lost
            .reason()
            .or_else(|| self.guards.iter().find_map(LockGuard::lost_reason))
    }

    /// Every guard's fence, in the set's order, inside the caller's transaction.
    pub(crate) async fn fence<C: FenceConnection>(&self, conn: &mut C) -> Result<()> {
        for guard in &self.guards {
            guard.fence(&mut *conn).await?;
        }
        Ok(())
    }

    /// Gives every guard back, in the set's order, in a task of its own: whether every
    /// one was still held. Every release is attempted even when one fails; the first
    /// error is answered then. Cancel safe: dropped, the future leaves the releases to
    /// finish in the background.
    pub(crate) async fn release(mut self) -> Result<bool> {
        let guards = std::mem::take(&mut self.guards);
        // A release cut off half way would leave its lease to lapse at its expiry.
        let releasing = tokio::spawn(async move {
            let mut all = true;
            let mut failed = None;
            for guard in guards {
                match guard.release().await {
                    Ok(held) => all &= held,
                    Err(e) => {
                        all = false;
                        failed.get_or_insert(e);
                    }
                }
            }
            match failed {
                Some(e) => Err(e),
                None => Ok(all),
            }
        });
        match releasing.await {
            Ok(released) => released,
            // The task panicked: the guards it did not give back lapse at their expiry.
            Err(_) => Err(Error::Database(sqlx::Error::WorkerCrashed)),
        }
    }
}

/// Stops the lost signal's watchers; each guard's own drop gives its lock back in the
/// background.
impl Drop for GuardSet {
    fn drop(&mut self) {
        for watcher in &self.watchers {
            watcher.abort();
        }
    }
}
