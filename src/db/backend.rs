//! The traits a database server's backend implements: [`Backend`] for what every server
//! does, and [`RowLocks`] for the servers with row locks (the for-update strategy). The
//! servers with a scheduler inside implement `Scheduling` too (`scheduling.rs`).
//!
//! One type per server implements them (`postgres.rs`, `mysql.rs`, `sqlite.rs`): it
//! owns its pool, its statements rendered for one table, and its error classification.
//! What most servers do alike is a default method here; a server overrides what it does
//! its own way. A statement a server lacks is absent from its type, and a trait it
//! cannot implement is not implemented: nothing is checked at run time.

use std::future::Future;

use crate::support::error::{Class, Error};
use crate::support::validate::TableName;

use super::declare::statements;
use super::dialect::Dialect;
use super::groups::{Family, FamilyTemplates};
use super::outcome::{Elected, Failure, Grant, Listed, Renewal};
use super::runner::{elected, grants, listed, texts, On, Runner};
use super::statement::{Statement, Target};
use super::transaction::DbTransaction;
use super::values::{
    Acquire, AcquireAll, Bound, Claim, Extend, Held, Key, Limit, Release, Renew, RowGrant, Sweep,
};

statements! {
    /// The statements every server has, rendered for one table.
    Common / CommonTemplates for { postgres: "postgres", mysql: "mysql", sqlite: "sqlite" } {
        lease_acquire: Acquire<'static> = "lease_acquire",
        lease_release: Held<'static> = "lease_release",
        insert_release: Held<'static> = "insert_release",
        lease_release_at_least: Release<'static> = "lease_release_at_least",
        insert_release_at_least: Release<'static> = "insert_release_at_least",
        lease_extend: Extend<'static> = "lease_extend",
        lease_renew: Renew<'static> = "lease_renew",
        lease_force_release: Key<'static> = "lease_force_release",
        /// An operator's revocation of a lock: its holds taken, the row kept until its
        /// holder gives it back or it lapses (`revoke.rs`).
        lease_revoke: Key<'static> = "lease_revoke",
        /// Which leases a renewal found lost were revoked (the watchdog's).
        lease_revoked: Renew<'static> = "lease_revoked",
        sweep: Sweep<'static> = "sweep",
        list: Limit = "list",
        lookup: Key<'static> = "lookup",
        fence: Held<'static> = "fence",
        /// An election's claim of a term.
        elect_claim: Claim<'static> = "elect_claim",
        /// The read of an election's leader.
        elect_leader: Key<'static> = "elect_leader",
        /// A multi-lock's attempt, every key in one statement (`strategy/multi/steps.rs`).
        multi_acquire: AcquireAll<'static> = "multi_acquire",
    }
    groups {
        /// The family's groups (`groups.rs`).
        family: Family / FamilyTemplates,
    }
}

/// The text of `sql/$dir/$name.sql`, compiled in.
macro_rules! sql {
    ($dir:literal, $name:literal) => {
        include_str!(concat!("../../sql/", $dir, "/", $name, ".sql"))
    };
}
pub(crate) use sql;

/// What every backend has: its pool, its table, and the statements every server has,
/// rendered for that table.
#[derive(Debug)]
pub(crate) struct Base<DB: sqlx::Database> {
    pub(crate) pool: sqlx::Pool<DB>,
    pub(crate) table: TableName,
    pub(crate) common: Common,
}

impl<DB: sqlx::Database> Base<DB> {
    pub(crate) fn new(pool: sqlx::Pool<DB>, target: &Target<'_>, t: &CommonTemplates) -> Self {
        Self {
            pool,
            table: target.table.clone(),
            common: Common::render(t, target),
        }
    }
}

/// One database server: its pool, its statements for one table, how it sorts errors,
/// and how it runs what it runs its own way.
pub(crate) trait Backend: Send + Sync + Sized + 'static {
    /// sqlx's type for this server.
    type Db: Runner;

    /// The server family.
    const DIALECT: Dialect;

    fn base(&self) -> &Base<Self::Db>;

    fn pool(&self) -> &sqlx::Pool<Self::Db> {
        &self.base().pool
    }

    fn table(&self) -> &TableName {
        &self.base().table
    }

    fn common(&self) -> &Common {
        &self.base().common
    }

    /// Sorts this server's errors: whether the caller may retry.
    fn classify(e: &sqlx::Error) -> Class;

    /// Whether `e` is a lock wait that ran out and rolled back the statement alone,
    /// not its transaction (MariaDB's lock wait timeout).
    fn is_lock_wait_timeout(e: &sqlx::Error) -> bool {
        let _ = e;
        false
    }

    /// Whether `e` failed a statement of an explicit transaction because the sequence
    /// it drew a token from was being written by another transaction for a moment
    /// (MariaDB, whose sequence writes commit on their own and cannot wait under a
    /// lock wait timeout of zero): contention, worth another try.
    fn is_sequence_busy(e: &sqlx::Error) -> bool {
        let _ = e;
        false
    }

    /// The crate error for a failed statement of this server, sorted by its class.
    fn failure(&self, source: sqlx::Error) -> Failure {
        // Every strategy draws its connections from the application's pool.
        if matches!(source, sqlx::Error::PoolTimedOut) {
            return Failure {
                class: Class::Other,
                error: Error::PoolExhausted,
            };
        }
        let class = Self::classify(&source);
        let error = match class {
            Class::MissingTable => Error::MissingTable {
                table: self.table().to_string(),
                dialect: Self::DIALECT.name(),
                source,
            },
            Class::Unsupported => Error::NotMariaDb { source },
            Class::Contention | Class::Held | Class::Lapsed | Class::Other => {
                Error::Database(source)
            }
        };
        Failure { class, error }
    }

    /// Runs the acquisition statement: the row as it stands afterwards, if any.
    fn lease_acquire(
        &self,
        a: &Acquire<'_>,
    ) -> impl Future<Output = Result<Vec<Grant>, sqlx::Error>> + Send {
        async move {
            let s = &self.common().lease_acquire;
            grants(self.pool(), s, a, false).await
        }
    }

    /// Of `owners`, those whose presence marker is found outside the database and free
    /// (SQLite's marker files: their processes are gone), each marker held until the
    /// answer is dropped, so that their holds can be taken meanwhile. The servers'
    /// markers are found inside the statements: none here.
    fn gone_owners(&self, owners: &[String]) -> GoneOwners {
        // The default, for the servers, is never asked: see `markers_outside`.
        let _ = owners;
        GoneOwners::default()
    }

    /// Whether presence markers are files outside the database (SQLite), which the
    /// statements cannot see: a statement's "gone" then only lists candidates, and
    /// [`gone_owners`](Self::gone_owners) decides.
    const MARKERS_IN_FILES: bool = false;

    /// Whether the lock table keeps the fair strategy's `queued` flag on each key's
    /// row, which a join sets and a handoff that finds nobody queued clears (the
    /// servers: a statement's snapshot may predate a join that committed before it
    /// took the key's gate, but the row it writes it reads as it stands). SQLite's
    /// statements read the queue itself: its writers run one at a time, each on the
    /// latest commit.
    const QUEUED_FLAG: bool = true;

    /// Whether presence markers are found outside the database, for
    /// [`gone_owners`](Self::gone_owners) to look at: SQLite's marker files, when
    /// their folder is there.
    fn markers_outside(&self) -> bool {
        false
    }

    /// `rows` with `gone` set for each holder whose presence marker is found outside
    /// the database and free (SQLite's marker files); the servers' statements say it.
    fn with_gone(&self, rows: Vec<Listed>) -> Vec<Listed> {
        rows
    }

    /// Whether a statement that answers with several rows as it writes them is sent in
    /// an explicit transaction of its own (a multi-lock's, `strategy/multi/steps.rs`): only on a node
    /// of a Galera cluster (see `MariaDb::lease_acquire`).
    fn rows_in_transaction(&self) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async { Ok(false) }
    }

    /// After a release or an extension found its row locked: whether the lease is
    /// still ours, by a read that waits on no row lock. Only MariaDB is told not to
    /// wait on a row lock there; elsewhere the statement waited, and this is `true`.
    fn still_held(&self, h: &Held<'_>) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        let _ = h;
        async { Ok(true) }
    }

    /// Renews a batch of leases in one statement whose `RETURNING` names the
    /// survivors.
    fn lease_renew(
        &self,
        r: &Renew<'_>,
        batch: &[(String, i64)],
    ) -> impl Future<Output = Result<Renewal, sqlx::Error>> + Send {
        async move {
            let mut survivors =
                texts(On::Pool(self.pool(), false), &self.common().lease_renew, r).await?;
            // The names pushed for the batch's holds in shared mode may come back too
            // (SQLite): the survivors are the batch's keys.
            survivors.retain(|s| batch.iter().any(|(k, _)| k == s));
            Ok(Renewal {
                survivors: Some(survivors),
                statements: 1,
            })
        }
    }

    /// An operator's release, on its own or `on` a transaction that holds the key's
    /// gate (a fair handoff, `strategy/fair/steps.rs`): `Some(released)`, or `None` when the key's row
    /// (or gate) is held by another transaction.
    fn force_release<'a>(
        &'a self,
        on: On<'a, Self::Db>,
        k: &'a Key<'a>,
    ) -> impl Future<Output = Result<Option<bool>, sqlx::Error>> + Send + 'a {
        async move {
            let s = &self.common().lease_force_release;
            Ok(Some(Self::Db::execute(on, s, k).await? > 0))
        }
    }

    /// An operator's revocation of the lock on `k`, `on` a transaction (`revoke.rs`):
    /// `Some(revoked)`, whether a lock with holds was revoked, or `None` when the key's
    /// gate is held by another transaction.
    fn revoke<'a>(
        &'a self,
        on: On<'a, Self::Db>,
        k: &'a Key<'a>,
    ) -> impl Future<Output = Result<Option<bool>, sqlx::Error>> + Send + 'a {
        async move {
            let s = &self.common().lease_revoke;
            Ok(Some(Self::Db::execute(on, s, k).await? > 0))
        }
    }

    /// One sweep batch in one statement, where the server's DELETE can skip locked
    /// rows.
    fn sweep(&self, s: &Sweep<'_>) -> impl Future<Output = Result<u64, sqlx::Error>> + Send {
        async move { Self::Db::execute(On::Pool(self.pool(), false), &self.common().sweep, s).await }
    }

    /// A statement of the common set run for its effect: whether it matched a row.
    fn matched<'a, V: super::statement::Values>(
        &'a self,
        s: &'a Statement<V>,
        v: &'a V::With<'a>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a {
        async move { Ok(Self::Db::execute(On::Pool(self.pool(), false), s, v).await? > 0) }
    }

    /// The pushed expiry of an extended lease, `None` when it is no longer ours.
    fn lease_extend(
        &self,
        e: &Extend<'_>,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send {
        async move {
            Self::Db::value(On::Pool(self.pool(), false), &self.common().lease_extend, e).await
        }
    }

    /// The listed locks, or the one on a key, each holder said to be gone when its
    /// presence marker is free.
    fn list(&self, l: &Limit) -> impl Future<Output = Result<Vec<Listed>, sqlx::Error>> + Send {
        async move {
            let rows = listed(On::Pool(self.pool(), false), &self.common().list, l).await?;
            Ok(self.with_gone(rows))
        }
    }

    fn lookup(&self, k: &Key<'_>) -> impl Future<Output = Result<Vec<Listed>, sqlx::Error>> + Send {
        async move {
            let rows = listed(On::Pool(self.pool(), false), &self.common().lookup, k).await?;
            Ok(self.with_gone(rows))
        }
    }

    /// The leader of the election on a key, if it has one.
    fn elect_leader(
        &self,
        k: &Key<'_>,
    ) -> impl Future<Output = Result<Vec<Elected>, sqlx::Error>> + Send {
        async move { elected(self.pool(), &self.common().elect_leader, k).await }
    }
}

statements! {
    /// The statements of the for-update strategy every server with row locks has.
    ForUpdate / ForUpdateTemplates for { postgres: "postgres", mysql: "mysql" } {
        lock: Key<'static> = "for_update_lock",
        lock_nowait: Key<'static> = "for_update_lock_nowait",
        ensure: Key<'static> = "for_update_ensure",
        grant: RowGrant<'static> = "for_update_grant",
        /// Whether the holder's transaction still shows its grant: the keepalive, and
        /// the check after the holder's own statements and before COMMIT.
        check: Held<'static> = "for_update_check",
    }
}

/// How the key's row may be locked, once the transaction's waits are bounded.
#[derive(Debug)]
pub(crate) enum Gate {
    /// Go ahead; the setting the bound replaced, to put back at the grant.
    Open(Option<String>),
    /// Another transaction holds the key's gate (PostgreSQL): busy.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Taken,
}

/// A server with row locks: the for-update strategy's statements and the steps of its
/// protocol that differ between servers.
pub(crate) trait RowLocks: Backend {
    fn for_update(&self) -> &ForUpdate;

    /// Refuses row locks that would not exclude: MariaDB on a node of a Galera
    /// cluster, where a row lock stays on its node.
    fn check_row_locks(&self) -> impl Future<Output = Result<(), Failure>> + Send {
        async { Ok(()) }
    }

    /// Before the locking transaction: MariaDB makes sure the key has a row, so that
    /// the transaction never reads a missing key with a lock (a gap lock).
    fn prepare(&self, k: &Key<'_>) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let _ = k;
        async { Ok(()) }
    }

    /// First in the locking transaction on `conn`: bounds its waits where a setting
    /// does it (PostgreSQL's `lock_timeout`), and takes the key's gate where there is
    /// one. MariaDB waits in the locking statement itself.
    fn bound<'a>(
        &'a self,
        conn: &'a mut <Self::Db as sqlx::Database>::Connection,
        b: &'a Bound<'_>,
        nowait: bool,
    ) -> impl Future<Output = Result<Gate, sqlx::Error>> + Send + 'a {
        let _ = (conn, b, nowait);
        async { Ok(Gate::Open(None)) }
    }

    /// The public face of a locking transaction of this server.
    fn lend(tx: sqlx::Transaction<'static, Self::Db>) -> DbTransaction;
}

/// Owners whose presence markers were found free outside the database (SQLite's
/// marker files), held until this is dropped: see [`Backend::gone_owners`].
#[derive(Debug, Default)]
pub(crate) struct GoneOwners {
    /// The owners, as a JSON array (`"[]"` for none), as statements take them.
    pub(crate) json: String,
    /// Who they are.
    pub(crate) owners: Vec<String>,
    /// How many there are.
    pub(crate) count: usize,
    /// Their markers, locked by this process until dropped: kept, never read.
    #[allow(dead_code)]
    pub(crate) held: Vec<std::fs::File>,
}
