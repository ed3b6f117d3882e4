//! Leader election: [`Election`], made by
//! [`Locker::election`](crate::Locker::election): a named lease whose fencing token is
//! the leader's term, with its campaign (try, deadline, forever) and the calls that run
//! the leader's work while leadership lasts.
//!
//! An election is a lease on the key `election:<name>`, taken with the lease strategy
//! and renewed by the handle's watchdog like any lease. Once granted, the candidate
//! claims the grant's term (`strategy/election.rs`); only then is it the leader.
//! Observers (`observe.rs`) read the lease and that record together.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use crate::support::error::Result;
use crate::support::strategy_kind::Strategy;
use crate::support::validate::{self, ELECTION_KEY_PREFIX};

use super::leadership::{LeaderTerm, Leadership, Ran};
use super::locker::Locker;
use super::request::LockRequest;

/// How often an [observer](Election::observe) reads who leads, unless told otherwise
/// ([`Election::poll_interval`]): 1 s.
pub const DEFAULT_OBSERVE_POLL: Duration = Duration::from_secs(1);

/// One candidate in a named election, made by
/// [`Locker::election`](crate::Locker::election).
///
/// An election is a lease on the key `election:<name>`;
/// the leader is the candidate that holds it, and its **term** is the lease's fencing
/// token: terms of one election rise strictly with every new leader, so the resource
/// the leader acts on can refuse a deposed leader's writes
/// ([`Leadership::fence`](crate::Leadership::fence)). The leader's identity (a string
/// of your choosing, such as `host:port`, set with [`id`](Self::id)) is stored with
/// its term, and [`leader`](Self::leader) and [`observe`](Self::observe) read them
/// together.
///
/// - [`campaign`](Self::campaign), [`campaign_timeout`](Self::campaign_timeout) and
///   [`try_campaign`](Self::try_campaign) wait to become the leader (forever, until a
///   deadline, or not at all) and hand out a [`Leadership`];
/// - [`lead`](Self::lead) runs your work while leadership lasts and cancels it the
///   moment leadership is lost; [`lead_until_done`](Self::lead_until_done) campaigns
///   again after each loss;
/// - [`Leadership::resign`](crate::Leadership::resign) lets the next candidate in at
///   once, without waiting for the TTL.
///
/// Each `Election` made by `Locker::election` is a candidate of its own (a handle with
/// an owner id of its own, on the same pool), so two of them exclude each other even in
/// one process. Clones of one `Election` are the same candidate: a clone's campaign
/// while it leads joins the same leadership (the same term), as a reentrant lock does.
///
/// The lease is renewed by the watchdog: a slow or failed renewal is retried and never
/// ends the process; when the lease is lost anyway, the [lost
/// signal](crate::Leadership::lost) fires.
///
/// An election key is a lease key like any other: a plain lock taken on the same key
/// (`election:<name>`) excludes the candidates as another lease would, and is no
/// leader to observers.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqlock::Error> {
/// use sqlock::Locker;
/// use sqlx::sqlite::SqlitePoolOptions;
///
/// let pool = SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
/// sqlock::migrate(&pool).await?;
/// let locker = Locker::builder(pool).build()?;
///
/// let a = locker.election("scheduler").id("10.0.0.1:8080");
/// let b = locker.election("scheduler").id("10.0.0.2:8080");
///
/// let leadership = a.campaign().await?;
/// assert!(b.try_campaign().await?.is_none()); // a leads
/// let leader = b.leader().await?.expect("a leader");
/// assert_eq!((leader.identity.as_str(), leader.term), ("10.0.0.1:8080", leadership.term()));
///
/// assert!(leadership.resign().await?); // b gets in at once
/// let next = b.try_campaign().await?.expect("b leads");
/// assert!(next.term() > leader.term);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an election does nothing until it campaigns or is observed"]
pub struct Election {
    pub(crate) locker: Locker,
    name: String,
    /// The election's lock key: the prefix and the name (checked when it campaigns).
    key: String,
    /// The identity recorded when it leads: the handle's owner id unless given.
    identity: String,
    ttl: Option<Duration>,
    poll: Duration,
}

impl Locker {
    /// A candidate in the election `name`, on a new handle of this one (an owner id of
    /// its own, the same pool and settings): see [`Election`].
    ///
    /// The election's lease is on the key `election:<name>`; the name is checked as
    /// a key (1 to [`MAX_ELECTION_NAME_BYTES`](crate::MAX_ELECTION_NAME_BYTES) bytes, no
    /// NUL) by the calls that use it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let leadership = locker.election("scheduler").id("10.0.0.1:8080").campaign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election::new(self, name)
    }
}

impl Election {
    /// A candidate in the election `name`, on a new handle of `locker`.
    pub(crate) fn new(locker: &Locker, name: &str) -> Self {
        let locker = locker.new_handle();
        Self {
            key: format!("{ELECTION_KEY_PREFIX}{name}"),
            identity: locker.owner().to_string(),
            locker,
            name: name.to_owned(),
            ttl: None,
            poll: DEFAULT_OBSERVE_POLL,
        }
    }

    /// The identity this candidate records when it leads: a string of your choosing
    /// that tells the others how to reach the leader (`host:port`, a pod name), 1 to
    /// [`MAX_IDENTITY_BYTES`](crate::MAX_IDENTITY_BYTES) bytes of UTF-8 without NUL,
    /// checked when the candidate campaigns. Defaults to the candidate's owner id.
    pub fn id(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// The TTL of the leadership's lease: how long a leader that stopped renewing it
    /// (crashed, paused, cut off) stays leader, at most. Defaults to the handle's
    /// ([`LockerBuilder::ttl`](crate::LockerBuilder::ttl)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How often an [observer](Self::observe) reads who leads: a follower learns of a
    /// new leader within this period (on PostgreSQL at once when a leader takes office
    /// or resigns, where the handles have
    /// [`LockerBuilder::notify_waiters`](crate::LockerBuilder::notify_waiters)).
    /// Defaults to [`DEFAULT_OBSERVE_POLL`]; zero is refused when the observer first
    /// reads.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The election's lock key: `election:<name>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The identity this candidate records when it leads.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The candidate's handle: its owner id is the leader's `owner` in the lock table.
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

    pub(crate) fn poll(&self) -> Duration {
        self.poll
    }

    /// Becomes the leader, waiting as long as it takes.
    ///
    /// Polls for the election's lease as
    /// [`LockRequest::acquire`](crate::LockRequest::acquire) does (woken at once by a
    /// resignation on PostgreSQL with
    /// [`notify_waiters`](crate::LockerBuilder::notify_waiters)), then records the
    /// candidate's identity for the new term. A lease lost between the two (the process
    /// paused past its TTL) is no leadership: the campaign goes on.
    ///
    /// [`try_campaign`](Self::try_campaign) tries once;
    /// [`campaign_timeout`](Self::campaign_timeout) gives up at a deadline.
    ///
    /// # Errors
    ///
    /// Bad input before any SQL is sent ([`Error::EmptyKey`](crate::Error::EmptyKey),
    /// [`Error::KeyTooLong`](crate::Error::KeyTooLong) for the name,
    /// [`Error::InvalidIdentity`](crate::Error::InvalidIdentity), a TTL out of range);
    /// database errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves no lease held (one the campaign took is
    /// given back in the background).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let leadership = locker.election("outbox-relay").id("relay-1").campaign().await?;
    /// println!("leading in term {}", leadership.term());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self) -> Result<Leadership> {
        self.campaign_until(None).await
    }

    /// Becomes the leader, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) at the deadline (with the election's
    /// key); as [`campaign`](Self::campaign) otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`campaign`](Self::campaign).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// use std::time::Duration;
    ///
    /// match locker.election("outbox-relay").campaign_timeout(Duration::from_secs(5)).await {
    ///     Ok(leadership) => println!("leading in term {}", leadership.term()),
    ///     Err(sqlock::Error::Timeout { .. }) => println!("another replica leads"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign_timeout(&self, timeout: Duration) -> Result<Leadership> {
        // A deadline too far to represent is none.
        self.campaign_until(Instant::now().checked_add(timeout))
            .await
    }

    /// Becomes the leader if nobody leads, in one attempt; `Ok(None)` when another
    /// candidate leads (or took the lease and lost it again in between).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`campaign`](Self::campaign).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// if let Some(leadership) = locker.election("outbox-relay").try_campaign().await? {
    ///     // ... lead ...
    ///     leadership.resign().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_campaign(&self) -> Result<Option<Leadership>> {
        let (key, identity) = self.checked()?;
        match self.request(&key).try_acquire().await? {
            Some(guard) => Leadership::claim(guard, &self.name, &identity).await,
            None => Ok(None),
        }
    }

    /// The election's key and the candidate's identity, checked before any SQL.
    fn checked(&self) -> Result<(String, String)> {
        let key = validate::election_key(&self.name)?;
        validate::identity(&self.identity)?;
        Ok((key, self.identity.clone()))
    }

    /// A request for the election's lease: always a lease, renewed by the watchdog,
    /// whatever the handle's defaults.
    fn request<'a>(&'a self, key: &'a str) -> LockRequest<'a> {
        let request = self
            .locker
            .lock(key)
            .strategy(Strategy::Lease)
            .auto_renew(true);
        match self.ttl {
            Some(ttl) => request.ttl(ttl),
            None => request,
        }
    }

    /// Campaigns until `deadline`, or forever.
    ///
    /// Boxed, its type erased: a caller's future (a campaign spawned onto a runtime,
    /// say) would otherwise nest the whole campaign in its own type, deep enough for
    /// the compiler's layout checks to reach their recursion limit in users' crates.
    fn campaign_until(
        &self,
        deadline: Option<Instant>,
    ) -> Pin<Box<dyn Future<Output = Result<Leadership>> + Send + '_>> {
        Box::pin(self.campaign_until_unboxed(deadline))
    }

    /// [`campaign_until`](Self::campaign_until), unboxed.
    async fn campaign_until_unboxed(&self, deadline: Option<Instant>) -> Result<Leadership> {
        let (key, identity) = self.checked()?;
        loop {
            let request = self.request(&key);
            let guard = match deadline {
                None => request.acquire().await?,
                Some(d) => {
                    request
                        .acquire_timeout(d.saturating_duration_since(Instant::now()))
                        .await?
                }
            };
            // A lease lost before its term was recorded is no leadership: go again.
            if let Some(leadership) = Leadership::claim(guard, &self.name, &identity).await? {
                return Ok(leadership);
            }
        }
    }

    /// Campaigns, then runs `work` while leader; resigns when it is done.
    ///
    /// `work` gets the term ([`LeaderTerm`]: its number, and fenced writes). If
    /// leadership is lost while it runs, `work` is dropped (cancelled at its next await
    /// point) and the call returns
    /// [`Error::LeadershipLost`](crate::Error::LeadershipLost); so it does when the final
    /// resignation finds leadership lost already. Like client-go's
    /// `OnStartedLeading(ctx)`, but the term fences the work's writes.
    ///
    /// # Errors
    ///
    /// [`Error::LeadershipLost`](crate::Error::LeadershipLost); as [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe while campaigning. Dropped while `work` runs, the work is dropped and
    /// the leadership resigned in the background.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # async fn run_scheduler(_term: i64) {}
    /// let election = locker.election("scheduler").id("10.0.0.1:8080");
    /// match election.lead(|term| async move { run_scheduler(term.term()).await }).await {
    ///     Ok(()) => println!("the scheduler stopped while leading"),
    ///     Err(sqlock::Error::LeadershipLost { term, reason, .. }) => {
    ///         eprintln!("lost term {term}: {reason}; the scheduler was stopped")
    ///     }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lead<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(LeaderTerm) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.campaign().await?;
        match leadership.run(work).await {
            Ran::Cut(e) => Err(e),
            Ran::Done(outcome) => outcome,
        }
    }

    /// [`lead`](Self::lead), campaigning again each time leadership is lost while
    /// `work` runs, until `work` completes while leader: for a replica that must lead
    /// whenever it can (a scheduler, a relay). Each term gets a fresh call of `work`.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign);
    /// [`Error::LeadershipLost`](crate::Error::LeadershipLost) only when `work`
    /// completed but the resignation found leadership lost already.
    ///
    /// # Cancel safety
    ///
    /// As [`lead`](Self::lead).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # async fn relay(_term: sqlock::LeaderTerm) {}
    /// let election = locker.election("outbox-relay").id("relay-1");
    /// election.lead_until_done(relay).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lead_until_done<F, Fut, T>(&self, mut work: F) -> Result<T>
    where
        F: FnMut(LeaderTerm) -> Fut,
        Fut: Future<Output = T>,
    {
        loop {
            let leadership = self.campaign().await?;
            match leadership.run(&mut work).await {
                Ran::Cut(e) => {
                    tracing::info!(election = %self.name, error = %e,
                        "leadership lost while leading; campaigning again");
                }
                Ran::Done(outcome) => return outcome,
            }
        }
    }
}
