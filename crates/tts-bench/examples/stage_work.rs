//! Prints what a server's stages did in each rate window of an end-to-end sweep, from the
//! `/metrics` snapshots `bench/e2e-sweep.sh` saves (`stage_work_per_rate.txt` of the
//! results folders): one line per `LABEL=BEFORE:AFTER` argument.
//! `cargo run -p tts-bench --example stage_work -- 1=metrics-0.txt:metrics-1.txt 10=metrics-1.txt:metrics-10.txt`

use tts_bench::stage_work::{Snapshot, Window};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let windows: Vec<String> = std::env::args().skip(1).collect();
    if windows.is_empty() {
        return Err(
            "usage: stage_work LABEL=BEFORE:AFTER [...] (two /metrics snapshots each)".into(),
        );
    }
    let read = |path: &str| -> Result<Snapshot, Box<dyn std::error::Error>> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        Ok(Snapshot::parse(&text).map_err(|e| format!("{path}: {e}"))?)
    };
    println!("per window, /metrics differences: calls x mean rows, ms per call, busy s per stage");
    for arg in &windows {
        let (label, pair) = arg
            .split_once('=')
            .ok_or_else(|| format!("{arg}: want LABEL=BEFORE:AFTER"))?;
        let (before, after) = pair
            .split_once(':')
            .ok_or_else(|| format!("{arg}: want LABEL=BEFORE:AFTER"))?;
        println!(
            "{label}: {}",
            Window::between(&read(before)?, &read(after)?)
        );
    }
    Ok(())
}
