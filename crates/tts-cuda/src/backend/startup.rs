//! Start-up of [`CudaBackend`]: the model onto the GPU, the linear paths chosen (and
//! tuned when asked), the codec, then the graphs captured and the codec warmed up.

use std::collections::HashMap;

use tts_model::backend::BackendInfo;
use tts_model::Model;

use super::{Codec, CudaBackend, CudaOptions, GraphKind};
use crate::buckets::batch_buckets;
use crate::clone_inputs::CloneInputs;
use crate::codec::DevCodec;
use crate::device::Gpu;
use crate::error::CudaError;
use crate::lane::CpLane;
use crate::linear::Linear;
use crate::persistent::Persistent;
use crate::prefill_plan::token_buckets;
use crate::prefix::{CacheShape, PrefixCache};
use crate::routing::{autotune, LinearPaths, TunedShape};
use crate::talker::{talker_kv, SampleRules};
use crate::weights::{DevCodePredictor, DevTalker, HostLoader};
use crate::workspace::Workspace;

/// One layer of each shape the model runs, for start-up tuning.
fn tuning_layers<'a>(t: &'a DevTalker, cp: &'a DevCodePredictor) -> Vec<&'a Linear> {
    let mut v = vec![&t.fc1, &t.fc2, &t.codec_head];
    for s in [&t.stack, &cp.stack] {
        if let Some(l) = s.layers.first() {
            v.extend([&l.qkv, &l.o, &l.gate_up, &l.down]);
        }
    }
    v.extend(cp.lm_heads.first());
    v.extend(cp.projection.as_ref());
    v
}

/// The device `opts` names, with its launch settings (PDL, the kernels left out of a
/// timing ablation).
fn open_gpu(opts: &CudaOptions) -> Result<Gpu, CudaError> {
    let mut gpu = Gpu::open(opts.device)?;
    gpu.pdl &= opts.pdl;
    gpu.staged_trigger = opts.staged_trigger;
    gpu.gemv_passes = opts.gemv_passes;
    if !opts.without_kernels.is_empty() {
        tracing::warn!(kernels = ?opts.without_kernels, "timing ablation: these kernels are never launched, every result is wrong");
        gpu.without.clone_from(&opts.without_kernels);
    }
    Ok(gpu)
}

/// The linear and attention paths `opts` allows (each on where the device takes it).
fn choose_paths(ws: &mut Workspace, opts: &CudaOptions) {
    let paths = &mut ws.scratch.paths;
    paths.cluster &= opts.cluster_linear;
    paths.tile &= opts.tile_linear;
    paths.tile_wg &= opts.tile_wgmma;
    paths.wide &= opts.wide_linear;
    paths.chain_split &= opts.chain_split;
    paths.chain_attention = opts.chain_attention;
    paths.chain_tile = opts.chain_tile;
    paths.chain_gemv = opts.chain_gemv;
    paths.fp8_mma = opts.fp8_mma;
    paths.fp8_codes = opts.fp8_codes;
    paths.group_attention = opts.group_attention;
    paths.row_attention_rows = opts.row_attention_rows;
    paths.row_attention_split = opts.row_attention_split;
}

/// The persistent code-predictor loop and talker layers, each only when asked for (built,
/// they would hold device memory) and when it builds on this device.
fn persistent_kernels(
    gpu: &Gpu,
    (talker, cp): (&DevTalker, &DevCodePredictor),
    ws: &Workspace,
    opts: &CudaOptions,
) -> Result<(Option<Persistent>, Option<Persistent>), CudaError> {
    let adopt = |stage: &str, rows: usize, built: Result<Persistent, String>| match built {
        Ok(p) => Some(p.up_to(rows)),
        Err(why) => {
            tracing::info!(%why, "{stage} runs launch by launch");
            None
        }
    };
    let cp_loop = match opts.persistent_cp_rows {
        0 => None,
        rows => adopt(
            "code predictor",
            rows,
            Persistent::code_predictor(gpu, cp, ws, opts.cp_prefetch)?,
        ),
    };
    let talker_layers = match opts.persistent_talker_rows {
        0 => None,
        rows => adopt(
            "talker step",
            rows,
            Persistent::talker(gpu, talker, ws, opts.talker_prefetch)?,
        ),
    };
    Ok((cp_loop, talker_layers))
}

/// cuBLASLt's algorithms for the batched GEMMs, tuned when `opts.lt_linear` asks (else
/// cuBLASLt is left off). Runs before [`route_by_timing`], which times the cuBLAS path as
/// it will then run.
fn tune_lt(
    gpu: &Gpu,
    layers: &[&Linear],
    ws: &Workspace,
    opts: &CudaOptions,
) -> Result<Vec<crate::lt::LtTuned>, CudaError> {
    match &gpu.lt {
        Some(_) if opts.lt_linear => {
            let t0 = std::time::Instant::now();
            let shapes: Vec<_> = layers.iter().map(|l| (l.n, l.k, l.w.ptr)).collect();
            let s = &ws.scratch;
            let tuned = crate::lt::tune(
                gpu,
                &shapes,
                (s.xb.ptr, s.xb.len),
                (s.acc.ptr, s.acc.len),
                5,
            )?;
            for t in &tuned {
                tracing::debug!(n = t.n, k = t.k, cols = t.cols, gemm_ex_us = t.gemm_ex_us, lt_us = ?t.best_lt_us, kept = t.kept, "cuBLASLt tuning");
            }
            tracing::info!(
                shapes = tuned.len(),
                kept = tuned.iter().filter(|t| t.kept).count(),
                ms = t0.elapsed().as_secs_f64() * 1e3,
                "cuBLASLt algorithms tuned"
            );
            Ok(tuned)
        }
        Some(lt) => {
            lt.set_enabled(false);
            Ok(Vec::new())
        }
        None => Ok(Vec::new()),
    }
}

/// The batched linear layers routed by timing them (`opts.autotune`); empty otherwise
/// (the built-in rule routes them).
fn route_by_timing(
    gpu: &Gpu,
    layers: &[&Linear],
    ws: &mut Workspace,
    opts: &CudaOptions,
) -> Result<Vec<TunedShape>, CudaError> {
    if !opts.autotune {
        return Ok(Vec::new());
    }
    let t0 = std::time::Instant::now();
    let tuned = autotune(gpu, layers, &mut ws.scratch, 10)?;
    for t in &tuned {
        tracing::debug!(n = t.n, k = t.k, rows = t.rows, chosen = ?t.chosen, timings = ?t.timings, "linear routing");
    }
    tracing::info!(
        shapes = tuned.len(),
        ms = t0.elapsed().as_secs_f64() * 1e3,
        "linear layers routed by measurement"
    );
    Ok(tuned)
}

/// The codec decoder: on the GPU with `opts`' settings, or the CPU reference's.
fn load_codec(gpu: &Gpu, model: &Model, opts: &CudaOptions) -> Result<Codec, CudaError> {
    if !opts.gpu_codec {
        return Ok(Codec::Cpu(
            Box::new(tts_model::reference::load_codec(model)?),
            HashMap::new(),
        ));
    }
    let w = tts_model::weights::CodecW::load(&model.codec, &mut HostLoader(&model.codec_weights))?;
    let mut c = DevCodec::new(
        gpu,
        &model.codec,
        w,
        opts.limits.max_slots,
        opts.codec_frames_per_call,
    )?;
    c.set_precision(gpu, opts.codec_precision)?;
    c.set_small_gemv(opts.codec_small_gemv);
    c.set_gemv_mma_steps(opts.codec_gemv_mma_steps);
    c.set_implicit_conv(opts.codec_implicit);
    c.set_conv_window(opts.codec_conv_window);
    c.set_conv_resident(opts.codec_conv_resident);
    Ok(Codec::Gpu(Box::new(c)))
}

/// The code predictor's second stream, when `opts.side_by_side` asks and the code
/// predictor runs launch by launch.
fn cp_lane(
    gpu: &Gpu,
    model: &Model,
    ws: &Workspace,
    opts: &CudaOptions,
    persistent_cp: bool,
) -> Result<Option<CpLane>, CudaError> {
    if !opts.side_by_side || persistent_cp {
        return Ok(None);
    }
    CpLane::new(
        opts.device,
        (
            gpu.pdl,
            opts.max_l1_rows.code_predictor,
            (opts.staged_gemv.code_predictor, opts.staged_mma_rows),
        ),
        &model.config,
        opts.limits,
        &ws.scratch.paths,
        opts.graphs,
    )
    .map(Some)
}

impl CudaBackend {
    /// Loads `model` onto the GPU.
    pub fn new(model: &Model, opts: CudaOptions) -> Result<Self, CudaError> {
        let mut gpu = open_gpu(&opts)?;
        let t0 = std::time::Instant::now();
        let talker = DevTalker::load(&gpu, &model.config, &model.weights, opts.fp8)?;
        // (the FP8 GEMV routing choose_paths gives the calls, for the QKV table)
        let fp8_paths = LinearPaths {
            fp8_codes: opts.fp8_codes,
            fp8_mma: opts.fp8_mma,
            ..Default::default()
        };
        let cp = DevCodePredictor::load(
            &gpu,
            &model.config,
            &model.weights,
            &talker,
            (opts.fp8, opts.cp_qkv_table.then_some(&fp8_paths)),
        )?;
        if opts.l2_persist_cp {
            let bytes = cp.stack.layer_bytes();
            let kept = gpu.reserve_l2_for(bytes)?;
            tracing::info!(
                l2_bytes = kept,
                layer_bytes = bytes,
                ratio = gpu.l2_persist_ratio,
                "code-predictor weights kept in L2 in part"
            );
        }
        let mut ws = Workspace::new(&gpu, &model.config, opts.limits)?;
        choose_paths(&mut ws, &opts);
        let (cp_loop, talker_layers) = persistent_kernels(&gpu, (&talker, &cp), &ws, &opts)?;
        let layers = tuning_layers(&talker, &cp);
        let lt_tuning = tune_lt(&gpu, &layers, &ws, &opts)?;
        let tuning = route_by_timing(&gpu, &layers, &mut ws, &opts)?;
        let codec = load_codec(&gpu, model, &opts)?;
        let lane = cp_lane(&gpu, model, &ws, &opts, cp_loop.is_some())?;
        let clone_inputs = CloneInputs::load(model)?;
        gpu.sync()?;
        tracing::info!(
            secs = t0.elapsed().as_secs_f64(),
            workspace_mb = ws.bytes() >> 20,
            pdl = gpu.pdl,
            "model on the GPU"
        );
        let t = &model.config.talker;
        let prefix = PrefixCache::new(
            opts.prefix_cache,
            talker_kv(&ws),
            CacheShape {
                layers: talker.stack.layers.len(),
                row_bytes: talker.stack.dims.kv_dim() * ws.kv_elem,
            },
        );
        let info = BackendInfo {
            name: model.name.clone(),
            device: format!("cuda:{} ({})", opts.device, gpu.name),
            sample_rate: model.sample_rate(),
            samples_per_frame: model.samples_per_frame(),
            codec_eos: t.codec_eos_token_id,
            tts_pad_token_id: model.config.tts_pad_token_id,
            max_slots: opts.limits.max_slots,
            max_positions: opts.limits.max_positions,
        };
        Ok(Self {
            gpu,
            talker,
            cp,
            ws,
            codec,
            rules: SampleRules {
                eos: t.codec_eos_token_id as i32,
                suppress_from: t.vocab_size.saturating_sub(1024) as i32,
                min_new: 2,
            },
            info,
            cp_loop,
            talker_layers,
            lane,
            slots: (0..opts.limits.max_slots).map(|_| None).collect(),
            graphs: HashMap::new(),
            prefix,
            opts,
            text_vocab: t.text_vocab_size,
            tuning,
            lt_tuning,
            clone_inputs,
        })
    }

    /// Captures every bucket's graphs now (start-up), instead of at first use, and runs the
    /// GPU codec's pass of every frame count once ([`DevCodec::warm_up`], unless
    /// `CudaOptions::codec_warm_up` is off).
    pub fn warm_up(&mut self) -> Result<(), CudaError> {
        let t0 = std::time::Instant::now();
        for b in batch_buckets(self.opts.limits.max_batch, self.opts.batch_bucket_24) {
            for kind in [GraphKind::TalkerStep, GraphKind::CodePredictor] {
                self.graph(kind, b)?;
            }
            let state = self.ws.slot_buffers();
            if let Some(lane) = &mut self.lane {
                lane.prepare(&self.talker, &self.cp, state, b)?;
            }
        }
        // Prefill buckets: (rows, tokens), tokens 16, 24, then powers of two (at least the
        // rows); one row also takes a single position (a prefill after a cached head).
        // Batched prefill passes have up to `max_batch` rows: captured at first use, their
        // graphs stalled the first seconds of serving (H200, 51 late streams in 3.6 s).
        self.graph(GraphKind::Prefill { rows: 1 }, 1)?;
        let mut rows = 1;
        while rows <= self.opts.limits.max_batch {
            let max = self.opts.limits.max_prefill_tokens;
            for t in token_buckets(max, self.opts.prefill_bucket_24).filter(|&t| t >= rows) {
                self.graph(GraphKind::Prefill { rows }, t)?;
            }
            if !self.opts.batched_prefill {
                break;
            }
            rows *= 2;
        }
        tracing::info!(
            graphs = self.graphs.len(),
            secs = t0.elapsed().as_secs_f64(),
            "CUDA graphs captured"
        );
        if let (true, Codec::Gpu(c)) = (self.opts.codec_warm_up, &mut self.codec) {
            let t0 = std::time::Instant::now();
            let frame_counts = c.warm_up(&self.gpu)?;
            tracing::info!(
                frame_counts,
                secs = t0.elapsed().as_secs_f64(),
                "codec passes warmed up"
            );
        }
        Ok(())
    }
}
