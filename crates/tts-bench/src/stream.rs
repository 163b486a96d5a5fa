//! One response stream as the client sees it: raw s16le mono bytes arriving in pieces of
//! any size (a sample may straddle two pieces), decoded incrementally, fed to the
//! project's onset rule ([`tts_engine::OnsetDetector`]: RMS over 20 ms windows, 10 ms hop,
//! above -45 dBFS for two windows in a row) and to simulated immediate [`Playback`].
//!
//! The audible time is when the onset sample *plays*: playback starts with the first
//! sample received, so leading silence the server sends, and any gap before the onset,
//! count towards it.

use std::time::Duration;

use tts_engine::{OnsetDetector, OnsetRule};

use crate::playback::Playback;

/// What a stream showed, in offsets from the moment its request was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSummary {
    pub sample_rate: u32,
    /// First body byte (HTTP) or first binary frame (WebSocket).
    pub first_byte: Option<Duration>,
    /// The first audible sample plays (immediate playback, onset rule).
    pub audible: Option<Duration>,
    /// Index of the onset sample.
    pub onset_sample: Option<u64>,
    pub bytes: u64,
    pub samples: u64,
    pub audio: Duration,
    pub underruns: u32,
    pub underrun_time: Duration,
    pub tolerated_gaps: u32,
    pub tolerated_time: Duration,
    /// The least audio left in the player when later samples arrived.
    pub tightest: Option<Duration>,
    /// When the player first ran dry (an underrun), since the request was sent.
    pub first_underrun: Option<Duration>,
    /// The stream ended in the middle of a sample (an odd byte count).
    pub odd_byte: bool,
}

/// Follows one stream.
#[derive(Debug, Clone)]
pub struct StreamTrace {
    sample_rate: u32,
    tolerance: Duration,
    onset: OnsetDetector,
    playback: Playback,
    /// The first byte of a sample whose second byte has not arrived yet.
    carry: Option<u8>,
    first_byte: Option<Duration>,
    audible: Option<Duration>,
    onset_sample: Option<u64>,
    bytes: u64,
    scratch: Vec<f32>,
}

impl StreamTrace {
    pub fn new(sample_rate: u32, gap_tolerance: Duration) -> Self {
        let sample_rate = sample_rate.max(1);
        Self {
            sample_rate,
            tolerance: gap_tolerance,
            onset: OnsetDetector::new(OnsetRule::default(), sample_rate),
            playback: Playback::new(sample_rate, gap_tolerance),
            carry: None,
            first_byte: None,
            audible: None,
            onset_sample: None,
            bytes: 0,
            scratch: Vec::new(),
        }
    }

    /// Sets the sample rate the server announced; only before any audio arrived.
    pub fn set_sample_rate(&mut self, sample_rate: u32) {
        if self.bytes == 0 && sample_rate != self.sample_rate {
            *self = Self::new(sample_rate, self.tolerance);
        }
    }

    /// Bytes of the stream received at `at` (since the request was sent).
    pub fn push(&mut self, at: Duration, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.first_byte.get_or_insert(at);
        self.bytes += bytes.len() as u64;
        self.scratch.clear();
        let mut rest = bytes;
        if let Some(lo) = self.carry.take() {
            self.scratch.push(sample(lo, rest[0]));
            rest = &rest[1..];
        }
        let mut pairs = rest.chunks_exact(2);
        self.scratch
            .extend(pairs.by_ref().map(|p| sample(p[0], p[1])));
        self.carry = pairs.remainder().first().copied();
        self.playback.push(at, self.scratch.len() as u64);
        if let Some(onset) = self.onset.push(&self.scratch) {
            let onset = onset as u64;
            self.onset_sample = Some(onset);
            self.audible = self.playback.play_time(onset);
        }
    }

    pub fn first_byte(&self) -> Option<Duration> {
        self.first_byte
    }

    pub fn summary(&self) -> StreamSummary {
        StreamSummary {
            sample_rate: self.sample_rate,
            first_byte: self.first_byte,
            audible: self.audible,
            onset_sample: self.onset_sample,
            bytes: self.bytes,
            samples: self.playback.received(),
            audio: self.playback.audio(),
            underruns: self.playback.underruns(),
            underrun_time: self.playback.underrun_time(),
            tolerated_gaps: self.playback.tolerated(),
            tolerated_time: self.playback.tolerated_time(),
            tightest: self.playback.tightest(),
            first_underrun: self.playback.first_underrun(),
            odd_byte: self.carry.is_some(),
        }
    }
}

/// One s16le sample as f32 in [-1, 1).
fn sample(lo: u8, hi: u8) -> f32 {
    i16::from_le_bytes([lo, hi]) as f32 / 32768.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const SR: u32 = 24_000;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    /// `silence` samples of zeros, then a loud tone, as s16le bytes.
    fn pcm(silence: usize, total: usize) -> (Vec<f32>, Vec<u8>) {
        let f: Vec<f32> = (0..total)
            .map(|i| {
                if i < silence {
                    0.0
                } else {
                    0.3 * (i as f32 * 0.05).sin()
                }
            })
            .collect();
        let bytes = f
            .iter()
            .flat_map(|&x| ((x * 32767.0) as i16).to_le_bytes())
            .collect();
        (f, bytes)
    }

    #[test]
    fn audible_time_is_when_the_onset_sample_plays() {
        // 100 ms of silence, then tone; all of it arrives at 50 ms.
        let (f, bytes) = pcm(2400, 9600);
        let expected = tts_engine::onset::find_onset(&f, OnsetRule::default(), SR).unwrap();
        let mut t = StreamTrace::new(SR, Duration::ZERO);
        t.push(ms(50), &bytes);
        let s = t.summary();
        assert_eq!(s.onset_sample, Some(expected as u64));
        assert_eq!(s.first_byte, Some(ms(50)));
        // Window 9 (2160..2640) is the first loud one: 90 ms after playback starts.
        assert_eq!(expected, 2160);
        assert_eq!(s.audible, Some(ms(140)));
        assert_eq!((s.samples, s.audio, s.underruns), (9600, ms(400), 0));
    }

    #[test]
    fn pieces_split_inside_samples_give_the_same_stream() {
        let (_, bytes) = pcm(2400, 9600);
        let mut whole = StreamTrace::new(SR, Duration::ZERO);
        whole.push(ms(10), &bytes);
        for piece in [1, 3, 7, 241, 480, 4801] {
            let mut t = StreamTrace::new(SR, Duration::ZERO);
            for c in bytes.chunks(piece) {
                t.push(ms(10), c);
            }
            let s = t.summary();
            assert_eq!(s, whole.summary(), "piece {piece}");
        }
        let mut t = StreamTrace::new(SR, Duration::ZERO);
        t.push(ms(1), &bytes[..5]);
        assert!(t.summary().odd_byte);
        assert_eq!(t.summary().samples, 2);
    }

    #[test]
    fn a_gap_before_the_onset_delays_the_audible_time() {
        let (_, bytes) = pcm(2400, 9600);
        let mut t = StreamTrace::new(SR, Duration::ZERO);
        // 40 ms (960 samples) of silence at 20 ms, plays until 60 ms; the rest at 100 ms.
        t.push(ms(20), &bytes[..1920]);
        t.push(ms(100), &bytes[1920..]);
        let s = t.summary();
        assert_eq!(s.first_byte, Some(ms(20)));
        assert_eq!((s.underruns, s.underrun_time), (1, ms(40)));
        assert_eq!((s.tightest, s.first_underrun), (Some(ms(0)), Some(ms(60))));
        // Onset 2160 is 1200 samples (50 ms) into the second segment.
        assert_eq!(s.audible, Some(ms(150)));
    }

    #[test]
    fn silence_has_no_audible_time_and_the_announced_rate_is_used() {
        let mut t = StreamTrace::new(SR, Duration::ZERO);
        t.set_sample_rate(16_000);
        t.push(ms(5), &vec![0u8; 32_000]);
        let s = t.summary();
        assert_eq!(s.audible, None);
        assert_eq!(s.audio, Duration::from_secs(1));
        assert_eq!(s.sample_rate, 16_000);
    }
}
