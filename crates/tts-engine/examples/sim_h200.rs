//! Explores scheduling profiles on the simulator with stage costs measured on the H200
//! (`random:1.7b`, CUDA backend, bench/results): what the engine would do at a given
//! rate without spending GPU time.
//! `cargo run --release -p tts-engine --example sim_h200 -- <rate> <seconds> <slots> <profile> [prompts]`

use std::time::Duration;

use tts_engine::fake_backend::StageCosts;
use tts_engine::loadgen::{run_sim, LoadSpec};
use tts_engine::sim::SimConfig;
use tts_engine::Profile;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let us = Duration::from_micros;
    // Fitted 2026-11-29 to the server's per-call stage durations at 1-60 req/s (end-to-end
    // run at commit f174e75, bench/results/2026-11-29-h200-e2e-2/): per call, base + per row
    // (codec: per frame).
    let costs = StageCosts {
        prefill_base: us(300),
        prefill_per_row: us(2_600),
        code_predictor_base: us(2_850),
        code_predictor_per_row: us(40),
        talker_base: us(2_450),
        talker_per_row: us(28),
        codec_base: us(1_500),
        codec_per_frame: us(30),
    };
    let mut spec = LoadSpec {
        rate: arg(1, "10").parse()?,
        duration: Duration::from_secs_f64(arg(2, "60").parse()?),
        ..LoadSpec::default()
    };
    if let Some(p) = a.get(5) {
        spec.texts = std::fs::read_to_string(p)?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(String::from)
            .collect();
    }
    let sim = SimConfig {
        profile: arg(4, "balanced").parse::<Profile>()?,
        costs,
        max_slots: arg(3, "64").parse()?,
        ..SimConfig::default()
    };
    println!("{}", run_sim(&sim, &spec));
    Ok(())
}
