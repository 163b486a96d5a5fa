//! Speech onset: where the first audible sample of a PCM stream is.
//!
//! The rule (DESIGN.md, idea 1): RMS over 20 ms windows with a 10 ms hop; onset is the start
//! of the first window of the first two consecutive windows whose level is above -45 dBFS
//! (RMS relative to full scale 1.0). The engine trims leading PCM with it, and load
//! generators apply the same rule on the client side to time the first audible sample, so
//! it is a small pure state machine fed with PCM in pieces of any size.

/// The onset rule's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OnsetRule {
    /// Window length in seconds.
    pub window_s: f32,
    /// Hop between window starts in seconds.
    pub hop_s: f32,
    /// Level a window's RMS must exceed, in dBFS.
    pub threshold_dbfs: f32,
    /// Consecutive loud windows needed.
    pub windows: usize,
}

impl Default for OnsetRule {
    fn default() -> Self {
        Self {
            window_s: 0.020,
            hop_s: 0.010,
            threshold_dbfs: -45.0,
            windows: 2,
        }
    }
}

/// Finds the onset of one PCM stream fed in pieces.
#[derive(Debug, Clone)]
pub struct OnsetDetector {
    window: usize,
    hop: usize,
    /// Mean-square threshold (the dBFS threshold squared, as a power ratio).
    threshold_ms: f64,
    needed: usize,
    /// Samples from absolute index `buf_start` on that later windows may still need.
    buf: Vec<f32>,
    buf_start: usize,
    /// Absolute index of the next window to evaluate.
    next_window: usize,
    /// Loud windows in a row ending with the last evaluated one.
    run: usize,
    onset: Option<usize>,
}

impl OnsetDetector {
    pub fn new(rule: OnsetRule, sample_rate: u32) -> Self {
        let sr = sample_rate as f32;
        let window = ((rule.window_s * sr).round() as usize).max(1);
        let hop = ((rule.hop_s * sr).round() as usize).max(1);
        let amp = 10f64.powf(rule.threshold_dbfs as f64 / 20.0);
        Self {
            window,
            hop,
            threshold_ms: amp * amp,
            needed: rule.windows.max(1),
            buf: Vec::new(),
            buf_start: 0,
            next_window: 0,
            run: 0,
            onset: None,
        }
    }

    /// Feeds the next samples; returns the onset (absolute sample index from the start of
    /// the stream) the first time it is found, and `None` before and after.
    pub fn push(&mut self, samples: &[f32]) -> Option<usize> {
        if self.onset.is_some() {
            return None;
        }
        self.buf.extend_from_slice(samples);
        let end = self.buf_start + self.buf.len();
        while self.next_window * self.hop + self.window <= end {
            let start = self.next_window * self.hop;
            let w = &self.buf[start - self.buf_start..start - self.buf_start + self.window];
            let mean_square =
                w.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>() / self.window as f64;
            if mean_square > self.threshold_ms {
                self.run += 1;
            } else {
                self.run = 0;
            }
            self.next_window += 1;
            if self.run >= self.needed {
                let onset = (self.next_window - self.needed) * self.hop;
                self.onset = Some(onset);
                self.buf = Vec::new();
                return Some(onset);
            }
        }
        // Keep only what windows not yet ruled out can still need: from the start of the
        // current loud run (a candidate onset), or else from the next window.
        let keep_from = (self.next_window - self.run) * self.hop;
        if keep_from > self.buf_start {
            let drop = (keep_from - self.buf_start).min(self.buf.len());
            self.buf.drain(..drop);
            self.buf_start += drop;
        }
        None
    }

    /// The onset, once found.
    pub fn onset(&self) -> Option<usize> {
        self.onset
    }

    /// The earliest sample that may still turn out to be the onset: every sample before it
    /// is leading silence by the rule, whatever follows.
    pub fn undecided_from(&self) -> usize {
        self.onset
            .unwrap_or((self.next_window - self.run) * self.hop)
    }
}

/// The onset of a whole PCM buffer, if it has one.
pub fn find_onset(pcm: &[f32], rule: OnsetRule, sample_rate: u32) -> Option<usize> {
    OnsetDetector::new(rule, sample_rate).push(pcm)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SR: u32 = 24_000;

    /// `silence` samples of near-silence, then a loud tone.
    fn signal(silence: usize, total: usize) -> Vec<f32> {
        (0..total)
            .map(|i| {
                if i < silence {
                    1e-4 * (i as f32 * 0.7).sin()
                } else {
                    0.3 * (i as f32 * 0.05).sin()
                }
            })
            .collect()
    }

    #[test]
    fn onset_is_the_start_of_the_first_of_two_loud_windows() {
        // 20 ms = 480 samples, hop 240. Loud from sample 1000: window 3 (720..1200) is
        // partly loud; its RMS decides whether it counts.
        let pcm = signal(1000, 4800);
        let onset = find_onset(&pcm, OnsetRule::default(), SR).unwrap();
        assert_eq!(onset % 240, 0);
        assert!((720..=1000).contains(&onset), "onset {onset}");
        // Exactly on a window boundary: windows from 960 are fully loud, and window 3
        // (720..1200) has half its samples loud, well above -45 dBFS.
        assert_eq!(
            find_onset(&signal(960, 4800), OnsetRule::default(), SR),
            Some(720)
        );
    }

    #[test]
    fn silence_and_a_single_loud_window_have_no_onset() {
        assert_eq!(
            find_onset(&vec![0.0; 10_000], OnsetRule::default(), SR),
            None
        );
        // quiet (about -60 dBFS) everywhere
        assert_eq!(
            find_onset(&signal(10_000, 10_000), OnsetRule::default(), SR),
            None
        );
        // A 10-sample click at full scale: RMS 0.144 (-17 dBFS) in each window holding it.
        // Windows start every 240 samples, so samples 2400..2410 lie in windows 9
        // (2160..2640) and 10 (2400..2880): two loud windows in a row, onset at window 9.
        let mut pcm = vec![0.0f32; 4800];
        for x in &mut pcm[2400..2410] {
            *x = 1.0;
        }
        assert_eq!(find_onset(&pcm, OnsetRule::default(), SR), Some(2160));
        // A rule needing three windows rejects it.
        let strict = OnsetRule {
            windows: 3,
            ..OnsetRule::default()
        };
        assert_eq!(find_onset(&pcm, strict, SR), None);
    }

    #[test]
    fn pieces_of_any_size_give_the_same_onset() {
        let pcm = signal(3333, 9000);
        let whole = find_onset(&pcm, OnsetRule::default(), SR);
        assert!(whole.is_some());
        for piece in [1, 7, 239, 240, 241, 480, 1920, 5000] {
            let mut d = OnsetDetector::new(OnsetRule::default(), SR);
            let mut found = None;
            for chunk in pcm.chunks(piece) {
                if let Some(o) = d.push(chunk) {
                    assert!(found.is_none(), "reported twice");
                    found = Some(o);
                }
            }
            assert_eq!(found, whole, "piece size {piece}");
            assert_eq!(d.onset(), whole);
        }
    }

    #[test]
    fn threshold_is_minus_45_dbfs_rms() {
        // A constant level just above and just below -45 dBFS (0.005623).
        let above = vec![0.0057f32; 2000];
        let below = vec![0.0056f32; 2000];
        assert_eq!(find_onset(&above, OnsetRule::default(), SR), Some(0));
        assert_eq!(find_onset(&below, OnsetRule::default(), SR), None);
    }
}
