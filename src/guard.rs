//! [`LockGuard`]: a held lock, and what happens when it is released or dropped.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::dialect::Grant;
use crate::error::Result;
use crate::for_update::{DbTransaction, TxHold};
use crate::locker::Inner;
use crate::sql::Args;
use crate::validate;
use crate::watchdog::{LostReason, LostSignal};

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
/// Dropping a guard that was not released gives the lock back **in the background**:
/// the release statement is spawned on the current tokio runtime and the drop never
/// blocks. So the lock may still look held for a moment after the drop. Without a
/// runtime (a drop outside of tokio) nothing is sent and the lease lapses at its
/// expiry. Call [`release`](Self::release) to know when, and whether, it happened.
#[derive(Debug)]
#[must_use = "if unused the lock is released again at once (in the background)"]
pub struct LockGuard {
    inner: Arc<Inner>,
    args: Args,
    expires_at: DateTime<Utc>,
    hold_count: u32,
    lost: LostSignal,
    /// The watchdog registration of a lease.
    registration: u64,
    /// The transaction of a for-update lock; `None` for leases.
    tx: Option<Arc<TxHold>>,
    /// Set once the lock was given back, so that Drop does not do it again.
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(
        inner: Arc<Inner>,
        args: Args,
        grant: Grant,
        (lost, registration): (LostSignal, u64),
    ) -> Self {
        Self {
            inner,
            args,
            expires_at: micros_to_utc(grant.expires_us),
            hold_count: u32::try_from(grant.hold_count).unwrap_or(0),
            lost,
            registration,
            tx: None,
            released: false,
        }
    }

    pub(crate) fn new_tx(
        inner: Arc<Inner>,
        args: Args,
        hold: Arc<TxHold>,
        lost: LostSignal,
    ) -> Self {
        Self {
            inner,
            args,
            expires_at: DateTime::<Utc>::MAX_UTC,
            hold_count: 1,
            lost,
            registration: 0,
            tx: Some(hold),
            released: false,
        }
    }

    /// The open transaction of a for-update lock, to run the holder's own statements
    /// in; `None` for the other strategies, and once the lock has ended.
    ///
    /// Statements run here commit atomically with the end of the lock
    /// ([`commit`](Self::commit)) or are rolled back with it. While the returned guard
    /// is held, the keepalive waits.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits for the transaction's mutex.
    pub async fn transaction(&self) -> Option<tokio::sync::MappedMutexGuard<'_, DbTransaction>> {
        match &self.tx {
            Some(hold) => hold.transaction().await,
            None => None,
        }
    }

    /// Ends the lock, committing the for-update lock's transaction with the holder's
    /// writes in it. For the other strategies it is [`release`](Self::release).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost) when the lock was no longer held
    /// (for a for-update lock: its connection had ended, and nothing was committed);
    /// database errors.
    pub async fn commit(self) -> Result<()> {
        let key = self.args.key.clone();
        let reason = match &self.tx {
            Some(_) => LostReason::ConnectionLost,
            None => LostReason::NotHeld,
        };
        match self.release().await? {
            true => Ok(()),
            false => Err(crate::Error::LockLost { key, reason }),
        }
    }

    /// Ends the lock, rolling back the for-update lock's transaction and every write
    /// the holder made in it. For the other strategies it is [`release`](Self::release)
    /// with its answer dropped.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub async fn rollback(mut self) -> Result<()> {
        match self.tx.take() {
            Some(hold) => {
                self.released = true;
                hold.rollback().await
            }
            None => self.release().await.map(drop),
        }
    }
    /// The signal that fires when this lock is lost: a renewal found it no longer
    /// ours (released by force, taken after it lapsed), renewals failed until it may
    /// have lapsed, or it reached its hold cap. It never fires while renewals keep the
    /// lease confirmed: a failed renewal followed by a good one is no loss.
    ///
    /// Await it, or select on it, beside the work the lock protects:
    ///
    /// ```no_run
    /// # async fn example(locker: sqlock::Locker) -> Result<(), sqlock::Error> {
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
        self.lost.clone()
    }

    /// Checks, inside the holder's own transaction on `conn`, that this lock is still
    /// held (same owner, same token, unexpired on the database clock), and keeps it so
    /// until that transaction ends: put it first in a transaction whose writes must
    /// only happen under the lock. A takeover waits for the transaction (PostgreSQL
    /// `FOR SHARE`, MariaDB `LOCK IN SHARE MODE`; on SQLite a takeover that commits
    /// first makes the transaction's write fail), so a holder that was paused past its
    /// lease cannot write after losing it.
    ///
    /// Keep a fenced transaction short, well under the renewal period: its shared row
    /// lock also holds up the renewal of this lease, and of every lease the watchdog
    /// renews in the same statement, until it ends.
    ///
    /// `conn` is a connection of the same database as the lock table, of the lock's
    /// dialect: `&mut *tx` for a `sqlx::Transaction`. Not for for-update locks, whose
    /// own transaction ([`transaction`](Self::transaction)) is fenced already.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost) when the lock is no longer held;
    /// [`Error::Unsupported`](crate::Error::Unsupported) for a connection of another
    /// dialect or a for-update lock; database errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example(pool: sqlx::PgPool, guard: sqlock::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// guard.fence(&mut *tx).await?; // fails, and nothing is written, if the lock was lost
    /// sqlx::query("UPDATE ledger SET balance = balance + 10 WHERE id = 1")
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Without a call, the same check can be written into the statement itself, with
    /// the key, owner and token bound: `... WHERE EXISTS (SELECT 1 FROM sqlock_locks
    /// WHERE lock_key = $1 AND lock_owner = $2 AND fencing_token = $3 AND locked AND
    /// expires_at > clock_timestamp() FOR SHARE)`.
    pub async fn fence<C: crate::FenceConnection>(&self, conn: &mut C) -> Result<()> {
        if self.tx.is_some() || C::dialect() != self.inner.db.dialect() {
            return Err(crate::Error::Unsupported(format!(
                "a fence check runs on a {} connection, for a lease or insert lock",
                self.inner.db.dialect()
            )));
        }
        let fence = &self.inner.stmts.fence;
        // Unnamed behind a transaction-pooling proxy, like every statement of the handle.
        let held = conn
            .check(
                fence.text(),
                &self.args.key,
                &self.args.owner,
                self.args.token,
                !fence.is_pinned(),
            )
            .await?;
        if held {
            Ok(())
        } else {
            Err(crate::Error::LockLost {
                key: self.args.key.clone(),
                reason: LostReason::NotHeld,
            })
        }
    }

    /// Whether the lock was found lost. Cheap: sends nothing.
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.args.key
    }

    /// How the lock is held in the table.
    pub fn strategy(&self) -> crate::Strategy {
        self.args.strategy
    }

    /// The owner id of the handle that holds the lock.
    pub fn owner(&self) -> Uuid {
        self.inner.owner
    }

    /// The fencing token of this grant.
    ///
    /// Tokens of one key grow strictly with every grant to a new holder (a free lock
    /// taken, or an expired one taken over), also after the key's row was deleted.
    /// A reentrant acquisition shares the token of the hold it joins. Pass the token to
    /// the resource the lock protects so that it can reject a holder whose lease has
    /// lapsed and been granted again since.
    pub fn fencing_token(&self) -> i64 {
        self.args.token
    }

    /// When the lease expires unless extended, on the database clock, as last reported
    /// by the database (at acquisition or at the last [`extend`](Self::extend)).
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.expires_at
    }

    /// How many holds this handle had on the key right after this acquisition: 1 for
    /// a first acquisition, more for a reentrant one.
    pub fn hold_count(&self) -> u32 {
        self.hold_count
    }

    /// Pushes the expiry to `ttl` from now on the database clock. Returns `false`, and
    /// changes nothing, when the lock is no longer ours: it expired, was released, or
    /// was taken by another owner.
    ///
    /// The new expiry replaces the old one, and the lost signal counts from it. While
    /// the watchdog renews the lease, its next renewal sets the expiry to the lease's
    /// own TTL from then again: extend leases that are not renewed
    /// ([`LockRequest::auto_renew`](crate::LockRequest::auto_renew)).
    ///
    /// # Errors
    ///
    /// [`Error::TtlTooShort`](crate::Error::TtlTooShort) or
    /// [`Error::TtlTooLong`](crate::Error::TtlTooLong) before any SQL is sent; database
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the extension may or may not have happened;
    /// [`expires_at`](Self::expires_at) then still shows the earlier expiry, which is
    /// the safe side.
    pub async fn extend(&mut self, ttl: Duration) -> Result<bool> {
        let mut args = self.args.clone();
        args.ttl_us = validate::ttl(ttl)?;
        if self.tx.is_some() {
            // A for-update lock has no expiry; it lasts while its transaction does.
            return Ok(!self.is_lost());
        }
        let sent = tokio::time::Instant::now();
        match self.inner.extend(&args).await? {
            Some(expires_us) => {
                self.expires_at = micros_to_utc(expires_us);
                let ttl = Duration::from_micros(u64::try_from(args.ttl_us).unwrap_or(0));
                (self.inner.watchdog).extended(&self.args.key, self.registration, sent, ttl);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Gives back this hold and tells whether the lock was still ours (same owner, same
    /// token, not expired). After a reentrant acquisition the lock stays held until
    /// every hold was released.
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
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        if let Some(hold) = self.tx.take() {
            return hold.commit().await;
        }
        // Renewal of this hold stops before the release is sent.
        self.inner
            .watchdog
            .unregister(&self.args.key, self.registration);
        self.inner.release(&self.args).await
    }
}

/// Gives the lock back in the background; see the type's docs.
impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(hold) = self.tx.take() {
            // sqlx rolls the transaction back as its connection returns to the pool.
            hold.abandon();
            return;
        }
        // Renewal of this hold stops now, whatever happens to the release.
        self.inner
            .watchdog
            .unregister(&self.args.key, self.registration);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.args.key, "guard dropped outside a tokio runtime; the lease lapses at its expiry");
            return;
        };
        let inner = self.inner.clone();
        let args = std::mem::take(&mut self.args);
        runtime.spawn(async move {
            if let Err(e) = inner.release(&args).await {
                tracing::warn!(key = %args.key, error = %e,
                    "releasing a dropped guard failed; the lease lapses at its expiry");
            }
        });
    }
}

/// Microseconds since the Unix epoch, as the SQL reports times.
pub(crate) fn micros_to_utc(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
