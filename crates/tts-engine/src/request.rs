//! What a client submits and what it gets back: the request, and the events on its audio
//! channel (`Started`, `Audio` chunks, then `Done` or `Failed`).

use std::time::Duration;

use tts_model::{SamplingParams, SpeechRequest};

use crate::error::RequestFailure;

/// An engine-wide request number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "req-{}", self.0)
    }
}

/// One utterance to synthesize.
#[derive(Debug, Clone)]
pub struct SynthesisRequest {
    /// Text, voice, language, instructions and text mode. With streamed text input
    /// (`EngineHandle::submit_streaming_text`) `speech.text` is the first piece (may be
    /// empty) and the text mode must be [`TextMode::Stream`](tts_model::TextMode::Stream).
    pub speech: SpeechRequest,
    /// Sampling settings, seed included (the same seed gives the same audio).
    pub sampling: SamplingParams,
    /// Most frames (80 ms each) to generate; `None` derives the limit from the text (the
    /// engine's frame cap; for random-weight models, the reply length of their text).
    pub max_frames: Option<usize>,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The model ended the utterance.
    Eos,
    /// The frame limit (runaway guard, or `max_frames`) ended it.
    FrameLimit,
}

/// The first event of every admitted request.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub id: RequestId,
    pub seed: u64,
    pub sample_rate: u32,
    /// Time from submission to admission (a slot was free).
    pub queue_wait: Duration,
}

/// What a finished request produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    /// Frames generated (the EOS frame excluded).
    pub frames: usize,
    /// Text tokens in the body.
    pub text_tokens: usize,
    /// Seconds of audio sent.
    pub audio_seconds: f64,
    /// Seconds of leading audio removed (bootstrap frames, silence before onset).
    pub trimmed_seconds: f64,
    pub end: EndReason,
    pub queue_wait: Duration,
    /// From submission to the first audio handed to the client's channel.
    pub time_to_first_audio: Option<Duration>,
    /// Estimated playback gaps, assuming the client plays audio as soon as it arrives.
    pub underruns: u32,
}

/// An event on a request's audio channel.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Admitted: a slot is assigned and generation begins.
    Started(Started),
    /// Mono PCM in [-1, 1] at the engine's sample rate. Leading silence is already trimmed.
    Audio(Vec<f32>),
    /// The last event of a request that finished.
    Done(Usage),
    /// The last event of a request that failed.
    Failed(RequestFailure),
}
