//! The lost signal: how a holder learns that its lock is gone, and why.
//!
//! Every guard has one. The watchdog fires it for leases (a renewal found the lease no
//! longer ours or revoked by an operator, or renewals failed until it may have lapsed,
//! or its hold cap was reached); a for-update lock fires it when its transaction or
//! connection ended.

use tokio::sync::watch;

/// Why a lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// A renewal found the lease no longer ours: released at once by an operator
    /// ([`Locker::force_release_now`](crate::Locker::force_release_now)), taken by
    /// another owner after it lapsed, or its row deleted.
    NotHeld,
    /// Renewals kept failing (the database unreachable, say) until the lease may have
    /// lapsed.
    Lapsed,
    /// The lease reached its cap on total hold time and expired.
    HoldCapReached,
    /// The connection that held a for-update lock's transaction ended (killed, timed
    /// out as idle in transaction, the server gone), and the lock with it.
    ConnectionLost,
    /// A for-update lock's transaction ended while its connection lived on: a statement
    /// the holder ran in it failed and the server rolled the transaction back (a
    /// deadlock or lock wait timeout on MariaDB; any error on PostgreSQL, where the
    /// transaction can then only roll back).
    TransactionEnded,
    /// Another owner took the lease before its expiry because the handle's presence
    /// marker was free for a while, as from a crashed holder, though the process
    /// lives on: both of the handle's presence connections ended (killed on the
    /// server, a network cut that outlasted the server's patience) before it could
    /// take the marker back (see
    /// [`LockerBuilder::presence`](crate::LockerBuilder::presence)). A single ended
    /// presence connection costs nothing. Signalled as soon as the handle checks its
    /// leases: when it takes its marker back (one connection set-up and a round
    /// trip), or within 25 ms while it cannot. Fence the holder's writes.
    PresenceLost,
    /// An operator revoked the lock
    /// ([`Locker::force_release`](crate::Locker::force_release), `sqlock release
    /// --force`): stop the work and give the lock back (release the guard, or drop it).
    /// The key stays busy for everyone until then, or until the lease's expiry as it
    /// stood when it was revoked, whichever comes first: nobody else holds it while the
    /// work may still run, and the holder's fenced writes still pass meanwhile.
    /// Signalled at the lease's next renewal, or at once on PostgreSQL when the
    /// handle's family listens for notifications
    /// ([`LockerBuilder::notify_waiters`](crate::LockerBuilder::notify_waiters)). A lease
    /// the watchdog does not renew (auto-renewal off, or past its hold cap) is not
    /// told.
    Revoked,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotHeld => "the lease is no longer held by this owner",
            Self::Lapsed => "renewals failed until the lease may have lapsed",
            Self::HoldCapReached => "the lease reached its hold cap and expired",
            Self::ConnectionLost => "the connection holding the lock's transaction ended",
            Self::TransactionEnded => {
                "the lock's transaction ended: a statement in it failed and rolled it back"
            }
            Self::PresenceLost => {
                "the handle's presence connections ended, and another owner took the lease"
            }
            Self::Revoked => "an operator revoked the lock: it is to be given back",
        })
    }
}

/// A signal that fires when a held lock is lost; see [`LockGuard::lost`](crate::LockGuard::lost).
///
/// Clone it freely and move it into other tasks; it outlives the guard, and once fired
/// it stays fired.
#[derive(Debug, Clone)]
pub struct LostSignal {
    rx: watch::Receiver<Option<LostReason>>,
}

impl From<watch::Receiver<Option<LostReason>>> for LostSignal {
    fn from(rx: watch::Receiver<Option<LostReason>>) -> Self {
        Self { rx }
    }
}

impl LostSignal {
    /// Whether the lock was lost. Cheap: reads a shared value, sends nothing.
    pub fn is_lost(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// Why the lock was lost, if it was.
    pub fn reason(&self) -> Option<LostReason> {
        *self.rx.borrow()
    }

    /// Waits until the lock is lost and tells why. Returns at once if it already was.
    ///
    /// If the guard is released or dropped first, this waits forever: select it
    /// against the work the lock protects, as in the README's example.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
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
    /// let mut lost = guard.lost();
    /// tokio::spawn(async move {
    ///     let reason = lost.wait().await;
    ///     eprintln!("lock lost: {reason}");
    /// });
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait(&mut self) -> LostReason {
        // The value is copied out before anything else is awaited: the watch's read
        // guard must not live across an await, or this future would not be `Send`.
        let reason = self.rx.wait_for(Option::is_some).await.map(|r| *r);
        match reason {
            Ok(reason) => reason.unwrap_or(LostReason::NotHeld),
            // The watchdog dropped the sender without firing: the guard was released.
            Err(_) => std::future::pending().await,
        }
    }
}
