//! The multi-lock's attempt: several keys taken all or none.
//!
//! PostgreSQL takes them in one statement (`multi_acquire.sql`, [`acquire_in_one`]).
//! The other servers, whose upserts cannot undo themselves half way, take them in one
//! transaction that sends the lease's own acquisition statement once per key, in the
//! order given (sorted by the caller), and commits only when every key came back ours
//! ([`acquire_all`]); SQLite runs one writing transaction at a time, so there it is as
//! atomic as a statement.
//!
//! No statement ever waits for a lock another acquisition holds: PostgreSQL finds a
//! key's gate (an advisory lock held to the end of the transaction that took it)
//! closed and answers at once; MariaDB waits on no row lock (a lock wait timeout of
//! zero, fence buckets skipped when locked); SQLite has one writer. So two multi-locks
//! over overlapping keys never wait for each other in a cycle: the one that finds a key
//! in use gives up all of its keys and tries again later, and a deadlock never
//! reaches the caller.

use super::backend::Backend;
use super::outcome::Grant;
#[cfg(any(feature = "sqlite", feature = "mysql"))]
use super::runner;
use super::runner::{On, Runner};
use super::statement::Statement;
#[cfg(any(feature = "sqlite", feature = "mysql"))]
use super::values::Acquire;
use super::values::AcquireAll;

pub(crate) use super::outcome::TakenAll as Taken;

/// Takes every key of `all` in one transaction, or none of them, with the lease's
/// acquisition statement (SQLite's way; PostgreSQL takes them in one statement).
#[cfg(feature = "sqlite")]
pub(crate) async fn acquire_all<B: Backend>(
    b: &B,
    all: &AcquireAll<'_>,
) -> Result<Taken, sqlx::Error> {
    acquire_all_with(b, &b.common().lease_acquire, all).await
}

/// Takes every key of `all` in one transaction, or none of them, with the acquisition
/// statement `s` (MariaDB on a Galera node has one of its own).
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) async fn acquire_all_with<B: Backend>(
    b: &B,
    s: &Statement<Acquire<'static>>,
    all: &AcquireAll<'_>,
) -> Result<Taken, sqlx::Error> {
    let mut tx = runner::begin(b.pool()).await?;
    let mut grants = Vec::with_capacity(all.keys.len());
    for key in all.keys {
        let a = &all.one(key);
        let rows = match B::Db::rows(On::Conn(&mut *tx), s, a).await {
            Ok(rows) => rows,
            // MariaDB: the key's row is locked by another transaction (a for-update
            // holder, or another acquisition of the key), or the token's sequence was
            // being written by another transaction. Only the statement was rolled back;
            // the attempt gives up the rest.
            Err(e) if B::is_lock_wait_timeout(&e) || B::is_sequence_busy(&e) => {
                tx.rollback().await?;
                return Ok(Taken::Contended(a.key.to_owned()));
            }
            Err(e) => return Err(e),
        };
        let grant = match rows.first() {
            Some(r) => Grant {
                owner: B::Db::text(r, 0)?,
                token: B::Db::int(r, 1)?,
                expires_us: B::Db::int(r, 2)?,
                hold_count: B::Db::int32(r, 3)?,
                strategy: B::Db::text(r, 4)?,
                presence: None,
            },
            None => Grant {
                owner: String::new(),
                token: 0,
                expires_us: 0,
                hold_count: -1,
                strategy: String::new(),
                presence: None,
            },
        };
        drop(rows);
        let outcome = if grant.hold_count < 0 {
            // No row at all: held by another owner (PostgreSQL, SQLite) or, on MariaDB,
            // the key's fence bucket was in use for a moment; taken as busy either way
            // on PostgreSQL and SQLite, as contention on MariaDB.
            if B::DIALECT == super::Dialect::MySql {
                Some(Taken::Contended(a.key.to_owned()))
            } else {
                Some(Taken::Busy)
            }
        } else if grant.gate_closed() {
            Some(Taken::Contended(a.key.to_owned()))
        } else if grant.owner != a.owner || grant.hold_count < 1 {
            Some(Taken::Busy)
        } else if grant.strategy != a.strategy.name() {
            Some(Taken::Conflict(a.key.to_owned(), grant.strategy.clone()))
        } else {
            None
        };
        if let Some(outcome) = outcome {
            tx.rollback().await?;
            return Ok(outcome);
        }
        grants.push(grant);
    }
    tx.commit().await?;
    Ok(Taken::All(grants))
}

/// Takes every key of `all` with `s`, one statement that takes them all or none
/// (PostgreSQL's `multi_acquire.sql`): its rows name the keys it took, one with no key
/// says a gate was closed, none says a key is busy.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) async fn acquire_in_one<B: Backend>(
    b: &B,
    s: &Statement<AcquireAll<'static>>,
    all: &AcquireAll<'_>,
) -> Result<Taken, sqlx::Error> {
    let rows = match B::Db::rows(On::Pool(b.pool(), false), s, all).await {
        Ok(rows) => rows,
        // The statement took fewer keys than it was given (a key was granted to
        // another owner after the statement's snapshot) and failed itself, undoing
        // what it took: contention, worth another try.
        Err(e) if is_partial(&e) => return Ok(Taken::Contended(all.keys.join(","))),
        Err(e) => return Err(e),
    };
    let mut by_key = std::collections::HashMap::with_capacity(rows.len());
    for r in &rows {
        let key = B::Db::text(r, 0)?;
        if key.is_empty() {
            return Ok(Taken::Contended(all.keys.join(",")));
        }
        let grant = Grant {
            owner: B::Db::text(r, 1)?,
            token: B::Db::int(r, 2)?,
            expires_us: B::Db::int(r, 3)?,
            hold_count: B::Db::int32(r, 4)?,
            strategy: B::Db::text(r, 5)?,
            presence: None,
        };
        by_key.insert(key, grant);
    }
    if by_key.is_empty() {
        return Ok(Taken::Busy);
    }
    // Every row is one the statement wrote: ours. In the order asked.
    let grants: Option<Vec<Grant>> = all.keys.iter().map(|k| by_key.remove(k)).collect();
    Ok(grants.map_or(Taken::Busy, Taken::All))
}

/// Whether `e` is the statement's own refusal to take part of its keys: the invalid
/// cast of `multi_acquire.sql`'s last step.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn is_partial(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| {
        d.code().as_deref() == Some("22P02") && d.message().contains("sqlock: a multi-lock")
    })
}
