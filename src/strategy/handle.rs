//! A handle's state: its pool and database backend, its owner id, its settings, the
//! keepers that work for it (the watchdog, the release listener), and what it knows of
//! its own holds and attempts.
//!
//! This is what the strategies and the guards share. The public
//! [`Locker`](crate::Locker) is a handle on one of these; nothing here knows of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

use crate::db::{Db, DbPool, Failure};
use crate::keepers::presence::Presence;
use crate::keepers::server_wait::ServerWaits;
use crate::keepers::wake_lock::WakeLocks;
use crate::keepers::watchdog::Watchdog;
use crate::support::error::Class;
use crate::support::metrics::Meter;
use crate::support::strategy_kind::Strategy;

/// The settings of a handle, which the handles made from it copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) ttl: Duration,
    pub(crate) poll_min: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) auto_renew: bool,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) strategy: Strategy,
    pub(crate) keepalive: Duration,
    pub(crate) presence: bool,
    /// How many waits may wait in the server at once (`keepers/server_wait.rs`).
    pub(crate) server_waits: u32,
    /// Whether the key is a label of the handle's metrics.
    pub(crate) metrics_key: bool,
}

/// One handle's state: everything its guards and requests share.
#[derive(Debug)]
pub(crate) struct Handle {
    /// The application's pool, as it was given.
    pub(crate) pool: DbPool,
    /// The pool's server, with the statements rendered for the handle's table.
    pub(crate) db: Db,
    pub(crate) owner: Uuid,
    pub(crate) owner_text: String,
    pub(crate) settings: Settings,
    /// What the handle measures, and with which labels.
    pub(crate) meter: Meter,
    pub(crate) watchdog: Watchdog,
    /// The session holding this handle's presence marker, when presence is on.
    pub(crate) presence: Option<Arc<Presence>>,
    /// The release listener shared by the handles of one family, when waiters are
    /// woken by notifications.
    #[cfg(feature = "postgres")]
    pub(crate) notifier: Option<Arc<crate::keepers::notify::Notifier>>,
    /// The lock table as this process's wake-ups name it (`keepers/wake.rs`).
    pub(crate) wake_scope: Arc<str>,
    /// The waits in the server for crashed holders' markers and holders' releases,
    /// shared by the handles of one family.
    pub(crate) server_waits: ServerWaits,
    /// The wake locks the handles of this family keep on the keys they hold, for other
    /// processes' waiters to wait for in the server.
    pub(crate) wake_locks: WakeLocks,
    /// The keys this handle holds, with their strategy, how many guards hold each, and
    /// the longest at-least hold they asked for: a request for one of them with another
    /// strategy is refused before any SQL, and the last release keeps the key that long.
    holds: Mutex<HashMap<String, HeldKey>>,
    /// The acquisition attempts in flight per key, including those whose caller stopped
    /// waiting and that are still giving back what they took.
    in_flight: Mutex<HashMap<String, usize>>,
    /// Woken whenever an attempt ends.
    attempt_ended: Notify,
}

impl Handle {
    /// The marker an acquisition records, with presence on (taken first, once), and
    /// the epoch of the handle's presence read before the acquisition is sent, which
    /// its grants claim: `("", None)` without presence. The statement records the
    /// marker only if it is held as the statement runs, and says so.
    pub(crate) async fn presence_marker(&self) -> Result<(String, Option<u64>), Failure> {
        match &self.presence {
            Some(p) => {
                let (key, epoch) = p.ensure().await.map_err(|error| Failure {
                    class: Class::Other,
                    error,
                })?;
                Ok((key, Some(epoch)))
            }
            None => Ok((String::new(), None)),
        }
    }

    /// A handle with a new owner id.
    pub(crate) fn new(
        pool: DbPool,
        db: Db,
        settings: Settings,
        #[cfg(feature = "postgres")] notifier: Option<Arc<crate::keepers::notify::Notifier>>,
    ) -> Self {
        let owner = Uuid::new_v4();
        let owner_text = owner.hyphenated().to_string();
        let presence = settings
            .presence
            .then(|| Arc::new(Presence::new(db.clone(), owner_text.clone())));
        let meter = Meter::new(db.table(), settings.metrics_key);
        let wake_scope = crate::keepers::wake::scope(&pool, db.table());
        // Wake locks with waits in the server: a handle that polls only keeps none.
        let wake = db
            .wake_statements()
            .filter(|_| settings.server_waits > 0)
            .map(Arc::new);
        let wake_locks = WakeLocks::new(&db, wake.clone());
        let watchdog = Watchdog::new(
            settings.renew_interval,
            db.clone(),
            owner_text.clone(),
            presence.clone(),
            meter.clone(),
        );
        // The family's listener renews this handle's leases at once when their key is
        // announced: an operator's revocation is heard within a round trip.
        #[cfg(feature = "postgres")]
        if let Some(n) = &notifier {
            n.attach(watchdog.state());
        }
        Self {
            pool,
            db,
            owner,
            owner_text,
            settings,
            meter,
            watchdog,
            presence,
            #[cfg(feature = "postgres")]
            notifier,
            wake_scope,
            server_waits: ServerWaits::new(settings.server_waits, wake.clone()),
            wake_locks,
            holds: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
            attempt_ended: Notify::new(),
        }
    }

    /// Notes an attempt on `key` under way until the returned value is dropped.
    pub(crate) fn attempt_started(self: &Arc<Self>, key: &str) -> InFlight {
        *self.attempts().entry(key.to_owned()).or_insert(0) += 1;
        InFlight {
            handle: Arc::clone(self),
            key: key.to_owned(),
        }
    }

    /// Waits until no attempt of this handle on `key` is under way: an attempt whose
    /// caller stopped waiting may hold the key for a moment before it gives it back,
    /// and a new attempt would then find a free key busy. Such an attempt ends within
    /// its own bound (one statement, or one for-update wait of at most a second).
    pub(crate) async fn attempts_settled(&self, key: &str) {
        loop {
            let ended = self.attempt_ended.notified();
            tokio::pin!(ended);
            // Registered before the count is read, so that no end is missed.
            ended.as_mut().enable();
            if !self.attempts().contains_key(key) {
                return;
            }
            ended.await;
        }
    }

    /// Waits until no attempt of this handle on `key` is under way, and notes one at
    /// once, in one step: two callers never both pass. A read of a read-write lock and
    /// the release of its write side on one handle take turns so (see `release.rs`).
    pub(crate) async fn attempt_alone(self: &Arc<Self>, key: &str) -> InFlight {
        self.wait_alone(key).await;
        InFlight {
            handle: Arc::clone(self),
            key: key.to_owned(),
        }
    }

    /// [`attempt_alone`](Self::attempt_alone), for a caller that borrows the handle.
    pub(crate) async fn alone(&self, key: &str) -> Alone<'_> {
        self.wait_alone(key).await;
        Alone {
            handle: self,
            key: key.to_owned(),
        }
    }

    async fn wait_alone(&self, key: &str) {
        loop {
            let ended = self.attempt_ended.notified();
            tokio::pin!(ended);
            // Registered before the count is read, so that no end is missed.
            ended.as_mut().enable();
            {
                let mut attempts = self.attempts();
                if !attempts.contains_key(key) {
                    attempts.insert(key.to_owned(), 1);
                    return;
                }
            }
            ended.await;
        }
    }

    /// One attempt on `key` ended.
    fn attempt_ended(&self, key: &str) {
        let mut attempts = self.attempts();
        if let Some(n) = attempts.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                attempts.remove(key);
            }
        }
        drop(attempts);
        self.attempt_ended.notify_waiters();
    }

    /// Whether an attempt of this handle on `key` is under way.
    pub(crate) fn attempt_under_way(&self, key: &str) -> bool {
        self.attempts().contains_key(key)
    }

    fn attempts(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Consistent after every statement that changes it, as `held`.
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The strategy this handle holds `key` with, if a guard of it holds the key.
    pub(crate) fn held_with(&self, key: &str) -> Option<Strategy> {
        self.held().get(key).map(|h| h.strategy)
    }

    /// Whether a guard of this handle holds a read of the read-write lock `name`.
    pub(crate) fn holds_read_of(&self, name: &str) -> bool {
        let read = crate::support::validate::read_key(name, &self.owner_text);
        self.held().contains_key(&read)
    }

    /// Whether this handle holds `name` otherwise than as the write side of the
    /// read-write lock `name` (a plain lock, a multi-lock's key, a fair or for-update
    /// lock): a read beside such a hold is refused, since its release would free the
    /// name under the read, and so is the write side (the two are holders of their own
    /// in the table: neither re-enters the other).
    pub(crate) fn holds_other_than_write(&self, name: &str) -> bool {
        self.held().get(name).is_some_and(|h| h.guards > h.writes)
    }

    /// Whether a guard of this handle holds `name` as the write side of the read-write
    /// lock `name`: a lock or a multi-lock on the name is refused then (it would wait
    /// for the write side, which the database holds as a holder of its own).
    pub(crate) fn holds_write_side(&self, name: &str) -> bool {
        self.held().get(name).is_some_and(|h| h.writes > 0)
    }

    /// The longest at-least hold the guards of `key` asked for: the holds of one key
    /// share the time it was taken, so the last release keeps the key that long.
    pub(crate) fn at_least(&self, key: &str) -> Option<Duration> {
        self.held().get(key).and_then(|h| h.at_least)
    }

    /// Notes a guard of `key` held with `strategy`, and the at-least hold it asked for;
    /// `write`: as the write side of the read-write lock `key`.
    pub(crate) fn hold_started(
        &self,
        key: &str,
        strategy: Strategy,
        at_least: Option<Duration>,
        write: bool,
    ) {
        let mut held = self.held();
        let entry = held.entry(key.to_owned()).or_insert(HeldKey {
            strategy,
            guards: 0,
            writes: 0,
            at_least: None,
        });
        entry.guards += 1;
        entry.writes += u32::from(write);
        entry.at_least = entry.at_least.max(at_least);
    }

    /// Notes that a guard of `key` ended; `write`: one that held it as the write side
    /// of a read-write lock.
    pub(crate) fn hold_ended(&self, key: &str, write: bool) {
        let mut held = self.held();
        if let Some(entry) = held.get_mut(key) {
            entry.guards = entry.guards.saturating_sub(1);
            if write {
                entry.writes = entry.writes.saturating_sub(1);
            }
            if entry.guards == 0 {
                held.remove(key);
            }
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, HeldKey>> {
        // The map is consistent after every statement that changes it: a panic while
        // holding the mutex cannot leave it half written.
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Another handle on the same table, pool and settings, with an owner id of its own.
    /// It shares this handle's waits in the server and wake locks, and so their
    /// connections and cap: a family of handles costs what one handle costs.
    pub(crate) fn sibling(&self) -> Self {
        let mut sibling = Self::new(
            self.pool.clone(),
            self.db.clone(),
            self.settings,
            #[cfg(feature = "postgres")]
            self.notifier.clone(),
        );
        sibling.server_waits = self.server_waits.clone();
        sibling.wake_locks = self.wake_locks.clone();
        sibling
    }
}

/// What a handle knows of a key its guards hold.
#[derive(Debug, Clone, Copy)]
struct HeldKey {
    strategy: Strategy,
    guards: u32,
    /// How many of the guards hold the key as the write side of a read-write lock.
    writes: u32,
    /// The longest at-least hold its guards asked for, kept until the last one ends.
    at_least: Option<Duration>,
}

/// An acquisition attempt under way on one key of a handle; see
/// [`Handle::attempts_settled`].
#[derive(Debug)]
pub(crate) struct InFlight {
    handle: Arc<Handle>,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.handle.attempt_ended(&self.key);
    }
}

/// [`InFlight`] on a borrowed handle: see [`Handle::alone`].
#[derive(Debug)]
pub(crate) struct Alone<'a> {
    handle: &'a Handle,
    key: String,
}

impl Drop for Alone<'_> {
    fn drop(&mut self) {
        self.handle.attempt_ended(&self.key);
    }
}
