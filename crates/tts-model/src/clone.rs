//! Voice cloning with a Base checkpoint (the reference's `create_voice_clone_prompt`): a
//! reference recording becomes a [`ClonedVoice`], its speaker vector from the speaker
//! encoder and, for in-context cloning, its codec frames from the codec encoder and its
//! transcript. Both encoders run on the CPU (once per recording; callers cache the result).

use std::sync::Arc;

use rubato::{FftFixedIn, Resampler};

use crate::config::ModelKind;
use crate::error::{ModelError, RequestError};
use crate::model::Model;
use crate::prompt::{ClonedVoice, SpeakerVector, VoiceReference};
use crate::reference::codec_encoder::CodecEncoder;
use crate::reference::speaker::SpeakerEncoder;

/// The sample rate both encoders take (and the reference resamples to).
pub const CLONE_SAMPLE_RATE: u32 = 24_000;

/// The encoders of a Base checkpoint.
#[derive(Debug)]
pub struct VoiceCloner {
    speaker: SpeakerEncoder,
    codec: CodecEncoder,
}

/// How to clone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloneMode {
    /// The speaker vector and the recording's codes and transcript (the reference's
    /// default, `x_vector_only_mode=False`): closest to the recording.
    InContext,
    /// The speaker vector alone (`x_vector_only_mode=True`): no transcript needed, a
    /// shorter prompt, and text may stream in.
    SpeakerOnly,
}

impl VoiceCloner {
    /// The encoders of `model`, or `None` when it is not a Base checkpoint.
    pub fn load(model: &Model) -> Result<Option<Self>, ModelError> {
        if model.kind() != ModelKind::Base {
            return Ok(None);
        }
        let cfg = model.config.speaker_encoder.clone().unwrap_or_default();
        Ok(Some(Self {
            speaker: SpeakerEncoder::load(&cfg, &model.weights)?,
            codec: CodecEncoder::from_model(model)?,
        }))
    }

    /// Clones the voice of `audio` (mono, at `sample_rate`; resampled to 24 kHz first).
    /// In-context cloning needs `transcript`, what is said in the recording.
    pub fn clone_voice(
        &self,
        audio: &[f32],
        sample_rate: u32,
        mode: CloneMode,
        transcript: Option<&str>,
    ) -> Result<ClonedVoice, ModelError> {
        let transcript = transcript.map(str::trim).filter(|t| !t.is_empty());
        if mode == CloneMode::InContext && transcript.is_none() {
            return Err(RequestError::ReferenceTextRequired.into());
        }
        if let Some(i) = audio.iter().position(|x| !x.is_finite()) {
            return Err(ModelError::bad_reference(format!(
                "reference audio sample {i} is not a number"
            )));
        }
        let audio = resample(audio, sample_rate, CLONE_SAMPLE_RATE)?;
        let vector = self
            .speaker
            .embed(&audio)
            .map_err(|e| ModelError::bad_reference(e.to_string()))?;
        let reference = match (mode, transcript) {
            (CloneMode::InContext, Some(text)) => Some(VoiceReference {
                frames: self.codec.encode(&audio)?,
                text: text.to_string(),
            }),
            _ => None,
        };
        Ok(ClonedVoice {
            speaker: Arc::new(SpeakerVector::new(vector)),
            reference,
        })
    }
}

/// `x` resampled from `from` Hz to `to` Hz (FFT resampler; `ceil(len * to / from)`
/// samples, delay removed). The reference uses `librosa.resample` (soxr), so a resampled
/// recording is close to, not the same as, the reference's.
pub fn resample(x: &[f32], from: u32, to: u32) -> Result<Vec<f32>, ModelError> {
    if from == to {
        return Ok(x.to_vec());
    }
    if from == 0 || to == 0 {
        return Err(ModelError::bad_reference(format!(
            "cannot resample {from} Hz audio to {to} Hz"
        )));
    }
    let err = |e: &dyn std::fmt::Display| {
        ModelError::bad_reference(format!("resampling {from} Hz audio: {e}"))
    };
    let mut r =
        FftFixedIn::<f32>::new(from as usize, to as usize, 1024, 2, 1).map_err(|e| err(&e))?;
    let delay = r.output_delay();
    let want = (x.len() as u64 * u64::from(to)).div_ceil(u64::from(from)) as usize;
    let mut out = Vec::with_capacity(want + delay + 4096);
    let mut pos = 0;
    while pos + r.input_frames_next() <= x.len() {
        let n = r.input_frames_next();
        let y = r.process(&[&x[pos..pos + n]], None).map_err(|e| err(&e))?;
        out.extend_from_slice(&y[0]);
        pos += n;
    }
    let y = r
        .process_partial(Some(&[&x[pos..]]), None)
        .map_err(|e| err(&e))?;
    out.extend_from_slice(&y[0]);
    while out.len() < delay + want {
        let y = r
            .process_partial(None::<&[&[f32]]>, None)
            .map_err(|e| err(&e))?;
        if y[0].is_empty() {
            break;
        }
        out.extend_from_slice(&y[0]);
    }
    out.drain(..delay.min(out.len()));
    out.resize(want, 0.0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(rate: u32, hz: f32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (2.0 * std::f32::consts::PI * hz * i as f32 / rate as f32).sin() * 0.5)
            .collect()
    }

    #[test]
    fn resampling_keeps_a_tone_in_place_and_the_length_exact() {
        for from in [8_000, 16_000, 22_050, 44_100, 48_000] {
            let x = tone(from, 440.0, from as usize / 2 + 7);
            let y = resample(&x, from, 24_000).unwrap();
            let want_len = (x.len() as u64 * 24_000).div_ceil(u64::from(from)) as usize;
            assert_eq!(y.len(), want_len, "{from}");
            // Away from the edges the output is the same tone at 24 kHz, in phase.
            let want = tone(24_000, 440.0, y.len());
            let mid = &y[2_000..y.len() - 2_000];
            let err = mid
                .iter()
                .zip(&want[2_000..])
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(err < 0.01, "{from} Hz: max error {err}");
        }
    }

    #[test]
    fn the_same_rate_is_left_alone() {
        let x = tone(24_000, 300.0, 1000);
        assert_eq!(resample(&x, 24_000, 24_000).unwrap(), x);
        assert!(resample(&x, 0, 24_000).is_err());
    }
}
