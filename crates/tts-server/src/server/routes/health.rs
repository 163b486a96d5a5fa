//! `GET /health` (the process is alive) and `GET /ready` (warmed up and accepting work;
//! 503 with `Retry-After` before that and while shutting down).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::server::error::ApiError;
use crate::server::state::AppState;

pub async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

pub async fn ready(State(state): State<AppState>) -> Response {
    if state.is_ready() {
        let load = state.engine().map(|e| e.load());
        return (
            StatusCode::OK,
            Json(json!({
                "status": "ready",
                "model": state.catalog().model,
                "queued": load.map(|l| l.queued),
                "active": load.map(|l| l.active),
            })),
        )
            .into_response();
    }
    if state.is_shutting_down() || state.engine().is_some_and(|e| e.is_stopped()) {
        ApiError::shutting_down(state.retry_after()).into_response()
    } else {
        ApiError::not_ready(state.retry_after()).into_response()
    }
}
