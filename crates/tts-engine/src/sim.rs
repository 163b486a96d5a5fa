//! A discrete-event simulation of the engine: the real [`Core`] (state machine, scheduler,
//! chunking, trimming) on a fake backend whose calls cost set amounts of simulated time.
//! Scheduler tests use it with exact, repeatable clocks; the load program uses it to
//! explore policies in milliseconds of real time.
//!
//! The fake backend (`fake_backend`) makes deterministic audio, so tests can check every
//! sample that arrives.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use tts_model::prompt::PromptPosition;
use tts_model::{Prompt, SamplingParams, SlotId};

use crate::client::{Client, SendOutcome, TextUpdate};
use crate::clock::{Clock, SimClock};
use crate::core::{Core, CoreSettings, StepRecord};
pub use crate::fake_backend::{
    fake_sample, FakeBackend, Fault, Jitter, StageCosts, FAKE_EOS, FAKE_SAMPLES_PER_FRAME,
    FAKE_SAMPLE_RATE,
};
use crate::playback::Playback;
use crate::profile::Profile;
use crate::request::{Event, RequestId, Usage};
use crate::state::{FrameLimit, Job, JobPrompt};
use crate::trim::TrimConfig;

/// One simulated request.
#[derive(Debug, Clone, PartialEq)]
pub struct SimRequest {
    pub arrival: Duration,
    /// Frames to generate (its frame limit).
    pub frames: usize,
    pub seed: u64,
    pub prompt_len: usize,
    /// The client goes away at this time.
    pub cancel_at: Option<Duration>,
}

/// The simulated engine and backend.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub profile: Profile,
    pub costs: StageCosts,
    pub max_slots: usize,
    pub trim: TrimConfig,
    pub silent_frames: usize,
    pub faults: Vec<Fault>,
    /// (seed, frames): requests that end by EOS before their limit.
    pub eos_after: Vec<(u64, usize)>,
    /// Random extra time on each backend call (none by default).
    pub jitter: Jitter,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            profile: Profile::balanced(),
            costs: StageCosts::gpu_like(),
            max_slots: 64,
            trim: TrimConfig {
                drop_frames: 0,
                onset: Some(crate::onset::OnsetRule::default()),
            },
            silent_frames: 0,
            faults: Vec::new(),
            eos_after: Vec::new(),
            jitter: Jitter::default(),
        }
    }
}

type EventLog = Rc<RefCell<Vec<(Duration, Event)>>>;

/// The simulator's client: records events at the simulated time; reads instantly.
struct SimClient {
    log: EventLog,
    clock: SimClock,
    cancel_at: Option<Duration>,
}

impl Client for SimClient {
    fn try_send(&mut self, event: Event) -> SendOutcome {
        if self.is_cancelled() {
            return SendOutcome::Closed;
        }
        self.log.borrow_mut().push((self.clock.now(), event));
        SendOutcome::Sent
    }

    fn is_cancelled(&self) -> bool {
        self.cancel_at.is_some_and(|t| self.clock.now() >= t)
    }

    fn poll_text(&mut self) -> Option<TextUpdate> {
        None
    }

    fn wait_for_room(&self) {}
}

/// What happened to one simulated request.
#[derive(Debug, Clone)]
pub struct SimResult {
    pub id: RequestId,
    pub spec: SimRequest,
    /// Events with the simulated time they were delivered.
    pub events: Vec<(Duration, Event)>,
}

impl SimResult {
    /// When the first audio arrived.
    pub fn first_audio_at(&self) -> Option<Duration> {
        self.events
            .iter()
            .find(|(_, e)| matches!(e, Event::Audio(_)))
            .map(|(t, _)| *t)
    }

    /// Time from arrival to first audio.
    pub fn time_to_first_audio(&self) -> Option<Duration> {
        self.first_audio_at().map(|t| t - self.spec.arrival)
    }

    /// All audio, concatenated.
    pub fn audio(&self) -> Vec<f32> {
        self.events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::Audio(a) => Some(a.as_slice()),
                _ => None,
            })
            .flatten()
            .copied()
            .collect()
    }

    /// Client-side immediate playback of the received audio.
    pub fn playback(&self) -> Playback {
        let mut p = Playback::new();
        for (t, e) in &self.events {
            if let Event::Audio(a) = e {
                p.push(
                    *t,
                    Duration::from_secs_f64(a.len() as f64 / FAKE_SAMPLE_RATE as f64),
                );
            }
        }
        p
    }

    pub fn usage(&self) -> Option<&Usage> {
        self.events.iter().find_map(|(_, e)| match e {
            Event::Done(u) => Some(u),
            _ => None,
        })
    }

    pub fn failed(&self) -> bool {
        self.events
            .iter()
            .any(|(_, e)| matches!(e, Event::Failed(_)))
    }
}

/// The outcome of a simulation.
#[derive(Debug, Clone)]
pub struct SimOutcome {
    pub requests: Vec<SimResult>,
    pub steps: Vec<StepRecord>,
    /// `free_slot` calls: (time, slot).
    pub frees: Vec<(Duration, SlotId)>,
    /// Simulated time at the end.
    pub end: Duration,
}

/// A prompt of `len` positions (the fake backend looks only at its length).
fn fake_prompt(len: usize) -> Prompt {
    Prompt {
        positions: vec![
            PromptPosition {
                text: Some(0),
                codec: None,
            };
            len.max(1)
        ],
        trailing_text: Vec::new(),
        input_ids: Vec::new(),
        instruct_ids: None,
        body_len: 0,
        head_len: 0,
        speaker: None,
        codec_context: Vec::new(),
    }
}

/// Runs `requests` through a simulated engine until nothing is left to do.
pub fn simulate(config: &SimConfig, requests: &[SimRequest]) -> SimOutcome {
    let clock = SimClock::new();
    let mut backend = FakeBackend::new(clock.clone(), config.costs, config.max_slots)
        .with_faults(config.faults.clone())
        .with_silent_frames(config.silent_frames)
        .with_jitter(config.jitter);
    for &(seed, frames) in &config.eos_after {
        backend = backend.with_eos_after(seed, frames);
    }
    let frees = backend.frees();
    let settings = CoreSettings {
        profile: config.profile.clone(),
        trim: config.trim,
        max_active: config.max_slots,
        tts_eos: 151_673,
    };
    let mut core: Core<SimClient> = Core::new(Box::new(backend), Box::new(clock.clone()), settings);

    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| (requests[i].arrival, i));
    let logs: Vec<EventLog> = requests.iter().map(|_| EventLog::default()).collect();
    let mut arrivals: VecDeque<usize> = order.into_iter().collect();
    let mut waiting: VecDeque<Job<SimClient>> = VecDeque::new();
    let mut steps = Vec::new();
    let make_job = |i: usize| {
        let r = &requests[i];
        let mut sampling = SamplingParams::from_generation(&Default::default(), r.seed);
        sampling.seed = r.seed;
        Job {
            id: RequestId(i as u64 + 1),
            sampling,
            prompt: JobPrompt::Whole {
                prompt: fake_prompt(r.prompt_len),
                chars: 0,
                rest: Vec::new(),
            },
            limit: FrameLimit::Fixed(r.frames),
            submitted_at: r.arrival,
            client: SimClient {
                log: logs[i].clone(),
                clock: clock.clone(),
                cancel_at: r.cancel_at,
            },
        }
    };
    loop {
        let now = clock.now();
        while arrivals
            .front()
            .is_some_and(|&i| requests[i].arrival <= now)
        {
            if let Some(i) = arrivals.pop_front() {
                waiting.push_back(make_job(i));
            }
        }
        core.poll();
        while core.has_room() {
            match waiting.pop_front() {
                Some(job) => core.admit(job),
                None => break,
            }
        }
        if let Some(record) = core.step() {
            steps.push(record);
            continue;
        }
        // Idle: jump to the next arrival or cancellation.
        let next_arrival = arrivals.front().map(|&i| requests[i].arrival);
        let next_cancel = requests
            .iter()
            .filter_map(|r| r.cancel_at)
            .filter(|&t| t > now)
            .min();
        match next_arrival.into_iter().chain(next_cancel).min() {
            Some(t) => clock.advance_to(t),
            None => break,
        }
    }
    let end = clock.now();
    drop(core);
    let frees = frees.lock().map(|f| f.clone()).unwrap_or_default();
    SimOutcome {
        requests: requests
            .iter()
            .zip(logs)
            .enumerate()
            .map(|(i, (spec, log))| SimResult {
                id: RequestId(i as u64 + 1),
                spec: spec.clone(),
                events: log.borrow().clone(),
            })
            .collect(),
        steps,
        frees,
        end,
    }
}
