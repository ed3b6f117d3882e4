//! Quorum locks: a [`Quorum`] of independent databases, the [`QuorumRequest`] it
//! makes, and the [`QuorumGuard`] it hands out: one lock held on a majority of them,
//! with one fencing token that rises across them (the protocol is
//! `strategy/quorum.rs`'s).

use std::time::Duration;

use tokio::time::Instant;

use crate::strategy::held::Held;
use crate::strategy::quorum::{self, MemberGrant, Rules};
use crate::support::error::{Error, Result};
use crate::support::lost::{LostReason, LostSignal};
use crate::support::strategy_kind::Strategy;
use crate::support::validate;

use super::guard::LockGuard;
use super::guard_set::GuardSet;
use super::locker::Locker;

/// The fewest independent databases a [`Quorum`] spans: 3. With two, a majority is
/// both, and one database down would stop every grant.
pub const MIN_QUORUM_MEMBERS: usize = 3;

/// The longest a database may take to answer each step of a quorum acquisition by
/// default, when a tenth of the TTL is longer: 1 s.
pub const DEFAULT_QUORUM_SERVER_TIMEOUT: Duration = Duration::from_secs(1);

/// A lock over N independent databases (N ≥ 3), held while a majority of them hold it:
/// RedLock's algorithm on the databases sqlock supports, any mix of them, with a
/// fencing token that still rises.
///
/// Opt-in, for a lock that must outlive a whole database server where no replicated
/// cluster runs: a Galera cluster or a synchronous standby (the project's
/// `docs/deployment.md`) keeps one database available and stays the recommended answer. See [`QuorumRequest`] for what
/// it promises and what it costs.
///
/// Each member is a [`Locker`] of its own database and table, with its own settings
/// (presence included); the quorum holds one lease on each, through it. A `Quorum` is
/// one owner, and its lock is not reentrant: a second acquisition of the same quorum
/// (or of a clone) waits for the first's release as another owner's would, so that
/// two grants never share a token; [`new_handle`](Self::new_handle) makes another
/// owner. A member's own handle (or its other handles' locks of the same owner) holding
/// the key counts as busy there. Members must be distinct databases: two members on one
/// database (two tables of it, or two handles) would let that one database count twice
/// towards a majority, which sqlock cannot detect.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqlock::Error> {
/// use sqlock::{Locker, Quorum};
///
/// // Three independent databases: here three SQLite files' worth of memory.
/// let mut members = Vec::new();
/// for _ in 0..3 {
///     let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
///     sqlock::migrate(&pool).await?;
///     members.push(Locker::new(pool)?);
/// }
/// let quorum = Quorum::new(members)?;
/// let guard = quorum.lock("nightly-report").try_acquire().await?.expect("nobody holds it");
/// assert_eq!(guard.held(), 3);
/// let token = guard.fencing_token();
/// assert!(guard.release().await?);
///
/// let again = quorum.lock("nightly-report").try_acquire().await?.expect("free again");
/// assert!(again.fencing_token() > token);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Quorum {
    members: Vec<Locker>,
}

impl Quorum {
    /// A quorum of `members`, each a handle on a database of its own.
    ///
    /// # Errors
    ///
    /// [`Error::QuorumTooSmall`] for fewer than [`MIN_QUORUM_MEMBERS`] members.
    pub fn new(members: impl IntoIterator<Item = Locker>) -> Result<Self> {
        let members: Vec<Locker> = members.into_iter().collect();
        if members.len() < MIN_QUORUM_MEMBERS {
            return Err(Error::QuorumTooSmall {
                members: members.len(),
                min: MIN_QUORUM_MEMBERS,
            });
        }
        Ok(Self { members })
    }

    /// A new owner on the same databases: a new handle of every member. Locks taken
    /// through it exclude this quorum's.
    pub fn new_handle(&self) -> Self {
        Self {
            members: self.members.iter().map(Locker::new_handle).collect(),
        }
    }

    /// The members, in the order given.
    pub fn members(&self) -> &[Locker] {
        &self.members
    }

    /// How many members a grant needs: more than half of them.
    pub fn majority(&self) -> usize {
        quorum::majority(self.members.len())
    }

    /// A request for the quorum lock on `key`. See [`QuorumRequest`].
    pub fn lock<'a>(&'a self, key: &'a str) -> QuorumRequest<'a> {
        QuorumRequest {
            quorum: self,
            key,
            ttl: None,
            timeout: None,
            server_timeout: None,
        }
    }
}

/// A request for a quorum lock, made by [`Quorum::lock`].
///
/// # What it promises
///
/// - **One holder while a majority holds.** Each round asks every database at once for
///   the key's lease (a single try each, bounded by
///   [`server_timeout`](Self::server_timeout)), and is granted only when more than half
///   granted, within the lease's validity (its TTL less the round's time on the local
///   monotonic clock, less a drift allowance of 1% of the TTL plus 2 ms). Otherwise it
///   gives back at once whatever it took, and tries again after a pause until the
///   deadline. Two holders would need two majorities of the same databases each
///   holding a live lease on one key, and no database grants a key twice.
/// - **A fencing token that rises across the databases.** No sequence spans them, but
///   two majorities always share a database: a round that won reads, on each database
///   it holds, the highest quorum token that database saw granted for the key, takes
///   the highest of a majority's plus one, and writes it back to a majority (each only
///   while its lease there is still its own, never lowering it) before the grant is
///   reported. A later grant reads it on the database it shares, and its token is
///   higher. Compare [`QuorumGuard::fencing_token`] where the protected resource is
///   written, as a lock's token is compared.
/// - **Kept alive where it is held.** Each lease is an ordinary lease of its member,
///   renewed by that member's watchdog; [`QuorumGuard::lost`] fires once fewer than a
///   majority of them are still held.
/// - **Durable.** Every database here commits a grant durably, so a database that
///   restarts does not forget a lease and grant the key again, the failure that
///   RedLock on Redis without persistence has. What carries over from RedLock's
///   critique is timing: a holder paused past its TTL (a stop-the-world pause, a
///   suspended process) can act after its leases lapsed; the fencing token, compared
///   by the resource, refuses its writes then.
///
/// # Cancel safety
///
/// Cancel safe: dropping an acquisition at any point drops its databases' attempts,
/// each cancel safe, and gives back (in the background) whatever a round had taken.
#[derive(Debug, Clone)]
#[must_use = "a request does nothing until it is acquired"]
pub struct QuorumRequest<'a> {
    quorum: &'a Quorum,
    key: &'a str,
    ttl: Option<Duration>,
    timeout: Option<Duration>,
    server_timeout: Option<Duration>,
}

impl QuorumRequest<'_> {
    /// The TTL of the lease on each database. Defaults to the shortest default TTL of
    /// the members.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The longest [`acquire`](Self::acquire) waits; without it, for ever.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The longest each database may take to answer each step of a round (its
    /// acquisition, the token's read, the token's write): one that takes longer counts
    /// as unreachable for that round. Defaults to a tenth of the TTL, at most
    /// [`DEFAULT_QUORUM_SERVER_TIMEOUT`]. Three of it and the drift allowance must fit
    /// in the TTL, or a round whose every step took that long would outlive its own
    /// lease.
    pub fn server_timeout(mut self, bound: Duration) -> Self {
        self.server_timeout = Some(bound);
        self
    }

    /// One round: the lock, or `None` when too many databases found the key busy.
    ///
    /// # Errors
    ///
    /// [`Error::QuorumUnreachable`] when fewer than a majority of the databases
    /// answered every step; [`Error::GrantExpired`] when the round won a majority but
    /// took longer than the lease's validity; the errors of a lock request for bad
    /// input (the key, the TTL) and [`Error::InvalidSettings`] for a server timeout
    /// whose three steps and the drift allowance would not fit in the TTL, before any
    /// SQL is sent.
    pub async fn try_acquire(self) -> Result<Option<QuorumGuard>> {
        self.run(None, true).await
    }

    /// The lock, waiting for it as long as it takes, or until the request's
    /// [`timeout`](Self::timeout) if it has one.
    ///
    /// # Errors
    ///
    /// [`Error::QuorumUnreachable`] when a round heard from fewer than a majority of
    /// the databases: at the deadline, if the last round did, with a
    /// [`timeout`](Self::timeout) (the databases may come back meanwhile), and at once
    /// without one (waiting for ever on databases that are gone would hide it);
    /// [`Error::Timeout`] at the deadline otherwise; [`Error::GrantExpired`] after three
    /// rounds in a row that won a majority too late to use; and as
    /// [`try_acquire`](Self::try_acquire). Nothing is held on any database after an
    /// error: what a round took is given back before the answer (a release that a
    /// database does not answer within the server timeout goes on in the background,
    /// and its lease lapses at its TTL at the latest).
    pub async fn acquire(self) -> Result<QuorumGuard> {
        let deadline = self.timeout.and_then(|t| Instant::now().checked_add(t));
        match self.run(deadline, false).await? {
            Some(guard) => Ok(guard),
            // A wait without a single try answers a grant or an error.
            None => Err(Error::Timeout {
                key: self.key.to_owned(),
                waited: self.timeout.unwrap_or_default(),
            }),
        }
    }

    async fn run(&self, deadline: Option<Instant>, once: bool) -> Result<Option<QuorumGuard>> {
        validate::lock_key(self.key)?;
        let members = &self.quorum.members;
        let ttl = match self.ttl {
            Some(ttl) => ttl,
            None => members
                .iter()
                .map(|m| m.shared.settings.ttl)
                .min()
                .unwrap_or(super::builder::DEFAULT_TTL),
        };
        validate::ttl(ttl)?;
        let bound = self
            .server_timeout
            .unwrap_or_else(|| (ttl / 10).min(DEFAULT_QUORUM_SERVER_TIMEOUT));
        if bound.is_zero() || bound.saturating_mul(3) + quorum::drift(ttl) >= ttl {
            return Err(Error::InvalidSettings(format!(
                "a quorum lock's server timeout must be above zero, and three of it with \
                 the drift allowance ({:?}) under the TTL: {bound:?} is not, for a TTL of \
                 {ttl:?}",
                quorum::drift(ttl)
            )));
        }
        let key = self.key;
        let takes = || {
            members
                .iter()
                .map(|m| m.lock(key).ttl(ttl).strategy(Strategy::Lease).try_acquire())
                .collect::<Vec<_>>()
        };
        let rules = Rules { ttl, bound };
        let won = quorum::acquire(
            &members[0].shared,
            key,
            members.len(),
            rules,
            deadline,
            once,
            takes,
        )
        .await?;
        Ok(won.map(|won| {
            let spare = won.grants.len() - self.quorum.majority();
            let (places, guards): (Vec<usize>, Vec<LockGuard>) = won.grants.into_iter().unzip();
            QuorumGuard {
                key: key.to_owned(),
                token: won.token,
                validity: won.validity,
                bound,
                needed: self.quorum.majority(),
                places,
                set: GuardSet::sparing(guards, spare),
            }
        }))
    }
}

impl MemberGrant for LockGuard {
    fn held(&self) -> &Held {
        &self.held
    }

    fn give_back(self) -> impl std::future::Future<Output = Result<bool>> + Send + 'static {
        self.release()
    }
}

/// A quorum lock held on a majority of its databases, from [`QuorumRequest`].
///
/// Dropped, it gives every lease back in the background, as each
/// [`LockGuard`] does; call [`release`](Self::release) to know when.
#[derive(Debug)]
#[must_use = "if unused the lock is released again at once (in the background)"]
pub struct QuorumGuard {
    key: String,
    token: i64,
    validity: Duration,
    /// The server timeout the grant was taken with, which bounds its release's wait.
    bound: Duration,
    needed: usize,
    /// The members that hold it, by their place in the quorum, as `set` holds them.
    places: Vec<usize>,
    set: GuardSet,
}

impl QuorumGuard {
    /// The locked key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The quorum's fencing token: higher than every earlier grant's of this key on
    /// these databases. Compare it where the protected resource is written.
    pub fn fencing_token(&self) -> i64 {
        self.token
    }

    /// How long the grant was valid for at least when it was reported: the leases' TTL
    /// less the round's time and the drift allowance. The leases are renewed past it;
    /// [`lost`](Self::lost) tells when a majority is no longer held.
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// How many databases hold the lock now (a majority at least, until it is lost).
    pub fn held(&self) -> usize {
        self.set.held()
    }

    /// The places, among the quorum's members, of the databases the grant was taken
    /// on.
    pub fn members(&self) -> &[usize] {
        &self.places
    }

    /// How many databases hold a grant: a majority of the quorum's.
    pub fn majority(&self) -> usize {
        self.needed
    }

    /// The lease on each database that holds the lock, with its place among the
    /// quorum's members: its own key, token and expiry there.
    pub fn leases(&self) -> impl Iterator<Item = (usize, &LockGuard)> + '_ {
        self.places.iter().copied().zip(self.set.guards())
    }

    /// A signal that fires once fewer than a majority of the quorum's databases still
    /// hold the lock (their leases lost, revoked or unrenewable), with the reason of
    /// the loss that was one too many.
    pub fn lost(&self) -> LostSignal {
        self.set.lost()
    }

    /// Whether the lock is lost: fewer than a majority still hold it.
    pub fn is_lost(&self) -> bool {
        // The set spares the grants beyond a majority: it is lost past them.
        self.set.is_lost()
    }

    /// Why the lock was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.set.lost_reason()
    }

    /// Gives the lock back on every database that holds it, all at once: whether a
    /// majority still held it. Every release is attempted even when one fails. A
    /// database that does not answer within the request's server timeout is not
    /// waited for: its release goes on in the background (and its lease lapses at its
    /// TTL at the latest), and it counts as not held.
    ///
    /// # Errors
    ///
    /// The first error a database answered, but only when it decides the answer:
    /// fewer than a majority confirmed the release, and the databases that failed
    /// could have made one up. A majority that confirmed is the answer `true`,
    /// whatever the rest said (one database down does not make a release fail; its
    /// error is logged as a warning), and too few to make a majority even with the
    /// failed ones is `false`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, the future leaves the releases to finish in the background.
    pub async fn release(self) -> Result<bool> {
        let needed = self.needed;
        match self.set.release_at_once(self.bound).await {
            (held, _, failed) if held >= needed => {
                if let Some(e) = failed {
                    tracing::warn!(key = %self.key, error = %e, "a database of a quorum lock failed its release; a majority confirmed theirs");
                }
                Ok(true)
            }
            // The failed ones could have made up a majority: the answer is unknown.
            (held, failures, Some(e)) if held + failures >= needed => Err(e),
            _ => Ok(false),
        }
    }
}
