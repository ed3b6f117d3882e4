//! The statements of one dialect, rendered for one lock table: every query sqlock
//! sends, read from `sql/<dialect>/` at build time.

use crate::error::{Class, Error};
use crate::sql::Statement;
use crate::validate::TableName;

use super::{Dialect, Failure};

/// Every statement of one dialect, rendered for one table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) dialect: Dialect,
    pub(crate) table: TableName,
    pub(crate) lease_acquire: Statement,
    pub(crate) lease_release: Statement,
    pub(crate) lease_extend: Statement,
    pub(crate) lease_renew: Statement,
    /// MariaDB only: which leases of a batch survived, after a short renewal count.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) lease_survivors: Option<Statement>,
    pub(crate) lease_force_release: Statement,
    pub(crate) insert_release: Statement,
    pub(crate) sweep: Statement,
    pub(crate) list: Statement,
    pub(crate) lookup: Statement,
    pub(crate) fence: Statement,
    /// The for-update strategy's statements; `None` where it is not supported.
    pub(crate) for_update: Option<ForUpdateStatements>,
    /// MariaDB only: the size of the Galera cluster the server belongs to, if any.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) galera_check: Option<Statement>,
    /// MariaDB only: whether a lease is still ours, by a read that waits on no row lock;
    /// asked when a release or extension found its row locked.
    pub(crate) lease_held: Option<Statement>,
    /// MariaDB only: the sweep's first step, locking the rows to reclaim with SKIP
    /// LOCKED (MariaDB's DELETE cannot skip locked rows itself).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) sweep_claim: Option<Statement>,
    /// MariaDB only: the renewal of the survivors after a renewal met a locked row.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) lease_renew_again: Option<Statement>,
}

/// The statements of the for-update strategy.
#[derive(Debug, Clone)]
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) struct ForUpdateStatements {
    /// PostgreSQL only: the transaction's lock_timeout and the key's gate (advisory
    /// lock), waiting and not. MariaDB waits in the statement, and has no gate.
    pub(crate) begin: Option<(Statement, Statement)>,
    pub(crate) lock: Statement,
    pub(crate) lock_nowait: Statement,
    pub(crate) ensure: Statement,
    pub(crate) grant: Statement,
    /// Whether the holder's transaction still shows its grant: the keepalive, and the
    /// check after the holder's own statements and before COMMIT.
    pub(crate) check: Statement,
    /// MariaDB only: whether the key has a row, read without locking before the
    /// locking transaction (which then never takes a gap lock).
    pub(crate) probe: Option<Statement>,
}

/// How a handle's statements are sent, beyond their dialect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Mode {
    /// Releases also announce the freed key on the table's channel (PostgreSQL).
    pub(crate) notify: bool,
    /// Statements are unnamed and pinned by a transaction each (transaction pooling).
    pub(crate) pinned: bool,
}

impl Statements {
    pub(crate) fn new(dialect: Dialect, table: &TableName, mode: Mode) -> Self {
        let t = templates(dialect);
        let render =
            |text| Statement::render(text, table, dialect.placeholders()).pinned(mode.pinned);
        // With notifications on, the releases that free a key are the variants that
        // announce it; the dialects without them never get here (refused by build()).
        let notify = t.notify.as_ref().filter(|_| mode.notify);
        let (lease_release, insert_release, lease_force_release) = match notify {
            Some(n) => (n.lease_release, n.insert_release, n.lease_force_release),
            None => (t.lease_release, t.insert_release, t.lease_force_release),
        };
        Self {
            dialect,
            table: table.clone(),
            lease_acquire: render(t.lease_acquire),
            lease_release: render(lease_release),
            lease_extend: render(t.lease_extend),
            lease_renew: render(t.lease_renew),
            lease_survivors: t.lease_survivors.map(render),
            lease_force_release: render(lease_force_release),
            insert_release: render(insert_release),
            sweep: render(t.sweep),
            list: render(t.list),
            lookup: render(t.lookup),
            fence: render(t.fence),
            for_update: t.for_update.map(|f| ForUpdateStatements {
                begin: f.begin.map(|(wait, nowait)| (render(wait), render(nowait))),
                lock: render(f.lock),
                lock_nowait: render(f.lock_nowait),
                ensure: render(f.ensure),
                grant: render(f.grant),
                check: render(f.check),
                probe: f.probe.map(render),
            }),
            galera_check: t.galera_check.map(render),
            lease_held: t.lease_held.map(render),
            sweep_claim: t.sweep_claim.map(render),
            lease_renew_again: t.lease_renew_again.map(render),
        }
    }

    pub(crate) fn table(&self) -> &TableName {
        &self.table
    }

    /// The crate error for a failed statement of this dialect, sorted by its class.
    pub(crate) fn failure(&self, source: sqlx::Error) -> Failure {
        self.error(super::classify(self.dialect, &source), source)
    }

    /// The crate error for a failed statement of this dialect.
    pub(crate) fn error(&self, class: Class, source: sqlx::Error) -> Failure {
        // Every strategy draws its connections from the application's pool.
        if matches!(source, sqlx::Error::PoolTimedOut) {
            return Failure {
                class: Class::Other,
                error: Error::PoolExhausted,
            };
        }
        let error = match class {
            Class::MissingTable => Error::MissingTable {
                table: self.table.to_string(),
                dialect: self.dialect.name(),
                source,
            },
            Class::Unsupported => Error::NotMariaDb { source },
            Class::Contention | Class::Held | Class::Lapsed | Class::Other => {
                Error::Database(source)
            }
        };
        Failure { class, error }
    }
}

/// The statement templates of one dialect, as written in `sql/<dialect>/`.
struct Templates {
    lease_acquire: &'static str,
    lease_release: &'static str,
    lease_extend: &'static str,
    lease_renew: &'static str,
    lease_survivors: Option<&'static str>,
    lease_force_release: &'static str,
    insert_release: &'static str,
    sweep: &'static str,
    list: &'static str,
    lookup: &'static str,
    fence: &'static str,
    for_update: Option<ForUpdateTemplates>,
    notify: Option<NotifyTemplates>,
    galera_check: Option<&'static str>,
    /// MariaDB only: see [`Statements::lease_held`].
    lease_held: Option<&'static str>,
    /// MariaDB only: see [`Statements::sweep_claim`].
    sweep_claim: Option<&'static str>,
    /// MariaDB only: see [`Statements::lease_renew_again`].
    lease_renew_again: Option<&'static str>,
}

/// The releases that also announce the freed key (PostgreSQL only).
struct NotifyTemplates {
    lease_release: &'static str,
    insert_release: &'static str,
    lease_force_release: &'static str,
}

struct ForUpdateTemplates {
    /// PostgreSQL only: the bound on lock waits and the key's gate, waiting and not.
    begin: Option<(&'static str, &'static str)>,
    lock: &'static str,
    lock_nowait: &'static str,
    ensure: &'static str,
    grant: &'static str,
    check: &'static str,
    probe: Option<&'static str>,
}

macro_rules! for_update_of {
    ($dir:literal, $begin:expr, $probe:expr) => {
        Some(ForUpdateTemplates {
            begin: $begin,
            probe: $probe,
            lock: include_str!(concat!("../../sql/", $dir, "/for_update_lock.sql")),
            lock_nowait: include_str!(concat!("../../sql/", $dir, "/for_update_lock_nowait.sql")),
            ensure: include_str!(concat!("../../sql/", $dir, "/for_update_ensure.sql")),
            grant: include_str!(concat!("../../sql/", $dir, "/for_update_grant.sql")),
            check: include_str!(concat!("../../sql/", $dir, "/for_update_check.sql")),
        })
    };
}

macro_rules! templates_of {
    ($dir:literal, $survivors:expr, $for_update:expr, $notify:expr, $galera:expr) => {
        templates_of!(
            $dir,
            $survivors,
            $for_update,
            $notify,
            $galera,
            None,
            None,
            None
        )
    };
    ($dir:literal, $survivors:expr, $for_update:expr, $notify:expr, $galera:expr,
     $held:expr, $claim:expr, $again:expr) => {
        Templates {
            lease_acquire: include_str!(concat!("../../sql/", $dir, "/lease_acquire.sql")),
            lease_release: include_str!(concat!("../../sql/", $dir, "/lease_release.sql")),
            lease_extend: include_str!(concat!("../../sql/", $dir, "/lease_extend.sql")),
            lease_renew: include_str!(concat!("../../sql/", $dir, "/lease_renew.sql")),
            lease_survivors: $survivors,
            lease_force_release: include_str!(concat!(
                "../../sql/",
                $dir,
                "/lease_force_release.sql"
            )),
            insert_release: include_str!(concat!("../../sql/", $dir, "/insert_release.sql")),
            sweep: include_str!(concat!("../../sql/", $dir, "/sweep.sql")),
            list: include_str!(concat!("../../sql/", $dir, "/list.sql")),
            lookup: include_str!(concat!("../../sql/", $dir, "/lookup.sql")),
            fence: include_str!(concat!("../../sql/", $dir, "/fence.sql")),
            for_update: $for_update,
            notify: $notify,
            galera_check: $galera,
            lease_held: $held,
            sweep_claim: $claim,
            lease_renew_again: $again,
        }
    };
}

fn templates(dialect: Dialect) -> Templates {
    match dialect {
        Dialect::Postgres => templates_of!(
            "postgres",
            None,
            for_update_of!(
                "postgres",
                Some((
                    include_str!("../../sql/postgres/for_update_begin.sql"),
                    include_str!("../../sql/postgres/for_update_begin_nowait.sql")
                )),
                None
            ),
            Some(NotifyTemplates {
                lease_release: include_str!("../../sql/postgres/lease_release_notify.sql"),
                insert_release: include_str!("../../sql/postgres/insert_release_notify.sql"),
                lease_force_release: include_str!(
                    "../../sql/postgres/lease_force_release_notify.sql"
                ),
            }),
            None
        ),
        Dialect::MySql => templates_of!(
            "mysql",
            Some(include_str!("../../sql/mysql/lease_survivors.sql")),
            for_update_of!(
                "mysql",
                None,
                Some(include_str!("../../sql/mysql/for_update_probe.sql"))
            ),
            None,
            Some(include_str!("../../sql/mysql/galera_check.sql")),
            Some(include_str!("../../sql/mysql/lease_held.sql")),
            Some(include_str!("../../sql/mysql/sweep_claim.sql")),
            Some(include_str!("../../sql/mysql/lease_renew_again.sql"))
        ),
        // SQLite has no row locks.
        Dialect::Sqlite => templates_of!("sqlite", None, None, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::Param;

    #[test]
    fn notifying_releases_name_the_channel() {
        let table = TableName::new("my_locks").unwrap();
        let mode = Mode {
            notify: true,
            pinned: false,
        };
        let s = Statements::new(Dialect::Postgres, &table, mode);
        for st in [&s.lease_release, &s.insert_release, &s.lease_force_release] {
            assert!(st
                .text()
                .contains("pg_notify('my_locks_released', lock_key)"));
            assert!(!st.text().contains('{'));
        }
        let plain = Statements::new(Dialect::Postgres, &table, Mode::default());
        assert!(!plain.lease_release.text().contains("pg_notify"));
    }

    #[test]
    fn every_template_renders() {
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let s = Statements::new(
                dialect,
                &TableName::new("my_locks").unwrap(),
                Mode::default(),
            );
            let all = [
                &s.lease_acquire,
                &s.lease_release,
                &s.lease_extend,
                &s.lease_renew,
                &s.lease_force_release,
                &s.insert_release,
                &s.sweep,
                &s.list,
                &s.lookup,
                &s.fence,
            ];
            let for_update = s.for_update.iter().flat_map(|f| {
                [&f.lock, &f.lock_nowait, &f.ensure, &f.grant, &f.check]
                    .into_iter()
                    .chain(f.probe.as_ref())
            });
            // FenceConnection binds key, owner and token in this order, once each.
            assert_eq!(
                s.fence.params(),
                [Param::Key, Param::Owner, Param::Token],
                "{dialect}"
            );
            // These two name no table.
            let begins = s
                .for_update
                .iter()
                .flat_map(|f| f.begin.iter().flat_map(|(a, b)| [a, b]));
            for st in begins {
                assert!(
                    !st.text().contains("--") && !st.text().contains('{'),
                    "{dialect}"
                );
            }
            for st in all
                .into_iter()
                .chain(s.lease_survivors.as_ref())
                .chain(s.lease_renew_again.as_ref())
                .chain(for_update)
            {
                assert!(st.text().contains("my_locks"), "{dialect}");
                assert!(!st.text().contains("{table}"), "{dialect}");
                assert!(
                    !st.text().contains("--"),
                    "{dialect}: comments are stripped"
                );
            }
        }
    }
}
