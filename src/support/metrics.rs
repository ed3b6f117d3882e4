//! What sqlock measures, through the `metrics` crate's facade (feature `metrics`): one
//! [`Meter`] per handle, whose calls are each one line where the thing happens. Without
//! the feature every call here does nothing and compiles away.
//!
//! The names, their labels and what they count are listed once, in [`NAMES`], which
//! the crate's documentation repeats. Labels are the strategy and the table; the key is
//! a label only when the handle asks for it
//! (`LockerBuilder::metrics_key_label`), since keys are unbounded and every distinct
//! label set is a series of its own in the exporter.

// Without the feature the names and their kinds serve the documentation alone.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use std::time::Duration;

use crate::support::lost::LostReason;
use crate::support::strategy_kind::Strategy;
use crate::support::validate::TableName;

/// Every metric: its name, its kind, and what it counts.
pub(crate) const NAMES: [(&str, Kind, &str); 12] = [
    (GRANTS, Kind::Counter, "locks granted"),
    (
        BUSY,
        Kind::Counter,
        "acquisition attempts that found the lock busy",
    ),
    (
        TIMEOUTS,
        Kind::Counter,
        "acquisitions that gave up at their deadline",
    ),
    (LOSSES, Kind::Counter, "held locks found lost, by reason"),
    (RENEWALS, Kind::Counter, "leases renewed by the watchdog"),
    (
        RENEWAL_FAILURES,
        Kind::Counter,
        "watchdog renewals that failed or got no answer in time",
    ),
    (STATEMENTS, Kind::Counter, "statements sent to the database"),
    (
        WAKE_LOCK_STATEMENTS,
        Kind::Counter,
        "statements that took, let go of or waited for wake locks, and set up their connections",
    ),
    (
        ACQUIRE_SECONDS,
        Kind::Histogram,
        "from the start of an acquisition to its grant, waiting included",
    ),
    (
        HELD_SECONDS,
        Kind::Histogram,
        "from a grant to its guard's release or drop",
    ),
    (
        HANDOFF_SECONDS,
        Kind::Histogram,
        "for an acquisition that waited: from its last busy answer to its grant, at \
         most the time the lock stood free before this waiter took it",
    ),
    (LOCKS_HELD, Kind::Gauge, "guards held by this process"),
];

const GRANTS: &str = "sqlock_grants_total";
const BUSY: &str = "sqlock_busy_total";
const TIMEOUTS: &str = "sqlock_timeouts_total";
const LOSSES: &str = "sqlock_losses_total";
const RENEWALS: &str = "sqlock_renewals_total";
const RENEWAL_FAILURES: &str = "sqlock_renewal_failures_total";
const STATEMENTS: &str = "sqlock_statements_total";
const WAKE_LOCK_STATEMENTS: &str = "sqlock_wake_lock_statements_total";
const ACQUIRE_SECONDS: &str = "sqlock_acquire_seconds";
const HELD_SECONDS: &str = "sqlock_held_seconds";
const HANDOFF_SECONDS: &str = "sqlock_handoff_seconds";
const LOCKS_HELD: &str = "sqlock_locks_held";

/// The kind of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Histogram,
    Gauge,
}

/// The label value of a loss's reason.
fn reason_label(reason: LostReason) -> &'static str {
    match reason {
        LostReason::NotHeld => "not_held",
        LostReason::Lapsed => "lapsed",
        LostReason::HoldCapReached => "hold_cap_reached",
        LostReason::ConnectionLost => "connection_lost",
        LostReason::TransactionEnded => "transaction_ended",
        LostReason::PresenceLost => "presence_lost",
        LostReason::Revoked => "revoked",
    }
}

/// One handle's measurements: the labels it puts on them.
#[derive(Debug, Clone)]
pub(crate) struct Meter {
    #[cfg(feature = "metrics")]
    table: metrics::SharedString,
    #[cfg(feature = "metrics")]
    key_label: bool,
}

/// Counts a statement sent on `table`, by whichever handle: one of a wake lock
/// (`wake_lock`) apart from the lock table's.
#[inline]
pub(crate) fn statement_sent(table: &str, wake_lock: bool) {
    #[cfg(feature = "metrics")]
    {
        let name = if wake_lock {
            WAKE_LOCK_STATEMENTS
        } else {
            STATEMENTS
        };
        metrics::counter!(name, "table" => table.to_owned()).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (table, wake_lock);
}

#[cfg(feature = "metrics")]
impl Meter {
    /// The meter of a handle on `table`; `key_label`: whether the key is a label.
    pub(crate) fn new(table: &TableName, key_label: bool) -> Self {
        describe();
        Self {
            table: table.as_str().to_owned().into(),
            key_label,
        }
    }

    /// The labels of a lock of `key` held with `strategy`.
    fn labels(&self, strategy: Strategy, key: &str) -> Vec<metrics::Label> {
        let mut labels = vec![
            metrics::Label::from_static_parts("strategy", strategy.name()),
            metrics::Label::new("table", self.table.clone()),
        ];
        if self.key_label {
            labels.push(metrics::Label::new("key", key.to_owned()));
        }
        labels
    }

    /// A grant, `waited` after its acquisition started.
    pub(crate) fn granted(&self, strategy: Strategy, key: &str, waited: Duration) {
        let labels = self.labels(strategy, key);
        metrics::counter!(GRANTS, labels.iter()).increment(1);
        metrics::histogram!(ACQUIRE_SECONDS, labels.iter()).record(waited);
    }

    /// A grant to a request that waited, `since` its last busy answer.
    pub(crate) fn handoff(&self, strategy: Strategy, key: &str, since: Duration) {
        metrics::histogram!(HANDOFF_SECONDS, self.labels(strategy, key).iter()).record(since);
    }

    /// An attempt that found the lock busy.
    pub(crate) fn busy(&self, strategy: Strategy, key: &str) {
        metrics::counter!(BUSY, self.labels(strategy, key).iter()).increment(1);
    }

    /// An acquisition that gave up at its deadline.
    pub(crate) fn timed_out(&self, strategy: Strategy, key: &str) {
        metrics::counter!(TIMEOUTS, self.labels(strategy, key).iter()).increment(1);
    }

    /// A held lock found lost.
    pub(crate) fn lost(&self, strategy: Strategy, key: &str, reason: LostReason) {
        let mut labels = self.labels(strategy, key);
        labels.push(metrics::Label::from_static_parts(
            "reason",
            reason_label(reason),
        ));
        metrics::counter!(LOSSES, labels.iter()).increment(1);
    }

    /// A guard began to hold.
    pub(crate) fn hold_began(&self, strategy: Strategy, key: &str) {
        metrics::gauge!(LOCKS_HELD, self.labels(strategy, key).iter()).increment(1.0);
    }

    /// A guard ended, `held` after its grant.
    pub(crate) fn hold_ended(&self, strategy: Strategy, key: &str, held: Duration) {
        let labels = self.labels(strategy, key);
        metrics::gauge!(LOCKS_HELD, labels.iter()).decrement(1.0);
        metrics::histogram!(HELD_SECONDS, labels.iter()).record(held);
    }

    /// A renewal tick that renewed `leases` leases.
    pub(crate) fn renewed(&self, leases: u64) {
        metrics::counter!(RENEWALS, "table" => self.table.clone()).increment(leases);
    }

    /// A renewal tick that failed or got no answer in time.
    pub(crate) fn renewal_failed(&self) {
        metrics::counter!(RENEWAL_FAILURES, "table" => self.table.clone()).increment(1);
    }
}

/// Describes every metric to the installed recorder, once per recorder that is
/// installed by the time a handle is built.
#[cfg(feature = "metrics")]
fn describe() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DESCRIBED: AtomicBool = AtomicBool::new(false);
    if DESCRIBED.swap(true, Ordering::Relaxed) {
        return;
    }
    for (name, kind, what) in NAMES {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, what),
            Kind::Histogram => {
                metrics::describe_histogram!(name, metrics::Unit::Seconds, what);
            }
            Kind::Gauge => metrics::describe_gauge!(name, what),
        }
    }
}

/// Without the `metrics` feature: nothing is measured.
#[cfg(not(feature = "metrics"))]
impl Meter {
    pub(crate) fn new(_: &TableName, _: bool) -> Self {
        Self {}
    }

    #[inline]
    pub(crate) fn granted(&self, _: Strategy, _: &str, _: Duration) {}

    #[inline]
    pub(crate) fn handoff(&self, _: Strategy, _: &str, _: Duration) {}

    #[inline]
    pub(crate) fn busy(&self, _: Strategy, _: &str) {}

    #[inline]
    pub(crate) fn timed_out(&self, _: Strategy, _: &str) {}

    #[inline]
    pub(crate) fn lost(&self, _: Strategy, _: &str, _: LostReason) {}

    #[inline]
    pub(crate) fn hold_began(&self, _: Strategy, _: &str) {}

    #[inline]
    pub(crate) fn hold_ended(&self, _: Strategy, _: &str, _: Duration) {}

    #[inline]
    pub(crate) fn renewed(&self, _: u64) {}

    #[inline]
    pub(crate) fn renewal_failed(&self) {}
}
