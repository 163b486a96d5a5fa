//! Draws `latency_vs_rate.svg` from percentiles gathered over several bench runs (one
//! `qwen3-tts bench` call per rate, or runs on different days): reads lines
//! `rate p50 p95 p99` (audible TTFA, ms) from stdin and writes the SVG to stdout.
//! `cargo run -p tts-bench --example plot_rates -- "<title>" "<subtitle>" < points.txt`

use std::io::Read;

use tts_bench::plot::{latency_svg, LatencyPoint};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let title = args.get(1).map_or("audible TTFA vs rate", String::as_str);
    let subtitle = args.get(2).map_or("", String::as_str);
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text)?;
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let v: Vec<f64> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("line {}: {e}", i + 1))?;
        let [rate, p50, p95, p99] = v[..] else {
            return Err(format!("line {}: want `rate p50 p95 p99`", i + 1).into());
        };
        points.push(LatencyPoint {
            rate,
            p50,
            p95,
            p99,
        });
    }
    print!("{}", latency_svg(&points, title, subtitle));
    Ok(())
}
