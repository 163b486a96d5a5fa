//! `GET /v1/models`: the loaded model and its aliases, as OpenAI lists models.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::server::state::AppState;

pub async fn models(State(state): State<AppState>) -> Json<Value> {
    let c = state.catalog();
    let data: Vec<Value> = c
        .model_names()
        .into_iter()
        .map(|id| {
            json!({
                "id": id,
                "object": "model",
                "created": 0,
                "owned_by": "qwen3-tts-server",
                "root": c.model,
                "kind": format!("{:?}", c.kind),
                "random_weights": c.random_weights,
            })
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}
