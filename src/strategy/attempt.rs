//! The lock's cancel-safe attempt: one acquisition of any strategy, never cut off half
//! way (`landing::land`).
//!
//! If the caller stops waiting (its future was dropped, or its deadline passed),
//! whatever the attempt took is given back ([`land`], as for every primitive). A
//! lease whose statement waited in the database past its own TTL is given back too:
//! it may have lapsed before it arrived (a for-update lock, a transaction, does not
//! lapse).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::db::Failure;
use crate::support::error::Error;
use crate::support::strategy_kind::Strategy;

use super::grant::{Ask, Granted};
use super::handle::{Handle, InFlight};
use super::landing::{land, GiveBack, GivingBack};
use super::release::release;
use super::wait::single_try;
use super::{for_update, lease};

/// One attempt at what `ask` asks, and when its statement was sent (a lease is valid at
/// least until then plus its TTL, whenever the database ran the statement). `wait`: how
/// long a for-update attempt may wait in the database (`None`: not at all).
///
/// `Ok(None)` when the lock is held, [`Class::Contention`] when the attempt lost a race
/// (try again), [`Class::Held`] when a lock of another strategy holds the key.
///
/// [`Class::Contention`]: crate::support::error::Class::Contention
/// [`Class::Held`]: crate::support::error::Class::Held
///
/// `reached` is set once a statement of the attempt has a pooled connection, or once
/// the attempt has waited for an earlier attempt of the handle on the key: it stays
/// readable after the caller stopped waiting.
pub(crate) async fn attempt(
    handle: &Arc<Handle>,
    ask: &Ask,
    wait: Option<Duration>,
    reached: Arc<AtomicBool>,
) -> Result<Option<(Granted, Instant)>, Failure> {
    // An earlier attempt of this handle on the key whose caller stopped waiting may be
    // holding it for a moment: the answer is known once it has given it back. That
    // attempt had a connection (or waited for one alongside this): a wait held up by it
    // was served by the pool, which is not exhausted on its account.
    // Noted before the wait, not after it: the caller's deadline may fall while this
    // waits (a for-update attempt cut off waits in the database to the end of its
    // slice, holding the connection).
    if handle.attempt_under_way(&ask.key) {
        reached.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    handle.attempts_settled(&ask.key).await;
    let in_flight = handle.attempt_started(&ask.key);
    let task_handle = handle.clone();
    let task_ask = ask.clone();
    let statements = async move {
        let granted = match task_ask.strategy {
            Strategy::ForUpdate => for_update::attempt(&task_handle, &task_ask, wait).await,
            // A fair attempt made here is a re-entry of a hold of the handle's own, or
            // the fair lock's one statement for a key nobody is queued for (fair.rs).
            Strategy::Lease | Strategy::Insert | Strategy::Fair => {
                lease::attempt(&task_handle, &task_ask)
                    .await
                    .map(|o| o.map(Granted::Lease))
            }
        };
        // Nothing taken: the attempt's mark ends with its statements.
        Ok(granted?.map(|granted| Taken {
            ask: task_ask,
            granted,
            in_flight,
        }))
    };
    let landed = land(handle, &ask.key, ask.ttl, reached, statements).await?;
    // The attempt is over once its caller has its outcome: the mark goes now.
    Ok(landed.map(|(landing, sent)| (landing.take().granted, sent)))
}

/// What one attempt took, with its mark on the key, which ends once it is given back
/// or taken up.
struct Taken {
    ask: Ask,
    granted: Granted,
    in_flight: InFlight,
}

impl GiveBack for Taken {
    fn give_back(self, handle: Arc<Handle>) -> GivingBack {
        Box::pin(give_back(handle, self.ask, self.granted, self.in_flight))
    }

    /// A lease lapses at its TTL; a for-update lock's transaction does not.
    fn lapses(&self) -> bool {
        matches!(self.granted, Granted::Lease(_))
    }
}

/// Releases a grant nobody is waiting for any more (a transaction is rolled back), and
/// only then ends the attempt's mark.
async fn give_back(handle: Arc<Handle>, ask: Ask, granted: Granted, in_flight: InFlight) {
    let grant = match granted {
        Granted::Lease(grant) => grant,
        Granted::Tx(tx, _, _) => {
            // Should the rollback fail, the connection is closed as it goes back to
            // the pool, which ends the transaction on the server all the same.
            let _ = tx.rollback().await;
            drop(in_flight);
            return;
        }
    };
    // Named as the ask's grant, a write side's included: its give-back is the write
    // side's release, which leaves the name to a read of the owner granted beside it.
    let id = ask.id(grant.token);
    // A re-entry nobody waits for gives back its hold alone; should it be the last,
    // the key is kept as the holds before it asked.
    let at_least = handle.at_least(&id.key);
    if let Err(e) = release(&handle, &id, at_least).await {
        tracing::warn!(key = %id.key, error = %e,
            "could not give back a lock taken for a caller that stopped waiting; \
             it lapses at its expiry");
    }
    drop(in_flight);
}

/// A single try at what `ask` asks: `None` when the key is held (see
/// [`single_try`]).
///
/// # Errors
///
/// [`Error::GrantExpired`] when the key was free but the grant's answer outran its TTL;
/// whatever else the attempt failed with.
pub(crate) async fn try_once(
    handle: &Arc<Handle>,
    ask: &Ask,
) -> Result<Option<(Granted, Instant)>, Error> {
    single_try(|reached| attempt(handle, ask, None, reached)).await
}
