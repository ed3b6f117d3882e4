//! The fair strategy: waiters queue in a table of their own, each with a ticket, and
//! the lock goes to them in ticket order, handed straight from one holder to the next
//! by the release's own transaction (the steps are in `fair/steps.rs`). Held, a fair lock
//! is a lease like any other, with the same hold, watchdog and lost signal. While nobody
//! is queued for its key (the row's `queued` flag clear), it costs what a lease costs:
//! one statement to take it and one to give it back, neither of which can pass a
//! waiter whose join committed before it.
//!
//! A wait runs in a task of its own, so that no step is ever cut half way: if the
//! caller stops waiting (its future dropped, its deadline met), the task leaves the
//! queue after its current step, and a grant it took meanwhile is given back and
//! handed on. Only the first waiter polls for the lock at the handle's poll interval;
//! the waiters behind it read their standing as often as the queue moves (to take up a
//! grant handed to them without delay once they are first) and about once a second
//! when it stands still, or, when a handoff's notification names them, only about
//! once a second; a poll hands the lock to the first live waiter whenever it finds the
//! lock free.

mod steps;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use self::steps::Standing;
use crate::db::retry::retry_failure;
use crate::db::values::Place;
use crate::db::{noting_checkout, Failure, Grant};
use crate::support::backoff::Backoff;
use crate::support::error::{Class, Error, Result};
use crate::support::strategy_kind::Strategy;

use super::attempt::{attempt, try_once};
use super::grant::{Ask, Granted, LockId};
use super::handle::{Handle, InFlight};
use super::landing::{GiveBack, GivingBack, Landing};
use super::release::release;
use super::wait::{Contention, Wait, LAPSED_GRANTS};

/// How often a waiter behind the first looks, at most (and at least three times per
/// TTL): one statement a second. Two places or more from the first, a look that falls
/// due to renew the place renews it instead of reading the standing, so renewals cost
/// no statement of their own there; the second in line reads its standing with each
/// renewal too (two statements, three times per TTL).
const BEHIND: Duration = Duration::from_secs(1);

/// How long a waiter with `ahead` live waiters ahead of it (one or more) waits before
/// it looks again, `waited` after it joined, while the queue moved `moved` places: half
/// the time the queue, at the pace it kept since, takes to make the waiter the first,
/// so that it looks a few times per place as it comes near, and at most `behind`. Until
/// the queue has moved, a wait as long as the waiter has waited so far: a few looks
/// early on, then about one a second. So a waiter finds a fast queue's pace before the
/// queue reaches it, and a slow or stalled queue costs about one look a second.
fn behind_delay(waited: Duration, moved: i64, ahead: i64, behind: Duration) -> Duration {
    let ahead = u32::try_from(ahead).unwrap_or(u32::MAX);
    let d = match u32::try_from(moved) {
        Ok(moved) if moved > 0 => (waited / moved).saturating_mul(ahead) / 2,
        _ => waited,
    };
    d.min(behind)
}

/// What the waiting task hands the caller: the grant, taken up, and the instant the
/// step that took it up was sent (the grant is valid until then plus its TTL).
type Outcome = Result<Option<(Grant, Instant)>>;

/// What the waiting task sends its caller: a grant, landed, so that it is given back
/// if the caller is gone (see [`Landing`]).
type Landed = Result<Option<(Landing<FairGrant>, Instant)>>;

/// The channel on which the waiting task answers.
type Answer = oneshot::Sender<Landed>;

/// Takes the fair lock `ask` asks for: waits in the queue until it is handed the lock,
/// or until the deadline of `wait`, the wait every primitive shares, which answers
/// then as it does for the others ([`Error::Timeout`], or [`Error::PoolExhausted`]
/// when no step of the wait ever had a connection). With `once`, a single try: `None`
/// when the lock is held or waiters are queued (no jumping the queue).
///
/// A key this handle holds already is re-entered, without queueing; a free key nobody
/// is queued for is taken in one statement, as a lease is. A wait of this
/// handle on the key that was given up and is still leaving the queue is waited for
/// first.
///
/// Boxed, and its type erased: the callers' futures (an election's campaign spawned
/// onto a runtime, say) would otherwise nest it in their own types, deep enough for the
/// compiler's checks of `Send` to reach their recursion limit in users' crates.
pub(crate) fn acquire<'a>(
    handle: &'a Arc<Handle>,
    ask: &'a Ask,
    wait: Wait<'a>,
    once: bool,
) -> Waiting<'a> {
    Box::pin(wait_in_queue(handle, ask, wait, once))
}

/// A single try at the fair lock `ask` asks for ([`acquire`] with `once`): `None` when
/// the lock is held or waiters are queued.
pub(crate) fn try_acquire<'a>(handle: &'a Arc<Handle>, ask: &'a Ask) -> Waiting<'a> {
    acquire(handle, ask, Wait::new(handle, ask.key.clone(), None), true)
}

/// A fair acquisition under way (see [`acquire`]).
pub(crate) type Waiting<'a> =
    Pin<Box<dyn Future<Output = Result<Option<(Granted, Instant)>>> + Send + 'a>>;

/// [`acquire`], unboxed.
async fn wait_in_queue(
    handle: &Arc<Handle>,
    ask: &Ask,
    wait: Wait<'_>,
    once: bool,
) -> Result<Option<(Granted, Instant)>> {
    // Nobody queued for a free key: taken in one statement (`lease_acquire.sql`, which
    // grants no fair lock past a queued waiter), without the queue or its task. The
    // attempt is cancel-safe as every lease attempt is (`attempt.rs`).
    if handle.held_with(&ask.key) != Some(Strategy::Fair) {
        match wait
            .attempt(attempt(handle, ask, None, wait.reached()))
            .await?
        {
            Ok(Some(granted)) => return Ok(Some(granted)),
            // Held, waiters queued, a step of the queue holding the key's gate, or a
            // grant that came too late: the queue decides.
            Ok(None) => {}
            Err(f) if matches!(f.class, Class::Contention | Class::Held | Class::Lapsed) => {}
            Err(f) => return Err(f.error),
        }
    }
    let (tx, rx) = oneshot::channel();
    // The task's statements note for the wait when one has a connection, so that a
    // deadline met while none could be had is an exhausted pool, as in every wait.
    tokio::spawn(noting_checkout(
        wait.reached(),
        queue(handle.clone(), ask.clone(), once, tx),
    ));
    // At the deadline the channel is dropped: the task sees the caller gone and leaves
    // the queue, and a grant it sends meanwhile goes with the channel, whose landing
    // gives it back.
    let received = wait.attempt(async { Ok::<_, Failure>(rx.await) }).await?;
    let Ok(Ok(outcome)) = received else {
        // The task panicked: nothing was granted to us that we know of.
        return Err(Error::Database(sqlx::Error::WorkerCrashed));
    };
    Ok(outcome?.map(|(landing, sent)| (Granted::Lease(landing.take().grant), sent)))
}

/// The waiting task: waits, and gives back a grant the caller no longer waits for.
/// It counts as an attempt of the handle on the key until it has left the queue.
async fn queue(handle: Arc<Handle>, ask: Ask, once: bool, mut tx: Answer) {
    let (outcome, in_flight) = run(&handle, &ask, once, &mut tx).await;
    let landed = match outcome {
        Ok(Some((grant, sent))) => {
            let taken = FairGrant {
                key: ask.key.clone(),
                grant,
                in_flight,
            };
            Ok(Some((Landing::new(handle.clone(), taken), sent)))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    // Nobody to hand it to: the landing, dropped here, gives the grant back (handing
    // it on), and only then ends the attempt's mark.
    drop(tx.send(landed));
}

/// Waits for the handle's earlier attempts on the key to settle (a wait whose caller
/// stopped waiting may still be leaving the queue, and would be served first), then
/// re-enters a hold of the handle's own, or joins the queue and waits.
async fn run(
    handle: &Arc<Handle>,
    ask: &Ask,
    once: bool,
    tx: &mut Answer,
) -> (Outcome, Option<InFlight>) {
    tokio::select! {
        () = handle.attempts_settled(&ask.key) => {}
        () = tx.closed() => return (Ok(None), None),
    }
    match reenter(handle, ask).await {
        Ok(None) => {}
        other => return (other, None),
    }
    let in_flight = handle.attempt_started(&ask.key);
    (wait(handle, ask, once, tx).await, Some(in_flight))
}

/// A re-entry of a key this handle holds fair: one more hold on its own grant, without
/// queueing. It retries the races it loses: the queue would have it wait behind
/// waiters for a lock it holds.
async fn reenter(handle: &Arc<Handle>, ask: &Ask) -> Outcome {
    if handle.held_with(&ask.key) != Some(Strategy::Fair) {
        return Ok(None);
    }
    // A fresh grant (the hold lapsed meanwhile and the key was free) passes nobody:
    // the statement grants none while waiters are queued.
    match try_once(handle, ask).await? {
        Some((Granted::Lease(g), sent)) => Ok(Some((g, sent))),
        _ => Ok(None),
    }
}

/// Joins the queue and waits for the lock; leaves the queue before it returns without
/// a grant, and as soon as the caller is gone (`tx` closed).
async fn wait(handle: &Arc<Handle>, ask: &Ask, once: bool, tx: &mut Answer) -> Outcome {
    let db = &handle.db;
    let settings = &handle.settings;
    // A place lasts the lock's TTL and is renewed three times per TTL at least.
    let renew = ask.ttl / 3;
    let behind = BEHIND.min(renew);
    let mut place = Place {
        key: &ask.key,
        owner: &handle.owner_text,
        ticket: 0,
        ttl_us: ask.ttl_us(),
        presence: "",
        gone: "[]",
    };
    // With presence, each step that may take a grant up carries the handle's marker,
    // which the grant records then (a grant is handed on by whoever freed the lock, who
    // knows no marker of this waiter's), and the grant claims the epoch of the handle's
    // presence read before that step was sent (as a lease does: `Handle::presence_marker`).
    let mut epoch;
    // A holder's marker a wait in the server saw freed (its lease then stayed held).
    let mut seen_freed: Option<String> = None;
    // Grants taken up too late to trust in this wait: at [`LAPSED_GRANTS`], the TTL is
    // one every take-up outruns, and the wait ends with [`Error::GrantExpired`] rather
    // than going round the queue for ever (as the other primitives' waits do).
    let mut lapsed = 0;
    loop {
        // Join (again, at the end, after a place that lapsed).
        let mut sent = Instant::now();
        let mut contention = Contention::new(once);
        let mut standing = loop {
            let (marker, read) = handle.presence_marker().await.map_err(|f| f.error)?;
            epoch = read;
            let here = Place {
                presence: &marker,
                ..place
            };
            match db.fair_join(&here).await {
                Ok((ticket, standing)) => {
                    place.ticket = ticket;
                    break standing;
                }
                Err(f) if f.class == Class::Contention => {
                    let Some(pause) = contention.lost() else {
                        return Ok(None);
                    };
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = tx.closed() => return Ok(None),
                    }
                    sent = Instant::now();
                }
                Err(f) => return Err(f.error),
            }
        };
        let wake = subscribe(handle, place.ticket, place.key);
        // A release in this process hands the lock on in its own transaction; the
        // waiter it wakes looks at once (the one woken may not be the one handed it:
        // its look finds it still waiting, as a poll would).
        let local = crate::keepers::wake::subscribe(&handle.wake_scope, &[place.key]);
        // When the place was last renewed (as of the statement's sending).
        let mut renewed = sent;
        // The first waiter's polls, at most this far apart: a poll interval longer
        // than a third of the TTL is cut to it, since every look may renew the place,
        // and a place left unrenewed for a TTL lapses (its waiter then joins again at
        // the back).
        let head_cap = settings.poll_max.min(renew);
        let mut backoff = Backoff::new(settings.poll_min.min(head_cap), head_cap);
        // When the waiter joined (as of its first look behind the first) and how many
        // were ahead then: the queue's pace since.
        let mut joined: Option<(Instant, i64)> = None;
        // Whether the last step only renewed the place, leaving the standing unread.
        let mut unread = false;
        loop {
            if tx.is_closed() {
                settle(handle, &place, standing).await;
                return Ok(None);
            }
            let delay = match standing {
                Standing::Granted(mut grant) => {
                    if Instant::now() < sent + ask.ttl {
                        grant.presence = grant.presence.and(epoch);
                        return Ok(Some((grant, sent)));
                    }
                    // Taken up too late to trust: it may have lapsed already. Handed
                    // on, and the queue joined again.
                    give_back(handle, &ask.key, grant.token).await;
                    lapsed += 1;
                    if lapsed >= LAPSED_GRANTS {
                        return Err(Error::GrantExpired {
                            key: ask.key.clone(),
                            ttl: ask.ttl,
                            took: sent.elapsed(),
                        });
                    }
                    break;
                }
                Standing::Gone => break,
                _ if once => {
                    leave(handle, &place).await;
                    return Ok(None);
                }
                // The first waiter polls at the poll interval: the lock is handed to it
                // next.
                Standing::Waiting { ahead: 0, .. } => backoff.next_delay(),
                // Behind it, a waiter that a handoff's notification names needs no
                // look but to keep its place: about once a second.
                Standing::Waiting { .. } if wake.is_some() => behind,
                // Without notifications, as often as the queue moves, and about once a
                // second when it does not (see `behind_delay`).
                Standing::Waiting { ahead, .. } => {
                    let now = Instant::now();
                    let (since, before) = *joined.get_or_insert((now, ahead));
                    behind_delay(now - since, before - ahead, ahead, behind)
                        .max(settings.poll_min.min(behind))
                }
            };
            let first = matches!(standing, Standing::Waiting { ahead: 0, .. });
            // The first waiter behind a holder whose lease records another handle's
            // presence marker waits in the server for that marker too
            // (`keepers/server_wait.rs`): the moment the server ends the holder's
            // sessions, it polls, rather than at its next poll. A marker seen freed
            // whose lease stayed held is not waited for again in this wait. Else it
            // waits for the holder's wake lock (`keepers/wake_lock.rs`), which the
            // holder lets go once its release, and so the handoff to this waiter, has
            // committed.
            let mut server = match &standing {
                Standing::Waiting {
                    ahead: 0,
                    holder: Some(m),
                    ..
                } => handle
                    .server_waits
                    .wait_for(db, m.clone(), delay, seen_freed.as_deref()),
                _ => None,
            }
            .or_else(|| {
                first
                    .then(|| handle.server_waits.wake_wait(db, &ask.key, delay, true))
                    .flatten()
            });
            // Named by a handoff, with the token of the grant it names (0: look);
            // `None`: the first waiter polls, or a waiter behind looks.
            let named = tokio::select! {
                () = tokio::time::sleep(delay) => None,
                named = woken(&wake) => Some(named),
                () = super::wait::woken(Some(&local)) => Some(0),
                () = super::wait::freed(server.as_mut()) => {
                    // Kept to the end of the turn: a wake lock's waiter keeps the key's
                    // wake turn until its step has answered.
                    seen_freed = server.as_ref().and_then(|s| s.marker.clone());
                    None
                }
                () = tx.closed() => {
                    leave(handle, &place).await;
                    return Ok(None);
                }
            };
            sent = Instant::now();
            // The place is renewed only when it would otherwise go unrenewed for
            // longer than a third of its TTL before the next look.
            let next_look = if first { head_cap } else { behind };
            let due = sent + next_look >= renewed + renew;
            // Two places or more from the first, a renewal that falls due is the look
            // itself: one statement, not a renewal and a read. The standing is read at
            // the next look, which comes before the queue, at its pace, can have made
            // this waiter the first (see `behind_delay`); never two such looks in a
            // row, so that a short TTL, with which every look falls due, still reads
            // the standing every other look.
            let renew_only = match (named, &standing) {
                (None, Standing::Waiting { ahead, free, .. }) if due && !unread && *ahead > 1 => {
                    Some((*ahead, *free))
                }
                _ => None,
            };
            let (marker, read) = match handle.presence_marker().await {
                Ok(marker) => marker,
                Err(f) => {
                    leave(handle, &place).await;
                    return Err(f.error);
                }
            };
            epoch = read;
            let here = Place {
                presence: &marker,
                ..place
            };
            let step = match named {
                // A notification is a hint: the grant it names is claimed by a
                // statement that finds it in the table, or finds nothing (the
                // notification was not the handoff's, or the grant is gone) and leaves
                // the waiter as it stood, for its next look.
                Some(token) if token > 0 => db
                    .fair_claim(&here, token)
                    .await
                    .map(|claimed| claimed.unwrap_or(standing)),
                Some(_) => db.fair_stand(&here, due).await,
                // The first waiter reads its standing (one statement, no gate), and
                // polls under the key's gate only when the lock is free to hand on:
                // released without a handoff, lapsed, or never taken. A release hands
                // it the lock by itself.
                None if first => match db.fair_stand(&here, due).await {
                    Ok(Standing::Waiting {
                        ahead: 0,
                        free: true,
                        ..
                    }) => {
                        match db.fair_poll(&here).await {
                            // The gate is taken (another acquisition of the key, a
                            // for-update holder): the place is kept all the same.
                            Err(f) if f.class == Class::Contention => Ok(Standing::Waiting {
                                ahead: 0,
                                free: false,
                                holder: None,
                            }),
                            polled => polled,
                        }
                    }
                    stood => stood,
                },
                None => match renew_only {
                    Some((ahead, free)) => db.fair_renew(&place).await.map(|live| {
                        if live {
                            Standing::Waiting {
                                ahead,
                                free,
                                holder: None,
                            }
                        } else {
                            Standing::Gone
                        }
                    }),
                    None => db.fair_stand(&here, due).await,
                },
            };
            // Only a step that went through renewed the place (a claim renews none).
            if due && step.is_ok() && !matches!(named, Some(t) if t > 0) {
                renewed = sent;
            }
            unread = renew_only.is_some();
            standing = match step {
                Ok(standing) => standing,
                // Another transaction held a row the step needed: try again later.
                Err(f) if f.class == Class::Contention => Standing::Waiting {
                    ahead: 0,
                    free: false,
                    holder: None,
                },
                Err(f) => {
                    leave(handle, &place).await;
                    return Err(f.error);
                }
            };
        }
    }
}

/// A waiter's wake-up by the notification that names it, when the handle has them.
#[cfg(feature = "postgres")]
type Wake = Option<crate::keepers::notify::TicketSubscription>;
#[cfg(not(feature = "postgres"))]
type Wake = Option<std::convert::Infallible>;

/// Registers the waiter of `ticket` on `key` for the notification that names it
/// (PostgreSQL with `notify_waiters`).
fn subscribe(handle: &Handle, ticket: i64, key: &str) -> Wake {
    #[cfg(feature = "postgres")]
    {
        handle
            .notifier
            .as_ref()
            .map(|n| n.subscribe_ticket(ticket, key))
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = (handle, ticket, key);
        None
    }
}

/// Returns when the waiter was named by a handoff, with the token of the grant it
/// named (0: look); never without notifications.
async fn woken(wake: &Wake) -> i64 {
    match wake {
        #[cfg(feature = "postgres")]
        Some(w) => w.woken().await,
        #[cfg(not(feature = "postgres"))]
        Some(never) => match *never {},
        None => std::future::pending().await,
    }
}

/// Ends a wait whose caller is gone: a grant is given back, a place left.
async fn settle(handle: &Handle, place: &Place<'_>, standing: Standing) {
    match standing {
        Standing::Granted(grant) => give_back(handle, place.key, grant.token).await,
        _ => leave(handle, place).await,
    }
}

/// Leaves the queue; a grant handed to the waiter meanwhile is handed on. Should the
/// key's gate stay taken, the place lapses at its TTL and is skipped then.
async fn leave(handle: &Handle, place: &Place<'_>) {
    if let Err(f) = retry_failure(|| handle.db.fair_leave(place)).await {
        tracing::warn!(key = %place.key, error = %f.error,
            "could not leave the fair queue; the place lapses at its TTL");
    }
}

/// Gives back a grant nobody waits for any more, handing it on.
async fn give_back(handle: &Handle, key: &str, token: i64) {
    let id = LockId {
        key: key.to_owned(),
        strategy: Strategy::Fair,
        token,
        rw_write: false,
    };
    if let Err(e) = release(handle, &id, None).await {
        tracing::warn!(key = %key, error = %e,
            "could not give back a fair lock taken for a caller that stopped waiting; \
             it lapses at its expiry");
    }
}

/// A fair grant the waiting task took, until its caller's guard takes it up: given
/// back (handed on to the next waiter) when nobody does, and only then is the
/// attempt's mark on the key ended.
#[derive(Debug)]
struct FairGrant {
    key: String,
    grant: Grant,
    in_flight: Option<InFlight>,
}

impl GiveBack for FairGrant {
    fn give_back(self, handle: Arc<Handle>) -> GivingBack {
        Box::pin(async move {
            give_back(&handle, &self.key, self.grant.token).await;
            drop(self.in_flight);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_waiter_behind_looks_as_often_as_the_queue_moves_and_about_once_a_second() {
        let second = Duration::from_secs(1);
        // Before the queue moves: as long as waited so far, up to a second.
        assert_eq!(behind_delay(Duration::ZERO, 0, 5, second), Duration::ZERO);
        assert_eq!(behind_delay(40 * MS, 0, 5, second), 40 * MS);
        assert_eq!(behind_delay(3 * second, 0, 5, second), second);
        // A queue moving a place every 10 ms, 5 places from being first: 25 ms.
        assert_eq!(behind_delay(100 * MS, 10, 5, second), 25 * MS);
        // Right behind the first, in a queue moving a place every 100 ms: 50 ms.
        assert_eq!(behind_delay(300 * MS, 3, 1, second), 50 * MS);
        // A slow queue: about once a second.
        assert_eq!(behind_delay(10 * second, 2, 9, second), second);
        assert_eq!(behind_delay(20 * second, 2, 1, second), second);
        // A queue that moved backwards (a waiter ahead rejoined): as if it had not moved.
        assert_eq!(behind_delay(200 * MS, -1, 3, second), 200 * MS);
    }
}
