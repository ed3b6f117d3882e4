//! The chart: acquire+release per second against workers, one line per variant.
//!
//! Written as SVG text directly: a line chart needs a few dozen elements, and a
//! plotting crate would bring font loading and a long dependency tree into the benchmark.

use std::fmt::Write as _;

use crate::figures::{Report, Variant};

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// The colour of a strategy or baseline.
fn colour(v: Variant) -> &'static str {
    match v.strategy() {
        "lease" => "#1f77b4",
        "insert" => "#2ca02c",
        "for-update" => "#9467bd",
        "advisory" => "#7f7f7f",
        _ => "#d62728",
    }
}

/// The 1-2-5 steps of a logarithmic axis: 1, 2, 5, 10, 20, 50, ...
fn steps(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.max(1e-9).log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = m * decade;
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

/// The y axis's range, on 1-2-5 steps around the figures. The axis is logarithmic:
/// the baselines (native locks, Redis) run several times faster than row locks, and
/// on a linear axis the library's lines would lie flat on each other at the bottom.
fn axis(min: f64, max: f64) -> (f64, f64) {
    let max = max.max(1.0);
    let min = min.clamp(1.0, max);
    let below = |v: f64| {
        let d = 10f64.powf(v.log10().floor());
        [5.0, 2.0, 1.0]
            .iter()
            .map(|m| m * d)
            .find(|s| *s <= v)
            .unwrap_or(d)
    };
    let above = |v: f64| {
        let d = 10f64.powf(v.log10().floor());
        [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * d)
            .find(|s| *s >= v)
            .unwrap_or(10.0 * d)
    };
    let (lo, hi) = (below(min), above(max));
    if hi > lo {
        (lo, hi)
    } else {
        (lo, lo * 2.0)
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG document.
pub(crate) fn chart(r: &Report) -> String {
    let mut workers: Vec<usize> = r.uncontended.iter().map(|m| m.workers).collect();
    workers.sort_unstable();
    workers.dedup();
    let mut variants: Vec<Variant> = Vec::new();
    for m in &r.uncontended {
        if !variants.contains(&m.variant) {
            variants.push(m.variant);
        }
    }
    let max = r
        .uncontended
        .iter()
        .map(|m| m.per_sec())
        .fold(0.0, f64::max);
    let min = r
        .uncontended
        .iter()
        .map(|m| m.per_sec())
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let (ylo, yhi) = axis(min, max);
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |i: usize| {
        if workers.len() <= 1 {
            LEFT + pw / 2.0
        } else {
            LEFT + pw * i as f64 / (workers.len() - 1) as f64
        }
    };
    let span = yhi.log10() - ylo.log10();
    let y = |v: f64| TOP + ph * (1.0 - (v.max(ylo).log10() - ylo.log10()) / span);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{LEFT}" y="22" font-size="14" font-weight="bold">{}</text>"#,
        escape(&format!(
            "sqlock-bench, {}: acquire+release per second by workers ({})",
            r.dialect, r.date
        ))
    );
    // Grid and y labels.
    for v in steps(ylo, yhi) {
        let yy = y(v);
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0
        );
    }
    for (i, w) in workers.iter().enumerate() {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{w}</text>"#,
            x(i),
            TOP + ph + 18.0
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">workers (distinct keys)</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 10.0
    );
    let _ = writeln!(
        o,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">acquire+release / s (log scale)</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    let _ = writeln!(
        o,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#333"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        TOP + ph,
        TOP + ph,
        LEFT + pw,
        TOP + ph
    );
    // One line per variant: the library solid, its raw baseline dashed.
    for (li, &var) in variants.iter().enumerate() {
        let points: Vec<String> = workers
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                r.uncontended
                    .iter()
                    .find(|m| m.variant == var && m.workers == *w)
                    .map(|m| format!("{:.1},{:.1}", x(i), y(m.per_sec())))
            })
            .collect();
        let dash = match var {
            Variant::Raw(_) => r#" stroke-dasharray="6 4""#,
            Variant::Native | Variant::Redis => r#" stroke-dasharray="2 3""#,
            Variant::Library(_) => "",
        };
        let c = colour(var);
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{}"/>"#,
            points.join(" ")
        );
        for p in &points {
            if let Some((px, py)) = p.split_once(',') {
                let _ = writeln!(o, r#"<circle cx="{px}" cy="{py}" r="3" fill="{c}"/>"#);
            }
        }
        let ly = TOP + 10.0 + 20.0 * li as f64;
        let lx = LEFT + pw + 16.0;
        let _ = writeln!(
            o,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 28.0,
            lx + 34.0,
            ly + 4.0,
            escape(&var.label())
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_is_on_1_2_5_steps() {
        assert_eq!(axis(1_234.0, 14_000.0), (1_000.0, 20_000.0));
        assert_eq!(axis(450.0, 2_100.0), (200.0, 5_000.0));
        assert_eq!(axis(0.0, 0.0), (1.0, 2.0));
        assert_eq!(
            steps(200.0, 5_000.0),
            [200.0, 500.0, 1_000.0, 2_000.0, 5_000.0]
        );
    }
}
