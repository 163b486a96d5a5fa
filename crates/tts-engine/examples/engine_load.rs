//! In-process load test of the streaming engine: Poisson arrivals at `--rate` requests/s
//! for `--duration` seconds, every stream played back immediately by a simulated client;
//! prints time to first audio (server side, first chunk, first audible sample), end-to-end
//! time, underruns and throughput. `--sim` runs the same load on the simulator (fake
//! backend with set stage costs) to explore scheduling policies in no time.
//!
//!     cargo run --release -p tts-engine --example engine_load -- --model demo --rate 4 --duration 20
//!     cargo run --release -p tts-engine --example engine_load -- --sim gpu --rate 40 --duration 60

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tts_engine::loadgen::{run_engine, run_sim, LoadSpec};
use tts_engine::sim::{SimConfig, StageCosts};
use tts_engine::{EngineConfig, Profile};
use tts_model::reference::CpuBackend;
use tts_model::{LoadOptions, Model, TextMode};

#[derive(Debug, Parser)]
struct Args {
    /// `demo`, `random:0.6b`, `random:1.7b` or a checkpoint directory (CPU backend).
    #[arg(long, default_value = "demo")]
    model: String,
    /// Mean arrivals per second.
    #[arg(long, default_value_t = 2.0)]
    rate: f64,
    /// Seconds during which requests arrive.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Backend slots (most concurrent requests).
    #[arg(long, default_value_t = 16)]
    slots: usize,
    /// Scheduling profile: latency, balanced or throughput.
    #[arg(long, default_value = "balanced")]
    profile: Profile,
    /// `prefill` or `stream`.
    #[arg(long, default_value = "prefill")]
    text_mode: TextMode,
    /// Voice for every request (default: the model's first).
    #[arg(long)]
    voice: Option<String>,
    /// Seed of arrivals, texts and request seeds.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds to wait for requests to finish after the last arrival.
    #[arg(long, default_value_t = 120.0)]
    drain: f64,
    /// Simulate instead, with `gpu` (flat batch costs) or `cpu` (per-row costs) stage costs.
    #[arg(long)]
    sim: Option<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    let mut spec = LoadSpec {
        rate: a.rate,
        duration: Duration::from_secs_f64(a.duration),
        seed: a.seed,
        text_mode: a.text_mode,
        drain: Duration::from_secs_f64(a.drain),
        ..LoadSpec::default()
    };
    if let Some(costs) = a.sim.as_deref() {
        let costs = StageCosts::named(costs)
            .ok_or_else(|| format!("unknown --sim costs `{costs}` (gpu or cpu)"))?;
        let sim = SimConfig {
            profile: a.profile,
            costs,
            max_slots: a.slots,
            ..SimConfig::default()
        };
        println!("{}", run_sim(&sim, &spec));
        return Ok(());
    }
    let model = Arc::new(Model::load(&a.model, LoadOptions::default())?);
    spec.voice = a.voice.or_else(|| model.voices().into_iter().next());
    let backend = Box::new(CpuBackend::new(&model, a.slots)?);
    let config = EngineConfig {
        profile: a.profile,
        ..EngineConfig::default()
    };
    println!("{}", run_engine(model, backend, config, &spec)?);
    Ok(())
}
