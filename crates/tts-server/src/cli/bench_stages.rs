//! `qwen3-tts bench-stages`: per-stage GPU latency for each batch size, printed as a table
//! and saved as JSON (with the achieved weight bandwidth next to the 4.3 TB/s ceiling).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use tts_model::{LoadOptions, Model};

use crate::backend::{create_cuda, BackendSize};

#[derive(Debug, Args)]
pub struct BenchStagesArgs {
    /// Model: checkpoint directory or `random:1.7b` / `random:0.6b` / `demo`.
    #[arg(long, default_value = "random:1.7b")]
    pub model: String,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub cuda_device: usize,
    /// Batch sizes to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    pub batches: Vec<usize>,
    /// Timed repetitions per stage (the median is reported).
    #[arg(long, default_value_t = 30)]
    pub iters: usize,
    /// Frames per codec decode call.
    #[arg(long, default_value_t = 2)]
    pub codec_frames: usize,
    /// Frames generated per slot before timing (attention history; the prompt adds ~30
    /// positions).
    #[arg(long, default_value_t = 8)]
    pub context: usize,
    /// Also time GEMV launches on the release layer shapes.
    #[arg(long)]
    pub kernels: bool,
    /// Also trace the persistent kernels: time per phase and per grid barrier.
    #[arg(long)]
    pub trace: bool,
    /// Also run pairs of stage calls side by side on two backends (two streams, one
    /// process), e.g. `cp1+cp1,cp32+talker32,prefill+cp32,cp32+codec4`: how much of the GPU
    /// one latency-bound stage leaves to another.
    #[arg(long, value_delimiter = ',')]
    pub overlap: Vec<tts_cuda::overlap::Pair>,
    /// Also time a chain of this many dependent links with no weights (`kernels/probe.cu`):
    /// per PDL launch in a graph, and per phase of one launch with grid barriers.
    #[arg(long)]
    pub chain_costs: Option<usize>,
    /// Also time chains of this many links that rebuild a one-row GEMV launch piece by
    /// piece (`tts_cuda::bench::link_costs`): where a batch-1 link's time goes.
    #[arg(long)]
    pub link_costs: Option<usize>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(a: BenchStagesArgs) -> anyhow::Result<()> {
    let model = Model::load(&a.model, LoadOptions::default())?;
    let pair_rows = a.overlap.iter().flat_map(|p| [p.0.rows(), p.1.rows()]);
    let max_batch = a
        .batches
        .iter()
        .copied()
        .chain(pair_rows)
        .max()
        .unwrap_or(1)
        .next_power_of_two();
    let size = BackendSize {
        max_slots: max_batch,
        max_batch,
        max_positions: 512,
        code_predictor_lane: false,
        merge_prefill: false,
    };
    let mut b = create_cuda(&model, a.cuda_device, size)?;
    let mut tuning_json = Vec::new();
    println!("linear routing measured at start-up (device µs per call)");
    for t in b.tuning() {
        let timings: Vec<String> = t
            .timings
            .iter()
            .map(|(p, us)| format!("{p:?} {us:.1}"))
            .collect();
        println!(
            "  {}x{} rows {:>2}: {:?}  ({})",
            t.n,
            t.k,
            t.rows,
            t.chosen,
            timings.join(", ")
        );
        tuning_json.push(serde_json::json!({
            "n": t.n, "k": t.k, "rows": t.rows, "chosen": format!("{:?}", t.chosen),
            "us": t.timings.iter().map(|(p, us)| (format!("{p:?}"), *us)).collect::<std::collections::BTreeMap<_, _>>(),
        }));
    }
    let mut lt_json = Vec::new();
    if !b.lt_tuning().is_empty() {
        println!("cuBLASLt tuned at start-up (device µs per GEMM, columns = 2 x rows)");
    }
    for t in b.lt_tuning() {
        let lt = t
            .best_lt_us
            .map_or("-".to_string(), |us| format!("{us:.2}"));
        println!(
            "  {}x{} cols {:>3}: cublasGemmEx {:.2}, best of {} cuBLASLt {lt}{}",
            t.n,
            t.k,
            t.cols,
            t.gemm_ex_us,
            t.candidates,
            if t.kept { " (kept)" } else { "" }
        );
        lt_json.push(serde_json::json!({
            "n": t.n, "k": t.k, "cols": t.cols, "gemm_ex_us": t.gemm_ex_us,
            "lt_us": t.best_lt_us, "candidates": t.candidates, "kept": t.kept,
        }));
    }
    let mut kernel_json = Vec::new();
    if a.kernels {
        println!("{:<48} {:>10} {:>8}", "kernel", "us", "TB/s");
        for k in tts_cuda::bench::bench_gemv(b.gpu())? {
            println!("{:<48} {:>10.2} {:>8.2}", k.name, k.us, k.tb_per_s);
            kernel_json
                .push(serde_json::json!({"kernel": k.name, "us": k.us, "tb_per_s": k.tb_per_s}));
        }
    }
    let mut chain_json = serde_json::Value::Null;
    if let Some(links) = a.chain_costs.filter(|&n| n > 0) {
        let c = tts_cuda::bench::chain_costs(b.gpu(), links)?;
        println!(
            "dependent step, no weights, {} links of {} blocks: {:.2} us per PDL launch (one graph), {:.2} us per grid-barrier phase (one launch)",
            c.links, c.blocks, c.launch_us, c.barrier_phase_us
        );
        chain_json = serde_json::json!({
            "links": c.links, "blocks": c.blocks, "launch_us": c.launch_us,
            "barrier_phase_us": c.barrier_phase_us,
        });
    }
    let mut link_json = Vec::new();
    if let Some(links) = a.link_costs.filter(|&n| n > 0) {
        let costs = tts_cuda::bench::link_costs(b.gpu(), links)?;
        print!("{}", tts_cuda::bench::link_table(&costs));
        link_json = costs
            .iter()
            .map(|c| serde_json::json!({"chain": c.name, "links": c.links, "us": c.us, "weight_bytes": c.weight_bytes}))
            .collect();
    }
    let device = tts_model::Backend::info(&b).device.clone();
    let rows = tts_cuda::bench::bench_stages(
        &mut b,
        &model,
        &a.batches,
        a.iters,
        a.codec_frames,
        a.context,
    )?;
    println!("model {} on {device}", model.name);
    print!("{}", tts_cuda::bench::stage_table(&rows));
    let mut trace_json = Vec::new();
    if a.trace {
        let traces = tts_cuda::bench::trace_stages(&mut b, &model, &a.batches, a.context)?;
        print!("{}", tts_cuda::bench::trace_table(&traces));
        for t in &traces {
            for p in &t.phases {
                trace_json.push(serde_json::json!({
                    "stage": t.stage, "batch": t.batch, "phase": p.phase, "count": p.count,
                    "work_us": p.work_us, "barrier_us": p.barrier_us,
                }));
            }
        }
    }
    let mut overlap_json = Vec::new();
    if !a.overlap.is_empty() {
        // the second backend: its own stream, workspace and graphs on the same device
        let mut y = create_cuda(&model, a.cuda_device, size)?;
        let pairs = tts_cuda::overlap::bench_overlap(
            &mut b,
            &mut y,
            &model,
            &a.overlap,
            a.iters,
            a.context,
            a.codec_frames,
        )?;
        println!("stage pairs side by side (ms per call; gain = one after the other / together)");
        print!("{}", tts_cuda::overlap::overlap_table(&pairs));
        for p in &pairs {
            overlap_json.push(serde_json::json!({
                "a": p.pair.0.to_string(), "b": p.pair.1.to_string(),
                "alone_ms": p.alone_ms, "calls": p.calls, "together_ms": p.together_ms,
                "together_wall_ms": p.together_wall_ms, "gain": p.gain(),
            }));
        }
    }
    let json: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "stage": r.stage, "batch": r.batch, "gpu_ms": r.ms, "api_ms": r.api_ms,
                "weight_bytes": r.weight_bytes, "weight_tb_per_s": r.tb_per_s(),
            })
        })
        .collect();
    if let Some(path) = &a.out {
        let doc = serde_json::json!({
            "model": model.name, "device": device, "iters": a.iters,
            "codec_frames": a.codec_frames, "context_frames": a.context, "bandwidth_ceiling_tb_per_s": 4.3, "rows": json,
            "kernels": kernel_json, "routing": tuning_json, "cublaslt": lt_json, "trace": trace_json,
            "overlap": overlap_json, "chain_costs": chain_json, "link_costs": link_json,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
