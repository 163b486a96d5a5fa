//! `GET /v1/audio/speech/stream` WebSocket: one connection per request. The client sends
//! `start`, the text as one `text` message, and `end`; binary frames are PCM (fed to the
//! stream trace), text frames are JSON events (`started`, `done`, `error`). The request is
//! "sent" when the connection is opened, so the upgrade counts towards TTFB and TTFA (its
//! own time is recorded as `connect_ms`).

use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use hyper::header::{HeaderValue, AUTHORIZATION, RETRY_AFTER};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::client::CallError;
use crate::client_http::{error_chain, error_message};
use crate::record::CallInfo;
use crate::spec::BenchSpec;
use crate::stream::StreamTrace;

#[derive(Debug, Clone)]
pub struct WsClient {
    url: String,
    auth: Option<String>,
}

impl WsClient {
    pub fn new(spec: &BenchSpec) -> Self {
        Self {
            url: spec.ws_url.clone(),
            auth: spec.api_key.as_ref().map(|k| format!("Bearer {k}")),
        }
    }

    pub async fn speak(
        &self,
        spec: &BenchSpec,
        text: &str,
        request_id: &str,
        sent: Instant,
        trace: &mut StreamTrace,
        info: &mut CallInfo,
    ) -> Result<(), CallError> {
        let mut req = self
            .url
            .as_str()
            .into_client_request()
            .map_err(|e| CallError::Protocol(e.to_string()))?;
        let header = |v: &str| {
            HeaderValue::from_str(v).map_err(|_| CallError::Protocol(format!("bad header {v:?}")))
        };
        req.headers_mut()
            .insert("x-request-id", header(request_id)?);
        if let Some(a) = &self.auth {
            let mut v = header(a)?;
            v.set_sensitive(true);
            req.headers_mut().insert(AUTHORIZATION, v);
        }

        let (mut ws, resp) = tokio_tungstenite::connect_async_with_config(req, None, true)
            .await
            .map_err(handshake_error)?;
        info.connect = Some(sent.elapsed());
        info.request_id = resp
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);

        // Send the whole request; a failure here may still be explained by an error event
        // already on its way, so it is reported only if the reading below finds nothing.
        let messages = [
            spec.ws_start(),
            json!({"type": "text", "text": text}),
            json!({"type": "end"}),
        ];
        let mut send_error = None;
        for m in messages {
            if let Err(e) = ws.send(Message::text(m.to_string())).await {
                send_error = Some(CallError::Transport(format!("send: {}", error_chain(&e))));
                break;
            }
        }

        while let Some(msg) = ws.next().await {
            let msg = msg.map_err(|e| CallError::Transport(error_chain(&e)))?;
            match msg {
                Message::Binary(pcm) => trace.push(sent.elapsed(), &pcm),
                Message::Text(t) => {
                    let event: Value = serde_json::from_str(t.as_str()).map_err(|e| {
                        CallError::Protocol(format!("event is not JSON ({e}): {t}"))
                    })?;
                    match event.get("type").and_then(Value::as_str) {
                        Some("started") => {
                            if let Some(sr) = event.get("sample_rate").and_then(Value::as_u64) {
                                let sr =
                                    u32::try_from(sr).ok().filter(|&r| r > 0).ok_or_else(|| {
                                        CallError::Protocol(format!("sample_rate {sr}"))
                                    })?;
                                trace.set_sample_rate(sr);
                            }
                            if let Some(id) = event.get("request_id").and_then(Value::as_str) {
                                info.request_id = Some(id.to_string());
                            }
                        }
                        Some("done") => {
                            // Best effort: the measurement is complete either way.
                            let _ = ws.close(None).await;
                            return Ok(());
                        }
                        Some("error") => {
                            let err = event.get("error");
                            let field = |k: &str| {
                                err.and_then(|e| e.get(k))
                                    .and_then(Value::as_str)
                                    .map(str::to_string)
                            };
                            info.retry_after = err
                                .and_then(|e| e.get("retry_after"))
                                .filter(|v| !v.is_null())
                                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
                            return Err(CallError::ErrorEvent {
                                code: field("code").or_else(|| field("type")),
                                message: field("message").unwrap_or_else(|| t.to_string()),
                            });
                        }
                        // Events this client does not use.
                        _ => {}
                    }
                }
                Message::Close(frame) => {
                    let why = frame
                        .map(|f| format!(" ({} {})", u16::from(f.code), f.reason))
                        .unwrap_or_default();
                    return Err(send_error
                        .unwrap_or(CallError::Transport(format!("closed before done{why}"))));
                }
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
        Err(send_error.unwrap_or(CallError::Transport("connection ended before done".into())))
    }
}

/// A refused upgrade (429/503/401 before the switch) is an HTTP error like on `POST`.
fn handshake_error(e: WsError) -> CallError {
    match e {
        WsError::Http(resp) => CallError::Http {
            status: resp.status().as_u16(),
            message: resp
                .body()
                .as_deref()
                .map(error_message)
                .unwrap_or_default(),
            retry_after: resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        },
        other => CallError::Transport(error_chain(&other)),
    }
}
