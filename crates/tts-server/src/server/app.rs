//! The router: every route, the fallbacks (404/405 in OpenAI's error envelope) and the
//! middleware (request id and metrics outermost, then API keys).

use axum::middleware::from_fn_with_state;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;

use super::auth;
use super::error::ApiError;
use super::middleware;
use super::routes::{health, metrics, models, playground, speech, stream_ws, voices};
use super::state::AppState;

/// The whole HTTP API over `state`.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/", get(playground::page))
        .route("/playground.js", get(playground::script))
        .route("/playground.css", get(playground::style))
        .route("/v1/audio/speech", post(speech::speech))
        .route("/v1/audio/speech/stream", get(stream_ws::stream))
        .route("/v1/audio/voices", get(voices::voices))
        .route("/v1/models", get(models::models))
        .route("/health", get(health::health))
        .route("/ready", get(health::ready))
        .route("/metrics", get(metrics::metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), auth::require_key))
        .layer(from_fn_with_state(state.clone(), middleware::request_id))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> impl IntoResponse {
    ApiError::not_found(format!("no route {}", uri.path()))
}

async fn method_not_allowed() -> impl IntoResponse {
    ApiError::method_not_allowed()
}
