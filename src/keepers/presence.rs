//! A handle's presence (see `LockerBuilder::presence`): the session that holds its
//! marker, taken lazily by the first acquisition that needs it, checked by the
//! watchdog at each tick, and closed when the handle goes.
//!
//! Each session the handle opens has a number, its epoch. A lease records the epoch
//! it was granted under; once a session is found gone, the epoch moves on and every
//! lease of an earlier epoch is lost (`LostReason::PresenceLost`): another owner may
//! have taken it while the marker was free.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::db::presence::Session;
use crate::db::Db;
use crate::support::error::Error;

/// How long a session that nothing checked is trusted by an acquisition before it asks
/// the server again: a session that ended while the handle held nothing is found out
/// before a lease claims it, not at the next tick.
const TRUSTED: Duration = Duration::from_secs(1);

/// The session slot and what is known of it.
#[derive(Debug, Default)]
struct Slot {
    session: Option<Session>,
    /// When the server last said the session holds its marker.
    confirmed: Option<Instant>,
    /// Sessions opened so far.
    opened: u64,
    /// Whether the server allows presence at all (asked once).
    allowed: bool,
}

/// One handle's presence.
#[derive(Debug)]
pub(crate) struct Presence {
    db: Db,
    owner: String,
    slot: Mutex<Slot>,
    /// The epoch of the current (or next) session: leases of earlier ones are lost.
    epoch: AtomicU64,
}

impl Presence {
    pub(crate) fn new(db: Db, owner: String) -> Self {
        Self {
            db,
            owner,
            slot: Mutex::new(Slot::default()),
            epoch: AtomicU64::new(0),
        }
    }

    /// The current epoch: a lease granted under an earlier one is lost.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The marker's key to record with a lease, and the epoch the lease belongs to:
    /// the session is opened (or opened again, after it was found gone) first.
    ///
    /// # Errors
    ///
    /// [`Error::PresenceUnavailable`] where presence cannot work (a Galera node, say);
    /// a database error, or a timed-out connection, when the session cannot be opened
    /// or checked: each wait is bounded by the pool's acquire timeout.
    pub(crate) async fn ensure(&self) -> Result<(String, u64), Error> {
        let limit = self.db.acquire_timeout();
        let timed_out = |_| Error::Database(sqlx::Error::PoolTimedOut);
        let mut slot = tokio::time::timeout(limit, self.slot.lock())
            .await
            .map_err(timed_out)?;
        let fresh = slot.confirmed.is_some_and(|at| at.elapsed() < TRUSTED);
        if let Some(session) = slot.session.as_mut() {
            // No answer in time says nothing of the session: the caller is told to try
            // again, and the leases that claim it are left alone.
            let holds = fresh
                || tokio::time::timeout(limit, session.holds())
                    .await
                    .map_err(timed_out)?
                    .unwrap_or(false);
            if holds {
                if !fresh {
                    slot.confirmed = Some(Instant::now());
                }
                let key = slot.session.as_ref().map(|s| s.key().to_owned());
                return Ok((key.unwrap_or_default(), self.epoch()));
            }
            self.gone(&mut slot);
        }
        if !slot.allowed {
            self.db.presence_on_server().await?;
            slot.allowed = true;
        }
        let opening = self.db.open_presence(&self.owner, slot.opened);
        let session = tokio::time::timeout(limit, opening)
            .await
            .map_err(timed_out)??;
        slot.opened += 1;
        let key = session.key().to_owned();
        slot.session = Some(session);
        slot.confirmed = Some(Instant::now());
        Ok((key, self.epoch()))
    }

    /// Whether the session still holds its marker, asked within `limit`: `Some(false)`
    /// when it is gone (the epoch has moved on then), `None` when the server did not
    /// answer in time or no session is open (nothing is known).
    pub(crate) async fn check(&self, limit: Duration) -> Option<bool> {
        let mut slot = tokio::time::timeout(limit, self.slot.lock()).await.ok()?;
        let session = slot.session.as_mut()?;
        match tokio::time::timeout(limit, session.holds()).await {
            Err(_) => None,
            Ok(Ok(true)) => {
                slot.confirmed = Some(Instant::now());
                Some(true)
            }
            Ok(Ok(false) | Err(_)) => {
                self.gone(&mut slot);
                Some(false)
            }
        }
    }

    /// The session is gone: closed for good, and the epoch moved on.
    fn gone(&self, slot: &mut Slot) {
        tracing::warn!(owner = %self.owner,
            "the presence session ended; the leases that claimed it are lost");
        if let Some(session) = slot.session.take() {
            session.close();
        }
        slot.confirmed = None;
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

/// Closes the session without blocking: the marker is freed at once.
impl Drop for Presence {
    fn drop(&mut self) {
        if let Some(session) = self.slot.get_mut().session.take() {
            session.close();
        }
    }
}
