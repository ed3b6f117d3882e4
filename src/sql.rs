//! Turns the statement templates in `sql/` into text a driver can prepare.
//!
//! The templates name their parameters (`:key`, `:owner`, `:ttl_us`, `:token`) and the
//! lock table (`{table}`), so they read the same in every dialect. Rendering happens
//! once per [`Locker`](crate::Locker): the validated table name is written in (and
//! `{channel}`, the table's release channel for notifications, derived from it) and
//! each parameter becomes the dialect's placeholder (`$1` on PostgreSQL, `?`
//! elsewhere), with the order in which values must be bound recorded beside the text.

use std::sync::Arc;

use sqlx::database::HasStatementCache;
use sqlx::{AssertSqlSafe, Database, Encode, Type};

use crate::validate::TableName;

/// One value a statement takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    Key,
    Owner,
    TtlUs,
    Token,
    Batch,
    GraceUs,
    Limit,
    Strategy,
    WaitUs,
    Setting,
    Schedule,
    EverySecs,
    Batches,
}

impl Param {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "key" => Self::Key,
            "owner" => Self::Owner,
            "ttl_us" => Self::TtlUs,
            "token" => Self::Token,
            "batch" => Self::Batch,
            "grace_us" => Self::GraceUs,
            "limit" => Self::Limit,
            "strategy" => Self::Strategy,
            "wait_us" => Self::WaitUs,
            "setting" => Self::Setting,
            "schedule" => Self::Schedule,
            "every_s" => Self::EverySecs,
            "batches" => Self::Batches,
            _ => return None,
        })
    }
}

/// How a dialect writes placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placeholders {
    /// `$1`, `$2`, …: a name used twice is bound once.
    Numbered,
    /// `?` for every use: a name used twice is bound twice.
    Positional,
}

/// A rendered statement: its text and the values it takes, in binding order.
#[derive(Debug, Clone)]
pub(crate) struct Statement {
    text: Arc<str>,
    params: Vec<Param>,
    /// Sent as an unnamed statement, inside a transaction of its own when run on a
    /// pool: the transaction-pooling mode (see `LockerBuilder::transaction_pooling`).
    pinned: bool,
}

/// The values a statement may take; each statement picks what it names.
#[derive(Debug, Clone, Default)]
pub(crate) struct Args {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) ttl_us: i64,
    pub(crate) token: i64,
    /// A JSON array of `[key, token]` pairs, for batched renewal.
    pub(crate) batch: String,
    pub(crate) grace_us: i64,
    pub(crate) limit: i64,
    /// The strategy's name, as recorded in the `lock_strategy` column.
    pub(crate) strategy: &'static str,
    pub(crate) wait_us: i64,
    /// A server setting's value to put back (the for-update grant's `lock_timeout`).
    pub(crate) setting: String,
    /// A scheduler's schedule for the sweep (a pg_cron schedule).
    pub(crate) schedule: String,
    /// A scheduled sweep's interval in seconds (a MariaDB event's).
    pub(crate) every_s: i64,
    /// How many batches a scheduled sweep runs at most.
    pub(crate) batches: i64,
}

impl Statement {
    /// Renders `template` for `table`.
    ///
    /// Templates are the crate's own constants, and a unit test renders every one of
    /// them, so an unknown parameter name is a bug in the crate, not bad input.
    pub(crate) fn render(template: &str, table: &TableName, style: Placeholders) -> Self {
        let template = template
            .replace("{channel}", &table.release_channel())
            .replace("{table}", table.as_str());
        let mut text = String::with_capacity(template.len());
        let mut params: Vec<Param> = Vec::new();
        let mut chars = template.char_indices().peekable();
        let mut in_string = false;
        let mut prev = '\0';
        while let Some((i, c)) = chars.next() {
            // Comments are for the reader of sql/; they are not sent.
            if !in_string && c == '-' && chars.peek().is_some_and(|&(_, n)| n == '-') {
                for (_, n) in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
                continue;
            }
            if c == '\'' {
                in_string = !in_string;
            }
            let starts_param = !in_string
                && c == ':'
                && prev != ':'
                && chars.peek().is_some_and(|&(_, n)| n.is_ascii_lowercase());
            if !starts_param {
                text.push(c);
                prev = c;
                continue;
            }
            let mut end = i + 1;
            while let Some(&(j, n)) = chars.peek() {
                if n.is_ascii_lowercase() || n == '_' {
                    end = j + n.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let name = &template[i + 1..end];
            let param = Param::from_name(name)
                .unwrap_or_else(|| panic!("BUG: unknown parameter :{name} in a sql/ template"));
            match style {
                Placeholders::Numbered => {
                    let n = match params.iter().position(|p| *p == param) {
                        Some(n) => n + 1,
                        None => {
                            params.push(param);
                            params.len()
                        }
                    };
                    text.push('$');
                    text.push_str(&n.to_string());
                }
                Placeholders::Positional => {
                    params.push(param);
                    text.push('?');
                }
            }
            prev = 'x';
        }
        Self {
            text: text.into(),
            params,
            pinned: false,
        }
    }

    /// The same statement, marked for the transaction-pooling mode when `on`.
    pub(crate) fn pinned(mut self, on: bool) -> Self {
        self.pinned = on;
        self
    }

    /// Whether the statement is sent unnamed, pinned to one server connection by a
    /// transaction of its own.
    pub(crate) fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// The rendered SQL.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The values it takes, in binding order.
    pub(crate) fn params(&self) -> &[Param] {
        &self.params
    }

    /// A query with `args` bound in this statement's order.
    pub(crate) fn bind<'a, DB>(&self, args: &'a Args) -> sqlx::query::Query<'a, DB, DB::Arguments>
    where
        DB: Database + HasStatementCache,
        &'a str: Encode<'a, DB> + Type<DB>,
        i64: Encode<'a, DB> + Type<DB>,
    {
        // A pinned statement is unnamed: a transaction-pooling proxy hands the next
        // transaction to another server connection, where a named one does not exist.
        let mut query = sqlx::query(AssertSqlSafe(self.text.clone())).persistent(!self.pinned);
        for param in &self.params {
            query = match param {
                Param::Key => query.bind(args.key.as_str()),
                Param::Owner => query.bind(args.owner.as_str()),
                Param::TtlUs => query.bind(args.ttl_us),
                Param::Token => query.bind(args.token),
                Param::Batch => query.bind(args.batch.as_str()),
                Param::GraceUs => query.bind(args.grace_us),
                Param::Limit => query.bind(args.limit),
                Param::Strategy => query.bind(args.strategy),
                Param::WaitUs => query.bind(args.wait_us),
                Param::Setting => query.bind(args.setting.as_str()),
                Param::Schedule => query.bind(args.schedule.as_str()),
                Param::EverySecs => query.bind(args.every_s),
                Param::Batches => query.bind(args.batches),
            };
        }
        query
    }
}

/// Writes `pairs` as the JSON array of `[key, token]` pairs the batch statements read.
pub(crate) fn batch_json<'a>(pairs: impl Iterator<Item = (&'a str, i64)>) -> String {
    let mut out = String::from("[");
    for (i, (key, token)) in pairs.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("[\"");
        for c in key.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push_str("\",");
        out.push_str(&token.to_string());
        out.push(']');
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_binds_each_name_once() {
        let s = Statement::render(
            "-- the owner's key\nSELECT :key, :owner::text, ':not_a_param', :key FROM \"{table}\"",
            &TableName::default(),
            Placeholders::Numbered,
        );
        assert_eq!(
            s.text(),
            "SELECT $1, $2::text, ':not_a_param', $1 FROM \"sqlock_locks\""
        );
        assert_eq!(s.params, vec![Param::Key, Param::Owner]);
    }

    #[test]
    fn positional_binds_every_use() {
        let s = Statement::render(
            "SELECT :key, :ttl_us, :key, '1970-01-01 00:00:00'",
            &TableName::new("t").unwrap(),
            Placeholders::Positional,
        );
        assert_eq!(s.text(), "SELECT ?, ?, ?, '1970-01-01 00:00:00'");
        assert_eq!(s.params, vec![Param::Key, Param::TtlUs, Param::Key]);
    }

    #[test]
    fn batch_json_escapes_keys() {
        let json = batch_json([("a", 1), ("q\"\\\n🔒", -2)].into_iter());
        assert_eq!(json, r#"[["a",1],["q\"\\\u000a🔒",-2]]"#);
        assert_eq!(batch_json(std::iter::empty()), "[]");
    }
}
