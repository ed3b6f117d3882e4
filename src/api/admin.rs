//! The operator's calls on a lock table: what is held ([`Locker::list`], and one key
//! with [`Locker::lock_info`]) and taking a lock from its holder: safely, by revoking
//! it ([`Locker::force_release`]), or at once for a holder known to be gone
//! ([`Locker::force_release_now`]). None of them waits on a lock another transaction
//! holds. Sweeps are in `sweeping.rs`.

use std::time::Duration;

use crate::db::retry::{retry_contention, retry_failure};
use crate::db::values::{Key, Limit, Parent};
use crate::db::{Failure, Listed};
use crate::support::error::{Class, Error, Result};
use crate::support::validate;

use super::locker::Locker;

/// The most locks [`Locker::list`] reports.
pub const MAX_LISTED: usize = 100_000;

/// A held lock, as [`Locker::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The key.
    pub key: String,
    /// The strategy that holds it (`lease`, `insert` or `fair`; `write` for the write
    /// side of a [read-write lock](Locker::write_lock), a lease); for a name held in
    /// shared mode, the mode: `read` (by reads of the
    /// [read-write lock](Locker::read_lock) of that name) or `semaphore` (by permits of
    /// the [semaphore](crate::Semaphore) of that name).
    pub strategy: String,
    /// The owner id of the holding handle; empty for a name held in shared mode, whose
    /// holders are its reads or permits, each listed with its own key and owner.
    pub owner: String,
    /// The fencing token of the current grant.
    pub fencing_token: i64,
    /// How many reentrant holds the owner has: 0 while an
    /// [at-least hold](crate::LockRequest::at_least) keeps a lock its owner released.
    /// For a name held in shared mode: how many reads or permits hold it (one that
    /// died unreleased counts until the name expires).
    pub hold_count: u32,
    /// When the current holder took it (database clock); a re-entry keeps it.
    pub acquired_at: chrono::DateTime<chrono::Utc>,
    /// When it expires unless renewed (database clock).
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// How long until it expires, measured on the database clock.
    pub expires_in: Duration,
    /// How many live waiters of the fair strategy are queued for it.
    pub waiters: u64,
    /// Whether its holder is gone: the holder had
    /// [presence](crate::LockerBuilder::presence), its process died (or every
    /// connection of its presence was ended), and the next acquisition of the key takes
    /// it at once, before `expires_at`. Always `false` without presence: such a holder
    /// cannot be told from a live one that is slow, and keeps the lock to its expiry.
    pub holder_gone: bool,
}

impl From<Listed> for LockInfo {
    fn from(l: Listed) -> Self {
        use crate::strategy::lease::micros_to_utc;
        Self {
            key: l.key,
            strategy: l.strategy,
            owner: l.owner,
            fencing_token: l.token,
            hold_count: u32::try_from(l.hold_count).unwrap_or(0),
            acquired_at: micros_to_utc(l.acquired_us),
            expires_at: micros_to_utc(l.expires_us),
            expires_in: Duration::from_micros(
                u64::try_from(l.expires_us.saturating_sub(l.now_us)).unwrap_or(0),
            ),
            waiters: u64::try_from(l.waiters).unwrap_or(0),
            holder_gone: l.gone,
        }
    }
}

/// What [`Locker::force_release`] did to a held lock: its holds were revoked, and the
/// key stays busy until its holder gives it back, or until
/// [`lock.expires_at`](LockInfo::expires_at) at the latest.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Revocation {
    /// How many holds this call revoked: 1 for a lock of any strategy, a read or a
    /// permit; for a name held in shared mode, its live reads and permits (and its
    /// write side, in a downgrade). 0 when the lock had no hold left to revoke: it was
    /// revoked before, or an [at-least hold](crate::LockRequest::at_least) keeps it
    /// after its owner released it. Either way it frees at its expiry at the latest.
    pub revoked: u64,
    /// The lock as it stands once revoked, on the database clock: its owner and
    /// fencing token (the holder's, unchanged), and
    /// [`expires_at`](LockInfo::expires_at), the latest instant the key stays busy
    /// (nothing can push it any more). For a name held in shared mode,
    /// [`hold_count`](LockInfo::hold_count) still counts the holds revoked until each
    /// gives itself back, and reads or permits granted since are counted too.
    pub lock: LockInfo,
}

impl Locker {
    /// Revokes the lock on `key` whoever holds it: the operator's safe way to take a
    /// lock from a holder that should stop. Returns what it revoked, or `None` when
    /// nothing was held.
    ///
    /// The lock keeps its holder, fencing token and expiry, and loses its holds. Its
    /// holder is told: its renewals fail (so do its extensions), and its
    /// [lost signal](crate::LockGuard::lost) fires with [`LostReason::Revoked`] at its
    /// next renewal, or at once on PostgreSQL when the holder's handle listens for
    /// notifications ([`LockerBuilder::notify_waiters`](crate::LockerBuilder::notify_waiters)).
    /// The holder then stops its work and gives the lock back
    /// ([`LockGuard::release`](crate::LockGuard::release), which answers `true`, or a
    /// dropped guard); `sqlock run` stops its command first.
    ///
    /// The key is free to others once the holder gives it back, or at the expiry the
    /// lease had when it was revoked ([`Revocation::lock`]'s `expires_at`), whichever
    /// comes first, never before: so no other holder runs while the revoked one may
    /// still run. Until then the key is busy for everyone, the holder's own handle
    /// included, and the holder's fenced writes still pass (nobody else can hold the
    /// key meanwhile). A holder that never gives it back (a paused process, a lease not
    /// renewed) keeps the key until that expiry. Use
    /// [`force_release_now`](Self::force_release_now) only when the holder is known to
    /// be gone.
    ///
    /// A [fair](crate::Strategy::Fair) lock's waiters keep their places: the holder's
    /// give-back hands it to the first live one as any release does, and so does the
    /// first waiter's poll once the lease lapses. A name held in shared mode (by reads
    /// of a [read-write lock](Locker::read_lock), or permits of a
    /// [semaphore](crate::Semaphore)) has each of its reads and permits revoked (and
    /// its write side, in a downgrade): each holder is told as above, and each give-back
    /// counts the name one hold less. Reads or permits granted after the call are not
    /// revoked, and keep the name held. The key of one read or permit revokes that hold
    /// alone. An election's lease revoked ends its leader's term when it gives it back.
    ///
    /// A for-update lock cannot be revoked: it is a row lock in its holder's
    /// transaction and ends with that transaction (end the holder's session to free
    /// it). The call never waits for it: it tries again for about two seconds while
    /// the key's row stays locked, then answers [`Error::RowLocked`].
    ///
    /// # Errors
    ///
    /// Bad keys before any SQL is sent; [`Error::RowLocked`]; database errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the revocation may or may not have happened: it is one
    /// transaction, all or nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// if let Some(r) = locker.force_release("nightly-report").await? {
    ///     println!("revoked; {} gives it back, or it frees at {} at the latest",
    ///         r.lock.owner, r.lock.expires_at);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`LostReason::Revoked`]: crate::LostReason::Revoked
    pub async fn force_release(&self, key: &str) -> Result<Option<Revocation>> {
        validate::key(key)?;
        let k = Key(key);
        let db = &self.shared.db;
        let hold = Parent::of(key).is_some();
        let (revoked, lock) =
            retry_failure(|| db.revoke(&k, hold))
                .await
                .map_err(|f| match f.class {
                    Class::Contention => Error::RowLocked {
                        key: key.to_owned(),
                    },
                    _ => f.error,
                })?;
        Ok(lock.map(|l| Revocation {
            revoked,
            lock: LockInfo::from(l),
        }))
    }

    /// Releases the lock on `key` whoever holds it, at once: for an operator who knows
    /// its holder is gone (its process and host dead, or fenced off). Returns whether
    /// a live lease (or insert lock) was released.
    ///
    /// **Two holders may run at once**: the key is free to others from this call on,
    /// while a holder that is still alive runs on until its next renewal (a third of
    /// its TTL by default) tells it, and its work may overlap the next holder's. Its
    /// fenced writes fail from now on. Prefer [`force_release`](Self::force_release),
    /// which waits for the holder to give the lock back (or for its lease to lapse).
    ///
    /// The key's fencing token moves on, so the old holder's renewals, releases and
    /// fenced writes fail from now on, and its [lost signal](crate::LockGuard::lost) fires
    /// within one renewal period, with [`LostReason::NotHeld`].
    ///
    /// [`LostReason::NotHeld`]: crate::LostReason::NotHeld
    ///
    /// A key with [fair](crate::Strategy::Fair) waiters queued is handed to the first
    /// live one in the release's own transaction, under the key's gate: no newcomer of
    /// any strategy takes it between. Waiters for the key in this process look at once,
    /// as after a holder's release; those of other processes at their next poll (or
    /// notification).
    ///
    /// A name held in shared mode (by reads of a [read-write lock](Locker::read_lock),
    /// or permits of a [semaphore](crate::Semaphore)) is released with every read and
    /// permit that holds it, in one transaction: their tokens move on, and each holder
    /// learns of it at its next renewal. The reads of a name are released with it too
    /// when the name is held as a write side (a downgrade under way). The key of one
    /// read or permit releases that hold alone, and its name counts one hold less (the
    /// last frees it).
    ///
    /// A for-update lock cannot be released this way: it is a row lock in its holder's
    /// transaction and ends with that transaction (end the holder's session to free
    /// it). The call never waits for it: it tries again for about two seconds while
    /// the key's row stays locked, then answers [`Error::RowLocked`].
    ///
    /// # Errors
    ///
    /// Bad keys before any SQL is sent; [`Error::RowLocked`]; database errors.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped the release may or may not have happened.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// # let locker = sqlock::Locker::new(pool.clone())?;
    /// if locker.force_release_now("nightly-report").await? {
    ///     println!("released a lock whose holder is gone");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_release_now(&self, key: &str) -> Result<bool> {
        validate::key(key)?;
        let k = Key(key);
        let db = &self.shared.db;
        let failed = |f: Failure| match f.class {
            Class::Contention => Error::RowLocked {
                key: key.to_owned(),
            },
            _ => f.error,
        };
        // One read or permit: its name counts one hold less in the same transaction.
        if let Some(name) = Parent::of(key) {
            let freed = retry_failure(|| db.force_release_hold(&k, &name))
                .await
                .map_err(failed)?;
            if freed {
                crate::keepers::wake::released(&self.shared.wake_scope, key);
            }
            return Ok(freed);
        }
        // The holds of the name in shared mode first (never the name freed while a
        // read or permit of it is live), then the name as any lock: a fair lock's
        // waiters get it next, in their order, in the release's own transaction.
        let shared = retry_failure(|| db.force_release_shared(&k))
            .await
            .map_err(failed)?;
        let released = retry_failure(|| db.force_release(&k))
            .await
            .map_err(failed)?;
        let freed = shared > 0 || released;
        // This process's waiters of the key look at once, as after a holder's release.
        if freed {
            crate::keepers::wake::released(&self.shared.wake_scope, key);
        }
        Ok(freed)
    }

    /// The locks held now in this handle's table, whoever holds them, ordered by key
    /// (at most [`MAX_LISTED`]), each saying whether its holder is gone
    /// ([`LockInfo::holder_gone`]). Times are the database's.
    ///
    /// # Errors
    ///
    /// [`Error::MissingTable`], [`Error::Database`].
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
    /// for lock in locker.list().await? {
    ///     println!("{} held by {} (token {}), {:?} left", lock.key, lock.owner,
    ///         lock.fencing_token, lock.expires_in);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list(&self) -> Result<Vec<LockInfo>> {
        let limit = Limit(i64::try_from(MAX_LISTED).unwrap_or(i64::MAX));
        let rows = retry_contention(|| self.shared.db.list(&limit)).await?;
        Ok(rows.into_iter().map(LockInfo::from).collect())
    }

    /// The lock on `key` if it is held now (a lease or insert lock, unexpired on the
    /// database clock), as [`list`](Self::list) reports it; `None` when it is free. A
    /// for-update lock is not seen: it lives in its holder's transaction.
    ///
    /// One statement, a lookup by primary key; it takes no lock but, for a holder with
    /// presence, a look at its marker ([`LockInfo::holder_gone`]: on PostgreSQL a
    /// shared advisory lock tried for the statement alone, on SQLite the marker file's
    /// lock tried and let go at once).
    ///
    /// # Errors
    ///
    /// Bad keys before any SQL is sent; [`Error::MissingTable`], [`Error::Database`].
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
    /// match locker.lock_info("nightly-report").await? {
    ///     Some(info) => println!("held by {} for {:?} more", info.owner, info.expires_in),
    ///     None => println!("free"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_info(&self, key: &str) -> Result<Option<LockInfo>> {
        validate::key(key)?;
        let k = Key(key);
        let row = retry_contention(|| self.shared.db.lookup(&k)).await?;
        Ok(row.map(LockInfo::from))
    }

    /// The highest quorum token written on this database for `key`, 0 when none was:
    /// at least the fencing token of the last [`Quorum`](crate::Quorum) lock of `key`
    /// granted with this database in its majority (a round that raised the token here
    /// and then lost leaves it higher). One database's view of a quorum lock, as
    /// `sqlock status` shows it with several `--database-url`.
    ///
    /// # Errors
    ///
    /// Bad keys before any SQL is sent; [`Error::MissingTable`] when the quorum's
    /// token table (a migration of its own) is missing; [`Error::Database`].
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
    /// // No quorum lock of the key was ever granted here.
    /// assert_eq!(locker.quorum_token("nightly-report").await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn quorum_token(&self, key: &str) -> Result<i64> {
        validate::key(key)?;
        let k = Key(key);
        retry_contention(|| self.shared.db.quorum_seen(&k)).await
    }
}
