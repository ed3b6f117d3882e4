//! Waiting in the server for a crashed holder (`LockerBuilder::server_waits`): a
//! waiter whose attempt found the key held by a lease that records another handle's
//! presence marker (a lease or insert waiter's busy attempt; the fair lock's first
//! waiter's look) waits, inside the server, for that marker to be freed, and tries
//! again the moment it is, rather than at its next poll.
//!
//! The marker is freed only when every session of the holder is gone: its process
//! died, and the server ended its connections (on PostgreSQL the wait queues behind
//! the holder's own standby connection; on MariaDB either may be handed the name
//! first, and neither ever finds it free). The wait lets the marker go in the same
//! statement (`marker_wait.sql`), and the row stays the truth: the waiter's next
//! attempt takes the lease over by the acquisition's own check, or finds it busy.
//!
//! Each wait runs on a connection of the handle's own, outside the pool, opened with
//! the pool's connect options and exempt from the server's timeouts as presence's are,
//! at most [`ServerWaits::new`]'s cap at once: beyond that a waiter polls as before.
//! A wait lasts no longer than the pause it replaces, bounded in the server, and runs
//! in a task of its own: a waiter woken otherwise (a release, its deadline, its caller
//! gone) leaves it to run out, and its connection is kept for the next wait. Idle
//! connections are closed when the handle goes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Semaphore};

use crate::db::presence::Conn;
use crate::db::Db;

/// How much longer than its own bound a wait may take on the client's clock before
/// its connection counts as lost: a round trip and a loaded machine's delays.
const SLACK: Duration = Duration::from_secs(2);

/// The shortest pause worth a wait in the server: below it the pause just sleeps.
const SHORTEST: Duration = Duration::from_millis(5);

/// A handle's waits in the server: what its busy attempts saw, its connections, its
/// cap.
#[derive(Debug)]
pub(crate) struct ServerWaits {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// One permit per wait that may run at once: the cap.
    slots: Arc<Semaphore>,
    cap: usize,
    /// Connections no wait uses now, kept for the next (at most `cap`).
    idle: Mutex<Vec<Conn>>,
    /// Per key a wait of the handle watches, what its busy attempts found.
    seen: Mutex<HashMap<String, Watched>>,
    /// How many keys `seen` holds, read without its lock.
    seen_len: AtomicUsize,
}

/// A key some waits of the handle watch: how many, and the marker the last busy
/// attempt on it found its holder's lease recording.
#[derive(Debug, Default)]
struct Watched {
    waits: usize,
    marker: Option<String>,
}

/// A wait's watch of its key, from [`ServerWaits::watch`]: while it lives, busy
/// attempts on the key note the marker they found; dropped with the wait.
#[derive(Debug)]
pub(crate) struct Watch {
    shared: Arc<Shared>,
    key: String,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let s = &self.shared;
        let mut seen = s.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = seen.get_mut(&self.key) {
            w.waits = w.waits.saturating_sub(1);
            if w.waits == 0 {
                seen.remove(&self.key);
            }
        }
        s.seen_len.store(seen.len(), Ordering::Relaxed);
    }
}

/// A wait in the server under way: the marker, and its answer (`true`: freed).
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) marker: String,
    answer: oneshot::Receiver<bool>,
}

impl Started {
    /// Returns once the marker was freed; never when the wait ran out or failed.
    pub(crate) async fn freed(&mut self) {
        match (&mut self.answer).await {
            Ok(true) => {}
            _ => std::future::pending().await,
        }
    }
}

impl ServerWaits {
    /// At most `cap` waits in the server at once (`0`: none, every waiter polls).
    pub(crate) fn new(cap: u32) -> Self {
        let cap = usize::try_from(cap)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            shared: Arc::new(Shared {
                slots: Arc::new(Semaphore::new(cap)),
                cap,
                idle: Mutex::new(Vec::new()),
                seen: Mutex::new(HashMap::new()),
                seen_len: AtomicUsize::new(0),
            }),
        }
    }

    /// Watches `key` for a wait, until the answer is dropped: only the busy attempts on
    /// a key some wait watches are noted, so that an attempt no wait follows (a single
    /// try, a fair lock's one statement) leaves nothing behind. `None` with no waits
    /// allowed.
    pub(crate) fn watch(&self, key: &str) -> Option<Watch> {
        let s = &self.shared;
        if s.cap == 0 {
            return None;
        }
        let mut seen = s.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.entry(key.to_owned()).or_default().waits += 1;
        s.seen_len.store(seen.len(), Ordering::Relaxed);
        Some(Watch {
            shared: Arc::clone(s),
            key: key.to_owned(),
        })
    }

    /// Notes what an attempt on `key` found, when a wait watches it: busy under a lease
    /// recording `holder` (`Some`), or anything else (`None`: forgotten). Costs no lock
    /// while no wait of the handle is under way, or with no waits allowed.
    pub(crate) fn seen(&self, key: &str, holder: Option<String>) {
        let s = &self.shared;
        if s.cap == 0 || s.seen_len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut seen = s.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = seen.get_mut(key) {
            w.marker = holder;
        }
    }

    /// Starts a wait in the server, for `wait` at most, for the marker the last busy
    /// attempt on `key` found, unless that is `skip` (a marker this waiter already saw
    /// freed, whose lease then stayed busy: it waits for its polls). `None` when there
    /// is nothing to wait for, the pause is too short, or the cap is reached.
    pub(crate) fn start(
        &self,
        db: &Db,
        key: &str,
        wait: Duration,
        skip: Option<&str>,
    ) -> Option<Started> {
        let s = &self.shared;
        if wait < SHORTEST || s.seen_len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let marker = s
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .and_then(|w| w.marker.clone())?;
        self.wait_for(db, marker, wait, skip)
    }

    /// Starts a wait in the server, for `wait` at most, for `marker` (another handle's,
    /// which a step found the key's holder recording), unless that is `skip`. `None`
    /// when the pause is too short, the cap is reached, or no waits are allowed.
    pub(crate) fn wait_for(
        &self,
        db: &Db,
        marker: String,
        wait: Duration,
        skip: Option<&str>,
    ) -> Option<Started> {
        let s = &self.shared;
        if s.cap == 0 || wait < SHORTEST || skip == Some(marker.as_str()) {
            return None;
        }
        let slot = Arc::clone(&s.slots).try_acquire_owned().ok()?;
        let (tell, answer) = oneshot::channel();
        let shared = Arc::clone(s);
        let db = db.clone();
        let waited = marker.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let idle = shared
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut conn = match idle {
                Some(conn) => conn,
                None => match db.presence_connect().await {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::debug!(error = %e,
                            "no connection to wait in the server on; the waiter polls");
                        return;
                    }
                },
            };
            let bounded =
                tokio::time::timeout(wait + SLACK, db.marker_wait(&mut conn, &waited, wait));
            match bounded.await {
                Ok(Ok(freed)) => {
                    let _ = tell.send(freed);
                    let mut idle = shared.idle.lock().unwrap_or_else(PoisonError::into_inner);
                    if idle.len() < shared.cap {
                        idle.push(conn);
                        return;
                    }
                    drop(idle);
                    conn.close();
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "a wait in the server failed; the waiter polls");
                    conn.close();
                }
                // Not answered in time: the connection's state is unknown.
                Err(_) => conn.close(),
            }
        });
        Some(Started { marker, answer })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        for conn in idle {
            conn.close();
        }
    }
}
