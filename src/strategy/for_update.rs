//! The for-update strategy: a lock held as a row lock (`SELECT ... FOR UPDATE`) in an
//! open transaction, for as long as the guard keeps the transaction open.
//!
//! The database ends the lock itself when the transaction ends, by commit, rollback
//! or a dead connection, so a crashed holder frees it at once. The guard lends its
//! transaction, so the holder's own writes commit atomically with the end of the lock
//! (see [`held_transaction`](super::held_transaction)).
//!
//! The protocol, written once for every server with row locks ([`RowLocks`]): prepare
//! the key (MariaDB makes sure it has a row); begin; bound the transaction's lock waits
//! and take the key's gate (PostgreSQL's transaction-scoped advisory lock, which keeps
//! lease and insert attempts off the key); lock the row, creating it free first when
//! it is missing; grant, unless a live lease or insert lock holds the key, drawing a
//! fencing token and putting back what the bound replaced.

// Built without a server feature (SQLite only), the protocol has nothing to run on:
// the code stays, refusing the strategy.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_imports, unused_variables)
)]

use std::time::Duration;

use crate::db::backend::{Backend, Gate, RowLocks};
use crate::db::runner::{self, On, Runner};
use crate::db::values::{Bound, Key, RowGrant};
use crate::db::{Dialect, Failure, OnRowLocks};
use crate::support::error::{Class, Error};

use super::grant::{Ask, Granted};
use super::handle::Handle;

/// The longest single wait of a for-update attempt in the database.
const SLICE: Duration = Duration::from_secs(1);

/// How long before a deadline a for-update attempt stops waiting in the database.
const MARGIN: Duration = Duration::from_millis(50);

/// How long one attempt may wait in the database, with `left` of the caller's
/// deadline to go: slices of at most a second that end a little before the deadline,
/// so that a caller who gives up never leaves a wait behind that could take the lock
/// after it was told it timed out. `None` when it must not wait: too little left, or a
/// remainder MariaDB cannot wait (it waits in whole seconds).
pub(crate) fn wait_slice(dialect: Dialect, left: Option<Duration>) -> Option<Duration> {
    let slice = left.map_or(SLICE, |left| left.saturating_sub(MARGIN).min(SLICE));
    let too_short =
        slice < Duration::from_millis(1) || (dialect.waits_in_whole_seconds() && slice < SLICE);
    (!too_short).then_some(slice)
}

/// One attempt to take the row lock, waiting in the database for `wait` at most:
/// `Ok(None)` when the row (or the key's gate) stayed held by another transaction;
/// [`Class::Held`] when a live lease or insert lock holds the key.
pub(crate) async fn attempt(
    handle: &Handle,
    ask: &Ask,
    wait: Option<Duration>,
) -> Result<Option<Granted>, Failure> {
    let take = Take {
        key: &ask.key,
        owner: &handle.owner_text,
        wait,
    };
    match handle.db.with_row_locks(take).await {
        Some(outcome) => outcome,
        // Refused before any SQL by the request's checks; answered all the same.
        None => Err(Failure {
            class: Class::Unsupported,
            error: Error::StrategyUnsupported {
                strategy: ask.strategy.name(),
                dialect: handle.db.dialect().name(),
            },
        }),
    }
}

/// The protocol, for one key and owner.
struct Take<'a> {
    key: &'a str,
    owner: &'a str,
    wait: Option<Duration>,
}

impl OnRowLocks for Take<'_> {
    type Output = Result<Option<Granted>, Failure>;

    async fn run<B: RowLocks>(self, b: &B) -> Self::Output {
        b.check_row_locks().await?;
        match take(b, &self).await.map_err(|e| b.failure(e)) {
            Ok(Taken::Granted(tx, token)) => Ok(Some(Granted::Tx(
                B::lend(tx),
                b.for_update().check.clone(),
                token,
            ))),
            Ok(Taken::Busy) => Ok(None),
            Ok(Taken::HeldByLease) => Err(Failure::row_locked(Class::Held, self.key)),
            // The row stayed locked for as long as the attempt waited.
            Err(f) if f.class == Class::Contention => Ok(None),
            Err(f) => Err(f),
        }
    }
}

/// What one run of the protocol took.
enum Taken<B: Backend> {
    /// The transaction holding the row lock, and the grant's token.
    Granted(sqlx::Transaction<'static, B::Db>, i64),
    /// The row or the gate stayed held by another transaction.
    Busy,
    /// A live lease or insert lock holds the key.
    HeldByLease,
}

/// The protocol on one server: a transaction holding the key's row lock, with the
/// grant's token.
async fn take<B: RowLocks>(b: &B, t: &Take<'_>) -> Result<Taken<B>, sqlx::Error> {
    let key = Key(t.key);
    b.prepare(&key).await?;
    let mut tx = runner::begin(b.pool()).await?;
    let mut locked = lock_row(b, &mut tx, t).await?;
    if matches!(locked, LockRow::NoRow) {
        // The key has no row yet (or, on MariaDB, no more: the sweeper took it since
        // the preparation): create it free, in a statement of its own outside the
        // transaction (which so never waits on, or holds, a fresh insert), and lock it
        // in a new transaction.
        tx.rollback().await?;
        B::Db::execute(On::Pool(b.pool(), false), &b.for_update().ensure, &key).await?;
        tx = b.pool().begin().await?;
        locked = lock_row(b, &mut tx, t).await?;
    }
    let LockRow::Locked(saved) = locked else {
        return Ok(Taken::Busy);
    };
    // The grant puts back the setting the bound replaced (PostgreSQL's lock_timeout):
    // the holder's own statements wait as the connection's settings say.
    let grant = RowGrant {
        key: t.key,
        owner: t.owner,
        setting: saved.as_deref().unwrap_or_default(),
    };
    match B::Db::value(On::Conn(&mut *tx), &b.for_update().grant, &grant).await? {
        Some(token) => Ok(Taken::Granted(tx, token)),
        None => {
            tx.rollback().await?;
            Ok(Taken::HeldByLease)
        }
    }
}

/// What [`lock_row`] found.
enum LockRow {
    /// The row is locked; the setting the bound replaced, to put back.
    Locked(Option<String>),
    /// The key has no row yet.
    NoRow,
    /// The key's gate was taken (PostgreSQL): busy.
    GateTaken,
}

/// Takes the key's row lock inside the open transaction on `conn`, bounding the wait
/// where the server needs a setting for it (always, so that no wait of the transaction
/// is unbounded), after the key's gate where the server has one.
async fn lock_row<B: RowLocks>(
    b: &B,
    conn: &mut <B::Db as sqlx::Database>::Connection,
    t: &Take<'_>,
) -> Result<LockRow, sqlx::Error> {
    let bound = Bound {
        key: t.key,
        wait_us: t
            .wait
            .map_or(0, |w| i64::try_from(w.as_micros()).unwrap_or(i64::MAX)),
    };
    let saved = match b.bound(conn, &bound, t.wait.is_none()).await? {
        Gate::Open(saved) => saved,
        Gate::Taken => return Ok(LockRow::GateTaken),
    };
    let f = b.for_update();
    let lock = if t.wait.is_some() {
        &f.lock
    } else {
        &f.lock_nowait
    };
    Ok(
        if !B::Db::rows(On::Conn(conn), lock, &Key(t.key))
            .await?
            .is_empty()
        {
            LockRow::Locked(saved)
        } else {
            LockRow::NoRow
        },
    )
}
