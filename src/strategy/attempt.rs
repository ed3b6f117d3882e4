//! The cancel-safe attempt: one acquisition of any strategy, run in a task of its own
//! so that it is never cut off half way.
//!
//! If the caller stops waiting (its future was dropped, or its deadline passed),
//! whatever the attempt took is given back: by the task when the caller was gone
//! before the outcome was sent, or by [`Landing`] when the outcome was sent but never
//! read. A lease whose statement waited in the database past its own TTL is given back
//! too: it may have lapsed before it arrived.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::db::{noting_checkout, Failure};
use crate::support::error::{Class, Error};
use crate::support::strategy_kind::Strategy;

use super::grant::{Ask, Granted};
use super::handle::{Handle, InFlight};
use super::release::release;
use super::wait::CONTENTION_RETRIES;
use super::{for_update, lease};

/// One attempt at what `ask` asks, and when its statement was sent (a lease is valid at
/// least until then plus its TTL, whenever the database ran the statement). `wait`: how
/// long a for-update attempt may wait in the database (`None`: not at all).
///
/// `Ok(None)` when the lock is held, [`Class::Contention`] when the attempt lost a race
/// (try again), [`Class::Held`] when a lock of another strategy holds the key.
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
    let sent = Instant::now();
    let task_handle = handle.clone();
    let task_ask = ask.clone();
    let statements: Statements = Box::pin(noting_checkout(reached, async move {
        match task_ask.strategy {
            Strategy::ForUpdate => for_update::attempt(&task_handle, &task_ask, wait).await,
            // A fair attempt made here is a re-entry of a hold of the handle's own.
            Strategy::Lease | Strategy::Insert | Strategy::Fair => {
                lease::attempt(&task_handle, &task_ask)
                    .await
                    .map(|o| o.map(Granted::Lease))
            }
        }
    }));
    // The statements run in the caller's task (a task of their own would cost a spawn
    // and a wake-up on another thread per attempt); should the caller stop waiting
    // before they are done, `Unfinished` moves what is left of them to a task.
    let mut unfinished = Unfinished {
        statements: Some(statements),
        handle: handle.clone(),
        ask: Some(ask.clone()),
        in_flight: Some(in_flight),
        runtime: tokio::runtime::Handle::current(),
    };
    let outcome = match unfinished.statements.as_mut() {
        Some(statements) => statements.await,
        None => unreachable!("the statements are there until they are done"),
    };
    unfinished.statements = None;
    let in_flight = unfinished.in_flight.take();
    match outcome {
        // A statement that waited in the database (for a row another statement was
        // writing, or a fenced transaction) past the TTL it asked for grants a lease
        // that may have lapsed already, counted from when the statement was sent: no
        // grant to hand out. It is given back, and the caller told to try again.
        Ok(Some(Granted::Lease(grant))) if Instant::now() >= sent + ask.ttl => {
            tokio::spawn(give_back(
                handle.clone(),
                ask.clone(),
                Granted::Lease(grant),
                in_flight,
            ));
            // The key was free: not "busy", but a TTL the answer outran.
            Err(Failure {
                class: Class::Lapsed,
                error: Error::GrantExpired {
                    key: ask.key.clone(),
                    ttl: ask.ttl,
                    took: sent.elapsed(),
                },
            })
        }
        // The attempt is over once its caller has its outcome: the mark goes now.
        outcome => {
            drop(in_flight);
            outcome.map(|granted| granted.map(|g| (g, sent)))
        }
    }
}

/// An attempt's statements, owning all they need so that they can finish anywhere.
type Statements = Pin<Box<dyn Future<Output = Result<Option<Granted>, Failure>> + Send>>;

/// An attempt under way in its caller's task. Dropped before its statements are done
/// (the caller stopped waiting), it hands them to a task of their own, which finishes
/// them and gives back whatever they took: an attempt is never cut off half way.
struct Unfinished {
    statements: Option<Statements>,
    handle: Arc<Handle>,
    ask: Option<Ask>,
    in_flight: Option<InFlight>,
    /// The runtime the attempt runs on, for a drop outside of any runtime.
    runtime: tokio::runtime::Handle,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        // A panic in the statements unwinds through here with them half polled: they
        // cannot be resumed, and the transaction or lease they may have taken ends
        // with its connection or at its expiry.
        if std::thread::panicking() {
            return;
        }
        let (Some(statements), Some(ask), in_flight) = (
            self.statements.take(),
            self.ask.take(),
            self.in_flight.take(),
        ) else {
            return;
        };
        let handle = self.handle.clone();
        // Outside of any runtime, the attempt's own runtime finishes it; if that one
        // has shut down, the lease lapses at its expiry (and a transaction ends with
        // its connection).
        let runtime =
            tokio::runtime::Handle::try_current().unwrap_or_else(|_| self.runtime.clone());
        let _entered = runtime.enter();
        drop(runtime.spawn(async move {
            match statements.await {
                Ok(Some(granted)) => give_back(handle, ask, granted, in_flight).await,
                _ => drop(in_flight),
            }
        }));
    }
}

/// Releases a grant nobody is waiting for any more (a transaction is rolled back), and
/// only then ends the attempt's mark.
async fn give_back(handle: Arc<Handle>, ask: Ask, granted: Granted, in_flight: Option<InFlight>) {
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

/// A single try at what `ask` asks: `None` when the key is held. An attempt that lost
/// a deadlock or serialization race is made again a few times first, and counts as
/// busy if the race persists; a lock of another strategy is busy at once.
///
/// # Errors
///
/// [`Error::GrantExpired`] when the key was free but the grant's answer outran its TTL;
/// whatever else the attempt failed with.
pub(crate) async fn try_once(
    handle: &Arc<Handle>,
    ask: &Ask,
) -> Result<Option<(Granted, Instant)>, Error> {
    let mut tries = 0;
    loop {
        let reached = Arc::new(AtomicBool::new(false));
        match attempt(handle, ask, None, reached).await {
            Ok(granted) => return Ok(granted),
            // Held by a lock of another strategy: a definite answer.
            Err(f) if f.class == Class::Held => return Ok(None),
            Err(f) if f.class == Class::Contention && tries < CONTENTION_RETRIES => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(u64::from(tries))).await;
            }
            Err(f) if f.class == Class::Contention => return Ok(None),
            // The key was free, but the answer came too late to use the grant: not
            // "busy".
            Err(f) => return Err(f.error),
        }
    }
}
