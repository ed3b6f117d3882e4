//! A handle's presence (see `LockerBuilder::presence`): the marker its leases record,
//! taken by the first acquisition that needs one, and on the servers kept by two tasks
//! until the handle goes.
//!
//! The keeper holds the marker on one connection, which idles (so that the server sees
//! a dead process's socket close at once), and waits for it on a second, the standby.
//! When the holder connection ends (killed, timed out, dropped by a proxy, or its
//! server restarted), the server hands the marker to the standby in the same step: no
//! other session can find it free in between, no lease can be taken over, and the
//! handle knows within a round trip. The standby becomes the holder and a new standby
//! is opened. Only while no standby waits (it ended, and the next is being opened, or
//! cannot be) can the holder connection end unseen and the marker be free.
//!
//! Each time a connection of the handle takes the marker, the presence's epoch moves
//! on, and the checker asks the database, in one statement, which leases granted under
//! an earlier epoch are still the handle's (a renewal that extends nothing): a lease
//! taken over while the marker was free is found taken and fires `lost()` with
//! `LostReason::PresenceLost`; the others are the handle's, under a marker held again,
//! and stay. While no standby waits, the checker asks the same of every lease that
//! records the marker, every [`UNWATCHED_CHECK`]. A takeover needs the marker free: it
//! can only run while the holder connection is gone, and the checker's answer comes
//! after it (PostgreSQL: the taker holds the marker until it commits, so the handle
//! takes it back only then; MariaDB: the taker holds the row the check renews).
//!
//! On SQLite the marker is a file lock held by the process itself: nothing to keep.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{watch, Mutex, Notify};

#[cfg(feature = "sqlite")]
use crate::db::marker_file::MarkerFile;
use crate::db::presence::Conn;
use crate::db::statement::batch_json;
use crate::db::values::Renew;
use crate::db::Db;
use crate::keepers::watchdog::leases::State;
use crate::support::error::Error;

/// The first pause after a presence connection could not be opened, or the leases
/// could not be checked (after one retry at once); doubled at each failure in a row,
/// up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(2);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// While no standby waits for the marker, how often the leases that record it are
/// checked: the holder connection may end meanwhile unseen, and a lease be taken.
const UNWATCHED_CHECK: Duration = Duration::from_millis(25);

/// How long a handle that goes waits for its presence connections to say goodbye to
/// the server, before it drops them.
const GOODBYE: Duration = Duration::from_secs(1);

/// What the handle and its presence tasks share.
#[derive(Debug, Default)]
struct Shared {
    /// The marker the acquisitions record (PostgreSQL: its key; MariaDB: its name;
    /// SQLite: nothing), with the epoch: how many times a connection of the handle
    /// took it after the first. Changed together.
    current: std::sync::Mutex<(String, u64)>,
    /// The epoch, readable without the lock.
    epoch: AtomicU64,
    /// Whether a standby's wait for the marker was sent: then the end of the holder
    /// connection is seen within a round trip.
    watched: AtomicBool,
    /// Wakes the checker: the epoch moved, or a lease of an earlier one registered.
    check: Notify,
    /// The leases of the handle's watchdog.
    leases: OnceLock<Weak<State>>,
}

impl Shared {
    fn current(&self) -> (String, u64) {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether a standby's wait for the marker was sent. The checker is woken when
    /// none is: it checks every [`UNWATCHED_CHECK`] from then on.
    fn watch(&self, watched: bool) {
        if self.watched.swap(watched, Ordering::AcqRel) != watched && !watched {
            self.check.notify_one();
        }
    }

    /// A connection of the handle took `marker`: a new epoch.
    fn taken(&self, marker: String) {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        current.0 = marker;
        current.1 += 1;
        self.epoch.store(current.1, Ordering::Release);
        drop(current);
        self.check.notify_one();
    }
}

/// How far the presence got.
#[derive(Debug, Default)]
struct Start {
    started: bool,
    /// Whether the server allows presence at all (asked once).
    allowed: bool,
    #[cfg(feature = "sqlite")]
    file: Option<MarkerFile>,
}

/// One handle's presence.
#[derive(Debug)]
pub(crate) struct Presence {
    db: Db,
    owner: String,
    shared: Arc<Shared>,
    started: AtomicBool,
    start: Mutex<Start>,
    /// Dropped with the handle, which ends the tasks.
    stop: watch::Sender<()>,
}

impl Presence {
    pub(crate) fn new(db: Db, owner: String) -> Self {
        Self {
            db,
            owner,
            shared: Arc::default(),
            started: AtomicBool::new(false),
            start: Mutex::default(),
            stop: watch::channel(()).0,
        }
    }

    /// Tells the presence which leases to check: those its watchdog tracks.
    pub(crate) fn attach(&self, leases: Weak<State>) {
        let _ = self.shared.leases.set(leases);
    }

    /// The current epoch: a lease granted under an earlier one is checked.
    pub(crate) fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// A lease granted under an earlier epoch was registered: check it.
    pub(crate) fn check_soon(&self) {
        self.shared.check.notify_one();
    }

    /// The marker to record with a lease, and the epoch the lease is granted under,
    /// read before the acquisition is sent. The first call takes the marker and opens
    /// the standby; the others read it, without a round trip: the acquisition's own
    /// statement records the marker only if it is held as it runs.
    ///
    /// # Errors
    ///
    /// [`Error::PresenceUnavailable`] where presence cannot work (a Galera node, say);
    /// a database error, or a timed-out connection, when the first marker cannot be
    /// taken or its standby connection cannot be opened: each wait is bounded by the
    /// pool's acquire timeout. Tried again at the next call.
    pub(crate) async fn ensure(&self) -> Result<(String, u64), Error> {
        if self.started.load(Ordering::Acquire) {
            return Ok(self.shared.current());
        }
        let limit = self.db.acquire_timeout();
        let mut start = tokio::time::timeout(limit, self.start.lock())
            .await
            .map_err(|_| Error::Database(sqlx::Error::PoolTimedOut))?;
        if start.started {
            return Ok(self.shared.current());
        }
        if !start.allowed {
            self.db.presence_on_server().await?;
            start.allowed = true;
        }
        if self.db.presence_on_connections() {
            // Both connections, or no presence: a handle that cannot keep a standby
            // cannot learn in time that its marker's connection ended.
            let mut holder = self.db.presence_connect().await?;
            let taken = match self.db.presence_take(&mut holder, &self.owner).await {
                Ok(marker) => self.db.presence_connect().await.map(|s| (marker, s)),
                Err(e) => Err(e),
            };
            let (marker, standby) = match taken {
                Ok(taken) => taken,
                Err(e) => {
                    holder.close();
                    return Err(e);
                }
            };
            *self
                .shared
                .current
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = (marker, 0);
            let keeper = Keeper {
                db: self.db.clone(),
                owner: self.owner.clone(),
                shared: self.shared.clone(),
                stop: self.stop.subscribe(),
            };
            tokio::spawn(keeper.clone().keep(holder, standby));
            tokio::spawn(keeper.check());
        } else {
            #[cfg(feature = "sqlite")]
            {
                start.file = Some(self.db.presence_file(&self.owner)?);
            }
        }
        start.started = true;
        self.started.store(true, Ordering::Release);
        Ok(self.shared.current())
    }
}

/// Frees the marker at once: the tasks end with the handle (their stop signal is
/// dropped here) and close their connections; the marker file is removed.
impl Drop for Presence {
    fn drop(&mut self) {
        #[cfg(feature = "sqlite")]
        if let Some(file) = self.start.get_mut().file.take() {
            file.close();
        }
    }
}

/// What the presence tasks work with.
#[derive(Debug, Clone)]
struct Keeper {
    db: Db,
    owner: String,
    shared: Arc<Shared>,
    /// Ends (its sender dropped) when the handle goes.
    stop: watch::Receiver<()>,
}

impl Keeper {
    /// Holds the marker on `holder` and keeps a standby waiting for it (`standby`
    /// first), until the handle goes; then says goodbye on both.
    async fn keep(mut self, holder: Conn, standby: Conn) {
        // Always Some but while being said goodbye to.
        let mut holder = Some(holder);
        let mut standby = Some(standby);
        let mut pause = RETRY_MIN;
        let mut failures = 0u32;
        loop {
            let mut waiting = match standby.take() {
                Some(conn) => conn,
                None => {
                    self.shared.watch(false);
                    let opened = tokio::select! {
                        opened = self.db.presence_connect() => opened,
                        _ = self.stop.changed() => break,
                    };
                    match opened {
                        Ok(conn) => {
                            pause = RETRY_MIN;
                            failures = 0;
                            conn
                        }
                        Err(e) => {
                            failures += 1;
                            if failures == 1 {
                                tracing::warn!(owner = %self.owner, error = %e,
                                    "cannot open a presence standby connection; trying again");
                            }
                            tokio::select! {
                                _ = tokio::time::sleep(pause) => {}
                                _ = self.stop.changed() => break,
                            }
                            pause = (pause * 2).min(RETRY_MAX);
                            continue;
                        }
                    }
                }
            };
            let marker = Db::presence_marker(&waiting, &self.owner, &self.shared.current().0);
            self.shared.watch(true);
            let waited = {
                let wait = self.db.presence_wait(&mut waiting, &marker);
                tokio::pin!(wait);
                tokio::select! {
                    waited = &mut wait => Some(waited),
                    _ = self.stop.changed() => {
                        // Goodbye: the holder first, which hands the marker to the
                        // standby at once; then the standby, once its wait answered.
                        if let Some(conn) = holder.take() {
                            let _ = tokio::time::timeout(GOODBYE, conn.close_now()).await;
                        }
                        let _ = tokio::time::timeout(GOODBYE, wait).await;
                        None
                    }
                }
            };
            let Some(waited) = waited else {
                let _ = tokio::time::timeout(GOODBYE, waiting.close_now()).await;
                return;
            };
            match waited {
                Ok(true) => {
                    // The marker is the standby's now: the holder connection ended.
                    tracing::warn!(owner = %self.owner,
                        "the presence marker's connection ended; another connection of \
                         the handle holds the marker now, and the leases that record it \
                         are checked");
                    if let Some(conn) = holder.replace(waiting) {
                        conn.close();
                    }
                    self.shared.taken(marker);
                }
                // Interrupted, or a year passed: the same connection waits again.
                Ok(false) => standby = Some(waiting),
                Err(e) => {
                    tracing::debug!(owner = %self.owner, error = %e,
                        "the presence standby's wait ended; opening another");
                    waiting.close();
                }
            }
        }
        if let Some(conn) = holder {
            let _ = tokio::time::timeout(GOODBYE, conn.close_now()).await;
        }
        if let Some(conn) = standby {
            let _ = tokio::time::timeout(GOODBYE, conn.close_now()).await;
        }
    }

    /// Checks the leases that record the marker whenever it changed connections (or a
    /// lease of an earlier epoch registered), and every [`UNWATCHED_CHECK`] while no
    /// standby waits for it, until the handle goes.
    async fn check(mut self) {
        let mut pause: Option<Duration> = None;
        loop {
            let unwatched = !self.shared.watched.load(Ordering::Acquire);
            let wait = pause.or(unwatched.then_some(UNWATCHED_CHECK));
            tokio::select! {
                _ = self.shared.check.notified() => {}
                _ = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => {}
                _ = self.stop.changed() => return,
            }
            let Some(leases) = self.shared.leases.get().and_then(Weak::upgrade) else {
                continue;
            };
            let epoch = self.shared.epoch.load(Ordering::Acquire);
            // Read after the epoch: a lease registered after this read is of this
            // epoch, or the epoch moves again and it is checked then.
            let unwatched = !self.shared.watched.load(Ordering::Acquire);
            let before = if unwatched { u64::MAX } else { epoch };
            let batch = leases.presence_claims(before);
            if batch.is_empty() {
                pause = None;
                continue;
            }
            let json = batch_json(batch.iter().map(|(k, t)| (k.as_str(), *t)));
            // A renewal by nothing: it extends no lease, waits for a taker's row lock,
            // and names the leases still the handle's.
            let renew = Renew {
                owner: &self.owner,
                ttl_us: 0,
                batch: &json,
            };
            let limit = self.db.acquire_timeout();
            match tokio::time::timeout(limit, self.db.lease_renew(&renew, &batch)).await {
                Ok(Ok(renewal)) => {
                    let survivors = match renewal.survivors {
                        Some(s) => s,
                        None => batch.iter().map(|(k, _)| k.clone()).collect(),
                    };
                    leases.presence_checked(epoch, &batch, &survivors);
                    pause = None;
                    // Registered meanwhile under an earlier epoch, or the epoch moved.
                    if !leases
                        .presence_claims(self.shared.epoch.load(Ordering::Acquire))
                        .is_empty()
                    {
                        self.shared.check.notify_one();
                    }
                }
                outcome => {
                    if let Ok(Err(failure)) = outcome {
                        tracing::debug!(error = %failure.error,
                            "checking the leases that record a presence marker failed; \
                             trying again");
                    }
                    // At once the first time: the pooled connection it ran on may have
                    // been ended with the presence connections, and the pool opens
                    // another. Then after a pause, growing.
                    pause = Some(match pause {
                        None => Duration::ZERO,
                        Some(p) if p.is_zero() => RETRY_MIN,
                        Some(p) => (p * 2).min(RETRY_MAX),
                    });
                }
            }
        }
    }
}
