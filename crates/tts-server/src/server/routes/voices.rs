//! `GET /v1/audio/voices`: the model's speakers, the aliases that map onto them, and the
//! languages a request may name.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::server::state::AppState;

pub async fn voices(State(state): State<AppState>) -> Json<Value> {
    let c = state.catalog();
    let data: Vec<Value> = c
        .voices
        .iter()
        .map(|v| {
            let aliases: Vec<&String> = c
                .voice_aliases
                .iter()
                .filter(|(_, s)| *s == v)
                .map(|(a, _)| a)
                .collect();
            json!({"id": v, "object": "voice", "name": v, "aliases": aliases})
        })
        .collect();
    Json(json!({
        "object": "list",
        "model": c.model,
        "voices": c.voices,
        "aliases": c.voice_aliases,
        "languages": c.languages,
        "data": data,
    }))
}
