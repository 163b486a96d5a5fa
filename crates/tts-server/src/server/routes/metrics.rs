//! `GET /metrics`: Prometheus text exposition.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::server::state::AppState;

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let engine = state.engine();
    let load = engine.map(|e| e.load());
    let engines_ready = engine.map_or(0, |e| e.ready_count());
    let text = state
        .metrics()
        .render(load, state.is_ready(), engines_ready);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}
