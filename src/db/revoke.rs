//! An operator's revocation of a lock, written once over every server: the safe force
//! release, which takes the holds of a lock away and leaves the key busy until its
//! holder gives it back or its lease lapses.
//!
//! A revoked row keeps its owner, fencing token and expiry, and counts no hold
//! (`hold_count` 0): the state an at-least hold leaves once its owner released. No
//! acquisition takes it, its owner included (a re-entry needs a hold); its holder's
//! renewals and extensions fail, so its lost signal fires; and its holder's release
//! frees it at once. So the key goes to nobody else while its holder may still run:
//! not before the holder gives it back, and not after the expiry the lease had when it
//! was revoked, which nothing can push any more.
//!
//! A name held in shared mode (by reads of a read-write lock, or permits of a
//! semaphore) has each of its holds revoked, in the same transaction as the name's own
//! row when that is a write side's (a downgrade under way); the name's own row is left
//! counting its holds, and each hold's release counts it down as usual. One read or
//! permit has its hold revoked alone. A fair lock's queue is left as it is: the
//! holder's release hands the lock on as any release does, and the first waiter's poll
//! hands on one that lapsed.

use super::backend::Backend;
use super::outcome::{Failure, Listed};
use super::runner::{self, listed, texts, On, Runner};
use super::server::{on_backend, Db};
use super::values::{Key, KeyList};
use crate::support::error::Class;

/// What a revocation found: how many holds it revoked, and the lock as it stands once
/// revoked (`None` when nothing was held).
pub(crate) type Revoked = (u64, Option<Listed>);

/// Revokes the lock on `k` (with `hold`, `k` is one read or permit: its hold alone),
/// then reads it back, in one transaction: how many holds were revoked, and the lock
/// as it now stands, its expiry the latest instant it stays busy. `None` when the
/// key's gate (or, on MariaDB and PostgreSQL, its row) is held by another transaction:
/// a for-update holder, or an acquisition under way (tried again by the caller).
pub(crate) async fn revoke<B: Backend>(
    b: &B,
    k: &Key<'_>,
    hold: bool,
) -> Result<Option<Revoked>, sqlx::Error> {
    let common = b.common();
    let mut tx = runner::begin(b.pool()).await?;
    let revoked = if hold {
        let one = [k.0.to_owned()];
        B::Db::execute(
            On::Conn(&mut *tx),
            &common.family.shared.revoke,
            &KeyList::new(&one),
        )
        .await?
    } else {
        // The key's gate, as every acquisition of the name takes it: no read or permit
        // is granted while the holds are read and revoked; a for-update holder keeps
        // it, and is refused.
        if B::Db::execute(On::Conn(&mut *tx), &common.family.fair.gate, k).await? == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let holds = texts::<B::Db, _>(On::Conn(&mut *tx), &common.family.shared.holds, k).await?;
        let shared = if holds.is_empty() {
            0
        } else {
            B::Db::execute(
                On::Conn(&mut *tx),
                &common.family.shared.revoke,
                &KeyList::new(&holds),
            )
            .await?
        };
        match b.revoke(On::Conn(&mut *tx), k).await? {
            Some(row) => shared + u64::from(row),
            None => {
                tx.rollback().await?;
                return Ok(None);
            }
        }
    };
    let lock = listed::<B::Db, _>(On::Conn(&mut *tx), &common.lookup, k)
        .await?
        .into_iter()
        .next();
    tx.commit().await?;
    Ok(Some((revoked, lock)))
}

/// The calls on a handle's backend of this module's steps.
impl Db {
    /// An operator's revocation of the lock on `k` (`revoke.rs`; with `hold`, `k` is one
    /// read or permit): how many holds were revoked, and the lock as it now stands. A
    /// key whose gate or row another transaction holds fails with contention at once,
    /// never waiting for it.
    pub(crate) async fn revoke(&self, k: &Key<'_>, hold: bool) -> Result<Revoked, Failure> {
        on_backend!(self, |b| revoke(&**b, k, hold).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, k.0))
    }
}
