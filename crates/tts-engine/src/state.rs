//! One request's state machine inside the engine:
//!
//! ```text
//! queued (inbox) -> prefill -> generating -> draining -> done
//!                      \            \            \-----> cancelled | failed
//! ```
//!
//! *Prefill* waits for a slot's prompt (for streamed text: its first token); *generating*
//! runs code predictor, talker step and codec as separate stages (a frame's codes, then
//! both its audio and the next frame's code 0 may be computed, in either order);
//! *draining* decodes and delivers what is left after EOS or the frame limit. Everything
//! here is bookkeeping: the backend calls live in `exec`.

use std::collections::VecDeque;
use std::time::Duration;

use tts_model::generate::{FrameCap, RANDOM_MODEL_FRAMES_PER_CHAR};
use tts_model::prompt::StreamingPrefix;
use tts_model::{Frame, Prompt, SamplingParams, SlotId};

use crate::chunker::ChunkSchedule;
use crate::client::{Client, SendOutcome, TextUpdate};
use crate::error::RequestFailure;
use crate::playback::Playback;
use crate::request::{EndReason, Event, RequestId, Usage};
use crate::scheduler::{Ready, RequestView};
use crate::trim::{LeadingTrim, TrimConfig};

/// A request on its way into the engine.
pub struct Job<C> {
    pub id: RequestId,
    pub sampling: SamplingParams,
    pub prompt: JobPrompt,
    pub limit: FrameLimit,
    /// When it was submitted, on the engine's clock.
    pub submitted_at: Duration,
    pub client: C,
}

/// The prompt of a job.
pub enum JobPrompt {
    /// All text known up front: the prompt, and the text's length in characters; for a
    /// text too long for one generation (`segment`), the first segment's, and the
    /// following segments' in `rest`, spoken one after another in the same stream.
    Whole {
        prompt: Prompt,
        chars: usize,
        rest: Vec<(Prompt, usize)>,
    },
    /// The text arrives through the client's text feed.
    Streamed(StreamingPrefix),
}

/// How many frames a request may generate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FrameLimit {
    Fixed(usize),
    /// From the text: the runaway cap over its tokens; for random-weight models (no
    /// meaningful EOS) the reply length of its characters, known once the text is complete.
    Derived {
        cap: FrameCap,
        random_model: bool,
    },
}

/// Where a request is in its life (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Prefill,
    Generating,
    Draining,
    Done,
    Cancelled,
    Failed,
}

impl Phase {
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Done | Phase::Cancelled | Phase::Failed)
    }
}

/// Per-request settings fixed by the engine.
#[derive(Debug, Clone)]
pub(crate) struct StreamSettings {
    pub trim: crate::trim::TrimConfig,
    pub sample_rate: u32,
    pub samples_per_frame: usize,
    pub max_positions: usize,
}

/// What delivering held events did (for metrics).
#[derive(Debug, Default)]
pub(crate) struct Delivery {
    /// Set when the first audio went out: time since submission.
    pub first_audio: Option<Duration>,
    /// Playback gaps the deliveries ended.
    pub gaps: Vec<Duration>,
    pub closed: bool,
}

pub(crate) struct RequestState<C> {
    pub id: RequestId,
    pub order: u64,
    pub client: C,
    pub slot: Option<SlotId>,
    /// The request's sampling settings, its seed among them (each later segment's slot
    /// gets them with its own seed, [`next_sampling`](Self::next_sampling)).
    sampling: SamplingParams,
    pub phase: Phase,
    pub last_served: u64,
    /// Lives as long as the request is in the engine; its logs are recorded inside it.
    pub span: tracing::Span,
    /// The prompt until prefilled (for streamed text, once its first token arrived).
    prompt: Option<Prompt>,
    prefix: Option<StreamingPrefix>,
    prompt_len: usize,
    /// Text tokens for talker steps 0, 1, ... (then `tts_pad` once complete).
    trailing: Vec<u32>,
    text_complete: bool,
    chars: usize,
    body_tokens: usize,
    limit: FrameLimit,
    /// Later segments of a long text (prompt, characters), and what the earlier ones
    /// generated: the segment's index, frames, text tokens, trimmed samples, and whether
    /// one was cut by its frame limit.
    rest: VecDeque<(Prompt, usize)>,
    segment: usize,
    frames_before: usize,
    tokens_before: usize,
    trimmed_before: usize,
    cut_short: bool,
    /// Code 0 of the next frame, sampled and not yet completed by the code predictor.
    code0: Option<u32>,
    /// The last frame is complete and the talker step after it has not run.
    awaiting_step: bool,
    generated: usize,
    end: Option<EndReason>,
    undecoded: Vec<Frame>,
    decoded: usize,
    /// Leading frames of this segment's codec stream that only give the codec its context
    /// (an in-context clone's reference frames, `Prompt::codec_context`): decoded first,
    /// their audio dropped and not counted as trimmed.
    context: usize,
    /// Chunks that carried audio (drives the chunk schedule).
    chunks_sent: usize,
    trim: LeadingTrim,
    settings: StreamSettings,
    outbox: VecDeque<Event>,
    playback: Playback,
    audio_samples: usize,
    submitted_at: Duration,
    queue_wait: Duration,
    first_audio_at: Option<Duration>,
}

impl<C: Client> RequestState<C> {
    pub fn new(
        job: Job<C>,
        order: u64,
        slot: SlotId,
        now: Duration,
        settings: StreamSettings,
    ) -> Self {
        let mut rest = VecDeque::new();
        let undecoded = match &job.prompt {
            JobPrompt::Whole { prompt, .. } => prompt.codec_context.clone(),
            JobPrompt::Streamed(_) => Vec::new(),
        };
        let context = undecoded.len();
        let (prompt, prefix, trailing, complete, chars, body, prompt_len) = match job.prompt {
            JobPrompt::Whole {
                prompt,
                chars,
                rest: later,
            } => {
                rest.extend(later);
                let trailing = prompt.trailing_text.clone();
                let (body, len) = (prompt.body_len, prompt.positions.len());
                (Some(prompt), None, trailing, true, chars, body, len)
            }
            JobPrompt::Streamed(prefix) => (None, Some(prefix), Vec::new(), false, 0, 0, 0),
        };
        Self {
            id: job.id,
            order,
            client: job.client,
            slot: Some(slot),
            sampling: job.sampling,
            phase: Phase::Prefill,
            last_served: 0,
            span: tracing::debug_span!("request", id = %job.id, seed = job.sampling.seed),
            prompt,
            prefix,
            prompt_len,
            trailing,
            text_complete: complete,
            chars,
            body_tokens: body,
            limit: job.limit,
            rest,
            segment: 0,
            frames_before: 0,
            tokens_before: 0,
            trimmed_before: 0,
            cut_short: false,
            code0: None,
            awaiting_step: false,
            generated: 0,
            end: None,
            undecoded,
            decoded: 0,
            context,
            chunks_sent: 0,
            trim: LeadingTrim::new(
                TrimConfig {
                    drop_frames: settings.trim.drop_frames + context,
                    ..settings.trim
                },
                settings.sample_rate,
                settings.samples_per_frame,
            ),
            settings,
            outbox: VecDeque::new(),
            playback: Playback::new(),
            audio_samples: 0,
            submitted_at: job.submitted_at,
            queue_wait: now.saturating_sub(job.submitted_at),
            first_audio_at: None,
        }
    }

    /// The request's seed (its first segment's).
    pub fn seed(&self) -> u64 {
        self.sampling.seed
    }

    pub fn queue_wait(&self) -> Duration {
        self.queue_wait
    }

    /// Takes streamed text in. The first token completes the prompt; the rest feed the
    /// talker; the end appends `tts_eos`.
    pub fn apply_text(&mut self, update: TextUpdate, tts_eos: u32) -> Result<(), RequestFailure> {
        for token in update.tokens {
            match self.prefix.take() {
                Some(prefix) => {
                    let prompt = prefix.with_first_token(token);
                    self.prompt_len = prompt.positions.len();
                    self.prompt = Some(prompt);
                }
                None => self.trailing.push(token),
            }
            self.body_tokens += 1;
        }
        self.chars += update.chars;
        if update.ended && !self.text_complete {
            if self.body_tokens == 0 {
                return Err(RequestFailure::EmptyText);
            }
            self.trailing.push(tts_eos);
            self.text_complete = true;
            self.enforce_limit();
        }
        Ok(())
    }

    /// The frame limit as far as the text is known.
    pub fn limit(&self) -> usize {
        let from_text = match self.limit {
            FrameLimit::Fixed(n) => n,
            FrameLimit::Derived { cap, random_model } => {
                let cap = cap.limit(self.body_tokens);
                if !random_model {
                    cap
                } else if self.text_complete {
                    let frames = (self.chars as f32 * RANDOM_MODEL_FRAMES_PER_CHAR).ceil();
                    (frames as usize).max(1).min(cap)
                } else {
                    usize::MAX
                }
            }
        };
        // Each talker step adds a position; never run past the backend's context.
        let room = (self.settings.max_positions + 1).saturating_sub(self.prompt_len.max(1));
        from_text.min(room)
    }

    /// The text token of the next talker step, if it is known.
    pub fn text_token(&self, pad: u32) -> Option<u32> {
        let step = self.generated.checked_sub(1)?;
        match self.trailing.get(step) {
            Some(&t) => Some(t),
            None if self.text_complete => Some(pad),
            None => None,
        }
    }

    pub fn prompt(&self) -> Option<&Prompt> {
        self.prompt.as_ref()
    }

    /// Frames to decode in the next codec call.
    pub fn undecoded(&self) -> &[Frame] {
        &self.undecoded
    }

    /// Frames in the next chunk: the schedule's size plus dropped frames not yet decoded.
    fn chunk_target(&self, chunks: &ChunkSchedule) -> usize {
        chunks.frames(self.chunks_sent)
            + (self.settings.trim.drop_frames + self.context).saturating_sub(self.decoded)
    }

    /// Samples dropped for the codec context (not trimmed audio of the reply).
    fn context_samples(&self) -> usize {
        self.context * self.settings.samples_per_frame
    }

    pub fn ready(&self, chunks: &ChunkSchedule, pad: u32) -> Ready {
        // A request whose client is not reading waits (backpressure) instead of piling up.
        if self.slot.is_none() || self.phase.is_terminal() || !self.outbox.is_empty() {
            return Ready::default();
        }
        let pending = self.undecoded.len();
        Ready {
            prefill: self.phase == Phase::Prefill && self.prompt.is_some(),
            code_predictor: self.code0.is_some(),
            talker_step: self.awaiting_step && self.text_token(pad).is_some(),
            codec_frames: pending,
            // (codec context is decoded at once, beside the prefill: it has no audio to wait for)
            codec_chunk: pending > 0
                && (pending >= self.chunk_target(chunks)
                    || self.end.is_some()
                    || self.decoded < self.context),
        }
    }

    pub fn view(&self, chunks: &ChunkSchedule, pad: u32) -> RequestView {
        RequestView {
            id: self.id,
            order: self.order,
            ready: self.ready(chunks, pad),
            first_audio: self.playback.started().is_some(),
            // (a later segment's prefill too: its stream is playing)
            deadline: if self.phase == Phase::Generating
                || !self.undecoded.is_empty()
                || (self.phase == Phase::Prefill && self.segment > 0)
            {
                self.playback.runs_dry_at()
            } else {
                None
            },
            last_served: self.last_served,
        }
    }

    fn finish_generation(&mut self, why: EndReason) {
        self.end = Some(why);
        self.code0 = None;
        self.awaiting_step = false;
        self.phase = Phase::Draining;
    }

    fn enforce_limit(&mut self) {
        if self.end.is_none() && self.phase != Phase::Prefill && self.generated >= self.limit() {
            self.finish_generation(EndReason::FrameLimit);
        }
    }

    fn take_code0(&mut self, code0: u32, eos: u32) {
        if code0 == eos {
            self.finish_generation(EndReason::Eos);
        } else {
            self.code0 = Some(code0);
            self.enforce_limit();
        }
    }

    pub fn on_prefill(&mut self, code0: u32, eos: u32) {
        self.prompt = None;
        self.phase = Phase::Generating;
        self.take_code0(code0, eos);
    }

    pub fn on_frame(&mut self, frame: Frame) {
        self.code0 = None;
        self.undecoded.push(frame);
        self.generated += 1;
        self.awaiting_step = true;
        self.enforce_limit();
    }

    pub fn on_step(&mut self, code0: u32, eos: u32) {
        self.awaiting_step = false;
        self.take_code0(code0, eos);
    }

    /// Takes the PCM of the frames just decoded through trimming into the outbox.
    pub fn on_decoded(&mut self, frames: usize, pcm: &[f32]) {
        self.undecoded.drain(..frames.min(self.undecoded.len()));
        self.decoded += frames;
        let audio = self.trim.push(pcm);
        if !audio.is_empty() {
            self.chunks_sent += 1;
            self.outbox.push_back(Event::Audio(audio));
        }
    }

    /// Generation ended and every frame is decoded.
    pub fn is_complete(&self) -> bool {
        self.end.is_some() && self.undecoded.is_empty() && !self.phase.is_terminal()
    }

    /// Whether a later segment of the text is still to be spoken.
    pub fn has_next_segment(&self) -> bool {
        !self.rest.is_empty()
    }

    /// The sampling settings of the next segment's slot: the request's, with the seed
    /// moved on by the segment's index (so that a seed still gives the same audio).
    pub fn next_sampling(&self) -> SamplingParams {
        SamplingParams {
            seed: self.sampling.seed.wrapping_add(self.segment as u64 + 1),
            ..self.sampling
        }
    }

    /// Starts the next segment on `slot` (fresh, allocated with [`next_sampling`]): its
    /// prompt waits for prefill; the stream, its chunk schedule and playback go on. Its
    /// first frames are dropped as the first segment's were, its leading silence is kept
    /// (the pause between sentences). Call when [`is_complete`](Self::is_complete).
    ///
    /// [`next_sampling`]: Self::next_sampling
    pub fn start_next_segment(&mut self, slot: SlotId) {
        let Some((prompt, chars)) = self.rest.pop_front() else {
            return;
        };
        self.segment += 1;
        self.frames_before += self.generated;
        self.tokens_before += self.body_tokens;
        self.trimmed_before += self.trim.trimmed().saturating_sub(self.context_samples());
        self.cut_short |= self.end == Some(EndReason::FrameLimit);
        self.slot = Some(slot);
        self.phase = Phase::Prefill;
        self.trailing = prompt.trailing_text.clone();
        self.prompt_len = prompt.positions.len();
        self.body_tokens = prompt.body_len;
        self.undecoded = prompt.codec_context.clone();
        self.context = self.undecoded.len();
        self.prompt = Some(prompt);
        self.chars = chars;
        self.code0 = None;
        self.awaiting_step = false;
        self.generated = 0;
        self.end = None;
        self.decoded = 0;
        self.trim = LeadingTrim::new(
            TrimConfig {
                onset: None,
                drop_frames: self.settings.trim.drop_frames + self.context,
            },
            self.settings.sample_rate,
            self.settings.samples_per_frame,
        );
    }

    /// Frames generated over every segment so far.
    pub fn frames_generated(&self) -> usize {
        self.frames_before + self.generated
    }

    /// Ends the request successfully: queues `Done`.
    pub fn complete(&mut self) {
        let usage = self.usage();
        self.phase = Phase::Done;
        self.outbox.push_back(Event::Done(usage));
    }

    /// Ends the request with a failure: queues `Failed` after what is already queued.
    pub fn fail(&mut self, failure: RequestFailure) {
        self.phase = Phase::Failed;
        self.outbox.push_back(Event::Failed(failure));
    }

    pub fn cancel(&mut self) {
        self.phase = Phase::Cancelled;
        self.outbox.clear();
    }

    pub fn queue_event(&mut self, event: Event) {
        self.outbox.push_back(event);
    }

    /// Whether events are waiting for room in the client's channel.
    pub fn has_outbox(&self) -> bool {
        !self.outbox.is_empty()
    }

    fn usage(&self) -> Usage {
        let sr = self.settings.sample_rate as f64;
        Usage {
            frames: self.frames_before + self.generated,
            text_tokens: self.tokens_before + self.body_tokens,
            audio_seconds: self.audio_samples as f64 / sr,
            trimmed_seconds: (self.trimmed_before
                + self.trim.trimmed().saturating_sub(self.context_samples()))
                as f64
                / sr,
            // a segment cut by its frame limit makes the whole reply one
            end: match self.end {
                Some(e) if !self.cut_short => e,
                _ => EndReason::FrameLimit,
            },
            queue_wait: self.queue_wait,
            time_to_first_audio: self
                .first_audio_at
                .map(|t| t.saturating_sub(self.submitted_at)),
            underruns: self.playback.underruns(),
        }
    }

    /// Hands queued events to the client until its channel is full.
    pub fn deliver(&mut self, now: Duration) -> Delivery {
        let mut report = Delivery::default();
        let mut retried = false;
        while let Some(mut event) = self.outbox.pop_front() {
            // Usage is final only once every chunk before it went out.
            if let Event::Done(usage) = &mut event {
                *usage = self.usage();
            }
            let samples = match &event {
                Event::Audio(a) => a.len(),
                _ => 0,
            };
            match self.client.try_send(event) {
                SendOutcome::Sent => {
                    if samples > 0 {
                        self.account_audio(now, samples, &mut report);
                    }
                }
                SendOutcome::Full(event) => {
                    self.outbox.push_front(event);
                    if retried {
                        break;
                    }
                    // Ask the reader to wake us, then look once more: it may have read
                    // between our attempt and the request (then it would not wake us).
                    self.client.wait_for_room();
                    retried = true;
                }
                SendOutcome::Closed => {
                    report.closed = true;
                    self.outbox.clear();
                    break;
                }
            }
        }
        report
    }

    fn account_audio(&mut self, now: Duration, samples: usize, report: &mut Delivery) {
        self.audio_samples += samples;
        let audio = Duration::from_secs_f64(samples as f64 / self.settings.sample_rate as f64);
        if self.first_audio_at.is_none() {
            self.first_audio_at = Some(now);
            report.first_audio = Some(now.saturating_sub(self.submitted_at));
        }
        if let Some(gap) = self.playback.push(now, audio) {
            report.gaps.push(gap);
        }
    }
}
