//! Giving a lock back, for every strategy that keeps a row: the release a guard, a
//! re-entry nobody waits for and a fair wait whose caller left all go through. It sits
//! below the strategies, so that a lease's hold, an attempt and a fair wait can each
//! give a lock back without reaching into one another.
//!
//! Besides the strategies' own releases, two keep a name held in shared mode
//! (`db/shared.rs`) true: a hold of a name in shared mode (a read, a permit: its key
//! tells its name) counts its name one hold less as it goes, and the write side of a
//! read-write lock (its grant's [`LockId`] says so, from the ask that took it) leaves
//! its name to its owner's read, when the table shows one live.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::db::retry::{retry_contention, retry_failure};
use crate::db::values::{Parent, Release};
use crate::keepers::wake;
use crate::support::error::{Class, Result};
use crate::support::strategy_kind::Strategy;

use super::grant::LockId;
use super::handle::Handle;
use crate::support::validate::read_key;

/// A release's future, its type erased.
type Boxed<'a> = Pin<Box<dyn Future<Output = Result<bool>> + Send + 'a>>;

/// Gives back one hold, retrying statements that lost a deadlock race; whether the
/// lock was still ours.
///
/// The insert strategy's last hold deletes the row; a lease's row stays, free; a fair
/// lock's last hold hands it to the next live waiter in the same transaction
/// (`fair/steps.rs`). A hold of a name in shared mode counts its name one hold less in
/// the same transaction, and every release of the write side of a read-write lock
/// leaves its name to its owner's live read, if it has one (a downgrade), with no
/// moment free. With an at-least hold (`at_least`, see
/// [`LockRequest::at_least`](crate::LockRequest::at_least)) the last hold frees the key
/// only once that long has passed since the lease was taken, on the database clock;
/// before then the row stays taken, with no hold, until then. On MariaDB a release
/// waits a second at most on a row lock (the row of a lease that lapsed may be a
/// for-update holder's for a whole transaction): when the row stays locked, a read that
/// waits on nothing tells a lease that is gone (`false`) from a short lock (contention,
/// tried again).
///
/// A release that was still ours wakes this process's waiters of the key at once
/// (`keepers/wake.rs`): they need not wait for their next poll to find it free.
pub(crate) async fn release(
    handle: &Handle,
    id: &LockId,
    at_least: Option<Duration>,
) -> Result<bool> {
    let ours = give_back(handle, id, at_least).await?;
    if ours {
        wake::released(&handle.wake_scope, &id.key);
    }
    Ok(ours)
}

/// [`release`], but for the wake-up.
async fn give_back(handle: &Handle, id: &LockId, at_least: Option<Duration>) -> Result<bool> {
    // An at-least hold is refused for a fair lock before it is taken. Boxed, its type
    // erased: the handoff's transaction nests deep, and every caller's future (a
    // guard's release, a resignation) would otherwise carry it in its own type, deep
    // enough for the compiler's layout checks to reach their recursion limit in users'
    // crates.
    if id.strategy == Strategy::Fair {
        let handoff: Boxed<'_> = Box::pin(hand_on(handle, id));
        return handoff.await;
    }
    // The transactions below are boxed too, for the same reason.
    if let Some(name) = Parent::of(&id.key) {
        let shared: Boxed<'_> = Box::pin(release_shared(handle, id, name));
        return shared.await;
    }
    // Every release of a write side, whoever sends it (the guard, a dropped guard, the
    // give-back of an attempt nobody waited for), is the write side's: its one
    // statement decides from the table whether its owner's read takes the name over.
    // (A write side has no at-least hold: the read-write lock asks for none, and a
    // lock of the handle that could is refused beside the write side.)
    if id.rw_write {
        // Alone with this handle's reads of the name: none starts meanwhile, and one
        // under way is held (or given back) by now, so that the statement sees every
        // read of the owner that will be held.
        let _alone = handle.alone(&read_key(&id.key, &handle.owner_text)).await;
        return release_write(handle, id).await;
    }
    release_row(handle, id, at_least).await
}

/// Gives back one hold of a name in shared mode (a read, a permit), and with its last,
/// one of its name's holds, in one transaction: whether it was still ours. On MariaDB,
/// as [`release_row`]: a row that stays locked is told from a hold that is gone by a
/// read that waits on nothing.
async fn release_shared(handle: &Handle, id: &LockId, name: Parent<'_>) -> Result<bool> {
    let held = id.held(&handle.owner_text);
    let db = &handle.db;
    retry_contention(|| async {
        match db.shared_release(&held, &name).await {
            Err(f) if f.class == Class::Contention && !db.still_held(&held).await? => Ok(false),
            other => other,
        }
    })
    .await
}

/// Gives back one hold of the write side of a read-write lock, and with its last,
/// leaves the name to the owner's live read, if it holds one, in one statement:
/// whether it was still ours. Retried as [`release_shared`].
async fn release_write(handle: &Handle, id: &LockId) -> Result<bool> {
    let held = id.held(&handle.owner_text);
    let db = &handle.db;
    retry_contention(|| async {
        match db.rw_release_write(&held).await {
            Err(f) if f.class == Class::Contention && !db.still_held(&held).await? => Ok(false),
            other => other,
        }
    })
    .await
}

/// Gives back one hold of a fair lock, and the last hands it on to the next waiter in
/// the same transaction: whether it was still ours. Should the key's gate stay taken,
/// the lock is released alone, and the next poll of the first waiter hands it on.
async fn hand_on(handle: &Handle, id: &LockId) -> Result<bool> {
    let held = id.held(&handle.owner_text);
    let db = &handle.db;
    match retry_failure(|| db.fair_release(&held)).await {
        Ok(released) => Ok(released),
        Err(f) if f.class == Class::Contention => release_row(handle, id, None).await,
        Err(f) => Err(f.error),
    }
}

/// [`release`] of the row alone, without a handoff.
async fn release_row(handle: &Handle, id: &LockId, at_least: Option<Duration>) -> Result<bool> {
    let held = id.held(&handle.owner_text);
    let db = &handle.db;
    let insert = id.strategy == Strategy::Insert;
    retry_contention(|| async {
        let released = async {
            match at_least {
                None => {
                    if insert && db.insert_release(&held).await? {
                        return Ok(true);
                    }
                    db.lease_release(&held).await
                }
                Some(hold) => {
                    let r = Release {
                        held,
                        at_least_us: i64::try_from(hold.as_micros()).unwrap_or(i64::MAX),
                    };
                    if insert && db.insert_release_at_least(&r).await? {
                        return Ok(true);
                    }
                    db.lease_release_at_least(&r).await
                }
            }
        }
        .await;
        match released {
            Err(f) if f.class == Class::Contention && !db.still_held(&held).await? => Ok(false),
            other => other,
        }
    })
    .await
}
