//! The ways sqlock can hold a lock in a table, by name, and when to choose which: the
//! [`Strategy`] a handle or a request names. Their protocols live in `strategy/`; this
//! is the name alone, which the errors and the database's rows speak of too.

use std::fmt;
use std::str::FromStr;

/// How a lock is held in the table. Chosen per handle
/// ([`LockerBuilder::strategy`](crate::LockerBuilder::strategy)) or per request
/// ([`LockRequest::strategy`](crate::LockRequest::strategy)); everything else (the
/// API, deadlines, fencing tokens, the watchdog and the lost signal, cancel safety) is
/// the same.
///
/// | strategy | a held lock is | a free lock is | choose it when |
/// |---|---|---|---|
/// | [`Lease`](Self::Lease) | a row with an owner and an expiry | a row marked free | the default: cheapest to take again, rows are reused |
/// | [`Insert`](Self::Insert) | a row with an owner and an expiry | no row at all | keys are many and short-lived, or the table should only show what is held |
/// | [`ForUpdate`](Self::ForUpdate) | a row lock in an open transaction | a row nobody locks | the holder's writes must commit with the lock, or a dead holder must free it at once; not on Galera (refused there) |
/// | [`Fair`](Self::Fair) | a lease row, handed on in order of arrival | a row marked free | waiters must be served first come, first served, each release handing the lock straight to the next |
///
/// # One key, one strategy
///
/// The strategies share the table, and the database holds a key for one strategy at a
/// time: an acquisition of a key that a lock of another strategy holds sees it as held,
/// as it would a holder of its own strategy. [`try_acquire`](crate::Locker::try_acquire)
/// answers `Ok(None)` at once, [`acquire_timeout`](crate::Locker::acquire_timeout)
/// answers [`Error::Timeout`](crate::Error::Timeout) at its deadline, no acquisition
/// takes over a live hold of another strategy, and none waits on another strategy's
/// row lock past the caller's own bound. Busy is busy: no error names another holder's
/// strategy. Mixing strategies on a key is allowed, but each hold only excludes.
///
/// A handle's own hold is the exception: asking for a key the same handle (or a clone
/// of it) holds with another strategy is refused with
/// [`Error::StrategyConflict`](crate::Error::StrategyConflict) before any SQL is sent,
/// rather than taken as a re-entry; a re-entry keeps the strategy the key is held
/// with. The database enforces the same: its acquisition re-enters a hold only of the
/// same owner *and* strategy.
///
/// Lease, insert and fair locks appear in [`Locker::list`](crate::Locker::list) and can be
/// revoked by [`Locker::force_release`](crate::Locker::force_release) (or released at
/// once by [`Locker::force_release_now`](crate::Locker::force_release_now)); a for-update
/// lock does not appear, being invisible outside its transaction, and ends only with
/// its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// A lease row, taken by one atomic upsert when it is free, expired or already
    /// ours, and marked free again at release; the sweeper reclaims rows left free.
    #[default]
    Lease,
    /// A unique-index insert: the row exists only while the lock is held and is
    /// deleted at release. An expired row is taken over inline by the next acquirer
    /// (and reclaimed by the sweeper), so a crashed holder blocks others for at most
    /// its TTL; the insert never fails a transaction (it is an upsert on PostgreSQL,
    /// and MariaDB's duplicate-key deadlocks are retried as contention).
    Insert,
    /// `SELECT ... FOR UPDATE` on the key's row in an open transaction, held until the
    /// guard commits or rolls back, or the connection dies. The database frees it the
    /// moment the holder is gone, with no TTL to wait out, and the guard lends its
    /// transaction so the holder's writes commit atomically with the lock's end. It
    /// holds a pooled connection for the whole hold (size the pool for it); a keepalive
    /// notices a connection the server ended. PostgreSQL and MariaDB only.
    ForUpdate,
    /// A lease whose waiters queue in order of arrival: each waiter takes a ticket in
    /// the queue table (`<table>_queue`), and a release hands the lock, in the same
    /// transaction, to the first live waiter, so that no newcomer can slip in between
    /// and waiters are served first come, first served. Held, the lock is a lease like
    /// any other (renewed by the watchdog, extended, released by force, listed).
    ///
    /// - A waiter's place is a lease of its own, renewed as it waits: a waiter that
    ///   died is skipped once its place lapses (its TTL), and a waiter that stops
    ///   waiting (its future dropped, its deadline met) leaves the queue at once; a
    ///   grant handed to it meanwhile goes on to the next waiter.
    /// - [`try_acquire`](crate::Locker::try_acquire) never jumps the queue: with
    ///   waiters queued it is busy, even at the instant the lock is handed over.
    /// - Only the first waiter polls for the lock (at the handle's poll interval);
    ///   those behind it keep their place with about one statement a second. With
    ///   [`notify_waiters`](crate::LockerBuilder::notify_waiters) on PostgreSQL, the
    ///   waiter the lock was handed to is woken at once by a notification naming it.
    /// - It is a strategy of its own, not an option of a request, because the
    ///   database must know it: the row records `fair`, a waiter of the other
    ///   strategies sees a fair holder as held, and a fair waiter never takes the key
    ///   from a holder of another strategy.
    ///
    /// Needs the queue table of the migration `20261126000001_create_sqlock_queue`.
    Fair,
}

impl Strategy {
    /// The name recorded in the `lock_strategy` column and used by the command-line
    /// tool: `lease`, `insert`, `for-update` or `fair`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lease => "lease",
            Self::Insert => "insert",
            Self::ForUpdate => "for-update",
            Self::Fair => "fair",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a [`Strategy`] from a name it does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy {0:?}: expected lease, insert, for-update or fair")]
pub struct UnknownStrategy(pub String);

impl FromStr for Strategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lease" => Ok(Self::Lease),
            "insert" => Ok(Self::Insert),
            "for-update" => Ok(Self::ForUpdate),
            "fair" => Ok(Self::Fair),
            other => Err(UnknownStrategy(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [
            Strategy::Lease,
            Strategy::Insert,
            Strategy::ForUpdate,
            Strategy::Fair,
        ] {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
        }
        assert!("for_update".parse::<Strategy>().is_err());
    }
}
