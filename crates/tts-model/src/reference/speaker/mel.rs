//! The log-mel spectrogram the speaker encoder reads, as the official `mel_spectrogram`
//! computes it for `extract_speaker_embedding`: reflect-pad `(n_fft - hop) / 2` samples on
//! each side, STFT without centring (periodic Hann window, one-sided), magnitude
//! `sqrt(re² + im² + 1e-9)`, librosa's Slaney mel filterbank (`htk=False`, `norm="slaney"`),
//! then `ln(max(x, 1e-5))`.

use std::sync::Arc;

use rayon::prelude::*;
use rustfft::num_complex::Complex;
use rustfft::{Fft, FftPlanner};

use super::ReferenceAudioError;
use crate::reference::ops::dot;

/// Sample rate of the audio the speaker encoder reads.
pub const SAMPLE_RATE: u32 = 24_000;
/// FFT size (and window length).
pub const N_FFT: usize = 1024;
/// Hop between frames.
pub const HOP_SIZE: usize = 256;
/// Mel bands.
pub const N_MELS: usize = 128;
/// Lowest filterbank frequency (Hz).
pub const FMIN: f64 = 0.0;
/// Highest filterbank frequency (Hz).
pub const FMAX: f64 = 12_000.0;
/// One-sided spectrum bins.
pub const N_BINS: usize = N_FFT / 2 + 1;
/// Reflect padding on each side of the audio.
pub const PAD: usize = (N_FFT - HOP_SIZE) / 2;
/// Fewest samples the mel accepts: reflect padding needs more samples than it pads.
pub const MIN_SAMPLES: usize = PAD + 1;

/// Floor of the magnitude's square (`sqrt(re² + im² + 1e-9)`).
const MAG_EPS: f32 = 1e-9;
/// Floor before the log (`dynamic_range_compression_torch`'s `clip_val`).
const LOG_FLOOR: f32 = 1e-5;

/// A log-mel spectrogram, time-major: `data` is `[frames, N_MELS]`.
#[derive(Debug, Clone, PartialEq)]
pub struct MelSpectrogram {
    /// Number of frames.
    pub frames: usize,
    /// `frames * N_MELS` values, frame after frame.
    pub data: Vec<f32>,
}

impl MelSpectrogram {
    /// The `N_MELS` log-mel values of frame `t`.
    pub fn frame(&self, t: usize) -> &[f32] {
        &self.data[t * N_MELS..(t + 1) * N_MELS]
    }
}

/// Frames the mel has for `samples` samples (0 when too short).
pub fn num_frames(samples: usize) -> usize {
    let padded = samples + 2 * PAD;
    if padded < N_FFT {
        0
    } else {
        (padded - N_FFT) / HOP_SIZE + 1
    }
}

/// Index of position `i` (which may lie up to `n - 1` outside `0..n`) in a sequence of
/// length `n` reflected at its ends without repeating them (PyTorch's `reflect` mode).
pub fn reflect_index(i: isize, n: usize) -> usize {
    let last = n as isize - 1;
    let j = if i < 0 {
        -i
    } else if i > last {
        2 * last - i
    } else {
        i
    };
    debug_assert!(
        (0..=last).contains(&j),
        "reflect index {i} out of range for {n}"
    );
    j as usize
}

/// `x` with `pad` samples reflected onto each end (PyTorch `F.pad(.., mode="reflect")`).
/// Needs `pad < x.len()`.
pub fn reflect_pad(x: &[f32], pad: usize) -> Result<Vec<f32>, ReferenceAudioError> {
    if pad >= x.len() {
        return Err(ReferenceAudioError::TooShort {
            samples: x.len(),
            min: pad + 1,
        });
    }
    let n = x.len();
    Ok((-(pad as isize)..(n + pad) as isize)
        .map(|i| x[reflect_index(i, n)])
        .collect())
}

/// Slaney mel scale (librosa `hz_to_mel`, `htk=False`): linear below 1 kHz, log above.
fn hz_to_mel(hz: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if hz >= min_log_hz {
        min_log_mel + (hz / min_log_hz).ln() / logstep
    } else {
        hz / f_sp
    }
}

/// Inverse of [`hz_to_mel`] (librosa `mel_to_hz`, `htk=False`).
fn mel_to_hz(mel: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if mel >= min_log_mel {
        min_log_hz * (logstep * (mel - min_log_mel)).exp()
    } else {
        f_sp * mel
    }
}

/// librosa `filters.mel(sr, n_fft, n_mels, fmin, fmax)` with its defaults (`htk=False`,
/// `norm="slaney"`, float32): `[n_mels, n_fft/2 + 1]`, row-major. Computed in f64 and
/// rounded where librosa rounds (the triangle into f32, then the f32 weight times the f64
/// Slaney factor into f32 again).
pub fn mel_filterbank(sr: f64, n_fft: usize, n_mels: usize, fmin: f64, fmax: f64) -> Vec<f32> {
    let n_bins = n_fft / 2 + 1;
    // np.fft.rfftfreq(n_fft, d=1/sr)
    let step = 1.0 / (n_fft as f64 * (1.0 / sr));
    let fftfreqs: Vec<f64> = (0..n_bins).map(|k| k as f64 * step).collect();
    // mel_frequencies(n_mels + 2, fmin, fmax): np.linspace in mel, back to Hz.
    let (lo, hi) = (hz_to_mel(fmin), hz_to_mel(fmax));
    let points = n_mels + 2;
    let mel_step = (hi - lo) / (points - 1) as f64;
    let mel_f: Vec<f64> = (0..points)
        .map(|i| {
            let m = if i == points - 1 {
                hi
            } else {
                i as f64 * mel_step + lo
            };
            mel_to_hz(m)
        })
        .collect();
    let mut weights = vec![0f32; n_mels * n_bins];
    for (i, row) in weights.chunks_mut(n_bins).enumerate() {
        let (down, up) = (mel_f[i + 1] - mel_f[i], mel_f[i + 2] - mel_f[i + 1]);
        let enorm = 2.0 / (mel_f[i + 2] - mel_f[i]);
        for (w, &f) in row.iter_mut().zip(&fftfreqs) {
            let lower = -(mel_f[i] - f) / down;
            let upper = (mel_f[i + 2] - f) / up;
            let tri = lower.min(upper).max(0.0) as f32;
            *w = (tri as f64 * enorm) as f32;
        }
    }
    weights
}

/// `torch.hann_window(n)` (periodic), computed as PyTorch does in f32:
/// `0.5 - 0.5 * cos(n * (2π / N))`.
fn hann_window(n: usize) -> Vec<f32> {
    let step = (2.0 * std::f64::consts::PI / n as f64) as f32;
    (0..n)
        .map(|i| {
            let c = ((i as f32 * step) as f64).cos() as f32;
            c * -0.5 + 0.5
        })
        .collect()
}

/// Computes log-mel spectrograms; holds the filterbank, window and FFT plan.
#[derive(Clone)]
pub struct MelExtractor {
    /// `[N_MELS, N_BINS]`.
    filters: Vec<f32>,
    window: Vec<f32>,
    fft: Arc<dyn Fft<f32>>,
}

impl std::fmt::Debug for MelExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MelExtractor")
            .field("n_fft", &N_FFT)
            .field("n_mels", &N_MELS)
            .finish_non_exhaustive()
    }
}

impl Default for MelExtractor {
    fn default() -> Self {
        Self::new()
    }
}

impl MelExtractor {
    /// Builds the filterbank, the window and the FFT plan.
    pub fn new() -> Self {
        Self {
            filters: mel_filterbank(SAMPLE_RATE as f64, N_FFT, N_MELS, FMIN, FMAX),
            window: hann_window(N_FFT),
            fft: FftPlanner::new().plan_fft_forward(N_FFT),
        }
    }

    /// The filterbank, `[N_MELS, N_BINS]` row-major.
    pub fn filters(&self) -> &[f32] {
        &self.filters
    }

    /// The log-mel spectrogram of 24 kHz mono audio.
    pub fn compute(&self, audio: &[f32]) -> Result<MelSpectrogram, ReferenceAudioError> {
        let padded = reflect_pad(audio, PAD)?;
        let frames = num_frames(audio.len());
        let mut data = vec![0f32; frames * N_MELS];
        let scratch_len = self.fft.get_inplace_scratch_len();
        data.par_chunks_mut(N_MELS).enumerate().for_each_init(
            || {
                (
                    vec![Complex::<f32>::default(); N_FFT],
                    vec![Complex::<f32>::default(); scratch_len],
                    vec![0f32; N_BINS],
                )
            },
            |(buf, scratch, mag), (t, out)| {
                let start = t * HOP_SIZE;
                for ((b, &x), &w) in buf
                    .iter_mut()
                    .zip(&padded[start..start + N_FFT])
                    .zip(&self.window)
                {
                    *b = Complex::new(x * w, 0.0);
                }
                self.fft.process_with_scratch(buf, scratch);
                for (m, c) in mag.iter_mut().zip(buf.iter()) {
                    *m = (c.re * c.re + c.im * c.im + MAG_EPS).sqrt();
                }
                for (o, filt) in out.iter_mut().zip(self.filters.chunks_exact(N_BINS)) {
                    *o = dot(filt, mag).max(LOG_FLOOR).ln();
                }
            },
        );
        Ok(MelSpectrogram { frames, data })
    }
}

/// The speaker encoder's log-mel spectrogram of 24 kHz mono audio (`[frames, 128]`).
/// Needs more than [`PAD`] samples. Builds the filterbank and FFT plan on each call; keep a
/// [`MelExtractor`] to reuse them.
pub fn mel_spectrogram(audio: &[f32]) -> Result<MelSpectrogram, ReferenceAudioError> {
    MelExtractor::new().compute(audio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_pad_mirrors_without_repeating_the_edge() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(
            reflect_pad(&x, 2).unwrap(),
            [3.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 2.0]
        );
        assert_eq!(reflect_pad(&x, 3).unwrap()[0], 4.0);
        assert!(matches!(
            reflect_pad(&x, 4),
            Err(ReferenceAudioError::TooShort { samples: 4, min: 5 })
        ));
    }

    #[test]
    fn frame_count_follows_the_padded_length() {
        // T = (N + 768 - 1024) / 256 + 1
        assert_eq!(num_frames(385), 1);
        assert_eq!(num_frames(511), 1);
        assert_eq!(num_frames(512), 2);
        assert_eq!(num_frames(24_000), 93);
        assert_eq!(num_frames(100), 0);
    }

    /// Values of `librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000)`
    /// (librosa 0.11.0), as (mel, bin, weight).
    const LIBROSA_WEIGHTS: &[(usize, usize, f32)] = &[
        (0, 0, 0.0),
        (0, 1, 0.033550426),
        (0, 2, 0.008569083),
        (1, 2, 0.029265886),
        (1, 3, 0.012853624),
        (2, 3, 0.024981344),
        (2, 4, 0.017138166),
        (10, 12, 0.024255442),
        (10, 13, 0.01786407),
        (37, 42, 0.008924606),
        (37, 43, 0.032427758),
        (37, 44, 0.0013461575),
        (64, 88, 0.006831432),
        (64, 89, 0.014103504),
        (64, 91, 0.00664064),
        (100, 233, 0.00075434695),
        (100, 239, 0.006238921),
        (100, 245, 0.00027324416),
        (126, 472, 4.9786693e-05),
        (126, 485, 0.0031886054),
        (126, 498, 5.60904e-05),
        (127, 485, 3.8516027e-05),
        (127, 498, 0.0030868005),
        (127, 511, 0.00022817837),
        (127, 512, 0.0),
    ];

    #[test]
    fn filterbank_matches_librosa() {
        let fb = mel_filterbank(24_000.0, N_FFT, N_MELS, FMIN, FMAX);
        assert_eq!(fb.len(), N_MELS * N_BINS);
        for &(m, k, want) in LIBROSA_WEIGHTS {
            let got = fb[m * N_BINS + k];
            assert!(
                (got - want).abs() <= 2.0 * f32::EPSILON * want.abs(),
                "mel {m} bin {k}: {got} vs librosa {want}"
            );
        }
    }

    #[test]
    fn too_short_audio_is_an_error() {
        assert!(mel_spectrogram(&[0.0; PAD]).is_err());
        let m = mel_spectrogram(&[0.0; MIN_SAMPLES]).unwrap();
        assert_eq!(m.frames, 1);
        // Silence: every bin is sqrt(1e-9) and every filter sums to about 0.042, so every
        // band sits on the log floor, ln(1e-5) (as the official code gives: -11.5129).
        assert!(
            m.data.iter().all(|&v| v == LOG_FLOOR.ln()),
            "{:?}",
            m.frame(0)
        );
    }
}
