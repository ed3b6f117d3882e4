//! The tables printed on stdout: every figure of a run, as text.

use std::fmt::Write as _;

use sqlock::Dialect;

use super::targets::Target;
use crate::args::BenchArgs;
use crate::figures::{ms, per, ratio, Report, Variant};

/// The run's figures and the targets judged, as printed.
pub(crate) fn tables(r: &Report, targets: &[Target], args: &BenchArgs) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "sqlock-bench on {} ({}), table {}, {}, {} CPUs, load {} before, {} after, {:.0} s",
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
                Variant::Library(s) => ratio(Some(m), r.find(Variant::Raw(s), m.workers)),
                _ => None,
            };
            let native = ratio(Some(m), r.find(Variant::Native, m.workers));
            let redis = ratio(Some(m), r.find(Variant::Redis, m.workers));
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
                    _ => format!("{:.2}", per(m.stmts.total(), m.ops as f64)),
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
                c.per_sec(),
                ms(h.percentile(50.0)),
                ms(h.percentile(99.0)),
                c.waiter_rate(),
                per(c.stmts.total().saturating_sub(c.grants), c.grants as f64)
            );
        }
        if r.dialect == Dialect::Postgres && !r.notify {
            let _ = writeln!(
                o,
                "(waking waiters by notification is not available in this build)"
            );
        }
        let _ = writeln!(
            o,
            "\nA queue standing still: {} waiters behind one holder, statements per second",
            args.waiters
        );
        let _ = writeln!(
            o,
            "{:<12} {:<21} {:>14} {:>18}",
            "strategy", "waiting", "first waiter", "each one behind"
        );
        for c in &r.contended {
            if let Some((first, behind)) = c.still {
                let _ = writeln!(
                    o,
                    "{:<12} {:<21} {:>14.2} {:>18.2}",
                    c.strategy,
                    c.waiting.name(),
                    first,
                    behind
                );
            }
        }
    }
    if !r.rwlock.is_empty() {
        let _ = writeln!(o, "\nRead-write lock: acquire+release cycles per second");
        for m in &r.rwlock {
            let side = if m.side == "read" {
                "read lock"
            } else {
                "mutex"
            };
            let _ = writeln!(
                o,
                "  {side:<9}  {} worker(s)  {:>8.0}/s",
                m.workers,
                per(m.cycles, m.secs)
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
            per(w.statements, w.ticks as f64),
            per(w.renewed, w.ticks as f64),
            w.failed_ticks,
            w.client_statements,
            w.renew_mean_us / 1000.0
        );
    }
    if !r.semaphore.is_empty() {
        let _ = writeln!(
            o,
            "\nSemaphore: acquire+release of one permit of 8, beside the mutex (a key per worker)"
        );
        let _ = writeln!(
            o,
            "{:>7}  {:<22} {:>9} {:>8} {:>8}",
            "workers", "primitive", "ops/s", "p50 ms", "p99 ms"
        );
        for s in &r.semaphore {
            let mut lat = s.latency.clone();
            let _ = writeln!(
                o,
                "{:>7}  {:<22} {:>9.0} {:>8.3} {:>8.3}",
                s.workers,
                s.what,
                s.per_sec(),
                ms(lat.percentile(50.0)),
                ms(lat.percentile(99.0))
            );
        }
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
    if let Some(p) = &r.peers {
        o.push_str(&super::peers::text(r, p, args.rounds, args.hold));
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
