//! The semaphore's steps and its acquisition transaction, written once over every
//! server: a semaphore of N permits is N lease rows of the lock table (its slots), and
//! an acquisition takes k of them in one transaction under the semaphore's gate, all
//! or none, and marks the semaphore's name held by permits in the same transaction
//! (`shared.rs`), so that no other primitive takes the name meanwhile.

use crate::db::backend::Backend;
use crate::db::runner::{self, ints, listed, On, Runner};
use crate::db::values::{Key, Limit, Permits, Share, Slots};
use crate::db::{on_backend, Db};
use crate::db::{Failure, Listed};

/// What one acquisition found.
#[derive(Debug)]
pub(crate) enum Taken {
    /// The permits taken, by slot key: token and expiry.
    Granted(Vec<Slot>),
    /// Fewer than the permits asked for were free, or the semaphore's name is held
    /// otherwise (a lock of any strategy, reads of a read-write lock): nothing was
    /// taken.
    Busy,
    /// The name's gate or row was in use by another transaction for a moment: nothing
    /// was taken, worth another try.
    Contended,
    /// The semaphore is recorded with another N (this one): nothing was taken.
    Mismatch(i64),
    /// The semaphore is not recorded (yet, or any more): record it, and try again.
    Unknown,
}

/// One permit taken: its slot's key, its fencing token, its expiry, and whether it
/// recorded the handle's presence marker (`Some(0)`, as [`Grant::presence`]; the
/// strategy puts in the epoch).
///
/// [`Grant::presence`]: crate::db::Grant::presence
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) key: String,
    pub(crate) token: i64,
    pub(crate) expires_us: i64,
    pub(crate) presence: Option<u64>,
}

/// Records the semaphore with N, unless it is recorded: the N it is recorded with.
pub(crate) async fn ensure<B: Backend>(b: &B, p: &Permits<'_>) -> Result<Option<i64>, sqlx::Error> {
    let s = &b.common().family.semaphore;
    B::Db::execute(On::Pool(b.pool(), false), &s.ensure, p).await?;
    let rows = B::Db::rows(On::Pool(b.pool(), false), &s.permits, &Key(p.name)).await?;
    rows.first()
        .map(|r| B::Db::int32(r, 0).map(i64::from))
        .transpose()
}

/// Takes `slots.count` permits of the semaphore `p.name` for `slots.owner`, all or
/// none, in one transaction that first locks the semaphore's row (its gate) and checks
/// its N, and last marks the name held by permits. Rolled back unless every permit
/// asked for was taken and the name marked.
///
/// Where presence markers are found outside the database (SQLite's files), too few
/// free permits send the transaction again, allowed to take the permits of holders
/// whose markers are free (their processes gone), holding those markers meanwhile so
/// that the answer cannot change. On the servers the statement itself finds them.
pub(crate) async fn take<B: Backend>(
    b: &B,
    p: &Permits<'_>,
    slots: &Slots<'_>,
) -> Result<Taken, sqlx::Error> {
    let taken = take_once(b, p, slots).await?;
    if !matches!(taken, Taken::Busy) || !b.markers_outside() {
        return Ok(taken);
    }
    let owners: Vec<String> = holders(b, slots)
        .await?
        .into_iter()
        .map(|h| h.owner)
        .filter(|o| o != slots.owner)
        .collect();
    let gone = b.gone_owners(&owners);
    if gone.count == 0 {
        return Ok(taken);
    }
    let again = Slots {
        gone: &gone.json,
        ..*slots
    };
    let taken = take_once(b, p, &again).await;
    drop(gone);
    taken
}

/// [`take`]'s transaction, once.
async fn take_once<B: Backend>(
    b: &B,
    p: &Permits<'_>,
    slots: &Slots<'_>,
) -> Result<Taken, sqlx::Error> {
    let s = &b.common().family.semaphore;
    let mut tx = runner::begin(b.pool()).await?;
    let gate = B::Db::rows(On::Conn(&mut *tx), &s.gate, &Key(p.name)).await?;
    let recorded = match gate.first() {
        Some(row) => i64::from(B::Db::int32(row, 0)?),
        None => {
            tx.rollback().await?;
            return Ok(Taken::Unknown);
        }
    };
    drop(gate);
    if recorded != p.permits {
        tx.rollback().await?;
        return Ok(Taken::Mismatch(recorded));
    }
    let rows = B::Db::rows(On::Conn(&mut *tx), &s.take, slots).await?;
    let mut taken = Vec::with_capacity(rows.len());
    for row in &rows {
        if B::Db::int(row, 3)? == 1 {
            taken.push(Slot {
                key: B::Db::text(row, 0)?,
                token: B::Db::int(row, 1)?,
                expires_us: B::Db::int(row, 2)?,
                presence: runner::marked::<B::Db>(row, 4)?,
            });
        }
    }
    drop(rows);
    if i64::try_from(taken.len()).unwrap_or(i64::MAX) < slots.count {
        tx.rollback().await?;
        return Ok(Taken::Busy);
    }
    // The name, held in shared mode: as many holds more as permits were taken, and no
    // sooner expired than they are.
    let mark = Share {
        key: p.name,
        owner: slots.owner,
        count: slots.count,
        ttl_us: slots.ttl_us,
    };
    let marked = match ints::<B::Db, _>(On::Conn(&mut *tx), &s.mark, &mark).await {
        Ok(rows) => rows.first().copied(),
        // MariaDB: the name's bucket or row is another transaction's for a moment (a
        // read of the name, a for-update holder), or the token's sequence was in use.
        Err(e) if B::is_lock_wait_timeout(&e) || B::is_sequence_busy(&e) => Some(2),
        Err(e) => return Err(e),
    };
    match marked {
        Some(1) => {}
        Some(2) => {
            tx.rollback().await?;
            return Ok(Taken::Contended);
        }
        _ => {
            tx.rollback().await?;
            return Ok(Taken::Busy);
        }
    }
    tx.commit().await?;
    Ok(Taken::Granted(taken))
}

/// The live permits of a semaphore's slots, as the lock list shows them (a holder
/// whose presence marker is free said to be gone).
pub(crate) async fn holders<B: Backend>(
    b: &B,
    slots: &Slots<'_>,
) -> Result<Vec<Listed>, sqlx::Error> {
    let rows = listed(
        On::Pool(b.pool(), false),
        &b.common().family.semaphore.holders,
        slots,
    )
    .await?;
    Ok(b.with_gone(rows))
}

/// The recorded semaphores, by name, with their N.
pub(crate) async fn list<B: Backend>(b: &B, l: &Limit) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let rows = B::Db::rows(
        On::Pool(b.pool(), false),
        &b.common().family.semaphore.list,
        l,
    )
    .await?;
    rows.iter()
        .map(|r| Ok((B::Db::text(r, 0)?, i64::from(B::Db::int32(r, 1)?))))
        .collect()
}

/// The calls on a handle's backend of this module's steps.
impl Db {
    /// Records the semaphore with its N unless it is recorded: the N it has.
    pub(crate) async fn semaphore_ensure(&self, p: &Permits<'_>) -> Result<Option<i64>, Failure> {
        on_backend!(self, |b| ensure(&**b, p).await)
    }

    /// Takes `slots.count` permits of the semaphore, all or none.
    pub(crate) async fn semaphore_take(
        &self,
        p: &Permits<'_>,
        slots: &Slots<'_>,
    ) -> Result<Taken, Failure> {
        on_backend!(self, |b| take(&**b, p, slots).await)
    }

    /// The live permits of a semaphore's slots.
    pub(crate) async fn semaphore_holders(
        &self,
        slots: &Slots<'_>,
    ) -> Result<Vec<Listed>, Failure> {
        on_backend!(self, |b| holders(&**b, slots).await)
    }

    /// The recorded semaphores with their N.
    pub(crate) async fn semaphore_list(&self, l: &Limit) -> Result<Vec<(String, i64)>, Failure> {
        on_backend!(self, |b| list(&**b, l).await)
    }
}
