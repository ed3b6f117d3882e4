//! The fair strategy's queue, written once over every server: its steps, each a
//! transaction of its own that first takes the key's gate (`fair_gate.sql`), so that
//! the steps of one key, and the acquisitions of the other strategies, run one at a
//! time and every step reads what the steps before it committed.
//!
//! A waiter joins with a ticket, renews its place as it waits, and takes up the grant a
//! step handed it; every step that may free the lock (a release, a waiter leaving with
//! a grant, a poll that finds the holder's lease lapsed) hands it on, in its own
//! transaction, to the first live waiter: no moment in which the lock is free while a
//! live waiter is queued, for a newcomer to take.

use super::backend::Backend;
use super::outcome::Grant;
use super::runner::{checked_out, On, Runner};
use super::values::{Extend, Held, Key, Mark, Place, Sweep};

/// A waiter's standing, as a step found it.
#[derive(Debug)]
pub(crate) enum Standing {
    /// The lock is the waiter's: the grant, taken up (its expiry pushed to the TTL
    /// the waiter asked for) and its place left.
    Granted(Grant),
    /// A grant was handed to the waiter and waits to be taken up by a poll.
    Called,
    /// Still waiting, with this many live waiters ahead.
    Waiting { ahead: i64 },
    /// The place lapsed (and was skipped) or is gone: the waiter joins again.
    Gone,
}

/// The ticket a step handed the lock to, if it handed it on.
pub(crate) type Handed = Option<i64>;

type Conn<B> = <<B as Backend>::Db as sqlx::Database>::Connection;
type Tx<B> = sqlx::Transaction<'static, <B as Backend>::Db>;

/// A transaction with the key's gate taken; `None` when another transaction holds the
/// gate (a for-update holder, an acquisition of the key under way).
async fn gated<B: Backend>(b: &B, key: &str) -> Result<Option<Tx<B>>, sqlx::Error> {
    let mut tx = b.pool().begin().await?;
    checked_out();
    let open = B::Db::execute(On::Conn(&mut *tx), &b.common().fair.gate, &Key(key)).await? > 0;
    if open {
        Ok(Some(tx))
    } else {
        tx.rollback().await?;
        Ok(None)
    }
}

/// Hands `key` to the first live waiter of its queue, if the lock is free or expired:
/// the ticket it went to.
async fn hand_on<B: Backend>(b: &B, conn: &mut Conn<B>, key: &str) -> Result<Handed, sqlx::Error> {
    let f = &b.common().fair;
    let head = B::Db::rows(On::Conn(&mut *conn), &f.head, &Key(key)).await?;
    let (ticket, owner) = match head.first() {
        Some(row) => (B::Db::int(row, 0)?, B::Db::text(row, 1)?),
        None => return Ok(None),
    };
    drop(head);
    let place = Place {
        key,
        owner: &owner,
        ticket,
        ttl_us: 0,
    };
    let taken = async {
        B::Db::execute(On::Conn(&mut *conn), &f.ensure, &Key(key)).await?;
        B::Db::value(On::Conn(&mut *conn), &f.take, &place).await
    }
    .await;
    let token = match taken {
        Ok(Some(token)) => token,
        Ok(None) => return Ok(None),
        // MariaDB: another transaction keeps the key's row locked (a for-update
        // holder, for its whole transaction). The statement alone was rolled back; the
        // lock is held, and the step goes on without handing it over.
        Err(e) if B::is_lock_wait_timeout(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mark = Mark { key, ticket, token };
    B::Db::execute(On::Conn(&mut *conn), &f.mark, &mark).await?;
    b.fair_announce(&mut *conn, &mark).await?;
    Ok(Some(ticket))
}

/// The waiter's place as it stands: the token of the grant handed to it (0 for none)
/// and how many live waiters are ahead; `None` when the place is gone.
async fn status<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    p: &Place<'_>,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let rows = B::Db::rows(On::Conn(conn), &b.common().fair.status, p).await?;
    match rows.first() {
        Some(row) => Ok(Some((B::Db::int(row, 0)?, B::Db::int(row, 1)?))),
        None => Ok(None),
    }
}

/// The waiter's standing; a grant handed to it is taken up when `take_up`.
async fn standing<B: Backend>(
    b: &B,
    conn: &mut Conn<B>,
    p: &Place<'_>,
    take_up: bool,
) -> Result<Standing, sqlx::Error> {
    let f = &b.common().fair;
    let Some((token, ahead)) = status(b, &mut *conn, p).await? else {
        return Ok(Standing::Gone);
    };
    if token == 0 {
        return Ok(Standing::Waiting { ahead });
    }
    if !take_up {
        return Ok(Standing::Called);
    }
    // Taken up: the grant lasts the waiter's TTL from now (it lasted as long as the
    // place until then), and the waiter is a waiter no more.
    let extend = Extend {
        held: Held {
            key: p.key,
            owner: p.owner,
            token,
        },
        ttl_us: p.ttl_us,
    };
    let expires = B::Db::value(On::Conn(&mut *conn), &b.common().lease_extend, &extend).await?;
    B::Db::execute(On::Conn(&mut *conn), &f.leave, p).await?;
    Ok(match expires {
        Some(expires_us) => Standing::Granted(Grant {
            owner: p.owner.to_owned(),
            token,
            expires_us,
            hold_count: 1,
            strategy: "fair".to_owned(),
            presence: None,
        }),
        // The grant lapsed with a place that was not renewed in time.
        None => Standing::Gone,
    })
}

/// A waiter joins the queue of `p.key` (its ticket is ignored) and, when the lock is
/// free and nobody is ahead, takes it at once: its ticket and standing. `None` when
/// the gate was closed.
pub(crate) async fn join<B: Backend>(
    b: &B,
    p: &Place<'_>,
) -> Result<Option<(i64, Standing, Handed)>, sqlx::Error> {
    let Some(mut tx) = gated(b, p.key).await? else {
        return Ok(None);
    };
    let f = &b.common().fair;
    let ticket = B::Db::value(On::Conn(&mut *tx), &f.enqueue, p)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    let p = Place { ticket, ..*p };
    let handed = hand_on(b, &mut tx, p.key).await?;
    let standing = standing(b, &mut tx, &p, true).await?;
    tx.commit().await?;
    Ok(Some((ticket, standing, handed)))
}

/// A poll of the waiter at `p`: renews its place, hands the lock on if it is free (to
/// this waiter when it is first), and takes up a grant handed to this waiter. `None`
/// when the gate was closed.
pub(crate) async fn poll<B: Backend>(
    b: &B,
    p: &Place<'_>,
) -> Result<Option<(Standing, Handed)>, sqlx::Error> {
    let Some(mut tx) = gated(b, p.key).await? else {
        return Ok(None);
    };
    let f = &b.common().fair;
    let live = B::Db::execute(On::Conn(&mut *tx), &f.renew, p).await? > 0;
    if !live {
        B::Db::execute(On::Conn(&mut *tx), &f.leave, p).await?;
        tx.commit().await?;
        return Ok(Some((Standing::Gone, None)));
    }
    let handed = hand_on(b, &mut tx, p.key).await?;
    let standing = standing(b, &mut tx, p, true).await?;
    tx.commit().await?;
    Ok(Some((standing, handed)))
}

/// A waiter behind the head keeps its place: reads its standing, after renewing the
/// place when `renew`; no gate. A grant found is left for a poll to take up.
pub(crate) async fn stand<B: Backend>(
    b: &B,
    p: &Place<'_>,
    renew: bool,
) -> Result<Standing, sqlx::Error> {
    let f = &b.common().fair;
    let mut conn = b.pool().acquire().await?;
    checked_out();
    if renew && B::Db::execute(On::Conn(&mut *conn), &f.renew, p).await? == 0 {
        return Ok(Standing::Gone);
    }
    standing(b, &mut conn, p, false).await
}

/// A waiter leaves the queue; a grant handed to it meanwhile is given back and handed
/// on. `None` when the gate was closed.
pub(crate) async fn leave<B: Backend>(b: &B, p: &Place<'_>) -> Result<Option<Handed>, sqlx::Error> {
    let Some(mut tx) = gated(b, p.key).await? else {
        return Ok(None);
    };
    let f = &b.common().fair;
    if let Some((token, _)) = status(b, &mut tx, p).await?.filter(|(t, _)| *t != 0) {
        let held = Held {
            key: p.key,
            owner: p.owner,
            token,
        };
        B::Db::execute(On::Conn(&mut *tx), &b.common().lease_release, &held).await?;
    }
    B::Db::execute(On::Conn(&mut *tx), &f.leave, p).await?;
    let handed = hand_on(b, &mut tx, p.key).await?;
    tx.commit().await?;
    Ok(Some(handed))
}

/// A fair holder gives back one hold, and the last hands the lock on in the same
/// transaction: whether it was still ours, and whom it went to. `None` when the gate
/// was closed.
pub(crate) async fn release<B: Backend>(
    b: &B,
    h: &Held<'_>,
) -> Result<Option<(bool, Handed)>, sqlx::Error> {
    let Some(mut tx) = gated(b, h.key).await? else {
        return Ok(None);
    };
    let released = B::Db::execute(On::Conn(&mut *tx), &b.common().lease_release, h).await? > 0;
    let handed = hand_on(b, &mut tx, h.key).await?;
    tx.commit().await?;
    Ok(Some((released, handed)))
}

/// Hands `key` on to its first live waiter if the lock is free or expired (after an
/// operator's release). `None` when the gate was closed.
pub(crate) async fn hand_over<B: Backend>(b: &B, key: &str) -> Result<Option<Handed>, sqlx::Error> {
    let Some(mut tx) = gated(b, key).await? else {
        return Ok(None);
    };
    let handed = hand_on(b, &mut tx, key).await?;
    tx.commit().await?;
    Ok(Some(handed))
}

/// One batch of the queue's sweep: places that lapsed `grace_us` ago or more.
pub(crate) async fn sweep<B: Backend>(b: &B, s: &Sweep<'_>) -> Result<u64, sqlx::Error> {
    B::Db::execute(On::Pool(b.pool(), false), &b.common().fair.sweep, s).await
}
