//! Counts the statements sent through sqlx, from the client side.
//!
//! sqlx reports every statement it runs as a `tracing` event of target `sqlx::query`
//! when the statement ends, with the statement's first words as its summary. A small
//! subscriber that listens to that target alone counts them, sorted by their first
//! word, for the benchmark's own raw statements and the library's alike. Statements
//! are counted, not network round trips: sqlx sends a prepared statement's bind and
//! execute in one round trip, and prepares each text once per connection (the warm-up
//! rounds do that before anything is measured).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// The target of sqlx's per-statement events.
const TARGET: &str = "sqlx::query";

/// The kinds of statement told apart, by first word.
const KINDS: [&str; 7] = [
    "insert", "update", "delete", "select", "begin", "commit", "other",
];

/// Counters since the process started; take differences with [`snapshot`].
struct Counters {
    by_kind: [AtomicU64; KINDS.len()],
    /// Microseconds spent in statements, summed, by kind.
    micros: [AtomicU64; KINDS.len()],
}

static COUNTERS: Counters = Counters {
    by_kind: [const { AtomicU64::new(0) }; KINDS.len()],
    micros: [const { AtomicU64::new(0) }; KINDS.len()],
};

/// Statements counted so far, by kind, with the time spent in them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Snapshot {
    pub(crate) by_kind: [u64; KINDS.len()],
    pub(crate) micros: [u64; KINDS.len()],
}

impl Snapshot {
    /// Every statement, whatever its kind.
    pub(crate) fn total(&self) -> u64 {
        self.by_kind.iter().sum()
    }

    /// The counts by kind, as a JSON object.
    pub(crate) fn by_kind_json(&self) -> serde_json::Value {
        KINDS
            .iter()
            .zip(self.by_kind)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| ((*k).to_owned(), serde_json::Value::from(n)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// The mean time of one statement, whatever its kind, in microseconds.
    pub(crate) fn mean_micros(&self) -> f64 {
        let (n, micros) = (self.total(), self.micros.iter().sum::<u64>());
        if n == 0 {
            return 0.0;
        }
        micros as f64 / n as f64
    }

    /// Adds the counts of `other`, as when the rounds of one measurement are summed.
    pub(crate) fn add(&mut self, other: &Snapshot) {
        for i in 0..KINDS.len() {
            self.by_kind[i] += other.by_kind[i];
            self.micros[i] += other.micros[i];
        }
    }

    /// What was counted between `earlier` and this snapshot.
    pub(crate) fn since(&self, earlier: &Snapshot) -> Snapshot {
        let mut out = Snapshot::default();
        for i in 0..KINDS.len() {
            out.by_kind[i] = self.by_kind[i].saturating_sub(earlier.by_kind[i]);
            out.micros[i] = self.micros[i].saturating_sub(earlier.micros[i]);
        }
        out
    }
}

/// The counts now.
pub(crate) fn snapshot() -> Snapshot {
    let mut out = Snapshot::default();
    for i in 0..KINDS.len() {
        out.by_kind[i] = COUNTERS.by_kind[i].load(Ordering::Relaxed);
        out.micros[i] = COUNTERS.micros[i].load(Ordering::Relaxed);
    }
    out
}

/// Starts counting, once per process. Returns false when another subscriber was set
/// first (then nothing is counted and the counts stay zero).
pub(crate) fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| tracing::subscriber::set_global_default(StatementCounter).is_ok())
}

/// The subscriber: enabled for sqlx's statement events only.
struct StatementCounter;

/// Reads an event's summary (the statement's first words) and duration.
#[derive(Default)]
struct Fields {
    kind: Option<usize>,
    micros: u64,
}

impl Fields {
    fn summary(&mut self, text: &str) {
        let first = text
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_start_matches('(')
            .to_ascii_lowercase();
        let kind = match first.as_str() {
            "insert" => 0,
            "update" => 1,
            "delete" => 2,
            "select" | "with" => 3,
            "begin" | "start" => 4,
            "commit" | "rollback" => 5,
            _ => 6,
        };
        self.kind = Some(kind);
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "summary" {
            self.summary(value);
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.micros = (value * 1e6) as u64;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            let text = format!("{value:?}");
            self.summary(text.trim_matches('"'));
        }
    }
}

impl Subscriber for StatementCounter {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if meta.target() == TARGET {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        meta.target() == TARGET
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let kind = fields.kind.unwrap_or(KINDS.len() - 1);
        COUNTERS.by_kind[kind].fetch_add(1, Ordering::Relaxed);
        COUNTERS.micros[kind].fetch_add(fields.micros, Ordering::Relaxed);
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_sort_by_first_word() {
        for (text, kind) in [
            ("INSERT INTO \"t\" AS", 0),
            ("UPDATE `t` SET locked", 1),
            ("DELETE FROM t WHERE", 2),
            ("SELECT pg_try_advisory_lock($1)", 3),
            ("BEGIN", 4),
            ("COMMIT", 5),
            ("SET STATEMENT x", 6),
        ] {
            let mut f = Fields::default();
            f.summary(text);
            assert_eq!(f.kind, Some(kind), "{text}");
        }
    }
}
