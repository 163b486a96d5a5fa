//! The simulator's backend: computes nothing, returns deterministic codes and audio (a
//! tone per request, `fake_sample`, silent for the first `silent_frames` frames), and
//! advances a simulated clock by set stage costs on every call. It can also end a request
//! by EOS after a set number of frames, and inject failures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tts_model::backend::first_free_slot;
use tts_model::{
    Backend, BackendError, BackendInfo, CodecRow, Frame, PrefillRow, SamplingParams, SlotId,
    StepRow,
};

use crate::clock::{Clock, SimClock};
use crate::scheduler::Stage;

/// Code 0 that ends an utterance on the fake backend (as the released models).
pub const FAKE_EOS: u32 = 2150;
/// Samples per frame of the fake backend (24 kHz, 80 ms).
pub const FAKE_SAMPLES_PER_FRAME: usize = 1920;
pub const FAKE_SAMPLE_RATE: u32 = 24_000;

/// Simulated duration of each backend call: a fixed part plus a part per row. The talker
/// step and the code predictor may cost more for each of their first `small_rows` rows
/// than for the rows beyond (a GPU's small-batch kernels scale worse than its large-batch
/// ones).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageCosts {
    pub prefill_base: Duration,
    pub prefill_per_row: Duration,
    pub code_predictor_base: Duration,
    /// Per row beyond `small_rows`.
    pub code_predictor_per_row: Duration,
    /// Per row up to `small_rows`.
    pub code_predictor_per_small_row: Duration,
    pub talker_base: Duration,
    /// Per row beyond `small_rows`.
    pub talker_per_row: Duration,
    /// Per row up to `small_rows`.
    pub talker_per_small_row: Duration,
    pub small_rows: usize,
    pub codec_base: Duration,
    /// Per decoded frame.
    pub codec_per_frame: Duration,
    /// With `Some(t)` the backend merges prompts into talker steps
    /// (`Backend::merges_prefill_with_step`): such a call costs the talker step plus `t`
    /// a prompt, with no prefill base (a model of one talker pass over both).
    pub merged_prefill_per_prompt: Option<Duration>,
}

impl StageCosts {
    /// A GPU-like profile: batches are nearly free, prefill grows a little per row.
    pub fn gpu_like() -> Self {
        let us = Duration::from_micros;
        Self {
            prefill_base: us(3_000),
            prefill_per_row: us(100),
            code_predictor_base: us(1_000),
            code_predictor_per_row: Duration::ZERO,
            code_predictor_per_small_row: Duration::ZERO,
            talker_base: us(1_000),
            talker_per_row: Duration::ZERO,
            talker_per_small_row: Duration::ZERO,
            small_rows: 0,
            codec_base: us(500),
            codec_per_frame: Duration::ZERO,
            merged_prefill_per_prompt: None,
        }
    }

    /// A CPU-like profile: every row costs about as much as the fixed part.
    pub fn cpu_like() -> Self {
        let ms = Duration::from_millis;
        Self {
            prefill_base: ms(5),
            prefill_per_row: ms(4),
            code_predictor_base: ms(1),
            code_predictor_per_row: ms(1),
            code_predictor_per_small_row: ms(1),
            talker_base: ms(1),
            talker_per_row: ms(1),
            talker_per_small_row: ms(1),
            small_rows: 0,
            codec_base: ms(1),
            codec_per_frame: Duration::from_micros(500),
            merged_prefill_per_prompt: None,
        }
    }

    /// The profile a command line names: `gpu` or `cpu`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "gpu" => Some(Self::gpu_like()),
            "cpu" => Some(Self::cpu_like()),
            _ => None,
        }
    }

    /// What a call of `stage` with `rows` rows (and `frames` frames in total, for the
    /// codec) costs.
    pub fn cost(&self, stage: Stage, rows: usize, frames: usize) -> Duration {
        let n = rows as u32;
        let small = rows.min(self.small_rows) as u32;
        match stage {
            Stage::Prefill => self.prefill_base + self.prefill_per_row * n,
            Stage::CodePredictor => {
                self.code_predictor_base
                    + self.code_predictor_per_small_row * small
                    + self.code_predictor_per_row * (n - small)
            }
            Stage::TalkerStep => {
                self.talker_base
                    + self.talker_per_small_row * small
                    + self.talker_per_row * (n - small)
            }
            Stage::Codec => self.codec_base + self.codec_per_frame * frames as u32,
        }
    }
}

/// A failure the fake backend injects: calls of `stage` that include the request seeded
/// `seed` fail once it has generated `at_frame` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub seed: u64,
    pub stage: Stage,
    pub at_frame: usize,
    /// Name the slot in the error (fails that request) or not (fails the whole call).
    pub attributed: bool,
}

/// Sample `n` of the fake audio of a request seeded `seed` (before any silence).
pub fn fake_sample(seed: u64, n: usize) -> f32 {
    let f = 0.01 + (seed % 7) as f32 * 0.003;
    0.25 * (n as f32 * f).sin() + 0.05
}

#[derive(Debug, Clone)]
struct FakeSlot {
    seed: u64,
    frames: usize,
    code0: Option<u32>,
    decoded: usize,
}

/// A backend that computes nothing: deterministic codes and audio, simulated costs.
pub struct FakeBackend {
    clock: SimClock,
    costs: StageCosts,
    info: BackendInfo,
    slots: Vec<Option<FakeSlot>>,
    faults: Vec<Fault>,
    silent_frames: usize,
    eos_after: HashMap<u64, usize>,
    frees: Arc<Mutex<Vec<(Duration, SlotId)>>>,
    jitter: Jitter,
}

/// Random extra time on every call: `cost * scale * E` with `E` exponential of mean 1
/// (counter-based, seeded), so most calls take a little longer and a few much longer, as
/// real stage times do under load (GPU clocks, host scheduling). `scale == 0`: none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Jitter {
    pub scale: f64,
    pub seed: u64,
    calls: u64,
}

impl Jitter {
    pub fn new(scale: f64, seed: u64) -> Self {
        Self {
            scale,
            seed,
            calls: 0,
        }
    }

    /// The next call's cost, jitter added.
    fn apply(&mut self, cost: Duration) -> Duration {
        if self.scale <= 0.0 {
            return cost;
        }
        self.calls += 1;
        // A uniform in (0, 1] from the top 53 bits.
        let u = ((mix(self.seed, self.calls, 1) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        cost + cost.mul_f64(self.scale * -u.ln())
    }
}

impl FakeBackend {
    pub fn new(clock: SimClock, costs: StageCosts, max_slots: usize) -> Self {
        Self {
            clock,
            costs,
            info: BackendInfo {
                name: "fake".into(),
                device: "sim".into(),
                sample_rate: FAKE_SAMPLE_RATE,
                samples_per_frame: FAKE_SAMPLES_PER_FRAME,
                codec_eos: FAKE_EOS,
                tts_pad_token_id: 151_671,
                max_slots,
                max_positions: 32_768,
            },
            slots: vec![None; max_slots],
            faults: Vec::new(),
            silent_frames: 0,
            eos_after: HashMap::new(),
            frees: Arc::default(),
            jitter: Jitter::default(),
        }
    }

    /// Every call's cost gets random extra time (see [`Jitter`]).
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    pub fn with_faults(mut self, faults: Vec<Fault>) -> Self {
        self.faults = faults;
        self
    }

    /// The first `n` frames of every reply decode to silence.
    pub fn with_silent_frames(mut self, n: usize) -> Self {
        self.silent_frames = n;
        self
    }

    /// The request seeded `seed` ends by EOS after `frames` frames.
    pub fn with_eos_after(mut self, seed: u64, frames: usize) -> Self {
        self.eos_after.insert(seed, frames);
        self
    }

    /// Log of `free_slot` calls: (simulated time, slot).
    pub fn frees(&self) -> Arc<Mutex<Vec<(Duration, SlotId)>>> {
        self.frees.clone()
    }

    fn slot(&mut self, id: SlotId) -> Result<&mut FakeSlot, BackendError> {
        self.slots
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(BackendError::BadSlot(id.0))
    }

    /// Spends the call's time, then fails it if a fault matches one of its rows.
    fn run(&mut self, stage: Stage, slots: &[SlotId], frames: usize) -> Result<(), BackendError> {
        let cost = self.costs.cost(stage, slots.len(), frames);
        self.spend(cost);
        self.check_faults(stage, slots)
    }

    fn spend(&mut self, cost: Duration) {
        self.clock.advance(self.jitter.apply(cost));
    }

    /// Fails a call of `stage` over `slots` if a fault matches one of its rows.
    fn check_faults(&mut self, stage: Stage, slots: &[SlotId]) -> Result<(), BackendError> {
        for &id in slots {
            let s = self.slot(id)?;
            let (seed, at) = (s.seed, s.frames);
            let hit = self
                .faults
                .iter()
                .find(|f| f.seed == seed && f.stage == stage && at >= f.at_frame);
            if let Some(f) = hit {
                return Err(if f.attributed {
                    BackendError::SlotState {
                        slot: id.0,
                        message: "injected fault".into(),
                    }
                } else {
                    BackendError::Device("injected device fault".into())
                });
            }
        }
        Ok(())
    }

    /// Code 0 of frame 0 for each prefilled slot.
    fn prefill_codes(&mut self, slots: &[SlotId]) -> Result<Vec<u32>, BackendError> {
        let mut out = Vec::with_capacity(slots.len());
        for &id in slots {
            let seed = self.slot(id)?.seed;
            let c = self.next_code0(seed, 0);
            self.slot(id)?.code0 = Some(c);
            out.push(c);
        }
        Ok(out)
    }

    /// Code 0 of the next frame for each stepped slot.
    fn step_codes(&mut self, slots: &[SlotId]) -> Result<Vec<u32>, BackendError> {
        let mut out = Vec::with_capacity(slots.len());
        for &id in slots {
            let (seed, frames) = {
                let s = self.slot(id)?;
                (s.seed, s.frames)
            };
            let c = self.next_code0(seed, frames);
            self.slot(id)?.code0 = Some(c);
            out.push(c);
        }
        Ok(out)
    }

    fn next_code0(&self, seed: u64, frame: usize) -> u32 {
        if self.eos_after.get(&seed) == Some(&frame) {
            FAKE_EOS
        } else {
            (mix(seed, frame as u64, 0) % 2048) as u32
        }
    }
}

fn mix(a: u64, b: u64, c: u64) -> u64 {
    let mut x = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ c.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^ (x >> 29)
}

impl Backend for FakeBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn alloc_slot(&mut self, params: &SamplingParams) -> Result<SlotId, BackendError> {
        let free = first_free_slot(&self.slots)?;
        self.slots[free] = Some(FakeSlot {
            seed: params.seed,
            frames: 0,
            code0: None,
            decoded: 0,
        });
        Ok(SlotId(free as u32))
    }

    fn free_slot(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.get_mut(slot.0 as usize) {
            if s.take().is_some() {
                if let Ok(mut log) = self.frees.lock() {
                    log.push((self.clock.now(), slot));
                }
            }
        }
    }

    fn prefill(&mut self, rows: &[PrefillRow<'_>]) -> Result<Vec<u32>, BackendError> {
        let slots: Vec<SlotId> = rows.iter().map(|r| r.slot).collect();
        self.run(Stage::Prefill, &slots, 0)?;
        self.prefill_codes(&slots)
    }

    fn predict_codes(&mut self, slots: &[SlotId]) -> Result<Vec<Frame>, BackendError> {
        self.run(Stage::CodePredictor, slots, 0)?;
        let mut out = Vec::with_capacity(slots.len());
        for &id in slots {
            let s = self.slot(id)?;
            let code0 = match s.code0.take() {
                Some(c) if c != FAKE_EOS => c,
                _ => {
                    return Err(BackendError::SlotState {
                        slot: id.0,
                        message: "no pending code 0".into(),
                    })
                }
            };
            let mut frame = [0u32; 16];
            frame[0] = code0;
            for (j, c) in frame.iter_mut().enumerate().skip(1) {
                *c = (mix(s.seed, s.frames as u64, j as u64) % 2048) as u32;
            }
            s.frames += 1;
            out.push(frame);
        }
        Ok(out)
    }

    fn talker_step(&mut self, rows: &[StepRow]) -> Result<Vec<u32>, BackendError> {
        let slots: Vec<SlotId> = rows.iter().map(|r| r.slot).collect();
        self.run(Stage::TalkerStep, &slots, 0)?;
        self.step_codes(&slots)
    }

    fn merges_prefill_with_step(&self) -> bool {
        self.costs.merged_prefill_per_prompt.is_some()
    }

    fn prefill_and_step(
        &mut self,
        prompts: &[PrefillRow<'_>],
        step: &[StepRow],
    ) -> (
        Result<Vec<u32>, BackendError>,
        Result<Vec<u32>, BackendError>,
    ) {
        let Some(per_prompt) = self.costs.merged_prefill_per_prompt else {
            return (self.prefill(prompts), self.talker_step(step));
        };
        let prompts: Vec<SlotId> = prompts.iter().map(|r| r.slot).collect();
        let step: Vec<SlotId> = step.iter().map(|r| r.slot).collect();
        let cost =
            self.costs.cost(Stage::TalkerStep, step.len(), 0) + per_prompt * prompts.len() as u32;
        self.spend(cost);
        let prefilled = self
            .check_faults(Stage::Prefill, &prompts)
            .and_then(|()| self.prefill_codes(&prompts));
        let stepped = self
            .check_faults(Stage::TalkerStep, &step)
            .and_then(|()| self.step_codes(&step));
        (prefilled, stepped)
    }

    fn codec_decode(&mut self, rows: &[CodecRow<'_>]) -> Result<Vec<Vec<f32>>, BackendError> {
        let slots: Vec<SlotId> = rows.iter().map(|r| r.slot).collect();
        let frames: usize = rows.iter().map(|r| r.frames.len()).sum();
        self.run(Stage::Codec, &slots, frames)?;
        let (spf, silent) = (self.info.samples_per_frame, self.silent_frames);
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let s = self.slot(r.slot)?;
            let start = s.decoded * spf;
            s.decoded += r.frames.len();
            let seed = s.seed;
            out.push(
                (start..start + r.frames.len() * spf)
                    .map(|n| {
                        if n < silent * spf {
                            0.0
                        } else {
                            fake_sample(seed, n)
                        }
                    })
                    .collect(),
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_adds_seeded_time_with_the_asked_mean() {
        let ms = Duration::from_millis(1);
        let mut off = Jitter::default();
        assert_eq!(off.apply(ms), ms, "no jitter by default");
        let run = |seed| {
            let mut j = Jitter::new(0.1, seed);
            (0..20_000).map(|_| j.apply(ms)).collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "seeded");
        assert_ne!(a, run(8));
        assert!(a.iter().all(|&c| c >= ms), "only ever extra time");
        let mean = a.iter().sum::<Duration>().as_secs_f64() / a.len() as f64;
        assert!((mean / 1e-3 - 1.1).abs() < 0.005, "mean {mean}");
        // An exponential tail: about e^-3 of the calls take over 30 % extra.
        let long = a.iter().filter(|&&c| c > ms.mul_f64(1.3)).count() as f64 / a.len() as f64;
        assert!((long - (-3.0f64).exp()).abs() < 0.01, "{long}");
    }
}
