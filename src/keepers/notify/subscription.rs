//! A waiter's registration with the listener, and its wait for a wake-up: dropped, it
//! unregisters, and passes a wake-up it never took on to the next waiter.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::registry::{Shared, Wakeup};

/// A fair waiter's registration; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct TicketSubscription {
    pub(super) shared: Arc<Shared>,
    pub(super) ticket: i64,
    pub(super) wakeup: Arc<Wakeup>,
}

impl TicketSubscription {
    /// Waits for a wake-up: returns at once if one came since the last wait, with the
    /// token of the grant the handoff named (0 when the wake-up named none: the
    /// listener reconnected, and the waiter should look). Only a hint: the waiter's
    /// own statement tells whether the table holds that grant for it.
    ///
    /// Cancel safe: a wake-up is kept until a wait takes it.
    pub(crate) async fn woken(&self) -> i64 {
        self.wakeup.notify.notified().await;
        self.wakeup.pending.store(false, Ordering::SeqCst);
        self.wakeup.token.swap(0, Ordering::SeqCst)
    }
}

impl Drop for TicketSubscription {
    fn drop(&mut self) {
        self.shared.tickets().remove(&self.ticket);
    }
}

/// One waiter's registration; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(super) shared: Arc<Shared>,
    /// The keys it waits for: one, or a multi-lock's or a semaphore's several.
    pub(super) keys: Vec<String>,
    pub(super) id: u64,
    pub(super) wakeup: Arc<Wakeup>,
    /// A watcher's, rather than a waiter's.
    pub(super) watcher: bool,
}

impl Subscription {
    /// Waits for a wake-up: returns at once if one came since the last wait.
    ///
    /// Cancel safe: a wake-up is kept until a wait takes it.
    pub(crate) async fn woken(&self) {
        self.wakeup.notify.notified().await;
        self.wakeup.pending.store(false, Ordering::SeqCst);
    }
}

/// Unregisters; a wake-up this waiter never took (it got the lock by polling, gave up,
/// or was cancelled) goes on to the next waiter of its keys, which may now get it (of
/// each of them, when it waited for several: which one was announced is not kept).
impl Drop for Subscription {
    fn drop(&mut self) {
        {
            let mut waiters = self.shared.registrations(self.watcher);
            for key in &self.keys {
                if let Some(list) = waiters.get_mut(key) {
                    list.retain(|(id, _)| *id != self.id);
                    if list.is_empty() {
                        waiters.remove(key);
                    }
                }
            }
        }
        // A watcher's wake-up was its own: there is nobody to pass it on to.
        if !self.watcher && self.wakeup.pending.load(Ordering::SeqCst) {
            for key in &self.keys {
                self.shared.wake_key(key);
            }
        }
    }
}
