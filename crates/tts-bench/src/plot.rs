//! `latency_vs_rate.svg`: p50/p95/p99 audible TTFA against the offered rate, written as
//! plain SVG (no plotting dependency; opens in any browser).

use std::fmt::Write as _;

/// One rate's audible TTFA percentiles (ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyPoint {
    pub rate: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

/// (name, colour, value) of one line.
type Series = (&'static str, &'static str, fn(&LatencyPoint) -> f64);

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 55.0;

/// The plot; an empty frame with a note when there are no points.
pub fn latency_svg(points: &[LatencyPoint], title: &str, subtitle: &str) -> String {
    let mut pts: Vec<LatencyPoint> = points
        .iter()
        .copied()
        .filter(|p| [p.rate, p.p50, p.p95, p.p99].iter().all(|x| x.is_finite()))
        .collect();
    pts.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    let x_max = nice_ceiling(pts.iter().map(|p| p.rate).fold(0.0, f64::max));
    let y_max = nice_ceiling(pts.iter().map(|p| p.p99.max(p.p95)).fold(0.0, f64::max));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |v: f64| LEFT + v / x_max * pw;
    let y = |v: f64| TOP + ph - v / y_max * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="42" fill="#555">{}</text>"##,
        escape(subtitle)
    );
    // Grid and ticks.
    for i in 0..=5 {
        let v = y_max * i as f64 / 5.0;
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0,
            tick_label(v)
        );
        let u = x_max * i as f64 / 5.0;
        let xx = x(u);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 18.0,
            tick_label(u)
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">offered load (requests/s)</text>"#,
        LEFT + pw / 2.0,
        H - 12.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">audible TTFA (ms)</text>"#,
        TOP + ph / 2.0
    );
    if pts.is_empty() {
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#900">no rate produced an audible onset</text>"##,
            LEFT + pw / 2.0,
            TOP + ph / 2.0
        );
    }
    let series: [Series; 3] = [
        ("p50", "#1f77b4", |p| p.p50),
        ("p95", "#ff7f0e", |p| p.p95),
        ("p99", "#d62728", |p| p.p99),
    ];
    for (i, (name, color, get)) in series.iter().enumerate() {
        let coords: Vec<String> = pts
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.rate), y(get(p))))
            .collect();
        if !coords.is_empty() {
            let _ = writeln!(
                s,
                r#"<polyline class="{name}" fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                coords.join(" ")
            );
        }
        for p in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"><title>{name} {} ms at {} req/s</title></circle>"#,
                x(p.rate),
                y(get(p)),
                tick_label(get(p)),
                tick_label(p.rate)
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + pw + 16.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{name}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The smallest of 1, 2, 2.5, 5 x 10^k at or above `v` (1 for nothing).
fn nice_ceiling(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * mag)
}

fn tick_label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_series_over_the_rates() {
        let pts = [
            LatencyPoint {
                rate: 10.0,
                p50: 12.0,
                p95: 18.0,
                p99: 25.0,
            },
            LatencyPoint {
                rate: 1.0,
                p50: 8.0,
                p95: 10.0,
                p99: 11.0,
            },
        ];
        let svg = latency_svg(&pts, "a <b> & c", "sub");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(svg.matches("<circle").count(), 6);
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        // Axes: rate up to 10, latency up to 25 ms.
        assert!(svg.contains(">25</text>"));
        let empty = latency_svg(&[], "t", "s");
        assert!(empty.contains("no rate produced"));
        assert_eq!(empty.matches("<polyline").count(), 0);
    }

    #[test]
    fn nice_axis_ends() {
        assert_eq!(nice_ceiling(23.0), 25.0);
        assert_eq!(nice_ceiling(40.0), 50.0);
        assert_eq!(nice_ceiling(0.7), 1.0);
        assert_eq!(nice_ceiling(100.0), 100.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
    }
}
