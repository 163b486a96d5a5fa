//! API errors: typed, mapped to a status code and to OpenAI's error envelope
//! `{"error": {"message", "type", "param", "code"}}`, which the OpenAI SDKs parse.
//! Internal details are logged where they happen, never sent to the client.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A stable machine-readable code.
    pub code: &'static str,
    /// Sent as `Retry-After` (whole seconds, at least 1).
    pub retry_after: Option<Duration>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
            code,
            retry_after: None,
        }
    }

    /// 400: a bad value (or a missing one) in field `param`.
    pub fn invalid(param: &str, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.to_string()),
            ..Self::new(StatusCode::BAD_REQUEST, code, message)
        }
    }

    /// 400: the request as a whole is malformed (not JSON, not an object, ...).
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "invalid_api_key", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "method not allowed on this route",
        )
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("request body larger than {limit} bytes"),
        )
    }

    pub fn unsupported_media_type(got: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("Content-Type `{got}` is not supported: send `application/json`"),
        )
    }

    /// 426: a plain request to the WebSocket route.
    pub fn upgrade_required(detail: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::UPGRADE_REQUIRED,
            "websocket_required",
            format!("this route speaks WebSocket only ({detail})"),
        )
    }

    pub fn request_timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", message)
    }

    /// 429: the queue is full.
    pub fn queue_full(capacity: usize, retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "queue_full",
                format!("the server is busy ({capacity} requests waiting); retry later"),
            )
        }
    }

    /// 503: still warming up.
    pub fn not_ready(retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                "the server is starting (model loading or warming up); retry later",
            )
        }
    }

    /// 503: shutting down.
    pub fn shutting_down(retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "the server is shutting down; retry on another instance",
            )
        }
    }

    /// 500: something failed on our side (already logged).
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "internal server error",
        )
    }

    /// OpenAI's error `type` for this status.
    pub fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "invalid_request_error",
            429 => "rate_limit_error",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The envelope: `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind(),
                "param": self.param,
                "code": self.code,
            }
        })
    }

    /// Whole seconds for `Retry-After`, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
            .map(|s| s.max(1))
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after_secs() {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_and_retry_after() {
        let e = ApiError::queue_full(4, Duration::from_millis(1500));
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.retry_after_secs(), Some(2));
        let b = e.body();
        assert_eq!(b["error"]["type"], "rate_limit_error");
        assert_eq!(b["error"]["code"], "queue_full");
        assert!(b["error"]["param"].is_null());
        let e = ApiError::invalid("speed", "unsupported_value", "no");
        assert_eq!(e.body()["error"]["param"], "speed");
        assert_eq!(e.body()["error"]["type"], "invalid_request_error");
        assert_eq!(
            ApiError::not_ready(Duration::ZERO).retry_after_secs(),
            Some(1)
        );
    }
}
