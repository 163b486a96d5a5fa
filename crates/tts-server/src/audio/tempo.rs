//! Speaking rate (`speed`) by time-scale modification: WSOLA (waveform-similarity
//! overlap-add), streaming. The pitch stays; the duration is divided by the speed.
//!
//! Output frames of `WINDOW` samples (Hann, half overlapping) are placed every `HOP`
//! samples; frame k is cut from the input near `k · HOP · speed`, shifted by up to
//! `TOLERANCE` samples to where it best continues the frame before it (the largest
//! cross-correlation with the input that followed that frame), so the overlap adds
//! waveforms in phase. Audio goes out once no later frame can touch it: a stream is held
//! back by about one window plus the tolerance (~40 ms at 24 kHz).

/// Window length at 24 kHz (30 ms), scaled with the sample rate.
const WINDOW_24K: usize = 720;
/// Search tolerance at 24 kHz (7.5 ms).
const TOLERANCE_24K: usize = 180;

/// The speeds accepted (OpenAI's `speed` range).
pub const SPEED_RANGE: std::ops::RangeInclusive<f32> = 0.25..=4.0;

/// One stream's time-scale modification.
pub struct Tempo {
    speed: f64,
    window: Vec<f32>,
    hop: usize,
    tolerance: usize,
    /// Input samples from global index `base` on.
    input: Vec<f32>,
    base: usize,
    /// Input samples received in all.
    received: usize,
    /// Where the last frame was cut from (global input index), once one was.
    last: Option<usize>,
    /// Frames placed so far.
    frames: usize,
    /// Overlap-add accumulator: output samples from global index `out_base` on.
    acc: Vec<f32>,
    out_base: usize,
    /// Output samples returned so far.
    emitted: usize,
    finished: bool,
}

impl Tempo {
    /// A stretcher for `speed` (within [`SPEED_RANGE`], clamped) at `sample_rate` Hz.
    pub fn new(speed: f32, sample_rate: u32) -> Self {
        let scale = |n: usize| (n as f64 * f64::from(sample_rate) / 24_000.0).round() as usize;
        let window_len = scale(WINDOW_24K).max(8) & !1;
        let hop = window_len / 2;
        // periodic Hann: two frames half a window apart sum to one
        let window = (0..window_len)
            .map(|n| {
                let x = std::f64::consts::TAU * n as f64 / window_len as f64;
                (0.5 - 0.5 * x.cos()) as f32
            })
            .collect();
        Self {
            speed: f64::from(speed.clamp(*SPEED_RANGE.start(), *SPEED_RANGE.end())),
            window,
            hop,
            tolerance: scale(TOLERANCE_24K).max(1),
            input: Vec::new(),
            base: 0,
            received: 0,
            last: None,
            frames: 0,
            acc: Vec::new(),
            out_base: 0,
            emitted: 0,
            finished: false,
        }
    }

    /// Takes the next samples; returns the output samples now final.
    pub fn push(&mut self, pcm: &[f32]) -> Vec<f32> {
        if self.finished {
            return Vec::new();
        }
        self.input.extend_from_slice(pcm);
        self.received += pcm.len();
        self.run(false)
    }

    /// Ends the stream: the rest of the output, `round(input / speed)` samples in all.
    pub fn finish(&mut self) -> Vec<f32> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        let mut out = self.run(true);
        let want = self.total_out().saturating_sub(self.emitted);
        let ready = self.acc.len().min(want);
        out.extend_from_slice(&self.acc[..ready]);
        out.resize(out.len() + (want - ready), 0.0);
        self.emitted += want;
        out
    }

    /// Places every frame the input allows (at the end, every frame up to the output's
    /// length, the input read as zeros past its end); returns the samples now final.
    fn run(&mut self, at_end: bool) -> Vec<f32> {
        let w = self.window.len();
        let total_out = self.total_out();
        loop {
            let k = self.frames;
            let out_at = k * self.hop;
            if at_end && out_at >= total_out + self.hop {
                break;
            }
            let nominal = self.nominal(k);
            // the input this frame may read: its candidates and the natural continuation
            let needs = nominal + self.tolerance + w;
            if !at_end && needs > self.received {
                break;
            }
            let at = self.best_position(nominal);
            self.add_frame(at, out_at);
            self.last = Some(at);
            self.frames += 1;
            self.drop_consumed();
        }
        // output before the next frame's start is final; none past the input's duration
        // so far (a frame may stand for more input than it read: past speed 2 frames skip)
        let heard = (self.received as f64 / self.speed).floor() as usize;
        let final_to = (self.frames * self.hop).min(heard);
        let n = final_to.saturating_sub(self.out_base).min(self.acc.len());
        let out: Vec<f32> = self.acc.drain(..n).collect();
        self.out_base += n;
        self.emitted += out.len();
        out
    }

    /// The output's length for the input received so far (its final length at the end).
    fn total_out(&self) -> usize {
        (self.received as f64 / self.speed).round() as usize
    }

    /// Where frame `k` would be cut from the input without the search (global index).
    fn nominal(&self, k: usize) -> usize {
        ((k * self.hop) as f64 * self.speed).round() as usize
    }

    /// Input samples `start..start + len` (global indices), zero outside what was received.
    fn span(&self, start: usize, len: usize) -> Vec<f32> {
        let mut out = vec![0.0; len];
        let from = start.max(self.base);
        let to = (start + len).min(self.base + self.input.len());
        if from < to {
            out[from - start..to - start]
                .copy_from_slice(&self.input[from - self.base..to - self.base]);
        }
        out
    }

    /// Where to cut the frame whose nominal input position is `nominal`: within the
    /// tolerance, the start whose overlap best matches how the last frame's input went on.
    fn best_position(&self, nominal: usize) -> usize {
        let Some(last) = self.last else {
            return nominal;
        };
        let overlap = self.window.len() - self.hop;
        let natural = self.span(last + self.hop, overlap);
        let lo = nominal.saturating_sub(self.tolerance).max(self.base);
        let hi = nominal + self.tolerance;
        let region = self.span(lo, hi - lo + overlap);
        let mut best = (f32::NEG_INFINITY, lo);
        for (i, cand) in region.windows(overlap).enumerate() {
            let score: f32 = cand.iter().zip(&natural).map(|(a, b)| a * b).sum();
            if score > best.0 {
                best = (score, lo + i);
            }
        }
        best.1
    }

    /// Overlap-adds the windowed input from `at` at output position `out_at`; the first
    /// frame's rising half is not windowed (nothing comes before it).
    fn add_frame(&mut self, at: usize, out_at: usize) {
        let w = self.window.len();
        let end = out_at + w - self.out_base;
        if self.acc.len() < end {
            self.acc.resize(end, 0.0);
        }
        let frame = self.span(at, w);
        let out = &mut self.acc[out_at - self.out_base..end];
        for (n, (o, x)) in out.iter_mut().zip(frame).enumerate() {
            let g = if self.frames == 0 && n < self.hop {
                1.0
            } else {
                self.window[n]
            };
            *o += g * x;
        }
    }

    /// Forgets input no later frame can read (the next candidates and the continuation of
    /// the last frame all start later).
    fn drop_consumed(&mut self) {
        let keep_from = self
            .nominal(self.frames)
            .saturating_sub(self.tolerance)
            .min(self.last.map_or(0, |l| l + self.hop));
        let n = keep_from.saturating_sub(self.base).min(self.input.len());
        self.input.drain(..n);
        self.base += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SR: u32 = 24_000;

    fn sine(freq: f32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| 0.5 * (std::f32::consts::TAU * freq * i as f32 / SR as f32).sin())
            .collect()
    }

    fn stretch(speed: f32, input: &[f32], chunk: usize) -> Vec<f32> {
        let mut t = Tempo::new(speed, SR);
        let mut out = Vec::new();
        for c in input.chunks(chunk.max(1)) {
            out.extend(t.push(c));
        }
        out.extend(t.finish());
        out
    }

    /// Rising zero crossings per second over `x` (the frequency of a sine).
    fn frequency(x: &[f32]) -> f32 {
        let ups = x.windows(2).filter(|p| p[0] < 0.0 && p[1] >= 0.0).count();
        ups as f32 * SR as f32 / x.len() as f32
    }

    fn rms(x: &[f32]) -> f32 {
        (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt()
    }

    #[test]
    fn the_duration_is_divided_by_the_speed() {
        let input = sine(220.0, 2 * SR as usize);
        for speed in [0.25f32, 0.5, 0.8, 1.25, 1.5, 2.0, 4.0] {
            let out = stretch(speed, &input, 1920);
            let want = (input.len() as f64 / f64::from(speed)).round() as usize;
            assert_eq!(out.len(), want, "speed {speed}");
        }
    }

    #[test]
    fn the_pitch_and_loudness_stay() {
        let input = sine(220.0, 2 * SR as usize);
        for speed in [0.5f32, 0.75, 1.5, 2.0] {
            let out = stretch(speed, &input, 1920);
            // away from the ends
            let mid = &out[out.len() / 4..3 * out.len() / 4];
            let f = frequency(mid);
            assert!((f - 220.0).abs() < 4.0, "speed {speed}: {f} Hz");
            let r = rms(mid) / rms(&input);
            assert!((0.9..1.1).contains(&r), "speed {speed}: rms ratio {r}");
        }
    }

    #[test]
    fn the_output_does_not_depend_on_the_chunking() {
        let input: Vec<f32> = sine(180.0, SR as usize)
            .iter()
            .zip(sine(310.0, SR as usize))
            .map(|(a, b)| a + 0.5 * b)
            .collect();
        for speed in [0.7f32, 1.3] {
            let whole = stretch(speed, &input, input.len());
            for chunk in [1, 333, 1920, 7000] {
                assert_eq!(
                    stretch(speed, &input, chunk),
                    whole,
                    "speed {speed}, chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn output_starts_after_about_one_window() {
        let mut t = Tempo::new(1.5, SR);
        let first = t.push(&sine(200.0, 1920));
        assert!(!first.is_empty(), "one 80 ms frame in gives audio out");
        let held = (1920.0 / 1.5) as usize - first.len();
        assert!(held <= WINDOW_24K + TOLERANCE_24K, "{held} samples held");
    }

    #[test]
    fn silence_stays_silent_and_the_start_is_not_faded() {
        let out = stretch(1.5, &vec![0.0; 10_000], 1920);
        assert!(out.iter().all(|&v| v == 0.0));
        let input = vec![0.25f32; 4000];
        let out = stretch(1.25, &input, 1920);
        assert!((out[0] - 0.25).abs() < 1e-6 && (out[100] - 0.25).abs() < 1e-6);
    }

    #[test]
    fn the_speed_is_held_to_its_range() {
        let input = sine(220.0, SR as usize);
        assert_eq!(stretch(10.0, &input, 1920).len(), input.len() / 4);
        assert_eq!(stretch(0.01, &input, 1920).len(), input.len() * 4);
    }
}
