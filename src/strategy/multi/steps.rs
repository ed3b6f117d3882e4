//! The multi-lock's attempt: several keys taken all or none, in one statement
//! (`multi_acquire.sql`, every server's own).
//!
//! Each server's statement checks, as it reads the keys' rows, that none is held by
//! someone else, and writes every key or none: PostgreSQL behind the keys' gates (its
//! transaction-scoped advisory locks), failing itself should it take fewer keys than
//! it was given; MariaDB with the keys' fence buckets and rows locked by the statement,
//! failing itself likewise; SQLite under its one writer's lock.
//!
//! No statement ever waits for a lock another acquisition holds: PostgreSQL finds a
//! key's gate closed and answers at once; MariaDB waits on no row or bucket lock (a
//! lock wait timeout of zero); SQLite has one writer. So two multi-locks over
//! overlapping keys never wait for each other in a cycle: the one that finds a key in
//! use gives up all of its keys and tries again later, and a deadlock never reaches
//! the caller.

use crate::db::backend::Backend;
use crate::db::runner::{On, Runner};
use crate::db::values::AcquireAll;
use crate::db::{on_backend, Db};
use crate::db::{Failure, Grant};

pub(crate) use crate::db::TakenAll as Taken;

/// Takes every key of `all` with the server's `multi_acquire.sql`, one statement that
/// takes them all or none, in an explicit transaction of its own where the server
/// wants one (`Backend::rows_in_transaction`): its rows name the keys it took, one with
/// no key says a gate was closed (PostgreSQL), none says a key is busy.
pub(crate) async fn acquire<B: Backend>(b: &B, all: &AcquireAll<'_>) -> Result<Taken, sqlx::Error> {
    let in_tx = b.rows_in_transaction().await?;
    let s = &b.common().multi_acquire;
    let rows = match B::Db::rows(On::Pool(b.pool(), in_tx), s, all).await {
        Ok(rows) => rows,
        // The statement took fewer keys than it was given (a key was granted to
        // another owner after the statement's snapshot) and failed itself, undoing
        // what it took: contention, worth another try. So is, on MariaDB, a bucket or
        // row another transaction held locked (the statement waits for none), or the
        // tokens' sequence being written by another transaction.
        Err(e) if is_partial(&e) || B::is_lock_wait_timeout(&e) || B::is_sequence_busy(&e) => {
            return Ok(Taken::Contended(all.keys.join(",")));
        }
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
            presence: crate::db::runner::marked::<B::Db>(r, 6)?,
            holder: None,
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

/// Whether `e` is the statement's own refusal to take part of its keys: PostgreSQL's
/// invalid cast in `multi_acquire.sql`'s last step, MariaDB's value out of range in
/// its hold count (SQLSTATE 22003). SQLite's statement never takes part of its keys.
fn is_partial(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| match d.code().as_deref() {
            Some("22P02") => d.message().contains("sqlock: a multi-lock"),
            Some("22003") => d.message().contains("hold_count"),
            _ => false,
        })
}

/// The calls on a handle's backend of this module's steps.
impl Db {
    /// A multi-lock's attempt: every key of `all` (sorted, distinct), or none
    /// (its wait is in `multi.rs`).
    pub(crate) async fn lease_acquire_all(&self, all: &AcquireAll<'_>) -> Result<Taken, Failure> {
        on_backend!(self, |b| acquire(&**b, all).await)
    }
}
