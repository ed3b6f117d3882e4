//! [`LockerBuilder`]: the settings of a handle, with their defaults, checked once when
//! the handle is built.

use std::sync::Arc;
use std::time::Duration;

use crate::db::statement::Mode;
use crate::db::{Db, DbPool};
use crate::strategy::check_strategy;
use crate::strategy::handle::{Handle, Settings};
use crate::support::error::{Error, Result};
use crate::support::strategy_kind::Strategy;
use crate::support::validate::{self, TableName};

use super::locker::Locker;

/// How long a lease lasts unless renewed, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The first wait between two attempts on a busy lock, by default.
pub const DEFAULT_POLL_MIN: Duration = Duration::from_millis(10);

/// The longest wait between two attempts on a busy lock, by default.
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(500);

/// The first wait between two attempts on a busy lock, by default, when releases wake
/// waiters ([`LockerBuilder::notify_waiters`]): with each wait drawn from the upper
/// half of its step, a waiter sends at most 20 statements a second.
pub const DEFAULT_NOTIFY_POLL_MIN: Duration = Duration::from_millis(100);

/// The longest wait between two attempts on a busy lock, by default, when releases
/// wake waiters ([`LockerBuilder::notify_waiters`]).
pub const DEFAULT_NOTIFY_POLL_MAX: Duration = Duration::from_secs(2);

/// How many of a handle's waiters may wait in the server at once, for a holder's
/// release or a crashed holder, by default ([`LockerBuilder::server_waits`]).
pub const DEFAULT_SERVER_WAITS: u32 = 2;

/// How often a for-update lock's connection is checked, by default.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(5);

/// Settings for a [`Locker`].
#[derive(Debug, Clone)]
#[must_use = "the builder does nothing itself, use .build()"]
pub struct LockerBuilder {
    db: DbPool,
    table: Option<String>,
    /// The settings the handle gets, which the handles made from it copy.
    settings: Settings,
    poll_set: bool,
    notify_waiters: bool,
    transaction_pooling: bool,
}

impl LockerBuilder {
    /// The lock table. Defaults to `sqlock_locks`, the table the migrations create.
    ///
    /// The name is checked by [`build`](Self::build): see [`TableName`].
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = Some(name.into());
        self
    }

    /// How long a lease lasts unless extended or renewed. Defaults to 30 seconds
    /// ([`DEFAULT_TTL`]); a single request may override it with
    /// [`LockRequest::ttl`](crate::LockRequest::ttl).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// The waits between attempts on a busy lock: the first is about `min`, each next
    /// one doubles up to `max`, with random jitter. Defaults to 10 ms and 500 ms.
    ///
    /// With [`notify_waiters`](Self::notify_waiters) on, the defaults are 100 ms and
    /// 2 s ([`DEFAULT_NOTIFY_POLL_MIN`], [`DEFAULT_NOTIFY_POLL_MAX`]) instead: a
    /// release wakes its waiters, so polling is only the fallback.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.settings.poll_min = min;
        self.settings.poll_max = max;
        self.poll_set = true;
        self
    }

    /// Whether releases wake this handle's waiters at once through PostgreSQL's
    /// `LISTEN`/`NOTIFY`, rather than leaving them to their next poll. Defaults to
    /// `false`. PostgreSQL only.
    ///
    /// With it on, a release (and an immediate
    /// [force release](Locker::force_release_now)) of a lease or insert lock that
    /// frees the key also sends `pg_notify('<table>_released',
    /// '<table oid>:<key>')` in the same statement, so it stays one round trip (the
    /// oid tells tables of one name in two schemas apart: listeners ignore the other
    /// table's). So does every release that frees what another primitive waits for:
    /// a read's, a permit's, the write side's and a multi-lock's keys', and the
    /// last read or permit of a name, which frees the name. Every waiting primitive
    /// listens: a lock, a multi-lock (for any of its keys), a reader and a writer
    /// (for the name), a semaphore (for any of its permits, and its name); an
    /// election's candidate is a lock's waiter. A fair handoff names the waiter it
    /// handed the lock to, which takes
    /// it with one statement of its own that finds the grant in the table. The
    /// handle, and the handles made from it with [`Locker::new_handle`], share one
    /// listener: it holds a connection of its own (opened like the pool's, counted
    /// outside it) from the first wait until the last of those handles is dropped. A
    /// release wakes one waiter of its key in each process, the one waiting longest,
    /// which tries again at once; the others keep waiting (only one can have the
    /// lock), so each waiter sends about one statement per release it is woken for,
    /// plus its polls.
    ///
    /// The holders hear it too: an operator's revocation
    /// ([`Locker::force_release`], which announces the key whatever the revoking
    /// handle's setting) has every handle of the family that holds a renewed lease of
    /// the key renew it at once, so the holder's [`lost`](crate::LockGuard::lost)
    /// fires with [`LostReason::Revoked`](crate::LostReason::Revoked) within a round
    /// trip rather than at its next renewal. For that the listener runs from the
    /// family's first renewed lease too, and each (re)connection of it renews every
    /// lease held once, since a revocation may have gone unheard meanwhile.
    ///
    /// Notifications are a hint: correctness never rests on them. Waiters keep polling
    /// underneath (with longer default waits, see
    /// [`poll_interval`](Self::poll_interval)); a listener that cannot connect is
    /// logged with `tracing` and retried with back-off while waiters poll. A lease
    /// that lapses without a release announces nothing, and for-update waiters wait in
    /// the database as before. Releases from handles without this setting announce
    /// nothing to other processes: turn it on for every handle on a table. (Within one
    /// process a release wakes the key's waiter whatever the setting, on every
    /// database; this setting is for the waiters of other processes, which the holder's
    /// wake lock wakes too, see [`server_waits`](Self::server_waits).)
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) refuses it with [`Error::SettingUnsupported`] on MariaDB and
    /// SQLite, and with [`Error::InvalidSettings`] together with
    /// [`transaction_pooling`](Self::transaction_pooling) (a transaction-pooling proxy
    /// delivers notifications to whichever client holds the server connection).
    pub fn notify_waiters(mut self, on: bool) -> Self {
        self.notify_waiters = on;
        self
    }

    /// Whether the pool connects through a transaction-pooling proxy, such as
    /// PgBouncer with `pool_mode = transaction`. Defaults to `false`. PostgreSQL only.
    ///
    /// Such a proxy lends a server connection for one transaction at a time, so
    /// nothing may rest on a session: sqlx's named prepared statements end up on the
    /// wrong server connection, and so does the unnamed statement sqlx parses in one
    /// round trip and executes in the next. With this on, every statement sqlock sends
    /// is unnamed, and each runs in a transaction of its own (`BEGIN`, the statement,
    /// `COMMIT`), which keeps it on one server connection; the for-update strategy's
    /// statements run in its lock's transaction as always. Every strategy works this
    /// way. The cost: an acquisition or release takes four round trips instead of one
    /// or two.
    ///
    /// Session state sqlock never relies on: its advisory locks are transaction-scoped
    /// and its `lock_timeout` is transaction-local. Waiter wake-ups by `LISTEN` cannot
    /// work behind such a proxy, so [`notify_waiters`](Self::notify_waiters) is
    /// refused with it. The proxy must pass `extra_float_digits` (PgBouncer:
    /// `ignore_startup_parameters = extra_float_digits`). [`crate::migrate`] takes a
    /// session advisory lock: run migrations on a direct connection.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) refuses it with [`Error::SettingUnsupported`] on MariaDB and
    /// SQLite.
    pub fn transaction_pooling(mut self, on: bool) -> Self {
        self.transaction_pooling = on;
        self
    }

    /// Whether a crashed holder's leases free at once, rather than at their expiry.
    /// Defaults to `false`. Lease and insert strategies (a for-update lock frees with
    /// its connection anyway).
    ///
    /// With it on, the handle keeps a **presence marker** for as long as it lives: a
    /// session advisory lock on PostgreSQL, a `GET_LOCK` name on MariaDB, and on SQLite
    /// a file lock on a file in a folder beside the database
    /// (`<file>-sqlock-presence/`). Its leases record the marker. When the holder's
    /// process dies, the server sees its connections close (the operating system, its
    /// file) and frees the marker; an acquisition by any handle then takes the lease
    /// at once, checked in the same statement, as a new grant with a higher fencing
    /// token. The old holder's fenced writes, renewals, releases and extensions are
    /// refused as after a lapse.
    ///
    /// On the servers the handle keeps two connections of its own for the marker,
    /// opened at the first acquisition with the pool's connect options, outside the
    /// pool, and exempt, for their sessions, from the server's idle, statement, lock
    /// and transaction timeouts: one holds the marker and idles, the other waits for
    /// it. When the holding connection ends (killed by an operator, a proxy, a
    /// timeout), the server hands the marker to the waiting one in the same step: no
    /// lease can be taken over, nothing is lost, and the handle opens another waiting
    /// connection. A lease records the marker only if a session holds it as the lease
    /// is granted, and a marker is trusted for a takeover only on the server lifetime
    /// that recorded it: a restart (PostgreSQL's restart in place after a crashed
    /// server process included) or a failover shorter than the TTL costs a holder with
    /// presence nothing, as it costs one without.
    ///
    /// A holder that is paused, or cut off from the server, keeps its marker until the
    /// server sees its connections close (TCP keepalive settings bound that), so lease
    /// semantics hold as before. Only when both of its presence connections end before
    /// it can open another may another owner take its leases early; it then learns it
    /// by `lost()` with [`LostReason::PresenceLost`](crate::LostReason::PresenceLost)
    /// as soon as it takes its marker back (one connection set-up and a round trip),
    /// or within 25 ms while it cannot. Fence the holder's writes. Each handle with
    /// presence (each [`Locker::new_handle`] too) holds two connections of its own on
    /// the servers.
    ///
    /// Off by default because it cannot work everywhere: behind a transaction-pooling
    /// proxy no session lasts; on a Galera cluster a `GET_LOCK` name is held on one
    /// node only; an in-memory SQLite database has no other process. See
    /// [`Locker::check_presence`] and the project's `docs/guarantees.md`.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) refuses it with [`Error::PresenceUnavailable`] together
    /// with [`transaction_pooling`](Self::transaction_pooling) and on an in-memory SQLite
    /// database; the first acquisition answers it on a Galera node, and answers a
    /// database error when the marker's connection cannot be opened or exempted from
    /// the server's timeouts (bounded by the pool's acquire timeout).
    ///
    /// # Examples
    ///
    /// Not run as a doctest: presence needs a server, or a SQLite file, and the
    /// doctests have an in-memory database.
    ///
    /// ```no_run
    /// # async fn example(pool: sqlx::PgPool) -> Result<(), sqlock::Error> {
    /// use sqlock::Locker;
    ///
    /// let locker = Locker::builder(pool).presence(true).build()?;
    /// let guard = locker.acquire("nightly-report").await?;
    /// // Should this process die now, the next acquisition of "nightly-report" by any
    /// // process gets it at once, not 30 seconds later.
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn presence(mut self, on: bool) -> Self {
        self.settings.presence = on;
        self
    }

    /// How many of the handle's waiters may wait **inside the server** at once, for a
    /// holder's release or a crashed holder, with the handles made from it by
    /// [`Locker::new_handle`], which share its cap and connections. Defaults to 2; `0` turns waiting in the
    /// server off, for this handle's waiters and for its holds. PostgreSQL, MariaDB and
    /// (for a holder's release) SQLite; lock waiters (lease, insert, a leader
    /// election's candidates, a writer of a read-write lock), the fair lock's first
    /// waiter, and readers waiting for a writer. A semaphore's and a multi-lock's
    /// waiters poll.
    ///
    /// **A holder's release.** While a handle holds a lease (any strategy but
    /// for-update), it keeps the key's *wake lock*: a session advisory lock on
    /// PostgreSQL, a `GET_LOCK` name on MariaDB, on one connection of the handle's own
    /// outside the pool, which holds the wake locks of every key the handle holds. It
    /// lets the wake lock go once the release has committed. A waiter whose attempt
    /// found the key busy waits for that wake lock, and tries again the moment it is
    /// let go: waiters in other processes learn that a lock is free within a round
    /// trip of its release rather than at their next poll. The key's waiters take
    /// turns (a *wake turn*: a second native lock, which the server queues in the order
    /// they asked; on SQLite a second file, tried every millisecond, shared by the keys
    /// whose wake files are one):
    /// only the waiter whose turn it is waits for the wake lock, so a release wakes one
    /// waiter, as a native lock's release does, not every waiter to race for the row.
    /// The woken waiter keeps its turn until its attempt has answered and, granted,
    /// until its own wake lock is taken; then the next waiter's turn begins. While the
    /// wake lock is held, a waiter's pause lasts until the release, or the longest poll
    /// interval at most (a lease that lapses unreleased is found by the poll after it,
    /// as the back-off would find it). The holder's statements are off the caller's
    /// path: a hold that did not wait takes its wake lock 5 ms after its grant (a hold
    /// given back sooner sends none), one that waited at once. A waiter that finds the
    /// key held without a wake lock (its holder has just been granted, keeps none, or
    /// polls only) asks again 1, 2, 4, 8 and 16 ms later, then tries the key at once
    /// (it may have been freed before the wait began), and at later such pauses sleeps
    /// the rest of the pause and polls. Readers waiting for a read-write lock's writer wait for the
    /// name's wake lock, which the write side keeps, without turns: the writer's release
    /// wakes every one of them, as each may then be granted.
    ///
    /// **A crashed holder.** A waiter whose attempt finds the key held by a lease that
    /// records another handle's [presence](Self::presence) marker (the holder had
    /// presence on, on this server lifetime) waits instead for that marker to be freed:
    /// the server frees it only once every connection of the holder is gone (its
    /// process died), so the waiter tries again within a round trip of the server
    /// seeing the holder's connections close, rather than at its next poll.
    ///
    /// Either wait lets the lock it waited for go in the same statement (a wake turn is
    /// kept until the attempt after it has answered), and the lease row stays the
    /// truth: the next attempt takes the lease by the acquisition's own check, exactly
    /// as a poll would, or finds it busy and waits on. A wake lock let go early (its
    /// connection killed) or kept late (a holder whose lease lapsed) costs a waiter an
    /// attempt or its poll, never a grant; renewals never wait behind any of it.
    ///
    /// **Connections.** Each wait runs on a connection of the handle's own, outside the
    /// pool, opened with the pool's connect options when a wait first needs it and
    /// exempt from the server's idle and statement timeouts as presence's are; it is
    /// kept for the next wait and closed when the handle goes. So a handle, with the
    /// handles made from it, costs up to this many connections more than its pool while
    /// its waiters wait, and one more from its first hold on (the wake locks'). On
    /// SQLite the waits are file locks and need no connection: a wait for a holder's
    /// release takes a thread of the process, blocked in the kernel until the wake file
    /// is let go, one per file waited for; a crashed holder's marker is not waited for.
    /// Beyond the cap, and where nothing can be waited for (a transaction-pooling
    /// proxy, a Galera node), waiters poll as before. Where no wake lock is held, a
    /// waiter's pause costs it up to seven short statements on its wait connection (the
    /// tries and the turn's let-go), none on the pool. The wake locks' statements
    /// are counted apart, as `sqlock_wake_lock_statements_total`. A wait whose waiter
    /// stopped waiting for it (dropped, or woken otherwise: a release in its own
    /// process, a notification) runs on in the server until it is answered, keeping
    /// its place among the key's turns and a slot of the cap meanwhile; should it hold
    /// the turn, the release it catches wakes nobody, and the next waiter, finding no
    /// wake lock, tries at once (a wake-up late by some milliseconds, never a grant).
    ///
    /// Within one process a release wakes the key's waiter whatever this setting
    /// (`keepers/wake.rs`). A lock waiter whose key a handle of its own process holds
    /// (on a pool that connects alike) waits for that wake-up alone, and for no wake
    /// lock in the server: it costs no statement beyond its polls, and leaves the
    /// key's turns to the waiters of other processes. Should that hold have lapsed and
    /// another process hold the key, the waiter polls until the hold here ends. See
    /// also [`notify_waiters`](Self::notify_waiters).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example(pool: sqlx::SqlitePool) -> Result<(), sqlock::Error> {
    /// use sqlock::Locker;
    ///
    /// // Poll only, with no connection beyond the pool.
    /// let locker = Locker::builder(pool).server_waits(0).build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn server_waits(mut self, at_most: u32) -> Self {
        self.settings.server_waits = at_most;
        self
    }

    /// How the handle's locks are held in the table. Defaults to [`Strategy::Lease`];
    /// a single request may choose another with
    /// [`LockRequest::strategy`](crate::LockRequest::strategy).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.settings.strategy = strategy;
        self
    }

    /// How often a held for-update lock's connection is checked with a round trip, to
    /// notice a connection the server ended and to keep an idle-in-transaction timeout
    /// from ending it. Defaults to 5 seconds ([`DEFAULT_KEEPALIVE`]).
    pub fn keepalive(mut self, every: Duration) -> Self {
        self.settings.keepalive = every;
        self
    }

    /// Whether the watchdog keeps this handle's leases alive until they are released.
    /// Defaults to `true`; a single request may say otherwise with
    /// [`LockRequest::auto_renew`](crate::LockRequest::auto_renew). Without renewal a lease
    /// lapses at its TTL.
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.settings.auto_renew = on;
        self
    }

    /// How often the watchdog renews leases. Defaults to a third of each lease's TTL;
    /// a value above half the TTL is taken as half the TTL.
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.settings.renew_interval = Some(every);
        self
    }

    /// Whether the handle's metrics carry the lock's key as a label, besides its
    /// strategy and table. Defaults to `false`: every distinct key would be a series of
    /// its own in the exporter, and keys are unbounded. Turn it on only for a handle
    /// whose keys are few and fixed (a scheduler's job names, say). See the crate's
    /// documentation on metrics.
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_key_label(mut self, on: bool) -> Self {
        self.settings.metrics_key = on;
        self
    }

    /// Checks the settings and makes the handle. Sends nothing to the database.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTableName`] for a bad table name, [`Error::TtlTooShort`] or
    /// [`Error::TtlTooLong`] for a TTL out of range; [`Error::StrategyUnsupported`] for
    /// the for-update strategy on SQLite; [`Error::SettingUnsupported`] and
    /// [`Error::InvalidSettings`] for settings the server or each other rule out (see
    /// [`notify_waiters`](Self::notify_waiters) and
    /// [`transaction_pooling`](Self::transaction_pooling));
    /// [`Error::PresenceUnavailable`] for [`presence`](Self::presence) where it cannot
    /// work.
    pub fn build(mut self) -> Result<Locker> {
        let table = match &self.table {
            Some(name) => TableName::new(name)?,
            None => TableName::default(),
        };
        validate::ttl(self.settings.ttl)?;
        check_strategy(self.settings.strategy, self.db.dialect())?;
        if self.settings.keepalive < validate::MIN_TTL {
            return Err(Error::TtlTooShort {
                ttl: self.settings.keepalive,
                min: validate::MIN_TTL,
            });
        }
        if let Some(every) = self.settings.renew_interval {
            if every.is_zero() {
                return Err(Error::TtlTooShort {
                    ttl: every,
                    min: validate::MIN_TTL,
                });
            }
        }
        let dialect = self.db.dialect();
        let postgres_only = |setting| Error::SettingUnsupported {
            setting,
            dialect: dialect.name(),
        };
        if self.notify_waiters && !dialect.has_notifications() {
            // Elsewhere waiters poll.
            return Err(postgres_only("notify_waiters"));
        }
        if self.transaction_pooling && !dialect.supports_transaction_pooling() {
            return Err(postgres_only("transaction_pooling"));
        }
        if self.notify_waiters && self.transaction_pooling {
            return Err(Error::InvalidSettings(
                "notify_waiters cannot work with transaction_pooling: a transaction-pooling \
                 proxy hands LISTEN's server connection to other clients, and their \
                 notifications with it; leave notify_waiters off (waiters poll)"
                    .into(),
            ));
        }
        let mode = Mode {
            notify: self.notify_waiters,
            pinned: self.transaction_pooling,
        };
        let backend = Db::new(&self.db, &table, mode);
        if self.settings.presence {
            if let Some(reason) = crate::db::presence::unavailable(&backend) {
                return Err(Error::PresenceUnavailable { reason });
            }
        }
        if self.notify_waiters && !self.poll_set {
            self.settings.poll_min = DEFAULT_NOTIFY_POLL_MIN;
            self.settings.poll_max = DEFAULT_NOTIFY_POLL_MAX;
        }
        #[cfg(feature = "postgres")]
        let notifier = self
            .notify_waiters
            .then(|| crate::keepers::notify::Notifier::for_pool(&self.db, &table))
            .flatten()
            .map(Arc::new);
        let shared = Handle::new(
            self.db,
            backend,
            self.settings,
            #[cfg(feature = "postgres")]
            notifier,
        );
        Ok(Locker {
            shared: Arc::new(shared),
        })
    }
}

impl Locker {
    /// Starts building a handle on `pool` (a `PgPool`, `MySqlPool` or `SqlitePool`).
    pub fn builder(pool: impl Into<DbPool>) -> LockerBuilder {
        LockerBuilder {
            db: pool.into(),
            table: None,
            settings: Settings {
                ttl: DEFAULT_TTL,
                poll_min: DEFAULT_POLL_MIN,
                poll_max: DEFAULT_POLL_MAX,
                auto_renew: true,
                renew_interval: None,
                strategy: Strategy::Lease,
                keepalive: DEFAULT_KEEPALIVE,
                presence: false,
                server_waits: DEFAULT_SERVER_WAITS,
                metrics_key: false,
            },
            poll_set: false,
            notify_waiters: false,
            transaction_pooling: false,
        }
    }

    /// A handle with the default settings on `pool`.
    ///
    /// # Errors
    ///
    /// None with the defaults; the `Result` mirrors [`LockerBuilder::build`].
    pub fn new(pool: impl Into<DbPool>) -> Result<Self> {
        Self::builder(pool).build()
    }
}
