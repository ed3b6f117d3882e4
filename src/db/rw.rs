//! The read-write lock's steps on the table, written once over every server: a read
//! hold taken in a transaction that holds the key's gate, and the count of live read
//! holds a writer waits out.
//!
//! A read-write lock named `K` lives in the lock table as ordinary lease rows: `K`
//! itself is the write side (a lease like any other), `K@read:<owner>` is one owner's
//! read hold, and `K@write:<owner>` a waiting writer's intent, which makes readers that
//! arrive after it wait. Being lease rows, they are renewed, released, listed and swept
//! as every lease is.

use super::backend::Backend;
use super::outcome::Grant;
use super::runner::{self, On, Runner};
use super::values::{Acquire, Key, Party};

/// What a read attempt found.
#[derive(Debug)]
pub(crate) enum Read {
    /// Granted: the read hold's row.
    Granted(Grant),
    /// A writer holds the key, or waits for it.
    Busy,
    /// The key's gate was in use by another acquisition for a moment.
    Contended,
}

/// A read hold of `a.key` for `a.owner`: the key's gate first (shared with other
/// reads), then the read statement, in one transaction.
pub(crate) async fn read<B: Backend>(b: &B, a: &Acquire<'_>) -> Result<Read, sqlx::Error> {
    let mut tx = runner::begin(b.pool()).await?;
    // Shared among readers (`rw_gate.sql`): reads of one key do not wait for each
    // other, only for grants of the key.
    let gate = B::Db::rows(On::Conn(&mut *tx), &b.common().rw.gate, &Key(a.key))
        .await
        .map(|rows| !rows.is_empty());
    match gate {
        Ok(true) => {}
        Ok(false) => {
            tx.rollback().await?;
            return Ok(Read::Contended);
        }
        Err(e) if B::is_lock_wait_timeout(&e) => {
            tx.rollback().await?;
            return Ok(Read::Contended);
        }
        Err(e) => return Err(e),
    }
    let rows = match B::Db::rows(On::Conn(&mut *tx), &b.common().rw.read, a).await {
        Ok(rows) => rows,
        // MariaDB: a row the statement reads is locked by another transaction (a
        // for-update holder of the key), or the token's sequence was in use.
        Err(e) if B::is_lock_wait_timeout(&e) || B::is_sequence_busy(&e) => {
            tx.rollback().await?;
            return Ok(Read::Contended);
        }
        Err(e) => return Err(e),
    };
    let grant = match rows.first() {
        Some(r) => Some(Grant {
            owner: B::Db::text(r, 0)?,
            token: B::Db::int(r, 1)?,
            expires_us: B::Db::int(r, 2)?,
            hold_count: B::Db::int32(r, 3)?,
            strategy: B::Db::text(r, 4)?,
            presence: None,
        }),
        None => None,
    };
    drop(rows);
    tx.commit().await?;
    Ok(grant.map_or(Read::Busy, Read::Granted))
}

/// How many live read holds of `p.key` owners other than `p.owner` have.
pub(crate) async fn readers<B: Backend>(b: &B, p: &Party<'_>) -> Result<i64, sqlx::Error> {
    let rows = B::Db::rows(On::Pool(b.pool(), false), &b.common().rw.readers, p).await?;
    match rows.first() {
        Some(r) => B::Db::int(r, 0),
        None => Ok(0),
    }
}
