//! PostgreSQL: statements from `sql/postgres/`, results through `RETURNING`.

use sqlx::postgres::PgDatabaseError;
use sqlx::PgPool;

use sqlx::{Postgres, Row, Transaction};

use super::{fetch_column, lock_in_transaction, Dialect, Failure, Renewal, Statements};
use crate::error::Class;
use crate::sql::{Args, Statement};

pub(super) const DIALECT: Dialect = Dialect::Postgres;

pub(super) async fn lease_extend(
    pool: &PgPool,
    s: &Statement,
    a: &Args,
) -> Result<Option<i64>, sqlx::Error> {
    // At most one row: the new expiry, when the lease is still ours.
    Ok(fetch_column(pool, s, a).await?.into_iter().next())
}

pub(super) async fn lease_renew(
    pool: &PgPool,
    s: &Statements,
    a: &Args,
    _n: usize,
) -> Result<Renewal, sqlx::Error> {
    Ok(Renewal {
        survivors: Some(fetch_column(pool, &s.lease_renew, a).await?),
        statements: 1,
    })
}

/// One attempt at the for-update strategy's row lock, in a new transaction; the
/// grant's token is drawn inside it.
pub(crate) async fn for_update(
    pool: &PgPool,
    s: &Statements,
    a: &Args,
    nowait: bool,
) -> Result<Option<(Transaction<'static, Postgres>, i64)>, Failure> {
    let Some(f) = &s.for_update else {
        return Ok(None);
    };
    let run = async {
        let Some(mut tx) = lock_in_transaction(pool, f, a, nowait).await? else {
            return Ok(None);
        };
        let token: i64 = f
            .grant
            .bind::<Postgres>(a)
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        Ok(Some((tx, token)))
    };
    run.await.map_err(|e| s.error(classify(&e), e))
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
