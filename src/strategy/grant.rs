//! What the strategies speak in: an [`Ask`] (what an acquisition asks for), what one
//! attempt [`Granted`], and the [`LockId`] that names a grant while it is held.

use std::time::Duration;

use crate::db::statement::Statement;
use crate::db::values::{self, Held};
use crate::db::{DbTransaction, Grant};
use crate::support::strategy_kind::Strategy;

/// What the row of the write side of a read-write lock records as its strategy. The
/// write side is a lease to its user ([`Strategy::Lease`]), and a holder of its own to
/// the database: a read of its owner is granted beside it (a downgrade), and its
/// release leaves the name to that read (`rw_release.sql`), which no other lock of the
/// owner on the name may be taken for.
pub(crate) const WRITE_SIDE: &str = "write";

/// What an acquisition asks for: a key, the strategy to hold it with, and a lease's
/// TTL (validated); `write`: as the write side of the read-write lock `key` (a lease,
/// recorded as [`WRITE_SIDE`]).
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) key: String,
    pub(crate) strategy: Strategy,
    pub(crate) ttl: Duration,
    pub(crate) write: bool,
}

impl Ask {
    /// The TTL in whole microseconds, the unit the SQL works in (in range: validated).
    pub(crate) fn ttl_us(&self) -> i64 {
        i64::try_from(self.ttl.as_micros()).unwrap_or(i64::MAX)
    }

    /// The strategy the row records for this ask: the strategy's name, or
    /// [`WRITE_SIDE`].
    pub(crate) fn recorded(&self) -> &'static str {
        if self.write {
            WRITE_SIDE
        } else {
            self.strategy.name()
        }
    }

    /// The name of a grant to this ask with `token`: the one way a grant of an ask is
    /// named, so that every release of it (its guard's, a dropped guard's, the give-back
    /// of an attempt nobody waits for) knows a write side for one.
    pub(crate) fn id(&self, token: i64) -> LockId {
        LockId {
            key: self.key.clone(),
            strategy: self.strategy,
            token,
            rw_write: self.write,
        }
    }
}

/// One grant, by what names it: the key, the strategy it is held with, its token.
#[derive(Debug, Clone)]
pub(crate) struct LockId {
    pub(crate) key: String,
    pub(crate) strategy: Strategy,
    pub(crate) token: i64,
    /// Held as the write side of the read-write lock `key` (its row records
    /// [`WRITE_SIDE`]): every release of it is the write side's, whose last hold leaves
    /// the name to the owner's own read, if it holds one (a downgrade), in shared mode
    /// (`release.rs`). Set from the [`Ask`] ([`Ask::id`]).
    pub(crate) rw_write: bool,
}

impl LockId {
    /// The span of one release of this grant by `owner`.
    pub(crate) fn release_span(&self, owner: &str) -> tracing::Span {
        tracing::info_span!("sqlock.release", key = %self.key, strategy = %self.strategy,
            owner, token = self.token)
    }

    /// The grant as the statements that act on it take it.
    pub(crate) fn held<'a>(&'a self, owner: &'a str) -> values::Held<'a> {
        values::Held {
            key: &self.key,
            owner,
            token: self.token,
        }
    }
}

/// What one attempt took.
#[derive(Debug)]
pub(crate) enum Granted {
    /// A lease or insert row.
    Lease(Grant),
    /// A row lock in an open transaction, with the statement that checks the
    /// transaction still shows the grant, and the grant's token.
    Tx(DbTransaction, Statement<Held<'static>>, i64),
}
