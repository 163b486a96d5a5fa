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
    // Measured 2026-11-29 (bench/results/2026-11-29-stages-h200.*): per call, base + per row.
    let costs = StageCosts {
        prefill_base: us(300),
        prefill_per_row: us(2_000),
        code_predictor_base: us(2_800),
        code_predictor_per_row: us(43),
        talker_base: us(1_850),
        talker_per_row: us(21),
        codec_base: us(1_350),
        codec_per_frame: us(63),
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
