//! The multi-lock's cancel-safe attempt: several leases taken all or none
//! (`db/multi.rs`), run in a task of its own so that it is never cut off
//! half way, and given back when nobody is there to take the grants.
//!
//! The keys come sorted and without repeats, so that every multi-lock takes the keys it
//! shares with another in the same order; each key is then a lease like any other,
//! renewed by the watchdog and released on its own.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::db::multi::Taken;
use crate::db::values::AcquireAll;
use crate::db::{noting_checkout, Failure, Grant};
use crate::support::error::{Class, Error};
use crate::support::strategy_kind::Strategy;

use super::handle::{Handle, InFlight};
use super::landing::{Landing, Leases};

/// What a multi-lock attempt asks for: its keys, sorted and distinct, and the TTL of
/// each lease (validated).
#[derive(Debug, Clone)]
pub(crate) struct MultiAsk {
    pub(crate) keys: Vec<String>,
    pub(crate) ttl: Duration,
}

/// One attempt at every key of `ask`, and when its statements were sent (each lease is
/// valid at least until then plus its TTL).
///
/// `Ok(None)` when a key is held by another owner; [`Class::Contention`] when a key
/// was in use by another acquisition for a moment (try again). (A key this handle
/// holds with another strategy was refused before: `MultiLockRequest`.) `reached` is
/// set once the attempt has a pooled connection.
pub(crate) async fn attempt(
    handle: &Arc<Handle>,
    ask: &MultiAsk,
    reached: Arc<AtomicBool>,
) -> Result<Option<(Landing<Leases>, Instant)>, Failure> {
    // An earlier attempt of this handle on one of the keys, whose caller stopped
    // waiting, may hold it for a moment: the answer is known once it gave it back.
    // Noted before the wait: the caller's deadline may fall while this waits.
    for key in &ask.keys {
        if handle.attempt_under_way(key) {
            reached.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    for key in &ask.keys {
        handle.attempts_settled(key).await;
    }
    let in_flight: Vec<InFlight> = ask.keys.iter().map(|k| handle.attempt_started(k)).collect();
    let sent = Instant::now();
    let (answer, answered) = oneshot::channel();
    let task_handle = handle.clone();
    let task_ask = ask.clone();
    let statements = async move {
        let outcome = statements(&task_handle, &task_ask).await;
        let landing = outcome.map(|taken| {
            taken.map(|grants| {
                let leases = Leases {
                    keys: task_ask.keys,
                    grants,
                    in_flight,
                };
                Landing::new(task_handle, leases)
            })
        });
        // Nobody to hand it to: the landing, dropped here, gives the keys back.
        drop(answer.send(landing));
    };
    // A task of its own, so that the transaction is never dropped half way through
    // (which would leave its keys to the connection's rollback at the pool's leisure).
    tokio::spawn(noting_checkout(reached, statements));
    let outcome = answered.await.map_err(|_| Failure {
        class: Class::Other,
        error: Error::Database(sqlx::Error::WorkerCrashed),
    })??;
    match outcome {
        // Answered past the TTL it asked for: the leases may have lapsed already,
        // counted from when the statements were sent. Given back (by the landing's
        // drop), and the caller told to try again.
        Some(landing) if Instant::now() >= sent + ask.ttl => {
            drop(landing);
            Err(Failure {
                class: Class::Lapsed,
                error: Error::GrantExpired {
                    key: ask.keys.join(","),
                    ttl: ask.ttl,
                    took: sent.elapsed(),
                },
            })
        }
        other => Ok(other.map(|landing| (landing, sent))),
    }
}

/// The attempt's statements: the handle's presence marker first, when it has one (as
/// a lease's attempt does: each key records it only if it is held as the statement
/// runs), then the keys, all or none (`db/multi.rs`).
async fn statements(handle: &Handle, ask: &MultiAsk) -> Result<Option<Vec<Grant>>, Failure> {
    let (presence, epoch) = match &handle.presence {
        Some(p) => {
            let (key, epoch) = p.ensure().await.map_err(|error| Failure {
                class: Class::Other,
                error,
            })?;
            (key, Some(epoch))
        }
        None => (String::new(), None),
    };
    let ttl_us = i64::try_from(ask.ttl.as_micros()).unwrap_or(i64::MAX);
    let all = AcquireAll::new(
        &ask.keys,
        &handle.owner_text,
        Strategy::Lease,
        ttl_us,
        &presence,
    );
    match handle.db.lease_acquire_all(&all).await? {
        Taken::All(mut grants) => {
            for g in &mut grants {
                g.presence = g.presence.and(epoch);
            }
            Ok(Some(grants))
        }
        Taken::Busy => Ok(None),
        Taken::Contended(key) => Err(Failure::row_locked(Class::Contention, &key)),
    }
}
