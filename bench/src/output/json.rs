//! The results as JSON: every figure, the settings, and the targets judged.

use serde_json::{json, Value};

use super::targets::Target;
use crate::args::BenchArgs;
use crate::figures::{per, Report};

/// The whole run as one JSON document.
pub(crate) fn to_json(r: &Report, targets: &[Target], args: &BenchArgs) -> Value {
    let uncontended: Vec<Value> = r
        .uncontended
        .iter()
        .map(|m| {
            let mut lat = m.latency.clone();
            json!({
                "variant": m.variant.kind(),
                "strategy": m.variant.strategy(),
                "workers": m.workers,
                "ops": m.ops,
                "busy": m.busy,
                "seconds": m.secs,
                "ops_per_sec": m.per_sec(),
                "acquire_p50_us": lat.percentile(50.0),
                "acquire_p99_us": lat.percentile(99.0),
                "statements": m.stmts.total(),
                "statements_by_kind": m.stmts.by_kind_json(),
                "statements_per_op": per(m.stmts.total(), m.ops as f64),
            })
        })
        .collect();
    let contended: Vec<Value> = r
        .contended
        .iter()
        .map(|c| {
            let mut h = c.handoff.clone();
            json!({
                "waiting": c.waiting.name(),
                "strategy": c.strategy,
                "workers": c.workers,
                "grants": c.grants,
                "seconds": c.secs,
                "grants_per_sec": c.per_sec(),
                "handoffs": h.len(),
                "handoff_p50_us": h.percentile(50.0),
                "handoff_p99_us": h.percentile(99.0),
                "statements": c.stmts.total(),
                "statements_by_kind": c.stmts.by_kind_json(),
                "wait_seconds": c.wait_secs,
                "statements_per_sec_per_waiter": c.waiter_rate(),
                "still_first_statements_per_sec": c.still.map(|s| s.0),
                "still_behind_statements_per_sec": c.still.map(|s| s.1),
            })
        })
        .collect();
    json!({
        "backend": r.dialect.name(),
        "server": r.server,
        "table": r.table,
        "date": r.date,
        "cpus": r.cpus,
        "load_before": r.load_before,
        "load_after": r.load_after,
        "seconds": r.secs,
        "sqlock_version": env!("CARGO_PKG_VERSION"),
        "settings": {
            "duration_ms": args.duration.as_millis() as u64,
            "rounds": args.rounds,
            "workers": args.workers,
            "waiters": args.waiters,
            "contended_duration_ms": args.contended_duration.as_millis() as u64,
            "hold_ms": args.hold.as_secs_f64() * 1000.0,
            "poll_ms": args.poll.as_secs_f64() * 1000.0,
            "leases": args.leases,
            "scale_rows": args.scale_rows,
            "crashes": args.crashes,
            "flush_cycles": args.flush_cycles,
            "crash_ttl_ms": args.crash_ttl.as_millis() as u64,
        },
        "uncontended": uncontended,
        "round_trips": r.round_trips.iter().map(|t| json!({
            "strategy": t.strategy.name(),
            "acquire_statements": t.acquire,
            "release_statements": t.release,
        })).collect::<Vec<_>>(),
        "contended": contended,
        "notify_available": r.notify,
        "rwlock": r.rwlock.iter().map(|m| json!({
            "side": m.side,
            "workers": m.workers,
            "cycles": m.cycles,
            "seconds": m.secs,
            "cycles_per_sec": per(m.cycles, m.secs),
        })).collect::<Vec<_>>(),
        "watchdog": r.watchdog.as_ref().map(|w| json!({
            "leases": w.leases,
            "ticks": w.ticks,
            "statements": w.statements,
            "statements_per_tick": per(w.statements, w.ticks as f64),
            "renewed": w.renewed,
            "failed_ticks": w.failed_ticks,
            "client_statements": w.client_statements,
            "renew_statement_mean_us": w.renew_mean_us,
            "acquire_seconds": w.acquire_secs,
        })),
        "semaphore": r.semaphore.iter().map(|s| {
            let mut lat = s.latency.clone();
            json!({
                "primitive": s.what,
                "workers": s.workers,
                "ops_per_sec": s.per_sec(),
                "p50_us": lat.percentile(50.0),
                "p99_us": lat.percentile(99.0),
            })
        }).collect::<Vec<_>>(),
        "scale": r.scale.as_ref().map(|s| {
            let (mut a, mut b) = (s.small.clone(), s.big.clone());
            json!({
                "small_rows": s.small_rows,
                "big_rows": s.big_rows,
                "small_p50_us": a.percentile(50.0),
                "small_p99_us": a.percentile(99.0),
                "big_p50_us": b.percentile(50.0),
                "big_p99_us": b.percentile(99.0),
                "fill_seconds": s.fill_secs,
                "explain": s.explain.iter().map(|(n, l)| json!({"statement": n, "plan": l})).collect::<Vec<_>>(),
            })
        }),
        "peers": r.peers.as_ref().map(|p| super::peers::json(r.dialect, p)),
        "targets": targets.iter().map(|t| json!({
            "name": t.name,
            "value": t.value,
            "limit": t.limit,
            "met": t.met,
        })).collect::<Vec<_>>(),
    })
}
