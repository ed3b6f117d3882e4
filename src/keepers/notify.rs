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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::db::backend::sql;
use crate::db::statement::{Placeholders, Statement};
use crate::db::values::Nothing;
use crate::keepers::watchdog::State;
use crate::support::validate::{parent_of, permit_prefix, Shared as SharedMode, TableName};

/// The first pause before the listener tries to connect again after a failure.
const RETRY_MIN: Duration = Duration::from_millis(500);

/// The longest pause between two connection attempts of the listener.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// How long after asking the server for the lock table's oid the listener may ask
/// again, for a payload that names another oid.
const ASK_AGAIN: Duration = Duration::from_secs(1);

/// The listener of one handle family, started at the first wait.
#[derive(Debug)]
pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

/// The waiters of each key, by registration id, the longest waiting first.
type Waiters = HashMap<String, Vec<(u64, Arc<Wakeup>)>>;

/// The fair waiters, by ticket: the key, and the wake-up.
type Tickets = HashMap<i64, (String, Arc<Wakeup>)>;

/// One waiter's wake-up: a `Notify` of its own, so that a wake-up that lands while its
/// waiter is busy with an attempt is kept (as a permit) for its next wait, and whether
/// one was sent and not yet taken.
#[derive(Debug, Default)]
struct Wakeup {
    notify: Notify,
    pending: AtomicBool,
    /// The fair strategy: the token of the grant the handoff that woke the waiter
    /// named (0 for a wake-up that names none).
    token: AtomicI64,
}

impl Wakeup {
    fn wake(&self) {
        self.pending.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

#[derive(Debug)]
struct Shared {
    channel: String,
    /// The fair strategy's channel, on which handoffs name the waiter's ticket.
    grant_channel: String,
    /// The fair waiters, by ticket, with the key each waits for.
    tickets: Mutex<Tickets>,
    /// What asks the server for the lock table's oid (`notify_table.sql`).
    identity: String,
    /// The application's pool, whose connect options the listener copies.
    pool: PgPool,
    next_id: AtomicU64,
    /// The waiters of each key.
    waiters: Mutex<Waiters>,
    /// The watchers of each key, all woken by each announcement of it.
    watchers: Mutex<Waiters>,
    /// The leases of the family's handles, each renewed at once when its key is
    /// announced: a revocation names it.
    holders: Mutex<Vec<Weak<State>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
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
    fn waiters(&self) -> std::sync::MutexGuard<'_, Waiters> {
        // Plain data: a panic elsewhere while it was held leaves nothing half done.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn watchers(&self) -> std::sync::MutexGuard<'_, Waiters> {
        // As `waiters`.
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The registrations of `watcher`'s kind.
    fn registrations(&self, watcher: bool) -> std::sync::MutexGuard<'_, Waiters> {
        if watcher {
            self.watchers()
        } else {
            self.waiters()
        }
    }

    /// Wakes every watcher of `key`.
    fn wake_watchers(&self, key: &str) {
        if let Some(list) = self.watchers().get(key) {
            for (_, w) in list {
                w.wake();
            }
        }
    }

    /// Wakes the longest waiting waiter of `key`, unless one already has a wake-up it
    /// has not taken yet (it is about to try).
    fn wake_key(&self, key: &str) {
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
    fn check_holders(&self, key: &str) {
        let holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        for state in holders.iter().filter_map(Weak::upgrade) {
            state.check_now(key);
        }
    }

    /// Wakes every waiter, and has every lease held renewed at once: after the
    /// listener (re)connected, releases and revocations may have gone unheard.
    fn wake_all(&self) {
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

    fn tickets(&self) -> std::sync::MutexGuard<'_, Tickets> {
        self.tickets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the fair waiter a handoff named (`ticket:token:key`, the table's oid taken
    /// off), if it is in this process and waits for that key, with the token of the
    /// grant named.
    fn wake_ticket(&self, named: &str) {
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
    fn heard(&self, channel: &str, named: &str) {
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

/// A fair waiter's registration; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct TicketSubscription {
    shared: Arc<Shared>,
    ticket: i64,
    wakeup: Arc<Wakeup>,
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
    shared: Arc<Shared>,
    /// The keys it waits for: one, or a multi-lock's or a semaphore's several.
    keys: Vec<String>,
    id: u64,
    wakeup: Arc<Wakeup>,
    /// A watcher's, rather than a waiter's.
    watcher: bool,
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

/// The listener task: listens on the channel and wakes the waiters of each key
/// announced, reconnecting with back-off when the connection fails. Failures are
/// logged and never reach an acquisition, which keeps polling meanwhile.
async fn listen(weak: Weak<Shared>, app_pool: PgPool, channels: [String; 2], identity: String) {
    // The listener's connection is made like the application's, but is not one of its
    // pool's: a listener never takes a connection the application may be waiting for.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with((*app_pool.connect_options()).clone());
    drop(app_pool);
    let mut table = Table {
        identity,
        oid: None,
        asked: None,
    };
    let mut pause = RETRY_MIN;
    loop {
        let failure = match connect(&pool, &channels).await {
            Ok(mut listener) => {
                pause = RETRY_MIN;
                // Listening from now on: a release before this point was not heard.
                match weak.upgrade() {
                    Some(shared) => shared.wake_all(),
                    None => return,
                }
                loop {
                    match listener.try_recv().await {
                        Ok(Some(n)) => {
                            let named = match table.ours(&mut listener, n.payload()).await {
                                Ok(named) => named,
                                Err(e) => break e,
                            };
                            match (weak.upgrade(), named) {
                                (Some(shared), Some(named)) => shared.heard(n.channel(), named),
                                (Some(_), None) => {}
                                (None, _) => return,
                            }
                        }
                        // The connection was lost (notifications may have been lost with
                        // it); the next call reconnects and listens again.
                        Ok(None) => match weak.upgrade() {
                            Some(shared) => shared.wake_all(),
                            None => return,
                        },
                        Err(e) => break e,
                    }
                }
            }
            Err(e) => e,
        };
        tracing::warn!(channel = %channels[0], error = %failure, retry_in = ?pause,
            "the release listener failed; waiters poll until it is back");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
        if weak.strong_count() == 0 {
            return;
        }
    }
}

/// The lock table's identity, as the listener last asked the server for it.
struct Table {
    /// `notify_table.sql`, rendered.
    identity: String,
    /// The table's oid, once known.
    oid: Option<i64>,
    /// When the server was last asked.
    asked: Option<Instant>,
}

impl Table {
    /// What `payload` (`<table oid>:<rest>`) names after the oid, when the oid is this
    /// table's; `None` for another table's payload, or one that names none. The server
    /// is asked for the table's oid when it is not known, and again when a payload
    /// names another oid, at most once a second: the table may have been created again
    /// (a new oid) since it was last asked.
    async fn ours<'p>(
        &mut self,
        conn: &mut PgListener,
        payload: &'p str,
    ) -> Result<Option<&'p str>, sqlx::Error> {
        let Some((oid, named)) = payload
            .split_once(':')
            .and_then(|(oid, named)| Some((oid.parse::<i64>().ok()?, named)))
        else {
            return Ok(None);
        };
        if self.oid != Some(oid) && self.asked.is_none_or(|at| at.elapsed() >= ASK_AGAIN) {
            self.asked = Some(Instant::now());
            self.oid = sqlx::query_scalar::<_, Option<i64>>(AssertSqlSafe(self.identity.clone()))
                .fetch_one(&mut *conn)
                .await?;
        }
        Ok((self.oid == Some(oid)).then_some(named))
    }
}

async fn connect(pool: &PgPool, channels: &[String; 2]) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // The pool is the listener's own: its closing is no event to watch for.
    listener.ignore_pool_close_event(true);
    listener
        .listen_all(channels.iter().map(String::as_str))
        .await?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    /// Every notification sqlock sends names its table by oid first, as the listener
    /// expects (`Table::ours`): one without it is dropped, and its waiters wait for
    /// their next poll.
    #[test]
    fn every_payload_names_its_table_first() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/postgres");
        let mut notifying = 0;
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let code: String = text
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let calls = code.matches("pg_notify(").count();
            if calls == 0 {
                continue;
            }
            notifying += 1;
            let prefixed = code
                .matches("CAST(CAST('\"{table}\"' AS regclass) AS oid)::TEXT || ':' ||")
                .count();
            assert_eq!(
                calls,
                prefixed,
                "{}: a payload without its table",
                path.display()
            );
        }
        assert!(notifying >= 8, "the notifying statements were not found");
    }
}
