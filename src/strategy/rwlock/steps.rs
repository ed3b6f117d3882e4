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

use crate::db::backend::{Backend, GoneOwners};
use crate::db::runner::{self, ints, On, Runner};
use crate::db::values::{Acquire, Held, Key, Parent, Share};
use crate::db::{on_backend, Db};
use crate::db::{Failure, Grant};

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
    let rw = &b.common().family.rw;
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
            presence: runner::marked::<B::Db>(r, 5)?,
            holder: None,
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

/// Presence: drops the live reads of the name `name` whose holders are gone (their
/// presence markers free: their processes died), each with one of the name's holds,
/// so that a writer waiting for them (`owner`, whose own reads are never dropped) need
/// not wait for their TTL: how many were dropped.
///
/// One statement finds them (on SQLite, the live reads, whose owners' marker files are
/// then tried); then one transaction drops each that is still its holder's and still
/// gone, asking again under the marker (PostgreSQL: the shared try keeps it until the
/// commit; MariaDB: the read's row stays locked until then; SQLite: the marker files
/// stay locked by this process), so that a holder that takes its marker back meanwhile
/// finds its read dropped afterwards and is told it is lost. The reads are dropped
/// first, in key order, and the name counted down after them: holds before their name,
/// the order every step that locks both keeps (`shared.rs`).
pub(crate) async fn drop_gone<B: Backend>(
    b: &B,
    name: &str,
    owner: &str,
) -> Result<u64, sqlx::Error> {
    let rw = &b.common().family.rw;
    let asked = Held {
        key: name,
        owner,
        token: 0,
    };
    let rows = B::Db::rows(On::Pool(b.pool(), false), &rw.gone, &asked).await?;
    let mut found = Vec::with_capacity(rows.len());
    for r in &rows {
        found.push((B::Db::text(r, 0)?, B::Db::text(r, 1)?, B::Db::int(r, 2)?));
    }
    drop(rows);
    found.retain(|(_, o, _)| o != owner);
    found.sort();
    // SQLite: the reads of owners whose marker files are free, those files held until
    // the transaction is done.
    let files = if B::MARKERS_IN_FILES {
        let gone = if b.markers_outside() {
            let owners: Vec<String> = found.iter().map(|(_, o, _)| o.clone()).collect();
            b.gone_owners(&owners)
        } else {
            GoneOwners::default()
        };
        found.retain(|(_, o, _)| gone.owners.contains(o));
        Some(gone)
    } else {
        None
    };
    if found.is_empty() {
        return Ok(0);
    }
    let mut tx = runner::begin(b.pool()).await?;
    let mut dropped = 0;
    for (key, owner, token) in &found {
        let held = Held {
            key,
            owner,
            token: *token,
        };
        match B::Db::execute(On::Conn(&mut *tx), &rw.drop_gone, &held).await {
            Ok(n) => dropped += n.min(1),
            // MariaDB: the read's row is another transaction's for a moment (its
            // renewal): left to the next look.
            Err(e) if B::is_lock_wait_timeout(&e) || B::is_sequence_busy(&e) => {
                tx.rollback().await?;
                return Ok(0);
            }
            Err(e) => return Err(e),
        }
    }
    let leave = Parent {
        key: name,
        kind: "read",
    };
    for _ in 0..dropped {
        B::Db::execute(On::Conn(&mut *tx), &b.common().family.shared.leave, &leave).await?;
    }
    tx.commit().await?;
    drop(files);
    Ok(dropped)
}

/// The calls on a handle's backend of this module's steps.
impl Db {
    /// A read hold of a read-write lock.
    pub(crate) async fn rw_read(&self, a: &Acquire<'_>) -> Result<Read, Failure> {
        on_backend!(self, |b| read(&**b, a).await)
    }

    /// Presence: the reads of a name whose holders are gone, dropped for the writer
    /// `owner`: how many.
    pub(crate) async fn rw_drop_gone(&self, name: &str, owner: &str) -> Result<u64, Failure> {
        on_backend!(self, |b| drop_gone(&**b, name, owner).await)
    }

    /// The write side of a read-write lock gives back one hold, and its last leaves
    /// the name to the owner's own read, if the table shows one live, or frees it, in
    /// one statement (`rw_release.sql`): whether it was still ours.
    pub(crate) async fn rw_release_write(&self, h: &Held<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| b.matched(&b.common().family.rw.release, h).await)
    }
}
