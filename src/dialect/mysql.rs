//! MariaDB: statements from `sql/mysql/`, results through `INSERT ... RETURNING` and,
//! where MariaDB has no `RETURNING` (UPDATE), through `LAST_INSERT_ID(expr)` and
//! matched-row counts.

use sqlx::mysql::MySqlDatabaseError;
use sqlx::MySqlPool;

use sqlx::{MySql, Transaction};

use super::{execute, fetch_column, lock_in_transaction, Dialect, Failure, Renewal, Statements};
use crate::error::Class;
use crate::sql::{Args, Statement};

pub(super) const DIALECT: Dialect = Dialect::MySql;

pub(super) async fn lease_extend(
    pool: &MySqlPool,
    s: &Statement,
    a: &Args,
) -> Result<Option<i64>, sqlx::Error> {
    let done = execute(pool, s, a).await?;
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    // The statement hands the new expiry back through LAST_INSERT_ID(expr).
    Ok(Some(
        i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX),
    ))
}

pub(super) async fn lease_renew(
    pool: &MySqlPool,
    s: &Statements,
    a: &Args,
    n: usize,
) -> Result<Renewal, sqlx::Error> {
    // sqlx connects with CLIENT_FOUND_ROWS: the count is of matched rows, so a full
    // count means every lease of the batch was renewed.
    let matched = execute(pool, &s.lease_renew, a).await?.rows_affected();
    if usize::try_from(matched).is_ok_and(|m| m >= n) {
        return Ok(Renewal {
            survivors: None,
            statements: 1,
        });
    }
    let Some(survivors) = &s.lease_survivors else {
        return Err(sqlx::Error::Protocol(
            "BUG: no lease_survivors statement".into(),
        ));
    };
    Ok(Renewal {
        survivors: Some(fetch_column(pool, survivors, a).await?),
        statements: 2,
    })
}

/// One attempt at the for-update strategy's row lock, in a new transaction; the
/// grant's token is drawn inside it and comes back through LAST_INSERT_ID(expr).
pub(crate) async fn for_update(
    pool: &MySqlPool,
    s: &Statements,
    a: &Args,
    nowait: bool,
) -> Result<Option<(Transaction<'static, MySql>, i64)>, Failure> {
    let Some(f) = &s.for_update else {
        return Ok(None);
    };
    let run = async {
        let Some(mut tx) = lock_in_transaction(pool, f, a, nowait).await? else {
            return Ok(None);
        };
        let done = f.grant.bind::<MySql>(a).execute(&mut *tx).await?;
        let token = i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX);
        Ok(Some((tx, token)))
    };
    run.await.map_err(|e| s.error(classify(&e), e))
}

/// The size of the Galera cluster this server is a node of, when it is one of more
/// than one node; `None` for a server on its own (or a server without wsrep at all).
pub(super) async fn galera_cluster_size(
    pool: &MySqlPool,
    s: &Statements,
) -> Result<Option<i64>, Failure> {
    let Some(check) = &s.galera_check else {
        return Ok(None);
    };
    match fetch_column::<_, i64>(pool, check, &Args::default()).await {
        Ok(sizes) => Ok(sizes.into_iter().next().filter(|&n| n > 1)),
        // ER_UNKNOWN_SYSTEM_VARIABLE: a server without wsrep is no Galera node.
        Err(e)
            if e.as_database_error()
                .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
                .is_some_and(|d| d.number() == 1193) =>
        {
            Ok(None)
        }
        Err(e) => Err(s.error(classify(&e), e)),
    }
}

/// Sorts MariaDB errors by error number.
pub(super) fn classify(e: &sqlx::Error) -> Class {
    let Some(number) = e
        .as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .map(|d| d.number())
    else {
        return Class::Other;
    };
    match number {
        // ER_LOCK_DEADLOCK (also a Galera certification failure), ER_LOCK_WAIT_TIMEOUT,
        // ER_LOCK_NOWAIT
        1213 | 1205 | 3572 => Class::Contention,
        // ER_NO_SUCH_TABLE, ER_UNKNOWN_SEQUENCES
        1146 | 4091 => Class::MissingTable,
        // ER_PARSE_ERROR, ER_SP_DOES_NOT_EXIST: MySQL has neither RETURNING nor NEXTVAL
        1064 | 1305 => Class::Unsupported,
        _ => Class::Other,
    }
}
