//! The results as CSV, one figure a line, for spreadsheets and plots.

use std::fmt::Write as _;

use crate::figures::{per, Report};

/// One line per figure: `part,variant,strategy,workers,metric,value`.
pub(crate) fn to_csv(r: &Report) -> String {
    let mut o = String::from("part,variant,strategy,workers,metric,value\n");
    let mut line =
        |part: &str, variant: &str, strategy: &str, workers: usize, metric: &str, value: f64| {
            let variant = variant.replace(',', ";");
            let _ = writeln!(o, "{part},{variant},{strategy},{workers},{metric},{value}");
        };
    for m in &r.uncontended {
        let mut lat = m.latency.clone();
        let (v, s, n) = (m.variant.kind(), m.variant.strategy(), m.workers);
        line("uncontended", v, s, n, "ops_per_sec", m.per_sec());
        line(
            "uncontended",
            v,
            s,
            n,
            "acquire_p50_us",
            f64::from(lat.percentile(50.0).unwrap_or(0)),
        );
        line(
            "uncontended",
            v,
            s,
            n,
            "acquire_p99_us",
            f64::from(lat.percentile(99.0).unwrap_or(0)),
        );
        line(
            "uncontended",
            v,
            s,
            n,
            "statements_per_op",
            per(m.stmts.total(), m.ops as f64),
        );
    }
    for t in &r.round_trips {
        line(
            "round_trips",
            "library",
            t.strategy.name(),
            1,
            "acquire_statements",
            t.acquire,
        );
        line(
            "round_trips",
            "library",
            t.strategy.name(),
            1,
            "release_statements",
            t.release,
        );
    }
    for c in &r.contended {
        let mut h = c.handoff.clone();
        let (v, s, n) = (c.waiting.name(), c.strategy, c.workers);
        line("contended", v, s, n, "grants_per_sec", c.per_sec());
        line(
            "contended",
            v,
            s,
            n,
            "handoff_p50_us",
            f64::from(h.percentile(50.0).unwrap_or(0)),
        );
        line(
            "contended",
            v,
            s,
            n,
            "handoff_p99_us",
            f64::from(h.percentile(99.0).unwrap_or(0)),
        );
        line(
            "contended",
            v,
            s,
            n,
            "statements_per_sec_per_waiter",
            c.waiter_rate(),
        );
    }
    for m in &r.rwlock {
        line(
            "rwlock",
            "library",
            m.side,
            m.workers,
            "cycles_per_sec",
            per(m.cycles, m.secs),
        );
    }
    if let Some(w) = &r.watchdog {
        line("watchdog", "library", "lease", 1, "leases", w.leases as f64);
        line(
            "watchdog",
            "library",
            "lease",
            1,
            "statements_per_tick",
            per(w.statements, w.ticks as f64),
        );
    }
    for s in &r.semaphore {
        line(
            "semaphore",
            "library",
            s.what,
            s.workers,
            "ops_per_sec",
            s.per_sec(),
        );
    }
    if let Some(s) = &r.scale {
        let (mut a, mut b) = (s.small.clone(), s.big.clone());
        line(
            "scale",
            "library",
            "lease",
            1,
            "small_rows",
            s.small_rows as f64,
        );
        line(
            "scale",
            "library",
            "lease",
            1,
            "small_p99_us",
            f64::from(a.percentile(99.0).unwrap_or(0)),
        );
        line(
            "scale",
            "library",
            "lease",
            1,
            "big_rows",
            s.big_rows as f64,
        );
        line(
            "scale",
            "library",
            "lease",
            1,
            "big_p99_us",
            f64::from(b.percentile(99.0).unwrap_or(0)),
        );
    }
    o
}
