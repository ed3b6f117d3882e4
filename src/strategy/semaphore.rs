//! The semaphore's acquisition: k permits of N taken in one transaction, all or none
//! (the steps are in `semaphore/steps.rs`), each permit a lease of its own, held and
//! given back like any lease.
//!
//! An attempt's transaction is never cut half way: if the caller stops waiting (its
//! future dropped, its deadline met), a task finishes the transaction and gives its
//! permits back ([`land`]). The wait polls at the handle's poll interval, as a
//! lease's does.

mod steps;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use self::steps::{Slot, Taken};
use crate::db::values::{Permits, Slots};
use crate::db::Failure;
use crate::support::error::{Class, Error, Result};
use crate::support::strategy_kind::Strategy;

use super::grant::LockId;
use super::handle::Handle;
use super::landing::{land, GiveBack, GivingBack};
use super::release::release;
use super::wait::{Contention, Turn, Wait};

/// What an acquisition of permits asks for (validated).
#[derive(Debug, Clone)]
pub(crate) struct PermitAsk {
    /// The semaphore's name.
    pub(crate) name: String,
    /// The prefix of its permits' keys: `semaphore:<name>#`.
    pub(crate) prefix: String,
    /// N, the semaphore's number of permits.
    pub(crate) permits: u32,
    /// k, how many permits to take at once.
    pub(crate) count: u32,
    /// Each permit's lease TTL.
    pub(crate) ttl: Duration,
}

impl PermitAsk {
    fn ttl_us(&self) -> i64 {
        i64::try_from(self.ttl.as_micros()).unwrap_or(i64::MAX)
    }

    fn mismatch(&self, recorded: i64) -> Error {
        Error::PermitsMismatch {
            name: self.name.clone(),
            recorded: u32::try_from(recorded).unwrap_or(u32::MAX),
            requested: self.permits,
        }
    }
}

/// Permits granted: each slot taken, and when the attempt that took them was sent
/// (each is valid at least until then plus its TTL).
pub(crate) type Grants = (Vec<Slot>, Instant);

/// Takes `ask.count` permits: waits until they are all free, or until `deadline`
/// ([`Error::Timeout`]). With `once`, a single try: `None` when fewer were free.
pub(crate) async fn acquire(
    handle: &Arc<Handle>,
    ask: &PermitAsk,
    deadline: Option<Instant>,
    once: bool,
) -> Result<Option<Grants>> {
    // Woken by a permit's release (its key starts with the prefix), or by the
    // release of whatever held the name itself.
    let mut wait = Wait::new(handle, ask.name.clone(), deadline)
        .woken_for_any(&[ask.prefix.as_str(), ask.name.as_str()]);
    let mut contention = Contention::new(once);
    loop {
        // The attempt's task finishes even when the deadline cuts it off, and gives
        // back what it took.
        let outcome = wait.attempt(attempt(handle, ask, wait.reached())).await?;
        let raced_now = matches!(&outcome, Err(f) if f.class == Class::Contention);
        match wait.judge(outcome)? {
            Turn::Granted(grants) => return Ok(Some(grants)),
            Turn::Again => continue,
            // Lost a race for the semaphore's gate or a slot's row: try again soon; a
            // single try counts a race that persists as busy.
            Turn::Busy if raced_now => match contention.lost() {
                Some(pause) => wait.pause_for(pause).await?,
                None => return Ok(None),
            },
            Turn::Busy if once => return Ok(None),
            Turn::Busy => wait.pause().await?,
        }
    }
}

/// One attempt: the permits, `None` when fewer than asked were free. The transaction
/// is never cut off half way, and what it took is given back if the caller is gone by
/// the time it is done ([`land`]).
async fn attempt(
    handle: &Arc<Handle>,
    ask: &PermitAsk,
    reached: Arc<AtomicBool>,
) -> Result<Option<Grants>, Failure> {
    let task_handle = handle.clone();
    let task_ask = ask.clone();
    let statements = async move {
        let slots = take(&task_handle, &task_ask).await?;
        Ok(slots.map(TakenPermits))
    };
    let landed = land(handle, &ask.name, ask.ttl, reached, statements).await?;
    Ok(landed.map(|(landing, sent)| (landing.take().0, sent)))
}

/// The attempt's transaction: the semaphore is recorded first when it is not, and a
/// semaphore recorded with another N is refused before anything is taken.
///
/// With presence, the handle's marker is taken first (once), as for a lease: each
/// permit records it only if it is held as the statement runs, and then claims the
/// epoch of the handle's presence read before it was sent.
async fn take(handle: &Handle, ask: &PermitAsk) -> Result<Option<Vec<Slot>>, Failure> {
    let (presence, epoch) = handle.presence_marker().await?;
    let permits = Permits {
        name: &ask.name,
        permits: i64::from(ask.permits),
    };
    let slots = Slots {
        prefix: &ask.prefix,
        owner: &handle.owner_text,
        permits: i64::from(ask.permits),
        count: i64::from(ask.count),
        ttl_us: ask.ttl_us(),
        presence: &presence,
        gone: "[]",
    };
    let db = &handle.db;
    // Once recorded, a semaphore stays so (sqlock deletes none): a second `Unknown`
    // means its row was deleted by hand meanwhile, and is recorded again.
    for _ in 0..2 {
        match db.semaphore_take(&permits, &slots).await? {
            Taken::Granted(mut slots) => {
                for slot in &mut slots {
                    slot.presence = slot.presence.and(epoch);
                }
                return Ok(Some(slots));
            }
            Taken::Busy => return Ok(None),
            Taken::Contended => return Err(Failure::row_locked(Class::Contention, &ask.name)),
            Taken::Mismatch(recorded) => {
                return Err(Failure {
                    class: Class::Other,
                    error: ask.mismatch(recorded),
                })
            }
            Taken::Unknown => match db.semaphore_ensure(&permits).await? {
                Some(recorded) if recorded != permits.permits => {
                    return Err(Failure {
                        class: Class::Other,
                        error: ask.mismatch(recorded),
                    })
                }
                _ => {}
            },
        }
    }
    Ok(None)
}

/// Gives back permits nobody waits for any more, by owner and token, each with one of
/// its name's holds, as a permit's guard does, retrying statements that lost a race;
/// each lapses at its expiry should its release fail.
async fn give_back(handle: &Handle, slots: Vec<Slot>) {
    for slot in slots {
        let id = LockId {
            key: slot.key,
            strategy: Strategy::Lease,
            token: slot.token,
            rw_write: false,
        };
        if let Err(e) = release(handle, &id, None).await {
            tracing::warn!(key = %id.key, error = %e,
                "could not give back a permit taken for a caller that stopped waiting; \
                 it lapses at its expiry");
        }
    }
}

/// Permits an attempt took, by slot, until a guard takes them up (see [`Landing`](super::landing::Landing)).
#[derive(Debug)]
struct TakenPermits(Vec<Slot>);

impl GiveBack for TakenPermits {
    fn give_back(self, handle: Arc<Handle>) -> GivingBack {
        Box::pin(async move { give_back(&handle, self.0).await })
    }
}
