//! `GET /v1/audio/speech/stream`: upgrades to a WebSocket and runs the session
//! (`server::ws_session`) over it.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::{SinkExt, StreamExt};

use crate::server::error::ApiError;
use crate::server::middleware::RequestId;
use crate::server::state::AppState;
use crate::server::ws_session::{self, ClientMsg, ServerMsg};

/// Largest client message (text pieces are small; `start` carries at most the limits,
/// and for a Base model a reference recording).
const MAX_MESSAGE_BYTES: usize = 1 << 20;

pub async fn stream(
    State(state): State<AppState>,
    Extension(RequestId(id)): Extension<RequestId>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let ws = match ws {
        Ok(ws) => ws,
        Err(e) => return ApiError::upgrade_required(e.body_text()).into_response(),
    };
    let max = MAX_MESSAGE_BYTES + state.reference_bytes();
    ws.max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| session(state, socket, id))
}

async fn session(state: AppState, socket: WebSocket, id: String) {
    let (sink, stream) = socket.split();
    let sink = sink.with(|m: ServerMsg| async move {
        Ok::<Message, axum::Error>(match m {
            ServerMsg::Text(t) => Message::Text(t.into()),
            ServerMsg::Binary(b) => Message::Binary(b),
            ServerMsg::Close(code, reason) => Message::Close(Some(axum::extract::ws::CloseFrame {
                code,
                reason: reason.into(),
            })),
        })
    });
    // Transport errors end the stream like a close; pings are answered by axum.
    let stream = stream
        .take_while(|m| std::future::ready(m.is_ok()))
        .filter_map(|m| {
            std::future::ready(match m {
                Ok(Message::Text(t)) => Some(ClientMsg::Text(t.to_string())),
                Ok(Message::Binary(b)) => Some(ClientMsg::Binary(b.to_vec())),
                Ok(Message::Close(_)) => Some(ClientMsg::Close),
                _ => None,
            })
        });
    ws_session::run(state, Box::pin(sink), Box::pin(stream), id).await;
}
