//! PostgreSQL: statements from `sql/postgres/`, results through `RETURNING`, errors
//! sorted by SQLSTATE.

use sqlx::postgres::PgDatabaseError;
use sqlx::PgPool;

use super::{Dialect, Renewal, Runner, Statements};
use crate::error::Class;
use crate::sql::Args;

pub(super) const DIALECT: Dialect = Dialect::Postgres;

pub(super) use super::sweep_in_one as sweep;

pub(super) async fn lease_renew(
    pool: &PgPool,
    s: &Statements,
    a: &Args,
    _batch: &[(String, i64)],
) -> Result<Renewal, sqlx::Error> {
    super::renew_returning(pool, s, a).await
}

/// `Some(released)`, or `None` when the key's gate or row was taken (a for-update
/// holder, an acquisition under way, a fenced transaction).
pub(super) async fn lease_force_release(
    pool: &PgPool,
    s: &Statements,
    a: &Args,
) -> Result<Option<bool>, sqlx::Error> {
    let rows = Runner::fetch_i64s(pool, &s.lease_force_release, a).await?;
    Ok(match rows.first() {
        None => Some(false),
        Some(1) => Some(true),
        Some(_) => None,
    })
}

/// Sorts PostgreSQL errors by SQLSTATE.
pub(super) fn classify(e: &sqlx::Error) -> Class {
    let Some(code) = e
        .as_database_error()
        .and_then(|d| d.try_downcast_ref::<PgDatabaseError>())
        .map(|d| d.code())
    else {
        return Class::Other;
    };
    match code {
        // serialization_failure, deadlock_detected, lock_not_available
        "40001" | "40P01" | "55P03" => Class::Contention,
        // undefined_table: the table or its sequence is missing
        "42P01" => Class::MissingTable,
        _ => Class::Other,
    }
}
