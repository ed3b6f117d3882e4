//! The library's own statements, as the raw baseline sends them.
//!
//! The text and the order of its values come from the library itself
//! (`sqlock::__private::statement`): the statements a handle renders from the `sql/`
//! files compiled into it. The baseline only binds the values, by name, so it sends
//! the same text with the same values and differs from the library only by what the
//! library does around it.

use std::sync::Arc;

use sqlock::__private::{statement, RenderedStatement};
use sqlock::{Dialect, Strategy, TableName};
use sqlx::{AssertSqlSafe, Database, Encode, Type};

use crate::failure::Failure;

/// One value a statement takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Param {
    Key,
    Owner,
    TtlUs,
    Token,
    Strategy,
    WaitUs,
    Setting,
}

impl Param {
    /// The value the library names `name`; `None` for one the baseline never binds.
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "key" => Self::Key,
            "owner" => Self::Owner,
            "ttl_us" => Self::TtlUs,
            "token" => Self::Token,
            "strategy" => Self::Strategy,
            "wait_us" => Self::WaitUs,
            "setting" => Self::Setting,
            _ => return None,
        })
    }
}

/// A statement ready to bind: the library's text and the values it takes, in order.
#[derive(Debug, Clone)]
pub(crate) struct Stmt {
    text: Arc<str>,
    params: Vec<Param>,
}

/// The values one statement may take.
#[derive(Debug, Clone)]
pub(crate) struct Values {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) strategy: Strategy,
    pub(crate) ttl_us: i64,
    pub(crate) token: i64,
}

impl Stmt {
    /// The library's statement `name` of `dialect` for `table`; `None` when the
    /// dialect has none.
    fn of(dialect: Dialect, table: &TableName, name: &str) -> Result<Option<Self>, Failure> {
        let Some(RenderedStatement { text, params }) = statement(dialect, table, name) else {
            return Ok(None);
        };
        let params = params
            .iter()
            .map(|p| {
                Param::from_name(p).ok_or_else(|| {
                    Failure::Other(format!(
                        "the raw baseline cannot bind :{p} of the library's {dialect} \
                         statement {name}"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(Self {
            text: text.into(),
            params,
        }))
    }

    /// The statement asking for its plan: `explain` (`EXPLAIN `, say) before its text.
    /// A leading `SET STATEMENT ... FOR` (MariaDB's settings for one statement, here
    /// its lock wait timeout) is left out: EXPLAIN does not take it, and it changes no
    /// plan.
    pub(crate) fn explained(&self, explain: &str) -> Self {
        let body = self
            .text
            .strip_prefix("SET STATEMENT ")
            .and_then(|settings| settings.split_once(" FOR"))
            .map_or(&*self.text, |(_, body)| body.trim_start());
        Self {
            text: format!("{explain}{body}").into(),
            params: self.params.clone(),
        }
    }

    /// The statement's text.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// A query with the values of `v` bound in this statement's order.
    pub(crate) fn bind<'a, DB>(&self, v: &'a Values) -> sqlx::query::Query<'a, DB, DB::Arguments>
    where
        DB: Database,
        &'a str: Encode<'a, DB> + Type<DB>,
        i64: Encode<'a, DB> + Type<DB>,
    {
        let mut query = sqlx::query(AssertSqlSafe(self.text.clone()));
        for p in &self.params {
            query = match p {
                Param::Key => query.bind(v.key.as_str()),
                Param::Owner => query.bind(v.owner.as_str()),
                Param::TtlUs => query.bind(v.ttl_us),
                Param::Token => query.bind(v.token),
                Param::Strategy => query.bind(v.strategy.name()),
                // Not waiting: the statements run here never wait in the database.
                Param::WaitUs => query.bind(1_000_i64),
                // The lock_timeout the for-update grant puts back: the benchmark's pools
                // have none of their own.
                Param::Setting => query.bind("0"),
            };
        }
        query
    }
}

/// The statements of one dialect that an acquisition and a release send.
#[derive(Debug, Clone)]
pub(crate) struct RawStatements {
    pub(crate) acquire: Stmt,
    pub(crate) lease_release: Stmt,
    pub(crate) insert_release: Stmt,
    /// The for-update strategy's, where the dialect has it.
    pub(crate) for_update: Option<ForUpdateStmts>,
}

/// The statements of one for-update attempt that does not wait.
#[derive(Debug, Clone)]
pub(crate) struct ForUpdateStmts {
    /// PostgreSQL only: the transaction's lock_timeout and the key's gate.
    pub(crate) begin: Option<Stmt>,
    pub(crate) lock_nowait: Stmt,
    pub(crate) ensure: Stmt,
    pub(crate) grant: Stmt,
}

impl RawStatements {
    /// The statements for `table` in `dialect`.
    pub(crate) fn new(dialect: Dialect, table: &TableName) -> Result<Self, Failure> {
        let of = |name| Stmt::of(dialect, table, name);
        let some = |name| {
            of(name)?.ok_or_else(|| {
                Failure::Other(format!("the library has no {dialect} statement {name}"))
            })
        };
        let for_update = match of("for_update_lock_nowait")? {
            Some(lock_nowait) => Some(ForUpdateStmts {
                begin: of("for_update_begin_nowait")?,
                lock_nowait,
                ensure: some("for_update_ensure")?,
                grant: some("for_update_grant")?,
            }),
            None => None,
        };
        Ok(Self {
            acquire: some("lease_acquire")?,
            lease_release: some("lease_release")?,
            insert_release: some("insert_release")?,
            for_update,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_the_library_s_text() {
        let t = TableName::new("bench_t").unwrap();
        let pg = RawStatements::new(Dialect::Postgres, &t).unwrap();
        assert!(pg.acquire.text().contains("\"bench_t\""));
        assert!(!pg.acquire.text().contains("--"));
        assert!(pg.lease_release.text().contains("lock_key = $1"));
        assert!(pg.for_update.as_ref().unwrap().begin.is_some());
        let my = RawStatements::new(Dialect::MySql, &t).unwrap();
        assert!(my.acquire.text().contains("`bench_t`"));
        assert!(!my.acquire.text().contains(":key"));
        assert!(my.for_update.as_ref().unwrap().begin.is_none());
        let plan = my.acquire.explained("EXPLAIN ");
        assert!(plan.text().starts_with("EXPLAIN INSERT INTO `bench_t`"));
        assert_eq!(plan.params, my.acquire.params);
        let plan = pg.acquire.explained("EXPLAIN ");
        assert_eq!(plan.text(), format!("EXPLAIN {}", pg.acquire.text()));
        assert!(RawStatements::new(Dialect::Sqlite, &t)
            .unwrap()
            .for_update
            .is_none());
    }
}
