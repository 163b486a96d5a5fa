//! Simulated immediate playback of one stream, sample by sample.
//!
//! Playback starts the moment the first sample arrives and plays continuously: sample `s`
//! of a segment that started playing at `t0` with sample `s0` is due at
//! `t0 + (s - s0) / sample_rate`. Audio that arrives after it was due leaves a gap: the
//! player ran dry, and resumes with the late samples when they arrive (a new segment
//! starts there; later samples are due relative to it). A gap longer than the tolerance is
//! an underrun; a shorter one is tolerated (reported apart) but still delays the rest,
//! since a sample cannot play before it arrives.
//!
//! Times are offsets from the moment the request was sent; sample counts are integers, so
//! due times are exact (no drift from summing chunk durations).

use std::time::Duration;

/// One play-out gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// When the player ran dry.
    pub at: Duration,
    pub length: Duration,
    /// Longer than the tolerance: an underrun.
    pub underrun: bool,
}

/// The playback state of one stream.
#[derive(Debug, Clone)]
pub struct Playback {
    sample_rate: u32,
    tolerance: Duration,
    /// (first sample, when it plays) of each continuous segment; a new one after each gap.
    segments: Vec<(u64, Duration)>,
    received: u64,
    underruns: u32,
    underrun_time: Duration,
    tolerated: u32,
    tolerated_time: Duration,
    /// When the latest samples arrived.
    last_arrival: Option<Duration>,
    /// The least audio left to play when samples arrived later than the previous ones.
    tightest: Option<Duration>,
    /// When the player first ran dry for longer than the tolerance.
    first_underrun: Option<Duration>,
}

impl Playback {
    pub fn new(sample_rate: u32, tolerance: Duration) -> Self {
        Self {
            sample_rate: sample_rate.max(1),
            tolerance,
            segments: Vec::new(),
            received: 0,
            underruns: 0,
            underrun_time: Duration::ZERO,
            tolerated: 0,
            tolerated_time: Duration::ZERO,
            last_arrival: None,
            tightest: None,
            first_underrun: None,
        }
    }

    /// Length of `samples` samples.
    pub fn samples_to_duration(&self, samples: u64) -> Duration {
        let nanos = samples as u128 * 1_000_000_000 / self.sample_rate as u128;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// `samples` new samples arrive at `at`; returns the gap their arrival ends, if the
    /// player had run dry.
    pub fn push(&mut self, at: Duration, samples: u64) -> Option<Gap> {
        if samples == 0 {
            return None;
        }
        let mut gap = None;
        let due = self.runs_dry_at();
        if let Some(due) = due.filter(|_| self.last_arrival.is_some_and(|t| at > t)) {
            let left = due.saturating_sub(at);
            self.tightest = Some(self.tightest.map_or(left, |t| t.min(left)));
        }
        self.last_arrival = Some(at);
        match due {
            None => self.segments.push((self.received, at)),
            Some(due) if at > due => {
                let length = at - due;
                let underrun = length > self.tolerance;
                if underrun {
                    self.underruns += 1;
                    self.underrun_time += length;
                    self.first_underrun.get_or_insert(due);
                } else {
                    self.tolerated += 1;
                    self.tolerated_time += length;
                }
                self.segments.push((self.received, at));
                gap = Some(Gap {
                    at: due,
                    length,
                    underrun,
                });
            }
            Some(_) => {}
        }
        self.received += samples;
        gap
    }

    /// When the first sample played.
    pub fn started(&self) -> Option<Duration> {
        self.segments.first().map(|&(_, t)| t)
    }

    /// When everything received so far has played (the next sample's due time).
    pub fn runs_dry_at(&self) -> Option<Duration> {
        let &(first, t) = self.segments.last()?;
        Some(t + self.samples_to_duration(self.received - first))
    }

    /// When sample `index` (already received) plays.
    pub fn play_time(&self, index: u64) -> Option<Duration> {
        if index >= self.received {
            return None;
        }
        let &(first, t) = self.segments.iter().rev().find(|(s, _)| *s <= index)?;
        Some(t + self.samples_to_duration(index - first))
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// Audio received so far.
    pub fn audio(&self) -> Duration {
        self.samples_to_duration(self.received)
    }

    /// Gaps longer than the tolerance.
    pub fn underruns(&self) -> u32 {
        self.underruns
    }

    /// Total length of the underruns.
    pub fn underrun_time(&self) -> Duration {
        self.underrun_time
    }

    /// Gaps within the tolerance.
    pub fn tolerated(&self) -> u32 {
        self.tolerated
    }

    pub fn tolerated_time(&self) -> Duration {
        self.tolerated_time
    }

    /// The least audio the player still had when samples arrived later than the ones
    /// before them (zero after a gap; `None` while everything came at once): how near
    /// the stream came to a gap.
    pub fn tightest(&self) -> Option<Duration> {
        self.tightest
    }

    /// When the player first ran dry for longer than the tolerance.
    pub fn first_underrun(&self) -> Option<Duration> {
        self.first_underrun
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    /// Samples in `x` ms at 24 kHz.
    fn smp(x: u64) -> u64 {
        x * 24
    }

    #[test]
    fn exact_gaps_on_a_synthetic_trace() {
        let mut p = Playback::new(24_000, Duration::ZERO);
        assert_eq!(p.runs_dry_at(), None);
        // 80 ms at 100 ms: plays 100..180.
        assert_eq!(p.push(ms(100), smp(80)), None);
        assert_eq!(p.runs_dry_at(), Some(ms(180)));
        assert_eq!(p.tightest(), None, "one arrival: nothing to compare");
        // 160 ms at 150 ms, in time: plays 180..340.
        assert_eq!(p.push(ms(150), smp(160)), None);
        assert_eq!(p.tightest(), Some(ms(30)));
        assert_eq!(p.runs_dry_at(), Some(ms(340)));
        // Exactly on time is not a gap.
        assert_eq!(p.push(ms(340), smp(20)), None);
        // 80 ms arriving at 400 ms: dry from 360 to 400.
        assert_eq!(
            p.push(ms(400), smp(80)),
            Some(Gap {
                at: ms(360),
                length: ms(40),
                underrun: true
            })
        );
        assert_eq!(p.runs_dry_at(), Some(ms(480)));
        assert_eq!(p.tightest(), Some(Duration::ZERO), "a gap leaves nothing");
        assert_eq!(p.first_underrun(), Some(ms(360)));
        // Another gap of 20 ms.
        assert!(p.push(ms(500), smp(10)).is_some());
        assert_eq!(p.underruns(), 2);
        assert_eq!(p.underrun_time(), ms(60));
        assert_eq!(p.audio(), ms(350));
        assert_eq!(p.started(), Some(ms(100)));
        // Play times follow the segments.
        assert_eq!(p.play_time(0), Some(ms(100)));
        assert_eq!(p.play_time(smp(260) - 24), Some(ms(359)));
        assert_eq!(p.play_time(smp(260)), Some(ms(400)));
        assert_eq!(p.play_time(smp(260) + 24), Some(ms(401)));
        assert_eq!(p.play_time(smp(340)), Some(ms(500)));
        assert_eq!(p.play_time(smp(350)), None, "not received yet");
    }

    #[test]
    fn short_gaps_within_the_tolerance_are_tolerated_but_still_delay_playback() {
        let mut p = Playback::new(24_000, ms(1));
        p.push(ms(0), smp(10));
        let g = p.push(ms(11), smp(10)).unwrap();
        assert!(!g.underrun);
        assert_eq!(g.length, ms(1));
        assert_eq!(p.runs_dry_at(), Some(ms(21)));
        let g = p.push(ms(25), smp(10)).unwrap();
        assert!(g.underrun);
        assert_eq!((p.underruns(), p.underrun_time()), (1, ms(4)));
        assert_eq!((p.tolerated(), p.tolerated_time()), (1, ms(1)));
    }

    #[test]
    fn many_small_in_time_chunks_do_not_drift() {
        // 1,000 chunks of one sample each, arriving at the instant each is due.
        let mut p = Playback::new(24_000, Duration::ZERO);
        for i in 0..1000u64 {
            let due = p.runs_dry_at().unwrap_or(Duration::ZERO);
            assert_eq!(p.push(due, 1), None, "chunk {i}");
        }
        assert_eq!(p.underruns(), 0);
        assert_eq!(p.tolerated(), 0);
        assert_eq!(p.samples_to_duration(24_000), Duration::from_secs(1));
    }
}
