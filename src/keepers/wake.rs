//! Wake-ups within one process: a release that gives a key back wakes this process's
//! waiters of that key at once, on every server (SQLite included) and whatever the
//! handles' settings, instead of leaving them to their next poll.
//!
//! One registry serves the whole process, keyed by the lock table, as its pool's
//! connect options and its name tell it, and the key: every handle on a table sees
//! every other's releases, whichever [`Locker`] it was built from, as long as their
//! pools connect alike (a pool of other options, a schema of its own on the search
//! path say, is another table's). Two tables that look alike and are not (two
//! in-memory SQLite databases, a schema chosen after connecting) share the registry's
//! entries, which costs a waiter of the other table an attempt that finds its key
//! busy, nothing more: a wake-up is a hint, never a grant. The woken waiter
//! takes the lock with a statement of its own, which finds the key free or finds it
//! busy and changes nothing, and polling goes on underneath. Waiters in other
//! processes are not woken from here: on PostgreSQL, releases announced through
//! `LISTEN`/`NOTIFY` wake them (`notify.rs`); elsewhere they poll.
//!
//! A release wakes one waiter of its key, the one that has waited longest, unless one
//! already has a wake-up it has not taken yet: only one of them can have the lock,
//! and waking them all would have every one of them send an attempt per release. A
//! woken waiter that leaves without having tried passes the wake-up on to the next. A
//! permit's release also wakes the semaphore's waiters (who wait for any permit of it,
//! by its prefix), and a read's or a permit's release the waiters of the name.
//!
//! The registry also counts the keys this process holds ([`hold_here`]): a lock
//! waiter whose key is held here is woken from here at its release, and waits in the
//! server for no wake lock meanwhile.
//!
//! [`Locker`]: crate::Locker

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::Notify;

use crate::support::validate::{parent_of, permit_prefix, Shared, TableName};

/// One waiter's wake-up: a `Notify` of its own, so that a wake-up that lands while its
/// waiter is busy with an attempt is kept (as a permit) for its next wait, and whether
/// one was sent and not yet taken.
#[derive(Debug, Default)]
struct Wakeup {
    notify: Notify,
    pending: AtomicBool,
}

impl Wakeup {
    fn wake(&self) {
        self.pending.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

/// The waiters of each table and key (`<scope>\0<key>`), by registration id, the
/// longest waiting first.
type Waiters = HashMap<String, Vec<(u64, Arc<Wakeup>)>>;

#[derive(Debug, Default)]
struct Registry {
    next_id: AtomicU64,
    waiters: Mutex<Waiters>,
    /// The holds of each table and key (`<scope>\0<key>`) in this process, as
    /// [`hold_here`] counts them.
    held: Mutex<HashMap<String, u32>>,
}

/// The process's registry.
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

impl Registry {
    fn waiters(&self) -> MutexGuard<'_, Waiters> {
        // Plain data: a panic elsewhere while it was held leaves nothing half done.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn held(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the longest waiting waiter of `entry`, unless one already has a wake-up
    /// it has not taken yet (it is about to try).
    fn wake(&self, entry: &str) {
        if let Some(list) = self.waiters().get(entry) {
            if list.iter().all(|(_, w)| !w.pending.load(Ordering::SeqCst)) {
                if let Some((_, first)) = list.first() {
                    first.wake();
                }
            }
        }
    }
}

/// The registry's name for `table` on `pool`'s database: a digest of the pool's
/// connect options (which name the server, the database and, where set, the schema;
/// its password is only hashed, never kept) and the table's name.
pub(crate) fn scope(pool: &crate::db::DbPool, table: &TableName) -> Arc<str> {
    use std::hash::{Hash, Hasher};
    let options = match pool {
        #[cfg(feature = "postgres")]
        crate::db::DbPool::Postgres(p) => format!("{:?}", p.connect_options()),
        #[cfg(feature = "mysql")]
        crate::db::DbPool::MySql(p) => format!("{:?}", p.connect_options()),
        #[cfg(feature = "sqlite")]
        crate::db::DbPool::Sqlite(p) => format!("{:?}", p.connect_options()),
    };
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    options.hash(&mut digest);
    format!("{:016x}:{}", digest.finish(), table.as_str()).into()
}

/// The registry's entry of `key` in `scope`.
fn entry(scope: &str, key: &str) -> String {
    format!("{scope}\0{key}")
}

/// Registers a waiter of any of `keys` in `scope` (the lock table: [`scope`]; one key; a multi-lock's several; a
/// semaphore's name and the prefix of its permits' keys), to be woken when a release
/// in this process gives one of them back. Register before the first attempt, so that
/// a release between an attempt and the wait that follows is not missed.
pub(crate) fn subscribe(scope: &str, keys: &[&str]) -> LocalSubscription {
    let registry = registry();
    let id = registry.next_id.fetch_add(1, Ordering::Relaxed);
    let wakeup = Arc::new(Wakeup::default());
    let entries: Vec<String> = keys.iter().map(|k| entry(scope, k)).collect();
    {
        let mut waiters = registry.waiters();
        for e in &entries {
            waiters
                .entry(e.clone())
                .or_default()
                .push((id, wakeup.clone()));
        }
    }
    LocalSubscription {
        entries,
        id,
        wakeup,
    }
}

/// A release in this process gave `key` in `scope` back: wakes its longest waiting
/// waiter, and, for a permit or a read, those of what waits for it by its name.
pub(crate) fn released(scope: &str, key: &str) {
    let registry = registry();
    registry.wake(&entry(scope, key));
    if let Some((name, mode)) = parent_of(key) {
        registry.wake(&entry(scope, name));
        if mode == Shared::Semaphore {
            registry.wake(&entry(scope, &permit_prefix(name)));
        }
    }
}

/// Counts a hold of `key` in `scope` by this process until the answer is dropped: a
/// lock waiter of this process whose key is held here is woken by that hold's release
/// ([`released`]), and needs no wait in the server for it (`strategy/wait.rs`).
pub(crate) fn hold_here(scope: &str, key: &str) -> HeldHere {
    let entry = entry(scope, key);
    *registry().held().entry(entry.clone()).or_insert(0) += 1;
    HeldHere { entry }
}

/// Whether a hold of this process counts `key` in `scope` as held ([`hold_here`]). A
/// hint, as a wake-up is: the hold may have lapsed, and another process may hold the
/// key meanwhile (its waiter here then polls).
pub(crate) fn held_here(scope: &str, key: &str) -> bool {
    registry().held().contains_key(&entry(scope, key))
}

/// A hold counted by [`hold_here`]; dropping it ends the count.
#[derive(Debug)]
pub(crate) struct HeldHere {
    entry: String,
}

impl Drop for HeldHere {
    fn drop(&mut self) {
        let mut held = registry().held();
        if let Some(n) = held.get_mut(&self.entry) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.entry);
            }
        }
    }
}

/// One waiter's registration; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct LocalSubscription {
    entries: Vec<String>,
    id: u64,
    wakeup: Arc<Wakeup>,
}

impl LocalSubscription {
    /// Waits for a wake-up: returns at once if one came since the last wait.
    ///
    /// Cancel safe: a wake-up is kept until a wait takes it.
    pub(crate) async fn woken(&self) {
        self.wakeup.notify.notified().await;
        self.wakeup.pending.store(false, Ordering::SeqCst);
    }
}

/// Unregisters; a wake-up this waiter never took (it got the lock by polling, gave up,
/// or was cancelled) goes on to the next waiter of its keys.
impl Drop for LocalSubscription {
    fn drop(&mut self) {
        let registry = registry();
        {
            let mut waiters = registry.waiters();
            for e in &self.entries {
                if let Some(list) = waiters.get_mut(e) {
                    list.retain(|(id, _)| *id != self.id);
                    if list.is_empty() {
                        waiters.remove(e);
                    }
                }
            }
        }
        if self.wakeup.pending.load(Ordering::SeqCst) {
            for e in &self.entries {
                registry.wake(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_release_wakes_the_longest_waiting_waiter_and_a_leaver_passes_it_on() {
        let table = "wake_unit";
        let first = subscribe(table, &["k"]);
        let second = subscribe(table, &["k"]);
        let other = subscribe(table, &["other"]);
        released(table, "k");
        assert!(first.wakeup.pending.load(Ordering::SeqCst));
        assert!(!second.wakeup.pending.load(Ordering::SeqCst));
        // A second release while the first wake-up is untaken wakes nobody else.
        released(table, "k");
        assert!(!second.wakeup.pending.load(Ordering::SeqCst));
        // The first leaves without taking it: the second has it.
        drop(first);
        second.woken().await;
        assert!(!other.wakeup.pending.load(Ordering::SeqCst));
        // Another table's release of the same key wakes nobody here.
        released("wake_unit_other", "k");
        assert!(!second.wakeup.pending.load(Ordering::SeqCst));
    }

    #[test]
    fn a_key_counts_as_held_here_until_its_last_hold_ends() {
        let table = "wake_unit_held";
        assert!(!held_here(table, "k"));
        let first = hold_here(table, "k");
        let second = hold_here(table, "k");
        assert!(held_here(table, "k"));
        assert!(!held_here(table, "other"));
        assert!(!held_here("wake_unit_held_other", "k"));
        drop(first);
        assert!(held_here(table, "k"));
        drop(second);
        assert!(!held_here(table, "k"));
    }

    #[tokio::test]
    async fn a_permits_release_wakes_the_semaphores_waiters() {
        let table = "wake_unit_permits";
        let prefix = permit_prefix("pool");
        let waiter = subscribe(table, &[prefix.as_str(), "pool"]);
        released(table, &format!("{prefix}3"));
        waiter.woken().await;
    }
}
