//! SQLite: statements from `sql/sqlite/`, results through `RETURNING`.
//!
//! Every lock statement is one autocommit statement, so two processes sharing a file
//! never deadlock on a read-then-write transaction; `SQLITE_BUSY` and `SQLITE_LOCKED`
//! (after sqlx's busy timeout) count as contention and are retried.

use sqlx::SqlitePool;

use super::{Dialect, Renewal, Runner, Statements};
use crate::error::Class;
use crate::sql::Args;

pub(super) const DIALECT: Dialect = Dialect::Sqlite;

pub(super) use super::sweep_in_one as sweep;

pub(super) async fn lease_renew(
    pool: &SqlitePool,
    s: &Statements,
    a: &Args,
    _batch: &[(String, i64)],
) -> Result<Renewal, sqlx::Error> {
    super::renew_returning(pool, s, a).await
}

/// `Some(released)`: SQLite has no row locks to be held up by.
pub(super) async fn lease_force_release(
    pool: &SqlitePool,
    s: &Statements,
    a: &Args,
) -> Result<Option<bool>, sqlx::Error> {
    Ok(Some(
        Runner::execute(pool, &s.lease_force_release, a).await? > 0,
    ))
}

/// Sorts SQLite errors by primary result code.
pub(super) fn classify(e: &sqlx::Error) -> Class {
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
