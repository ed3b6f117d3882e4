//! Turns the statement templates in `sql/` into text a driver can prepare, typed by
//! the values they take.
//!
//! The templates name their parameters (`:key`, `:owner`, `:ttl_us`, `:token`) and the
//! lock table (`{table}`), so they read the same in every dialect. Rendering happens
//! once per [`Locker`](crate::Locker): the validated table name is written in (and
//! `{channel}`, the table's release channel for notifications, derived from it) and
//! each parameter becomes the dialect's placeholder (`$1` on PostgreSQL, `?`
//! elsewhere), with the order in which values must be bound recorded beside the text.
//!
//! A [`Statement<V>`] is bound with a value of `V` only: each statement's values come
//! as a typed request (see `values.rs`), never as a bag of every value any statement
//! could take.

use std::marker::PhantomData;
use std::sync::Arc;

use sqlx::database::HasStatementCache;
use sqlx::{AssertSqlSafe, Database, Encode, Type};

use crate::support::validate::TableName;

use super::durability::{self, Sent};

/// Declares [`Param`] from one list of variants and the names the templates give
/// them: the enum, and `Param::ALL` with each variant's name, in one place.
macro_rules! params {
    ($( $(#[$meta:meta])* $variant:ident = $name:literal, )+) => {
        /// One value a statement may take, by the name the templates give it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Param {
            $( $(#[$meta])* $variant, )+
        }

        impl Param {
            /// Every parameter, with the name the templates give it (after the `:`).
            const NAMES: &'static [(Self, &'static str)] = &[$( (Self::$variant, $name), )+];

            /// Every parameter.
            pub(crate) const ALL: &'static [Self] = &[$( Self::$variant, )+];
        }
    };
}

params! {
    Key = "key",
    Owner = "owner",
    TtlUs = "ttl_us",
    Token = "token",
    Batch = "batch",
    GraceUs = "grace_us",
    Limit = "limit",
    Strategy = "strategy",
    WaitUs = "wait_us",
    Setting = "setting",
    Schedule = "schedule",
    EverySecs = "every_s",
    Batches = "batches",
    Presence = "presence",
    Gone = "gone",
    Identity = "identity",
    AtLeastUs = "at_least_us",
    Ticket = "ticket",
    /// A semaphore's N.
    Permits = "permits",
    /// How many permits an acquisition takes.
    Count = "count",
    /// A semaphore's slots' key prefix.
    Prefix = "prefix",
    /// A multi-lock's keys, as a JSON array.
    Keys = "keys",
    /// The key of a hold of a name in shared mode (a read, a permit), beside its name.
    Hold = "hold",
    /// A quorum lock's token, as a holder raises it (`quorum_raise.sql`).
    Quorum = "quorum",
    /// A key's wake lock, as a name of the table's key (`wake_*.sql`).
    Wake = "wake",
}

impl Param {
    fn from_name(name: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(p, _)| *p)
    }

    /// The name the templates give it.
    pub(crate) fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("", |(_, n)| n)
    }
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Text(&'a str),
    Int(i64),
}

/// The values of one kind of request, by the parameters its statements name.
pub(crate) trait Values: Sync {
    /// The same kind of request with other borrows: a statement is typed by the kind
    /// (`Statement<Held<'static>>`) and bound with a request of any lifetime.
    type With<'a>: Values;

    /// Every parameter [`value`](Self::value) answers for. A statement bound with
    /// these values names no other (checked when it is rendered).
    const PARAMS: &'static [Param];

    /// The value of `param`, one of [`PARAMS`](Self::PARAMS).
    fn value(&self, param: Param) -> Value<'_>;
}

/// How a dialect writes placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placeholders {
    /// `$1`, `$2`, …: a name used twice is bound once.
    Numbered,
    /// `?` for every use: a name used twice is bound twice.
    Positional,
}

/// How a handle sends its statements, beyond their dialect and table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Mode {
    /// Releases also announce the freed key on the table's channel (PostgreSQL).
    pub(crate) notify: bool,
    /// Statements are unnamed and pinned by a transaction each (transaction pooling).
    pub(crate) pinned: bool,
}

/// What statements are rendered for: the table, its dialect's placeholders, the mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) table: &'a TableName,
    pub(crate) placeholders: Placeholders,
    pub(crate) mode: Mode,
}

impl Target<'_> {
    /// Renders `template`, to be bound with values of `V`.
    pub(crate) fn render<V: Values>(&self, template: &str) -> Statement<V> {
        Statement::render(template, self.table, self.placeholders).pinned(self.mode.pinned)
    }
}

/// A rendered statement: its text and the values it takes, in binding order, from a
/// request of type `V`.
#[derive(Debug)]
pub(crate) struct Statement<V> {
    text: Arc<str>,
    params: Arc<[Param]>,
    /// The table it was rendered for, the label of its metrics.
    table: Arc<str>,
    /// Sent as an unnamed statement, inside a transaction of its own when run on a
    /// pool: the transaction-pooling mode (see `LockerBuilder::transaction_pooling`).
    pinned: bool,
    /// Counted as a wake lock's statement (`sqlock_wake_lock_statements_total`) rather
    /// than the lock table's (`sqlock_statements_total`).
    wake_lock: bool,
    /// The text sent within a transaction, where it differs: a statement that skips
    /// its commit's flush does so only alone (see `durability.rs`).
    durable: Option<Arc<str>>,
    values: PhantomData<fn(&V)>,
}

impl<V> Clone for Statement<V> {
    fn clone(&self) -> Self {
        Self {
            text: self.text.clone(),
            params: self.params.clone(),
            table: self.table.clone(),
            pinned: self.pinned,
            wake_lock: self.wake_lock,
            durable: self.durable.clone(),
            values: PhantomData,
        }
    }
}

impl<V: Values> Statement<V> {
    /// Renders `template` for `table`.
    ///
    /// Templates are the crate's own constants, and a unit test renders every one of
    /// them with the values it is bound with, so a parameter that `V` cannot supply is
    /// a bug in the crate, not bad input.
    pub(crate) fn render(template: &str, table: &TableName, style: Placeholders) -> Self {
        let template = template
            .replace("{channel}", &table.release_channel())
            .replace("{grant_channel}", &table.grant_channel())
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
                .filter(|p| V::PARAMS.contains(p))
                .unwrap_or_else(|| {
                    panic!(
                        "BUG: a sql/ template names :{name}, which its request ({}) does \
                         not supply",
                        std::any::type_name::<V>()
                    )
                });
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
            durable: durability::durable_text(&text).map(Into::into),
            text: text.into(),
            params: params.into(),
            table: table.as_str().into(),
            pinned: false,
            wake_lock: false,
            values: PhantomData,
        }
    }

    /// The same statement, marked for the transaction-pooling mode when `on`.
    pub(crate) fn pinned(mut self, on: bool) -> Self {
        self.pinned = on;
        self
    }

    /// The same statement, counted as a wake lock's (`keepers/wake_lock.rs`).
    pub(crate) fn counted_as_wake_lock(mut self) -> Self {
        self.wake_lock = true;
        self
    }

    /// Whether the statement is counted as a wake lock's.
    pub(crate) fn is_wake_lock(&self) -> bool {
        self.wake_lock
    }

    /// Whether the statement is sent unnamed, pinned to one server connection by a
    /// transaction of its own.
    pub(crate) fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// The table it was rendered for.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// The rendered SQL.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The values it takes, in binding order.
    pub(crate) fn params(&self) -> &[Param] {
        &self.params
    }

    /// A query with `values` bound in this statement's order, sent as a transaction of
    /// its own.
    pub(crate) fn bind<'a, DB>(
        &self,
        values: &'a V::With<'a>,
    ) -> sqlx::query::Query<'a, DB, DB::Arguments>
    where
        DB: Database + HasStatementCache,
        &'a str: Encode<'a, DB> + Type<DB>,
        i64: Encode<'a, DB> + Type<DB>,
    {
        self.bind_sent(values, Sent::Alone)
    }

    /// A query with `values` bound in this statement's order, its text as `sent`
    /// asks (see `durability.rs`).
    pub(crate) fn bind_sent<'a, DB>(
        &self,
        values: &'a V::With<'a>,
        sent: Sent,
    ) -> sqlx::query::Query<'a, DB, DB::Arguments>
    where
        DB: Database + HasStatementCache,
        &'a str: Encode<'a, DB> + Type<DB>,
        i64: Encode<'a, DB> + Type<DB>,
    {
        let text = match &self.durable {
            Some(durable) if !sent.may_relax() => durable,
            _ => &self.text,
        };
        // A pinned statement is unnamed: a transaction-pooling proxy hands the next
        // transaction to another server connection, where a named one does not exist.
        let mut query = sqlx::query(AssertSqlSafe(text.clone())).persistent(!self.pinned);
        for param in self.params.iter() {
            query = match values.value(*param) {
                Value::Text(text) => query.bind(text),
                Value::Int(n) => query.bind(n),
            };
        }
        query
    }
}

/// Writes `pairs` as the JSON array of `[key, token]` pairs the batch statements read;
/// a hold of a name in shared mode (a read, a permit) gets its name as a third element,
/// `[key, token, name]`, told by the one function that tells it
/// ([`parent_of`](crate::support::validate::parent_of)): a renewal pushes that name
/// with the hold. Statements that read the keys alone ignore it.
pub(crate) fn batch_json<'a>(pairs: impl Iterator<Item = (&'a str, i64)>) -> String {
    let mut out = String::from("[");
    for (i, (key, token)) in pairs.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        json_text(&mut out, key);
        out.push(',');
        out.push_str(&token.to_string());
        if let Some((name, _)) = crate::support::validate::parent_of(key) {
            out.push(',');
            json_text(&mut out, name);
        }
        out.push(']');
    }
    out.push(']');
    out
}

/// `texts` as a JSON array of strings.
pub(crate) fn json_array(texts: &[String]) -> String {
    let mut out = String::from("[");
    for (i, text) in texts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_text(&mut out, text);
    }
    out.push(']');
    out
}

/// `s` as a JSON string, onto `out`: quotes, backslashes and control characters
/// escaped, everything else as it is (keys and owners are valid UTF-8 without NUL).
/// The one escaper of the values sent as JSON.
fn json_text(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// How many distinct names the holds in shared mode of `keys` hold: a batched
/// renewal pushes each of them too (and MariaDB counts each among the rows it matched).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn batch_names<'a>(keys: impl Iterator<Item = &'a str>) -> usize {
    let mut names: Vec<&str> = keys
        .filter_map(|k| crate::support::validate::parent_of(k).map(|(name, _)| name))
        .collect();
    names.sort_unstable();
    names.dedup();
    names.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::values::{Acquire, Key};

    #[test]
    fn numbered_binds_each_name_once() {
        let s = Statement::<Acquire<'_>>::render(
            "-- the owner's key\nSELECT :key, :owner::text, ':not_a_param', :key FROM \"{table}\"",
            &TableName::default(),
            Placeholders::Numbered,
        );
        assert_eq!(
            s.text(),
            "SELECT $1, $2::text, ':not_a_param', $1 FROM \"sqlock_locks\""
        );
        assert_eq!(s.params(), [Param::Key, Param::Owner]);
    }

    #[test]
    fn positional_binds_every_use() {
        let s = Statement::<Acquire<'_>>::render(
            "SELECT :key, :ttl_us, :key, '1970-01-01 00:00:00'",
            &TableName::new("t").unwrap(),
            Placeholders::Positional,
        );
        assert_eq!(s.text(), "SELECT ?, ?, ?, '1970-01-01 00:00:00'");
        assert_eq!(s.params(), [Param::Key, Param::TtlUs, Param::Key]);
    }

    #[test]
    #[should_panic(expected = "does not supply")]
    fn a_value_the_request_lacks_is_a_bug() {
        let _ = Statement::<Key<'_>>::render(
            "SELECT :owner",
            &TableName::default(),
            Placeholders::Numbered,
        );
    }

    #[test]
    fn batch_json_escapes_keys() {
        let json = batch_json([("a", 1), ("q\"\\\n🔒", -2)].into_iter());
        assert_eq!(json, r#"[["a",1],["q\"\\\u000a🔒",-2]]"#);
        assert_eq!(batch_json(std::iter::empty()), "[]");
    }

    #[test]
    fn batch_json_names_the_name_of_a_shared_hold() {
        let read = "d\"oc@read:0f5c3a1e-8d2b-4c6f-9a7e-1b2c3d4e5f60";
        let json = batch_json([("d\"oc", 1), (read, 2), ("semaphore:s#3", 4)].into_iter());
        assert_eq!(
            json,
            r#"[["d\"oc",1],["d\"oc@read:0f5c3a1e-8d2b-4c6f-9a7e-1b2c3d4e5f60",2,"d\"oc"],["semaphore:s#3",4,"s"]]"#
        );
        let keys = ["a", read, "semaphore:s#3", "semaphore:s#4"];
        assert_eq!(batch_names(keys.into_iter()), 2);
    }
}
