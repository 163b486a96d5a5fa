//! The CPU reference backend: plain f32 maths, the executable spec every other backend is
//! checked against. Readable first, reasonably fast second (rayon over rows, sgemm).

pub mod code_predictor;
pub mod codec;
pub mod codec_encoder;
pub mod ops;
pub mod speaker;
pub mod stack;
pub mod talker;

use std::sync::Arc;

use crate::backend::{
    first_free_slot, Backend, BackendInfo, CodecRow, Frame, PrefillRow, SlotId, StepRow,
};
use crate::checkpoint::{Init, WeightSource};
use crate::config::NUM_CODE_GROUPS;
use crate::error::{BackendError, ModelError};
use crate::fp8::{self, Fp8Scope, LayerPart, Stack};
use crate::model::Model;
use crate::prompt::{CodecInput, Prompt};
use crate::sampling::{choose, draw_uniform, process_talker_logits, SamplingParams, TalkerRules};
use crate::weights::{CodePredictorW, CodecW, DecoderLayerW, TalkerW, TensorLoader};
use code_predictor::CodePredictor;
use codec::{CodecDecoder, CodecState};
use ops::add_assign;
use stack::{CpuTensor, StackKv};
use talker::Talker;

/// Loads tensors as f32 host tensors.
pub(crate) struct CpuLoader<'a>(pub(crate) &'a WeightSource);

impl TensorLoader for CpuLoader<'_> {
    type T = CpuTensor;
    fn load(&mut self, name: &str, shape: &[usize], init: Init) -> Result<CpuTensor, ModelError> {
        let t = self.0.tensor(name, shape, init)?;
        Ok(CpuTensor {
            data: t.to_f32(),
            shape: t.shape,
        })
    }
}

/// All three model parts in f32.
#[derive(Debug)]
pub struct CpuModel {
    pub talker: Talker,
    pub code_predictor: CodePredictor,
    pub codec: CodecDecoder,
    pub rules: TalkerRules,
    pub text_vocab: usize,
}

impl CpuModel {
    pub fn load(model: &Model) -> Result<Self, ModelError> {
        Self::load_with(model, Fp8Scope::None)
    }

    /// Loads the model with the decoder-layer matrices of `fp8` replaced by their FP8
    /// values ([`crate::fp8`]): the numbers an FP8 backend computes with.
    pub fn load_with(model: &Model, fp8: Fp8Scope) -> Result<Self, ModelError> {
        let cfg = &model.config;
        let mut tw = TalkerW::load(cfg, &mut CpuLoader(&model.weights))?;
        fp8_round_trip(&mut tw.layers, fp8, Stack::Talker);
        let talker = Talker::new(cfg, tw);
        let mut cw = CodePredictorW::load(cfg, &mut CpuLoader(&model.weights))?;
        fp8_round_trip(&mut cw.layers, fp8, Stack::CodePredictor);
        let code_predictor = CodePredictor::new(cfg, cw);
        let codec = load_codec(model)?;
        Ok(Self {
            talker,
            code_predictor,
            codec,
            rules: talker_rules(model),
            text_vocab: cfg.talker.text_vocab_size,
        })
    }

    /// The prefill input `[positions, H]`: per position, `T(text)` plus its codec input
    /// (`C(id)`, a reference frame as [`frame_embedding`](Self::frame_embedding), or the
    /// prompt's speaker vector). An error names what is out of range.
    pub fn embed_prompt(&self, prompt: &Prompt) -> Result<Vec<f32>, String> {
        let h = self.talker.hidden();
        let codec_vocab = self.talker.codec_vocab() as u32;
        let cp_vocab = self.code_predictor.vocab() as u32;
        let mut out = vec![0f32; prompt.positions.len() * h];
        let text_ids: Vec<u32> = prompt.positions.iter().filter_map(|p| p.text).collect();
        if text_ids.iter().any(|&t| t as usize >= self.text_vocab) {
            return Err("prompt text id out of range".into());
        }
        let text = self.talker.text_vectors(&text_ids);
        let mut ti = 0;
        for (row, pos) in out.chunks_mut(h).zip(&prompt.positions) {
            if pos.text.is_some() {
                row.copy_from_slice(&text[ti * h..(ti + 1) * h]);
                ti += 1;
            }
            match pos.codec {
                None => {}
                Some(CodecInput::Id(c)) if c < codec_vocab => {
                    add_assign(row, self.talker.codec_vector(c))
                }
                Some(CodecInput::Frame(f))
                    if f[0] < codec_vocab && f[1..].iter().all(|&c| c < cp_vocab) =>
                {
                    add_assign(row, &self.frame_embedding(&f))
                }
                Some(CodecInput::Speaker(key)) => add_assign(row, prompt.speaker_values(key, h)?),
                Some(_) => return Err("prompt codec id out of range".into()),
            }
        }
        Ok(out)
    }

    /// Code-0 logits of `prompt`'s last position after prefilling it into a fresh cache.
    pub fn prefill_logits(&self, prompt: &Prompt) -> Result<Vec<f32>, String> {
        let mut kv = StackKv::new(self.talker.layers());
        let h = self.talker.forward(
            self.embed_prompt(prompt)?,
            &[prompt.positions.len()],
            &mut [&mut kv],
        );
        Ok(self.talker.logits(&h[h.len() - self.talker.hidden()..], 1))
    }

    /// The talker input of a generation step: `C(code 0) + Σ_j E_j(code j+1)`.
    pub fn frame_embedding(&self, frame: &Frame) -> Vec<f32> {
        let mut e = self.talker.codec_vector(frame[0]).to_vec();
        for j in 0..NUM_CODE_GROUPS - 1 {
            add_assign(&mut e, self.code_predictor.embedding(j, frame[j + 1]));
        }
        e
    }
}

/// Rounds the matrices of `layers` that `scope` covers to their FP8 values.
fn fp8_round_trip(layers: &mut [DecoderLayerW<CpuTensor>], scope: Fp8Scope, stack: Stack) {
    for l in layers {
        let mut chosen: Vec<&mut CpuTensor> = Vec::new();
        if scope.covers(stack, LayerPart::Attention) {
            let a = &mut l.attn;
            chosen.extend([&mut a.q_proj, &mut a.k_proj, &mut a.v_proj, &mut a.o_proj]);
        }
        if scope.covers(stack, LayerPart::Mlp) {
            chosen.extend([&mut l.gate_proj, &mut l.up_proj, &mut l.down_proj]);
        }
        for t in chosen {
            let rows = t.shape[0];
            let cols = t.data.len() / rows.max(1);
            fp8::round_trip(&mut t.data, rows, cols);
        }
    }
}

/// Loads only the codec decoder (f32, CPU).
pub fn load_codec(model: &Model) -> Result<CodecDecoder, ModelError> {
    Ok(CodecDecoder::new(
        &model.codec,
        CodecW::load(&model.codec, &mut CpuLoader(&model.codec_weights))?,
    ))
}

/// Code-0 sampling rules of a model.
pub fn talker_rules(model: &Model) -> TalkerRules {
    let t = &model.config.talker;
    TalkerRules {
        eos: t.codec_eos_token_id,
        suppress_from: t.vocab_size.saturating_sub(1024),
        min_new_tokens: 2,
    }
}

/// One request's state on the CPU backend.
#[derive(Debug)]
struct CpuSlot {
    params: SamplingParams,
    kv: StackKv,
    /// Talker hidden state (after the final norm) of the last position.
    hidden: Vec<f32>,
    /// Code 0 of the current frame, once sampled.
    code0: Option<u32>,
    /// The current frame, once the code predictor ran.
    frame: Option<Frame>,
    /// Every code-0 id sampled so far (for the repetition penalty and the EOS mask).
    history: Vec<u32>,
    codec: CodecState,
}

/// The CPU reference implementation of [`Backend`].
pub struct CpuBackend {
    model: Arc<CpuModel>,
    info: BackendInfo,
    slots: Vec<Option<CpuSlot>>,
}

impl CpuBackend {
    /// Builds the backend; `max_slots` bounds concurrent requests.
    pub fn new(model: &Model, max_slots: usize) -> Result<Self, ModelError> {
        let cpu = CpuModel::load(model)?;
        Ok(Self::from_cpu_model(Arc::new(cpu), model, max_slots))
    }

    /// Builds the backend with the FP8 weights of `fp8` (see [`CpuModel::load_with`]).
    pub fn with_fp8(model: &Model, max_slots: usize, fp8: Fp8Scope) -> Result<Self, ModelError> {
        let cpu = CpuModel::load_with(model, fp8)?;
        Ok(Self::from_cpu_model(Arc::new(cpu), model, max_slots))
    }

    /// Shares already-loaded weights.
    pub fn from_cpu_model(cpu: Arc<CpuModel>, model: &Model, max_slots: usize) -> Self {
        let info = BackendInfo {
            name: model.name.clone(),
            device: "cpu".into(),
            sample_rate: model.sample_rate(),
            samples_per_frame: model.samples_per_frame(),
            codec_eos: model.config.talker.codec_eos_token_id,
            tts_pad_token_id: model.config.tts_pad_token_id,
            max_slots,
            max_positions: model.config.talker.max_position_embeddings,
        };
        Self {
            model: cpu,
            info,
            slots: (0..max_slots).map(|_| None).collect(),
        }
    }

    /// Holds every slot to `max_positions` talker positions (at most the model's), as a
    /// server sizes its context: more is refused (`ContextFull`), and an engine on it
    /// speaks a text that would not fit in segments.
    pub fn with_context(mut self, max_positions: usize) -> Self {
        self.info.max_positions = max_positions.min(self.info.max_positions);
        self
    }

    pub fn cpu_model(&self) -> &Arc<CpuModel> {
        &self.model
    }

    fn slot_mut(&mut self, id: SlotId) -> Result<&mut CpuSlot, BackendError> {
        self.slots
            .get_mut(id.0 as usize)
            .and_then(|s| s.as_mut())
            .ok_or(BackendError::BadSlot(id.0))
    }

    /// Samples code 0 from logits for slot `id`, records it, returns it.
    fn sample_code0(&mut self, id: SlotId, logits: &mut [f32]) -> Result<u32, BackendError> {
        let rules = self.model.rules;
        let slot = self.slot_mut(id)?;
        let t = slot.history.len() as u32;
        process_talker_logits(
            logits,
            &slot.history,
            slot.params.repetition_penalty,
            &rules,
        );
        let u = draw_uniform(slot.params.seed, t, 0);
        let c = choose(logits, &slot.params.talker, u);
        slot.history.push(c);
        slot.code0 = Some(c);
        slot.frame = None;
        Ok(c)
    }

    fn check_room(&mut self, id: SlotId, extra: usize) -> Result<(), BackendError> {
        let cap = self.info.max_positions;
        let slot = self.slot_mut(id)?;
        if slot.kv.len + extra > cap {
            return Err(BackendError::ContextFull {
                slot: id.0,
                capacity: cap,
            });
        }
        Ok(())
    }
}

impl Backend for CpuBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn alloc_slot(&mut self, params: &SamplingParams) -> Result<SlotId, BackendError> {
        let free = first_free_slot(&self.slots)?;
        self.slots[free] = Some(CpuSlot {
            params: *params,
            kv: StackKv::new(self.model.talker.stack.dims.layers),
            hidden: Vec::new(),
            code0: None,
            frame: None,
            history: Vec::new(),
            codec: self.model.codec.new_state(),
        });
        Ok(SlotId(free as u32))
    }

    fn free_slot(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.get_mut(slot.0 as usize) {
            *s = None;
        }
    }

    fn prefill(&mut self, rows: &[PrefillRow<'_>]) -> Result<Vec<u32>, BackendError> {
        let model = Arc::clone(&self.model);
        let h = model.talker.hidden();
        let mut x = Vec::new();
        let mut segments = Vec::with_capacity(rows.len());
        for r in rows {
            if r.prompt.positions.is_empty() {
                return Err(BackendError::SlotState {
                    slot: r.slot.0,
                    message: "an empty prompt has nothing to prefill".into(),
                });
            }
            self.check_room(r.slot, r.prompt.positions.len())?;
            if self.slot_mut(r.slot)?.code0.is_some() {
                return Err(BackendError::SlotState {
                    slot: r.slot.0,
                    message: "already prefilled".into(),
                });
            }
            let embedded =
                model
                    .embed_prompt(r.prompt)
                    .map_err(|message| BackendError::SlotState {
                        slot: r.slot.0,
                        message,
                    })?;
            x.extend(embedded);
            segments.push(r.prompt.positions.len());
        }
        // Take the slots' caches out so the stack can borrow them together.
        let mut caches: Vec<StackKv> = rows
            .iter()
            .map(|r| self.slot_mut(r.slot).map(|s| std::mem::take(&mut s.kv)))
            .collect::<Result<_, _>>()?;
        let mut refs: Vec<&mut StackKv> = caches.iter_mut().collect();
        let hidden = model.talker.forward(x, &segments, &mut refs);
        let mut out = Vec::with_capacity(rows.len());
        let mut end = 0;
        for ((r, seg), kv) in rows.iter().zip(&segments).zip(caches) {
            end += seg;
            let last = hidden[(end - 1) * h..end * h].to_vec();
            let mut logits = model.talker.logits(&last, 1);
            let slot = self.slot_mut(r.slot)?;
            slot.kv = kv;
            slot.hidden = last;
            out.push(self.sample_code0(r.slot, &mut logits)?);
        }
        Ok(out)
    }

    fn predict_codes(&mut self, slots: &[SlotId]) -> Result<Vec<Frame>, BackendError> {
        let model = Arc::clone(&self.model);
        let eos = self.info.codec_eos;
        let mut hidden = Vec::new();
        let mut code0_emb = Vec::new();
        let mut per_row = Vec::with_capacity(slots.len());
        for &id in slots {
            let s = self.slot_mut(id)?;
            let c0 = match s.code0 {
                Some(c) if c != eos && s.frame.is_none() => c,
                _ => {
                    return Err(BackendError::SlotState {
                        slot: id.0,
                        message: "no pending code 0 to complete".into(),
                    })
                }
            };
            hidden.extend_from_slice(&s.hidden);
            code0_emb.extend_from_slice(model.talker.codec_vector(c0));
            per_row.push((c0, s.params, s.history.len() as u32 - 1));
        }
        let codes =
            model
                .code_predictor
                .predict(&hidden, &code0_emb, slots.len(), |r, j, logits| {
                    let (_, p, t) = per_row[r];
                    choose(logits, &p.code_predictor, draw_uniform(p.seed, t, j as u32))
                });
        let mut frames = Vec::with_capacity(slots.len());
        for ((&id, rest), (c0, _, _)) in slots.iter().zip(codes).zip(&per_row) {
            let mut f = [0u32; NUM_CODE_GROUPS];
            f[0] = *c0;
            f[1..].copy_from_slice(&rest);
            self.slot_mut(id)?.frame = Some(f);
            frames.push(f);
        }
        Ok(frames)
    }

    fn talker_step(&mut self, rows: &[StepRow]) -> Result<Vec<u32>, BackendError> {
        let model = Arc::clone(&self.model);
        let h = model.talker.hidden();
        let mut x = Vec::with_capacity(rows.len() * h);
        for r in rows {
            self.check_room(r.slot, 1)?;
            if r.text_token as usize >= model.text_vocab {
                return Err(BackendError::SlotState {
                    slot: r.slot.0,
                    message: format!("text token {} out of range", r.text_token),
                });
            }
            let frame = self
                .slot_mut(r.slot)?
                .frame
                .ok_or(BackendError::SlotState {
                    slot: r.slot.0,
                    message: "talker step before the code predictor completed the frame".into(),
                })?;
            let mut e = model.frame_embedding(&frame);
            let t = model.talker.text_vectors(&[r.text_token]);
            for (a, b) in e.iter_mut().zip(&t) {
                *a += b;
            }
            x.extend(e);
        }
        let mut caches: Vec<StackKv> = rows
            .iter()
            .map(|r| self.slot_mut(r.slot).map(|s| std::mem::take(&mut s.kv)))
            .collect::<Result<_, _>>()?;
        let mut refs: Vec<&mut StackKv> = caches.iter_mut().collect();
        let hidden = model.talker.forward(x, &vec![1; rows.len()], &mut refs);
        let mut logits = model.talker.logits(&hidden, rows.len());
        let vocab = model.talker.codec_vocab();
        let mut out = Vec::with_capacity(rows.len());
        for (i, (r, kv)) in rows.iter().zip(caches).enumerate() {
            let slot = self.slot_mut(r.slot)?;
            slot.kv = kv;
            slot.hidden = hidden[i * h..(i + 1) * h].to_vec();
            out.push(self.sample_code0(r.slot, &mut logits[i * vocab..(i + 1) * vocab])?);
        }
        Ok(out)
    }

    fn codec_decode(&mut self, rows: &[CodecRow<'_>]) -> Result<Vec<Vec<f32>>, BackendError> {
        let model = Arc::clone(&self.model);
        let bins = model.codec.codebook_size() as u32;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            if let Some(bad) = r.frames.iter().flatten().find(|&&c| c >= bins) {
                return Err(BackendError::SlotState {
                    slot: r.slot.0,
                    message: format!("code {bad} is outside the codebook (size {bins})"),
                });
            }
            let slot = self.slot_mut(r.slot)?;
            out.push(model.codec.decode(r.frames, &mut slot.codec));
        }
        Ok(out)
    }
}
