//! The multi-lock's wait and its cancel-safe attempt: several leases taken all or none
//! (`multi/steps.rs`), never cut off half way (`landing::land`), and given back when
//! nobody is there to take the grants.
//!
//! The keys come sorted and without repeats, so that every multi-lock takes the keys it
//! shares with another in the same order; each key is then a lease like any other,
//! renewed by the watchdog and released on its own.

mod steps;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use self::steps::Taken;
use crate::db::values::AcquireAll;
use crate::db::{Failure, Grant};
use crate::support::error::{Class, Result};
use crate::support::strategy_kind::Strategy;

use super::handle::{Handle, InFlight};
use super::landing::{land, Landing, Leases};
use super::wait::{Turn, Wait};

/// What a multi-lock attempt asks for: its keys, sorted and distinct, and the TTL of
/// each lease (validated).
#[derive(Debug, Clone)]
pub(crate) struct MultiAsk {
    pub(crate) keys: Vec<String>,
    pub(crate) ttl: Duration,
}

/// Takes every key of `ask`, waiting until all are free at once, or until `deadline`
/// ([`Error::Timeout`](crate::Error::Timeout)): one attempt per turn, woken early by
/// the release of any of the keys where the handle listens.
///
/// Cancel safe: an attempt cut off gives back what it took.
pub(crate) async fn wait(
    handle: &Arc<Handle>,
    ask: &MultiAsk,
    deadline: Option<Instant>,
) -> Result<(Landing<Leases>, Instant)> {
    let keys: Vec<&str> = ask.keys.iter().map(String::as_str).collect();
    let mut wait = Wait::new(handle, ask.keys.join(","), deadline).woken_for_any(&keys);
    loop {
        let outcome = wait.attempt(attempt(handle, ask, wait.reached())).await?;
        match wait.judge(outcome)? {
            Turn::Granted(granted) => return Ok(granted),
            Turn::Again => continue,
            Turn::Busy => wait.pause().await?,
        }
    }
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
) -> std::result::Result<Option<(Landing<Leases>, Instant)>, Failure> {
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
    let task_handle = handle.clone();
    let task_ask = ask.clone();
    // Never dropped half way (which would leave its keys to the connection's rollback
    // at the pool's leisure): see `land`.
    let statements = async move {
        let taken = statements(&task_handle, &task_ask).await?;
        Ok(taken.map(|grants| Leases {
            keys: task_ask.keys,
            grants,
            in_flight,
        }))
    };
    land(handle, &ask.keys.join(","), ask.ttl, reached, statements).await
}

/// The attempt's statements: the handle's presence marker first, when it has one (as
/// a lease's attempt does: each key records it only if it is held as the statement
/// runs), then the keys, all or none (`multi/steps.rs`).
async fn statements(handle: &Handle, ask: &MultiAsk) -> Result<Option<Vec<Grant>>, Failure> {
    let (presence, epoch) = handle.presence_marker().await?;
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
