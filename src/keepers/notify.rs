//! Release wake-ups on PostgreSQL: waiters listen for the keys that releases announce,
//! and try again at once instead of sleeping out their back-off.
//!
//! Opt-in through [`LockerBuilder::notify_waiters`](crate::LockerBuilder::notify_waiters).
//! A release that frees a key sends `pg_notify(<table>_released, '<table oid>:<key>')`
//! in its own statement; one listener per handle family (a [`Locker`](crate::Locker)
//! and the handles made from it with `new_handle`) holds a connection of its own,
//! outside the application's pool, and wakes the waiters of that key in this process.
//!
//! Channels are database-wide, and two schemas may each hold a lock table of one name:
//! every payload names the table by its oid (`notify_table.sql`, resolved by the
//! server), and the listener ignores payloads that name another table. It asks the
//! server for its own table's oid when it connects, and again, at most once a second,
//! when a payload names an oid it does not know (the table may have been created
//! again since), so a foreign or forged payload costs a statement at most.
//!
//! A release wakes one waiter of the key in each process, the one that has waited
//! longest: only one of them can have the lock, and waking them all would have every
//! one of them send an attempt per release, most of them bound to fail. A woken waiter
//! that leaves without having tried passes the wake-up on to the next.
//!
//! Observers of an election ([`Election::observe`](crate::Election::observe)) register
//! as watchers instead: every announcement of their key (a release, or a new term's
//! claim) wakes all of them, since each only reads.
//!
//! The fair strategy's handoffs name the waiter they handed the lock to, by ticket and
//! with the grant's token and key (`<table oid>:<ticket>:<token>:<key>`), on a second
//! channel (`<table>_granted`), which the same listener hears: only that waiter is
//! woken, and it claims its grant at once.
//!
//! The holders hear the release channel too: an operator's revocation of a lease
//! (`Locker::force_release`) names its key there, and each handle of the family that
//! holds the key renews it at once ([`State::check_now`]), so that its holder learns
//! of the revocation within a round trip rather than at its next tick. The listener
//! runs from the family's first wait or first held lease on.
//!
//! A notification is a hint, never a grant: the woken waiter still takes the lock with
//! a statement of its own, which finds the grant in the table (a fair waiter's claim is
//! owner- and token-checked) or finds nothing and changes nothing, and polling goes on
//! underneath. A notification that never
//! comes (the listener down, reconnecting, or not yet listening) only costs the wait
//! until the next poll; every (re)connection of the listener wakes every waiter once,
//! so a release missed meanwhile is not waited out either.

mod listener;
mod registry;
mod subscription;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use sqlx::PgPool;

use crate::db::backend::sql;
use crate::db::statement::{Placeholders, Statement};
use crate::db::values::Nothing;
use crate::keepers::watchdog::State;
use crate::support::validate::TableName;

use self::listener::listen;
use self::registry::{Shared, Wakeup};
pub(crate) use self::subscription::{Subscription, TicketSubscription};

/// The listener of one handle family, started at the first wait.
#[derive(Debug)]
pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

impl Notifier {
    /// The listener for a handle family on `pool` and the lock table `table`, when its
    /// server has notifications (PostgreSQL).
    pub(crate) fn for_pool(pool: &crate::db::DbPool, table: &TableName) -> Option<Self> {
        match pool {
            crate::db::DbPool::Postgres(pool) => Some(Self::new(pool, table)),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// A listener for the channels of `table`, to connect as `pool` does. Sends
    /// nothing yet.
    fn new(pool: &PgPool, table: &TableName) -> Self {
        let identity = Statement::<Nothing>::render(
            sql!("postgres", "notify_table"),
            table,
            Placeholders::Numbered,
        );
        Self {
            shared: Arc::new(Shared {
                channel: table.release_channel(),
                grant_channel: table.grant_channel(),
                identity: identity.text().to_owned(),
                tickets: Mutex::new(HashMap::new()),
                pool: pool.clone(),
                next_id: AtomicU64::new(1),
                waiters: Mutex::new(HashMap::new()),
                watchers: Mutex::new(HashMap::new()),
                holders: Mutex::new(Vec::new()),
                task: Mutex::new(None),
            }),
        }
    }

    /// Registers a waiter of any of `keys` (one; a multi-lock's several; a
    /// semaphore's name and the prefix of its permits' keys), starting the listener if
    /// it is not running, to be woken when a release of any of them is announced.
    /// Register before the first attempt, so that a release between an attempt and
    /// the wait that follows is not missed.
    pub(crate) fn subscribe_any(&self, keys: &[&str]) -> Subscription {
        self.register(keys, false)
    }

    /// Registers a watcher of `key` (starting the listener if it is not running), to be
    /// woken by every announcement of `key`, along with every other watcher of it.
    pub(crate) fn watch(&self, key: &str) -> Subscription {
        self.register(&[key], true)
    }

    fn register(&self, keys: &[&str], watcher: bool) -> Subscription {
        let shared = &self.shared;
        self.start();
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let wakeup = Arc::new(Wakeup::default());
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        {
            let mut registrations = shared.registrations(watcher);
            for key in &keys {
                registrations
                    .entry(key.clone())
                    .or_default()
                    .push((id, wakeup.clone()));
            }
        }
        Subscription {
            shared: shared.clone(),
            keys,
            id,
            wakeup,
            watcher,
        }
    }
}

impl Notifier {
    /// Adds a handle's leases to those renewed at once when their key is announced
    /// (see [`State::check_now`]); held weakly, and forgotten once the handle is gone.
    pub(crate) fn attach(&self, state: Weak<State>) {
        let mut holders = self
            .shared
            .holders
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        holders.retain(|h| h.strong_count() > 0);
        holders.push(state);
    }

    /// Starts the listener if it is not running: a lease was granted, whose holder is
    /// to hear of its revocation at once.
    pub(crate) fn holding(&self) {
        self.start();
    }

    /// Starts the listener if it is not running.
    fn start(&self) {
        let shared = &self.shared;
        let mut task = shared.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.is_none() {
            let weak = Arc::downgrade(shared);
            *task = Some(tokio::spawn(listen(
                weak,
                shared.pool.clone(),
                [shared.channel.clone(), shared.grant_channel.clone()],
                shared.identity.clone(),
            )));
        }
    }

    /// Registers the fair waiter of `ticket`, waiting for `key` (starting the listener
    /// if it is not running), to be woken when a handoff names it. Register before the
    /// ticket's first poll after joining; a handoff before the listener listens is
    /// found by the waiter's own polls, and every (re)connection wakes it once.
    pub(crate) fn subscribe_ticket(&self, ticket: i64, key: &str) -> TicketSubscription {
        self.start();
        let wakeup = Arc::new(Wakeup::default());
        self.shared
            .tickets()
            .insert(ticket, (key.to_owned(), wakeup.clone()));
        TicketSubscription {
            shared: self.shared.clone(),
            ticket,
            wakeup,
        }
    }
}
