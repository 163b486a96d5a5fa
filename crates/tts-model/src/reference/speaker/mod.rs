//! The speaker encoder of Base (voice-clone) checkpoints: reference audio -> x-vector.
//!
//! Mirrors the official `Qwen3TTSForConditionalGeneration.extract_speaker_embedding`:
//! 24 kHz mono f32 audio -> 128-band log-mel spectrogram ([`mel`]) -> ECAPA-TDNN
//! ([`ecapa`]) -> a vector of `enc_dim` floats, spliced into the prompt as the speaker
//! embedding. Resampling to 24 kHz is the caller's job (the official code uses
//! `librosa.resample` before this point).

pub mod config;
pub mod ecapa;
pub mod mel;
pub mod weights;

use std::path::Path;

pub use config::SpeakerEncoderConfig;
pub use mel::{mel_spectrogram, MelExtractor, MelSpectrogram};

use crate::checkpoint::WeightSource;
use crate::error::ModelError;
use crate::reference::CpuLoader;
use ecapa::Ecapa;
use weights::SpeakerEncoderW;

/// Reference audio the speaker encoder cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceAudioError {
    #[error(
        "reference audio is too short: {samples} samples at 24 kHz, the speaker encoder needs \
         at least {min}"
    )]
    TooShort { samples: usize, min: usize },
    #[error("reference audio sample {index} is not a finite number")]
    NonFinite { index: usize },
    #[error("mel spectrogram of {frames} frames; the speaker encoder needs at least {min}")]
    TooFewFrames { frames: usize, min: usize },
    #[error("mel spectrogram holds {len} values, not {frames} frames of {mels}")]
    MelShape {
        len: usize,
        frames: usize,
        mels: usize,
    },
}

/// The speaker encoder in f32: mel front end plus ECAPA-TDNN.
#[derive(Debug, Clone)]
pub struct SpeakerEncoder {
    config: SpeakerEncoderConfig,
    mel: MelExtractor,
    net: Ecapa,
}

impl SpeakerEncoder {
    /// Validates `config` and loads the `speaker_encoder.*` tensors of `weights` (the main
    /// `model.safetensors`; bf16/f16 are widened to f32).
    pub fn load(config: &SpeakerEncoderConfig, weights: &WeightSource) -> Result<Self, ModelError> {
        config.validate(Path::new("config.json"))?;
        let w = SpeakerEncoderW::load(config, &mut CpuLoader(weights))?;
        Ok(Self {
            config: config.clone(),
            mel: MelExtractor::new(),
            net: Ecapa::new(config, w),
        })
    }

    /// The configuration it was loaded with.
    pub fn config(&self) -> &SpeakerEncoderConfig {
        &self.config
    }

    /// Size of the x-vector.
    pub fn dim(&self) -> usize {
        self.config.enc_dim
    }

    /// Fewest 24 kHz samples [`Self::embed`] accepts: the mel's reflect padding needs more
    /// than 384 samples, and every reflect-padded conv more frames than it pads.
    pub fn min_samples(&self) -> usize {
        let frames = self.net.min_frames().max(1);
        let for_frames = mel::N_FFT - 2 * mel::PAD + (frames - 1) * mel::HOP_SIZE;
        for_frames.max(mel::MIN_SAMPLES)
    }

    /// The log-mel spectrogram this encoder reads.
    pub fn mel_spectrogram(
        &self,
        audio_24k: &[f32],
    ) -> Result<MelSpectrogram, ReferenceAudioError> {
        self.mel.compute(audio_24k)
    }

    /// The x-vector (`enc_dim` floats) of 24 kHz mono audio.
    pub fn embed(&self, audio_24k: &[f32]) -> Result<Vec<f32>, ReferenceAudioError> {
        if let Some(index) = audio_24k.iter().position(|v| !v.is_finite()) {
            return Err(ReferenceAudioError::NonFinite { index });
        }
        let min = self.min_samples();
        if audio_24k.len() < min {
            return Err(ReferenceAudioError::TooShort {
                samples: audio_24k.len(),
                min,
            });
        }
        let mel = self.mel.compute(audio_24k)?;
        self.embed_mel(&mel)
    }

    /// The x-vector of a log-mel spectrogram (`[frames, 128]`), e.g. one computed elsewhere.
    pub fn embed_mel(&self, mel: &MelSpectrogram) -> Result<Vec<f32>, ReferenceAudioError> {
        let mels = self.config.mel_dim;
        if mel.data.len() != mel.frames * mels {
            return Err(ReferenceAudioError::MelShape {
                len: mel.data.len(),
                frames: mel.frames,
                mels,
            });
        }
        let min = self.net.min_frames();
        if mel.frames < min {
            return Err(ReferenceAudioError::TooFewFrames {
                frames: mel.frames,
                min,
            });
        }
        Ok(self.net.forward(&mel.data, mel.frames))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{RandomDtype, RandomWeights};

    fn tiny() -> SpeakerEncoder {
        let cfg = SpeakerEncoderConfig {
            enc_dim: 16,
            enc_channels: vec![32, 32, 32, 64],
            enc_kernel_sizes: vec![5, 3, 3, 1],
            enc_dilations: vec![1, 2, 4, 1],
            enc_attention_channels: 8,
            enc_res2net_scale: 4,
            enc_se_channels: 8,
            ..Default::default()
        };
        let w = WeightSource::Random(RandomWeights {
            seed: 7,
            dtype: RandomDtype::F32,
        });
        SpeakerEncoder::load(&cfg, &w).unwrap()
    }

    #[test]
    fn short_audio_is_an_error_not_a_panic() {
        let enc = tiny();
        // Dilation 4, kernel 3: 4 frames of padding each side, so 5 frames = 1280 samples.
        assert_eq!(enc.min_samples(), 1280);
        for n in [0, 1, 384, 1279] {
            assert_eq!(
                enc.embed(&vec![0.1; n]),
                Err(ReferenceAudioError::TooShort {
                    samples: n,
                    min: 1280
                })
            );
        }
        let v = enc.embed(&vec![0.1; 1280]).unwrap();
        assert_eq!(v.len(), 16);
        assert!(v.iter().all(|x| x.is_finite()));
        let mut bad = vec![0.0; 2000];
        bad[3] = f32::NAN;
        assert_eq!(
            enc.embed(&bad),
            Err(ReferenceAudioError::NonFinite { index: 3 })
        );
    }

    #[test]
    fn the_embedding_is_deterministic_and_follows_the_input() {
        let enc = tiny();
        let audio: Vec<f32> = (0..4800).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
        let a = enc.embed(&audio).unwrap();
        let b = enc.embed(&audio).unwrap();
        assert_eq!(a, b, "deterministic");
        let quiet: Vec<f32> = audio.iter().map(|x| x * 0.1).collect();
        assert_ne!(a, enc.embed(&quiet).unwrap());
        let short = MelSpectrogram {
            frames: 4,
            data: vec![0.0; 4 * 128],
        };
        assert_eq!(
            enc.embed_mel(&short),
            Err(ReferenceAudioError::TooFewFrames { frames: 4, min: 5 })
        );
    }
}
