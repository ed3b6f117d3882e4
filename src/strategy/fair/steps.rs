//! The fair strategy's queue, written once over every server: its steps, each a
//! transaction of its own that first takes the key's gate (`fair_gate.sql`), so that
//! the steps of one key, and the acquisitions of the other strategies, run one at a
//! time and every step reads what the steps before it committed.
//!
//! A waiter joins with a ticket, renews its place as it waits, and takes up the grant a
//! step handed it; every step that may free the lock (a release, a waiter leaving with
//! a grant, a poll that finds the holder's lease lapsed) hands it on, in its own
//! transaction, to the first live waiter: no moment in which the lock is free while a
//! live waiter is queued, for a newcomer to take. A step that cannot read the queue's
//! head (its place locked by another transaction for longer than the step waits) is
//! rolled back and tried again, never taken for an empty queue.
//!
//! Every step commits durably: its statements are sent within its transaction, where
//! none skips the flush (`durability.rs`), so a grant a step hands on survives a crash
//! of the server as soon as the step is acknowledged, also when the step's release
//! statement would skip the flush sent alone.

use crate::support::error::Class;

use crate::db::backend::{Backend, GoneOwners};
use crate::db::runner::{self, listed, On, Runner};
use crate::db::values::{Extend, Held, Key, Mark, Place, Present, Sweep};
use crate::db::{on_backend, Db};
use crate::db::{Failure, Grant};

/// A waiter's standing, as a step found it.
#[derive(Debug)]
pub(crate) enum Standing {
    /// The lock is the waiter's: the grant, taken up (its expiry pushed to the TTL
    /// the waiter asked for) and its place left.
    Granted(Grant),
    /// Still waiting, with this many live waiters ahead; `free` when the lock was
    /// free to hand on (no live lease on the key), which the first waiter's poll,
    /// under the key's gate, does; `holder`, the presence marker the holder's live
    /// lease records (the servers; a hint, for a wait in the server).
    Waiting {
        ahead: i64,
        free: bool,
        holder: Option<String>,
    },
    /// The place lapsed (and was skipped) or is gone: the waiter joins again.
    Gone,
}

/// What a step's handoff did.
enum Handoff {
    /// Handed to the waiter of this ticket, with a grant of this token.
    To(i64, i64),
    /// Nobody to hand the lock to: no live waiter, or the lock is held.
    Nobody,
    /// MariaDB: a place at the head of the queue was being written by another
    /// transaction (a waiter renewing its place) for longer than the step waits. Never
    /// taken for "nobody", which would free the lock with a waiter queued: the step is
    /// rolled back and tried again.
    Busy,
}

type Conn<B> = <<B as Backend>::Db as sqlx::Database>::Connection;
type Tx<B> = sqlx::Transaction<'static, <B as Backend>::Db>;

/// A transaction with the key's gate taken; `None` when another transaction holds the
/// gate (a for-update holder, an acquisition of the key under way).
async fn gated<B: Backend>(b: &B, key: &str) -> Result<Option<Tx<B>>, sqlx::Error> {
    let mut tx = runner::begin(b.pool()).await?;
    let open =
        B::Db::execute(On::Conn(&mut *tx), &b.common().family.fair.gate, &Key(key)).await? > 0;
    if open {
        Ok(Some(tx))
    } else {
        tx.rollback().await?;
        Ok(None)
    }
}

/// Hands `key` to the first live waiter of its queue, if the lock is free or expired.
/// With `ensure`, a key without a row gets a free one first (a step that held or
/// released the lock knows the row is there).
async fn hand_on<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    key: &str,
    ensure: bool,
) -> Result<Handoff, sqlx::Error> {
    let f = &b.common().family.fair;
    // The head's place is locked by the read until the step ends (`fair_head.sql`).
    let head = match B::Db::rows(On::Conn(&mut *conn), &f.head, &Key(key)).await {
        Ok(head) => head,
        Err(e) if B::is_lock_wait_timeout(&e) => return Ok(Handoff::Busy),
        Err(e) => return Err(e),
    };
    let (ticket, owner) = match head.first() {
        Some(row) => (B::Db::int(row, 0)?, B::Db::text(row, 1)?),
        None => {
            drop(head);
            drained(b, conn, key).await?;
            return Ok(Handoff::Nobody);
        }
    };
    drop(head);
    let place = Place {
        key,
        owner: &owner,
        ticket,
        ttl_us: 0,
        presence: "",
        gone: "[]",
    };
    let taken = async {
        if ensure {
            self::ensure(b, &mut *conn, key).await?;
        }
        let taken = B::Db::value(On::Conn(&mut *conn), &f.take, &place).await?;
        if taken.is_some() || !b.markers_outside() {
            return Ok(taken);
        }
        // SQLite: the lock is held; taken all the same when its holder's marker file
        // is free (its process gone), held meanwhile so that the answer cannot change.
        let Some(gone) = gone_holder(b, &mut *conn, key, &owner).await? else {
            return Ok(None);
        };
        let again = Place {
            gone: &gone.json,
            ..place
        };
        let taken = B::Db::value(On::Conn(&mut *conn), &f.take, &again).await;
        drop(gone);
        taken
    }
    .await;
    let token = match taken {
        Ok(Some(token)) => token,
        Ok(None) => return Ok(Handoff::Nobody),
        // MariaDB: another transaction keeps the key's row locked (a for-update
        // holder, for its whole transaction; the head's place is this step's). The
        // statement alone was rolled back; the lock is held, and the step goes on
        // without handing it over.
        Err(e) if B::is_lock_wait_timeout(&e) => return Ok(Handoff::Nobody),
        Err(e) => return Err(e),
    };
    // With notifications on (PostgreSQL), the mark names the waiter to its listener.
    let mark = Mark { key, ticket, token };
    B::Db::execute(On::Conn(&mut *conn), &f.mark, &mark).await?;
    Ok(Handoff::To(ticket, token))
}

/// Where presence markers are found outside the database (SQLite's files): the live
/// holder of `key` when it is not `waiter` and its marker is free (its process gone),
/// with the marker held until the answer is dropped. `None` on the servers, whose
/// statements find such a holder themselves.
async fn gone_holder<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    key: &str,
    waiter: &str,
) -> Result<Option<GoneOwners>, sqlx::Error> {
    if !b.markers_outside() {
        return Ok(None);
    }
    let holders = listed::<B::Db, _>(On::Conn(conn), &b.common().lookup, &Key(key)).await?;
    let owners: Vec<String> = holders
        .into_iter()
        .filter(|h| h.hold_count > 0 && h.strategy != "for-update" && h.owner != waiter)
        .map(|h| h.owner)
        .collect();
    let gone = b.gone_owners(&owners);
    Ok((gone.count > 0).then_some(gone))
}

/// Makes sure `key` has a row to hand over, marked queued where the servers keep the
/// flag (`fair_ensure.sql`); a row another transaction keeps locked (MariaDB, which
/// answers that at once) is left as it stands, as PostgreSQL's statement skips it.
async fn ensure<B: Backend>(b: &B, conn: &mut Conn<B>, key: &str) -> Result<(), sqlx::Error> {
    match B::Db::execute(On::Conn(conn), &b.common().family.fair.ensure, &Key(key)).await {
        Err(e) if B::is_lock_wait_timeout(&e) => Ok(()),
        other => other.map(drop),
    }
}

/// Clears the key's queued flag: no live waiter is queued, so that a fair lock
/// nobody waits for is taken and given back in one statement each. Left set when
/// another transaction keeps the row locked (MariaDB: a for-update holder), which only
/// sends the next fair acquisition and release through the queue.
async fn drained<B: Backend>(b: &B, conn: &mut Conn<B>, key: &str) -> Result<(), sqlx::Error> {
    if !B::QUEUED_FLAG {
        return Ok(());
    }
    match B::Db::execute(On::Conn(conn), &b.common().family.fair.drained, &Key(key)).await {
        Err(e) if B::is_lock_wait_timeout(&e) => Ok(()),
        other => other.map(drop),
    }
}

/// Ends a step whose handoff found the head's place busy: rolled back, and `None`
/// (contention: tried again) answered, as for a closed gate.
async fn busy<DB: sqlx::Database, T>(
    tx: sqlx::Transaction<'static, DB>,
) -> Result<Option<T>, sqlx::Error> {
    tx.rollback().await?;
    Ok(None)
}

/// A waiter's place as a step read it (`fair_status.sql`).
struct Status {
    /// The token of the grant handed to the waiter, 0 for none.
    token: i64,
    /// How many live waiters are ahead.
    ahead: i64,
    /// Whether the lock is free to hand on.
    free: bool,
    /// The presence marker the holder's live lease records, where the table keeps
    /// markers.
    holder: Option<String>,
}

/// The waiter's place as it stands; `None` when the place is gone.
async fn status<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    p: &Place<'_>,
) -> Result<Option<Status>, sqlx::Error> {
    let rows = B::Db::rows(On::Conn(&mut *conn), &b.common().family.fair.status, p).await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let (token, ahead, mut free, holder) = (
        B::Db::int(row, 0)?,
        B::Db::int(row, 1)?,
        B::Db::int(row, 2)? != 0,
        B::Db::text_or_null(row, 3)?,
    );
    drop(rows);
    // SQLite: the servers' statement counts a holder whose marker is gone as free; here
    // the first waiter asks the holder's marker file (only it polls on `free`).
    if token == 0 && ahead == 0 && !free {
        free = gone_holder(b, conn, p.key, p.owner).await?.is_some();
    }
    Ok(Some(Status {
        token,
        ahead,
        free,
        holder,
    }))
}

/// Takes up the grant of `token` handed to the waiter at `p`, as the table shows it
/// (owner and token, by `lease_extend.sql`): the grant lasts the waiter's TTL from now
/// (it lasted as long as the place until then), and the waiter leaves the queue.
/// `None`, the place left as it was, when the table shows no such grant of the
/// waiter's. Needs no gate: the grant and the place are the waiter's alone.
async fn take_up<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    p: &Place<'_>,
    token: i64,
) -> Result<Option<Grant>, sqlx::Error> {
    let extend = Extend {
        held: Held {
            key: p.key,
            owner: p.owner,
            token,
        },
        ttl_us: p.ttl_us,
    };
    let expires = B::Db::value(On::Conn(&mut *conn), &b.common().lease_extend, &extend).await?;
    let Some(expires_us) = expires else {
        return Ok(None);
    };
    // Presence: the grant was handed on by whoever freed the lock, who knows no marker
    // of this waiter's: the waiter records its own now, where the table keeps markers
    // (SQLite's are files, found by owner).
    let marked = if p.presence.is_empty() || B::MARKERS_IN_FILES {
        false
    } else {
        let present = Present {
            held: extend.held,
            presence: p.presence,
        };
        B::Db::execute(
            On::Conn(&mut *conn),
            &b.common().family.fair.present,
            &present,
        )
        .await?
            > 0
    };
    B::Db::execute(On::Conn(&mut *conn), &b.common().family.fair.leave, p).await?;
    Ok(Some(Grant {
        owner: p.owner.to_owned(),
        token,
        expires_us,
        hold_count: 1,
        strategy: "fair".to_owned(),
        presence: marked.then_some(0),
        holder: None,
    }))
}

/// The standing of the waiter at `p` once a step handed it the grant of `token`: the
/// grant taken up, or, gone from the table (it lapsed with a place that was not renewed
/// in time, or an operator released it), the place left and the queue joined again.
async fn granted<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    p: &Place<'_>,
    token: i64,
) -> Result<Standing, sqlx::Error> {
    match take_up(b, &mut *conn, p, token).await? {
        Some(grant) => Ok(Standing::Granted(grant)),
        None => {
            B::Db::execute(On::Conn(conn), &b.common().family.fair.leave, p).await?;
            Ok(Standing::Gone)
        }
    }
}

/// The waiter's standing; a grant handed to it is taken up.
async fn standing<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    p: &Place<'_>,
) -> Result<Standing, sqlx::Error> {
    match status(b, &mut *conn, p).await? {
        None => Ok(Standing::Gone),
        Some(Status {
            token: 0,
            ahead,
            free,
            holder,
        }) => Ok(Standing::Waiting {
            ahead,
            free,
            holder,
        }),
        Some(Status { token, .. }) => granted(b, conn, p, token).await,
    }
}

/// A waiter joins the queue of `p.key` (its ticket is ignored) and, when the lock is
/// free and nobody is ahead, takes it at once: its ticket and standing. `None` when
/// the gate was closed.
pub(crate) async fn join<B: Backend>(
    b: &B,
    p: &Place<'_>,
) -> Result<Option<(i64, Standing)>, sqlx::Error> {
    let Some(mut tx) = gated(b, p.key).await? else {
        return Ok(None);
    };
    let f = &b.common().family.fair;
    let ticket = B::Db::value(On::Conn(&mut *tx), &f.enqueue, p)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    let p = Place { ticket, ..*p };
    // Marked queued before the handoff looks: a fair release that runs meanwhile
    // either freed the lock before (found free here, and handed on) or reads the flag
    // once this commits (and hands the lock on itself), never neither. A row another
    // transaction keeps locked (a holder's fenced transaction, a for-update holder) is
    // left unmarked rather than waited for: the place itself, once committed, turns
    // both one-statement forms away (`fair_ensure.sql`).
    ensure(b, &mut tx, p.key).await?;
    let standing = match hand_on(b, &mut tx, p.key, false).await? {
        Handoff::To(to, token) if to == ticket => granted(b, &mut tx, &p, token).await?,
        Handoff::Busy => return busy(tx).await,
        _ => standing(b, &mut tx, &p).await?,
    };
    tx.commit().await?;
    Ok(Some((ticket, standing)))
}

/// A poll of the first waiter, at `p`: renews its place, takes up a grant handed to
/// it, or else hands the lock on if it is free (to this waiter, which takes it up).
/// `None` when the gate was closed.
pub(crate) async fn poll<B: Backend>(
    b: &B,
    p: &Place<'_>,
) -> Result<Option<Standing>, sqlx::Error> {
    let Some(mut tx) = gated(b, p.key).await? else {
        return Ok(None);
    };
    let f = &b.common().family.fair;
    let live = B::Db::execute(On::Conn(&mut *tx), &f.renew, p).await? > 0;
    if !live {
        B::Db::execute(On::Conn(&mut *tx), &f.leave, p).await?;
        tx.commit().await?;
        return Ok(Some(Standing::Gone));
    }
    let mut standing = standing(b, &mut tx, p).await?;
    if let Standing::Waiting { .. } = standing {
        match hand_on(b, &mut tx, p.key, true).await? {
            Handoff::To(to, token) if to == p.ticket => {
                standing = granted(b, &mut tx, p, token).await?;
            }
            Handoff::Busy => return busy(tx).await,
            // Handed to a waiter ahead (this one is not first after all): it waits on.
            _ => {}
        }
    }
    tx.commit().await?;
    Ok(Some(standing))
}

/// A waiter keeps its place: reads its standing, after renewing the place when
/// `renew`, and takes up a grant handed to it; no gate.
pub(crate) async fn stand<B: Backend>(
    b: &B,
    p: &Place<'_>,
    renew: bool,
) -> Result<Standing, sqlx::Error> {
    let mut conn = runner::acquire(b.pool()).await?;
    if renew && !renewed(b, &mut conn, p).await? {
        return Ok(Standing::Gone);
    }
    standing(b, &mut conn, p).await
}

/// A waiter keeps its place without reading its standing: whether the place was
/// still live (renewed); no gate.
pub(crate) async fn renew<B: Backend>(b: &B, p: &Place<'_>) -> Result<bool, sqlx::Error> {
    let mut conn = runner::acquire(b.pool()).await?;
    renewed(b, &mut conn, p).await
}

/// Renews the place at `p`: whether it was still live. A place that lapsed (and was
/// skipped) is deleted at once, not left for the sweep: its waiter joins again at the
/// end, and a place never outlives its waiter's wait. No gate: no step hands a lapsed
/// place anything, and a grant handed to it lapsed with it.
async fn renewed<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    p: &Place<'_>,
) -> Result<bool, sqlx::Error> {
    let f = &b.common().family.fair;
    if B::Db::execute(On::Conn(&mut *conn), &f.renew, p).await? > 0 {
        return Ok(true);
    }
    B::Db::execute(On::Conn(conn), &f.leave, p).await?;
    Ok(false)
}

/// A waiter named by a handoff's notification claims the grant of `token` the
/// notification names. A notification is a hint, never a grant: the grant is taken up
/// only if the table shows it the waiter's (`take_up`), and `None` answered, nothing
/// changed, when it does not (a notification sent by anyone else, or a grant gone
/// meanwhile, which the waiter's next look finds). No gate.
pub(crate) async fn claim<B: Backend>(
    b: &B,
    p: &Place<'_>,
    token: i64,
) -> Result<Option<Standing>, sqlx::Error> {
    let mut conn = runner::acquire(b.pool()).await?;
    Ok(take_up(b, &mut conn, p, token)
        .await?
        .map(Standing::Granted))
}

/// A waiter leaves the queue; a grant handed to it meanwhile is given back and handed
/// on. `None` when the gate was closed.
pub(crate) async fn leave<B: Backend>(b: &B, p: &Place<'_>) -> Result<Option<()>, sqlx::Error> {
    let Some(mut tx) = gated(b, p.key).await? else {
        return Ok(None);
    };
    let f = &b.common().family.fair;
    if let Some(token) = status(b, &mut tx, p)
        .await?
        .map(|st| st.token)
        .filter(|t| *t != 0)
    {
        let held = Held {
            key: p.key,
            owner: p.owner,
            token,
        };
        B::Db::execute(On::Conn(&mut *tx), &b.common().lease_release, &held).await?;
    }
    B::Db::execute(On::Conn(&mut *tx), &f.leave, p).await?;
    if let Handoff::Busy = hand_on(b, &mut tx, p.key, false).await? {
        return busy(tx).await;
    }
    tx.commit().await?;
    Ok(Some(()))
}

/// A fair holder gives back one hold, and the last hands the lock on in the same
/// transaction: whether it was still ours. `None` when the gate was closed. With
/// nobody queued for the key (its queued flag clear; SQLite: no live place), or for a
/// hold that is not the last, one statement without the gate (`fair_release.sql`);
/// otherwise, or when that statement changed nothing (the lock is not ours, which the
/// step tells), the step under the key's gate.
pub(crate) async fn release<B: Backend>(b: &B, h: &Held<'_>) -> Result<Option<bool>, sqlx::Error> {
    // Nobody queued (or an inner hold): one statement, no gate.
    match B::Db::execute(
        On::Pool(b.pool(), false),
        &b.common().family.fair.release,
        h,
    )
    .await
    {
        Ok(n) if n > 0 => return Ok(Some(true)),
        // MariaDB: the row stayed locked a second (a join marking it queued, say).
        Err(e) if !B::is_lock_wait_timeout(&e) => return Err(e),
        _ => {}
    }
    let Some(mut tx) = gated(b, h.key).await? else {
        return Ok(None);
    };
    let released = B::Db::execute(On::Conn(&mut *tx), &b.common().lease_release, h).await? > 0;
    if let Handoff::Busy = hand_on(b, &mut tx, h.key, false).await? {
        return busy(tx).await;
    }
    tx.commit().await?;
    Ok(Some(released))
}

/// An operator's release of `k` (`lease_force_release.sql`), and, when fair waiters
/// are queued, the handoff to the first live one in the same transaction under the
/// key's gate: no lease or insert newcomer can take the key between. Whether a live
/// lock was released; `None` when the gate or the key's row was taken.
///
/// A key nobody waits for in the queue is released alone, without taking its gate:
/// the release wakes that lock's own waiters (PostgreSQL's notification), whose
/// attempts would otherwise find the gate closed for a moment and wait for their next
/// poll. A fair waiter that joins meanwhile is the head, and its own poll hands it the
/// free lock. A database without the queue table (its migration not run) has no fair
/// waiters.
pub(crate) async fn force_release<B: Backend>(
    b: &B,
    k: &Key<'_>,
) -> Result<Option<bool>, sqlx::Error> {
    let queued = match B::Db::rows(On::Pool(b.pool(), false), &b.common().family.fair.head, k).await
    {
        Ok(head) => !head.is_empty(),
        // MariaDB: a place being written (a waiter renewing it): there are waiters.
        Err(e) if B::is_lock_wait_timeout(&e) => true,
        Err(e) if B::classify(&e) == Class::MissingTable => false,
        Err(e) => return Err(e),
    };
    if !queued {
        return b.force_release(On::Pool(b.pool(), false), k).await;
    }
    let Some(mut tx) = gated(b, k.0).await? else {
        return Ok(None);
    };
    let released = match b.force_release(On::Conn(&mut *tx), k).await {
        // MariaDB: the new token's sequence was being written by another transaction
        // (a NEXTVAL in an explicit transaction waits for nothing): tried again.
        Err(e) if B::is_sequence_busy(&e) => None,
        released => released?,
    };
    if released.is_none() {
        return busy(tx).await;
    }
    if let Handoff::Busy = hand_on(b, &mut tx, k.0, false).await? {
        return busy(tx).await;
    }
    tx.commit().await?;
    Ok(released)
}

/// One batch of the queue's sweep: places that lapsed `grace_us` ago or more.
pub(crate) async fn sweep<B: Backend>(b: &B, s: &Sweep<'_>) -> Result<u64, sqlx::Error> {
    B::Db::execute(On::Pool(b.pool(), false), &b.common().family.fair.sweep, s).await
}

/// The calls on a handle's backend of this module's steps.
impl Db {
    /// An operator's release: whether a live lease was released. A key whose row (or,
    /// on PostgreSQL, whose advisory gate) another transaction holds fails with
    /// contention at once, never waiting for it.
    pub(crate) async fn force_release(&self, k: &Key<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| force_release(&**b, k).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, k.0))
    }

    /// The fair strategy's join (see [`join`]): the waiter's ticket and
    /// standing. A closed gate is contention.
    pub(crate) async fn fair_join(&self, p: &Place<'_>) -> Result<(i64, Standing), Failure> {
        on_backend!(self, |b| join(&**b, p).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, p.key))
    }

    /// The first waiter's poll (see [`poll`]). A closed gate is contention.
    pub(crate) async fn fair_poll(&self, p: &Place<'_>) -> Result<Standing, Failure> {
        on_backend!(self, |b| poll(&**b, p).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, p.key))
    }

    /// A waiter keeps its place (see [`stand`]).
    pub(crate) async fn fair_stand(&self, p: &Place<'_>, renew: bool) -> Result<Standing, Failure> {
        on_backend!(self, |b| stand(&**b, p, renew).await)
    }

    /// A waiter renews its place alone (see [`renew`]): whether it was live.
    pub(crate) async fn fair_renew(&self, p: &Place<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| renew(&**b, p).await)
    }

    /// A waiter named by a notification claims the grant it names, if the table shows
    /// it the waiter's (see [`claim`]).
    pub(crate) async fn fair_claim(
        &self,
        p: &Place<'_>,
        token: i64,
    ) -> Result<Option<Standing>, Failure> {
        on_backend!(self, |b| claim(&**b, p, token).await)
    }

    /// A waiter leaves the queue (see [`leave`]). A closed gate is contention.
    pub(crate) async fn fair_leave(&self, p: &Place<'_>) -> Result<(), Failure> {
        on_backend!(self, |b| leave(&**b, p).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, p.key))
    }

    /// A fair holder's release, handing the lock on (see [`release`]): whether
    /// it was still ours. A closed gate is contention.
    pub(crate) async fn fair_release(&self, h: &Held<'_>) -> Result<bool, Failure> {
        on_backend!(self, |b| release(&**b, h).await)?
            .ok_or_else(|| Failure::row_locked(Class::Contention, h.key))
    }

    /// One batch of the fair queue's sweep.
    pub(crate) async fn fair_sweep(&self, s: &Sweep<'_>) -> Result<u64, Failure> {
        on_backend!(self, |b| sweep(&**b, s).await)
    }
}
