//! The lease and the insert strategies, written once: a row with an owner and an
//! expiry on the database clock, taken by one atomic upsert when it is free, expired
//! or already ours, kept alive by the watchdog, and given back by an owner- and
//! token-checked statement. They differ at release only: a lease row stays, marked
//! free; an insert row is deleted, so that a free lock is no row at all.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::Instrument;

use crate::db::retry::retry_contention;
use crate::db::values::{Acquire, Extend};
use crate::db::{Failure, Grant};
use crate::keepers::watchdog::Track;
use crate::support::error::{Class, Error, Result};
use crate::support::lost::LostSignal;

use super::grant::{Ask, LockId, WRITE_SIDE};
use super::handle::Handle;
use super::release::release;

/// One acquisition statement: the grant, when the row as it stands after the
/// statement is ours.
///
/// [`Class::Contention`] when the key's gate was taken (PostgreSQL: a for-update holder,
/// or another acquisition under way); `StrategyConflict` when this owner holds the key
/// with the other strategy (a re-entry keeps the strategy the key is held with, and the
/// statement leaves the row as it was).
///
/// With presence, the handle's marker is taken first (once): the statement records it
/// with the lease only if it is held as the statement runs, and says so; the grant
/// then claims the epoch of the handle's presence read before it was sent.
///
/// The write side of a read-write lock that finds the name busy drops first the reads
/// whose holders are gone (presence: their markers free, their processes dead), which
/// hold the name for nobody, and tries again if it dropped any (`rwlock/steps.rs`): one
/// statement more for a busy write side, and a dead reader costs a writer a poll, not
/// the read's TTL.
pub(crate) async fn attempt(handle: &Handle, ask: &Ask) -> Result<Option<Grant>, Failure> {
    let granted = attempt_once(handle, ask).await?;
    if granted.is_some()
        || !ask.write
        || handle.db.rw_drop_gone(&ask.key, &handle.owner_text).await? == 0
    {
        return Ok(granted);
    }
    attempt_once(handle, ask).await
}

/// [`attempt`]'s statement, once.
async fn attempt_once(handle: &Handle, ask: &Ask) -> Result<Option<Grant>, Failure> {
    let (presence, epoch) = handle.presence_marker().await?;
    let acquire = Acquire {
        key: &ask.key,
        owner: &handle.owner_text,
        strategy: ask.recorded(),
        ttl_us: ask.ttl_us(),
        presence: &presence,
        gone: "",
    };
    let Some(mut grant) = handle.db.lease_acquire(&acquire).await?.into_iter().next() else {
        handle.server_waits.seen(&ask.key, None);
        return Ok(None);
    };
    if grant.gate_closed() {
        return Err(Failure::row_locked(Class::Contention, &ask.key));
    }
    // Another owner's lease; or ours, kept by an at-least hold after its release with
    // no hold left (MariaDB answers the row as it stands): busy for us too. The
    // holder's marker, where the statement answers one, is what the wait may wait for
    // in the server.
    if grant.owner != handle.owner_text || grant.hold_count < 1 {
        handle.server_waits.seen(&ask.key, grant.holder.take());
        return Ok(None);
    }
    handle.server_waits.seen(&ask.key, None);
    if grant.strategy != ask.recorded() {
        // Ours, held otherwise, and left as it was (MariaDB answers the row as it
        // stands; the others answer nothing then). The write side of a read-write lock
        // and another lock of the owner on the name are two holders: busy, as for two
        // owners (the handle refuses such a mix before any SQL, but two requests made at
        // once both pass its checks, and the database decides between them).
        if ask.write || grant.strategy == WRITE_SIDE {
            return Ok(None);
        }
        return Err(Failure {
            class: Class::Other,
            error: Error::StrategyConflict {
                key: ask.key.clone(),
                held: grant.strategy.parse().unwrap_or_default(),
                requested: ask.strategy,
            },
        });
    }
    grant.presence = grant.presence.and(epoch);
    Ok(Some(grant))
}

/// Pushes a lease's expiry to at least `ttl` from now: the new expiry, `None` when the
/// lease is no longer ours. Waits a second at most on a row lock on MariaDB, as
/// [`release`].
async fn extend(handle: &Handle, id: &LockId, ttl_us: i64) -> Result<Option<i64>> {
    let extend = Extend {
        held: id.held(&handle.owner_text),
        ttl_us,
    };
    let db = &handle.db;
    retry_contention(|| async {
        match db.lease_extend(&extend).await {
            Err(f) if f.class == Class::Contention && !db.still_held(&extend.held).await? => {
                Ok(None)
            }
            other => other,
        }
    })
    .await
}

/// How a grant asks the watchdog to keep it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    pub(crate) ttl: Duration,
    pub(crate) auto_renew: bool,
    pub(crate) max_hold: Option<Duration>,
}

/// A held lease or insert lock: its watchdog registration and what the database last
/// said of it.
#[derive(Debug)]
pub(crate) struct LeaseHold {
    registration: u64,
    expires_at: DateTime<Utc>,
    hold_count: u32,
}

impl LeaseHold {
    /// Registers a grant with the watchdog, which counts its validity from `sent`.
    pub(crate) fn start(
        handle: &Handle,
        id: &LockId,
        grant: &Grant,
        sent: Instant,
        renewal: Renewal,
    ) -> (Self, LostSignal) {
        let renew_until = match (renewal.auto_renew, renewal.max_hold) {
            (false, _) => Some(sent),
            // A cap too far to represent is no cap.
            (true, Some(cap)) => sent.checked_add(cap),
            (true, None) => None,
        };
        let track = Track {
            strategy: id.strategy,
            ttl: renewal.ttl,
            sent,
            renew_until,
            presence: grant.presence,
        };
        let (lost, registration) = handle.watchdog.register(&id.key, grant.token, track);
        // A renewed lease hears of an operator's revocation at once where the family
        // listens (PostgreSQL); a lease that is not renewed would learn nothing from it.
        #[cfg(feature = "postgres")]
        if let (Some(n), true) = (&handle.notifier, renewal.auto_renew) {
            n.holding();
        }
        let hold = Self {
            registration,
            expires_at: micros_to_utc(grant.expires_us),
            hold_count: u32::try_from(grant.hold_count).unwrap_or(0),
        };
        (hold, lost)
    }

    pub(crate) fn expires_at(&self) -> DateTime<Utc> {
        self.expires_at
    }

    pub(crate) fn hold_count(&self) -> u32 {
        self.hold_count
    }

    /// Pushes the expiry to at least `ttl` from now; `false` when the lease is no
    /// longer ours.
    pub(crate) async fn extend(
        &mut self,
        handle: &Handle,
        id: &LockId,
        ttl: Duration,
    ) -> Result<bool> {
        let sent = Instant::now();
        let ttl_us = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        let Some(expires_us) = extend(handle, id, ttl_us).await? else {
            return Ok(false);
        };
        self.expires_at = micros_to_utc(expires_us);
        handle
            .watchdog
            .extended(&id.key, self.registration, sent, ttl);
        Ok(true)
    }

    /// Stops renewal of this hold, then gives it back, keeping the key for the
    /// at-least hold of the handle's holds of it, if they asked for one.
    pub(crate) async fn release(&self, handle: &Handle, id: &LockId) -> Result<bool> {
        handle.watchdog.unregister(&id.key, self.registration);
        release(handle, id, handle.at_least(&id.key)).await
    }

    /// Stops renewal of this hold at once and gives it back in the background, on the
    /// runtime the caller has entered, as [`release`](Self::release) does.
    pub(crate) fn release_in_background(
        &self,
        handle: &Arc<Handle>,
        id: LockId,
        wake: Option<crate::keepers::wake_lock::WakeHold>,
    ) {
        handle.watchdog.unregister(&id.key, self.registration);
        // Read now: the guard's hold is counted until its drop ends.
        let at_least = handle.at_least(&id.key);
        let span = id.release_span(&handle.owner_text);
        let handle = handle.clone();
        let released = async move {
            if let Err(e) = release(&handle, &id, at_least).await {
                tracing::warn!(error = %e,
                    "releasing a dropped guard failed; the lease lapses at its expiry");
            }
            drop(wake);
        };
        tokio::spawn(released.instrument(span));
    }
}

/// Microseconds since the Unix epoch, as the SQL reports times.
pub(crate) fn micros_to_utc(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
