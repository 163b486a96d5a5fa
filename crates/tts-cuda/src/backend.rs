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
use tts_model::reference::codec::{CodecDecoder, CodecState};
use tts_model::sampling::SamplingParams;
use tts_model::BackendError;

mod inspect;
mod merged;
mod options;
mod prefill_calls;
mod startup;

pub use options::{CudaOptions, MaxL1Rows, StagedGemv};

use crate::buckets::batch_bucket;
use crate::clone_inputs::CloneInputs;
use crate::codec::DevCodec;
use crate::device::{Gpu, Graph};
use crate::error::CudaError;
use crate::lane::CpLane;
use crate::persistent::Persistent;
use crate::prefill_plan::{passes, repeated_slot, PrefillJob};
use crate::prefix::PrefixCache;
use crate::routing::TunedShape;
use crate::talker::{prefill, step, SampleRules};
use crate::weights::{DevCodePredictor, DevTalker};
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
    /// to a bucket (1, 16, 24, then powers of two; `prefill_plan::token_bucket`).
    Prefill {
        rows: usize,
    },
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

/// A slot's sampler parameter block as `sampling.cu` reads it (`u32 [16]`, floats as bits):
/// seed, talker settings, repetition penalty, code-predictor settings; word 11, the count of
/// code-0 samples, starts at 0 and is kept by `sample_talker`.
pub fn sampler_words(p: &SamplingParams) -> [u32; 16] {
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
    words
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
    /// Base models: what makes the vectors of cloned-voice prompt positions.
    clone_inputs: Option<CloneInputs>,
}

impl CudaBackend {
    /// The batch bucket of a talker step or code-predictor loop of `n` rows
    /// ([`batch_bucket`]).
    pub fn bucket(&self, n: usize) -> usize {
        batch_bucket(n, self.opts.limits.max_batch, self.opts.batch_bucket_24)
    }

    /// The rows bucket of a prefill pass of `n` prompts: a power of two, at most the
    /// largest batch (its graphs are captured for those).
    pub fn prefill_rows_bucket(&self, n: usize) -> usize {
        batch_bucket(n, self.opts.limits.max_batch, false)
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
        self.init_slot(free, &sampler_words(params))?;
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
