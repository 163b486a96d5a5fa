//! The codec encoder (Mimi) of the 12 Hz speech tokenizer: reference audio -> codes, as
//! `Qwen3TTSTokenizer.encode` computes them for a voice-clone prompt.
//!
//! Pipeline (release sizes): 24 kHz mono -> SEANet convs (÷960, 25 Hz, 512 wide) ->
//! 8-layer causal transformer -> stride-2 conv k4 with replicate padding (÷2, 12.5 Hz)
//! -> split RVQ (1 semantic + 15 acoustic codebooks of the 32) -> codes `[R, 16]`, trimmed
//! to `R = ceil(samples / 1920)` frames.
//!
//! Weights are read in f32 and every step is computed in f32 (the official tokenizer runs
//! in the dtype it was loaded with).

mod conv;
mod quantizer;
mod seanet;
mod transformer;

use conv::{Conv1d, ConvSpec, PadMode};
use quantizer::SplitRvq;
use seanet::Seanet;
use transformer::Transformer;

use crate::backend::Frame;
use crate::checkpoint::WeightSource;
use crate::config::{CodecConfig, NUM_CODE_GROUPS};
use crate::error::ModelError;
use crate::model::Model;

/// The encoder half of the speech tokenizer.
#[derive(Debug, Clone)]
pub struct CodecEncoder {
    seanet: Seanet,
    transformer: Transformer,
    /// `encoder.downsample`: stride 2, no bias, always replicate padding.
    downsample: Conv1d,
    quantizer: SplitRvq,
    hidden: usize,
    /// `encode_downsample_rate`: samples per kept code frame.
    samples_per_frame: usize,
    sample_rate: u32,
}

impl CodecEncoder {
    /// Loads the encoder of `cfg` from the speech tokenizer's weights
    /// (`speech_tokenizer/model.safetensors`, tensors `encoder.*`).
    pub fn load(cfg: &CodecConfig, weights: &WeightSource) -> Result<Self, ModelError> {
        let e = &cfg.encoder;
        let downsample = Conv1d::load(
            weights,
            "encoder.downsample.conv",
            ConvSpec {
                cin: e.hidden_size,
                cout: e.hidden_size,
                kernel: e.downsample_kernel(),
                stride: 2,
                dilation: 1,
                bias: false,
                causal: e.use_causal_conv,
                pad_mode: PadMode::Replicate,
                streaming: e.use_streaming,
            },
        )?;
        Ok(Self {
            seanet: Seanet::load(cfg, weights)?,
            transformer: Transformer::load(cfg, weights)?,
            downsample,
            quantizer: SplitRvq::load(cfg, weights)?,
            hidden: e.hidden_size,
            samples_per_frame: cfg.encode_downsample_rate,
            sample_rate: e.sampling_rate,
        })
    }

    /// Loads the encoder of a model's speech tokenizer.
    pub fn from_model(model: &Model) -> Result<Self, ModelError> {
        Self::load(&model.codec, &model.codec_weights)
    }

    /// Sample rate the audio must have (24 kHz in the release).
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Width of a continuous frame ([`Self::frames`]).
    pub fn frame_dim(&self) -> usize {
        self.hidden
    }

    /// Code frames `encode` returns for `samples` input samples.
    pub fn num_frames(&self, samples: usize) -> usize {
        let t = self.seanet.output_len(samples);
        let computed = self.downsample.output_len(t);
        computed.min(samples.div_ceil(self.samples_per_frame))
    }

    /// The continuous frames right before the quantizer (the output of
    /// `encoder.downsample`), time-major `[num_frames, frame_dim]`, trimmed like the codes.
    pub fn frames(&self, audio: &[f32]) -> Result<Vec<f32>, ModelError> {
        check_audio(audio)?;
        let r = self.num_frames(audio.len());
        if r == 0 {
            return Err(ModelError::bad_reference(format!(
                "reference audio of {} samples is too short for one code frame",
                audio.len()
            )));
        }
        let x = self.seanet.forward(audio);
        let x = self.transformer.forward(x);
        let mut x = self.downsample.forward(&x);
        x.truncate(r * self.hidden);
        Ok(x)
    }

    /// Encodes mono audio at [`Self::sample_rate`] into code frames, 16 codes each:
    /// `ceil(samples / 1920)` frames in the release.
    pub fn encode(&self, audio: &[f32]) -> Result<Vec<Frame>, ModelError> {
        let x = self.frames(audio)?;
        let t = x.len() / self.hidden;
        Ok(self
            .quantizer
            .encode(&x, t)
            .into_iter()
            .map(|codes| {
                let mut f = [0u32; NUM_CODE_GROUPS];
                f.copy_from_slice(&codes);
                f
            })
            .collect())
    }
}

/// Non-empty and finite.
fn check_audio(audio: &[f32]) -> Result<(), ModelError> {
    if audio.is_empty() {
        return Err(ModelError::bad_reference("reference audio is empty"));
    }
    if let Some(i) = audio.iter().position(|v| !v.is_finite()) {
        return Err(ModelError::bad_reference(format!(
            "reference audio sample {i} is not a finite number"
        )));
    }
    Ok(())
}
