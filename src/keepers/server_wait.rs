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
//!
//! The same connections serve the waits for a live holder's release: a waiter whose
//! attempt found its key busy, with no crashed holder's marker to wait for, waits for
//! the key's wake lock, which the holder keeps while it holds the key and lets go once
//! its release has committed (`keepers/wake_lock.rs`, `wake_wait.sql`), for as long
//! as the longest poll interval at most (a waiter whose key a hold of its own process
//! keeps waits for that hold's release within the process instead: `keepers/wake.rs`,
//! `strategy/wait.rs`). Nobody holding it as the wait begins (a
//! holder that keeps none, or has not taken it yet) is asked again over the next
//! 31 ms, then the waiter sleeps the rest of its pause.
//!
//! The key's waiters take turns at the wake lock (its *wake turn*, a second native
//! lock that each wait takes first, in the order they asked, and keeps past its
//! statement): a release wakes the one waiter whose turn it is, as a native lock's
//! release does, rather than every waiter of the key at once to race for the row. The
//! woken waiter keeps the [`Started`] until its attempt has answered, and a granted
//! one hands it to its hold, which drops it once its own wake lock is taken
//! (`WakeHold::hurry`); dropped, it lets the wait's task let the turn go
//! (`wake_leave.sql`), and the next waiter's wait for the wake lock begins. A turn is
//! kept one second at most after a wake; a waiter's session that ends lets its turn
//! go with it. On SQLite the turn is a file beside the wake file, locked
//! exclusively, and closed to let it go.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Semaphore};

use crate::db::presence::Conn;
use crate::db::wake_lock::{wake_name, WakeAnswer, WakeStatements};
use crate::db::Db;

/// How much longer than its own bound a wait may take on the client's clock before
/// its connection counts as lost: a round trip and a loaded machine's delays.
const SLACK: Duration = Duration::from_secs(2);

/// The shortest pause worth a wait in the server: below it the pause just sleeps.
const SHORTEST: Duration = Duration::from_millis(5);

/// The pauses before a wake lock that nobody held is asked for again: its holder may
/// be about to take it (a waiter woken by the last release found the key taken by
/// another, whose wake lock follows its grant by a round trip; a holder that did not
/// wait takes it after `wake_lock::TAKE_AFTER`).
const NOT_HELD_RETRIES: [Duration; 5] = [
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(4),
    Duration::from_millis(8),
    Duration::from_millis(16),
];

/// How long a woken waiter may keep its key's wake turn for the attempt that follows
/// the wake: an attempt answers in a round trip or two, and one that takes longer
/// (a slow server) lets the next waiter wait meanwhile.
const TRIED_LIMIT: Duration = Duration::from_secs(1);

/// A handle's waits in the server: what its busy attempts saw, its connections, its
/// cap.
#[derive(Debug, Clone)]
pub(crate) struct ServerWaits {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The wake locks' statements, where the server has them.
    wake: Option<Arc<WakeStatements>>,
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

/// A wait in the server under way: the crashed holder's marker it waits for (`None`
/// for a key's wake lock), and its answer. Kept by the waiter until the
/// attempt after a wake has answered: dropped, it lets the key's wake turn go (see
/// [`ServerWaits::wake_wait`]).
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) marker: Option<String>,
    answer: oneshot::Receiver<WakeAnswer>,
    /// Dropped once the waiter has tried after a wake, or has left.
    _tried: oneshot::Sender<()>,
}

impl Started {
    /// Returns once the marker or wake lock was freed; never when the wait ran out
    /// or failed.
    pub(crate) async fn freed(&mut self) {
        if self.ended().await != WakeAnswer::Freed {
            std::future::pending().await
        }
    }

    /// How the wait ended: freed; ran out with it still held, which a wait that
    /// failed answers too; or nothing held to wait for (a wake lock nobody took).
    pub(crate) async fn ended(&mut self) -> WakeAnswer {
        (&mut self.answer).await.unwrap_or(WakeAnswer::Held)
    }
}

/// A wait's answer to its waiter, and the waiter's word that it has tried after it.
struct Reply {
    tell: oneshot::Sender<WakeAnswer>,
    tried: oneshot::Receiver<()>,
}

impl Reply {
    /// Sends the answer; what tells that the waiter has tried after it (at once when
    /// the waiter is gone).
    fn send(self, answer: WakeAnswer) -> oneshot::Receiver<()> {
        let _ = self.tell.send(answer);
        self.tried
    }
}

/// A [`Started`] and the [`Reply`] its wait answers on.
fn started(marker: Option<String>) -> (Started, Reply) {
    let (tell, answer) = oneshot::channel();
    let (tried_tx, tried) = oneshot::channel();
    (
        Started {
            marker,
            answer,
            _tried: tried_tx,
        },
        Reply { tell, tried },
    )
}

impl ServerWaits {
    /// At most `cap` waits in the server at once (`0`: none, every waiter polls); the
    /// waits for wake locks with `wake`, where the server has them.
    pub(crate) fn new(cap: u32, wake: Option<Arc<WakeStatements>>) -> Self {
        let cap = usize::try_from(cap)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            shared: Arc::new(Shared {
                wake: wake.filter(|_| cap > 0),
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
        let waited = marker.clone();
        let waiting = db.clone();
        self.spawn(db, Some(marker), wait, move |conn, reply| {
            Box::pin(async move {
                let freed = waiting.marker_wait(conn, &waited, wait).await?;
                reply.send(if freed {
                    WakeAnswer::Freed
                } else {
                    WakeAnswer::Held
                });
                Ok(())
            })
        })
    }

    /// Starts a wait in the server, for `wait` at most, for `key`'s wake lock to be let
    /// go by its holder (a live holder's release), in the key's turn with `turns` (a
    /// lock's waiter: one waiter is woken), or with every waiter of the key without (a
    /// shared hold's waiter, a read: all of them may be granted). `None` when the pause
    /// is too short, the cap is reached, or the server has no wake locks.
    pub(crate) fn wake_wait(
        &self,
        db: &Db,
        key: &str,
        wait: Duration,
        turns: bool,
    ) -> Option<Started> {
        let s = &self.shared;
        if wait < SHORTEST {
            return None;
        }
        let statements = Arc::clone(s.wake.as_ref()?);
        let name = wake_name(db, key);
        let until = tokio::time::Instant::now() + wait;
        #[cfg(feature = "sqlite")]
        if let Some(dir) = statements.files() {
            // SQLite: a file to try, no connection.
            let dir = dir.to_owned();
            let slot = Arc::clone(&s.slots).try_acquire_owned().ok()?;
            let (started, reply) = started(None);
            tokio::spawn(async move {
                let _slot = slot;
                let mut turn = None;
                let site = WakeSite::File(&dir, turns.then_some(&mut turn));
                let answer = retried(site, &name, until)
                    .await
                    .unwrap_or(WakeAnswer::Held);
                // As on a server: the turn is kept through the woken waiter's attempt
                // and its own take, and let go when the file is closed.
                let tried = reply.send(answer);
                if answer == WakeAnswer::Freed {
                    let _ = tokio::time::timeout(TRIED_LIMIT, tried).await;
                }
                drop(turn);
            });
            return Some(started);
        }
        let server = db.clone();
        self.spawn(db, None, wait + TRIED_LIMIT, move |conn, reply| {
            Box::pin(async move {
                // A Galera node keeps a GET_LOCK name on one node only (asked once).
                if server.wake_locks_ruled_out().await.unwrap_or(true) {
                    reply.send(WakeAnswer::NotHeld);
                    return Ok(());
                }
                let site = WakeSite::Server(&statements, &mut *conn, turns);
                let answer = retried(site, &name, until).await?;
                if !turns {
                    reply.send(answer);
                    return Ok(());
                }
                // Woken, the waiter keeps its turn until its attempt has answered: the
                // next waiter of the key waits for the wake lock of the holder that
                // attempt makes, or for the same release should it lose.
                let tried = reply.send(answer);
                if answer == WakeAnswer::Freed {
                    let _ = tokio::time::timeout(TRIED_LIMIT, tried).await;
                }
                statements.leave(conn).await
            })
        })
    }

    /// Runs `wait` on a connection of the handle's own (an idle one, or one opened for
    /// it), in a task of its own, bounded by `bound` and [`SLACK`] on the client's
    /// clock, when a slot is free: it answers on the [`Reply`] it is given, which comes
    /// back on the returned [`Started`]. The connection is kept for the next wait when
    /// the wait ended well, closed when it failed or did not end in time (its state is
    /// unknown).
    fn spawn<F>(&self, db: &Db, marker: Option<String>, bound: Duration, wait: F) -> Option<Started>
    where
        F: for<'c> FnOnce(&'c mut Conn, Reply) -> WaitFuture<'c> + Send + 'static,
    {
        let s = &self.shared;
        let slot = Arc::clone(&s.slots).try_acquire_owned().ok()?;
        let (started, reply) = started(marker);
        let shared = Arc::clone(s);
        let db = db.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let idle = shared
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut conn = match idle {
                Some(conn) => conn,
                None => match db.wake_connect().await {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::debug!(error = %e,
                            "no connection to wait in the server on; the waiter polls");
                        return;
                    }
                },
            };
            match tokio::time::timeout(bound + SLACK, wait(&mut conn, reply)).await {
                Ok(Ok(())) => {
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
        Some(started)
    }
}

/// Where a wake lock is waited for: a server, on a connection; SQLite, at its file.
enum WakeSite<'a> {
    /// A server: its statements, the connection, whether the wait takes turns.
    Server(&'a WakeStatements, &'a mut Conn, bool),
    /// SQLite: the folder of wake files, and the wait's turn file once taken (`None`:
    /// no turns).
    #[cfg(feature = "sqlite")]
    File(&'a std::path::Path, Option<&'a mut Option<std::fs::File>>),
}

impl WakeSite<'_> {
    /// One wait, for `left` at most, for the wake lock named `name`.
    async fn once(&mut self, name: &str, left: Duration) -> Result<WakeAnswer, sqlx::Error> {
        match self {
            Self::Server(statements, conn, turns) => {
                statements.wait(conn, name, left, *turns).await
            }
            #[cfg(feature = "sqlite")]
            Self::File(dir, turn) => {
                let turn = turn.as_deref_mut();
                Ok(crate::db::wake_lock::wait_file(dir, name, left, turn).await)
            }
        }
    }
}

/// Waits at `site` until `until` for the wake lock named `name` to be let go: how it
/// ended. Nobody holding it is asked again after each of [`NOT_HELD_RETRIES`] (while
/// time is left), and then answered.
async fn retried(
    mut site: WakeSite<'_>,
    name: &str,
    until: tokio::time::Instant,
) -> Result<WakeAnswer, sqlx::Error> {
    let mut retries = NOT_HELD_RETRIES.iter();
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        match site.once(name, left).await? {
            WakeAnswer::NotHeld => match retries.next() {
                Some(pause) if left > *pause + SHORTEST => tokio::time::sleep(*pause).await,
                _ => return Ok(WakeAnswer::NotHeld),
            },
            ended => return Ok(ended),
        }
    }
}

/// A wait's statements on its connection, which answer on its [`Reply`].
type WaitFuture<'c> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), sqlx::Error>> + Send + 'c>>;

impl Drop for Shared {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        for conn in idle {
            conn.close();
        }
    }
}
