//! The registry of one handle family's listener: who waits for which key (waiters,
//! watchers, fair waiters by ticket, holders), each with a wake-up of its own, and
//! what an announcement heard on a channel wakes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use sqlx::PgPool;
use tokio::sync::Notify;

use crate::keepers::watchdog::State;
use crate::support::validate::{parent_of, permit_prefix, Shared as SharedMode};

/// The waiters of each key, by registration id, the longest waiting first.
pub(super) type Waiters = HashMap<String, Vec<(u64, Arc<Wakeup>)>>;

/// The fair waiters, by ticket: the key, and the wake-up.
pub(super) type Tickets = HashMap<i64, (String, Arc<Wakeup>)>;

/// One waiter's wake-up: a `Notify` of its own, so that a wake-up that lands while its
/// waiter is busy with an attempt is kept (as a permit) for its next wait, and whether
/// one was sent and not yet taken.
#[derive(Debug, Default)]
pub(super) struct Wakeup {
    pub(super) notify: Notify,
    pub(super) pending: AtomicBool,
    /// The fair strategy: the token of the grant the handoff that woke the waiter
    /// named (0 for a wake-up that names none).
    pub(super) token: AtomicI64,
}

impl Wakeup {
    pub(super) fn wake(&self) {
        self.pending.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) channel: String,
    /// The fair strategy's channel, on which handoffs name the waiter's ticket.
    pub(super) grant_channel: String,
    /// The fair waiters, by ticket, with the key each waits for.
    pub(super) tickets: Mutex<Tickets>,
    /// What asks the server for the lock table's oid (`notify_table.sql`).
    pub(super) identity: String,
    /// The application's pool, whose connect options the listener copies.
    pub(super) pool: PgPool,
    pub(super) next_id: AtomicU64,
    /// The waiters of each key.
    pub(super) waiters: Mutex<Waiters>,
    /// The watchers of each key, all woken by each announcement of it.
    pub(super) watchers: Mutex<Waiters>,
    /// The leases of the family's handles, each renewed at once when its key is
    /// announced: a revocation names it.
    pub(super) holders: Mutex<Vec<Weak<State>>>,
    pub(super) task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Ends the listener with the last handle of the family.
impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

impl Shared {
    pub(super) fn waiters(&self) -> std::sync::MutexGuard<'_, Waiters> {
        // Plain data: a panic elsewhere while it was held leaves nothing half done.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn watchers(&self) -> std::sync::MutexGuard<'_, Waiters> {
        // As `waiters`.
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The registrations of `watcher`'s kind.
    pub(super) fn registrations(&self, watcher: bool) -> std::sync::MutexGuard<'_, Waiters> {
        if watcher {
            self.watchers()
        } else {
            self.waiters()
        }
    }

    /// Wakes every watcher of `key`.
    pub(super) fn wake_watchers(&self, key: &str) {
        if let Some(list) = self.watchers().get(key) {
            for (_, w) in list {
                w.wake();
            }
        }
    }

    /// Wakes the longest waiting waiter of `key`, unless one already has a wake-up it
    /// has not taken yet (it is about to try).
    pub(super) fn wake_key(&self, key: &str) {
        if let Some(list) = self.waiters().get(key) {
            if list.iter().all(|(_, w)| !w.pending.load(Ordering::SeqCst)) {
                if let Some((_, first)) = list.first() {
                    first.wake();
                }
            }
        }
    }

    /// Has every handle of the family that holds a lease of `key` renew it at once: an
    /// operator may have revoked it.
    pub(super) fn check_holders(&self, key: &str) {
        let holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        for state in holders.iter().filter_map(Weak::upgrade) {
            state.check_now(key);
        }
    }

    /// Wakes every waiter, and has every lease held renewed at once: after the
    /// listener (re)connected, releases and revocations may have gone unheard.
    pub(super) fn wake_all(&self) {
        {
            let holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
            for state in holders.iter().filter_map(Weak::upgrade) {
                state.check_all();
            }
        }
        for list in self.waiters().values().chain(self.watchers().values()) {
            for (_, w) in list {
                w.wake();
            }
        }
        for (_, w) in self.tickets().values() {
            w.wake();
        }
    }

    pub(super) fn tickets(&self) -> std::sync::MutexGuard<'_, Tickets> {
        self.tickets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the fair waiter a handoff named (`ticket:token:key`, the table's oid taken
    /// off), if it is in this process and waits for that key, with the token of the
    /// grant named.
    pub(super) fn wake_ticket(&self, named: &str) {
        let mut fields = named.splitn(3, ':');
        let (Some(Ok(ticket)), Some(Ok(token)), Some(key)) = (
            fields.next().map(str::parse::<i64>),
            fields.next().map(str::parse::<i64>),
            fields.next(),
        ) else {
            return;
        };
        let tickets = self.tickets();
        if let Some((_, w)) = tickets.get(&ticket).filter(|(k, _)| k == key) {
            w.token.store(token, Ordering::SeqCst);
            w.wake();
        }
    }

    /// What a notification on `channel` wakes, with `named` what its payload names
    /// after the table's oid.
    pub(super) fn heard(&self, channel: &str, named: &str) {
        if channel == self.grant_channel {
            self.wake_ticket(named);
        } else {
            self.wake_key(named);
            // A permit freed: the semaphore's waiters wait for any of its permits, by
            // the prefix of their keys.
            if let Some((name, SharedMode::Semaphore)) = parent_of(named) {
                self.wake_key(&permit_prefix(name));
            }
            self.wake_watchers(named);
            self.check_holders(named);
        }
    }
}
