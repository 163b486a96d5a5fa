//! Leading-silence removal for one stream (DESIGN.md, idea 1): drop the PCM of the first
//! frames (the silent bootstrap frame of CustomVoice replies; they are still decoded, the
//! codec needs them as context), then drop PCM until speech onset, then pass everything.
//!
//! A stream that ends without an onset sends no audio at all: the whole reply was below
//! the threshold, and sending silence would only be counted as a late first sample.

use crate::onset::{OnsetDetector, OnsetRule};

/// Trimming settings of a stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrimConfig {
    /// Frames whose audio is dropped unconditionally.
    pub drop_frames: usize,
    /// The onset rule, or `None` to keep leading silence.
    pub onset: Option<OnsetRule>,
}

/// The trimming state of one stream.
#[derive(Debug, Clone)]
pub struct LeadingTrim {
    /// Samples still to drop unconditionally.
    drop_left: usize,
    /// Searching for the onset (`None` once found or when disabled).
    detector: Option<OnsetDetector>,
    /// Samples after the dropped frames that may still be speech, starting at `held_from`
    /// (absolute index after the dropped frames).
    held: Vec<f32>,
    held_from: usize,
    /// Samples removed so far.
    trimmed: usize,
}

impl LeadingTrim {
    pub fn new(config: TrimConfig, sample_rate: u32, samples_per_frame: usize) -> Self {
        Self {
            drop_left: config.drop_frames * samples_per_frame,
            detector: config.onset.map(|r| OnsetDetector::new(r, sample_rate)),
            held: Vec::new(),
            held_from: 0,
            trimmed: 0,
        }
    }

    /// Feeds decoded PCM; returns what may be sent now (empty while still trimming).
    pub fn push(&mut self, pcm: &[f32]) -> Vec<f32> {
        let skip = self.drop_left.min(pcm.len());
        self.drop_left -= skip;
        self.trimmed += skip;
        let pcm = &pcm[skip..];
        let Some(detector) = self.detector.as_mut() else {
            return pcm.to_vec();
        };
        self.held.extend_from_slice(pcm);
        if let Some(onset) = detector.push(pcm) {
            self.detector = None;
            let cut = onset - self.held_from;
            self.trimmed += cut;
            let mut out = std::mem::take(&mut self.held);
            out.drain(..cut);
            return out;
        }
        // Drop what can no longer be speech, so the held audio stays short.
        let keep_from = detector.undecided_from();
        let cut = keep_from
            .saturating_sub(self.held_from)
            .min(self.held.len());
        self.held.drain(..cut);
        self.held_from += cut;
        self.trimmed += cut;
        Vec::new()
    }

    /// Whether audio has started passing through.
    pub fn is_open(&self) -> bool {
        self.drop_left == 0 && self.detector.is_none()
    }

    /// Samples removed so far (held samples of a stream still searching included).
    pub fn trimmed(&self) -> usize {
        self.trimmed + self.held.len()
    }
}

/// Applies the same trimming to a whole buffer (for comparisons and offline use).
pub fn trim_whole(
    pcm: &[f32],
    config: TrimConfig,
    sample_rate: u32,
    samples_per_frame: usize,
) -> Vec<f32> {
    let rest = &pcm[(config.drop_frames * samples_per_frame).min(pcm.len())..];
    match config.onset {
        None => rest.to_vec(),
        Some(rule) => match crate::onset::find_onset(rest, rule, sample_rate) {
            Some(o) => rest[o..].to_vec(),
            None => Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SR: u32 = 24_000;
    const SPF: usize = 1920;

    fn reply(silent: usize, total: usize) -> Vec<f32> {
        (0..total)
            .map(|i| {
                if i < silent {
                    0.0
                } else {
                    0.2 * (i as f32 * 0.03).sin() + 0.05
                }
            })
            .collect()
    }

    fn config(drop_frames: usize, onset: bool) -> TrimConfig {
        TrimConfig {
            drop_frames,
            onset: onset.then(OnsetRule::default),
        }
    }

    #[test]
    fn streaming_trim_equals_whole_trim_for_any_chunking() {
        let pcm = reply(2 * SPF + 700, 8 * SPF);
        for cfg in [
            config(1, true),
            config(0, true),
            config(1, false),
            config(0, false),
        ] {
            let want = trim_whole(&pcm, cfg, SR, SPF);
            for chunk in [SPF, 2 * SPF, 3 * SPF, 8 * SPF] {
                let mut t = LeadingTrim::new(cfg, SR, SPF);
                let mut got = Vec::new();
                for c in pcm.chunks(chunk) {
                    got.extend(t.push(c));
                }
                assert!(got == want, "{cfg:?} chunk {chunk}");
                assert_eq!(t.trimmed() + got.len(), pcm.len());
                assert!(t.is_open());
            }
        }
    }

    #[test]
    fn the_bootstrap_frame_is_dropped_and_audio_starts_at_onset() {
        let pcm = reply(SPF + 480, 4 * SPF);
        let mut t = LeadingTrim::new(config(1, true), SR, SPF);
        assert!(t.push(&pcm[..SPF]).is_empty(), "the bootstrap frame");
        let out = t.push(&pcm[SPF..2 * SPF]);
        // Silence up to 480 samples past the frame: window 0 (0..480) is quiet, window 1
        // (240..720) half loud, which is well above -45 dBFS: audio starts at 240.
        assert_eq!(out.len(), SPF - 240);
        assert!(out == pcm[SPF + 240..2 * SPF]);
    }

    #[test]
    fn a_reply_without_onset_sends_nothing() {
        let pcm = vec![0.0; 5 * SPF];
        let mut t = LeadingTrim::new(config(1, true), SR, SPF);
        for c in pcm.chunks(SPF) {
            assert!(t.push(c).is_empty());
        }
        assert!(!t.is_open());
        assert_eq!(t.trimmed(), pcm.len());
        assert!(trim_whole(&pcm, config(1, true), SR, SPF).is_empty());
    }
}
