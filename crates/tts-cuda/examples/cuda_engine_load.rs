//! The in-process engine load test (issue 4) on the CUDA backend:
//! `cuda_engine_load <model> <rate> <seconds> [slots] [profile] [prompts file] [text mode]`,
//! e.g. `random:1.7b 10 60 64 balanced crates/tts-bench/prompts/en.txt prefill`.
//! Poisson arrivals, simulated immediate playback; prints TTFA percentiles and underruns.

use std::sync::Arc;
use std::time::Duration;

use tts_cuda::{CudaBackend, CudaOptions};
use tts_engine::loadgen::{run_engine, LoadSpec};
use tts_engine::{EngineConfig, Profile};
use tts_model::{LoadOptions, Model, TextMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let model = Arc::new(Model::load(&arg(1, "random:1.7b"), LoadOptions::default())?);
    let rate: f64 = arg(2, "10").parse()?;
    let seconds: f64 = arg(3, "30").parse()?;
    let slots: usize = arg(4, "64").parse()?;
    let profile: Profile = arg(5, "balanced").parse()?;
    let text_mode: TextMode = arg(7, "prefill").parse()?;
    let mut spec = LoadSpec {
        rate,
        duration: Duration::from_secs_f64(seconds),
        text_mode,
        voice: model.voices().into_iter().next(),
        ..LoadSpec::default()
    };
    if let Some(path) = a.get(6) {
        spec.texts = std::fs::read_to_string(path)?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(String::from)
            .collect();
    }
    let mut opts = CudaOptions::default();
    opts.limits.max_slots = slots;
    opts.limits.max_batch = slots.next_power_of_two().min(64);
    let mut backend = CudaBackend::new(&model, opts)?;
    backend.warm_up()?;
    let config = EngineConfig {
        profile,
        ..EngineConfig::default()
    };
    println!("{}", run_engine(model, Box::new(backend), config, &spec)?);
    Ok(())
}
