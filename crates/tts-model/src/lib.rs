//! Qwen3-TTS model crate: everything about the model that is not GPU code, scheduling or
//! HTTP. Configs, checkpoints, the text tokenizer, prompt building, sampling, the
//! [`backend::Backend`] trait and the CPU reference backend (the executable spec).

#![recursion_limit = "256"]

pub mod backend;
pub mod builtin;
pub mod checkpoint;
pub mod clone;
pub mod config;
pub mod error;
pub mod fp8;
pub mod generate;
pub mod model;
mod pretokenize;
pub mod prompt;
pub mod reference;
pub mod sampling;
#[cfg(test)]
mod test_texts;
pub mod text_stream;
pub mod tokenizer;
pub mod weights;

pub use backend::{Backend, BackendInfo, CodecRow, Frame, PrefillRow, SlotId, StepRow};
pub use error::{BackendError, ModelError, RequestError};
pub use fp8::Fp8Scope;
pub use model::{LoadOptions, Model};
pub use prompt::{Prompt, SpeechRequest, TextMode};
pub use sampling::SamplingParams;
