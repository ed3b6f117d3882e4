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

use super::dialect::Dialect;
use super::outcome::{Elected, Failure, Grant, Listed, Renewal};
use super::runner::{elected, grants, listed, texts, On, Runner};
use super::statement::{Statement, Target};
use super::transaction::DbTransaction;
use super::values::{
    Acquire, AcquireAll, Bound, Claim, Extend, Held, Key, KeyList, Limit, Mark, Parent, Permits,
    Place, Push, Release, Renew, RowGrant, Share, Slots, Sweep,
};

/// The statements every server has, rendered for one table.
#[derive(Debug, Clone)]
pub(crate) struct Common {
    pub(crate) lease_acquire: Statement<Acquire<'static>>,
    pub(crate) lease_release: Statement<Held<'static>>,
    pub(crate) insert_release: Statement<Held<'static>>,
    pub(crate) lease_release_at_least: Statement<Release<'static>>,
    pub(crate) insert_release_at_least: Statement<Release<'static>>,
    pub(crate) lease_extend: Statement<Extend<'static>>,
    pub(crate) lease_renew: Statement<Renew<'static>>,
    pub(crate) lease_force_release: Statement<Key<'static>>,
    /// An operator's revocation of a lock: its holds taken, the row kept until its
    /// holder gives it back or it lapses (`revoke.rs`).
    pub(crate) lease_revoke: Statement<Key<'static>>,
    /// Which leases a renewal found lost were revoked (the watchdog's).
    pub(crate) lease_revoked: Statement<Renew<'static>>,
    pub(crate) sweep: Statement<Sweep<'static>>,
    pub(crate) list: Statement<Limit>,
    pub(crate) lookup: Statement<Key<'static>>,
    pub(crate) fence: Statement<Held<'static>>,
    /// An election's claim of a term, and the read of its leader.
    pub(crate) elect_claim: Statement<Claim<'static>>,
    pub(crate) elect_leader: Statement<Key<'static>>,
    /// A multi-lock's attempt, every key in one statement (`multi.rs`).
    pub(crate) multi_acquire: Statement<AcquireAll<'static>>,
    pub(crate) fair: Fair,
    /// The semaphore's statements (`semaphore.rs`).
    pub(crate) semaphore: Semaphore,
    pub(crate) rw: Rw,
    /// The steps of the holds of a name in shared mode (`shared.rs`).
    pub(crate) shared: Shared,
}

/// The read-write lock's statements (`rw_*.sql`), every server's (`rw.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Rw {
    /// The key's gate, taken shared by a read's transaction.
    pub(crate) gate: Statement<Key<'static>>,
    /// A read hold, in a transaction holding the key's gate.
    pub(crate) read: Statement<Acquire<'static>>,
    /// The name marked held by reads, after a read hold, in its transaction.
    pub(crate) mark: Statement<Share<'static>>,
    /// The write side's release: one hold given back, and with the last the name left
    /// to the writer's own read, when it holds one, or freed.
    pub(crate) release: Statement<Held<'static>>,
}

/// The statements of the holds of a name in shared mode (`shared_*.sql`), every
/// server's (`shared.rs`): reads and permits.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    /// One hold given back: the holds left.
    pub(crate) release: Statement<Held<'static>>,
    /// The name counts one hold less, and is free at none.
    pub(crate) leave: Statement<Parent<'static>>,
    /// The name pushed as far as a hold of it, once the hold was extended.
    pub(crate) push: Statement<Push<'static>>,
    /// An operator's release of a name: the holds to release with it.
    pub(crate) holds: Statement<Key<'static>>,
    /// An operator's release of those holds.
    pub(crate) force: Statement<KeyList>,
    /// An operator's release of one hold.
    pub(crate) drop: Statement<Key<'static>>,
    /// An operator's revocation of holds (`revoke.rs`).
    pub(crate) revoke: Statement<KeyList>,
}

/// The semaphore's statements (`semaphore_*.sql`), every server's (`semaphore.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Semaphore {
    /// Records a semaphore with its N unless it is recorded.
    pub(crate) ensure: Statement<Permits<'static>>,
    /// Locks the semaphore's row: its gate, and the N recorded.
    pub(crate) gate: Statement<Key<'static>>,
    /// The N a semaphore is recorded with.
    pub(crate) permits: Statement<Key<'static>>,
    /// Takes free slots, under the gate.
    pub(crate) take: Statement<Slots<'static>>,
    /// The name marked held by permits, after they were taken.
    pub(crate) mark: Statement<Share<'static>>,
    /// The live permits of a semaphore's slots.
    pub(crate) holders: Statement<Slots<'static>>,
    /// The recorded semaphores.
    pub(crate) list: Statement<Limit>,
}

/// The fair strategy's statements (`fair_*.sql`), every server's: the steps of its
/// queue, which `fair.rs` runs in transactions of its own.
#[derive(Debug, Clone)]
pub(crate) struct Fair {
    pub(crate) gate: Statement<Key<'static>>,
    pub(crate) enqueue: Statement<Place<'static>>,
    pub(crate) renew: Statement<Place<'static>>,
    pub(crate) status: Statement<Place<'static>>,
    pub(crate) head: Statement<Key<'static>>,
    pub(crate) ensure: Statement<Key<'static>>,
    pub(crate) take: Statement<Place<'static>>,
    pub(crate) mark: Statement<Mark<'static>>,
    pub(crate) leave: Statement<Place<'static>>,
    pub(crate) sweep: Statement<Sweep<'static>>,
}

/// The templates of [`Common`], as a server's folder in `sql/` has them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommonTemplates {
    pub(crate) lease_acquire: &'static str,
    pub(crate) lease_release: &'static str,
    pub(crate) insert_release: &'static str,
    pub(crate) lease_release_at_least: &'static str,
    pub(crate) insert_release_at_least: &'static str,
    pub(crate) lease_extend: &'static str,
    pub(crate) lease_renew: &'static str,
    pub(crate) lease_force_release: &'static str,
    pub(crate) lease_revoke: &'static str,
    pub(crate) lease_revoked: &'static str,
    pub(crate) sweep: &'static str,
    pub(crate) list: &'static str,
    pub(crate) lookup: &'static str,
    pub(crate) fence: &'static str,
    pub(crate) elect_claim: &'static str,
    pub(crate) elect_leader: &'static str,
    pub(crate) multi_acquire: &'static str,
    /// `fair_gate`, `_enqueue`, `_renew`, `_status`, `_head`, `_ensure`, `_take`,
    /// `_mark`, `_leave`, `_sweep`, in that order.
    pub(crate) fair: [&'static str; 10],
    /// `rw_gate`, `rw_read`, `rw_mark`, `rw_release`.
    pub(crate) rw: [&'static str; 4],
    /// `semaphore_ensure`, `_gate`, `_permits`, `_take`, `_holders`, `_list`, `_mark`.
    pub(crate) semaphore: [&'static str; 7],
    /// `shared_release`, `_leave`, `_push`, `_holds`, `_force`, `_drop`, `_revoke`.
    pub(crate) shared: [&'static str; 7],
}

/// The text of `sql/$dir/$name.sql`, compiled in.
macro_rules! sql {
    ($dir:literal, $name:literal) => {
        include_str!(concat!("../../sql/", $dir, "/", $name, ".sql"))
    };
}
pub(crate) use sql;

/// The templates every server has, from `sql/$dir/`.
macro_rules! common_templates {
    ($dir:literal) => {{
        use $crate::db::backend::sql;
        $crate::db::backend::CommonTemplates {
            lease_acquire: sql!($dir, "lease_acquire"),
            lease_release: sql!($dir, "lease_release"),
            insert_release: sql!($dir, "insert_release"),
            lease_release_at_least: sql!($dir, "lease_release_at_least"),
            insert_release_at_least: sql!($dir, "insert_release_at_least"),
            lease_extend: sql!($dir, "lease_extend"),
            lease_renew: sql!($dir, "lease_renew"),
            lease_force_release: sql!($dir, "lease_force_release"),
            lease_revoke: sql!($dir, "lease_revoke"),
            lease_revoked: sql!($dir, "lease_revoked"),
            sweep: sql!($dir, "sweep"),
            list: sql!($dir, "list"),
            lookup: sql!($dir, "lookup"),
            fence: sql!($dir, "fence"),
            elect_claim: sql!($dir, "elect_claim"),
            elect_leader: sql!($dir, "elect_leader"),
            multi_acquire: sql!($dir, "multi_acquire"),
            fair: [
                sql!($dir, "fair_gate"),
                sql!($dir, "fair_enqueue"),
                sql!($dir, "fair_renew"),
                sql!($dir, "fair_status"),
                sql!($dir, "fair_head"),
                sql!($dir, "fair_ensure"),
                sql!($dir, "fair_take"),
                sql!($dir, "fair_mark"),
                sql!($dir, "fair_leave"),
                sql!($dir, "fair_sweep"),
            ],
            rw: [
                sql!($dir, "rw_gate"),
                sql!($dir, "rw_read"),
                sql!($dir, "rw_mark"),
                sql!($dir, "rw_release"),
            ],
            semaphore: [
                sql!($dir, "semaphore_ensure"),
                sql!($dir, "semaphore_gate"),
                sql!($dir, "semaphore_permits"),
                sql!($dir, "semaphore_take"),
                sql!($dir, "semaphore_holders"),
                sql!($dir, "semaphore_list"),
                sql!($dir, "semaphore_mark"),
            ],
            shared: [
                sql!($dir, "shared_release"),
                sql!($dir, "shared_leave"),
                sql!($dir, "shared_push"),
                sql!($dir, "shared_holds"),
                sql!($dir, "shared_force"),
                sql!($dir, "shared_drop"),
                sql!($dir, "shared_revoke"),
            ],
        }
    }};
}
pub(crate) use common_templates;

impl Common {
    pub(crate) fn render(t: &CommonTemplates, target: &Target<'_>) -> Self {
        Self {
            lease_acquire: target.render(t.lease_acquire),
            lease_release: target.render(t.lease_release),
            insert_release: target.render(t.insert_release),
            lease_release_at_least: target.render(t.lease_release_at_least),
            insert_release_at_least: target.render(t.insert_release_at_least),
            lease_extend: target.render(t.lease_extend),
            lease_renew: target.render(t.lease_renew),
            lease_force_release: target.render(t.lease_force_release),
            lease_revoke: target.render(t.lease_revoke),
            lease_revoked: target.render(t.lease_revoked),
            sweep: target.render(t.sweep),
            list: target.render(t.list),
            lookup: target.render(t.lookup),
            fence: target.render(t.fence),
            elect_claim: target.render(t.elect_claim),
            elect_leader: target.render(t.elect_leader),
            multi_acquire: target.render(t.multi_acquire),
            fair: Fair {
                gate: target.render(t.fair[0]),
                enqueue: target.render(t.fair[1]),
                renew: target.render(t.fair[2]),
                status: target.render(t.fair[3]),
                head: target.render(t.fair[4]),
                ensure: target.render(t.fair[5]),
                take: target.render(t.fair[6]),
                mark: target.render(t.fair[7]),
                leave: target.render(t.fair[8]),
                sweep: target.render(t.fair[9]),
            },
            rw: Rw {
                gate: target.render(t.rw[0]),
                read: target.render(t.rw[1]),
                mark: target.render(t.rw[2]),
                release: target.render(t.rw[3]),
            },
            semaphore: Semaphore {
                ensure: target.render(t.semaphore[0]),
                gate: target.render(t.semaphore[1]),
                permits: target.render(t.semaphore[2]),
                take: target.render(t.semaphore[3]),
                holders: target.render(t.semaphore[4]),
                list: target.render(t.semaphore[5]),
                mark: target.render(t.semaphore[6]),
            },
            shared: Shared {
                release: target.render(t.shared[0]),
                leave: target.render(t.shared[1]),
                push: target.render(t.shared[2]),
                holds: target.render(t.shared[3]),
                force: target.render(t.shared[4]),
                drop: target.render(t.shared[5]),
                revoke: target.render(t.shared[6]),
            },
        }
    }
}

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

    /// Whether a statement that answers with several rows as it writes them is sent in
    /// an explicit transaction of its own (a multi-lock's, `multi.rs`): only on a node
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
    /// gate (a fair handoff, `fair.rs`): `Some(released)`, or `None` when the key's row
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

    /// The listed locks, or the one on a key.
    fn list(&self, l: &Limit) -> impl Future<Output = Result<Vec<Listed>, sqlx::Error>> + Send {
        async move { listed(On::Pool(self.pool(), false), &self.common().list, l).await }
    }

    fn lookup(&self, k: &Key<'_>) -> impl Future<Output = Result<Vec<Listed>, sqlx::Error>> + Send {
        async move { listed(On::Pool(self.pool(), false), &self.common().lookup, k).await }
    }

    /// The leader of the election on a key, if it has one.
    fn elect_leader(
        &self,
        k: &Key<'_>,
    ) -> impl Future<Output = Result<Vec<Elected>, sqlx::Error>> + Send {
        async move { elected(self.pool(), &self.common().elect_leader, k).await }
    }
}

/// The statements of the for-update strategy every server with row locks has.
#[derive(Debug, Clone)]
pub(crate) struct ForUpdate {
    pub(crate) lock: Statement<Key<'static>>,
    pub(crate) lock_nowait: Statement<Key<'static>>,
    pub(crate) ensure: Statement<Key<'static>>,
    pub(crate) grant: Statement<RowGrant<'static>>,
    /// Whether the holder's transaction still shows its grant: the keepalive, and the
    /// check after the holder's own statements and before COMMIT.
    pub(crate) check: Statement<Held<'static>>,
}

/// The for-update statements of `sql/$dir/`, rendered for `$target`.
macro_rules! for_update_of {
    ($dir:literal, $target:expr) => {{
        use $crate::db::backend::sql;
        let target = $target;
        $crate::db::backend::ForUpdate {
            lock: target.render(sql!($dir, "for_update_lock")),
            lock_nowait: target.render(sql!($dir, "for_update_lock_nowait")),
            ensure: target.render(sql!($dir, "for_update_ensure")),
            grant: target.render(sql!($dir, "for_update_grant")),
            check: target.render(sql!($dir, "for_update_check")),
        }
    }};
}
pub(crate) use for_update_of;

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
