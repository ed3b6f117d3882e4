//! The read-write lock's cancel-safe read attempt: a read hold taken in a transaction
//! of its own (`db/rw.rs`), never cut off half way (`landing::land`), and
//! given back when nobody is there to take it.
//!
//! The write side needs no attempt of its own: it is a lease on the lock's name, taken
//! by the lease's attempt (recorded as the write side: `Ask::write`), busy while reads
//! hold the name (`db/shared.rs`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::db::rw::Read;
use crate::db::values::Acquire;
use crate::db::{Failure, Grant};
use crate::support::error::Class;
use crate::support::strategy_kind::Strategy;
use crate::support::validate::{read_key, WRITE_MARKER};

use super::handle::{Handle, InFlight};
use super::landing::{land, Landing, Leases};

/// The key of `owner`'s intent to write the read-write lock `name`, held while it
/// waits.
pub(crate) fn intent_key(name: &str, owner: &str) -> String {
    format!("{name}{WRITE_MARKER}{owner}")
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
