//! What the strategies speak in: an [`Ask`] (what an acquisition asks for), what one
//! attempt [`Granted`], and the [`LockId`] that names a grant while it is held.

use std::time::Duration;

use crate::db::statement::Statement;
use crate::db::values::{self, Held};
use crate::db::{DbTransaction, Grant};
use crate::support::strategy_kind::Strategy;

/// What an acquisition asks for: a key, the strategy to hold it with, and a lease's
/// TTL (validated).
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) key: String,
    pub(crate) strategy: Strategy,
    pub(crate) ttl: Duration,
}

impl Ask {
    /// The TTL in whole microseconds, the unit the SQL works in (in range: validated).
    pub(crate) fn ttl_us(&self) -> i64 {
        i64::try_from(self.ttl.as_micros()).unwrap_or(i64::MAX)
    }
}

/// One grant, by what names it: the key, the strategy it is held with, its token.
#[derive(Debug, Clone)]
pub(crate) struct LockId {
    pub(crate) key: String,
    pub(crate) strategy: Strategy,
    pub(crate) token: i64,
    /// Held as the write side of the read-write lock `key`: its last release leaves
    /// the name to the owner's own read, if it holds one (a downgrade), in shared mode
    /// (`release.rs`).
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
