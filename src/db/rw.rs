//! The read-write lock's read, written once over every server: a read hold taken in a
//! transaction that holds the key's gate, with the name marked held by reads in the
//! same transaction.
//!
//! A read-write lock named `K` lives in the lock table as ordinary lease rows: `K`
//! itself is the name, held by the write side as a lease that records itself as such
//! (`lock_strategy` `write`, told from any other lock of its owner) or, while reads
//! hold it, in shared mode (`shared.rs`: no owner, `lock_strategy` `read`, the reads
//! counted); `K@read:<owner>` is one owner's read hold, and `K@write:<owner>` a
//! waiting writer's intent, which makes readers that arrive after it wait. Being lease
//! rows, they are renewed, released, listed and swept as every lease is, a read with
//! its name (`lease_renew.sql`, `shared.rs`).

use super::backend::Backend;
use super::outcome::Grant;
use super::runner::{self, ints, On, Runner};
use super::values::{Acquire, Key, Share};

/// What a read attempt found.
#[derive(Debug)]
pub(crate) enum Read {
    /// Granted: the read hold's row.
    Granted(Grant),
    /// The name is held otherwise (a writer, a lock of any strategy, this owner's own
    /// included unless it is the write side, a semaphore's permits), or a writer waits
    /// for it.
    Busy,
    /// The key's gate, or a row the attempt needed, was in use by another transaction
    /// for a moment.
    Contended,
}

/// A read hold of `a.key` for `a.owner`: the key's gate first (shared with other
/// reads), then the read statement, then the name's mark, in one transaction, rolled
/// back unless the name is marked.
pub(crate) async fn read<B: Backend>(b: &B, a: &Acquire<'_>) -> Result<Read, sqlx::Error> {
    let rw = &b.common().rw;
    let mut tx = runner::begin(b.pool()).await?;
    // Shared among readers (`rw_gate.sql`): reads of one key do not wait for each
    // other, only for grants of the key.
    let gate = B::Db::rows(On::Conn(&mut *tx), &rw.gate, &Key(a.key))
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
    // MariaDB: a row a statement reads or writes is locked by another transaction (a
    // for-update holder of the key, another read's mark), or the token's sequence was
    // in use: contention.
    let contended = |e: &sqlx::Error| B::is_lock_wait_timeout(e) || B::is_sequence_busy(e);
    let rows = match B::Db::rows(On::Conn(&mut *tx), &rw.read, a).await {
        Ok(rows) => rows,
        Err(e) if contended(&e) => {
            tx.rollback().await?;
            return Ok(Read::Contended);
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
        None => {
            drop(rows);
            tx.rollback().await?;
            return Ok(Read::Busy);
        }
    };
    drop(rows);
    // The name, held in shared mode: one hold more for a new read hold, none for a
    // re-entry (its hold was counted when it was granted).
    let mark = Share {
        key: a.key,
        owner: a.owner,
        count: i64::from(grant.hold_count == 1),
        ttl_us: a.ttl_us,
    };
    let marked = match ints::<B::Db, _>(On::Conn(&mut *tx), &rw.mark, &mark).await {
        Ok(rows) => rows.first() == Some(&1),
        Err(e) if contended(&e) => {
            tx.rollback().await?;
            return Ok(Read::Contended);
        }
        Err(e) => return Err(e),
    };
    if !marked {
        tx.rollback().await?;
        return Ok(Read::Busy);
    }
    tx.commit().await?;
    Ok(Read::Granted(grant))
}
