//! The landing of a cut-off attempt's grants, for every primitive: what an attempt
//! took (a multi-lock's keys, a read's hold, a semaphore's permits, a fair grant),
//! held until a guard takes it up, and given back in the background when nobody does
//! (the caller stopped waiting, or the answer came too late to use).
//!
//! An attempt's statements run in a task of their own and send their grants, landed,
//! to the caller: a send the caller is gone for fails, and a grant sent but never read
//! is dropped with the channel; either way the landing's drop gives it back.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::db::Grant;
use crate::support::strategy_kind::Strategy;

use super::grant::LockId;
use super::handle::{Handle, InFlight};
use super::release;

/// What a give-back's future is, its type erased.
pub(crate) type GivingBack = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Grants that can be given back by the handle that took them.
pub(crate) trait GiveBack: Send + 'static {
    /// Gives them back; nobody waits for the answer, so failures are logged.
    fn give_back(self, handle: Arc<Handle>) -> GivingBack;
}

/// Grants of one attempt until a guard takes them up. Dropped untaken, it gives them
/// back on the runtime it was made on (the current one, if there is one), however
/// it is dropped: on a thread without a runtime too. Should that runtime have shut
/// down, they lapse at their expiry.
#[derive(Debug)]
pub(crate) struct Landing<T: GiveBack> {
    handle: Arc<Handle>,
    taken: Option<T>,
    runtime: Option<tokio::runtime::Handle>,
}

impl<T: GiveBack> Landing<T> {
    /// `taken`, to give back on drop unless taken up.
    pub(crate) fn new(handle: Arc<Handle>, taken: T) -> Self {
        Self {
            handle,
            taken: Some(taken),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// The grants, taken up: nothing is given back any more.
    pub(crate) fn take(mut self) -> T {
        self.taken
            .take()
            .expect("a landing's grants are taken once, by value")
    }
}

impl<T: GiveBack> Drop for Landing<T> {
    fn drop(&mut self) {
        let Some(taken) = self.taken.take() else {
            return;
        };
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.take());
        if let Some(runtime) = runtime {
            drop(runtime.spawn(taken.give_back(self.handle.clone())));
        }
    }
}

/// Leases an attempt took, one per key (a multi-lock's keys, in order; a read's one
/// hold), with the attempt's marks on the keys, which end once they are given back
/// or taken up.
#[derive(Debug)]
pub(crate) struct Leases {
    pub(crate) keys: Vec<String>,
    pub(crate) grants: Vec<Grant>,
    pub(crate) in_flight: Vec<InFlight>,
}

impl Leases {
    /// The grants, taken up by a guard: the attempt's marks end.
    pub(crate) fn into_grants(self) -> Vec<Grant> {
        self.grants
    }
}

impl GiveBack for Leases {
    fn give_back(self, handle: Arc<Handle>) -> GivingBack {
        Box::pin(async move {
            for (key, grant) in self.keys.into_iter().zip(self.grants) {
                let id = LockId {
                    key,
                    strategy: Strategy::Lease,
                    token: grant.token,
                    rw_write: false,
                };
                let at_least = handle.at_least(&id.key);
                if let Err(e) = release::release(&handle, &id, at_least).await {
                    tracing::warn!(key = %id.key, error = %e,
                        "could not give back a lease taken for a caller that stopped \
                         waiting; it lapses at its expiry");
                }
            }
            drop(self.in_flight);
        })
    }
}
