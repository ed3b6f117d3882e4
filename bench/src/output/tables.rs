//! The benchmark's output: tables on stdout, the targets judged, JSON, CSV and a chart.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};
use sqlock::{Dialect, Strategy};

use super::parts::{Contended, Measured, Report, Variant, Waiting};
use crate::args::BenchArgs;
use crate::Failure;

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

/// Prints the tables (unless the JSON goes to stdout) and writes the files asked for.
pub(crate) fn emit(r: &Report, args: &BenchArgs) -> Result<(), Failure> {
    let targets = targets(r);
    let to_stdout = args.json.as_deref() == Some(Path::new("-"));
    if !to_stdout {
        print!("{}", tables(r, &targets, args));
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&to_json(r, &targets, args))
            .map_err(|e| Failure::Other(format!("cannot write JSON: {e}")))?;
        if to_stdout {
            println!("{text}");
        } else {
            write(path, &text)?;
        }
    }
    if let Some(path) = &args.csv {
        write(path, &to_csv(r))?;
    }
    if let Some(path) = &args.svg {
        write(path, &super::svg::chart(r))?;
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text)
        .map_err(|e| Failure::Other(format!("cannot write {}: {e}", path.display())))
}

fn ms(us: Option<u32>) -> f64 {
    f64::from(us.unwrap_or(0)) / 1000.0
}

/// The measurement of `v` with `n` workers.
fn find(r: &Report, v: Variant, n: usize) -> Option<&Measured> {
    r.uncontended
        .iter()
        .find(|m| m.variant == v && m.workers == n)
}

fn ratio(a: Option<&Measured>, b: Option<&Measured>) -> Option<f64> {
    let (a, b) = (a?.per_sec(), b?.per_sec());
    (b > 0.0).then(|| a / b)
}

fn most_workers(r: &Report) -> usize {
    r.uncontended.iter().map(|m| m.workers).max().unwrap_or(1)
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
    let most = most_workers(r);
    for s in [Strategy::Lease, Strategy::Insert] {
        for n in [1, most] {
            if let Some(x) = ratio(find(r, Variant::Library(s), n), find(r, Variant::Raw(s), n)) {
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
        if c.strategy != Strategy::Lease.name() || c.waiting == Waiting::NativeBlocking {
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
        let per_tick = per(w.statements, w.ticks);
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

fn per(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn tables(r: &Report, targets: &[Target], args: &BenchArgs) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "sqlock bench on {} ({}), table {}, {}, {} CPUs, load {} before, {} after, {:.0} s",
        r.dialect,
        r.server,
        r.table,
        r.date,
        r.cpus,
        r.load_before.as_deref().unwrap_or("?"),
        r.load_after.as_deref().unwrap_or("?"),
        r.secs
    );
    if !r.uncontended.is_empty() {
        let _ = writeln!(
            o,
            "\nUncontended: acquire+release on keys of their own ({} rounds of {:?} each)",
            args.rounds,
            args.duration / args.rounds
        );
        let _ = writeln!(
            o,
            "{:>7}  {:<22} {:>9} {:>7} {:>7} {:>7} {:>8} {:>8} {:>9}",
            "workers",
            "variant",
            "ops/s",
            "vs raw",
            "vs nat",
            "vs redis",
            "p50 ms",
            "p99 ms",
            "stmts/op"
        );
        for m in &r.uncontended {
            let raw = match m.variant {
                Variant::Library(s) => ratio(Some(m), find(r, Variant::Raw(s), m.workers)),
                _ => None,
            };
            let native = ratio(Some(m), find(r, Variant::Native, m.workers));
            let redis = ratio(Some(m), find(r, Variant::Redis, m.workers));
            let mut lat = m.latency.clone();
            let _ = writeln!(
                o,
                "{:>7}  {:<22} {:>9.0} {:>7} {:>7} {:>8} {:>8.3} {:>8.3} {:>9}",
                m.workers,
                m.variant.label(),
                m.per_sec(),
                fmt_ratio(raw),
                fmt_ratio(native),
                fmt_ratio(redis),
                ms(lat.percentile(50.0)),
                ms(lat.percentile(99.0)),
                match m.variant {
                    // Redis commands do not go through sqlx: two per cycle.
                    Variant::Redis => "-".to_owned(),
                    _ => format!("{:.2}", per(m.stmts.total(), m.ops)),
                },
            );
        }
    }
    if !r.round_trips.is_empty() {
        let _ = writeln!(o, "\nStatements the library sends (counted one at a time)");
        for rt in &r.round_trips {
            let _ = writeln!(
                o,
                "  {:<10} acquire {:.2}, release {:.2}",
                rt.strategy.name(),
                rt.acquire,
                rt.release
            );
        }
    }
    if !r.contended.is_empty() {
        let _ = writeln!(
            o,
            "\nContended: {} workers on one key, hold {:?}, poll {:?}",
            args.waiters + 1,
            args.hold,
            args.poll
        );
        let _ = writeln!(
            o,
            "{:<12} {:<21} {:>9} {:>14} {:>14} {:>16} {:>15}",
            "strategy",
            "waiting",
            "grants/s",
            "handoff p50 ms",
            "handoff p99 ms",
            "stmts/s/waiter",
            "stmts/acquire"
        );
        for c in &r.contended {
            let mut h = c.handoff.clone();
            let _ = writeln!(
                o,
                "{:<12} {:<21} {:>9.1} {:>14.3} {:>14.3} {:>16.2} {:>15.2}",
                c.strategy,
                c.waiting.name(),
                per_sec(c),
                ms(h.percentile(50.0)),
                ms(h.percentile(99.0)),
                c.waiter_rate(),
                per(c.stmts.total().saturating_sub(c.grants), c.grants)
            );
        }
        if r.dialect == Dialect::Postgres && !r.notify {
            let _ = writeln!(
                o,
                "(waking waiters by notification is not available in this build)"
            );
        }
    }
    if let Some(w) = &r.watchdog {
        let _ = writeln!(
            o,
            "\nWatchdog: {} leases held by one handle (taken in {:.1} s): {} ticks, {} statements \
             ({:.2} per tick), {:.0} leases renewed per tick, {} failed ticks; sqlx saw {} \
             statements in the window, renewal statement {:.1} ms on average",
            w.leases,
            w.acquire_secs,
            w.ticks,
            w.statements,
            per(w.statements, w.ticks),
            per(w.renewed, w.ticks),
            w.failed_ticks,
            w.client_statements,
            w.renew_mean_us / 1000.0
        );
    }
    if let Some(s) = &r.scale {
        let (mut a, mut b) = (s.small.clone(), s.big.clone());
        let _ = writeln!(
            o,
            "\nScale: lease acquisition of random existing keys (tables filled in {:.1} s)",
            s.fill_secs
        );
        for (rows, l) in [(s.small_rows, &mut a), (s.big_rows, &mut b)] {
            let _ = writeln!(
                o,
                "  {:>10} rows: p50 {:.3} ms, p99 {:.3} ms ({} samples)",
                rows,
                ms(l.percentile(50.0)),
                ms(l.percentile(99.0)),
                l.len()
            );
        }
        for (name, lines) in &s.explain {
            let _ = writeln!(o, "  plan of {name} with {} rows:", s.big_rows);
            for l in lines {
                let _ = writeln!(o, "    {l}");
            }
        }
    }
    let _ = writeln!(o, "\nTargets");
    for t in targets {
        let mark = match t.met {
            Some(true) => "met",
            Some(false) => "NOT MET",
            None => "n/a",
        };
        let _ = writeln!(
            o,
            "  [{mark:>7}] {}: {} (target {})",
            t.name, t.value, t.limit
        );
    }
    o
}

fn fmt_ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

fn per_sec(c: &Contended) -> f64 {
    if c.secs > 0.0 {
        c.grants as f64 / c.secs
    } else {
        0.0
    }
}

fn to_json(r: &Report, targets: &[Target], args: &BenchArgs) -> Value {
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
                "statements_per_op": per(m.stmts.total(), m.ops),
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
                "grants_per_sec": per_sec(c),
                "handoffs": h.len(),
                "handoff_p50_us": h.percentile(50.0),
                "handoff_p99_us": h.percentile(99.0),
                "statements": c.stmts.total(),
                "statements_by_kind": c.stmts.by_kind_json(),
                "wait_seconds": c.wait_secs,
                "statements_per_sec_per_waiter": c.waiter_rate(),
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
        },
        "uncontended": uncontended,
        "round_trips": r.round_trips.iter().map(|t| json!({
            "strategy": t.strategy.name(),
            "acquire_statements": t.acquire,
            "release_statements": t.release,
        })).collect::<Vec<_>>(),
        "contended": contended,
        "notify_available": r.notify,
        "watchdog": r.watchdog.as_ref().map(|w| json!({
            "leases": w.leases,
            "ticks": w.ticks,
            "statements": w.statements,
            "statements_per_tick": per(w.statements, w.ticks),
            "renewed": w.renewed,
            "failed_ticks": w.failed_ticks,
            "client_statements": w.client_statements,
            "renew_statement_mean_us": w.renew_mean_us,
            "acquire_seconds": w.acquire_secs,
        })),
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
        "targets": targets.iter().map(|t| json!({
            "name": t.name,
            "value": t.value,
            "limit": t.limit,
            "met": t.met,
        })).collect::<Vec<_>>(),
    })
}

/// One line per figure: `part,variant,strategy,workers,metric,value`.
fn to_csv(r: &Report) -> String {
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
            per(m.stmts.total(), m.ops),
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
        line("contended", v, s, n, "grants_per_sec", per_sec(c));
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
    if let Some(w) = &r.watchdog {
        line("watchdog", "library", "lease", 1, "leases", w.leases as f64);
        line(
            "watchdog",
            "library",
            "lease",
            1,
            "statements_per_tick",
            per(w.statements, w.ticks),
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
