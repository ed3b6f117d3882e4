//! Wake locks, the holder's side: while a handle holds a key, it keeps the key's wake
//! lock, a native lock of the server (a session advisory lock on PostgreSQL, a
//! `GET_LOCK` name on MariaDB), on a connection of its own outside the pool, and lets
//! it go once its release has committed. Waiters of other processes wait for it inside
//! the server (`keepers/server_wait.rs`) and try the row the moment it is let go,
//! rather than at their next poll.
//!
//! A wake lock only wakes: the row stays the truth, and every step here is off the
//! caller's path. A hold asks for the key's wake lock and returns at once; one task per
//! handle takes and lets go the locks asked for, one statement each, let-goes first
//! (they wake waiters). A hold granted after a wait (the key is contended) has its
//! wake lock taken at once; any other after [`TAKE_AFTER`], so that a hold given back
//! sooner, as a lock nobody contends mostly is, costs no statement at all. A waiter
//! that finds a key held without a wake lock asks again a few milliseconds later
//! (`keepers/server_wait.rs`), then polls. A take that finds the lock kept by another session (a
//! holder whose lease lapsed and that has not let go yet) waits 200 ms at most, then
//! leaves the key without a wake lock: its waiters poll. A connection that fails loses
//! every wake lock it held (the server lets them go, which wakes their waiters early,
//! a hint that costs each an attempt); the keys held meanwhile stay without one, and a
//! new connection is opened for the next hold, a second later at the earliest.
//!
//! The connection is opened at the handle's first hold, exempt from the server's idle
//! and statement timeouts as presence's are (an idle timeout would only let the wake
//! locks go early), and closed when the handle and its holds are gone. A Galera node
//! (a `GET_LOCK` name lives on one node) and a transaction-pooling proxy (no session
//! lasts) have none; nor has SQLite.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::db::presence::Conn;
use crate::db::wake_lock::{wake_name, WakeStatements};
use crate::db::Db;
use crate::keepers::server_wait::Started;

/// How long a hold that did not wait lasts before its key's wake lock is taken.
pub(crate) const TAKE_AFTER: Duration = Duration::from_millis(5);

/// How long after a connection failed the next is opened, at the earliest.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// A handle's wake locks (see the module's documentation).
#[derive(Debug, Clone)]
pub(crate) struct WakeLocks {
    shared: Option<Arc<Shared>>,
}

#[derive(Debug)]
struct Shared {
    db: Db,
    statements: Arc<WakeStatements>,
    state: Mutex<State>,
    /// Wakes the task when work comes while it waits for a take that is not due.
    work_came: Notify,
}

/// What the task has to do: it decides each key's step from `wanted` and `have` as it
/// comes to the key, so a key may be queued more than once, or no longer need a step.
#[derive(Debug, Default)]
struct State {
    /// Per key the handles hold: how many of their holds ask for the wake lock, and
    /// since when the key has been held without a break.
    wanted: HashMap<String, Wanted>,
    /// Per key the task took the wake lock of and has not let go: whether the
    /// connection holds it (`false`: the key is held without one).
    have: HashMap<String, bool>,
    /// Keys whose last hold ended, to let go first.
    to_free: VecDeque<String>,
    /// Keys held after a wait, to take next.
    to_take_now: VecDeque<String>,
    /// Keys held otherwise, to take once due.
    to_take_later: VecDeque<(Instant, String)>,
    /// Whether the task runs; the connection, while it does not.
    running: bool,
    conn: Option<Conn>,
    /// No new connection before then, after one failed.
    reconnect_at: Option<Instant>,
    /// Whether the server rules wake locks out (a Galera node), once asked.
    ruled_out: Option<bool>,
    /// The wake turns of waits that woke a holder, kept until its key's take is done
    /// (dropped, each lets its key's next waiter wait).
    turns: Vec<(String, Started)>,
    /// SQLite: the wake files taken, locked until dropped.
    #[cfg(feature = "sqlite")]
    files: HashMap<String, std::fs::File>,
}

/// A key the handles hold.
#[derive(Debug)]
struct Wanted {
    holds: u32,
    since: Instant,
}

impl State {
    /// Lets the wake turns kept for `key`'s take go: the take is done, or not to be.
    fn turns_go(&mut self, key: &str) {
        if !self.turns.is_empty() {
            self.turns.retain(|(k, _)| k != key);
        }
    }

    /// Whether `key` is held and its wake lock not yet taken (nor tried).
    fn to_take(&self, key: &str) -> bool {
        self.wanted.contains_key(key) && !self.have.contains_key(key)
    }

    /// Whether `key` has been held without a break for [`TAKE_AFTER`] by `now`, and its
    /// wake lock is not yet taken: a delayed take is due (a key given back and held
    /// again meanwhile has a take of its own queued, due later).
    fn due(&self, key: &str, now: Instant) -> bool {
        self.wanted
            .get(key)
            .is_some_and(|w| w.since + TAKE_AFTER <= now)
            && !self.have.contains_key(key)
    }
}

/// A hold's ask for its key's wake lock, from [`WakeLocks::hold`]: dropped when the
/// hold has ended (after its release, when it had one), it lets the lock go unless
/// another hold of the handle still holds the key.
#[derive(Debug)]
pub(crate) struct WakeHold {
    shared: Arc<Shared>,
    key: String,
}

impl WakeHold {
    /// Takes the wake lock at once rather than after [`TAKE_AFTER`]: the hold was
    /// granted after a wait, so others are likely to wait for it too. `turn`, the wait
    /// in the server that woke this holder, keeps the key's wake turn until the take
    /// is done: the next waiter then finds the wake lock held and waits for it, rather
    /// than finding none and polling.
    pub(crate) fn hurry(&self, turn: Option<Started>) {
        let mut state = self.shared.state();
        if state.to_take(&self.key) {
            state.to_take_now.push_back(self.key.clone());
            if let Some(turn) = turn {
                state.turns.push((self.key.clone(), turn));
            }
            drop(state);
            Shared::run(&self.shared);
        }
    }
}

impl Drop for WakeHold {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        let last = match state.wanted.get_mut(&self.key) {
            Some(w) if w.holds > 1 => {
                w.holds -= 1;
                false
            }
            Some(_) => {
                state.wanted.remove(&self.key);
                true
            }
            None => false,
        };
        // A key whose take is still queued is skipped when the task comes to it.
        if last && state.have.contains_key(&self.key) {
            state.to_free.push_back(std::mem::take(&mut self.key));
            drop(state);
            Shared::run(&self.shared);
        }
    }
}

impl WakeLocks {
    /// The wake locks of a handle on `db`, with `statements` where the server has them
    /// and the handle waits in the server (none otherwise: no hold asks for one).
    pub(crate) fn new(db: &Db, statements: Option<Arc<WakeStatements>>) -> Self {
        Self {
            shared: statements.map(|statements| {
                Arc::new(Shared {
                    db: db.clone(),
                    statements,
                    state: Mutex::new(State::default()),
                    work_came: Notify::new(),
                })
            }),
        }
    }

    /// Asks for `key`'s wake lock for a hold that just began, until the answer is
    /// dropped; `None` without wake locks. Never waits: the lock is taken by the
    /// handle's task after [`TAKE_AFTER`], or at once once [`WakeHold::hurry`] asks.
    pub(crate) fn hold(&self, key: &str) -> Option<WakeHold> {
        let shared = self.shared.as_ref()?;
        let mut state = shared.state();
        if state.ruled_out == Some(true) {
            return None;
        }
        let now = Instant::now();
        let w = state.wanted.entry(key.to_owned()).or_insert(Wanted {
            holds: 0,
            since: now,
        });
        w.holds += 1;
        // A key whose let-go is queued still is found wanted by the task, and kept.
        if w.holds == 1 && !state.have.contains_key(key) {
            state
                .to_take_later
                .push_back((now + TAKE_AFTER, key.to_owned()));
            drop(state);
            Shared::run(shared);
        }
        Some(WakeHold {
            shared: Arc::clone(shared),
            key: key.to_owned(),
        })
    }
}

/// What the task does next.
enum Step {
    Take(String),
    Free(String),
    /// Nothing until then, unless work comes.
    Until(Instant),
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Plain data, consistent after every statement that changes it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the task, unless it runs (then wakes it), on the runtime of the caller
    /// (none: the work waits for the next hold).
    fn run(this: &Arc<Self>) {
        let mut state = this.state();
        if state.running {
            drop(state);
            this.work_came.notify_one();
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        state.running = true;
        drop(state);
        runtime.spawn(Arc::clone(this).work());
    }

    /// The next step: a let-go first, then a take of a contended key, then a take
    /// that is due; `None` when there is nothing left, and the task ends (giving its
    /// connection back).
    fn next(&self, conn: &mut Option<Conn>) -> Option<Step> {
        let mut state = self.state();
        loop {
            if let Some(key) = state.to_free.pop_front() {
                if !state.wanted.contains_key(&key) && state.have.remove(&key) == Some(true) {
                    return Some(Step::Free(key));
                }
                continue;
            }
            if let Some(key) = state.to_take_now.pop_front() {
                if state.to_take(&key) {
                    return Some(Step::Take(key));
                }
                state.turns_go(&key);
                continue;
            }
            let now = Instant::now();
            match state.to_take_later.front() {
                Some((due, _)) if *due > now => return Some(Step::Until(*due)),
                Some(_) => {
                    if let Some((_, key)) = state.to_take_later.pop_front() {
                        if state.due(&key, now) {
                            return Some(Step::Take(key));
                        }
                    }
                }
                None => {
                    state.turns.clear();
                    state.running = false;
                    state.conn = conn.take();
                    return None;
                }
            }
        }
    }

    async fn work(self: Arc<Self>) {
        let mut conn = self.state().conn.take();
        while let Some(step) = self.next(&mut conn) {
            let (key, take) = match step {
                Step::Take(key) => (key, true),
                Step::Free(key) => (key, false),
                Step::Until(due) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due) => {}
                        () = self.work_came.notified() => {}
                    }
                    continue;
                }
            };
            #[cfg(feature = "sqlite")]
            if let Some(dir) = self.statements.files() {
                self.file_step(dir, key, take);
                continue;
            }
            if conn.is_none() {
                conn = self.connect().await;
            }
            let Some(c) = conn.as_mut() else {
                // No connection: the key stays without a wake lock.
                if take {
                    self.came_to(key, false);
                }
                continue;
            };
            let name = wake_name(&self.db, &key);
            let done = if take {
                self.statements.hold(c, &name).await.map(Some)
            } else {
                self.statements.free(c, &name).await.map(|_| None)
            };
            match done {
                Ok(Some(taken)) => self.came_to(key, taken),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e,
                        "a wake lock's connection failed; waiters of the keys held poll");
                    if let Some(c) = conn.take() {
                        c.close();
                    }
                    let mut state = self.state();
                    // The server let every wake lock of the connection go.
                    for held in state.have.values_mut() {
                        *held = false;
                    }
                    state.turns_go(&key);
                    if state.wanted.contains_key(&key) {
                        state.have.insert(key, false);
                    }
                    state.reconnect_at = Some(Instant::now() + RECONNECT_AFTER);
                }
            }
        }
    }

    /// SQLite: takes `key`'s wake file in `dir` (`take`), or lets it go.
    #[cfg(feature = "sqlite")]
    fn file_step(&self, dir: &std::path::Path, key: String, take: bool) {
        if !take {
            // Dropped: unlocked.
            self.state().files.remove(&key);
            return;
        }
        match crate::db::wake_lock::take_file(dir, &wake_name(&self.db, &key)) {
            Ok(Some(file)) => {
                self.state().files.insert(key.clone(), file);
                self.came_to(key, true);
            }
            Ok(None) => self.came_to(key, false),
            Err(e) => {
                tracing::debug!(error = %e, "a wake file could not be taken; waiters poll");
                self.came_to(key, false);
            }
        }
    }

    /// Notes the take of `key`'s wake lock done (`taken`: held now), and queues its
    /// let-go should its hold have ended meanwhile.
    fn came_to(&self, key: String, taken: bool) {
        let mut state = self.state();
        state.turns_go(&key);
        if state.wanted.contains_key(&key) {
            state.have.insert(key, taken);
        } else if taken {
            state.have.insert(key.clone(), true);
            state.to_free.push_back(key);
        }
    }

    /// A new connection for the wake locks, unless the server rules them out or one
    /// failed a moment ago.
    async fn connect(&self) -> Option<Conn> {
        let (ruled_out, reconnect_at) = {
            let state = self.state();
            (state.ruled_out, state.reconnect_at)
        };
        if ruled_out == Some(true) || reconnect_at.is_some_and(|at| Instant::now() < at) {
            return None;
        }
        if ruled_out.is_none() {
            let out = self.db.wake_locks_ruled_out().await;
            match out {
                Ok(out) => self.state().ruled_out = Some(out),
                Err(e) => {
                    tracing::debug!(error = %e, "could not ask the server about wake locks");
                    self.state().reconnect_at = Some(Instant::now() + RECONNECT_AFTER);
                    return None;
                }
            }
            if out.unwrap_or(false) {
                return None;
            }
        }
        match self.db.wake_connect().await {
            Ok(conn) => Some(conn),
            Err(e) => {
                tracing::debug!(error = %e, "no connection for wake locks; waiters poll");
                self.state().reconnect_at = Some(Instant::now() + RECONNECT_AFTER);
                None
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let conn = self
            .state
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .conn
            .take();
        if let Some(conn) = conn {
            conn.close();
        }
    }
}
