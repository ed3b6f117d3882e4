//! The read-write lock's protocols: the cancel-safe read attempt, a read hold taken in
//! a transaction of its own (`rwlock/steps.rs`), never cut off half way (`landing::land`),
//! and given back when nobody is there to take it; and the writer's wait, its intent
//! first, then the write side.
//!
//! The write side needs no attempt of its own: it is a lease on the lock's name, taken
//! by the lease's attempt (recorded as the write side: `Ask::write`), busy while reads
//! hold the name (`db/shared.rs`).

mod steps;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use self::steps::Read;
use crate::db::values::Acquire;
use crate::db::{Failure, Grant};
use crate::support::error::{Class, Error, Result};
use crate::support::strategy_kind::Strategy;
use crate::support::validate::{read_key, WRITE_MARKER};

use super::handle::{Handle, InFlight};
use super::held::Held;
use super::landing::{land, Landing, Leases};
use super::lease::Renewal;
use super::lock_wait;
use super::wait::{Contention, Turn, Wait};
use super::Ask;

/// The key of `owner`'s intent to write the read-write lock `name`, held while it
/// waits.
pub(crate) fn intent_key(name: &str, owner: &str) -> String {
    format!("{name}{WRITE_MARKER}{owner}")
}

/// A writer's wait for the write side `write` asks for: its intent first (the lease
/// `intent` asks for, on [`intent_key`], held and renewed while it waits), so that
/// reads arriving meanwhile wait behind it; then the write side, a lease on the name,
/// busy while reads hold the name. The intent is given back once the write side is
/// granted or given up, before the answer. Both waits end at `deadline`, whose
/// timeout names the lock. The intent's wait runs in `intent_span` (its own request's
/// span), the rest in the caller's.
///
/// Cancel safe: dropped, the intent is given back in the background (its drop), and
/// so is the write side once granted (held from its grant on); a write attempt cut
/// off gives back what it took, as every attempt does.
///
/// # Errors
///
/// The waits' errors ([`Error::Timeout`] at the deadline). Should the intent's release
/// fail, its error, and the write side just granted is given back in the background.
pub(crate) async fn write(
    handle: &Arc<Handle>,
    intent: &Ask,
    intent_span: tracing::Span,
    write: &Ask,
    renewal: Renewal,
    started: Instant,
    deadline: Option<Instant>,
) -> Result<Held> {
    let named = |e| match e {
        Error::Timeout { .. } => Error::Timeout {
            key: write.key.clone(),
            waited: started.elapsed(),
        },
        other => other,
    };
    let held_intent = async {
        let a = lock_wait::wait(handle, intent, deadline).await?;
        let held = a.hold(handle, intent, started, renewal, None);
        intent_span.record("token", held.id.token);
        Ok(held)
    }
    .instrument(intent_span.clone())
    .await
    .map_err(named)?;
    // The write side's own wait is metered from here, as its own request's.
    let write_started = Instant::now();
    let granted = lock_wait::wait(handle, write, deadline)
        .await
        .map(|a| a.hold(handle, write, write_started, renewal, None))
        .map_err(named);
    // The intent goes before the answer, granted or not, in a task of its own: should
    // this future be dropped meanwhile, the release still completes (one cut off half
    // way would leave the intent to its TTL, and readers behind it).
    let released = match tokio::spawn(held_intent.release()).await {
        Ok(released) => released.map(drop),
        // The release task panicked or was cancelled with its runtime: the intent
        // lapses at its TTL.
        Err(_) => Ok(()),
    };
    // Should the intent's release fail, the write side is dropped: given back in the
    // background.
    released.and(granted)
}

/// A reader's wait for a read hold of `name` for `ttl`, until `deadline`
/// ([`Error::Timeout`]): one read attempt per turn, woken early where the handle
/// listens when the name is freed (by its writer's release, or the release of the
/// lock or writer that held it).
///
/// Cancel safe: an attempt cut off gives back what it took.
pub(crate) async fn read(
    handle: &Arc<Handle>,
    name: &str,
    ttl: Duration,
    deadline: Option<Instant>,
) -> Result<(Landing<Leases>, Instant)> {
    // Between its polls a reader waits in the server for the writer's release: the
    // writer's write side is a lease on the name, which keeps the name's wake lock.
    let mut wait = Wait::new(handle, name, deadline)
        .woken_for(name)
        .woken_by_writer();
    let mut contention = Contention::new(true);
    loop {
        let outcome = wait
            .attempt(read_attempt(handle, name, ttl, wait.reached()))
            .await?;
        let raced_now = matches!(&outcome, Err(f) if f.class == Class::Contention);
        match wait.judge(outcome)? {
            Turn::Granted(granted) => return Ok(granted),
            Turn::Again => continue,
            // Lost a race for the name's gate (readers woken together by a writer's
            // release race for it): try again soon, not at the next poll; a race lost
            // more often than a single try's retries in a row (a gate kept for a
            // whole transaction: a for-update holder of the name) waits as busy.
            Turn::Busy if raced_now => match contention.lost() {
                Some(pause) => wait.pause_for(pause).await?,
                None => {
                    contention = Contention::new(true);
                    wait.pause().await?;
                }
            },
            Turn::Busy => {
                contention = Contention::new(true);
                wait.pause().await?;
            }
        }
    }
}

/// One attempt at a read hold of `name` for `ttl`, and when it was sent.
///
/// `Ok(None)` when a writer holds or waits for the lock; [`Class::Contention`] when the
/// key's gate was in use for a moment.
pub(crate) async fn read_attempt(
    handle: &Arc<Handle>,
    name: &str,
    ttl: Duration,
    reached: Arc<AtomicBool>,
) -> Result<Option<(Landing<Leases>, Instant)>, Failure> {
    let key = read_key(name, &handle.owner_text);
    // Noted before the wait: the caller's deadline may fall while this waits.
    if handle.attempt_under_way(&key) {
        reached.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    // Alone on the read's key, until the read's guard holds it (or the read is given
    // back): the release of this handle's write side of the name waits for it, so
    // that it sees the read, and no read of the name starts while it runs.
    let in_flight: Vec<InFlight> = vec![handle.attempt_alone(&key).await];
    let task_handle = handle.clone();
    let task_name = name.to_owned();
    let statements = async move {
        let grant = statement(&task_handle, &task_name, ttl).await?;
        Ok(grant.map(|grant| Leases {
            keys: vec![key],
            grants: vec![grant],
            in_flight,
        }))
    };
    land(handle, name, ttl, reached, statements).await
}

/// The read's transaction.
///
/// With presence, the read records the handle's marker as a lease does (see
/// `Handle::presence_marker`), and claims the epoch read before it was sent.
async fn statement(handle: &Handle, name: &str, ttl: Duration) -> Result<Option<Grant>, Failure> {
    let (presence, epoch) = handle.presence_marker().await?;
    let a = Acquire {
        key: name,
        owner: &handle.owner_text,
        strategy: Strategy::Lease.name(),
        ttl_us: i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX),
        presence: &presence,
        gone: "",
    };
    match handle.db.rw_read(&a).await? {
        Read::Granted(mut grant) => {
            grant.presence = grant.presence.and(epoch);
            Ok(Some(grant))
        }
        Read::Busy => Ok(None),
        Read::Contended => Err(Failure::row_locked(Class::Contention, name)),
    }
}
