//! Simulated immediate playback of one audio stream: playback starts with the first chunk
//! and plays continuously; a chunk that arrives after the buffer ran dry is an underrun
//! (a gap), after which playback resumes with that chunk. The engine uses it for its
//! deadlines and underrun estimate; load generators use it on the client side.

use std::time::Duration;

/// The playback state of one stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Playback {
    started: Option<Duration>,
    /// When the audio received so far will have been played out.
    dry_at: Duration,
    underruns: u32,
    gaps: Duration,
    audio: Duration,
    /// The least audio left in the buffer when a later chunk arrived (zero after a gap).
    tightest: Option<Duration>,
}

impl Playback {
    pub fn new() -> Self {
        Self::default()
    }

    /// A chunk of `audio` arrives at `at`; returns the gap it ends, if the buffer had run dry.
    pub fn push(&mut self, at: Duration, audio: Duration) -> Option<Duration> {
        self.audio += audio;
        if self.started.is_none() {
            self.started = Some(at);
            self.dry_at = at + audio;
            return None;
        }
        let left = self.dry_at.saturating_sub(at);
        self.tightest = Some(self.tightest.map_or(left, |t| t.min(left)));
        if at > self.dry_at {
            let gap = at - self.dry_at;
            self.underruns += 1;
            self.gaps += gap;
            self.dry_at = at + audio;
            Some(gap)
        } else {
            self.dry_at += audio;
            None
        }
    }

    /// When playback started (the first chunk's arrival).
    pub fn started(&self) -> Option<Duration> {
        self.started
    }

    /// When the buffer runs dry if nothing more arrives (after the first chunk).
    pub fn runs_dry_at(&self) -> Option<Duration> {
        self.started.map(|_| self.dry_at)
    }

    pub fn underruns(&self) -> u32 {
        self.underruns
    }

    /// Total length of the gaps.
    pub fn gaps(&self) -> Duration {
        self.gaps
    }

    /// Audio received so far.
    pub fn audio(&self) -> Duration {
        self.audio
    }

    /// The least audio the buffer still held when a later chunk arrived (zero if one came
    /// after a gap; `None` before the second chunk): how near the stream came to a gap.
    pub fn tightest(&self) -> Option<Duration> {
        self.tightest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn gaps_are_counted_when_a_chunk_arrives_after_the_buffer_ran_dry() {
        let mut p = Playback::new();
        assert_eq!(p.runs_dry_at(), None);
        assert_eq!(p.push(ms(100), ms(80)), None);
        assert_eq!(p.tightest(), None, "one chunk: nothing to compare");
        assert_eq!(p.runs_dry_at(), Some(ms(180)));
        assert_eq!(p.push(ms(150), ms(160)), None, "arrived in time");
        assert_eq!(p.tightest(), Some(ms(30)));
        assert_eq!(p.runs_dry_at(), Some(ms(340)));
        assert_eq!(p.push(ms(400), ms(80)), Some(ms(60)));
        assert_eq!(p.runs_dry_at(), Some(ms(480)));
        assert_eq!((p.underruns(), p.gaps(), p.audio()), (1, ms(60), ms(320)));
        assert_eq!(p.tightest(), Some(Duration::ZERO), "a gap leaves nothing");
        assert_eq!(p.started(), Some(ms(100)));
    }
}
