//! [`CudaBackend`]: `tts_model::Backend` on the GPU.
//!
//! Host side: slot bookkeeping (positions, stage order), batch buckets and their CUDA
//! graphs. A stage call pads its rows to the next bucket (1, 2, 4, ... max_batch), writes
//! the packed per-row inputs with one host-to-device copy, replays the bucket's graph (or
//! enqueues eagerly when graphs are off) and reads back only the sampled codes.

use std::collections::HashMap;

use tts_model::backend::{
    first_free_slot, Backend, BackendInfo, CodecRow, Frame, PrefillRow, SlotId, StepRow,
};
use tts_model::config::NUM_CODE_GROUPS;
use tts_model::prompt::PromptPosition;
use tts_model::reference::codec::{CodecDecoder, CodecState};
use tts_model::sampling::SamplingParams;
use tts_model::{BackendError, Model};

mod merged;
mod options;

pub use options::{CudaOptions, MaxL1Rows, StagedGemv};

use crate::codec::DevCodec;
use crate::device::{Gpu, Graph};
use crate::error::CudaError;
use crate::lane::CpLane;
use crate::linear::Linear;
use crate::persistent::Persistent;
use crate::prefill_plan::{pass_plan, passes, repeated_slot, token_bucket, PrefillJob};
use crate::prefix::{CacheShape, PrefixCache};
use crate::routing::{autotune, TunedShape};
use crate::talker::{prefill, step, talker_kv, write_prefill_inputs, SampleRules};
use crate::weights::{DevCodePredictor, DevTalker, HostLoader};
use crate::workspace::{InputLayout, Workspace};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Allocated, not prefilled.
    Fresh,
    /// Code 0 of the current frame sampled.
    Code0(u32),
    /// The current frame is complete.
    Frame,
}

#[derive(Debug)]
struct SlotState {
    stage: Stage,
    /// Talker positions held.
    len: usize,
}

/// Where audio is decoded.
enum Codec {
    Gpu(Box<DevCodec>),
    Cpu(Box<CodecDecoder>, HashMap<u32, CodecState>),
}

/// Which stage a graph runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum GraphKind {
    TalkerStep,
    CodePredictor,
    /// A prefill of `rows` rows (a bucket; padding rows write nothing), its tokens padded
    /// to a power-of-two count (1, or 16 and up; `prefill_plan::token_bucket`).
    Prefill {
        rows: usize,
    },
}

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

/// The packed per-row inputs of a `b`-row bucket: (slot, position, text token) per row,
/// padding rows after them.
fn pack_inputs(lay: &InputLayout, pad: i32, rows: &[(SlotId, i32, i32)], b: usize) -> Vec<i32> {
    let mut v = vec![-1i32; lay.total];
    for r in 0..b {
        v[lay.step_pos + r] = 0;
        v[lay.text_ids + r] = pad;
    }
    for (r, &(slot, pos, text)) in rows.iter().enumerate() {
        v[lay.row_slots + r] = slot.0 as i32;
        v[lay.step_pos + r] = pos;
        v[lay.text_ids + r] = text;
        v[lay.cp_rows1 + r] = r as i32;
        v[lay.cp_rows2 + 2 * r] = r as i32;
        v[lay.cp_rows2 + 2 * r + 1] = r as i32;
    }
    v
}

/// The GPU implementation of [`Backend`].
pub struct CudaBackend {
    gpu: Gpu,
    talker: DevTalker,
    cp: DevCodePredictor,
    ws: Workspace,
    /// The persistent code-predictor loop and talker layers, for small buckets.
    cp_loop: Option<Persistent>,
    talker_layers: Option<Persistent>,
    /// The code predictor's second stream (`CudaOptions::side_by_side`).
    lane: Option<CpLane>,
    codec: Codec,
    rules: SampleRules,
    info: BackendInfo,
    slots: Vec<Option<SlotState>>,
    graphs: HashMap<(GraphKind, usize), Graph>,
    prefix: PrefixCache,
    tuning: Vec<TunedShape>,
    lt_tuning: Vec<crate::lt::LtTuned>,
    opts: CudaOptions,
    text_vocab: usize,
}

/// A prompt head a prefill stores in the prefix cache after its pass (one not cached yet).
type HeadToStore<'a> = Option<&'a [PromptPosition]>;

impl CudaBackend {
    /// Loads `model` onto the GPU.
    pub fn new(model: &Model, opts: CudaOptions) -> Result<Self, CudaError> {
        let mut gpu = Gpu::open(opts.device)?;
        gpu.pdl &= opts.pdl;
        if !opts.without_kernels.is_empty() {
            tracing::warn!(kernels = ?opts.without_kernels, "timing ablation: these kernels are never launched, every result is wrong");
            gpu.without.clone_from(&opts.without_kernels);
        }
        let t0 = std::time::Instant::now();
        let talker = DevTalker::load(&gpu, &model.config, &model.weights, opts.fp8)?;
        let cp = DevCodePredictor::load(
            &gpu,
            &model.config,
            &model.weights,
            &talker,
            (opts.fp8, opts.cp_qkv_table),
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
        ws.scratch.paths.cluster &= opts.cluster_linear;
        ws.scratch.paths.tile &= opts.tile_linear;
        ws.scratch.paths.tile_wg &= opts.tile_wgmma;
        ws.scratch.paths.wide &= opts.wide_linear;
        ws.scratch.paths.chain_split &= opts.chain_split;
        ws.scratch.paths.chain_attention = opts.chain_attention;
        ws.scratch.paths.chain_tile = opts.chain_tile;
        ws.scratch.paths.chain_gemv = opts.chain_gemv;
        ws.scratch.paths.group_attention = opts.group_attention;
        ws.scratch.paths.row_attention_rows = opts.row_attention_rows;
        ws.scratch.paths.row_attention_split = opts.row_attention_split;
        // Persistent kernels only when asked for (built, they would hold device memory).
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
                Persistent::code_predictor(&gpu, &cp, &ws, opts.cp_prefetch)?,
            ),
        };
        let talker_layers = match opts.persistent_talker_rows {
            0 => None,
            rows => adopt(
                "talker step",
                rows,
                Persistent::talker(&gpu, &talker, &ws, opts.talker_prefetch)?,
            ),
        };
        // cuBLASLt first: the routing below times the cuBLAS path as it will then run
        let lt_tuning = match &gpu.lt {
            Some(_) if opts.lt_linear => {
                let t0 = std::time::Instant::now();
                let shapes: Vec<_> = tuning_layers(&talker, &cp)
                    .iter()
                    .map(|l| (l.n, l.k, l.w.ptr))
                    .collect();
                let s = &ws.scratch;
                let tuned = crate::lt::tune(
                    &gpu,
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
                tuned
            }
            Some(lt) => {
                lt.set_enabled(false);
                Vec::new()
            }
            None => Vec::new(),
        };
        let tuning = if opts.autotune {
            let t0 = std::time::Instant::now();
            let tuned = autotune(&gpu, &tuning_layers(&talker, &cp), &mut ws.scratch, 10)?;
            for t in &tuned {
                tracing::debug!(n = t.n, k = t.k, rows = t.rows, chosen = ?t.chosen, timings = ?t.timings, "linear routing");
            }
            tracing::info!(
                shapes = tuned.len(),
                ms = t0.elapsed().as_secs_f64() * 1e3,
                "linear layers routed by measurement"
            );
            tuned
        } else {
            Vec::new()
        };
        let codec = if opts.gpu_codec {
            let w = tts_model::weights::CodecW::load(
                &model.codec,
                &mut HostLoader(&model.codec_weights),
            )?;
            let mut c = DevCodec::new(
                &gpu,
                &model.codec,
                w,
                opts.limits.max_slots,
                opts.codec_frames_per_call,
            )?;
            c.set_precision(&gpu, opts.codec_precision)?;
            c.set_small_gemv(opts.codec_small_gemv);
            c.set_implicit_conv(opts.codec_implicit);
            c.set_conv_window(opts.codec_conv_window);
            c.set_conv_resident(opts.codec_conv_resident);
            Codec::Gpu(Box::new(c))
        } else {
            Codec::Cpu(
                Box::new(tts_model::reference::load_codec(model)?),
                HashMap::new(),
            )
        };
        let lane = if opts.side_by_side && cp_loop.is_none() {
            Some(CpLane::new(
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
            )?)
        } else {
            None
        };
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
        })
    }

    /// Prefix cache (hits, misses, heads held) since start-up.
    pub fn prefix_stats(&self) -> (u64, u64, usize) {
        (self.prefix.hits, self.prefix.misses, self.prefix.len())
    }

    /// What start-up tuning measured and chose for each batched layer shape.
    pub fn tuning(&self) -> &[TunedShape] {
        &self.tuning
    }

    /// What the start-up cuBLASLt tuning measured and kept.
    pub fn lt_tuning(&self) -> &[crate::lt::LtTuned] {
        &self.lt_tuning
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The batch bucket for `n` rows.
    pub fn bucket(&self, n: usize) -> usize {
        let mut b = 1;
        while b < n {
            b *= 2;
        }
        b.min(self.opts.limits.max_batch)
    }

    /// Captures every bucket's graphs now (start-up), instead of at first use, and runs the
    /// GPU codec's pass of every frame count once ([`DevCodec::warm_up`], unless
    /// `CudaOptions::codec_warm_up` is off).
    pub fn warm_up(&mut self) -> Result<(), CudaError> {
        let t0 = std::time::Instant::now();
        let mut b = 1;
        while b <= self.opts.limits.max_batch {
            for kind in [GraphKind::TalkerStep, GraphKind::CodePredictor] {
                self.graph(kind, b)?;
            }
            let state = self.ws.slot_buffers();
            if let Some(lane) = &mut self.lane {
                lane.prepare(&self.talker, &self.cp, state, b)?;
            }
            b *= 2;
        }
        // Prefill buckets: (rows, tokens), tokens 16 and up by powers of two (at least the
        // rows); one row also takes a single position (a prefill after a cached head).
        // Batched prefill passes have up to `max_batch` rows: captured at first use, their
        // graphs stalled the first seconds of serving (H200, 51 late streams in 3.6 s).
        self.graph(GraphKind::Prefill { rows: 1 }, 1)?;
        let mut rows = 1;
        while rows <= self.opts.limits.max_batch {
            let mut t = token_bucket(rows.max(2));
            while t <= self.opts.limits.max_prefill_tokens {
                self.graph(GraphKind::Prefill { rows }, t)?;
                t *= 2;
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

    /// Checks one prefill row and restores its cached prompt head (when there is one):
    /// the tokens it still needs, and the head to store after its pass (a head not cached
    /// yet).
    fn prefill_job<'a>(
        &mut self,
        r: &PrefillRow<'a>,
    ) -> Result<(PrefillJob, HeadToStore<'a>), BackendError> {
        let max_tokens = self.opts.limits.max_prefill_tokens;
        let cap = self.info.max_positions;
        let text_vocab = self.text_vocab;
        let n = r.prompt.positions.len();
        if n == 0 {
            return Err(BackendError::SlotState {
                slot: r.slot.0,
                message: "an empty prompt has nothing to prefill".into(),
            });
        }
        let st = self.slot(r.slot)?;
        if st.stage != Stage::Fresh {
            return Err(BackendError::SlotState {
                slot: r.slot.0,
                message: "already prefilled".into(),
            });
        }
        if n > max_tokens || st.len + n > cap {
            return Err(BackendError::ContextFull {
                slot: r.slot.0,
                capacity: max_tokens.min(cap),
            });
        }
        let start = st.len;
        // A fresh slot whose prompt head was prefilled before gets that head's cache
        // rows and prefills only the rest (at least the last position, whose output
        // samples code 0).
        let head = r.prompt.head_len.min(n - 1);
        let heads = &r.prompt.positions[..head];
        let mut text = Vec::with_capacity(n);
        let mut codec = Vec::with_capacity(n);
        for p in &r.prompt.positions {
            let t =
                p.text
                    .filter(|&t| (t as usize) < text_vocab)
                    .ok_or(BackendError::SlotState {
                        slot: r.slot.0,
                        message: "every prompt position needs an in-range text token".into(),
                    })?;
            text.push(t as i32);
            codec.push(p.codec.map_or(-1, |c| c as i32));
        }
        let cached = start == 0
            && head > 0
            && self.prefix.enabled()
            && self.prefix.restore(&self.gpu, heads, r.slot.0 as usize)?;
        let skip = if cached { head } else { 0 };
        let store = (start == 0 && head > 0 && !cached).then_some(heads);
        let job = PrefillJob {
            slot: r.slot.0 as i32,
            start: start + skip,
            text: text.split_off(skip),
            codec: codec.split_off(skip),
        };
        Ok((job, store))
    }

    /// Every row of a prefill call checked (and its cached head restored) before any pass
    /// runs: each row's job, and the head to store after its pass.
    fn prefill_jobs<'a>(
        &mut self,
        rows: &[PrefillRow<'a>],
    ) -> Result<(Vec<PrefillJob>, Vec<HeadToStore<'a>>), BackendError> {
        let slots: Vec<u32> = rows.iter().map(|r| r.slot.0).collect();
        if let Some(slot) = repeated_slot(&slots) {
            return Err(BackendError::SlotState {
                slot,
                message: "the same slot twice in one prefill call".into(),
            });
        }
        let mut jobs = Vec::with_capacity(rows.len());
        let mut stores = Vec::with_capacity(rows.len());
        for r in rows {
            let (job, store) = self.prefill_job(r)?;
            jobs.push(job);
            stores.push(store);
        }
        Ok((jobs, stores))
    }

    /// A prefilled row's slot after its pass: its new prompt head stored in the prefix
    /// cache, its length and its code 0.
    fn finish_prefill(
        &mut self,
        r: &PrefillRow<'_>,
        store: HeadToStore<'_>,
        code: u32,
    ) -> Result<(), BackendError> {
        if let Some(head) = store {
            self.prefix.store(&self.gpu, head, r.slot.0 as usize)?;
        }
        let st = self.slot(r.slot)?;
        st.len += r.prompt.positions.len();
        st.stage = Stage::Code0(code);
        Ok(())
    }

    /// One prefill pass over `jobs` (their tokens in one launch sequence, replayed from the
    /// graph of its token and row buckets when graphs are on): each row's code 0.
    fn prefill_pass(&mut self, jobs: &[PrefillJob]) -> Result<Vec<u32>, CudaError> {
        let limits = self.opts.limits;
        let n: usize = jobs.iter().map(PrefillJob::tokens).sum();
        // `passes` keeps a pass within the largest batch, so its row bucket holds it
        let (tokens, rows) = (token_bucket(n), self.bucket(jobs.len()));
        debug_assert!(rows >= jobs.len());
        let padded = self.opts.graphs && tokens <= limits.max_prefill_tokens;
        let pad = self.info.tts_pad_token_id as i32;
        let plan = pass_plan(jobs, pad, padded.then_some((tokens, rows)));
        let kind = GraphKind::Prefill { rows };
        if padded {
            self.graph(kind, tokens)?;
        }
        write_prefill_inputs(&self.gpu, &mut self.ws, &plan)?;
        if padded {
            self.run(kind, tokens)?;
        } else {
            prefill(&self.gpu, &self.talker, &self.ws, n, jobs.len(), self.rules)?;
        }
        let codes = self.gpu.read(&self.ws.codes, jobs.len())?;
        Ok(codes.into_iter().map(|c| c as u32).collect())
    }

    fn enqueue(&self, kind: GraphKind, b: usize) -> Result<(), CudaError> {
        match kind {
            GraphKind::TalkerStep => {
                let mode = self.gpu.small_call_for(
                    b,
                    self.opts.max_l1_rows.talker,
                    (self.opts.staged_gemv.talker, 0),
                );
                self.gpu.with_small_call(mode, || {
                    step(
                        &self.gpu,
                        &self.talker,
                        &self.cp,
                        &self.ws,
                        b,
                        self.rules,
                        self.talker_layers.as_ref(),
                    )
                })
            }
            GraphKind::CodePredictor => {
                let mode = self.gpu.small_call_for(
                    b,
                    self.opts.max_l1_rows.code_predictor,
                    (
                        self.opts.staged_gemv.code_predictor,
                        self.opts.staged_mma_rows,
                    ),
                );
                self.gpu.with_small_call(mode, || {
                    crate::code_predictor::predict(
                        &self.gpu,
                        &self.talker,
                        &self.cp,
                        &self.ws,
                        self.ws.slot_buffers(),
                        b,
                        self.cp_loop.as_ref(),
                    )
                })
            }
            GraphKind::Prefill { rows } => {
                prefill(&self.gpu, &self.talker, &self.ws, b, rows, self.rules)
            }
        }
    }

    /// Makes sure the graph of (`kind`, `b`) exists; false when graphs are off.
    fn graph(&mut self, kind: GraphKind, b: usize) -> Result<bool, CudaError> {
        if !self.opts.graphs {
            return Ok(false);
        }
        if self.graphs.contains_key(&(kind, b)) {
            return Ok(true);
        }
        // Capture records without executing: the inputs are written before each replay.
        let g = Graph::capture(&self.gpu, |_| self.enqueue(kind, b))?;
        self.graphs.insert((kind, b), g);
        Ok(true)
    }

    fn run(&mut self, kind: GraphKind, b: usize) -> Result<(), CudaError> {
        if self.graph(kind, b)? {
            if let Some(g) = self.graphs.get(&(kind, b)) {
                g.launch()?;
                return Ok(());
            }
        }
        self.enqueue(kind, b)
    }

    fn slot(&mut self, id: SlotId) -> Result<&mut SlotState, BackendError> {
        self.slots
            .get_mut(id.0 as usize)
            .and_then(|s| s.as_mut())
            .ok_or(BackendError::BadSlot(id.0))
    }

    /// Writes the packed per-row inputs of a `b`-row bucket.
    fn write_inputs(&mut self, rows: &[(SlotId, i32, i32)], b: usize) -> Result<(), CudaError> {
        let v = pack_inputs(&self.ws.layout, self.info.tts_pad_token_id as i32, rows, b);
        self.gpu.write(&mut self.ws.inputs, &v)
    }

    /// Resets slot `free`'s device state: sampler parameters, history, frame, codec stream.
    fn init_slot(&mut self, free: usize, words: &[u32; 16]) -> Result<(), CudaError> {
        let sw = self.ws.seen_words;
        self.gpu.write_at(&mut self.ws.params, free * 16, words)?;
        self.gpu
            .write_at(&mut self.ws.seen, free * sw, &vec![0u32; sw])?;
        self.gpu.write_at(
            &mut self.ws.slot_frames,
            free * NUM_CODE_GROUPS,
            &[0i32; NUM_CODE_GROUPS],
        )?;
        match &mut self.codec {
            Codec::Gpu(c) => c.reset_slot(&self.gpu, free)?,
            Codec::Cpu(dec, states) => {
                states.insert(free as u32, dec.new_state());
            }
        }
        Ok(())
    }

    /// One traced launch of the persistent talker layers (`talker`) or code-predictor loop
    /// for `n` rows, on the inputs last written (benchmarks); None when that stage runs
    /// launch by launch.
    pub fn trace_persistent(
        &mut self,
        talker: bool,
        n: usize,
    ) -> Result<Option<Vec<crate::persistent::PhaseStat>>, CudaError> {
        let b = self.bucket(n);
        let khz =
            f64::from(self.gpu.ctx.attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
            )?);
        let p = if talker {
            self.talker_layers.as_mut()
        } else {
            self.cp_loop.as_mut()
        };
        match p {
            Some(p) if b <= p.max_rows() => p.trace(&self.gpu, b, khz).map(Some),
            _ => Ok(None),
        }
    }

    /// The device and the GPU codec (none when audio is decoded on the CPU).
    pub(crate) fn gpu_codec_mut(&mut self) -> Option<(&Gpu, &mut DevCodec)> {
        match &mut self.codec {
            Codec::Gpu(c) => Some((&self.gpu, c)),
            Codec::Cpu(..) => None,
        }
    }

    /// Whether audio is decoded on the GPU.
    pub fn gpu_codec(&self) -> bool {
        !matches!(self.codec, Codec::Cpu(..))
    }

    /// Bytes of weights one talker step and one code-predictor loop read (once each).
    pub fn weight_bytes(&self) -> (u64, u64) {
        let lin = |l: &Linear| l.bf16_bytes() as u64;
        let stack = |s: &crate::weights::DevStack| s.layer_bytes() as u64;
        let t = stack(&self.talker.stack)
            + lin(&self.talker.codec_head)
            + lin(&self.talker.fc1)
            + lin(&self.talker.fc2);
        let per_step = stack(&self.cp.stack);
        let heads: u64 = self.cp.lm_heads.iter().map(lin).sum();
        let proj = self.cp.projection.as_ref().map_or(0, lin);
        (t, 15 * per_step + heads + proj)
    }

    /// Replays (or enqueues) the talker-step or code-predictor work of bucket `b` with the
    /// inputs as last written; no host sync. For benchmarks.
    pub fn replay(&mut self, talker: bool, b: usize) -> Result<(), CudaError> {
        let kind = if talker {
            GraphKind::TalkerStep
        } else {
            GraphKind::CodePredictor
        };
        self.run(kind, b)
    }

    /// The first `rows` rows of the last logits computed (talker: `[rows][3072]` after a
    /// prefill or step; code predictor: its last head). For parity tests.
    pub fn debug_logits(&self, rows: usize, width: usize) -> Result<Vec<f32>, CudaError> {
        self.gpu.read(&self.ws.logits, rows * width)
    }

    /// Every slot of a code-predictor call holds a code 0 that is not EOS.
    fn check_predict(&mut self, slots: &[SlotId]) -> Result<(), BackendError> {
        self.check_batch(slots.len())?;
        let eos = self.info.codec_eos;
        for &id in slots {
            match self.slot(id)?.stage {
                Stage::Code0(c) if c != eos => {}
                _ => {
                    return Err(BackendError::SlotState {
                        slot: id.0,
                        message: "no pending code 0 to complete".into(),
                    })
                }
            }
        }
        if let Some(slot) = repeated_slot(&slots.iter().map(|s| s.0).collect::<Vec<_>>()) {
            return Err(BackendError::SlotState {
                slot,
                message: "the same slot twice in one code-predictor call".into(),
            });
        }
        Ok(())
    }

    /// The frames read back (`[rows][16]`), and each slot's frame marked complete.
    fn finish_predict(
        &mut self,
        slots: &[SlotId],
        flat: &[i32],
    ) -> Result<Vec<Frame>, BackendError> {
        let mut frames = Vec::with_capacity(slots.len());
        for (&id, chunk) in slots.iter().zip(flat.chunks(NUM_CODE_GROUPS)) {
            let mut f = [0u32; NUM_CODE_GROUPS];
            for (d, &c) in f.iter_mut().zip(chunk) {
                *d = c as u32;
            }
            self.slot(id)?.stage = Stage::Frame;
            frames.push(f);
        }
        Ok(frames)
    }

    /// Checks a talker step's rows: (slot, position, text token) of each.
    fn check_step(&mut self, rows: &[StepRow]) -> Result<Vec<(SlotId, i32, i32)>, BackendError> {
        self.check_batch(rows.len())?;
        let cap = self.info.max_positions;
        let text_vocab = self.text_vocab;
        let mut packed = Vec::with_capacity(rows.len());
        for r in rows {
            if r.text_token as usize >= text_vocab {
                return Err(BackendError::SlotState {
                    slot: r.slot.0,
                    message: format!("text token {} out of range", r.text_token),
                });
            }
            let st = self.slot(r.slot)?;
            if st.stage != Stage::Frame {
                return Err(BackendError::SlotState {
                    slot: r.slot.0,
                    message: "talker step before the code predictor completed the frame".into(),
                });
            }
            if st.len + 1 > cap {
                return Err(BackendError::ContextFull {
                    slot: r.slot.0,
                    capacity: cap,
                });
            }
            packed.push((r.slot, st.len as i32, r.text_token as i32));
        }
        if let Some(slot) = repeated_slot(&rows.iter().map(|r| r.slot.0).collect::<Vec<_>>()) {
            return Err(BackendError::SlotState {
                slot,
                message: "the same slot twice in one talker step".into(),
            });
        }
        Ok(packed)
    }

    /// Each row's new position and code 0.
    fn finish_step(&mut self, rows: &[StepRow], codes: &[i32]) -> Result<Vec<u32>, BackendError> {
        for (r, &c) in rows.iter().zip(codes) {
            let st = self.slot(r.slot)?;
            st.len += 1;
            st.stage = Stage::Code0(c as u32);
        }
        Ok(codes.iter().map(|&c| c as u32).collect())
    }

    /// Enqueues the code predictor for `cp` on the lane and the talker step for `packed`
    /// on the main stream, then reads both back: the frames `[cp][16]` and the codes.
    fn side_by_side(
        &mut self,
        cp: &[SlotId],
        step: &[StepRow],
        packed: &[(SlotId, i32, i32)],
    ) -> Result<(Vec<i32>, Vec<i32>), CudaError> {
        let (bc, bs) = (self.bucket(cp.len()), self.bucket(step.len()));
        let state = self.ws.slot_buffers();
        let pad = self.info.tts_pad_token_id as i32;
        self.graph(GraphKind::TalkerStep, bs)?;
        let Some(lane) = self.lane.as_mut() else {
            return Err(CudaError::Unavailable("no code-predictor lane".into()));
        };
        lane.prepare(&self.talker, &self.cp, state, bc)?;
        let rows: Vec<(SlotId, i32, i32)> = cp.iter().map(|&s| (s, 0, 0)).collect();
        let v = pack_inputs(&lane.ws.layout, pad, &rows, bc);
        lane.gpu.write(&mut lane.ws.inputs, &v)?;
        lane.launch(&self.talker, &self.cp, state, bc)?;
        self.write_inputs(packed, bs)?;
        self.run(GraphKind::TalkerStep, bs)?;
        let codes = self.gpu.read(&self.ws.codes, step.len())?;
        let Some(lane) = self.lane.as_ref() else {
            return Err(CudaError::Unavailable("no code-predictor lane".into()));
        };
        let flat = lane.gpu.read(&lane.ws.frames, cp.len() * NUM_CODE_GROUPS)?;
        Ok((flat, codes))
    }

    fn check_batch(&self, n: usize) -> Result<(), BackendError> {
        if n > self.opts.limits.max_batch {
            return Err(BackendError::SlotState {
                slot: 0,
                message: format!(
                    "batch of {n} rows exceeds max_batch {}",
                    self.opts.limits.max_batch
                ),
            });
        }
        Ok(())
    }
}

impl Backend for CudaBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn alloc_slot(&mut self, params: &SamplingParams) -> Result<SlotId, BackendError> {
        self.gpu.bind().map_err(BackendError::from)?;
        let free = first_free_slot(&self.slots)?;
        let p = params;
        let mut words = [0u32; 16];
        words[0] = p.seed as u32;
        words[1] = (p.seed >> 32) as u32;
        words[2] = p.talker.do_sample as u32;
        words[3] = p.talker.top_k as u32;
        words[4] = p.talker.temperature.to_bits();
        words[5] = p.talker.top_p.to_bits();
        words[6] = p.repetition_penalty.to_bits();
        words[7] = p.code_predictor.do_sample as u32;
        words[8] = p.code_predictor.top_k as u32;
        words[9] = p.code_predictor.temperature.to_bits();
        words[10] = p.code_predictor.top_p.to_bits();
        self.init_slot(free, &words)?;
        self.slots[free] = Some(SlotState {
            stage: Stage::Fresh,
            len: 0,
        });
        Ok(SlotId(free as u32))
    }

    fn free_slot(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.get_mut(slot.0 as usize) {
            *s = None;
        }
        if let Codec::Cpu(_, states) = &mut self.codec {
            states.remove(&slot.0);
        }
    }

    /// Prefills row by row: a request's prompt is one GEMM of its own tokens, so its
    /// results never depend on which other prompts arrive with it.
    fn prefill(&mut self, rows: &[PrefillRow<'_>]) -> Result<Vec<u32>, BackendError> {
        self.gpu.bind().map_err(BackendError::from)?;
        let (jobs, stores) = self.prefill_jobs(rows)?;
        let tokens: Vec<usize> = jobs.iter().map(PrefillJob::tokens).collect();
        let limits = self.opts.limits;
        let groups = passes(
            &tokens,
            self.opts.batched_prefill,
            limits.max_prefill_tokens,
            limits.max_batch,
        );
        let mut out = Vec::with_capacity(rows.len());
        for g in groups {
            let codes = self.prefill_pass(&jobs[g.clone()])?;
            for ((r, store), code) in rows[g.clone()].iter().zip(&stores[g]).zip(codes) {
                self.finish_prefill(r, *store, code)?;
                out.push(code);
            }
        }
        Ok(out)
    }

    fn predict_codes(&mut self, slots: &[SlotId]) -> Result<Vec<Frame>, BackendError> {
        self.gpu.bind().map_err(BackendError::from)?;
        self.check_predict(slots)?;
        let b = self.bucket(slots.len());
        let rows: Vec<(SlotId, i32, i32)> = slots.iter().map(|&s| (s, 0, 0)).collect();
        // Capture first: capture writes padding inputs of its own.
        self.graph(GraphKind::CodePredictor, b)?;
        self.write_inputs(&rows, b)?;
        self.run(GraphKind::CodePredictor, b)?;
        let flat = self
            .gpu
            .read(&self.ws.frames, slots.len() * NUM_CODE_GROUPS)?;
        self.finish_predict(slots, &flat)
    }

    fn talker_step(&mut self, rows: &[StepRow]) -> Result<Vec<u32>, BackendError> {
        self.gpu.bind().map_err(BackendError::from)?;
        let packed = self.check_step(rows)?;
        let b = self.bucket(rows.len());
        self.graph(GraphKind::TalkerStep, b)?;
        self.write_inputs(&packed, b)?;
        self.run(GraphKind::TalkerStep, b)?;
        let codes = self.gpu.read(&self.ws.codes, rows.len())?;
        self.finish_step(rows, &codes)
    }

    fn merges_prefill_with_step(&self) -> bool {
        self.opts.merge_prefill
    }

    fn prefill_and_step(
        &mut self,
        prompts: &[PrefillRow<'_>],
        step: &[StepRow],
    ) -> (
        Result<Vec<u32>, BackendError>,
        Result<Vec<u32>, BackendError>,
    ) {
        self.merged_or_apart(prompts, step)
    }

    fn runs_side_by_side(&self) -> bool {
        self.lane.is_some()
    }

    /// The code predictor on the lane's stream and the talker step on the main one, both
    /// in flight at once. Both parts are checked before either runs; a part that fails its
    /// checks has its error as its result, and the other part runs alone.
    fn predict_and_step(
        &mut self,
        cp: &[SlotId],
        step: &[StepRow],
    ) -> (
        Result<Vec<Frame>, BackendError>,
        Result<Vec<u32>, BackendError>,
    ) {
        if self.lane.is_none() || cp.is_empty() || step.is_empty() {
            return (self.predict_codes(cp), self.talker_step(step));
        }
        if let Err(e) = self.gpu.bind() {
            let e = BackendError::from(e);
            return (Err(e.clone()), Err(e));
        }
        if let Some(r) = step.iter().find(|r| cp.contains(&r.slot)) {
            let e = BackendError::SlotState {
                slot: r.slot.0,
                message: "the same slot in the code predictor and the talker step".into(),
            };
            return (Err(e.clone()), Err(e));
        }
        let checked = (self.check_predict(cp), self.check_step(step));
        let packed = match checked {
            (Ok(()), Ok(packed)) => packed,
            (Err(e), _) => return (Err(e), self.talker_step(step)),
            (Ok(()), Err(e)) => return (self.predict_codes(cp), Err(e)),
        };
        match self.side_by_side(cp, step, &packed) {
            Ok((flat, codes)) => (
                self.finish_predict(cp, &flat),
                self.finish_step(step, &codes),
            ),
            Err(e) => {
                let e = BackendError::from(e);
                (Err(e.clone()), Err(e))
            }
        }
    }

    fn codec_decode(&mut self, rows: &[CodecRow<'_>]) -> Result<Vec<Vec<f32>>, BackendError> {
        self.gpu.bind().map_err(BackendError::from)?;
        for r in rows {
            self.slot(r.slot)?;
            if let Some(bad) = r.frames.iter().flatten().find(|&&c| c >= 2048) {
                return Err(BackendError::SlotState {
                    slot: r.slot.0,
                    message: format!("code {bad} is outside the codebook"),
                });
            }
        }
        match &mut self.codec {
            Codec::Gpu(c) => {
                let list: Vec<(usize, &[Frame])> =
                    rows.iter().map(|r| (r.slot.0 as usize, r.frames)).collect();
                Ok(c.decode(&self.gpu, &list)?)
            }
            Codec::Cpu(dec, states) => {
                let mut out = Vec::with_capacity(rows.len());
                for r in rows {
                    let st = states
                        .get_mut(&r.slot.0)
                        .ok_or(BackendError::BadSlot(r.slot.0))?;
                    out.push(dec.decode(r.frames, st));
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MaxL1Rows, StagedGemv};

    #[test]
    fn max_l1_rows_parse_one_number_or_a_pair() {
        let both: MaxL1Rows = "6".parse().expect("one number");
        assert_eq!((both.talker, both.code_predictor), (6, 6));
        let pair: MaxL1Rows = " 2, 16".parse().expect("a pair");
        assert_eq!((pair.talker, pair.code_predictor), (2, 16));
        assert!("four".parse::<MaxL1Rows>().is_err());
        assert!("1,x".parse::<MaxL1Rows>().is_err());
    }

    #[test]
    fn staged_gemv_parses_each_choice() {
        let pick = |s: &str| {
            let v: StagedGemv = s.parse().expect(s);
            (v.talker, v.code_predictor)
        };
        assert_eq!(pick("0"), (false, false));
        assert_eq!(pick("cp"), (false, true));
        assert_eq!(pick(" talker "), (true, false));
        assert_eq!(pick("1"), (true, true));
        assert!("yes".parse::<StagedGemv>().is_err());
    }
}
