//! Load statistics: percentiles, what a client observed per request (time to first
//! audio and to the first audible sample, playback gaps), and the report a load run
//! prints. Shared by the real-engine load generator and the simulator.

use std::fmt;
use std::time::Duration;

use crate::core::StepRecord;
use crate::onset::{OnsetDetector, OnsetRule};
use crate::playback::Playback;
use crate::request::Event;
use crate::scheduler::{Reason, Stage};

/// Percentiles of a set of durations (nearest rank).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub mean: Duration,
}

impl Summary {
    pub fn of(values: &[Duration]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort();
        let total: Duration = v.iter().sum();
        Some(Self {
            count: v.len(),
            p50: percentile(&v, 0.50),
            p95: percentile(&v, 0.95),
            p99: percentile(&v, 0.99),
            max: v[v.len() - 1],
            mean: total / v.len() as u32,
        })
    }
}

/// The `q` quantile of sorted values by nearest rank.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "p50 {:7.1} ms  p95 {:7.1} ms  p99 {:7.1} ms  max {:7.1} ms  (n={})",
            ms(self.p50),
            ms(self.p95),
            ms(self.p99),
            ms(self.max),
            self.count
        )
    }
}

/// How a request ended, as its client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    Failed,
    /// Refused at submission (queue full).
    Rejected,
    /// Still running when the run ended.
    Unfinished,
}

/// What one client observed.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub chars: usize,
    pub outcome: Outcome,
    /// Engine-measured submission to first audio.
    pub server_ttfa: Option<Duration>,
    /// Submission to the first audio chunk received.
    pub first_chunk: Option<Duration>,
    /// Submission to the first audible sample playing (immediate playback, onset rule).
    pub audible: Option<Duration>,
    /// Submission to the last event.
    pub end_to_end: Option<Duration>,
    pub underruns: u32,
    pub gaps: Duration,
    pub audio: Duration,
    /// The least audio left in the client's buffer when a later chunk arrived.
    pub tightest: Option<Duration>,
}

/// Follows one request's events on the client side.
#[derive(Debug, Clone)]
pub struct ClientTrace {
    submitted: Duration,
    sample_rate: u32,
    playback: Playback,
    onset: OnsetDetector,
    received: usize,
    /// (first sample index, when it plays) of every chunk.
    chunk_starts: Vec<(usize, Duration)>,
    record: RequestRecord,
}

impl ClientTrace {
    pub fn new(submitted: Duration, sample_rate: u32, chars: usize) -> Self {
        Self {
            submitted,
            sample_rate,
            playback: Playback::new(),
            onset: OnsetDetector::new(OnsetRule::default(), sample_rate),
            received: 0,
            chunk_starts: Vec::new(),
            record: RequestRecord {
                chars,
                outcome: Outcome::Unfinished,
                server_ttfa: None,
                first_chunk: None,
                audible: None,
                end_to_end: None,
                underruns: 0,
                gaps: Duration::ZERO,
                audio: Duration::ZERO,
                tightest: None,
            },
        }
    }

    /// A request refused at submission.
    pub fn rejected(chars: usize) -> RequestRecord {
        let mut t = Self::new(Duration::ZERO, 1, chars);
        t.record.outcome = Outcome::Rejected;
        t.record
    }

    /// An event received at `at` (same clock as `submitted`).
    pub fn on_event(&mut self, at: Duration, event: &Event) {
        let since = at.saturating_sub(self.submitted);
        match event {
            Event::Started(_) => {}
            Event::Audio(pcm) => {
                let plays_at = self.playback.runs_dry_at().map_or(at, |d| d.max(at));
                let audio = Duration::from_secs_f64(pcm.len() as f64 / self.sample_rate as f64);
                self.playback.push(at, audio);
                self.record.first_chunk.get_or_insert(since);
                self.chunk_starts.push((self.received, plays_at));
                self.received += pcm.len();
                if let Some(onset) = self.onset.push(pcm) {
                    self.record.audible = self
                        .play_time(onset)
                        .map(|t| t.saturating_sub(self.submitted));
                }
            }
            Event::Done(usage) => {
                self.record.outcome = Outcome::Done;
                self.record.server_ttfa = usage.time_to_first_audio;
                self.record.end_to_end = Some(since);
            }
            Event::Failed(_) => {
                self.record.outcome = Outcome::Failed;
                self.record.end_to_end = Some(since);
            }
        }
    }

    /// When sample `index` plays.
    fn play_time(&self, index: usize) -> Option<Duration> {
        let &(first, start) = self.chunk_starts.iter().rev().find(|(i, _)| *i <= index)?;
        Some(start + Duration::from_secs_f64((index - first) as f64 / self.sample_rate as f64))
    }

    pub fn finish(mut self) -> RequestRecord {
        self.record.underruns = self.playback.underruns();
        self.record.gaps = self.playback.gaps();
        self.record.audio = self.playback.audio();
        self.record.tightest = self.playback.tightest();
        self.record
    }
}

/// One duration of a request record, when it has it.
type Metric = fn(&RequestRecord) -> Option<Duration>;

/// The result of a load run.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub title: String,
    /// From the first arrival to the last completion.
    pub wall: Duration,
    pub records: Vec<RequestRecord>,
    /// Backend calls per stage (the simulator records them; empty for a real engine,
    /// whose stage statistics are on `/metrics`).
    pub stages: Vec<StageUse>,
}

/// How much one stage ran during a load run.
#[derive(Debug, Clone, PartialEq)]
pub struct StageUse {
    pub stage: Stage,
    pub calls: usize,
    /// Rows over all calls.
    pub rows: usize,
    /// Time the backend spent in the stage's calls.
    pub busy: Duration,
    /// Calls by the scheduler's reason: urgent, first audio, lead, round robin.
    pub by_reason: [usize; 4],
}

impl StageUse {
    /// Per-stage totals of `steps` (stages that never ran are left out). A call that ran
    /// two stages counts for both, with its whole time, as on `/metrics`.
    pub fn of(steps: &[StepRecord]) -> Vec<StageUse> {
        Stage::ALL
            .iter()
            .filter_map(|&stage| {
                let mine: Vec<&StepRecord> = steps
                    .iter()
                    .filter(|s| s.stage == stage || s.partner_stage == Some(stage))
                    .collect();
                let rows = |s: &StepRecord| {
                    if s.stage == stage {
                        s.rows.len()
                    } else {
                        s.partner_rows.len()
                    }
                };
                (!mine.is_empty()).then(|| StageUse {
                    stage,
                    calls: mine.len(),
                    rows: mine.iter().map(|s| rows(s)).sum(),
                    busy: mine.iter().map(|s| s.ended.saturating_sub(s.started)).sum(),
                    by_reason: [
                        Reason::Urgent,
                        Reason::FirstAudio,
                        Reason::Lead,
                        Reason::RoundRobin,
                    ]
                    .map(|r| mine.iter().filter(|s| s.reason == r).count()),
                })
            })
            .collect()
    }
}

impl fmt::Display for StageUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let calls = self.calls.max(1) as f64;
        write!(
            f,
            "{:<15} {:>7} calls x {:>5.1} rows, {:>6.2} ms each, {:>7.2} s busy \
             (urgent {}, first audio {}, lead {}, round robin {})",
            self.stage.name(),
            self.calls,
            self.rows as f64 / calls,
            self.busy.as_secs_f64() * 1e3 / calls,
            self.busy.as_secs_f64(),
            self.by_reason[0],
            self.by_reason[1],
            self.by_reason[2],
            self.by_reason[3],
        )
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |o: Outcome| self.records.iter().filter(|r| r.outcome == o).count();
        let done: Vec<&RequestRecord> = self
            .records
            .iter()
            .filter(|r| r.outcome == Outcome::Done)
            .collect();
        let pick = |g: Metric| -> Vec<Duration> { done.iter().filter_map(|r| g(r)).collect() };
        writeln!(f, "{}", self.title)?;
        writeln!(
            f,
            "requests: {} done, {} failed, {} rejected, {} unfinished; wall {:.2} s",
            done.len(),
            count(Outcome::Failed),
            count(Outcome::Rejected),
            count(Outcome::Unfinished),
            self.wall.as_secs_f64()
        )?;
        let lines: [(&str, Metric); 4] = [
            ("TTFA (server)     ", |r| r.server_ttfa),
            ("TTFA (first chunk)", |r| r.first_chunk),
            ("TTFA (audible)    ", |r| r.audible),
            ("end to end        ", |r| r.end_to_end),
        ];
        for (name, g) in lines {
            match Summary::of(&pick(g)) {
                Some(s) => writeln!(f, "{name}  {s}")?,
                None => writeln!(f, "{name}  -")?,
            }
        }
        let underruns: u32 = done.iter().map(|r| r.underruns).sum();
        let with_gaps = done.iter().filter(|r| r.underruns > 0).count();
        let gaps: Duration = done.iter().map(|r| r.gaps).sum();
        writeln!(
            f,
            "underruns: {underruns} gaps in {with_gaps} of {} streams, {:.1} ms in total",
            done.len(),
            gaps.as_secs_f64() * 1e3
        )?;
        let mut tightest = pick(|r| r.tightest);
        tightest.sort();
        if !tightest.is_empty() {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            writeln!(
                f,
                "tightest buffer at a chunk's arrival, per stream: min {:.1} ms, p0.1 {:.1} ms, \
                 p1 {:.1} ms, p50 {:.1} ms",
                ms(tightest[0]),
                ms(percentile(&tightest, 0.001)),
                ms(percentile(&tightest, 0.01)),
                ms(percentile(&tightest, 0.5)),
            )?;
        }
        let wall = self.wall.as_secs_f64().max(1e-9);
        let chars: usize = done.iter().map(|r| r.chars).sum();
        let audio: f64 = done.iter().map(|r| r.audio.as_secs_f64()).sum();
        write!(
            f,
            "throughput: {:.1} chars/s, {:.2} s of audio per second ({:.1} s of audio)",
            chars as f64 / wall,
            audio / wall,
            audio
        )?;
        for s in &self.stages {
            write!(f, "\n{s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{EndReason, Usage};

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(ms).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!(
            (s.p50, s.p95, s.p99, s.max),
            (ms(50), ms(95), ms(99), ms(100))
        );
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[ms(7)]).unwrap().p99, ms(7));
    }

    #[test]
    fn audible_time_follows_the_onset_in_played_audio() {
        let sr = 24_000;
        let mut t = ClientTrace::new(ms(1000), sr, 10);
        // 40 ms of silence then tone, in one chunk arriving at 1100 ms.
        let mut pcm = vec![0.0f32; 960];
        pcm.extend((0..3840).map(|i| 0.3 * (i as f32 * 0.05).sin()));
        t.on_event(ms(1100), &Event::Audio(pcm));
        t.on_event(
            ms(1400),
            &Event::Done(Usage {
                frames: 3,
                text_tokens: 2,
                audio_seconds: 0.2,
                trimmed_seconds: 0.0,
                end: EndReason::FrameLimit,
                queue_wait: Duration::ZERO,
                time_to_first_audio: Some(ms(95)),
                underruns: 0,
            }),
        );
        let r = t.finish();
        assert_eq!(r.first_chunk, Some(ms(100)));
        // Window 3 (30..50 ms) is the first loud one: audible at 100 + 30 ms.
        assert_eq!(r.audible, Some(ms(130)));
        assert_eq!(r.server_ttfa, Some(ms(95)));
        assert_eq!(r.outcome, Outcome::Done);
    }

    #[test]
    fn stage_use_totals_calls_rows_time_and_reasons() {
        use crate::request::RequestId;
        let step = |stage, rows: u64, reason, start: u64, end: u64| StepRecord {
            stage,
            rows: (0..rows).map(RequestId).collect(),
            partner_stage: None,
            partner_rows: Vec::new(),
            reason,
            started: ms(start),
            ended: ms(end),
            failed: Vec::new(),
        };
        let steps = [
            step(Stage::CodePredictor, 3, Reason::FirstAudio, 0, 3),
            step(Stage::Codec, 1, Reason::Urgent, 3, 4),
            step(Stage::CodePredictor, 5, Reason::RoundRobin, 4, 8),
        ];
        let used = StageUse::of(&steps);
        assert_eq!(used.len(), 2, "stages that never ran are left out");
        assert_eq!(
            used[0],
            StageUse {
                stage: Stage::CodePredictor,
                calls: 2,
                rows: 8,
                busy: ms(7),
                by_reason: [0, 1, 0, 1],
            }
        );
        assert_eq!(
            (used[1].stage, used[1].by_reason),
            (Stage::Codec, [1, 0, 0, 0])
        );
        assert!(used[0].to_string().contains("2 calls x   4.0 rows"));
        // A merged call counts for both its stages, each with its own rows.
        let merged = StepRecord {
            partner_stage: Some(Stage::TalkerStep),
            partner_rows: (10..17).map(RequestId).collect(),
            ..step(Stage::Prefill, 2, Reason::FirstAudio, 8, 11)
        };
        let used = StageUse::of(&[merged]);
        let summary: Vec<_> = used
            .iter()
            .map(|u| (u.stage, u.calls, u.rows, u.busy))
            .collect();
        assert_eq!(
            summary,
            [
                (Stage::Prefill, 1, 2, ms(3)),
                (Stage::TalkerStep, 1, 7, ms(3))
            ]
        );
    }
}
