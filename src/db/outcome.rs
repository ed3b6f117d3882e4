//! What statements report back to the layers above: grants, listed locks, renewals,
//! and failures sorted by whether the caller may retry them.

use crate::support::error::{Class, Error};

/// One held lock as `list.sql` reports it.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) key: String,
    pub(crate) strategy: String,
    pub(crate) owner: String,
    pub(crate) token: i64,
    pub(crate) hold_count: i32,
    pub(crate) acquired_us: i64,
    pub(crate) expires_us: i64,
    pub(crate) now_us: i64,
    /// The live waiters of the fair strategy queued for the key.
    pub(crate) waiters: i64,
    /// Whether the holder is gone: its lease records a presence marker that nobody
    /// holds any more, so that the next acquisition takes it at once.
    pub(crate) gone: bool,
}

/// The leader of an election as `elect_leader.sql` reports it: the live lease on the
/// election's key and the identity claimed for its term.
#[derive(Debug, Clone)]
pub(crate) struct Elected {
    pub(crate) owner: String,
    pub(crate) term: i64,
    pub(crate) identity: String,
    pub(crate) acquired_us: i64,
    pub(crate) expires_us: i64,
    pub(crate) now_us: i64,
}

/// What a batched renewal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Renewal {
    /// The keys still held, or `None` when every key of the batch was.
    pub(crate) survivors: Option<Vec<String>>,
    /// How many statements it took (one, or two on MariaDB after a loss).
    pub(crate) statements: u32,
}

/// What an acquisition statement reports: the row as it stands after the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) owner: String,
    pub(crate) token: i64,
    pub(crate) expires_us: i64,
    pub(crate) hold_count: i32,
    /// The strategy the row is held with.
    pub(crate) strategy: String,
    /// Whether the lease recorded the handle's presence marker (`Some`: the statement
    /// found it held as it ran), and the epoch of the handle's presence it was granted
    /// under (put in by the strategy; the statement answers `Some(0)`).
    pub(crate) presence: Option<u64>,
    /// On a busy answer, the presence marker the holder's lease records, where it can
    /// be trusted on this server lifetime: what a waiter may wait for in the server
    /// (`keepers/server_wait.rs`). `None` otherwise, and where the statement has no
    /// such column.
    pub(crate) holder: Option<String>,
}

impl Grant {
    /// The row PostgreSQL's acquisition answers when the key's advisory gate was taken
    /// (a for-update holder, or another acquisition under way): no grant, try again.
    /// It names no owner, unlike a row an at-least hold keeps with no hold (MariaDB).
    pub(crate) fn gate_closed(&self) -> bool {
        self.hold_count == 0 && self.owner.is_empty()
    }
}

/// A failed statement: its class decides whether the caller may retry.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) class: Class,
    pub(crate) error: Error,
}

impl Failure {
    /// The key's row or gate is held by another transaction.
    pub(crate) fn row_locked(class: Class, key: &str) -> Self {
        Self {
            class,
            error: Error::RowLocked {
                key: key.to_owned(),
            },
        }
    }
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Self {
        f.error
    }
}

/// What one multi-lock attempt found.
#[derive(Debug)]
pub(crate) enum TakenAll {
    /// Every key, in the order asked: committed.
    All(Vec<Grant>),
    /// A key is held by another owner (or kept by an at-least hold): rolled back.
    Busy,
    /// A key's gate or bucket was in use by another acquisition for a moment (the keys
    /// named): rolled back, worth another try.
    Contended(String),
}
