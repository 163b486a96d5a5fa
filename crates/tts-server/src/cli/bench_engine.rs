//! `qwen3-tts bench-engine`: the in-process engine load test on any device. Poisson
//! arrivals at `--rate` requests/s for `--duration` seconds, every stream played back
//! immediately by a simulated client; prints time to first audio (server side, first chunk,
//! first audible sample), end-to-end time, underruns and throughput, and writes them as
//! JSON with `--out`. (The same load as `tts-engine`'s `engine_load` example, which also
//! simulates; this one runs on the real backend of `--device`.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::json;
use tts_engine::loadgen::{run_engine, run_sim, LoadSpec};
use tts_engine::sim::{SimConfig, StageCosts};
use tts_engine::stats::{LoadReport, Outcome, RequestRecord, Summary};
use tts_engine::{EngineConfig, Profile};
use tts_model::{LoadOptions, Model, TextMode};

use crate::backend::{self, BackendSize, Device};

#[derive(Debug, Args)]
pub struct BenchEngineArgs {
    /// `demo`, `random:0.6b`, `random:1.7b` or a checkpoint directory.
    #[arg(long, default_value = "demo")]
    pub model: String,
    /// Device: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Mean arrivals per second.
    #[arg(long, default_value_t = 2.0)]
    pub rate: f64,
    /// Seconds during which requests arrive.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before the measured window (its requests are not reported).
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    /// Backend slots (most concurrent requests).
    #[arg(long, default_value_t = 16)]
    pub slots: usize,
    /// Scheduling profile: latency, balanced or throughput.
    #[arg(long, default_value = "balanced")]
    pub profile: Profile,
    /// Most rows in one call of a stage, a power of two [the profile's: 128].
    #[arg(long)]
    pub max_batch: Option<usize>,
    /// `prefill` or `stream`.
    #[arg(long, default_value = "prefill")]
    pub text_mode: TextMode,
    /// Voice for every request (default: the model's first).
    #[arg(long)]
    pub voice: Option<String>,
    /// Seed of arrivals, texts and request seeds.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds to wait for requests to finish after the last arrival.
    #[arg(long, default_value_t = 120.0)]
    pub drain: f64,
    /// Simulate instead (no model, no backend): `gpu` (flat batch costs) or `cpu`
    /// (per-row costs) stage costs, as `tts-engine`'s `engine_load --sim`.
    #[arg(long)]
    pub sim: Option<String>,
    /// Write the report as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(mut a: BenchEngineArgs) -> anyhow::Result<()> {
    if let Some(rows) = a.max_batch {
        a.profile
            .policy
            .set_max_batch(rows)
            .context("--max-batch")?;
    }
    anyhow::ensure!(a.rate > 0.0, "--rate must be > 0");
    anyhow::ensure!(
        a.duration > 0.0 && a.warmup >= 0.0,
        "--duration must be > 0, --warmup >= 0"
    );
    if let Some(costs) = a.sim.as_deref() {
        return simulate(&a, costs);
    }
    let model = Arc::new(
        Model::load(&a.model, LoadOptions::default())
            .with_context(|| format!("loading model `{}`", a.model))?,
    );
    if model.is_random() {
        eprintln!(
            "note: `{}` has random weights: its audio is noise",
            model.name
        );
    }
    let spec = LoadSpec {
        rate: a.rate,
        duration: Duration::from_secs_f64(a.warmup + a.duration),
        seed: a.seed,
        voice: a
            .voice
            .clone()
            .or_else(|| model.voices().into_iter().next()),
        text_mode: a.text_mode,
        drain: Duration::from_secs_f64(a.drain),
        ..LoadSpec::default()
    };
    let size = BackendSize {
        max_slots: a.slots,
        max_batch: a.slots.next_power_of_two().min(a.profile.policy.max_rows()),
        ..BackendSize::default()
    };
    let backend = backend::create_warm(&model, a.device, size)?;
    let config = EngineConfig {
        profile: a.profile.clone(),
        ..EngineConfig::default()
    };
    let report = run_engine(model, backend, config, &spec)?;
    finish(&a, &spec, report)
}

fn simulate(a: &BenchEngineArgs, costs: &str) -> anyhow::Result<()> {
    let Some(costs) = StageCosts::named(costs) else {
        anyhow::bail!("unknown --sim costs `{costs}` (gpu or cpu)");
    };
    let sim = SimConfig {
        profile: a.profile.clone(),
        costs,
        max_slots: a.slots,
        ..SimConfig::default()
    };
    let spec = LoadSpec {
        rate: a.rate,
        duration: Duration::from_secs_f64(a.warmup + a.duration),
        seed: a.seed,
        text_mode: a.text_mode,
        ..LoadSpec::default()
    };
    let report = run_sim(&sim, &spec);
    finish(a, &spec, report)
}

/// Drops the warm-up window's requests, prints the report and writes its JSON.
fn finish(a: &BenchEngineArgs, spec: &LoadSpec, report: LoadReport) -> anyhow::Result<()> {
    // Arrivals are in time order: drop those of the warm-up window.
    let warm = tts_engine::loadgen::arrivals(spec)
        .iter()
        .filter(|x| x.at.as_secs_f64() < a.warmup)
        .count();
    let report = LoadReport {
        title: format!("{} (warm-up {:.0} s excluded)", report.title, a.warmup),
        wall: report.wall,
        records: report.records.into_iter().skip(warm).collect(),
        stages: report.stages,
    };
    println!("{report}");
    if let Some(path) = &a.out {
        let doc = report_json(&report, a);
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn summary_json(values: Vec<Duration>) -> serde_json::Value {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    match Summary::of(&values) {
        Some(s) => json!({
            "count": s.count, "p50_ms": ms(s.p50), "p95_ms": ms(s.p95), "p99_ms": ms(s.p99),
            "max_ms": ms(s.max), "mean_ms": ms(s.mean),
        }),
        None => serde_json::Value::Null,
    }
}

fn report_json(r: &LoadReport, a: &BenchEngineArgs) -> serde_json::Value {
    let pick = |f: fn(&RequestRecord) -> Option<Duration>| {
        summary_json(r.records.iter().filter_map(f).collect())
    };
    let count = |o: Outcome| r.records.iter().filter(|x| x.outcome == o).count();
    let chars: usize = r
        .records
        .iter()
        .filter(|x| x.outcome == Outcome::Done)
        .map(|x| x.chars)
        .sum();
    let audio: f64 = r.records.iter().map(|x| x.audio.as_secs_f64()).sum();
    let wall = r.wall.as_secs_f64();
    json!({
        "title": r.title,
        "model": a.model,
        "device": match &a.sim {
            Some(costs) => format!("simulated ({costs} costs)"),
            None => format!("{:?}", a.device),
        },
        "profile": a.profile.name,
        "rate": a.rate,
        "duration_s": a.duration,
        "warmup_s": a.warmup,
        "slots": a.slots,
        "text_mode": format!("{:?}", a.text_mode),
        "seed": a.seed,
        "wall_s": wall,
        "requests": {
            "total": r.records.len(), "done": count(Outcome::Done), "failed": count(Outcome::Failed),
            "rejected": count(Outcome::Rejected), "unfinished": count(Outcome::Unfinished),
        },
        "server_ttfa": pick(|x| x.server_ttfa),
        "first_chunk": pick(|x| x.first_chunk),
        "audible_ttfa": pick(|x| x.audible),
        "end_to_end": pick(|x| x.end_to_end),
        "underruns": r.records.iter().map(|x| x.underruns as u64).sum::<u64>(),
        "requests_with_underruns": r.records.iter().filter(|x| x.underruns > 0).count(),
        "audio_seconds": audio,
        "chars_per_second": if wall > 0.0 { chars as f64 / wall } else { 0.0 },
    })
}
