//! The landing of a cut-off attempt's grants: the leases an attempt took (a
//! multi-lock's keys, a read's hold), held until a guard takes them up, and given
//! back in the background when nobody does (the caller stopped waiting, or the answer
//! came too late to use).

use std::sync::Arc;

use crate::db::Grant;
use crate::support::strategy_kind::Strategy;

use super::grant::LockId;
use super::handle::{Handle, InFlight};
use super::release;

/// The grants of one attempt, one per key in the order asked, until they are taken up
/// by a guard. Dropped untaken (the caller stopped waiting, or the answer came too
/// late to use), it gives every one of them back in the background, and only then ends
/// the attempt's marks on its keys.
#[derive(Debug)]
pub(crate) struct Landing {
    handle: Arc<Handle>,
    keys: Vec<String>,
    grants: Option<Vec<Grant>>,
    in_flight: Vec<InFlight>,
    /// The runtime the grants were taken on, which gives them back however the landing
    /// is dropped (as the fair lock's and the semaphore's landings do): on a thread
    /// without a runtime too.
    runtime: Option<tokio::runtime::Handle>,
}

impl Landing {
    /// The grants of `keys` (one each, in order), to give back on drop unless taken;
    /// the attempt's marks on the keys end with them.
    pub(crate) fn new(
        handle: Arc<Handle>,
        keys: Vec<String>,
        grants: Vec<Grant>,
        in_flight: Vec<InFlight>,
    ) -> Self {
        Self {
            handle,
            keys,
            grants: Some(grants),
            in_flight,
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// The grants, taken up: nothing is given back any more.
    pub(crate) fn take(mut self) -> Vec<Grant> {
        self.grants.take().unwrap_or_default()
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        let Some(grants) = self.grants.take() else {
            return;
        };
        let handle = self.handle.clone();
        let keys = std::mem::take(&mut self.keys);
        let in_flight = std::mem::take(&mut self.in_flight);
        let Some(runtime) = self.runtime.take() else {
            // No runtime to give them back on: the leases lapse at their expiry.
            return;
        };
        drop(runtime.spawn(async move {
            for (key, grant) in keys.into_iter().zip(grants) {
                let id = LockId {
                    key,
                    strategy: Strategy::Lease,
                    token: grant.token,
                    rw_write: false,
                };
                let at_least = handle.at_least(&id.key);
                if let Err(e) = release::release(&handle, &id, at_least).await {
                    tracing::warn!(key = %id.key, error = %e,
                        "could not give back a multi-lock's key taken for a caller that \
                         stopped waiting; it lapses at its expiry");
                }
            }
            drop(in_flight);
        }));
    }
}
