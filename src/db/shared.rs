//! A name held in shared mode, written once over every server: the steps that keep a
//! name's own row held while reads of a read-write lock or permits of a semaphore
//! hold it, each a transaction of its own.
//!
//! Every primitive holds a name `N` through the row `N`. The exclusive ones (a lock
//! of any strategy, a multi-lock's key, an election, the write side, whose row
//! records `write`) hold it with their owner, as a lease does. Reads and permits hold it together: the row `N` then
//! has no owner (`''`), records the mode (`lock_strategy` `read` or `semaphore`),
//! counts the holds in `hold_count`, and expires no sooner than any of them; each
//! hold keeps a row of its own beside it (`N@read:<owner>`, `semaphore:N#<slot>`),
//! with its owner, token, expiry, renewal and loss. So every exclusive acquisition
//! finds `N` held by another owner and busy, without a word about reads or permits.
//!
//! The invariant every step keeps: while a hold of `N` is live, `N` is live (held in
//! that mode, or, in a downgrade, by the hold's own owner as the write side) and
//! expires no sooner than the hold. A grant marks `N` in the grant's transaction
//! (`strategy/rwlock/steps.rs`, `strategy/semaphore/steps.rs`); a renewal pushes `N` in the same statement
//! (`lease_renew.sql`); an extension pushes `N` as far as the hold, in one transaction
//! ([`extend`]); a release counts `N` one hold less in the release's transaction and
//! frees it at none ([`release`]); the write side's release leaves `N` to its owner's
//! live read (`rw_release.sql`). A hold whose holder died keeps `N` counted until `N`
//! expires: that costs the name's next holder time, never safety; with presence, a
//! waiting writer drops a dead reader's read and its count at once (`strategy/rwlock/steps.rs`).
//!
//! Every step that locks a hold's row and its name's locks the hold's first, then the
//! name's (the renewal and the write side's release too): two steps never wait for
//! each other in opposite orders.

use super::backend::Backend;
use super::outcome::Failure;
use super::runner::{self, texts, On, Runner};
use super::server::{on_backend, Db};
use super::values::{Extend, Held, Key, KeyList, Parent, Push};

use crate::support::error::Class;

/// Gives back one hold of `h` (a read, a permit) if it is still ours, and when it was
/// the last, counts its name `name` one hold less, in one transaction: whether the
/// hold was still ours.
pub(crate) async fn release<B: Backend>(
    b: &B,
    h: &Held<'_>,
    name: &Parent<'_>,
) -> Result<bool, sqlx::Error> {
    let s = &b.common().family.shared;
    let mut tx = runner::begin(b.pool()).await?;
    let left = B::Db::value(On::Conn(&mut *tx), &s.release, h).await?;
    match left {
        None => {
            tx.rollback().await?;
            return Ok(false);
        }
        Some(0) => {
            B::Db::execute(On::Conn(&mut *tx), &s.leave, name).await?;
        }
        Some(_) => {}
    }
    tx.commit().await?;
    Ok(true)
}

/// Extends a hold in shared mode to at least `e.ttl_us` from now, then pushes its name
/// `name` to expire no sooner than the hold now does, in one transaction: the hold's
/// new expiry, `None` (nothing changed) when the hold or its name is no longer live.
/// The name is pushed to the hold's own new expiry, read from its row, not to a time
/// of its own: each statement has its own clock reading.
pub(crate) async fn extend<B: Backend>(
    b: &B,
    e: &Extend<'_>,
    name: &str,
) -> Result<Option<i64>, sqlx::Error> {
    let common = b.common();
    let push = Push {
        key: name,
        hold: e.held.key,
        owner: e.held.owner,
    };
    let mut tx = runner::begin(b.pool()).await?;
    let extended = B::Db::value(On::Conn(&mut *tx), &common.lease_extend, e).await?;
    let pushed = match extended {
        Some(_) => B::Db::execute(On::Conn(&mut *tx), &common.family.shared.push, &push).await? > 0,
        None => false,
    };
    if pushed {
        tx.commit().await?;
        Ok(extended)
    } else {
        tx.rollback().await?;
        Ok(None)
    }
}

/// An operator's release of the holds of the name `k` in shared mode: every live read
/// and permit of it, and the name's row when it is held in shared mode, in one
/// transaction under the key's gate (no read or permit of the name is granted
/// meanwhile): how many rows were released, `None` when the gate was in use.
pub(crate) async fn force_name<B: Backend>(b: &B, k: &Key<'_>) -> Result<Option<u64>, sqlx::Error> {
    let common = b.common();
    let mut tx = runner::begin(b.pool()).await?;
    // The key's gate, as every acquisition of the name takes it (the fair strategy's
    // steps take the same one).
    if B::Db::execute(On::Conn(&mut *tx), &common.family.fair.gate, k).await? == 0 {
        tx.rollback().await?;
        return Ok(None);
    }
    let keys = texts::<B::Db, _>(On::Conn(&mut *tx), &common.family.shared.holds, k).await?;
    let released = if keys.is_empty() {
        0
    } else {
        B::Db::execute(
            On::Conn(&mut *tx),
            &common.family.shared.force,
            &KeyList::new(&keys),
        )
        .await?
    };
    tx.commit().await?;
    Ok(Some(released))
}

/// An operator's release of one hold in shared mode, `k`, whoever holds it, and its
/// name `name` counted one hold less, in one transaction: whether a live hold was
/// released.
pub(crate) async fn force_hold<B: Backend>(
    b: &B,
    k: &Key<'_>,
    name: &Parent<'_>,
) -> Result<bool, sqlx::Error> {
    let s = &b.common().family.shared;
    let mut tx = runner::begin(b.pool()).await?;
    let dropped = B::Db::execute(On::Conn(&mut *tx), &s.drop, k).await? > 0;
    if dropped {
        B::Db::execute(On::Conn(&mut *tx), &s.leave, name).await?;
    }
    tx.commit().await?;
    Ok(dropped)
}

/// The calls on a handle's backend of this module's steps.
impl Db {
    /// A hold of a name in shared mode (a read, a permit) gives back one hold, and its
    /// last counts the name one hold less (`shared.rs`): whether it was still ours.
    pub(crate) async fn shared_release(
        &self,
        h: &Held<'_>,
        name: &Parent<'_>,
    ) -> Result<bool, Failure> {
        on_backend!(self, |b| release(&**b, h, name).await)
    }

    /// An operator's release of the holds of a name in shared mode (`shared.rs`): how
    /// many rows were released. A gate in use is contention.
    pub(crate) async fn force_release_shared(&self, k: &Key<'_>) -> Result<u64, Failure> {
        on_backend!(self, |b| force_name(&**b, k).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, k.0))
    }

    /// An operator's release of one hold in shared mode, its name counted one hold less
    /// (`shared.rs`): whether a live hold was released.
    pub(crate) async fn force_release_hold(
        &self,
        k: &Key<'_>,
        name: &Parent<'_>,
    ) -> Result<bool, Failure> {
        on_backend!(self, |b| force_hold(&**b, k, name).await)
    }

    /// Extends a lease; a hold of a name in shared mode pushes its name first, in the
    /// same transaction (`shared.rs`), so that the name never expires before it.
    pub(crate) async fn lease_extend(&self, e: &Extend<'_>) -> Result<Option<i64>, Failure> {
        match Parent::of(e.held.key) {
            Some(name) => on_backend!(self, |b| extend(&**b, e, name.key).await),
            None => on_backend!(self, |b| b.lease_extend(e).await),
        }
    }
}
