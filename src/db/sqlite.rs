//! SQLite: statements from `sql/sqlite/`, results through `RETURNING`.
//!
//! Every lock statement is one autocommit statement, so two processes sharing a file
//! never deadlock on a read-then-write transaction; `SQLITE_BUSY` and `SQLITE_LOCKED`
//! (after sqlx's busy timeout) count as contention and are retried. SQLite has no row
//! locks (no for-update strategy) and no scheduler inside.

use sqlx::SqlitePool;

use crate::support::error::Class;
use crate::support::validate::TableName;

use super::backend::{common_templates, Backend, Base};
use super::dialect::Dialect;
use super::fence::fence_connection;
use super::statement::{Mode, Target};

/// A SQLite database file and one lock table in it.
#[derive(Debug)]
pub(crate) struct Sqlite {
    base: Base<sqlx::Sqlite>,
}

impl Sqlite {
    pub(crate) fn new(pool: SqlitePool, table: &TableName, mode: Mode) -> Self {
        let target = Target {
            table,
            placeholders: Dialect::Sqlite.placeholders(),
            mode,
        };
        Self {
            base: Base::new(pool, &target, &common_templates!("sqlite")),
        }
    }
}

impl Backend for Sqlite {
    type Db = sqlx::Sqlite;

    const DIALECT: Dialect = Dialect::Sqlite;

    fn base(&self) -> &Base<sqlx::Sqlite> {
        &self.base
    }

    /// By primary result code.
    fn classify(e: &sqlx::Error) -> Class {
        let Some(db) = e.as_database_error() else {
            return Class::Other;
        };
        let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
        match code & 0xff {
            // SQLITE_BUSY, SQLITE_LOCKED
            5 | 6 => Class::Contention,
            // SQLITE_ERROR carries "no such table" for a missing table.
            1 if db.message().contains("no such table") => Class::MissingTable,
            _ => Class::Other,
        }
    }
}

fence_connection!(sqlx::SqliteConnection, Sqlite);
