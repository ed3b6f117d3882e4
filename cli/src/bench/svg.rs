//! The chart: acquire+release per second against workers, one line per variant.
//!
//! Written as SVG text directly: a line chart needs a few dozen elements, and a
//! plotting crate would bring font loading and a long dependency tree into the tool.

use std::fmt::Write as _;

use super::parts::{Report, Variant};

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

/// A round upper bound for the y axis, and its tick step.
fn axis(max: f64) -> (f64, f64) {
    let max = max.max(1.0);
    let magnitude = 10f64.powf(max.log10().floor());
    let step = [0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| max / s <= 8.0)
        .unwrap_or(magnitude);
    ((max / step).ceil() * step, step)
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
    let (ymax, step) = axis(max * 1.05);
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |i: usize| {
        if workers.len() <= 1 {
            LEFT + pw / 2.0
        } else {
            LEFT + pw * i as f64 / (workers.len() - 1) as f64
        }
    };
    let y = |v: f64| TOP + ph * (1.0 - v / ymax);
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
            "sqlock bench, {}: acquire+release per second by workers ({})",
            r.dialect, r.date
        ))
    );
    // Grid and y labels.
    let mut v = 0.0;
    while v <= ymax + step / 2.0 {
        let yy = y(v);
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0
        );
        v += step;
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
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">acquire+release / s</text>"#,
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
    fn axis_is_round() {
        assert_eq!(axis(2_345.0), (2_500.0, 500.0));
        assert_eq!(axis(14_000.0), (14_000.0, 2_000.0));
        let (top, step) = axis(0.0);
        assert!(top >= 1.0 && step > 0.0);
    }
}
