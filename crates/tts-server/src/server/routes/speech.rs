//! `POST /v1/audio/speech`, OpenAI-compatible: read and check the body, admit the request,
//! then stream its audio (`stream_format: "audio"`) or SSE events (`"sse"`).

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use axum::Extension;
use futures_util::StreamExt;
use serde_json::Value;

use crate::audio::{self, AudioOut};
use crate::server::admission;
use crate::server::body::AudioBody;
use crate::server::error::ApiError;
use crate::server::middleware::RequestId;
use crate::server::params::{self, StreamFormat};
use crate::server::state::AppState;

/// Bytes a request body may have: generous for `max_input_chars` of JSON-escaped text.
pub fn body_limit(max_input_chars: usize) -> usize {
    64 * 1024 + 16 * max_input_chars
}

pub async fn speech(
    State(state): State<AppState>,
    Extension(RequestId(request_id)): Extension<RequestId>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    check_content_type(&headers)?;
    let limit = body_limit(state.config().max_input_chars) + state.reference_bytes();
    let bytes = read_body(body, limit, state.config().timeouts.body_read).await?;
    let json = parse_json(&bytes)?;
    let p = params::speech(&json, state.catalog(), state.limits())?;
    let sample_rate = state.model().sample_rate();
    // An encoder we cannot make is our failure; make it before admitting.
    let encoder = audio::encoder(p.voice.format, sample_rate).map_err(|e| {
        tracing::error!(error = %e, "cannot make the encoder");
        ApiError::internal()
    })?;
    // (readiness first: a server warming up answers 503 before cloning anything)
    admission::ready_engine(&state)?;
    let clone = admission::cloned_voice(&state, &p.voice).await?;
    let handle = admission::submit(&state, p.input, &p.voice, clone)?;
    let seed = handle.seed();
    tracing::info!(
        %request_id,
        engine_id = %handle.id(),
        format = %p.voice.format,
        sse = p.stream_format == StreamFormat::Sse,
        seed,
        "admitted"
    );
    let guard = state.metrics().stream_opened("http");
    let stream = AudioBody::new(
        state.clone(),
        handle,
        AudioOut::new(encoder, p.voice.speed, sample_rate),
        p.stream_format,
        request_id,
        received,
        sample_rate,
        guard,
    )
    .into_stream();
    let content_type = match p.stream_format {
        StreamFormat::Audio => p.voice.format.content_type(),
        StreamFormat::Sse => "text/event-stream",
    };
    let mut resp = Response::new(Body::from_stream(stream.boxed()));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-sample-rate", HeaderValue::from(sample_rate));
    h.insert("x-seed", HeaderValue::from(seed));
    // Proxies (nginx) must not buffer a stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

/// JSON only (a missing `Content-Type` is read as JSON).
pub fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let ct = ct.to_str().unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(ct))
    }
}

/// Reads the body, at most `limit` bytes, within `timeout`.
pub async fn read_body(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Vec<u8>, ApiError> {
    let read = async {
        let mut out = Vec::new();
        let mut seen = 0usize;
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                tracing::debug!(error = %e, "reading the request body failed");
                ApiError::bad_request("invalid_body", "the request body could not be read")
            })?;
            seen += chunk.len();
            // Past the limit, read on (a little) without keeping it, so that the client
            // is not reset mid-upload and gets to read the 413.
            if seen > 8 * limit {
                break;
            }
            if seen <= limit {
                out.extend_from_slice(&chunk);
            }
        }
        if seen > limit {
            return Err(ApiError::payload_too_large(limit));
        }
        Ok(out)
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| ApiError::request_timeout("the request body arrived too slowly"))?
}

/// The body as a JSON object.
pub fn parse_json(bytes: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!(
                "the request body is not valid UTF-8 (at byte {})",
                e.valid_up_to()
            ),
        )
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "invalid_json",
            "the request body is empty: send a JSON object",
        ));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request(
            "invalid_json",
            "the request body must be a JSON object",
        )),
        Err(e) => Err(ApiError::bad_request(
            "invalid_json",
            format!("the request body is not valid JSON: {e}"),
        )),
    }
}
