//! MariaDB: statements from `sql/mysql/`, results through `INSERT ... RETURNING` and,
//! where MariaDB has no `RETURNING` (UPDATE), through `LAST_INSERT_ID(expr)` and
//! matched-row counts.

use sqlx::mysql::MySqlDatabaseError;
use sqlx::MySqlPool;

use sqlx::MySql;

use super::{Dialect, Failure, Renewal, Runner, Statements};
use crate::error::Class;
use crate::sql::{batch_json, Args};

pub(super) const DIALECT: Dialect = Dialect::MySql;

pub(super) async fn lease_renew(
    pool: &MySqlPool,
    s: &Statements,
    a: &Args,
    batch: &[(String, i64)],
) -> Result<Renewal, sqlx::Error> {
    // sqlx connects with CLIENT_FOUND_ROWS: the count is of matched rows, so a full
    // count means every lease of the batch was renewed. A row locked by another
    // transaction fails the statement at once (it is told not to wait): the row of a
    // lease that lapsed may be a for-update holder's, so the survivors are asked for,
    // which waits on nothing, and renewed alone, waiting out short locks.
    let matched = match Runner::execute(pool, &s.lease_renew, a).await {
        Ok(rows) => Some(rows),
        Err(e) if classify(&e) == Class::Contention => None,
        Err(e) => return Err(e),
    };
    if matched.is_some_and(|m| usize::try_from(m).is_ok_and(|m| m >= batch.len())) {
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
    let survivors = Runner::fetch_strings(pool, survivors, a).await?;
    if matched.is_some() {
        return Ok(Renewal {
            survivors: Some(survivors),
            statements: 2,
        });
    }
    let mut again = a.clone();
    again.batch = batch_json(
        batch
            .iter()
            .filter(|(k, _)| survivors.contains(k))
            .map(|(k, t)| (k.as_str(), *t)),
    );
    let Some(renew_again) = &s.lease_renew_again else {
        return Err(sqlx::Error::Protocol(
            "BUG: no lease_renew_again statement".into(),
        ));
    };
    let renewed = Runner::execute(pool, renew_again, &again).await?;
    if usize::try_from(renewed).is_ok_and(|m| m >= survivors.len()) {
        Ok(Renewal {
            survivors: Some(survivors),
            statements: 3,
        })
    } else {
        // Another lease was lost in between: the next tick sorts it out.
        Err(sqlx::Error::Protocol(
            "a lease was lost while its batch was renewed".into(),
        ))
    }
}

/// `Some(released)`. A locked row fails the statement at once (contention).
pub(super) async fn lease_force_release(
    pool: &MySqlPool,
    s: &Statements,
    a: &Args,
) -> Result<Option<bool>, sqlx::Error> {
    Ok(Some(
        Runner::execute(pool, &s.lease_force_release, a).await? > 0,
    ))
}

/// One batch of the sweep, in two steps of one transaction: lock the rows to reclaim,
/// passing over rows another transaction holds (SKIP LOCKED, which MariaDB's DELETE
/// lacks), then delete them by key.
pub(super) async fn sweep(pool: &MySqlPool, s: &Statements, a: &Args) -> Result<u64, sqlx::Error> {
    let Some(claim) = &s.sweep_claim else {
        return Err(sqlx::Error::Protocol(
            "BUG: no sweep_claim statement".into(),
        ));
    };
    let mut tx = pool.begin().await?;
    let keys = <MySql as Runner>::strings_on(&mut tx, claim, a).await?;
    if keys.is_empty() {
        tx.commit().await?;
        return Ok(0);
    }
    let mut claimed = a.clone();
    claimed.batch = batch_json(keys.iter().map(|k| (k.as_str(), 0)));
    let deleted = <MySql as Runner>::execute_on(&mut tx, &s.sweep, &claimed).await?;
    tx.commit().await?;
    Ok(deleted)
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
    match Runner::fetch_i64s(pool, check, &Args::default()).await {
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

/// Whether `e` is ER_LOCK_WAIT_TIMEOUT or ER_LOCK_NOWAIT.
pub(super) fn is_lock_wait_timeout(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|d| matches!(d.number(), 1205 | 3572))
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
