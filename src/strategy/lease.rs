//! The lease and the insert strategies, written once: a row with an owner and an
//! expiry on the database clock, taken by one atomic upsert when it is free, expired
//! or already ours, kept alive by the watchdog, and given back by an owner- and
//! token-checked statement. They differ at release only: a lease row stays, marked
//! free; an insert row is deleted, so that a free lock is no row at all.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::dialect::{Failure, Grant};
use crate::error::Result;
use crate::lost::LostSignal;
use crate::retry::retry_contention;
use crate::sql::Args;
use crate::strategy_name::Strategy;
use crate::table::LockTable;
use crate::watchdog::Track;

/// One acquisition statement: the row as it stands after it, when it is ours.
pub(crate) async fn attempt(table: &LockTable, args: &Args) -> Result<Option<Grant>, Failure> {
    table
        .db
        .lease_acquire(&table.stmts, args, &table.galera)
        .await
}

/// Gives back one hold, retrying statements that lost a deadlock race; whether the
/// lease was still ours.
pub(crate) async fn release(table: &LockTable, args: &Args) -> Result<bool> {
    let delete_row = args.strategy == Strategy::Insert.name();
    retry_contention(|| table.db.release(&table.stmts, args, delete_row)).await
}

/// How a grant asks the watchdog to keep it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    pub(crate) ttl: Duration,
    pub(crate) auto_renew: bool,
    pub(crate) max_hold: Option<Duration>,
}

/// A held lease or insert lock: its watchdog registration and what the database last
/// said of it.
#[derive(Debug)]
pub(crate) struct LeaseHold {
    registration: u64,
    expires_at: DateTime<Utc>,
    hold_count: u32,
}

impl LeaseHold {
    /// Registers a grant with the watchdog, which counts its validity from `sent`.
    pub(crate) fn start(
        table: &LockTable,
        args: &Args,
        grant: &Grant,
        sent: Instant,
        renewal: Renewal,
    ) -> (Self, LostSignal) {
        let renew_until = match (renewal.auto_renew, renewal.max_hold) {
            (false, _) => Some(sent),
            // A cap too far to represent is no cap.
            (true, Some(cap)) => sent.checked_add(cap),
            (true, None) => None,
        };
        let track = Track {
            ttl: renewal.ttl,
            sent,
            renew_until,
        };
        let (lost, registration) = table.watchdog.register(&args.key, grant.token, track);
        let hold = Self {
            registration,
            expires_at: micros_to_utc(grant.expires_us),
            hold_count: u32::try_from(grant.hold_count).unwrap_or(0),
        };
        (hold, lost)
    }

    pub(crate) fn expires_at(&self) -> DateTime<Utc> {
        self.expires_at
    }

    pub(crate) fn hold_count(&self) -> u32 {
        self.hold_count
    }

    /// Pushes the expiry to at least `args.ttl_us` from now; `false` when the lease is
    /// no longer ours.
    pub(crate) async fn extend(&mut self, table: &LockTable, args: &Args) -> Result<bool> {
        let sent = Instant::now();
        let extended = retry_contention(|| table.db.lease_extend(&table.stmts, args)).await?;
        let Some(expires_us) = extended else {
            return Ok(false);
        };
        self.expires_at = micros_to_utc(expires_us);
        let ttl = Duration::from_micros(args.ttl_us.unsigned_abs());
        table
            .watchdog
            .extended(&args.key, self.registration, sent, ttl);
        Ok(true)
    }

    /// Stops renewal of this hold, then gives it back.
    pub(crate) async fn release(&self, table: &LockTable, args: &Args) -> Result<bool> {
        table.watchdog.unregister(&args.key, self.registration);
        release(table, args).await
    }

    /// Stops renewal of this hold at once and gives it back in the background, on the
    /// runtime the caller has entered.
    pub(crate) fn release_in_background(&self, table: &Arc<LockTable>, args: Args) {
        table.watchdog.unregister(&args.key, self.registration);
        let table = table.clone();
        tokio::spawn(async move {
            if let Err(e) = release(&table, &args).await {
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
