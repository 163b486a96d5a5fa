//! Request middleware: the `x-request-id` (echoed, or generated), the access log and the
//! per-route request counter.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use super::ids;
use super::state::AppState;

pub const REQUEST_ID: &str = "x-request-id";

/// The request's id, in the request's extensions for handlers.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Route label for metrics: the known routes, else `other` (bounded cardinality).
pub fn route_label(path: &str) -> &'static str {
    match path {
        "/v1/audio/speech" => "/v1/audio/speech",
        "/v1/audio/speech/stream" => "/v1/audio/speech/stream",
        "/v1/audio/voices" => "/v1/audio/voices",
        "/v1/models" => "/v1/models",
        "/health" => "/health",
        "/ready" => "/ready",
        "/metrics" => "/metrics",
        "/" | "/playground.js" | "/playground.css" => "/",
        _ => "other",
    }
}

pub async fn request_id(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|s| ids::valid_request_id(s))
        .map(str::to_string)
        .unwrap_or_else(ids::request_id);
    req.extensions_mut().insert(RequestId(id.clone()));
    let method = req.method().clone();
    let route = route_label(req.uri().path());
    let t0 = Instant::now();
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    let status = resp.status().as_u16();
    state.metrics().http_request(route, status);
    let level_info = route != "/health" && route != "/ready" && route != "/metrics";
    if level_info {
        tracing::info!(request_id = %id, %method, route, status, took_ms = t0.elapsed().as_secs_f64() * 1e3, "request");
    } else {
        tracing::debug!(request_id = %id, %method, route, status, "request");
    }
    resp
}
