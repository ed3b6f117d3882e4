//! The statements of `sql/` as a handle renders them, for the project's own benchmark.
//!
//! Not part of the public API: reached only through the hidden `sqlock::__private`,
//! with no stability promise. The benchmark (`bench/` in the repository) sends these
//! statements raw, beside the library, to measure what the library adds around them;
//! it must send the very text the library sends, so it takes it from here rather than
//! rendering a copy of its own. The templates are the ones compiled into the crate, so
//! nothing is read from disk at run time.

use crate::dialect::{Dialect, Mode, Statements};
use crate::sql::{Param, Statement};
use crate::validate::TableName;

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
/// pooling renders it; `None` when the dialect has no such statement.
///
/// Not part of the public API: see the module's documentation.
pub fn statement(dialect: Dialect, table: &TableName, name: &str) -> Option<RenderedStatement> {
    let all = Statements::new(dialect, table, Mode::default());
    let for_update = all.for_update.as_ref();
    let chosen: &Statement = match name {
        "lease_acquire" => &all.lease_acquire,
        "lease_release" => &all.lease_release,
        "lease_extend" => &all.lease_extend,
        "lease_renew" => &all.lease_renew,
        "lease_survivors" => all.lease_survivors.as_ref()?,
        "lease_force_release" => &all.lease_force_release,
        "lease_held" => all.lease_held.as_ref()?,
        "lease_renew_again" => all.lease_renew_again.as_ref()?,
        "insert_release" => &all.insert_release,
        "sweep" => &all.sweep,
        "sweep_claim" => all.sweep_claim.as_ref()?,
        "list" => &all.list,
        "lookup" => &all.lookup,
        "fence" => &all.fence,
        "galera_check" => all.galera_check.as_ref()?,
        "for_update_begin" => &for_update?.begin.as_ref()?.0,
        "for_update_begin_nowait" => &for_update?.begin.as_ref()?.1,
        "for_update_lock" => &for_update?.lock,
        "for_update_lock_nowait" => &for_update?.lock_nowait,
        "for_update_ensure" => &for_update?.ensure,
        "for_update_grant" => &for_update?.grant,
        "for_update_check" => &for_update?.check,
        _ => return None,
    };
    Some(RenderedStatement {
        text: chosen.text().to_owned(),
        params: chosen.params().iter().map(|p| param_name(*p)).collect(),
    })
}

/// A parameter's name as the templates write it (after the `:`).
fn param_name(param: Param) -> &'static str {
    match param {
        Param::Key => "key",
        Param::Owner => "owner",
        Param::TtlUs => "ttl_us",
        Param::Token => "token",
        Param::Batch => "batch",
        Param::GraceUs => "grace_us",
        Param::Limit => "limit",
        Param::Strategy => "strategy",
        Param::WaitUs => "wait_us",
        Param::Setting => "setting",
        Param::Schedule => "schedule",
        Param::EverySecs => "every_s",
        Param::Batches => "batches",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_what_a_handle_sends() {
        let table = TableName::new("bench_t").unwrap();
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let handle = Statements::new(dialect, &table, Mode::default());
            let acquire = statement(dialect, &table, "lease_acquire").unwrap();
            assert_eq!(acquire.text, handle.lease_acquire.text(), "{dialect}");
            assert_eq!(
                acquire.params.len(),
                handle.lease_acquire.params().len(),
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
