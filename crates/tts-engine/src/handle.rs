//! The engine's public API: start an engine on a backend, submit requests, read their
//! audio, stream their text in, cancel them, shut down.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use tts_engine::{EngineConfig, EngineHandle, Event, SynthesisRequest};
//! use tts_model::{reference::CpuBackend, LoadOptions, Model, SpeechRequest};
//!
//! let model = Arc::new(Model::load("demo", LoadOptions::default())?);
//! let backend = Box::new(CpuBackend::new(&model, 8)?);
//! let engine = EngineHandle::start(model.clone(), backend, EngineConfig::default())?;
//! let mut request = engine.submit(SynthesisRequest {
//!     speech: SpeechRequest { text: "Hello.".into(), language: "auto".into(),
//!         voice: Some("ryan".into()), ..Default::default() },
//!     sampling: model.default_sampling(42),
//!     max_frames: None,
//! })?;
//! while let Some(event) = request.recv().await {
//!     match event {
//!         Event::Audio(pcm) => { /* encode and send */ }
//!         Event::Done(usage) => break,
//!         Event::Failed(why) => break,
//!         Event::Started(_) => {}
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Threads: submission validates and tokenizes on the caller's thread and never blocks
//! (a full queue is an immediate `QueueFull`); the engine thread owns the backend; each
//! request's events arrive on a bounded tokio channel. Dropping a [`RequestHandle`]
//! cancels its request (the slot is freed before the engine's next step).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use tts_model::config::ModelKind;
use tts_model::prompt::{build_streaming_prefix, ClonedVoice, SpeakerVector};
use tts_model::{Backend, Model, Prompt, RequestError, SpeechRequest, TextMode};

use crate::client::{ChannelClient, RequestShared, TextMsg};
use crate::clock::MonotonicClock;
use crate::config::EngineConfig;
use crate::core::{Core, CoreSettings};
use crate::engine::{EngineLoop, EngineShared, Warmup};
use crate::error::{ConfigError, SubmitError, TextError};
use crate::request::{Event, RequestId, SynthesisRequest};
use crate::segment::{
    max_tokens_per_generation, overhead_positions, split, FRAMES_PER_TOKEN_BUDGET,
};
use crate::state::{FrameLimit, Job, JobPrompt};
use crate::text_input::TextSender;

/// Static facts about a running engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineInfo {
    pub model: String,
    pub device: String,
    /// The model has random weights: its audio is noise.
    pub random_weights: bool,
    pub sample_rate: u32,
    pub samples_per_frame: usize,
    pub max_active: usize,
    pub queue_capacity: usize,
    pub profile: String,
}

/// Current load, for readiness probes and least-loaded routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Requests waiting for a slot.
    pub queued: usize,
    /// Requests holding a slot.
    pub active: usize,
}

struct Inner {
    model: Arc<Model>,
    config: EngineConfig,
    info: EngineInfo,
    inbox: Sender<Job<ChannelClient>>,
    wake: Sender<()>,
    shared: Arc<EngineShared>,
    clock: MonotonicClock,
    /// The backend's context length (talker positions per slot).
    max_positions: usize,
    next_id: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A running engine. Cheap to clone; share it between HTTP handlers.
#[derive(Clone)]
pub struct EngineHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle")
            .field("info", &self.inner.info)
            .finish()
    }
}

impl EngineHandle {
    /// Starts an engine thread that owns `backend` (built from `model`). Returns at once;
    /// the engine warms up (when configured) and then reports [`is_ready`](Self::is_ready).
    pub fn start(
        model: Arc<Model>,
        backend: Box<dyn Backend>,
        config: EngineConfig,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let backend_info = backend.info().clone();
        let settings = CoreSettings {
            profile: config.profile.clone(),
            trim: config.trim_for(&model),
            max_active: config.max_active.unwrap_or(backend_info.max_slots),
            tts_eos: model.config.tts_eos_token_id,
        };
        let clock = MonotonicClock::new();
        let core = Core::new(backend, Box::new(clock), settings);
        let warmup = if config.warmup {
            // (a Base model clones every voice: warm up with a neutral speaker vector)
            let clone = (model.kind() == ModelKind::Base).then(|| {
                Arc::new(ClonedVoice {
                    speaker: Arc::new(SpeakerVector::new(vec![
                        0.0;
                        model.config.talker.hidden_size
                    ])),
                    reference: None,
                })
            });
            let speech = SpeechRequest {
                text: "Hello.".into(),
                voice: model.voices().into_iter().next(),
                language: "auto".into(),
                clone,
                ..Default::default()
            };
            let prompt = model
                .prompt(&speech)
                .map_err(|e| ConfigError::Invalid(format!("warm-up prompt: {e}")))?;
            Some(Warmup {
                prompt,
                sampling: model.default_sampling(0),
            })
        } else {
            None
        };
        let info = EngineInfo {
            model: model.name.clone(),
            device: backend_info.device.clone(),
            random_weights: model.is_random(),
            sample_rate: backend_info.sample_rate,
            samples_per_frame: backend_info.samples_per_frame,
            max_active: core.settings.max_active,
            queue_capacity: config.queue_capacity,
            profile: config.profile.name.clone(),
        };
        let (inbox_tx, inbox_rx) = crossbeam_channel::bounded(config.queue_capacity);
        // One pending wake-up is enough: the engine re-examines everything when it wakes.
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let shared = Arc::new(EngineShared::default());
        let engine = EngineLoop {
            core,
            inbox: inbox_rx,
            wake: wake_rx,
            shared: shared.clone(),
            warmup,
            queue_gauge: Default::default(),
            idle_spin: config.idle_spin,
        };
        let thread = std::thread::Builder::new()
            .name("tts-engine".into())
            .spawn(move || engine.run())
            .map_err(ConfigError::Thread)?;
        Ok(Self {
            inner: Arc::new(Inner {
                model,
                config,
                info,
                inbox: inbox_tx,
                wake: wake_tx,
                shared,
                clock,
                max_positions: backend_info.max_positions,
                next_id: AtomicU64::new(1),
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    pub fn info(&self) -> &EngineInfo {
        &self.inner.info
    }

    /// Warmed up and accepting work (false again once shutdown begins).
    pub fn is_ready(&self) -> bool {
        self.inner.shared.ready.load(Ordering::Acquire)
            && self.inner.shared.shutdown.get().is_none()
    }

    /// Blocks until warm-up finished (or `timeout`); `Err` carries a warm-up failure.
    pub fn wait_ready(&self, timeout: Duration) -> Result<bool, String> {
        let shared = &self.inner.shared;
        let deadline = Instant::now() + timeout;
        let mut started = shared.started.lock().map_err(|e| e.to_string())?;
        loop {
            match &*started {
                Some(Ok(())) => return Ok(true),
                Some(Err(e)) => return Err(e.clone()),
                None => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            started = shared
                .started_cv
                .wait_timeout(started, left)
                .map_err(|e| e.to_string())?
                .0;
        }
    }

    pub fn load(&self) -> Load {
        Load {
            queued: self.inner.inbox.len(),
            active: self.inner.shared.active.load(Ordering::Relaxed),
        }
    }

    /// Submits a request whose text is complete. Validates and tokenizes here, on the
    /// caller's thread; never blocks.
    pub fn submit(&self, req: SynthesisRequest) -> Result<RequestHandle, SubmitError> {
        self.check_open()?;
        let chars = req.speech.text.chars().count();
        self.check_length(chars)?;
        req.sampling.validate()?;
        let prompt = self.inner.model.prompt(&req.speech)?;
        let (prompt, chars, rest) = self.segments(&req, prompt, chars)?;
        let max = self.inner.max_positions;
        if rest
            .iter()
            .map(|(p, _)| p)
            .chain([&prompt])
            .any(|p| p.positions.len() >= max)
        {
            return Err(RequestError::Unsupported(
                "the text is too long for the model's context".into(),
            )
            .into());
        }
        let (handle, job) = self.job(
            &req,
            JobPrompt::Whole {
                prompt,
                chars,
                rest,
            },
            None,
        );
        self.enqueue(job)?;
        Ok(handle)
    }

    /// Submits a request whose text arrives in pieces: `req.speech.text` is the first
    /// piece (may be empty), the rest goes through the returned [`TextSender`]. The text
    /// mode must be [`TextMode::Stream`]: the talker consumes one text token per frame and
    /// waits when the next one has not arrived.
    pub fn submit_streaming_text(
        &self,
        req: SynthesisRequest,
    ) -> Result<(RequestHandle, TextSender), SubmitError> {
        self.check_open()?;
        if req.speech.text_mode != TextMode::Stream {
            return Err(RequestError::Unsupported(
                "streamed text input needs the `stream` text mode".into(),
            )
            .into());
        }
        req.sampling.validate()?;
        let m = &self.inner.model;
        let prefix = build_streaming_prefix(&m.config, &m.tokenizer, &req.speech)?;
        let (text_tx, text_rx) = mpsc::channel();
        let (handle, job) = self.job(&req, JobPrompt::Streamed(prefix), Some(text_rx));
        let mut sender = TextSender::new(
            m.clone(),
            text_tx,
            handle.shared.clone(),
            self.inner.wake.clone(),
            self.inner.config.max_text_chars,
        );
        if !req.speech.text.is_empty() {
            sender.push(&req.speech.text).map_err(|e| match e {
                TextError::TooLong { max } => SubmitError::Invalid(RequestError::TextTooLong {
                    chars: req.speech.text.chars().count(),
                    max,
                }),
                other => SubmitError::Internal(other.to_string()),
            })?;
        }
        self.enqueue(job)?;
        Ok((handle, sender))
    }

    /// Stops admitting requests and lets those in flight (queued ones included) finish
    /// until `grace` has passed; then they fail with `ShuttingDown`. Returns at once.
    pub fn shutdown(&self, grace: Duration) {
        let _ = self.inner.shared.shutdown.set(Instant::now() + grace);
        let _ = self.inner.wake.try_send(());
    }

    /// Blocks until the engine thread has stopped (after [`shutdown`](Self::shutdown), or
    /// once every handle is dropped). Call from a blocking context.
    pub fn join(&self) {
        let thread = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            if t.join().is_err() {
                tracing::error!("the engine thread panicked");
            }
        }
    }

    /// Whether the engine thread has stopped.
    pub fn is_stopped(&self) -> bool {
        self.inner.shared.stopped.load(Ordering::Acquire)
    }

    fn check_open(&self) -> Result<(), SubmitError> {
        if self.inner.shared.shutdown.get().is_some() || self.is_stopped() {
            return Err(SubmitError::ShuttingDown);
        }
        Ok(())
    }

    fn check_length(&self, chars: usize) -> Result<(), SubmitError> {
        let max = self.inner.config.max_text_chars;
        if chars > max {
            return Err(RequestError::TextTooLong { chars, max }.into());
        }
        Ok(())
    }

    /// A text too long for one generation in segments (`segment`): the first segment's
    /// prompt and characters, and the later segments'. A text that fits (or whose reply
    /// length `max_frames` fixes) stays whole.
    #[allow(clippy::type_complexity)]
    fn segments(
        &self,
        req: &SynthesisRequest,
        prompt: Prompt,
        chars: usize,
    ) -> Result<(Prompt, usize, Vec<(Prompt, usize)>), SubmitError> {
        let inner = &self.inner;
        let max_frames = inner.config.frame_cap_for(&inner.model).hard_max;
        let budget = FRAMES_PER_TOKEN_BUDGET * prompt.body_len;
        let fits = prompt.positions.len() + budget <= inner.max_positions && budget <= max_frames;
        if fits || req.max_frames.is_some() {
            return Ok((prompt, chars, Vec::new()));
        }
        let overhead = overhead_positions(&prompt);
        let max_tokens = max_tokens_per_generation(overhead, inner.max_positions, max_frames);
        let tokenizer = &inner.model.tokenizer;
        let count = |s: &str| tokenizer.encode(s).map_or(usize::MAX, |ids| ids.len());
        let mut parts = Vec::new();
        for text in split(&req.speech.text, max_tokens, &count) {
            let speech = SpeechRequest {
                text,
                ..req.speech.clone()
            };
            let p = inner.model.prompt(&speech)?;
            parts.push((p, speech.text.chars().count()));
        }
        tracing::debug!(
            segments = parts.len(),
            max_tokens,
            body_tokens = prompt.body_len,
            "text spoken in segments"
        );
        let mut parts = parts.into_iter();
        let Some((first, first_chars)) = parts.next() else {
            return Ok((prompt, chars, Vec::new()));
        };
        Ok((first, first_chars, parts.collect()))
    }

    fn job(
        &self,
        req: &SynthesisRequest,
        prompt: JobPrompt,
        text: Option<mpsc::Receiver<TextMsg>>,
    ) -> (RequestHandle, Job<ChannelClient>) {
        let inner = &self.inner;
        let id = RequestId(inner.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = tokio::sync::mpsc::channel(inner.config.audio_buffer_chunks);
        let shared = Arc::new(RequestShared::default());
        let limit = match req.max_frames {
            Some(n) => FrameLimit::Fixed(n),
            None => FrameLimit::Derived {
                cap: inner.config.frame_cap_for(&inner.model),
                random_model: inner.model.is_random(),
            },
        };
        let job = Job {
            id,
            sampling: req.sampling,
            prompt,
            limit,
            submitted_at: crate::clock::Clock::now(&inner.clock),
            client: ChannelClient {
                events: tx,
                shared: shared.clone(),
                text,
            },
        };
        let handle = RequestHandle {
            id,
            seed: req.sampling.seed,
            events: rx,
            shared,
            wake: inner.wake.clone(),
        };
        (handle, job)
    }

    fn enqueue(&self, job: Job<ChannelClient>) -> Result<(), SubmitError> {
        match self.inner.inbox.try_send(job) {
            Ok(()) => {
                let _ = self.inner.wake.try_send(());
                Ok(())
            }
            Err(TrySendError::Full(_)) => Err(SubmitError::QueueFull {
                capacity: self.inner.config.queue_capacity,
                retry_after: self.inner.config.retry_after,
            }),
            Err(TrySendError::Disconnected(_)) => Err(SubmitError::ShuttingDown),
        }
    }
}

/// One request's events. Dropping it cancels the request.
#[derive(Debug)]
pub struct RequestHandle {
    id: RequestId,
    seed: u64,
    events: tokio::sync::mpsc::Receiver<Event>,
    shared: Arc<RequestShared>,
    wake: Sender<()>,
}

impl RequestHandle {
    pub fn id(&self) -> RequestId {
        self.id
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next event; `None` once the request is over (after `Done`/`Failed`, or when it
    /// was cancelled).
    pub async fn recv(&mut self) -> Option<Event> {
        let event = self.events.recv().await;
        self.after_recv();
        event
    }

    /// [`recv`](Self::recv) for threads outside an async runtime (panics inside one, as
    /// tokio's `blocking_recv` does).
    pub fn blocking_recv(&mut self) -> Option<Event> {
        let event = self.events.blocking_recv();
        self.after_recv();
        event
    }

    /// Cancels the request: its slot is freed before the engine's next step.
    pub fn cancel(&self) {
        cancel(&self.shared, &self.wake);
    }

    /// A handle that can cancel this request from elsewhere (another task).
    pub fn canceller(&self) -> Canceller {
        Canceller {
            shared: self.shared.clone(),
            wake: self.wake.clone(),
        }
    }

    fn after_recv(&self) {
        // The engine paused this request because our channel was full: we made room.
        if self.shared.paused.swap(false, Ordering::AcqRel) {
            let _ = self.wake.try_send(());
        }
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// Cancels one request; cloneable and sendable.
#[derive(Debug, Clone)]
pub struct Canceller {
    shared: Arc<RequestShared>,
    wake: Sender<()>,
}

impl Canceller {
    pub fn cancel(&self) {
        cancel(&self.shared, &self.wake);
    }
}

fn cancel(shared: &RequestShared, wake: &Sender<()>) {
    if !shared.cancelled.swap(true, Ordering::AcqRel) {
        let _ = wake.try_send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    #[test]
    fn handles_cross_threads_and_tasks() {
        send_sync::<EngineHandle>();
        send_sync::<Canceller>();
        send::<RequestHandle>();
        send::<TextSender>();
        send::<Event>();
    }
}
