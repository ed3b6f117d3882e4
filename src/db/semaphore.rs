//! The semaphore's statements and its acquisition transaction, written once over every
//! server: a semaphore of N permits is N lease rows of the lock table (its slots), and
//! an acquisition takes k of them in one transaction under the semaphore's gate, all
//! or none, and marks the semaphore's name held by permits in the same transaction
//! (`shared.rs`), so that no other primitive takes the name meanwhile.

use super::backend::Backend;
use super::outcome::Listed;
use super::runner::{self, ints, listed, On, Runner};
use super::values::{Key, Limit, Permits, Share, Slots};

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

/// One permit taken: its slot's key, its fencing token, its expiry.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) key: String,
    pub(crate) token: i64,
    pub(crate) expires_us: i64,
}

/// Records the semaphore with N, unless it is recorded: the N it is recorded with.
pub(crate) async fn ensure<B: Backend>(b: &B, p: &Permits<'_>) -> Result<Option<i64>, sqlx::Error> {
    let s = &b.common().semaphore;
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
pub(crate) async fn take<B: Backend>(
    b: &B,
    p: &Permits<'_>,
    slots: &Slots<'_>,
) -> Result<Taken, sqlx::Error> {
    let s = &b.common().semaphore;
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

/// The live permits of a semaphore's slots, as the lock list shows them.
pub(crate) async fn holders<B: Backend>(
    b: &B,
    slots: &Slots<'_>,
) -> Result<Vec<Listed>, sqlx::Error> {
    listed(
        On::Pool(b.pool(), false),
        &b.common().semaphore.holders,
        slots,
    )
    .await
}

/// The recorded semaphores, by name, with their N.
pub(crate) async fn list<B: Backend>(b: &B, l: &Limit) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let rows = B::Db::rows(On::Pool(b.pool(), false), &b.common().semaphore.list, l).await?;
    rows.iter()
        .map(|r| Ok((B::Db::text(r, 0)?, i64::from(B::Db::int32(r, 1)?))))
        .collect()
}
