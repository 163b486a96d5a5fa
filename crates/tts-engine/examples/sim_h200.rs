//! Explores scheduling profiles on the simulator with stage costs measured on the H200
//! (`random:1.7b`, CUDA backend, bench/results): what the engine would do at a given
//! rate without spending GPU time.
//! `cargo run --release -p tts-engine --example sim_h200 -- <rate> <seconds> <slots> <profile> [prompts] [key=value...]`
//! Policy overrides after the prompts file: `fill=none|bucket|max`, `codec_fill=...`,
//! `chunks=1,2,4`, `reserve_ms=60`, `urgent_model=false`, `codec_max_frames=64`,
//! `lead_ms=300`, `prefill_rows=16`, `max_fill_from=8`, `codec_long_from=64`, `max_batch=64`; stage costs:
//! `jitter=0.1` (random extra time per call, `fake_backend::Jitter`), `cp_base_us=`,
//! `cp_small_row_us=`, `cp_row_us=`, `talker_base_us=`,
//! `codec_base_us=`, `prefill_row_us=`, `prefill_base_us=`; `merge_prefill_us=250` (the
//! backend merges prompts into talker steps, as the CUDA one does, each prompt adding that
//! much to the step; the default) and `prefill_with_step=false` (the policy off: prefill and
//! step apart, as before balanced turned it on); `seed=2` (arrivals, texts and jitter).

use std::time::Duration;

use tts_engine::chunker::ChunkSchedule;
use tts_engine::fake_backend::{Jitter, StageCosts};
use tts_engine::loadgen::{run_sim, LoadSpec};
use tts_engine::sim::SimConfig;
use tts_engine::trim::TrimConfig;
use tts_engine::{Fill, OnsetRule, Profile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let us = Duration::from_micros;
    // Refitted 2026-12-01 to the server's per-call stage durations (`/metrics`) at 1, 10,
    // 50-65 req/s at 519056f (bench/results/2026-12-01-h200-tiles-f16: talker step 1.61 /
    // 2.13 ms at 1.1 / 3.2 rows and 3.14-3.23 ms at 40-61, longer contexts than the stage
    // benchmark's; prefill, all the prompts of a call in one pass, 2.78-2.89 ms at 1.0-1.3
    // prompts; codec 1.2 ms per call + 64 us per decoded frame, the per-frame part scaled
    // by 0.88 for the f16 convolutions). On 2026-12-02 the code predictor's base went from
    // 1.98 to 1.65 ms (server: 1.91 / 2.32 / 3.41 / 3.83 ms at 1.1 / 2.9 / 15.8 / 45.5 rows,
    // bench/results/2026-12-02-h200-buckets-128); the simulator then gave p95 22.8 / 42.0 /
    // 54.8 / 54.9 ms at 40 / 73 / 79 / 81 req/s with 192 slots, against 21.8 / 41.0 / 48.2 /
    // 56.6 measured. Fitting prefill (2.55-2.58 ms) and the codec (3.80 ms at 79 req/s) to
    // that run too made it optimistic (p95 33.3 / 40.8 / 44.7 ms at 73 / 79 / 81): the
    // simulator has no host time between calls, which their higher costs stand in for.
    // On 2026-12-03 the per-row costs of the code predictor (216 -> 200 µs up to 8 rows,
    // 15 -> 5 µs beyond) and of prefill (250 -> 100 µs a prompt) came down to the server's
    // figures at 100 req/s (code predictor 3.54 ms at 58.8 rows, prefill 2.57 ms at 1.5
    // prompts; bench/results/2026-12-03-h200-head-check): the simulator then gives p95
    // 21.4 / 25.1 / 38.0 / 48.1 / 68.0 / 431 ms at 40 / 60 / 80 / 100 / 105 / 120 req/s
    // (seed 1) against 20.8 / 23.7 / 38.8 / 44.3-45.1 / 50.9 / 235 measured
    // (bench/results/2026-12-03-h200-codec-long-top-ups); before, 126 ms at 100 req/s.
    let mut costs = StageCosts {
        prefill_base: us(2_550),
        prefill_per_row: us(100),
        code_predictor_base: us(1_650),
        code_predictor_per_small_row: us(200),
        code_predictor_per_row: us(5),
        talker_base: us(1_340),
        talker_per_small_row: us(200),
        talker_per_row: us(6),
        small_rows: 8,
        codec_base: us(1_200),
        codec_per_frame: us(56),
        // A guess (those runs' metrics did not separate merged calls): with it the
        // simulator gives p95 41.6-42.8 / 45.4-47.4 / 47.7-48.4 / 48.9-181.6 ms at 100 / 110
        // / 115 / 120 req/s (seeds 1-4) against 44.9 / 47.6-49.0 / 49.9 / 51.0-59.6
        // measured with merging (bench/results/2026-12-03-h200-prefill-with-step).
        merged_prefill_per_prompt: Some(us(250)),
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
    let mut profile = arg(4, "balanced").parse::<Profile>()?;
    let mut jitter_scale = 0.0;
    for kv in a.iter().skip(6) {
        let (key, value) = kv
            .split_once('=')
            .ok_or(format!("`{kv}`: expected key=value"))?;
        let p = &mut profile.policy;
        match key {
            "fill" => p.fill = parse_fill(value)?,
            "codec_fill" => p.codec_fill = parse_fill(value)?,
            "chunks" => profile.chunks = value.parse::<ChunkSchedule>()?,
            "reserve_ms" => p.reserve = Duration::from_millis(value.parse()?),
            "urgent_model" => p.urgent_model_stages = value.parse()?,
            "codec_max_frames" => p.codec_max_frames = value.parse()?,
            "lead_ms" => p.lead = Duration::from_millis(value.parse()?),
            "prefill_rows" => p.prefill_max_rows = value.parse()?,
            "max_fill_from" => p.max_fill_from = value.parse()?,
            "codec_long_from" => p.codec_long_top_ups_from = value.parse()?,
            "max_batch" => p.set_max_batch(value.parse()?)?,
            "jitter" => jitter_scale = value.parse()?,
            "seed" => spec.seed = value.parse()?,
            "cp_base_us" => costs.code_predictor_base = us(value.parse()?),
            "cp_small_row_us" => costs.code_predictor_per_small_row = us(value.parse()?),
            "cp_row_us" => costs.code_predictor_per_row = us(value.parse()?),
            "talker_base_us" => costs.talker_base = us(value.parse()?),
            "codec_base_us" => costs.codec_base = us(value.parse()?),
            "prefill_row_us" => costs.prefill_per_row = us(value.parse()?),
            "prefill_base_us" => costs.prefill_base = us(value.parse()?),
            "merge_prefill_us" => costs.merged_prefill_per_prompt = Some(us(value.parse()?)),
            "prefill_with_step" => p.prefill_with_step = value.parse()?,
            _ => return Err(format!("unknown override `{key}`").into()),
        }
    }
    profile.policy.validate()?;
    let jitter = Jitter::new(jitter_scale, spec.seed);
    let sim = SimConfig {
        profile,
        costs,
        max_slots: arg(3, "64").parse()?,
        // As the server runs CustomVoice: the bootstrap frame is dropped, then onset trim.
        trim: TrimConfig {
            drop_frames: 1,
            onset: Some(OnsetRule::default()),
        },
        jitter,
        ..SimConfig::default()
    };
    println!("{}", run_sim(&sim, &spec));
    Ok(())
}

fn parse_fill(value: &str) -> Result<Fill, String> {
    match value {
        "none" => Ok(Fill::None),
        "bucket" => Ok(Fill::Bucket),
        "max" => Ok(Fill::Max),
        _ => Err(format!("fill `{value}`: use none, bucket or max")),
    }
}
