//! The streaming engine (DESIGN.md, "A request's path" and "Scheduling rules").
//!
//! One engine thread owns the [`Backend`](tts_model::Backend) and runs the model stage by
//! stage (prefill, code predictor, talker step, codec), batching rows of many requests per
//! call as the scheduler plans. Requests come in through [`EngineHandle::submit`] (or
//! [`EngineHandle::submit_streaming_text`] for text that arrives in pieces) and stream
//! their audio back as [`Event`]s on a bounded channel, trimmed of leading silence and cut
//! into chunks that grow after a small first one.
//!
//! Layout: `handle` and `text_input` (the API) -> `engine` (the thread) -> `core` + `exec`
//! (steps over request `state`s) -> `scheduler` (pure plan, knobs in `profile`). `onset`,
//! `trim`, `chunker` and `playback` are small pure pieces; `sim` runs the same core on
//! `fake_backend` with a simulated clock; `loadgen` drives a real engine (or the
//! simulator) with Poisson arrivals and reports `stats`.

pub mod chunker;
pub mod client;
pub mod clock;
pub mod config;
pub mod core;
mod engine;
pub mod error;
mod exec;
pub mod fake_backend;
pub mod handle;
pub mod loadgen;
pub mod metrics;
pub mod onset;
pub mod playback;
pub mod pool;
pub mod profile;
pub mod request;
pub mod scheduler;
pub mod segment;
pub mod sim;
pub mod state;
pub mod stats;
pub mod text_input;
pub mod trim;

pub use config::EngineConfig;
pub use error::{ConfigError, RequestFailure, SubmitError, TextError};
pub use handle::{Canceller, EngineHandle, EngineInfo, Load, RequestHandle};
pub use onset::{OnsetDetector, OnsetRule};
pub use pool::EnginePool;
pub use profile::{Fill, Policy, Profile};
pub use request::{EndReason, Event, RequestId, Started, SynthesisRequest, Usage};
pub use text_input::TextSender;
