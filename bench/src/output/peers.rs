//! The peers part's output: its tables, its JSON, and its targets, each a ratio or a
//! figure measured in the same run.

use std::fmt::Write as _;

use serde_json::{json, Value};
use sqlock::Dialect;

use super::targets::Target;
use crate::figures::{ms, per, Contender, PeerCycles, PeersRun, Report, PEER_WORKERS};

/// The share of `PgAdvisoryLock`'s cycles the lease's must reach (PostgreSQL).
const PEER_RATIO_TARGET: f64 = 0.35;
/// The longest a killed holder's lock may stay taken, in milliseconds.
const CRASH_TARGET_MS: f64 = 50.0;
/// The share of its raw statements' throughput the library must keep.
const RAW_RATIO_TARGET: f64 = 0.95;

/// The handoff p50 limit of a dialect, in milliseconds.
fn handoff_limit(d: Dialect) -> f64 {
    if d == Dialect::Postgres {
        0.6
    } else {
        2.0
    }
}

/// The peer the others are compared with: the server's own lock through sqlx.
fn reference(d: Dialect) -> Contender {
    if d == Dialect::Postgres {
        Contender::Advisory
    } else {
        Contender::GetLock
    }
}

/// `a`'s throughput over `b`'s.
fn ratio(a: Option<&PeerCycles>, b: Option<&PeerCycles>) -> Option<f64> {
    let (a, b) = (a?.per_sec(), b?.per_sec());
    (b > 0.0).then(|| a / b)
}

fn fmt_ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

/// The peers part's tables.
pub(crate) fn text(r: &Report, p: &PeersRun, rounds: u32, hold: std::time::Duration) -> String {
    let d = r.dialect;
    let mut o = String::new();
    let refr = reference(d);
    let _ = writeln!(
        o,
        "\nAgainst the peers: every measurement in rounds alternating the contenders{}",
        if p.distributed_lock {
            ""
        } else {
            " (distributed-lock crates not built in: --features peers)"
        }
    );
    let _ = writeln!(
        o,
        "\nUncontended: acquire+release on keys of their own, {rounds} rounds each"
    );
    let _ = writeln!(
        o,
        "{:>7}  {:<32} {:>9} {:>8} {:>8} {:>8} {:>9}",
        "workers", "contender", "ops/s", "vs peer", "p50 ms", "p99 ms", "stmts/op"
    );
    for c in &p.cycles {
        let mut lat = c.latency.clone();
        let _ = writeln!(
            o,
            "{:>7}  {:<32} {:>9.0} {:>8} {:>8.3} {:>8.3} {:>9.2}",
            c.workers,
            c.who.label(d),
            c.per_sec(),
            fmt_ratio(ratio(Some(c), p.cycles_of(refr, c.workers))),
            ms(lat.percentile(50.0)),
            ms(lat.percentile(99.0)),
            per(c.stmts.total(), c.ops as f64),
        );
    }
    let _ = writeln!(o, "(vs peer: over {})", refr.label(d));
    if let Some(h) = p.handoff.first() {
        let _ = writeln!(
            o,
            "\nHandoff: {} workers on one key, hold {hold:?}, release to next grant",
            h.workers
        );
    }
    let _ = writeln!(
        o,
        "{:<32} {:>9} {:>14} {:>14}",
        "contender", "grants/s", "handoff p50 ms", "handoff p99 ms"
    );
    for h in &p.handoff {
        let mut s = h.handoff.clone();
        let _ = writeln!(
            o,
            "{:<32} {:>9.1} {:>14.3} {:>14.3}",
            h.who.label(d),
            per(h.grants, h.secs),
            ms(s.percentile(50.0)),
            ms(s.percentile(99.0)),
        );
    }
    let _ = writeln!(
        o,
        "\nCrash recovery: a holder process killed (SIGKILL) while a waiter waits, kill to grant"
    );
    let _ = writeln!(
        o,
        "{:<36} {:>6} {:>10} {:>10} {:>10}  freed by",
        "contender", "kills", "min ms", "p50 ms", "max ms"
    );
    for c in &p.crash {
        let mut s = c.recovery.clone();
        let _ = writeln!(
            o,
            "{:<36} {:>6} {:>10.1} {:>10.1} {:>10.1}  {}",
            c.who.label(d),
            s.len(),
            ms(s.percentile(0.0)),
            ms(s.percentile(50.0)),
            ms(s.percentile(100.0)),
            c.freed_by
        );
    }
    if let Some(f) = p.flushes.first() {
        let _ = writeln!(
            o,
            "\nStatements and durable flushes per cycle: 1 worker, {} cycles a round, flushes \
             from {} (whole server: the fewest of the rounds)",
            f.cycles, p.flush_counter
        );
    }
    let _ = writeln!(
        o,
        "{:<32} {:>11} {:>13}  per round",
        "contender", "stmts/cycle", "flushes/cycle"
    );
    for f in &p.flushes {
        let rounds: Vec<String> = f.flushes.iter().map(|x| format!("{x:.2}")).collect();
        let _ = writeln!(
            o,
            "{:<32} {:>11.2} {:>13.2}  {}",
            f.who.label(d),
            f.statements,
            f.least(),
            rounds.join(", ")
        );
    }
    o
}

/// The peers part as JSON.
pub(crate) fn json(d: Dialect, p: &PeersRun) -> Value {
    let refr = reference(d);
    json!({
        "distributed_lock_built": p.distributed_lock,
        "reference": refr.label(d),
        "cycles": p.cycles.iter().map(|c| {
            let mut lat = c.latency.clone();
            json!({
                "contender": c.who.label(d),
                "workers": c.workers,
                "ops": c.ops,
                "seconds": c.secs,
                "ops_per_sec": c.per_sec(),
                "vs_reference": ratio(Some(c), p.cycles_of(refr, c.workers)),
                "acquire_p50_us": lat.percentile(50.0),
                "acquire_p99_us": lat.percentile(99.0),
                "statements_per_op": per(c.stmts.total(), c.ops as f64),
            })
        }).collect::<Vec<_>>(),
        "handoff": p.handoff.iter().map(|h| {
            let mut s = h.handoff.clone();
            json!({
                "contender": h.who.label(d),
                "workers": h.workers,
                "grants": h.grants,
                "seconds": h.secs,
                "handoffs": s.len(),
                "handoff_p50_us": s.percentile(50.0),
                "handoff_p99_us": s.percentile(99.0),
            })
        }).collect::<Vec<_>>(),
        "crash": p.crash.iter().map(|c| {
            let mut s = c.recovery.clone();
            json!({
                "contender": c.who.label(d),
                "freed_by": c.freed_by,
                "kills": s.len(),
                "recovery_min_us": s.percentile(0.0),
                "recovery_p50_us": s.percentile(50.0),
                "recovery_max_us": s.percentile(100.0),
            })
        }).collect::<Vec<_>>(),
        "flush_counter": p.flush_counter,
        "flushes": p.flushes.iter().map(|f| json!({
            "contender": f.who.label(d),
            "cycles_per_round": f.cycles,
            "statements_per_cycle": f.statements,
            "flushes_per_cycle": f.least(),
            "flushes_per_cycle_by_round": f.flushes,
        })).collect::<Vec<_>>(),
    })
}

/// The targets on the peers part's figures.
pub(crate) fn targets(d: Dialect, p: &PeersRun, out: &mut Vec<Target>) {
    let lease = Contender::Sqlock("lease");
    let refr = reference(d);
    if let (Some(a), Some(b)) = (p.cycles_of(lease, 1), p.cycles_of(refr, 1)) {
        let x = a.per_sec() / b.per_sec().max(f64::MIN_POSITIVE);
        out.push(Target {
            name: format!("peers: lease cycle / {}, 1 worker", refr.label(d)),
            value: format!("{x:.3} ({:.0} / {:.0} per s)", a.per_sec(), b.per_sec()),
            limit: if d == Dialect::Postgres {
                format!(">= {PEER_RATIO_TARGET}")
            } else {
                "none on MariaDB".into()
            },
            met: (d == Dialect::Postgres).then_some(x >= PEER_RATIO_TARGET),
        });
    }
    for n in PEER_WORKERS {
        if let Some(x) = ratio(p.cycles_of(lease, n), p.cycles_of(Contender::Raw, n)) {
            out.push(Target {
                name: format!("peers: lease library / raw statements, {n} worker(s)"),
                value: format!("{x:.3}"),
                limit: format!(">= {RAW_RATIO_TARGET}"),
                met: Some(x >= RAW_RATIO_TARGET),
            });
        }
    }
    for c in p.crash.iter().filter(|c| c.who.is_sqlock()) {
        let mut s = c.recovery.clone();
        let (p50, max) = (ms(s.percentile(50.0)), ms(s.percentile(100.0)));
        out.push(Target {
            name: format!("crash recovery: {}, kill to grant", c.who.label(d)),
            value: format!("p50 {p50:.1} ms, max {max:.1} ms"),
            limit: format!("<= {CRASH_TARGET_MS} ms, every kill"),
            met: Some(s.len() > 0 && max <= CRASH_TARGET_MS),
        });
    }
    let limit = handoff_limit(d);
    for h in p.handoff.iter().filter(|h| h.who.is_sqlock()) {
        let mut s = h.handoff.clone();
        let p50 = ms(s.percentile(50.0));
        out.push(Target {
            name: format!(
                "peers handoff: {}, {} waiters",
                h.who.label(d),
                h.workers - 1
            ),
            value: format!("p50 {p50:.3} ms"),
            limit: format!("p50 <= {limit} ms"),
            met: Some(s.len() > 0 && p50 <= limit),
        });
    }
}
