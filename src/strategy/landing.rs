//! The landing of a cut-off attempt's grants, for every primitive: what an attempt
//! took (a multi-lock's keys, a read's hold, a semaphore's permits, a fair grant),
//! held until a guard takes it up, and given back in the background when nobody does
//! (the caller stopped waiting, or the answer came too late to use).
//!
//! Every attempt's statements run through [`land`]: in the caller's task while it
//! waits, in a task of their own from the moment it stops waiting, so that they are
//! never cut off half way; what they took is landed, and a landing nobody takes up
//! (the caller gone, or the answer past the TTL it asked for) gives it back. (The fair
//! lock's queue, a task of its own, lands its grant the same way.)

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::db::{noting_checkout, Failure, Grant};
use crate::support::error::{Class, Error};
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

    /// Whether they lapse at their TTL, counted from when the attempt was sent: leases
    /// and permits do; a for-update transaction lasts as long as it stays open.
    fn lapses(&self) -> bool {
        true
    }
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

/// An attempt's statements, owning all they need so that they can finish anywhere.
type Statements<T> = Pin<Box<dyn Future<Output = Result<Option<T>, Failure>> + Send>>;

/// Runs one attempt's `statements` (sent now) and lands what they took, with when they
/// were sent: whatever they grant is valid at least until then plus `ttl`.
///
/// `Ok(None)` when they took nothing; [`Class::Lapsed`] ([`Error::GrantExpired`], named
/// `key`) when they answered past `ttl`, counted from when they were sent, with grants
/// that [lapse](GiveBack::lapses): what they took may have lapsed already, and is
/// given back. `reached` is set once a statement
/// has a pooled connection.
///
/// # Cancel safety
///
/// The statements run in the caller's task (a task of their own would cost a spawn and
/// a wake-up on another thread per attempt). Should the caller stop waiting before they
/// are done, what is left of them moves to a task of its own on the attempt's runtime,
/// which finishes them and gives back whatever they took.
pub(crate) fn land<'a, T: GiveBack>(
    handle: &'a Arc<Handle>,
    key: &'a str,
    ttl: Duration,
    reached: Arc<AtomicBool>,
    statements: impl Future<Output = Result<Option<T>, Failure>> + Send + 'static,
) -> impl Future<Output = Result<Option<(Landing<T>, Instant)>, Failure>> + Send + 'a {
    // Boxed before the future is made, so that the statements' type is no part of it
    // (a caller's future would be as deep as every statement of every attempt).
    let statements: Statements<T> = Box::pin(noting_checkout(reached, statements));
    landed(handle, key, ttl, statements)
}

/// [`land`], the statements boxed.
async fn landed<T: GiveBack>(
    handle: &Arc<Handle>,
    key: &str,
    ttl: Duration,
    statements: Statements<T>,
) -> Result<Option<(Landing<T>, Instant)>, Failure> {
    let sent = Instant::now();
    let mut unfinished = Unfinished {
        statements: Some(statements),
        polling: false,
        handle: handle.clone(),
        runtime: tokio::runtime::Handle::current(),
    };
    let outcome = std::future::poll_fn(|cx| {
        let Some(statements) = unfinished.statements.as_mut() else {
            unreachable!("the statements are there until they are done");
        };
        // Set while they are polled: a panic of theirs leaves it set.
        unfinished.polling = true;
        let polled = statements.as_mut().poll(cx);
        unfinished.polling = false;
        polled
    })
    .await;
    unfinished.statements = None;
    match outcome? {
        // Answered past the TTL it asked for (the statements waited in the database for
        // a row another statement was writing, or for a fenced transaction): no grant
        // to hand out. Given back by the landing's drop, and the caller told to try
        // again: the key was free, not busy, but the answer outran its TTL.
        Some(taken) if taken.lapses() && Instant::now() >= sent + ttl => {
            drop(Landing::new(handle.clone(), taken));
            Err(Failure {
                class: Class::Lapsed,
                error: Error::GrantExpired {
                    key: key.to_owned(),
                    ttl,
                    took: sent.elapsed(),
                },
            })
        }
        Some(taken) => Ok(Some((Landing::new(handle.clone(), taken), sent))),
        None => Ok(None),
    }
}

/// An attempt's statements under way in their caller's task. Dropped before they are
/// done (the caller stopped waiting), it hands them to a task of their own, which
/// finishes them and gives back whatever they took.
struct Unfinished<T: GiveBack> {
    statements: Option<Statements<T>>,
    /// Whether the statements are being polled: set as a panic of theirs unwinds.
    polling: bool,
    handle: Arc<Handle>,
    /// The runtime the attempt runs on, for a drop outside of any runtime.
    runtime: tokio::runtime::Handle,
}

impl<T: GiveBack> Drop for Unfinished<T> {
    fn drop(&mut self) {
        // A panic in the statements unwinds through here with them half polled: they
        // cannot be resumed, and the transaction or lease they may have taken ends
        // with its connection or at its expiry. A panic elsewhere in the caller's task
        // (a sibling future's) leaves them whole: they are finished as for any drop.
        if self.polling && std::thread::panicking() {
            return;
        }
        let Some(statements) = self.statements.take() else {
            return;
        };
        let handle = self.handle.clone();
        // Outside of any runtime, the attempt's own runtime finishes them; if that one
        // has shut down, what they took lapses at its expiry (and a transaction ends
        // with its connection).
        let runtime =
            tokio::runtime::Handle::try_current().unwrap_or_else(|_| self.runtime.clone());
        let _entered = runtime.enter();
        drop(runtime.spawn(async move {
            if let Ok(Some(taken)) = statements.await {
                taken.give_back(handle).await;
            }
        }));
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
