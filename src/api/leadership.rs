//! [`Leadership`]: a won election, held as its lease is; and [`LeaderTerm`], the
//! cloneable face of one term that the leader's work fences its writes with.

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::fence::FenceConnection;
use crate::strategy::election::claim_term;
use crate::strategy::handle::Handle;
use crate::strategy::LockId;
use crate::support::error::{Error, Result};
use crate::support::lost::{LostReason, LostSignal};

use super::guard::LockGuard;

/// The leadership of an election, won by a campaign
/// ([`Election::campaign`](crate::Election::campaign)).
///
/// It is the election's lease: the handle's watchdog renews it, and
/// [`lost`](Self::lost) fires when it was lost anyway (a renewal found it taken over
/// after the process stalled past its TTL, renewals failed until it may have lapsed, an
/// operator released it). Its [`term`](Self::term) is the lease's fencing token: every
/// later leader of the election has a higher one, so a write fenced with it
/// ([`fence`](Self::fence)) is refused once another leader took over.
///
/// # Dropping a leadership
///
/// Dropping it resigns **in the background**, as a dropped
/// [`LockGuard`](crate::LockGuard) is released: renewal stops at once, and the release
/// is sent on the current runtime. Call [`resign`](Self::resign) to know when, and
/// whether, it happened.
#[derive(Debug)]
#[must_use = "if unused the leadership is resigned again at once (in the background)"]
pub struct Leadership {
    guard: LockGuard,
    name: String,
    identity: String,
}

/// How a term of [`Leadership::run`] ended.
pub(crate) enum Ran<T> {
    /// Leadership was lost while the work ran, and the work was dropped.
    Cut(Error),
    /// The work completed: its value, unless the resignation failed or found the
    /// leadership lost.
    Done(Result<T>),
}

impl Leadership {
    /// Records `identity` as the leader of the term `guard` was granted, for the
    /// election `name`: the leadership, or `None` when the lease was lost before its
    /// term could be recorded (it is given back).
    pub(crate) async fn claim(
        guard: LockGuard,
        name: &str,
        identity: &str,
    ) -> Result<Option<Self>> {
        match claim_term(&guard.held.handle, &guard.held.id, identity).await {
            Ok(true) => Ok(Some(Self {
                guard,
                name: name.to_owned(),
                identity: identity.to_owned(),
            })),
            Ok(false) => {
                // Not ours any more: this only ends the guard's bookkeeping.
                let _ = guard.release().await;
                Ok(None)
            }
            Err(e) => {
                let _ = guard.release().await;
                Err(e)
            }
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The election's lock key.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// The identity recorded for this term.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The term: the fencing token of the election's lease. Every later leader of the
    /// election has a higher one.
    pub fn term(&self) -> i64 {
        self.guard.fencing_token()
    }

    /// The owner id of the candidate's handle, as the lock table records it.
    pub fn owner(&self) -> Uuid {
        self.guard.owner()
    }

    /// When the lease expires unless renewed, on the database clock, as the grant
    /// reported it.
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.guard.expires_at()
    }

    /// The signal that fires when leadership is lost; see
    /// [`LockGuard::lost`](crate::LockGuard::lost). Select on it beside the leader's
    /// work, or use [`Election::lead`](crate::Election::lead), which does.
    pub fn lost(&self) -> LostSignal {
        self.guard.lost()
    }

    /// Whether leadership was found lost. Cheap: sends nothing.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Why leadership was lost, if it was. Cheap: sends nothing.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.guard.lost_reason()
    }

    /// This term, to hand to the leader's work: cloneable, and able to fence writes.
    pub fn leader_term(&self) -> LeaderTerm {
        LeaderTerm {
            handle: Arc::clone(&self.guard.held.handle),
            id: self.guard.held.id.clone(),
            name: self.name.clone(),
            identity: self.identity.clone(),
            lost: self.guard.lost(),
        }
    }

    /// Checks, inside the leader's own transaction on `conn`, that this term still
    /// leads, and keeps it so until that transaction ends: see
    /// [`LockGuard::fence`](crate::LockGuard::fence). A leader paused past its TTL and
    /// replaced cannot write after it resumes.
    ///
    /// # Errors
    ///
    /// [`Error::LeadershipLost`] when the term no longer leads;
    /// [`Error::FenceNotApplicable`] for a connection of another dialect; database
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the check may or may not have run on `conn`; roll that
    /// transaction back rather than commit it.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # sqlx::raw_sql("CREATE TABLE jobs (id INTEGER PRIMARY KEY, scheduled BOOLEAN); INSERT INTO jobs VALUES (7, FALSE)").execute(&pool).await?;
    /// # let leadership = locker.election("scheduler").campaign().await?;
    /// let mut tx = pool.begin().await?;
    /// leadership.fence(&mut *tx).await?; // fails, and nothing is written, once deposed
    /// sqlx::query("UPDATE jobs SET scheduled = TRUE WHERE id = 7").execute(&mut *tx).await?;
    /// tx.commit().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fence<C: FenceConnection>(&self, conn: &mut C) -> Result<()> {
        let handle = &self.guard.held.handle;
        fence(handle, &self.guard.held.id, &self.name, conn).await
    }

    /// Gives up leadership at once: the lease is released, so the next candidate gets
    /// in at its next attempt (at once on PostgreSQL with
    /// [`notify_waiters`](crate::LockerBuilder::notify_waiters)) rather than after the
    /// TTL. Tells whether this term still led until then.
    ///
    /// # Errors
    ///
    /// Database errors. The leadership is consumed all the same; the lease then lapses
    /// at its expiry.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the release may or may not have happened; the lease
    /// lapses at its expiry at the latest.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # let leadership = locker.election("outbox-relay").campaign().await?;
    /// if !leadership.resign().await? {
    ///     eprintln!("leadership had been lost before the resignation");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }

    /// Runs `work` with this term while it leads, then resigns; see
    /// [`Election::lead`](crate::Election::lead).
    pub(crate) async fn run<F, Fut, T>(self, work: F) -> Ran<T>
    where
        F: FnOnce(LeaderTerm) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut lost = self.lost();
        let (name, term) = (self.name.clone(), self.term());
        let work = work(self.leader_term());
        let outcome = tokio::select! {
            // Checked first: when both are ready, the loss wins.
            biased;
            reason = lost.wait() => Err(reason),
            value = work => Ok(value),
        };
        let still_leading = self.resign().await;
        let lost_error = |reason| Error::LeadershipLost {
            election: name.clone(),
            term,
            reason,
        };
        match outcome {
            Err(reason) => Ran::Cut(lost_error(reason)),
            Ok(value) => Ran::Done(match still_leading {
                Ok(true) => Ok(value),
                Ok(false) => Err(lost_error(lost.reason().unwrap_or(LostReason::NotHeld))),
                Err(e) => Err(e),
            }),
        }
    }
}

/// One term of an election's leadership, as the leader's work holds it: its number, the
/// leader's identity, the lost signal, and fenced writes.
///
/// Cheap to clone and `Send + 'static`, to move into the tasks the leader starts. It
/// does not keep the leadership: that ends with the [`Leadership`] (or the
/// [`Election::lead`](crate::Election::lead) call) it came from, and from then on
/// [`fence`](Self::fence) refuses.
#[derive(Debug, Clone)]
pub struct LeaderTerm {
    handle: Arc<Handle>,
    id: LockId,
    name: String,
    identity: String,
    lost: LostSignal,
}

impl LeaderTerm {
    /// The term's number: the fencing token of the election's lease.
    pub fn term(&self) -> i64 {
        self.id.token
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The identity recorded for this term.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The signal that fires when this term's leadership is lost.
    pub fn lost(&self) -> LostSignal {
        self.lost.clone()
    }

    /// Whether this term's leadership was found lost. Cheap: sends nothing.
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// Why this term's leadership was lost, if it was. Cheap: sends nothing.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.lost.reason()
    }

    /// Checks, inside the leader's own transaction on `conn`, that this term still
    /// leads; see [`Leadership::fence`].
    ///
    /// # Errors
    ///
    /// As [`Leadership::fence`].
    ///
    /// # Cancel safety
    ///
    /// As [`Leadership::fence`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # sqlx::raw_sql("CREATE TABLE runs (term INTEGER)").execute(&pool).await?;
    /// # let election = locker.election("nightly");
    /// # election.lead(|term| async move {
    /// let mut tx = pool.begin().await?;
    /// term.fence(&mut *tx).await?;
    /// sqlx::query("INSERT INTO runs (term) VALUES ($1)")
    ///     .bind(term.term())
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?;
    /// # Ok::<(), sqlock::Error>(())
    /// # }).await??;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fence<C: FenceConnection>(&self, conn: &mut C) -> Result<()> {
        fence(&self.handle, &self.id, &self.name, conn).await
    }
}

/// The fence check of a term, its loss told as the election's.
async fn fence<C: FenceConnection>(
    handle: &Handle,
    id: &LockId,
    name: &str,
    conn: &mut C,
) -> Result<()> {
    match super::fence::check(handle, id, true, conn).await {
        Err(Error::LockLost { reason, .. }) => Err(Error::LeadershipLost {
            election: name.to_owned(),
            term: id.token,
            reason,
        }),
        other => other,
    }
}
