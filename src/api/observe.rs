//! Observing an election: who leads now ([`Election::leader`]), and a watch of the
//! changes ([`LeaderWatch`]) that a follower can select on.
//!
//! A follower reads the election's live lease and the identity claimed for its term in
//! one statement (`elect_leader.sql`), so it never sees an identity with another term
//! than its own. The watch reads every poll period; on PostgreSQL, where the handles
//! have `notify_waiters`, a resignation or a new term's claim wakes it at once.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::db::values::Key;
use crate::db::Elected;
use crate::strategy::lease::micros_to_utc;
use crate::support::error::{Error, Result};
use crate::support::validate;

use super::election::Election;

/// The leader of an election, as an observer read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The election's name.
    pub election: String,
    /// The identity the leader gave ([`Election::id`]).
    pub identity: String,
    /// The term: the fencing token of the leader's lease. Later leaders have higher
    /// terms.
    pub term: i64,
    /// The owner id of the leader's handle, as the lock table records it.
    pub owner: String,
    /// When the term began: the grant of the leader's lease (database clock).
    pub since: DateTime<Utc>,
    /// When the lease expires unless renewed (database clock).
    pub expires_at: DateTime<Utc>,
    /// How long until it expires, measured on the database clock when it was read.
    pub expires_in: Duration,
}

impl Leader {
    fn new(election: &str, e: Elected) -> Self {
        Self {
            election: election.to_owned(),
            identity: e.identity,
            term: e.term,
            owner: e.owner,
            since: micros_to_utc(e.acquired_us),
            expires_at: micros_to_utc(e.expires_us),
            expires_in: Duration::from_micros(
                u64::try_from(e.expires_us.saturating_sub(e.now_us)).unwrap_or(0),
            ),
        }
    }
}

impl Election {
    /// Who leads the election now, if anybody: one read.
    ///
    /// A candidate leads from the moment its identity is recorded for its term (right
    /// after its lease is granted) until its lease ends: a resignation, an expiry, a
    /// takeover. A lease on the election's key with no identity recorded for its term (a
    /// plain lock on the key, or a candidate between its grant and its claim) is no
    /// leader.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyKey`] or [`Error::KeyTooLong`] for a bad name, before any SQL is
    /// sent; [`Error::MissingTable`] when the migrations that create the leaders' table
    /// were not applied; database errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// match locker.election("scheduler").leader().await? {
    ///     Some(leader) => println!("{} leads in term {}", leader.identity, leader.term),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let key = validate::election_key(self.name())?;
        let elected = self.locker.shared.db.elect_leader(&Key(&key)).await?;
        Ok(elected.map(|e| Leader::new(self.name(), e)))
    }

    /// A watch of the election's leader, for a follower: see [`LeaderWatch`]. Sends
    /// nothing until it is first asked.
    pub fn observe(&self) -> LeaderWatch {
        LeaderWatch {
            election: self.clone(),
            last: None,
            highest: None,
            started: false,
            #[cfg(feature = "postgres")]
            wakeups: None,
        }
    }
}

/// A follower's watch of an election's leader, made by [`Election::observe`].
///
/// [`changed`](Self::changed) answers at once the first time, with the leader then
/// (or `None`), and after that each time the leadership changes: a new term, or no
/// leader any more. It reads every [poll period](Election::poll_interval), so a change
/// is seen within one period. On PostgreSQL, a resignation and a new term are seen at
/// once when both the follower's and the candidates' handles have
/// [`notify_waiters`](crate::LockerBuilder::notify_waiters) (the candidates announce,
/// the follower listens). The terms it reports only rise. A leader that came and went
/// within one period may be missed: a watch reports the leaders it saw, in order of
/// term, not necessarily every one.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sqlock::Error> {
/// use std::time::Duration;
/// use sqlock::Locker;
/// use sqlx::sqlite::SqlitePoolOptions;
///
/// let pool = SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
/// sqlock::migrate(&pool).await?;
/// let locker = Locker::builder(pool).build()?;
///
/// let follower = locker.election("scheduler").poll_interval(Duration::from_millis(10));
/// let mut watch = follower.observe();
/// assert!(watch.changed().await?.is_none()); // nobody leads yet
///
/// let leadership = locker.election("scheduler").id("10.0.0.1:8080").campaign().await?;
/// let leader = watch.changed().await?.expect("a leader");
/// assert_eq!((leader.identity.as_str(), leader.term), ("10.0.0.1:8080", leadership.term()));
///
/// leadership.resign().await?;
/// assert!(watch.changed().await?.is_none()); // nobody leads any more
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LeaderWatch {
    election: Election,
    /// The leader last reported.
    last: Option<Leader>,
    /// The highest term reported.
    highest: Option<i64>,
    started: bool,
    /// Announcements of the election's key (PostgreSQL with notifications).
    #[cfg(feature = "postgres")]
    wakeups: Option<crate::keepers::notify::Subscription>,
}

impl LeaderWatch {
    /// The leader last reported by [`changed`](Self::changed).
    pub fn current(&self) -> Option<&Leader> {
        self.last.as_ref()
    }

    /// The leader now at the first call; after that, waits for the leadership to change
    /// and tells the new state: a leader of a higher term, or `None` when nobody leads
    /// any more.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSettings`] for a zero poll interval, and as
    /// [`Election::leader`]. The watch stays usable after an error: call again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads, and a change it had not reported yet is reported by
    /// the next call.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        let poll = self.election.poll();
        if poll.is_zero() {
            return Err(Error::InvalidSettings(
                "an election's poll interval must be longer than zero".into(),
            ));
        }
        #[cfg(feature = "postgres")]
        if self.wakeups.is_none() {
            let key = validate::election_key(self.election.name())?;
            // Registered before the first read, so that no announcement after it is
            // missed.
            let notifier = self.election.locker.shared.notifier.as_ref();
            self.wakeups = notifier.map(|n| n.watch(&key));
        }
        if !self.started {
            let now = self.election.leader().await?;
            self.started = true;
            self.highest = now.as_ref().map(|l| l.term);
            self.last.clone_from(&now);
            return Ok(now);
        }
        loop {
            self.pause(poll).await;
            let now = self.election.leader().await?;
            let term = now.as_ref().map(|l| l.term);
            if term == self.last.as_ref().map(|l| l.term) {
                continue;
            }
            // Terms only rise: a term no higher than one reported is no news.
            if let (Some(t), Some(highest)) = (term, self.highest) {
                if t <= highest {
                    continue;
                }
            }
            if let Some(t) = term {
                self.highest = Some(t);
            }
            self.last.clone_from(&now);
            return Ok(now);
        }
    }

    /// Waits one poll period, or less when an announcement of the key arrives.
    async fn pause(&self, poll: Duration) {
        let sleep = tokio::time::sleep(poll);
        #[cfg(feature = "postgres")]
        if let Some(w) = &self.wakeups {
            tokio::select! {
                () = sleep => {}
                () = w.woken() => {}
            }
            return;
        }
        sleep.await;
    }
}
