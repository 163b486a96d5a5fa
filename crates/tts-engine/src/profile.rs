//! Scheduling profiles: the knobs of the scheduler's policy and the chunk schedule, under
//! a name (`latency`, `balanced`, `throughput`) an operator can pick.

use std::time::Duration;

use crate::chunker::ChunkSchedule;
use crate::error::ConfigError;

/// How far a stage's batch is filled with rows that are ready but not urgent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Only the rows the policy chose.
    None,
    /// Up to the smallest bucket that holds the chosen rows: a graph backend pads to that
    /// bucket anyway, so the extra rows cost almost nothing there.
    Bucket,
    /// Up to the largest bucket (most work per call; chosen rows may wait a little longer),
    /// once at least [`Policy::max_fill_from`] rows are ready for the stage; below that,
    /// as `Bucket`.
    Max,
}

/// The scheduler's policy (see `scheduler`).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Codec work for a stream whose client buffer runs dry within this time is urgent.
    pub reserve: Duration,
    /// Such a stream with no frame to decode yet also goes first for the model stage its
    /// next frame needs (ahead of first-audio work), not only for its codec call; the
    /// urgent streams go in deadline order, whichever stage each needs.
    pub urgent_model_stages: bool,
    /// A stream whose buffer runs dry within this time goes ahead of round robin.
    pub lead: Duration,
    /// Batch sizes the backend runs well (CUDA graph buckets), ascending.
    pub buckets: Vec<usize>,
    /// Most prompts in one prefill call (prefill cost grows with each row's prompt).
    pub prefill_max_rows: usize,
    /// Top-ups of talker-step, code-predictor and prefill calls.
    pub fill: Fill,
    /// Top-ups of codec calls.
    pub codec_fill: Fill,
    /// Most frames one codec call decodes, over all its rows (a row with more frames
    /// pending is decoded in parts). A codec call's time grows with its frames (H200:
    /// ~70 µs each above ~1.2 ms), and nothing else runs meanwhile: unbounded, a call
    /// over streams that ran far ahead took 25-75 ms at 40 req/s and starved the
    /// streams waiting for their second chunk.
    pub codec_max_frames: usize,
    /// Rows that must be ready for a stage before `Fill::Max` takes them all: under light
    /// load a GPU has time to spare, and a first-audio call is quicker without passengers
    /// (small batches cost ~0.15 ms more per row on the H200; large ones ~0.02 ms).
    pub max_fill_from: usize,
    /// Codec-ready rows from which a codec call's top-ups may be longer than its longest
    /// chosen row: then any chunk that still fits `codec_max_frames` joins (those that
    /// do not are passed over). Below it they may not, so a first-audio call of a
    /// 2-frame chunk carries no 12-frame passengers. A call's time grows with its frames,
    /// but each also has a fixed cost (~1 ms on the H200) and holds up the model stages:
    /// under deep load fewer, larger calls pay both less often.
    /// Balanced: 64. On the H200 it moved the highest rate with audible TTFA p95 under
    /// 50 ms from 80 to 100 req/s (p95 at 95 req/s 209.9 -> 45.7 ms), left 40-60 req/s
    /// unchanged, and cost 4-5 ms of median at 80-88 req/s, where codec calls carrying
    /// longer chunks take longer (`bench/results/2026-12-03-h200-codec-long-top-ups`).
    /// Latency and throughput: `usize::MAX`, never (not measured with it).
    pub codec_long_top_ups_from: usize,
    /// With a backend that can (`Backend::runs_side_by_side`), run every code-predictor
    /// call together with a talker step of the other requests ready for it, and the other
    /// way round. Off in every profile: on the H200 (balanced profile) it held 75 req/s
    /// without underruns where one stage at a time held 65-70, but each paired call takes
    /// longer than either alone, so audible TTFA p95 rose (65 req/s: 68.8 ms against
    /// 44.1; `bench/results/2026-12-02-h200-side-by-side`).
    pub side_by_side: bool,
    /// With a backend that can (`Backend::merges_prefill_with_step`), run every prefill
    /// together with a talker step of the other requests ready for one, and the other way
    /// round, as one talker pass: the prefill's fixed cost goes, and the new requests reach
    /// the code predictor with the stepped ones, so one code-predictor call serves both.
    /// Balanced: on. On the H200 (CUDA merged pass,
    /// `bench/results/2026-12-03-h200-prefill-with-step`) audible TTFA p95 at 110 / 120
    /// req/s fell from 137.8 / 352.6 to 47.6-49.0 / 51.0-59.6 ms (two leases), with 10, 40
    /// and 100 req/s within 0.6 ms of before. Latency and throughput: off (not measured
    /// with it).
    pub prefill_with_step: bool,
}

impl Policy {
    /// Most rows in one call of any stage.
    pub fn max_rows(&self) -> usize {
        self.buckets.last().copied().unwrap_or(1)
    }

    /// Most rows in one call of `stage`.
    pub fn stage_max_rows(&self, stage: crate::scheduler::Stage) -> usize {
        match stage {
            crate::scheduler::Stage::Prefill => self.prefill_max_rows.min(self.max_rows()),
            _ => self.max_rows(),
        }
    }

    /// The smallest bucket holding `rows` rows (the largest when none does).
    pub fn bucket_for(&self, rows: usize) -> usize {
        self.buckets
            .iter()
            .copied()
            .find(|&b| b >= rows)
            .unwrap_or_else(|| self.max_rows())
    }

    /// Buckets of every power of two up to `max_batch` (itself a power of two, at most
    /// [`MAX_BATCH_LIMIT`]): the most rows one call of a stage takes.
    pub fn set_max_batch(&mut self, max_batch: usize) -> Result<(), ConfigError> {
        if !max_batch.is_power_of_two() || max_batch > MAX_BATCH_LIMIT {
            return Err(ConfigError::Invalid(format!(
                "max batch {max_batch}: need a power of two from 1 to {MAX_BATCH_LIMIT}"
            )));
        }
        self.buckets = (0..=max_batch.trailing_zeros()).map(|i| 1 << i).collect();
        Ok(())
    }

    /// Adds a bucket of `rows` between the others (a backend that also captures its
    /// graphs for that many rows, e.g. 24 with `QWEN3_TTS_BATCH_24=1`); none at or past
    /// the largest bucket, which stays the most rows of a call.
    pub fn add_bucket(&mut self, rows: usize) {
        if rows > 0 && rows < self.max_rows() {
            if let Err(at) = self.buckets.binary_search(&rows) {
                self.buckets.insert(at, rows);
            }
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let ascending = self.buckets.windows(2).all(|w| w[0] < w[1]);
        if self.buckets.is_empty() || self.buckets[0] == 0 || !ascending {
            return Err(ConfigError::Invalid(format!(
                "batch buckets {:?}: need ascending sizes of at least 1",
                self.buckets
            )));
        }
        if self.prefill_max_rows == 0 {
            return Err(ConfigError::Invalid("prefill_max_rows must be >= 1".into()));
        }
        if self.codec_max_frames == 0 {
            return Err(ConfigError::Invalid("codec_max_frames must be >= 1".into()));
        }
        if self.reserve > self.lead {
            return Err(ConfigError::Invalid(format!(
                "reserve {:?} exceeds lead {:?}",
                self.reserve, self.lead
            )));
        }
        Ok(())
    }
}

/// The graph buckets of the CUDA backend. Its largest call is the smallest power of two
/// holding all its slots, at most 128 rows: on the H200 a talker step of 128 rows costs
/// 3.04 ms against 2.52 for 64, the code-predictor loop 5.45 against 4.49; end to end,
/// 192 slots held p95 < 50 ms without underruns up to 79 req/s with 128 and up to 73 with
/// 64 (p95 128 ms at 77 req/s; `bench/results/2026-12-02-h200-buckets-128`).
pub const DEFAULT_BUCKETS: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// The largest batch [`Policy::set_max_batch`] accepts (every buffer of a backend is sized
/// for its largest batch).
pub const MAX_BATCH_LIMIT: usize = 512;

/// A named policy plus chunk schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub policy: Policy,
    pub chunks: ChunkSchedule,
}

impl Profile {
    /// Smallest chunks, generous urgency margins: the lowest time to first audio.
    pub fn latency() -> Self {
        Self::build("latency", &[1, 2, 4, 8], 80, 400, 8, Fill::Bucket, 0).codec_frames(64)
    }

    /// The default: a one-frame first chunk growing to 12 frames. Under load (16 or more
    /// rows ready for a stage) every call takes all the rows ready for its stage: on a GPU
    /// a talker step or code-predictor loop costs little more for 64 rows than for 16
    /// (H200: 3.3 vs 2.7 ms, 5.6 vs 4.2 ms) and the codec has a fixed part per call, so
    /// rows that ride along with first-audio work are cheap and fewer calls leave room for
    /// more streams; under light load
    /// calls fill to their bucket only, so first audio is not slowed by passengers. A
    /// codec call decodes at most 160 frames (about 10 ms on the H200 with f16
    /// convolutions), so no stream waits long behind streams that ran far ahead (96
    /// before the f16 convolutions; at 65 req/s 160 gave p95 42.4 ms against 56.6,
    /// `bench/results/2026-12-01-h200-codec-budget-160`). Tuned on the simulator with the
    /// H200's measured stage costs (`examples/sim_h200.rs`), then checked end to end on
    /// the H200 (`bench/results/`). From 64 streams with a chunk ready to decode, codec
    /// calls also take longer chunks than their own rows' (`codec_long_top_ups_from`).
    pub fn balanced() -> Self {
        Self::build("balanced", &[1, 2, 4, 8, 12], 40, 150, 16, Fill::Max, 16)
            .codec_frames(160)
            .codec_long_top_ups_from(64)
            .prefill_with_step()
    }

    /// Larger chunks and full batches: the most audio per GPU second.
    pub fn throughput() -> Self {
        Self::build("throughput", &[2, 4, 8, 12, 16], 60, 240, 32, Fill::Max, 0).codec_frames(160)
    }

    fn codec_frames(mut self, frames: usize) -> Self {
        self.policy.codec_max_frames = frames;
        self
    }

    fn codec_long_top_ups_from(mut self, ready: usize) -> Self {
        self.policy.codec_long_top_ups_from = ready;
        self
    }

    fn prefill_with_step(mut self) -> Self {
        self.policy.prefill_with_step = true;
        self
    }

    /// A profile by name.
    pub fn named(name: &str) -> Result<Self, ConfigError> {
        match name.to_ascii_lowercase().as_str() {
            "latency" => Ok(Self::latency()),
            "balanced" => Ok(Self::balanced()),
            "throughput" => Ok(Self::throughput()),
            other => Err(ConfigError::Invalid(format!(
                "unknown profile `{other}` (use latency, balanced or throughput)"
            ))),
        }
    }

    fn build(
        name: &str,
        chunks: &[usize],
        reserve_ms: u64,
        lead_ms: u64,
        prefill_max_rows: usize,
        fill: Fill,
        max_fill_from: usize,
    ) -> Self {
        Self {
            name: name.into(),
            policy: Policy {
                reserve: Duration::from_millis(reserve_ms),
                urgent_model_stages: true,
                lead: Duration::from_millis(lead_ms),
                buckets: DEFAULT_BUCKETS.to_vec(),
                prefill_max_rows,
                fill,
                codec_fill: fill,
                codec_max_frames: usize::MAX,
                max_fill_from,
                codec_long_top_ups_from: usize::MAX,
                side_by_side: false,
                prefill_with_step: false,
            },
            chunks: ChunkSchedule::clamped(chunks),
        }
    }
}

impl Default for Profile {
    fn default() -> Self {
        Self::balanced()
    }
}

impl std::str::FromStr for Profile {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        Self::named(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_profiles_are_valid() {
        for name in ["latency", "balanced", "throughput"] {
            let p: Profile = name.parse().unwrap();
            assert_eq!(p.name, name);
            p.policy.validate().unwrap();
            assert!(
                p.chunks.frames(0) <= 2,
                "first chunk of {name} is 1-2 frames"
            );
        }
        assert!("fast".parse::<Profile>().is_err());
    }

    #[test]
    fn buckets_round_up() {
        let p = Profile::balanced().policy;
        assert_eq!(p.bucket_for(1), 1);
        assert_eq!(p.bucket_for(3), 4);
        assert_eq!(p.bucket_for(64), 64);
        assert_eq!(p.bucket_for(100), 128);
        assert_eq!(p.bucket_for(300), 128);
    }

    #[test]
    fn an_added_bucket_goes_between_the_others() {
        let mut p = Profile::balanced().policy;
        p.set_max_batch(64).unwrap();
        p.add_bucket(24);
        assert_eq!(p.buckets, [1, 2, 4, 8, 16, 24, 32, 64]);
        p.validate().unwrap();
        assert_eq!(p.bucket_for(17), 24);
        assert_eq!(p.bucket_for(25), 32);
        // again, at or past the largest, or zero: no change
        for rows in [24, 64, 100, 0] {
            p.add_bucket(rows);
        }
        assert_eq!(p.buckets, [1, 2, 4, 8, 16, 24, 32, 64]);
        p.set_max_batch(16).unwrap();
        p.add_bucket(24);
        assert_eq!(p.buckets, [1, 2, 4, 8, 16]);
    }

    #[test]
    fn max_batch_sets_power_of_two_buckets() {
        let mut p = Profile::balanced().policy;
        p.set_max_batch(64).unwrap();
        assert_eq!(p.buckets, [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(p.bucket_for(100), 64);
        assert_eq!(p.max_rows(), 64);
        p.set_max_batch(1).unwrap();
        assert_eq!(p.buckets, [1]);
        for bad in [0, 96, 1024] {
            let err = p.set_max_batch(bad).unwrap_err();
            assert!(err.to_string().contains("power of two"), "{err}");
        }
        assert_eq!(
            p.buckets,
            [1],
            "a refused size leaves the buckets as they were"
        );
    }
}
