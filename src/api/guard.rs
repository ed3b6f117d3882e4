//! [`LockGuard`]: a held lock, and what happens when it is released or dropped.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::strategy::held::Held;
use crate::strategy::held_transaction::LentTransaction;
use crate::support::error::{Error, Result};
use crate::support::lost::{LostReason, LostSignal};
use crate::support::strategy_kind::Strategy;
use crate::support::validate::{self, parent_of, Shared};

/// A held lock.
///
/// It knows its key, its owner, its fencing token and when it expires on the database
/// clock. Give it back with [`release`](Self::release), which tells whether it was
/// still held; keep it with [`extend`](Self::extend).
///
/// A guard is `Send + 'static`: it can move into a spawned task.
///
/// While it is held the handle's watchdog renews the lease (unless renewal was turned
/// off), and [`lost`](Self::lost) tells when the lock was lost anyway.
///
/// # Dropping a guard
///
/// Dropping a guard that was not released gives the lock back **in the background**,
/// and never blocks or panics:
///
/// - a lease or insert lock: renewal stops at once, and the release statement is
///   spawned on the current tokio runtime, or, when the drop happens outside of one,
///   on the runtime the lock was acquired on. The lock may still look held for a
///   moment after the drop. If that runtime has shut down, nothing is sent and the
///   lease lapses at its expiry. That release keeps an
///   [at-least hold](crate::LockRequest::at_least) as [`release`](Self::release) does.
/// - a for-update lock: its transaction is **rolled back** (with every write the holder
///   made in it), as sqlx does with a dropped transaction, when the connection goes
///   back to the pool; outside of a runtime that happens on the runtime the lock was
///   acquired on, and if that one has shut down, the connection is closed, which ends
///   the transaction on the server as well.
///
/// Call [`release`](Self::release) to know when, and whether, it happened. For a
/// for-update lock, `release` and [`commit`](Self::commit) commit the holder's writes,
/// and [`rollback`](Self::rollback) discards them.
#[derive(Debug)]
#[must_use = "if unused the lock is released again at once (in the background)"]
pub struct LockGuard {
    /// The hold, its release and its drop (`strategy/held.rs`).
    pub(crate) held: Held,
}

impl LockGuard {
    /// The guard of a lock held already.
    pub(crate) fn from_held(held: Held) -> Self {
        Self { held }
    }

    /// The open transaction of a for-update lock, to run the holder's own statements
    /// in; `None` for the other strategies, and once the lock has ended (or was found
    /// lost).
    ///
    /// Statements run here commit atomically with the end of the lock
    /// ([`commit`](Self::commit)) or are rolled back with it. While the returned loan
    /// is held, the keepalive waits; when it is dropped the lock checks at once that
    /// its transaction is still open (see [`LentTransaction`]), and the
    /// [lost signal](Self::lost) fires if a statement of yours ended it.
    ///
    /// The transaction is the connection's as the pool made it: no setting the lock
    /// used while it was being taken (PostgreSQL's `lock_timeout`) is in force.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits for the transaction's mutex.
    ///
    /// # Examples
    ///
    /// Not run as a doctest: a for-update lock needs PostgreSQL or MariaDB, and the
    /// doctests have SQLite.
    ///
    /// ```no_run
    /// # async fn example(guard: sqlock::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
    /// if let Some(mut tx) = guard.transaction().await {
    ///     if let Some(pg) = tx.as_postgres_mut() {
    ///         sqlx::query("UPDATE jobs SET done = TRUE WHERE id = 7").execute(&mut **pg).await?;
    ///     }
    /// } // the loan ends here: the lock checks that its transaction is still open
    /// guard.commit().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn transaction(&self) -> Option<LentTransaction<'_>> {
        self.held.hold.transaction().await
    }

    /// Ends the lock, committing the for-update lock's transaction with the holder's
    /// writes in it. For the other strategies it is [`release`](Self::release).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](Error::LockLost) when the lock was no longer held
    /// (for a for-update lock: its connection had ended, and nothing was committed);
    /// database errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the commit may or may not have happened; a for-update
    /// lock's transaction that was not committed is rolled back when its connection goes
    /// back to the pool, and a lease lapses at its expiry at the latest.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # let guard = locker.acquire("nightly-report").await?;
    /// // ... writes in guard.transaction() ...
    /// match guard.commit().await {
    ///     Ok(()) => println!("the writes and the end of the lock committed together"),
    ///     Err(sqlock::Error::LockLost { reason, .. }) => eprintln!("nothing committed: {reason}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn commit(self) -> Result<()> {
        let key = self.held.id.key.clone();
        let lost = self.held.lost.clone();
        let default = self.held.hold.default_loss();
        match self.release().await? {
            true => Ok(()),
            false => Err(Error::LockLost {
                key,
                reason: lost.reason().unwrap_or(default),
            }),
        }
    }

    /// Ends the lock, rolling back the for-update lock's transaction and every write
    /// the holder made in it. For the other strategies it is [`release`](Self::release)
    /// with its answer dropped.
    ///
    /// # Errors
    ///
    /// Database errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the rollback may or may not have been sent; a transaction
    /// that was not rolled back is rolled back when its connection goes back to the pool.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # let guard = locker.acquire("nightly-report").await?;
    /// // ... writes in guard.transaction() that turned out wrong ...
    /// guard.rollback().await?; // the writes are discarded, and the lock ends
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rollback(self) -> Result<()> {
        self.held.rollback().await
    }
    /// The signal that fires when this lock is lost: a renewal found it no longer
    /// ours (released by force, taken after it lapsed), renewals failed until it may
    /// have lapsed, or it reached its hold cap. It never fires while renewals keep the
    /// lease confirmed: a failed renewal followed by a good one is no loss.
    ///
    /// Await it, or select on it, beside the work the lock protects:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # async fn do_the_work(_token: i64) {}
    /// let guard = locker.acquire("nightly-report").await?;
    /// let mut lost = guard.lost();
    /// tokio::select! {
    ///     reason = lost.wait() => eprintln!("lock lost ({reason}); stopping the work"),
    ///     () = do_the_work(guard.fencing_token()) => {}
    /// }
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> LostSignal {
        self.held.lost.clone()
    }

    /// Whether the lock was found lost. Cheap: sends nothing.
    pub fn is_lost(&self) -> bool {
        self.held.lost.is_lost()
    }

    /// Why the lock was lost, if it was: the reason its [`lost`](Self::lost) signal
    /// fired with. Cheap: sends nothing.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.held.lost.reason()
    }

    /// The lock's key; for a read of a read-write lock, the lock's name (the read's
    /// own row, which [`Locker::list`](crate::Locker::list) shows, is internal).
    pub fn key(&self) -> &str {
        match parent_of(&self.held.id.key) {
            Some((name, Shared::Read)) => name,
            _ => &self.held.id.key,
        }
    }

    /// How the lock is held in the table.
    pub fn strategy(&self) -> Strategy {
        self.held.id.strategy
    }

    /// The owner id of the handle that holds the lock.
    pub fn owner(&self) -> Uuid {
        self.held.handle.owner
    }

    /// The fencing token of this grant.
    ///
    /// Tokens of one key grow strictly with every grant to a new holder (a free lock
    /// taken, or an expired one taken over), also after the key's row was deleted.
    /// A reentrant acquisition shares the token of the hold it joins. Pass the token to
    /// the resource the lock protects so that it can reject a holder whose lease has
    /// lapsed and been granted again since.
    pub fn fencing_token(&self) -> i64 {
        self.held.id.token
    }

    /// When the lease expires unless extended, on the database clock, as last reported
    /// by the database (at acquisition or at the last [`extend`](Self::extend)).
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.held.hold.expires_at()
    }

    /// How many holds this handle had on the key right after this acquisition: 1 for
    /// a first acquisition, more for a reentrant one.
    pub fn hold_count(&self) -> u32 {
        self.held.hold.hold_count()
    }

    /// Pushes the expiry to at least `ttl` from now on the database clock. Returns
    /// `false`, and changes nothing, when the lock is no longer ours: it expired, was
    /// released, or was taken by another owner.
    ///
    /// An extension never shortens a lease: an expiry already later stays. Renewals by
    /// the watchdog keep the longer expiry too (they renew to at least the lease's own
    /// TTL from then), and the [lost signal](Self::lost) counts to it: it fires no later
    /// than the moment another owner could be granted the key.
    ///
    /// # Errors
    ///
    /// [`Error::TtlTooShort`](Error::TtlTooShort) or
    /// [`Error::TtlTooLong`](Error::TtlTooLong) before any SQL is sent; database
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the extension may or may not have happened;
    /// [`expires_at`](Self::expires_at) then still shows the earlier expiry, which is
    /// the safe side.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// # let mut guard = locker.acquire("nightly-report").await?;
    /// use std::time::Duration;
    ///
    /// if !guard.extend(Duration::from_secs(120)).await? {
    ///     eprintln!("the lock was lost before it could be extended");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&mut self, ttl: Duration) -> Result<bool> {
        validate::ttl(ttl)?;
        self.held
            .hold
            .extend(&self.held.handle, &self.held.id, ttl, &self.held.lost)
            .await
    }

    /// Gives back this hold and tells whether the lock was still ours (same owner, same
    /// token, not expired). After a reentrant acquisition the lock stays held until
    /// every hold was released. A lock taken with an
    /// [at-least hold](crate::LockRequest::at_least) is kept until that hold ends, and
    /// frees itself then.
    ///
    /// # Errors
    ///
    /// Database errors. The guard is consumed all the same; the lease then lapses at
    /// its expiry.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the release may or may not have happened; nothing is
    /// retried in the background, and the lease lapses at its expiry at the latest.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// let guard = locker.acquire("nightly-report").await?;
    /// // ... the work ...
    /// if !guard.release().await? {
    ///     eprintln!("the lock had been lost: check the work's fencing token");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<bool> {
        self.held.release().await
    }
}
