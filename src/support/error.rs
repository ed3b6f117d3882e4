//! The crate's one error type and the classification of database errors.
//!
//! Every fallible call returns [`Error`]. Bad input is reported before any SQL is sent;
//! database failures keep the underlying [`sqlx::Error`] as their source.

use std::time::Duration;

/// A result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in sqlock.
///
/// "Held by somebody else" is not an error: [`try_acquire`](crate::Locker::try_acquire)
/// returns `Ok(None)` for it. Variants may be added in minor releases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Occurs when a lock key is empty.
    #[error("lock key is empty")]
    EmptyKey,

    /// Occurs when a lock key is longer than [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) bytes
    /// of UTF-8.
    #[error("lock key is {len} bytes long, the limit is {max} bytes")]
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// Occurs when a lock key contains a NUL character, which PostgreSQL cannot store.
    #[error("lock key contains a NUL character")]
    KeyContainsNul,

    /// Occurs when a TTL is shorter than [`MIN_TTL`](crate::MIN_TTL) (zero included).
    #[error("ttl of {ttl:?} is too short, the minimum is {min:?}")]
    TtlTooShort {
        /// The TTL asked for.
        ttl: Duration,
        /// The minimum.
        min: Duration,
    },

    /// Occurs when a TTL is longer than [`MAX_TTL`](crate::MAX_TTL).
    #[error("ttl of {ttl:?} is too long, the maximum is {max:?}")]
    TtlTooLong {
        /// The TTL asked for.
        ttl: Duration,
        /// The maximum.
        max: Duration,
    },

    /// Occurs when a sweep's batch size is zero or above the maximum.
    #[error("sweep batch of {batch} rows is out of range, it must be 1 to {max}")]
    InvalidBatch {
        /// The batch size asked for.
        batch: u32,
        /// The maximum.
        max: u32,
    },

    /// Occurs when a table name is not a plain lower-case SQL identifier.
    #[error("invalid table name {name:?}: {reason}")]
    InvalidTableName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// Occurs when [`acquire_timeout`](crate::Locker::acquire_timeout) reaches its deadline
    /// before the lock could be taken.
    #[error("timed out after {waited:?} waiting for lock {key:?}")]
    Timeout {
        /// The key that was asked for.
        key: String,
        /// How long the call waited.
        waited: Duration,
    },

    /// Occurs when a lock held by [`Locker::with_lock`](crate::Locker::with_lock) or
    /// [`LockRequest::run`](crate::LockRequest::run) was lost while the work ran.
    #[error("lock {key:?} was lost: {reason}")]
    LockLost {
        /// The lock's key.
        key: String,
        /// Why it was lost.
        reason: crate::support::lost::LostReason,
    },

    /// Occurs when the leadership of an election was lost while
    /// [`Election::lead`](crate::Election::lead) ran the leader's work (which was then
    /// dropped), or when its resignation found it lost already.
    #[error("leadership of election {election:?} (term {term}) was lost: {reason}")]
    LeadershipLost {
        /// The election's name.
        election: String,
        /// The term that was lost.
        term: i64,
        /// Why it was lost.
        reason: crate::support::lost::LostReason,
    },

    /// Occurs when a candidate's identity
    /// ([`Election::id`](crate::Election::id)) is empty, longer than
    /// [`MAX_IDENTITY_BYTES`](crate::MAX_IDENTITY_BYTES) bytes of UTF-8, or contains a
    /// NUL character. Reported before any SQL is sent.
    #[error("invalid leader identity: {reason}")]
    InvalidIdentity {
        /// What is wrong with it.
        reason: String,
    },

    /// Occurs when a handle asks for a key it holds already, with another strategy. A
    /// key is held by one strategy at a time, and a handle's re-entry (a second hold of
    /// a key it holds) keeps the strategy it holds the key with: release the first
    /// hold, or ask with its strategy.
    #[error(
        "lock {key:?} is held by this handle with the {held} strategy, and cannot be taken          again with the {requested} strategy"
    )]
    StrategyConflict {
        /// The lock's key.
        key: String,
        /// The strategy the handle holds the key with.
        held: crate::support::strategy_kind::Strategy,
        /// The strategy asked for.
        requested: crate::support::strategy_kind::Strategy,
    },

    /// Occurs when a lock was granted, but its answer arrived later than the lease's TTL
    /// after the request was sent, so that the lease may have expired before the
    /// caller could use it (the statement waited in the database, or the round trip is
    /// slower than the TTL). The grant is given back. The key was free: this is not
    /// "busy". [`try_acquire`](crate::LockRequest::try_acquire) reports it at once; the
    /// waiting calls try again, and report it after three such grants in a row.
    #[error(
        "lock {key:?} was granted, but the answer took {took:?}, longer than its ttl of          {ttl:?}: the grant was given back; use a ttl well above the database's round trip"
    )]
    GrantExpired {
        /// The lock's key.
        key: String,
        /// The TTL asked for.
        ttl: Duration,
        /// How long the answer took.
        took: Duration,
    },

    /// Occurs when no pooled connection could be had in time: the pool is exhausted,
    /// typically by for-update locks, each of which holds a connection while held.
    #[error(
        "no database connection could be had from the pool in time: the pool is exhausted \
         (each for-update lock holds a connection while held; size the pool above the \
         number of simultaneous holders, or give the locks a pool of their own)"
    )]
    PoolExhausted,

    /// Occurs when the row of a lock stays locked by another transaction for longer than
    /// the call waits: a for-update lock holds its key's row (and, on PostgreSQL, the
    /// key's advisory lock) until its transaction ends, and an operator's
    /// [`force_release`](crate::Locker::force_release) (or
    /// [`force_release_now`](crate::Locker::force_release_now)) does not wait for that. A
    /// for-update lock ends when its transaction does: commit or roll it back, or end
    /// the holder's session.
    #[error(
        "the row of lock {key:?} is locked by another transaction (a for-update lock, or a \
         fenced write), which must end first"
    )]
    RowLocked {
        /// The lock's key.
        key: String,
    },

    /// Occurs when the lock table does not exist in the database.
    #[error(
        "lock table {table:?} does not exist: run the migrations \
         (sqlock::migrate, or `sqlx migrate run --source migrations/{dialect}`) \
         or create it with the DDL from sqlock::schema"
    )]
    MissingTable {
        /// The table name.
        table: String,
        /// The dialect's migration folder name (`postgres`, `mysql` or `sqlite`).
        dialect: &'static str,
        /// The database's own error.
        #[source]
        source: sqlx::Error,
    },

    /// Occurs when a strategy is asked of a database that cannot hold it: the
    /// for-update strategy on SQLite, which has no row locks. Reported before any SQL
    /// is sent.
    #[error(
        "the {strategy} strategy needs row locks, which {dialect} does not have: use the \
         lease or insert strategy there"
    )]
    StrategyUnsupported {
        /// The strategy's name.
        strategy: &'static str,
        /// The database's dialect name.
        dialect: &'static str,
    },

    /// Occurs when the for-update strategy is asked of a node of a Galera cluster:
    /// `SELECT ... FOR UPDATE` locks the row on that node only, so holders on two nodes
    /// would both get it. The lease and insert strategies work there.
    #[error(
        "the for-update strategy cannot lock on a Galera cluster (this server is one of \
         {nodes} nodes): SELECT ... FOR UPDATE locks the row on this node only, so holders \
         on two nodes both get it and one learns of the other only when its COMMIT fails; \
         use the lease strategy (or insert), whose acquisitions are writes that \
         certification orders across the cluster"
    )]
    GaleraCluster {
        /// How many nodes the cluster has.
        nodes: i64,
    },

    /// Occurs when a MySQL-protocol server rejects sqlock's SQL because it is not
    /// MariaDB: MySQL has neither `INSERT ... RETURNING` nor sequences, and the `mysql`
    /// feature needs MariaDB 10.6 or later.
    #[error("the server rejected sqlock's SQL: the mysql feature needs MariaDB 10.6 or later")]
    NotMariaDb {
        /// The server's own error.
        #[source]
        source: sqlx::Error,
    },

    /// Occurs when a lock, semaphore, election or read-write lock is asked for on a
    /// name that contains `@read:` or `@write:`: the keys of that shape are a
    /// read-write lock's own holds (`NAME@read:OWNER`, `NAME@write:OWNER`), and a hold
    /// tells which name it holds by its shape alone. Reported before any SQL is sent.
    #[error(
        "lock key {key:?} is reserved: keys containing {marker:?} are the holds of \
         read-write locks (NAME@read:OWNER, NAME@write:OWNER)"
    )]
    ReservedMarker {
        /// The key asked for.
        key: String,
        /// The reserved marker it contains.
        marker: &'static str,
    },

    /// Occurs when a handle asks for a name in a way its own holds of that name forbid:
    /// the read side of a read-write lock whose name it holds as a lock (not as the
    /// write side), a lock (or a multi-lock's key) on a name it holds a read of or
    /// holds as the write side, or the write side of a name it holds as a lock. They
    /// are holders of their own: the one would wait for the other, or its release
    /// would not keep the name for the other. Release the hold named first. Reported
    /// before any SQL is sent.
    #[error(
        "{key:?}: this handle holds it {held} and cannot take it {requested} as well; \
         release that hold first"
    )]
    MixedHolds {
        /// The name asked for.
        key: String,
        /// How the handle holds it: `as a lock`, `by a read` or `as the write side`.
        held: &'static str,
        /// How it was asked for: `by a read`, `as a lock` or `as the write side`.
        requested: &'static str,
    },

    // The semaphore's errors (`Locker::semaphore`).
    /// Occurs when a lock is asked for on a key of the space reserved for semaphores'
    /// permits, `semaphore:`: a permit is taken through its [`Semaphore`](crate::Semaphore) only, so that no other lock
    /// can ever stand for one. A semaphore is refused such a name too. Reported before
    /// any SQL is sent.
    #[error("lock key {key:?} is reserved: keys starting with {prefix:?} are semaphores' permits")]
    ReservedKey {
        /// The key asked for.
        key: String,
        /// The reserved prefix it starts with.
        prefix: &'static str,
    },

    /// Occurs when a semaphore is given no permits, or more than
    /// [`MAX_PERMITS`](crate::MAX_PERMITS). Reported before any SQL is sent.
    #[error("a semaphore of {permits} permits is out of range, it must have 1 to {max}")]
    InvalidPermits {
        /// The number of permits asked for.
        permits: u32,
        /// The maximum.
        max: u32,
    },

    /// Occurs when an acquisition asks a semaphore for no permit, or for more permits
    /// than the semaphore has (it could never be granted). Reported before any SQL is
    /// sent.
    #[error("cannot take {count} permits of a semaphore of {permits}: ask for 1 to {permits}")]
    InvalidPermitCount {
        /// The number of permits asked for at once.
        count: u32,
        /// The semaphore's number of permits.
        permits: u32,
    },

    /// Occurs when a semaphore is used with another number of permits than the one it
    /// is recorded with: the first caller fixes N, and every caller must agree on it.
    /// Nothing was taken. Reported before any permit is granted.
    #[error(
        "semaphore {name:?} has {recorded} permits, not {requested}: every caller must \
         name the same number"
    )]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// The number of permits it is recorded with.
        recorded: u32,
        /// The number this caller named.
        requested: u32,
    },

    /// Occurs when [`LockerBuilder::build`](crate::LockerBuilder::build) is given a
    /// setting the database cannot honour: `notify_waiters` and `transaction_pooling`
    /// are for PostgreSQL only.
    #[error("{setting} is for PostgreSQL only, and this pool is {dialect}")]
    SettingUnsupported {
        /// The setting, as the builder names it.
        setting: &'static str,
        /// The pool's dialect name.
        dialect: &'static str,
    },

    /// Occurs when presence ([`LockerBuilder::presence`](crate::LockerBuilder::presence))
    /// cannot work where it was asked for: behind a transaction-pooling proxy, on a node
    /// of a Galera cluster, on an in-memory SQLite database, or when the handle's
    /// marker could not be taken. [`build`](crate::LockerBuilder::build) reports what
    /// it can tell without the server; the first acquisition reports the rest.
    /// [`Locker::check_presence`](crate::Locker::check_presence) asks in advance.
    #[error("presence is unavailable here: {reason}")]
    PresenceUnavailable {
        /// Why, and what to do instead.
        reason: String,
    },

    /// Occurs when an at-least hold
    /// ([`LockRequest::at_least`](crate::LockRequest::at_least)) is asked of the
    /// for-update strategy: its lock is a row lock in a transaction, which ends at the
    /// release and cannot outlast it. Reported before any SQL is sent.
    #[error(
        "an at-least hold keeps a lease or insert lock after its release; a {strategy} \
         lock cannot be kept so (a for-update lock ends with its transaction, a fair lock \
         goes to the next waiter): use the lease or insert strategy"
    )]
    AtLeastUnsupported {
        /// The strategy's name.
        strategy: &'static str,
    },

    /// Occurs when [`LockGuard::fence`](crate::LockGuard::fence) is called where it does
    /// not apply: on a connection of another dialect than the lock's, or for a
    /// for-update lock, whose own transaction is fenced already.
    #[error("a fence check runs on a {dialect} connection, for a lease or insert lock")]
    FenceNotApplicable {
        /// The lock's dialect name.
        dialect: &'static str,
    },

    /// Occurs when [`Locker::schedule_sweep`](crate::Locker::schedule_sweep) is given an
    /// interval the database's scheduler cannot keep (not whole seconds, longer than a
    /// day, or not a cron schedule for pg_cron). Reported before any SQL is sent, but
    /// for pg_cron's version, which is read first.
    #[error("cannot schedule a sweep every {every:?}: {reason}")]
    InvalidSchedule {
        /// The interval asked for.
        every: Duration,
        /// Why it cannot be kept.
        reason: String,
    },

    /// Occurs when a sweep is to be scheduled inside a database that has no scheduler
    /// ready: SQLite (which has none), PostgreSQL without pg_cron loaded and created in
    /// this database, MariaDB with the event scheduler off. The hint says what to set.
    #[error("{dialect} cannot schedule the sweep: {hint}")]
    SchedulerUnavailable {
        /// The database's dialect name.
        dialect: &'static str,
        /// What to set, or what to use instead.
        hint: String,
    },

    /// Occurs when the sweep procedure that sqlock's migrations create does not exist:
    /// the database was migrated by an earlier version, or the table created some
    /// other way.
    #[error(
        "the sweep procedure {name:?} does not exist: apply sqlock's migrations \
         (sqlock::migrate, `sqlock migrate`, or `sqlx migrate run --source \
         migrations/{dialect}`), or create it with the DDL from sqlock::schema"
    )]
    MissingSweepProcedure {
        /// The procedure's name, `<table>_sweep`.
        name: String,
        /// The dialect's migration folder name.
        dialect: &'static str,
    },

    /// Occurs when [`LockerBuilder::build`](crate::LockerBuilder::build) is given
    /// settings that cannot work together.
    #[error("invalid locker settings: {0}")]
    InvalidSettings(String),

    /// Occurs when a migration fails to apply or the applied history does not match.
    #[error("migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),

    /// Occurs when the database reports an error sqlock does not handle itself.
    #[error("database error")]
    Database(#[from] sqlx::Error),

    // --- Multi-locks and read-write locks.
    /// Occurs when a multi-lock ([`Locker::lock_many`](crate::Locker::lock_many)) is
    /// given no key. Reported before any SQL is sent.
    #[error("a multi-lock needs at least one key")]
    NoKeys,

    /// Occurs when a handle that holds the read side of a read-write lock asks for its
    /// write side ([`Locker::write_lock`](crate::Locker::write_lock)): an upgrade,
    /// which two readers could each wait for the other to end. Release the read hold
    /// first. Reported before any SQL is sent.
    #[error("read-write lock {name:?}: this handle holds a read and cannot upgrade it to a write")]
    UpgradeRefused {
        /// The read-write lock's name.
        name: String,
    },

    /// Occurs when a multi-lock is given more distinct keys than
    /// [`MAX_MULTI_LOCK_KEYS`](crate::MAX_MULTI_LOCK_KEYS). Reported before any SQL is
    /// sent.
    #[error("a multi-lock of {count} keys is over the limit of {max}")]
    TooManyKeys {
        /// How many distinct keys were given.
        count: usize,
        /// The limit.
        max: usize,
    },

    // --- Quorum locks.
    /// Occurs when a [`Quorum`](crate::Quorum) is given fewer than
    /// [`MIN_QUORUM_MEMBERS`](crate::MIN_QUORUM_MEMBERS) databases: with two, a majority
    /// is both, and one database down would stop every grant. Reported before any SQL
    /// is sent.
    #[error("a quorum lock needs at least {min} independent databases, it was given {members}")]
    QuorumTooSmall {
        /// How many databases were given.
        members: usize,
        /// The fewest a quorum lock spans.
        min: usize,
    },

    /// Occurs when a quorum lock's acquisition heard from fewer of its databases than a
    /// majority: the others were down, cut off, slower than the request's
    /// [`server_timeout`](crate::QuorumRequest::server_timeout), or failing. Answered at
    /// the request's deadline (or at once by a single try) in place of a timeout, since
    /// waiting longer does not help until the databases are back; nothing is held on
    /// any of them then.
    #[error(
        "quorum lock {key:?}: {answered} of its {members} databases answered, a majority is \
         {needed}; the last failure: {failure}"
    )]
    QuorumUnreachable {
        /// The key that was asked for.
        key: String,
        /// How many databases answered the last attempt (granted or busy).
        answered: usize,
        /// How many a grant needs.
        needed: usize,
        /// How many the quorum spans.
        members: usize,
        /// The last failure of a database that did not answer, as it reads.
        failure: String,
    },
}

/// How sqlock reacts to a database error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Another transaction was in the way (deadlock, serialization failure, lock wait
    /// timeout, SQLite busy): the statement was rolled back and may be retried.
    Contention,
    /// The key is held by a lock of another strategy: a definite "busy", not worth an
    /// immediate retry.
    Held,
    /// The key was granted, but too late to be used ([`Error::GrantExpired`]): given
    /// back; another attempt may be quicker.
    Lapsed,
    /// The lock table is missing.
    MissingTable,
    /// The server does not understand sqlock's SQL (MySQL rather than MariaDB).
    Unsupported,
    /// Anything else: surfaced to the caller.
    Other,
}
