//! SQLite: statements from `sql/sqlite/`, results through `RETURNING`.
//!
//! Every lock statement is one autocommit statement, so two processes sharing a file
//! never deadlock on a read-then-write transaction; `SQLITE_BUSY` and `SQLITE_LOCKED`
//! (after sqlx's busy timeout) count as contention and are retried.

use sqlx::SqlitePool;

use super::{fetch_column, Dialect, Renewal, Statements};
use crate::error::Class;
use crate::sql::{Args, Statement};

pub(super) const DIALECT: Dialect = Dialect::Sqlite;

pub(super) async fn lease_extend(
    pool: &SqlitePool,
    s: &Statement,
    a: &Args,
) -> Result<Option<i64>, sqlx::Error> {
    // At most one row: the new expiry, when the lease is still ours.
    Ok(fetch_column(pool, s, a).await?.into_iter().next())
}

pub(super) async fn lease_renew(
    pool: &SqlitePool,
    s: &Statements,
    a: &Args,
    _n: usize,
) -> Result<Renewal, sqlx::Error> {
    Ok(Renewal {
        survivors: Some(fetch_column(pool, &s.lease_renew, a).await?),
        statements: 1,
    })
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
