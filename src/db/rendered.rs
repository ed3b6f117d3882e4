//! The statements of `sql/` as a handle renders them, for the project's own benchmark
//! and tests.
//!
//! Not part of the public API: reached only through the hidden `sqlock::__private`,
//! with no stability promise. The benchmark (`bench/` in the repository) sends these
//! statements raw, beside the library, to measure what the library adds around them;
//! it must send the very text the library sends, so it takes it from here rather than
//! rendering a copy of its own. The templates are the ones compiled into the crate, so
//! nothing is read from disk at run time.

use crate::support::validate::TableName;

use super::backend::sql;
use super::dialect::Dialect;
use super::statement::{Param, Statement, Value, Values};

/// A statement rendered for one table and dialect: what a handle prepares, and the
/// values it binds, by name, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedStatement {
    /// The SQL text: the table's name written in, comments dropped, each named
    /// parameter turned into the dialect's placeholder (`$n` or `?`).
    pub text: String,
    /// The names of the values to bind, in binding order: `key`, `owner`, `ttl_us`,
    /// `token`, `batch`, `grace_us`, `limit`, `strategy`, `wait_us`, `setting`,
    /// `schedule`, `every_s` or `batches`. On PostgreSQL a name used twice is bound
    /// once; elsewhere once per use.
    pub params: Vec<&'static str>,
}

/// The statement `name` (its file's name in `sql/<dialect>/`, without `.sql`) of
/// `dialect`, rendered for `table` as a handle without notifications or transaction
/// pooling renders it, and without presence (the presence values written in as `''`);
/// `None` when the dialect has no such statement.
///
/// Not part of the public API: see the module's documentation.
pub fn statement(dialect: Dialect, table: &TableName, name: &str) -> Option<RenderedStatement> {
    let template = template(dialect, name)?;
    // As a handle without presence sends it: no marker recorded, no owner gone.
    let template = template.replace(":presence", "''").replace(":gone", "''");
    Some(rendered(&template, dialect, table))
}

/// The statement `name` of `dialect` exactly as a handle without notifications or
/// transaction pooling prepares it: [`statement`] with the presence values kept as
/// parameters (`presence`, `gone`), which such a handle binds as `''`.
///
/// Not part of the public API: see the module's documentation.
pub fn prepared(dialect: Dialect, table: &TableName, name: &str) -> Option<RenderedStatement> {
    Some(rendered(template(dialect, name)?, dialect, table))
}

fn rendered(template: &str, dialect: Dialect, table: &TableName) -> RenderedStatement {
    let rendered = Statement::<Any>::render(template, table, dialect.placeholders());
    RenderedStatement {
        text: rendered.text().to_owned(),
        params: rendered.params().iter().map(|p| p.name()).collect(),
    }
}

/// The statement files the benchmark sends raw, and the read-write lock's, whose plans
/// a test reads, by server.
fn template(dialect: Dialect, name: &str) -> Option<&'static str> {
    macro_rules! files {
        ($dir:literal: $($file:literal),*) => {
            match name {
                $($file => Some(sql!($dir, $file)),)*
                _ => None,
            }
        };
    }
    match dialect {
        Dialect::Postgres => files!("postgres": "lease_acquire", "lease_release", "lease_extend",
            "lease_renew", "lease_force_release", "insert_release", "sweep", "list", "lookup",
            "fence", "for_update_begin", "for_update_begin_nowait", "for_update_lock",
            "for_update_lock_nowait", "for_update_ensure", "for_update_grant",
            "for_update_check", "rw_read", "rw_mark", "shared_holds"),
        Dialect::MySql => files!("mysql": "lease_acquire", "lease_release", "lease_extend",
            "lease_renew", "lease_force_release", "insert_release", "sweep", "list", "lookup",
            "fence", "lease_survivors", "lease_held", "lease_renew_again", "sweep_claim",
            "galera_check", "for_update_probe", "for_update_lock", "for_update_lock_nowait",
            "for_update_ensure", "for_update_grant", "for_update_check", "rw_read", "rw_mark",
            "shared_holds"),
        Dialect::Sqlite => files!("sqlite": "lease_acquire", "lease_release", "lease_extend",
            "lease_renew", "lease_force_release", "insert_release", "sweep", "list", "lookup",
            "fence", "rw_read", "rw_mark", "shared_holds"),
    }
}

/// Any value a template may name: rendering only, never bound.
struct Any;

impl Values for Any {
    type With<'a> = Any;

    const PARAMS: &'static [Param] = Param::ALL;

    fn value(&self, _: Param) -> Value<'_> {
        Value::Int(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::statement::{Mode, Target};

    #[test]
    fn renders_what_a_handle_sends() {
        let table = TableName::new("bench_t").unwrap();
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let target = Target {
                table: &table,
                placeholders: dialect.placeholders(),
                mode: Mode::default(),
            };
            let handle: Statement<crate::db::values::Acquire<'static>> =
                target.render(template(dialect, "lease_acquire").unwrap());
            let acquire = statement(dialect, &table, "lease_acquire").unwrap();
            let without_presence = |p: &&crate::db::statement::Param| {
                !matches!(
                    p,
                    crate::db::statement::Param::Presence | crate::db::statement::Param::Gone
                )
            };
            assert_eq!(
                acquire.params.len(),
                handle.params().iter().filter(without_presence).count(),
                "{dialect}"
            );
            assert!(acquire.params.contains(&"key"), "{dialect}");
            assert!(acquire.text.contains("bench_t"), "{dialect}");
            assert_eq!(statement(dialect, &table, "no_such_statement"), None);
        }
    }

    #[test]
    fn placeholders_follow_the_dialect() {
        let table = TableName::new("bench_t").unwrap();
        let pg = statement(Dialect::Postgres, &table, "lease_release").unwrap();
        assert!(pg.text.contains("lock_key = $1"), "{}", pg.text);
        assert_eq!(pg.params[0], "key");
        let my = statement(Dialect::MySql, &table, "lease_release").unwrap();
        assert_eq!(my.text.matches('?').count(), my.params.len());
        assert!(!my.text.contains(":key"));
    }

    #[test]
    fn a_statement_a_dialect_lacks_is_none() {
        let table = TableName::new("bench_t").unwrap();
        assert!(statement(Dialect::Sqlite, &table, "for_update_lock_nowait").is_none());
        assert!(statement(Dialect::MySql, &table, "for_update_begin_nowait").is_none());
        assert!(statement(Dialect::Postgres, &table, "lease_survivors").is_none());
        assert!(statement(Dialect::Postgres, &table, "for_update_begin_nowait").is_some());
    }
}
