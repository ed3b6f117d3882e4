//! A set of lock guards held as one, under the multi-lock's, the semaphore's and the
//! quorum lock's guards: one lost signal for the set, its keys and tokens, its fence,
//! and one release with one cancel-safety story.

use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::db::fence::FenceConnection;
use crate::support::error::{Error, Result};
use crate::support::join::join_all;
use crate::support::lost::{LostReason, LostSignal};

use super::guard::LockGuard;

/// Guards taken together: a multi-lock's keys, a semaphore's permits, a quorum
/// lock's databases.
#[derive(Debug)]
pub(crate) struct GuardSet {
    /// In the order the set was granted in (a multi-lock's keys sorted, a semaphore's
    /// permits by slot, a quorum's databases as given).
    guards: Vec<LockGuard>,
    /// How many of the guards the set may lose and still hold: none, but for a quorum
    /// lock's (its databases beyond a majority).
    spare: usize,
    lost: LostSignal,
    /// The tasks that fire `lost` when a guard of the set is lost; stopped with the
    /// set.
    watchers: Vec<JoinHandle<()>>,
}

impl GuardSet {
    /// The set of `guards` (one at least), lost with the first guard lost. A set of one
    /// has that guard's own signal; a larger set one that the first guard lost fires,
    /// with its reason.
    pub(crate) fn new(guards: Vec<LockGuard>) -> Self {
        Self::sparing(guards, 0)
    }

    /// The set of `guards`, lost once more than `spare` of them are: its signal fires
    /// with the reason of the guard whose loss was one too many.
    pub(crate) fn sparing(guards: Vec<LockGuard>, spare: usize) -> Self {
        let (lost, watchers) = match guards.as_slice() {
            [one] if spare == 0 => (one.lost(), Vec::new()),
            _ => {
                let (tx, rx) = watch::channel(None);
                let tx = std::sync::Arc::new(tx);
                let losses = std::sync::Arc::new(AtomicUsize::new(0));
                let watchers = guards
                    .iter()
                    .map(|guard| {
                        let mut signal = guard.lost();
                        let tx = tx.clone();
                        let losses = losses.clone();
                        tokio::spawn(async move {
                            let reason = signal.wait().await;
                            if losses.fetch_add(1, Ordering::SeqCst) < spare {
                                return;
                            }
                            // The loss one too many names the reason; the signal stays
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
            spare,
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

    /// Whether the set was lost (more than its spare guards): the set's signal, or the
    /// guards' own (which may have fired a moment before the set's watchers forwarded
    /// them).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_lost() || self.guards.iter().filter(|g| g.is_lost()).count() > self.spare
    }

    /// Why the set was lost, if it was: the reason the set's signal fired with (that of
    /// the first guard lost, or of the one lost too many with spare guards), else that
    /// of a guard found lost.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.lost.reason().or_else(|| {
            self.is_lost()
                .then(|| self.guards.iter().find_map(LockGuard::lost_reason))
                .flatten()
        })
    }

    /// How many of the set's guards are not lost.
    pub(crate) fn held(&self) -> usize {
        self.guards.iter().filter(|g| !g.is_lost()).count()
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
    pub(crate) async fn release(self) -> Result<bool> {
        let count = self.guards.len();
        Ok(self.release_counting().await? == count)
    }

    /// Gives every guard back at once, each in a task of its own, waiting for each at
    /// most `bound`: how many were still held, of those that answered in time, how
    /// many failed, and the first error of those. A release not done by then finishes in the
    /// background. Cancel safe: dropped, the future leaves the releases to finish.
    pub(crate) async fn release_at_once(
        mut self,
        bound: Duration,
    ) -> (usize, usize, Option<Error>) {
        let releases: Vec<_> = std::mem::take(&mut self.guards)
            .into_iter()
            .map(|guard| tokio::spawn(guard.release()))
            .collect();
        let answers = join_all(releases.into_iter().map(|r| tokio::time::timeout(bound, r))).await;
        let (mut held, mut failures) = (0, 0);
        let mut failed = None;
        for answer in answers {
            match answer {
                Ok(Ok(Ok(true))) => held += 1,
                Ok(Ok(Err(e))) => {
                    failures += 1;
                    failed.get_or_insert(e);
                }
                // Not held, not answered in time, or the task panicked (its lease
                // lapses at its expiry).
                _ => {}
            }
        }
        (held, failures, failed)
    }

    /// Gives every guard back as [`release`](Self::release) does: how many were still
    /// held.
    async fn release_counting(mut self) -> Result<usize> {
        let guards = std::mem::take(&mut self.guards);
        // A release cut off half way would leave its lease to lapse at its expiry.
        let releasing = tokio::spawn(async move {
            let mut held = 0;
            let mut failed = None;
            for guard in guards {
                match guard.release().await {
                    Ok(true) => held += 1,
                    Ok(false) => {}
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            match failed {
                Some(e) => Err(e),
                None => Ok(held),
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
