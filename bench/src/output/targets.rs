//! The targets a run is judged against, each with its value and whether it was met.

use sqlock::{Dialect, Strategy};

use crate::figures::{ms, per, ratio, Report, Variant, Waiting};

/// The share of raw throughput the library must keep.
const OVERHEAD_TARGET: f64 = 0.9;
/// The most statements a contended waiter may send per second.
const WAITER_RATE_TARGET: f64 = 20.0;
/// The most statements one watchdog tick may send.
const TICK_TARGET: f64 = 2.0;
/// How much worse p99 may be with the large table.
const SCALE_TARGET: f64 = 1.5;

/// One target, judged.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) value: String,
    pub(crate) limit: String,
    /// `None` where this backend has no such target.
    pub(crate) met: Option<bool>,
}

/// The handoff limit of a dialect, in milliseconds.
fn handoff_limit(d: Dialect) -> Option<f64> {
    match d {
        Dialect::Postgres => Some(5.0),
        Dialect::MySql => Some(20.0),
        _ => None,
    }
}

/// Judges the targets on this run's figures.
pub(crate) fn targets(r: &Report) -> Vec<Target> {
    let server = r.dialect != Dialect::Sqlite;
    let mut out = Vec::new();
    let most = r.most_workers();
    for s in [Strategy::Lease, Strategy::Insert] {
        for n in [1, most] {
            if let Some(x) = ratio(r.find(Variant::Library(s), n), r.find(Variant::Raw(s), n)) {
                out.push(Target {
                    name: format!("overhead: {s} library/raw, {n} worker(s)"),
                    value: format!("{x:.3}"),
                    limit: format!(">= {OVERHEAD_TARGET}"),
                    met: server.then_some(x >= OVERHEAD_TARGET),
                });
            }
            if most == 1 {
                break;
            }
        }
    }
    for rt in &r.round_trips {
        if rt.strategy == Strategy::ForUpdate {
            continue;
        }
        out.push(Target {
            name: format!("round trips: {} acquire / release", rt.strategy),
            value: format!("{:.2} / {:.2}", rt.acquire, rt.release),
            limit: "1 / 1".into(),
            met: Some(rt.acquire <= 1.0 && rt.release <= 1.0),
        });
    }
    for c in &r.contended {
        if c.strategy != Strategy::Lease.name()
            || matches!(c.waiting, Waiting::NativeBlocking | Waiting::RawStatements)
        {
            continue;
        }
        let mut h = c.handoff.clone();
        let p50 = ms(h.percentile(50.0));
        let rate = c.waiter_rate();
        let limit = handoff_limit(r.dialect);
        out.push(Target {
            name: format!(
                "handoff: lease, {} waiters, {}",
                c.workers - 1,
                c.waiting.name()
            ),
            value: format!("p50 {p50:.2} ms at {rate:.1} statements/s per waiter"),
            limit: match limit {
                Some(l) => format!("p50 <= {l} ms at <= {WAITER_RATE_TARGET} statements/s"),
                None => "none on SQLite".into(),
            },
            met: limit.map(|l| p50 <= l && rate <= WAITER_RATE_TARGET),
        });
    }
    if let Some(w) = &r.watchdog {
        let per_tick = per(w.statements, w.ticks as f64);
        out.push(Target {
            name: format!("watchdog: statements per tick, {} leases", w.leases),
            value: format!("{per_tick:.2}"),
            limit: format!("<= {TICK_TARGET}"),
            met: Some(w.ticks > 0 && per_tick <= TICK_TARGET),
        });
    }
    if let Some(s) = &r.scale {
        let (mut small, mut big) = (s.small.clone(), s.big.clone());
        let (a, b) = (ms(small.percentile(99.0)), ms(big.percentile(99.0)));
        let x = if a > 0.0 { b / a } else { 0.0 };
        out.push(Target {
            name: format!(
                "scale: acquire p99, {} rows / {} rows",
                s.big_rows, s.small_rows
            ),
            value: format!("{b:.2} ms / {a:.2} ms = {x:.2}"),
            limit: format!("<= {SCALE_TARGET}"),
            met: Some(x <= SCALE_TARGET),
        });
    }
    out
}
