//! The quorum lock's protocol (RedLock on SQL databases): one lease of the lock table
//! on each of N independent databases, all asked at once and each bounded; granted
//! when a majority granted within the validity time on the local monotonic clock, with
//! a fencing token that rises across the databases; otherwise what was taken is given
//! back at once.
//!
//! The token: no sequence spans independent databases, but any two majorities of them
//! share one. A round that won a majority reads, on each database it holds, the
//! highest quorum token that database saw granted for the key (`quorum_seen.sql`),
//! takes the highest of a majority's plus one, and writes it back to a majority
//! (`quorum_raise.sql`: only where its lease is still its own, and never lowering it)
//! before the grant is reported. A later round can hold a database only after this
//! one's lease there ended, and its majority shares a database with this one's: it
//! reads this token there, and its own is higher.
//!
//! The leases themselves are ordinary leases of each member's handle, renewed by its
//! watchdog; this module knows them as [`MemberGrant`]s.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::db::values::{Key, Raise};
use crate::support::error::{Error, Result};
use crate::support::join::join_all;

use super::handle::Handle;
use super::held::Held;
use super::wait::{Wait, LAPSED_GRANTS};

mod steps;

/// How many of `members` databases a grant needs: more than half.
pub(crate) fn majority(members: usize) -> usize {
    members / 2 + 1
}

/// The allowance for the drift between the local clock and the databases' over a
/// lease of `ttl`: 1% of it, plus 2 ms for the granularity of timers (RedLock's).
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// What the protocol needs of one database's grant: the lease held below it, and its
/// give-back.
pub(crate) trait MemberGrant: Send + 'static {
    /// The lease, with the handle it was taken on.
    fn held(&self) -> &Held;

    /// Gives the lease back: whether it was still held.
    fn give_back(self) -> impl Future<Output = Result<bool>> + Send + 'static;
}

/// The settings of one quorum acquisition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// Each lease's TTL: the validity of a grant is what is left of it.
    pub(crate) ttl: Duration,
    /// How long each database may take to answer each step: one that takes longer
    /// counts as unreachable for the round.
    pub(crate) bound: Duration,
}

/// A quorum won: the databases that hold it (by their place among the members) and
/// their grants, the quorum token, and how long the grant is valid for at least.
#[derive(Debug)]
pub(crate) struct Won<G> {
    pub(crate) grants: Vec<(usize, G)>,
    pub(crate) token: i64,
    pub(crate) validity: Duration,
}

/// What one round came to.
#[derive(Debug)]
enum Round<G> {
    Won(Won<G>),
    Lost(Lost),
}

/// Takes the quorum for `key`: a round of `takes()` (one acquisition per member, a
/// single try each), again after a pause while a round finds the key busy, until the
/// `deadline`, or once with `once`. `first` is the handle whose settings the pauses
/// follow. `Ok(None)`: a single try found the key busy on too many databases.
///
/// # Errors
///
/// [`Error::QuorumUnreachable`] when a round heard from fewer databases than a
/// majority (down, cut off, too slow, or failing at a step): at once without a
/// deadline or with `once`, and at the deadline otherwise, if the last round did;
/// [`Error::Timeout`] at the deadline otherwise; [`Error::GrantExpired`] after
/// [`LAPSED_GRANTS`] rounds in a row that won a majority too late to use (after one,
/// with `once`).
///
/// A round under way at the deadline is ended then: what it took is given back before
/// the answer (each release waited for within the bound, and left to finish in a task
/// of its own past it). Cancel safe: a round dropped part way drops its members'
/// acquisitions, each cancel safe, and the grants it had, each given back (in the
/// background) by its drop.
pub(crate) async fn acquire<G, F, Fut>(
    first: &Handle,
    key: &str,
    members: usize,
    rules: Rules,
    deadline: Option<Instant>,
    once: bool,
    mut takes: F,
) -> Result<Option<Won<G>>>
where
    G: MemberGrant,
    F: FnMut() -> Vec<Fut>,
    Fut: Future<Output = Result<Option<G>>> + Send,
{
    let needed = majority(members);
    let unreachable = |answered, failure: Option<String>| Error::QuorumUnreachable {
        key: key.to_owned(),
        answered,
        needed,
        members,
        failure: failure.unwrap_or_else(|| "none".to_owned()),
    };
    let mut wait = Wait::new(first, key, deadline);
    // How many databases the last whole round heard from, and its last failure.
    let mut last: Option<(usize, Option<String>)> = None;
    let mut lapsed = 0;
    loop {
        let lost = match round(takes(), rules, deadline).await {
            Round::Won(won) => return Ok(Some(won)),
            Round::Lost(lost) => lost,
        };
        if lost.cut {
            // The deadline fell during the round, which gave back what it had:
            // answered as the round before it, or as this one, if too few answered.
            let (answered, failure) = last.unwrap_or((lost.answered, lost.failure));
            return Err(if answered < needed {
                unreachable(answered, failure)
            } else {
                wait.timed_out()
            });
        }
        if lost.answered < needed && (once || deadline.is_none()) {
            return Err(unreachable(lost.answered, lost.failure));
        }
        if let Some(took) = lost.lapsed {
            lapsed += 1;
            if lapsed >= LAPSED_GRANTS {
                return Err(Error::GrantExpired {
                    key: key.to_owned(),
                    ttl: rules.ttl,
                    took,
                });
            }
        } else {
            lapsed = 0;
        }
        if once {
            return match lost.lapsed {
                Some(took) => Err(Error::GrantExpired {
                    key: key.to_owned(),
                    ttl: rules.ttl,
                    took,
                }),
                None => Ok(None),
            };
        }
        if lost.lapsed.is_some() {
            // Won too late: another round at once may be quicker.
            last = Some((lost.answered, lost.failure));
            continue;
        }
        match wait.pause().await {
            Ok(()) => last = Some((lost.answered, lost.failure)),
            Err(_) if lost.answered < needed => {
                return Err(unreachable(lost.answered, lost.failure));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A round that won nothing: everything it took was given back.
#[derive(Debug)]
struct Lost {
    /// How many databases answered every step asked of them (granted, busy, or held
    /// by this quorum already).
    answered: usize,
    /// The last failure of a database that did not, as it reads.
    failure: Option<String>,
    /// The deadline ended the round.
    cut: bool,
    /// A majority was won, but later than its validity: how long the round took.
    lapsed: Option<Duration>,
}

/// One round: every member asked at once, each within the bound; with a majority
/// granted, the token read and raised on a majority, and the grant checked against its
/// validity. Whatever a round that wins nothing took is given back before it returns.
///
/// Not reentrant: a member's grant that re-entered a lease its handle held already
/// (another acquisition of the same quorum, under way or holding) is given back and
/// counted as busy, so that two acquisitions of one quorum never both win, nor read
/// the same highest token.
async fn round<G, Fut>(takes: Vec<Fut>, rules: Rules, deadline: Option<Instant>) -> Round<G>
where
    G: MemberGrant,
    Fut: Future<Output = Result<Option<G>>> + Send,
{
    let started = Instant::now();
    let members = takes.len();
    let needed = majority(members);
    let bound = rules.bound;
    // Each step within the bound, and none past the deadline.
    let step = || {
        deadline.map_or(bound, |d| {
            bound.min(d.saturating_duration_since(Instant::now()))
        })
    };
    let cut = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut failure = None;
    let mut answered = 0;
    let mut grants = Vec::new();
    let mut reentered = Vec::new();
    let limit = step();
    let taken = join_all(takes.into_iter().map(|t| tokio::time::timeout(limit, t))).await;
    for (member, outcome) in taken.into_iter().enumerate() {
        match outcome {
            Ok(Ok(Some(grant))) if grant.held().hold.hold_count() > 1 => {
                answered += 1;
                reentered.push((member, grant));
            }
            Ok(Ok(Some(grant))) => {
                answered += 1;
                grants.push((member, grant));
            }
            Ok(Ok(None)) => answered += 1,
            Ok(Err(e)) => failure = Some(format!("database {member}: {e}")),
            Err(_) => failure = Some(format!("database {member}: no answer within {limit:?}")),
        }
    }
    give_back(reentered, bound).await;
    let lost = |answered, failure, grants, lapsed| async move {
        give_back(grants, bound).await;
        Round::Lost(Lost {
            answered,
            failure,
            cut: cut(),
            lapsed,
        })
    };
    if grants.len() < needed || cut() {
        return lost(answered, failure, grants, None).await;
    }

    // The highest token a majority of them saw: at least every earlier grant's.
    let limit = step();
    let seen = join_all(grants.iter().map(|(_, g)| {
        let held = g.held();
        tokio::time::timeout(limit, seen(&held.handle, &held.id.key))
    }))
    .await;
    let mut highest = None::<i64>;
    let mut read = Vec::with_capacity(grants.len());
    for (outcome, (member, _)) in seen.into_iter().zip(&grants) {
        match outcome {
            Ok(Ok(token)) => {
                highest = Some(highest.map_or(token, |h| h.max(token)));
                read.push(true);
            }
            Ok(Err(e)) => {
                failure = Some(format!("database {member}: {e}"));
                answered -= 1;
                read.push(false);
            }
            Err(_) => {
                failure = Some(format!("database {member}: no answer within {limit:?}"));
                answered -= 1;
                read.push(false);
            }
        }
    }
    let readers = read.iter().filter(|r| **r).count();
    // A token past i64::MAX would take 9e18 grants of one key: never in practice, and
    // refused rather than repeated.
    let token = match highest.and_then(|h| h.checked_add(1)) {
        Some(token) if readers >= needed && !cut() => token,
        _ => return lost(answered, failure, grants, None).await,
    };

    // Written back to a majority, each where the lease is still ours, before the grant
    // is reported: a database that did not take it does not hold the quorum.
    let limit = step();
    let raised = join_all(grants.iter().zip(&read).map(|((_, g), read)| {
        let held = g.held();
        let read = *read;
        async move {
            if !read {
                return None;
            }
            Some(tokio::time::timeout(limit, raise(held, token)).await)
        }
    }))
    .await;
    let mut kept = Vec::with_capacity(grants.len());
    let mut dropped = Vec::new();
    for (outcome, (member, grant)) in raised.into_iter().zip(grants) {
        match outcome {
            Some(Ok(Ok(true))) => kept.push((member, grant)),
            // Not read: counted as not answering already.
            None => dropped.push((member, grant)),
            Some(Ok(Ok(false))) => {
                failure = Some(format!("database {member}: the lease was lost"));
                dropped.push((member, grant));
            }
            Some(Ok(Err(e))) => {
                failure = Some(format!("database {member}: {e}"));
                answered -= 1;
                dropped.push((member, grant));
            }
            Some(Err(_)) => {
                failure = Some(format!("database {member}: no answer within {limit:?}"));
                answered -= 1;
                dropped.push((member, grant));
            }
        }
    }
    give_back(dropped, bound).await;
    if kept.len() < needed {
        return lost(answered, failure, kept, None).await;
    }
    // Valid for what is left of the TTL, less the drift allowance, measured from
    // before the first acquisition was sent.
    let took = started.elapsed();
    match rules
        .ttl
        .checked_sub(took + drift(rules.ttl))
        .filter(|left| !left.is_zero())
    {
        Some(validity) => Round::Won(Won {
            grants: kept,
            token,
            validity,
        }),
        None => {
            let failure = Some(format!(
                "the round took {took:?}, longer than the lease's validity ({:?} less {:?})",
                rules.ttl,
                drift(rules.ttl)
            ));
            lost(answered, failure, kept, Some(took)).await
        }
    }
}

/// Gives back every grant of a round that won nothing, at once: each release in a task
/// of its own, waited for within the bound and left to finish past it, so that a
/// database slow to answer, or a caller gone meanwhile, still frees its lease.
async fn give_back<G: MemberGrant>(grants: Vec<(usize, G)>, bound: Duration) {
    let releases: Vec<_> = grants
        .into_iter()
        .map(|(_, g)| tokio::spawn(g.give_back()))
        .collect();
    join_all(releases.into_iter().map(|r| tokio::time::timeout(bound, r))).await;
}

/// The highest quorum token `handle`'s database saw granted for `key`.
async fn seen(handle: &Handle, key: &str) -> Result<i64> {
    let key = Key(key);
    crate::db::retry::retry_contention(|| handle.db.quorum_seen(&key)).await
}

/// The quorum token raised to `token` where `held` is still the holder's: whether it
/// was.
async fn raise(held: &Held, token: i64) -> Result<bool> {
    let handle = &held.handle;
    let raise = Raise {
        held: held.id.held(&handle.owner_text),
        quorum: token,
    };
    crate::db::retry::retry_contention(|| handle.db.quorum_raise(&raise)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_is_more_than_half() {
        assert_eq!(
            (3..=7).map(majority).collect::<Vec<_>>(),
            [2, 3, 3, 4, 4],
            "any two majorities of the same members share one"
        );
        for n in 3..=9 {
            assert!(2 * majority(n) > n);
        }
    }

    #[test]
    fn the_drift_allowance_is_a_hundredth_and_two_milliseconds() {
        assert_eq!(drift(Duration::from_secs(30)), Duration::from_millis(302));
        assert_eq!(
            drift(Duration::from_millis(10)),
            Duration::from_micros(2100)
        );
    }
}
