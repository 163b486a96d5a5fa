//! Whole-utterance generation on any [`Backend`], one request at a time: the loop of the
//! reference `generate` (§2.3 of the architecture reference) plus the runaway guard.
//! The CLI's `synth` uses it; the streaming engine runs the same stages interleaved.

use crate::backend::{Backend, CodecRow, Frame, PrefillRow, StepRow};
use crate::error::BackendError;
use crate::prompt::Prompt;
use crate::sampling::SamplingParams;

/// The runaway guard: at most `base + per_token · text tokens` frames, and never more than
/// `hard_max`, whatever the model's EOS does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameCap {
    pub base: usize,
    pub per_token: f32,
    pub hard_max: usize,
}

impl Default for FrameCap {
    /// 2 s plus 0.48 s per text token (real speech needs ~0.25 s per token), at most the
    /// reference's 8192 samples.
    fn default() -> Self {
        Self {
            base: 25,
            per_token: 6.0,
            hard_max: 8191,
        }
    }
}

impl FrameCap {
    /// The frame limit for a prompt with `body_len` text tokens.
    pub fn limit(&self, body_len: usize) -> usize {
        let derived = self.base + (self.per_token * body_len as f32).ceil() as usize;
        derived.min(self.hard_max)
    }
}

/// Frames per input character used to length replies of random-weight models, which
/// never produce a meaningful EOS (about 12 characters per second of speech).
pub const RANDOM_MODEL_FRAMES_PER_CHAR: f32 = 0.83;

/// The reply length (frames) given to a random-weight model for `text`.
pub fn random_model_frames(text: &str) -> usize {
    ((text.chars().count() as f32 * RANDOM_MODEL_FRAMES_PER_CHAR).ceil() as usize).max(1)
}

/// What a generation produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Synthesis {
    /// Frames in order, the EOS frame excluded.
    pub frames: Vec<Frame>,
    /// PCM of all frames (empty when audio was not requested).
    pub pcm: Vec<f32>,
    /// True when the model ended the utterance; false when the frame cap did.
    pub ended_by_eos: bool,
}

/// Generates a whole utterance: prefill, then per frame the code predictor and a talker
/// step, until EOS or `max_frames`; then decodes all frames when `decode` is set.
pub fn synthesize(
    backend: &mut dyn Backend,
    prompt: &Prompt,
    params: &SamplingParams,
    max_frames: usize,
    decode: bool,
) -> Result<Synthesis, BackendError> {
    let slot = backend.alloc_slot(params)?;
    let result = run(backend, slot, prompt, max_frames, decode);
    backend.free_slot(slot);
    result
}

fn run(
    backend: &mut dyn Backend,
    slot: crate::backend::SlotId,
    prompt: &Prompt,
    max_frames: usize,
    decode: bool,
) -> Result<Synthesis, BackendError> {
    let eos = backend.info().codec_eos;
    let pad = backend.info().tts_pad_token_id;
    let mut out = Synthesis::default();
    let mut code0 = backend.prefill(&[PrefillRow { slot, prompt }])?[0];
    loop {
        if code0 == eos {
            out.ended_by_eos = true;
            break;
        }
        if out.frames.len() >= max_frames {
            break;
        }
        let frame = backend.predict_codes(&[slot])?[0];
        out.frames.push(frame);
        if out.frames.len() >= max_frames {
            break;
        }
        let step = out.frames.len() - 1;
        let text_token = prompt.trailing_text.get(step).copied().unwrap_or(pad);
        code0 = backend.talker_step(&[StepRow { slot, text_token }])?[0];
    }
    if decode && !out.frames.is_empty() {
        // The prompt's codec context (a clone's reference frames) first, its audio cut.
        let context = prompt.codec_context.len();
        let frames: Vec<Frame> = prompt
            .codec_context
            .iter()
            .chain(&out.frames)
            .copied()
            .collect();
        let mut pcm = backend.codec_decode(&[CodecRow {
            slot,
            frames: &frames,
        }])?;
        let mut pcm = pcm.pop().unwrap_or_default();
        pcm.drain(..(context * backend.info().samples_per_frame).min(pcm.len()));
        out.pcm = pcm;
    }
    Ok(out)
}
