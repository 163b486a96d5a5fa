//! Errors of the engine's API: configuration and start-up, admission, streamed text, and
//! the failure a single request ends with.

use std::time::Duration;

use tts_model::{BackendError, ModelError, RequestError};

/// A bad engine configuration, or a start-up failure.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid engine configuration: {0}")]
    Invalid(String),
    #[error("warm-up failed: {0}")]
    Warmup(#[source] BackendError),
    #[error("cannot start the engine thread")]
    Thread(#[source] std::io::Error),
}

/// Why a request was not admitted. Nothing was queued.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The queue is full: try again later (HTTP 429 with `Retry-After`).
    #[error("the engine queue is full ({capacity} requests waiting)")]
    QueueFull {
        capacity: usize,
        /// A hint for `Retry-After`.
        retry_after: Duration,
    },
    /// The engine is shutting down or has stopped (HTTP 503).
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// The request cannot be served as asked; the client's to fix (HTTP 400).
    #[error(transparent)]
    Invalid(#[from] RequestError),
    /// Preparing the request failed on our side (HTTP 500; log it, do not send it).
    #[error("preparing the request failed: {0}")]
    Internal(String),
}

impl From<ModelError> for SubmitError {
    fn from(e: ModelError) -> Self {
        match e {
            ModelError::Request(r) => SubmitError::Invalid(r),
            other => SubmitError::Internal(other.to_string()),
        }
    }
}

/// Why a piece of streamed text was refused.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("text is too long: more than {max} characters")]
    TooLong { max: usize },
    /// The request is over (done, failed or cancelled); the text is not needed any more.
    #[error("the request is no longer running")]
    Closed,
    #[error("tokenizing the text failed: {0}")]
    Tokenizer(String),
}

/// How a request that had started ended without finishing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestFailure {
    /// The backend failed on this request. The engine logs the details; they are not
    /// the client's business.
    #[error("synthesis failed")]
    Backend,
    /// Streamed text ended before any text token arrived.
    #[error("text is empty")]
    EmptyText,
    /// The engine shut down before the request finished.
    #[error("the engine shut down before the request finished")]
    ShuttingDown,
}
