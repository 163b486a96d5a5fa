//! Errors of the model crate: loading (files, configs, tensors, tokenizer), request
//! validation (voice, language, text) and backend failures.

use std::path::PathBuf;

/// Everything that can go wrong while loading a model or preparing a request.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {message}")]
    Json { path: PathBuf, message: String },
    #[error("{path}: field `{field}`: {message}")]
    Config {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("tensor `{name}` not found in the checkpoint ({searched})")]
    MissingTensor { name: String, searched: String },
    #[error("tensor `{name}` in {path}: shape {actual:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        path: PathBuf,
        actual: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("tensor `{name}` in {path}: unsupported dtype {dtype}")]
    TensorDtype {
        name: String,
        path: PathBuf,
        dtype: String,
    },
    #[error("text tokenizer: {0}")]
    Tokenizer(String),
    #[error(
        "unknown model `{0}`: give a checkpoint directory, `demo`, `random:1.7b` or `random:0.6b` (`-base` appended: a Base model)"
    )]
    UnknownModel(String),
    #[error(transparent)]
    Request(#[from] RequestError),
}

impl ModelError {
    /// A voice-clone reference recording that cannot be used ([`RequestError::BadReference`]).
    pub(crate) fn bad_reference(message: impl Into<String>) -> Self {
        RequestError::BadReference(message.into()).into()
    }
}

/// A request that cannot be served as asked. Every variant is the client's to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("text is empty")]
    EmptyText,
    #[error("text is too long: {chars} characters, at most {max}")]
    TextTooLong { chars: usize, max: usize },
    #[error("unknown voice `{voice}`; this model has: {available}")]
    UnknownVoice { voice: String, available: String },
    #[error("this {kind} model takes no preset voice (got `{voice}`); {hint}")]
    VoiceNotSupported {
        kind: String,
        voice: String,
        hint: &'static str,
    },
    #[error("this base model clones a voice from reference audio: give `ref_audio`")]
    ReferenceRequired,
    #[error("reference audio clones a voice with a base model; this is a {kind} model")]
    ReferenceNotSupported { kind: String },
    #[error("in-context cloning needs the reference audio's transcript (`ref_text`), or use the speaker vector alone (`x_vector_only_mode`)")]
    ReferenceTextRequired,
    #[error("{0}")]
    BadReference(String),
    #[error("this model needs a voice; available: {available}")]
    VoiceRequired { available: String },
    #[error("unknown language `{language}`; supported: {supported}")]
    UnknownLanguage { language: String, supported: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("invalid sampling parameter `{field}`: {message}")]
    Sampling {
        field: &'static str,
        message: String,
    },
}

/// A failure inside a backend call. The engine fails the affected requests with it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("no free slot (capacity {capacity})")]
    NoFreeSlot { capacity: usize },
    #[error("unknown or freed slot {0}")]
    BadSlot(u32),
    #[error("slot {slot}: {message}")]
    SlotState { slot: u32, message: String },
    #[error("context of slot {slot} is full ({capacity} positions)")]
    ContextFull { slot: u32, capacity: usize },
    #[error("device error: {0}")]
    Device(String),
}
