//! Admission: readiness, then the engine's bounded queue. Everything here happens before
//! a response header is sent, so a refusal is a real status (400/429/503), never a broken
//! 200 stream.

use std::sync::Arc;
use tts_engine::{EnginePool, RequestHandle, SubmitError, SynthesisRequest, TextSender};

use tts_model::prompt::ClonedVoice;
use tts_model::{RequestError, SpeechRequest};

use super::catalog::VoiceChoice;
use super::error::ApiError;
use super::ids;
use super::params::VoiceParams;
use super::state::AppState;

/// The engine, when it accepts work.
pub fn ready_engine(state: &AppState) -> Result<&EnginePool, ApiError> {
    if state.is_shutting_down() {
        state.metrics().rejected("shutting_down");
        return Err(ApiError::shutting_down(state.retry_after()));
    }
    match state.engine() {
        Some(e) if e.is_ready() => Ok(e),
        Some(e) if e.is_stopped() => {
            state.metrics().rejected("shutting_down");
            Err(ApiError::shutting_down(state.retry_after()))
        }
        _ => {
            state.metrics().rejected("not_ready");
            Err(ApiError::not_ready(state.retry_after()))
        }
    }
}

/// The cloned voice of a request with a reference recording (Base models), before
/// admission: a bad recording is a 400.
pub async fn cloned_voice(
    state: &AppState,
    p: &VoiceParams,
) -> Result<Option<Arc<ClonedVoice>>, ApiError> {
    let Some(r) = &p.reference else {
        return Ok(None);
    };
    let cloning = state.cloning().ok_or_else(|| {
        ApiError::invalid(
            "ref_audio",
            "unsupported_value",
            "this server's model does not clone voices",
        )
    })?;
    cloning.voice(r).await.map(Some).inspect_err(|e| {
        if e.code == "queue_full" {
            state.metrics().rejected("queue_full");
        }
    })
}

/// The engine request for `text` with these parameters (and the voice cloned for them).
pub fn synthesis_request(
    state: &AppState,
    text: String,
    p: &VoiceParams,
    clone: Option<Arc<ClonedVoice>>,
) -> SynthesisRequest {
    let seed = p.seed.unwrap_or_else(ids::random_u64);
    let sampling = p.sampling.apply(state.model().default_sampling(seed));
    SynthesisRequest {
        speech: SpeechRequest {
            text,
            voice: match &p.voice {
                VoiceChoice::Speaker(s) => Some(s.clone()),
                VoiceChoice::None => None,
            },
            language: p.language.clone(),
            instructions: p.instructions.clone(),
            text_mode: p.text_mode,
            clone,
        },
        sampling,
        max_frames: None,
    }
}

/// Submits a request whose text is complete.
pub fn submit(
    state: &AppState,
    text: String,
    p: &VoiceParams,
    clone: Option<Arc<ClonedVoice>>,
) -> Result<RequestHandle, ApiError> {
    let engine = ready_engine(state)?;
    let req = synthesis_request(state, text, p, clone);
    engine.submit(req).map_err(|e| submit_error(state, e))
}

/// Submits a request whose text streams in (`first` may be empty).
pub fn submit_streaming(
    state: &AppState,
    first: String,
    p: &VoiceParams,
    clone: Option<Arc<ClonedVoice>>,
) -> Result<(RequestHandle, TextSender), ApiError> {
    let engine = ready_engine(state)?;
    let req = synthesis_request(state, first, p, clone);
    engine
        .submit_streaming_text(req)
        .map_err(|e| submit_error(state, e))
}

/// The answer to a refused submission.
pub fn submit_error(state: &AppState, e: SubmitError) -> ApiError {
    let m = state.metrics();
    match e {
        SubmitError::QueueFull {
            capacity,
            retry_after,
        } => {
            m.rejected("queue_full");
            ApiError::queue_full(capacity, retry_after)
        }
        SubmitError::ShuttingDown => {
            m.rejected("shutting_down");
            ApiError::shutting_down(state.retry_after())
        }
        SubmitError::Invalid(r) => {
            m.rejected("invalid");
            request_error(r)
        }
        SubmitError::Internal(detail) => {
            tracing::error!(%detail, "preparing a request failed");
            ApiError::internal()
        }
    }
}

/// A request the model cannot serve as asked, as a 400 naming the field.
pub fn request_error(e: RequestError) -> ApiError {
    let message = e.to_string();
    match e {
        RequestError::EmptyText => ApiError::invalid("input", "empty_input", message),
        RequestError::TextTooLong { .. } => ApiError::invalid("input", "input_too_long", message),
        RequestError::UnknownVoice { .. }
        | RequestError::VoiceNotSupported { .. }
        | RequestError::VoiceRequired { .. } => {
            ApiError::invalid("voice", "unknown_voice", message)
        }
        RequestError::UnknownLanguage { .. } => {
            ApiError::invalid("language", "unknown_language", message)
        }
        RequestError::Sampling { field, .. } => ApiError::invalid(field, "invalid_value", message),
        RequestError::ReferenceRequired | RequestError::BadReference(_) => {
            ApiError::invalid("ref_audio", "invalid_value", message)
        }
        RequestError::ReferenceNotSupported { .. } => {
            ApiError::invalid("ref_audio", "unsupported_value", message)
        }
        RequestError::ReferenceTextRequired => {
            ApiError::invalid("ref_text", "invalid_value", message)
        }
        RequestError::Unsupported(_) => ApiError::bad_request("unsupported", message),
    }
}
