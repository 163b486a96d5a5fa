//! The WebSocket session of `GET /v1/audio/speech/stream`, written over any message
//! `Sink`/`Stream` so that it runs (and is tested) without a network. Protocol:
//! `docs/protocol.md`.
//!
//! Client -> server (JSON text messages): `start` (voice, language, response_format,
//! instructions, seed, sampling; optional first `text`), `text` (append), `end` (or
//! `flush`: no more text), `cancel`. Server -> client: `started`, binary frames of encoded
//! audio, `done` (with usage), `cancelled`, `error`. One utterance at a time; after `done`
//! (or `cancelled`, or an `error` that ended it) the client may `start` another.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use serde_json::{json, Map, Value};
use tts_engine::{Event, RequestFailure, RequestHandle, TextError, TextSender};

use super::admission;
use super::error::ApiError;
use super::metrics::StreamGuard;
use super::params::{self, Fields};
use super::state::AppState;
use super::usage::usage_json;
use crate::audio::{self, AudioFormat, AudioOut};

/// A message from the client, transport details removed.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMsg {
    Text(String),
    Binary(Vec<u8>),
    Close,
}

/// A message to the client.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerMsg {
    Text(String),
    Binary(Bytes),
    /// Close with a code (1000 normal, 1001 going away, 1008 policy) and a reason.
    Close(u16, String),
}

/// One utterance being generated.
struct Utterance {
    id: String,
    handle: RequestHandle,
    /// `None` once the client ended the text.
    text: Option<TextSender>,
    audio: AudioOut,
    format: AudioFormat,
    guard: StreamGuard,
    started: Instant,
    admitted: Option<Instant>,
    first_sent: bool,
}

/// Why the session ends.
enum Flow {
    Continue,
    Stop,
}

struct Session<S> {
    state: AppState,
    sink: S,
    session_id: String,
    utterances: u64,
    current: Option<Utterance>,
    write_timeout: Duration,
}

/// Runs one session to its end. `session_id` names it in logs and prefixes utterance ids.
pub async fn run<S, R>(state: AppState, sink: S, mut stream: R, session_id: String)
where
    S: Sink<ServerMsg> + Unpin,
    S::Error: std::fmt::Display,
    R: Stream<Item = ClientMsg> + Unpin,
{
    let _open = state.session_opened();
    let idle = state.config().timeouts.ws_idle;
    let mut shutdown = state.shutdown_signal();
    let mut shutting_down = state.is_shutting_down();
    let mut s = Session {
        write_timeout: state.config().timeouts.write,
        state,
        sink,
        session_id,
        utterances: 0,
        current: None,
    };
    let mut idle_deadline = tokio::time::Instant::now() + idle;
    tracing::debug!(session = %s.session_id, "websocket session open");
    loop {
        if shutting_down && s.current.is_none() {
            let _ = s
                .send(ServerMsg::Close(1001, "server shutting down".into()))
                .await;
            break;
        }
        // Idle = nothing is being generated, or we wait for the client's text.
        let idle_applies = s.current.as_ref().is_none_or(|u| u.text.is_some());
        let flow = tokio::select! {
            msg = stream.next() => {
                idle_deadline = tokio::time::Instant::now() + idle;
                match msg {
                    None | Some(ClientMsg::Close) => Flow::Stop,
                    Some(ClientMsg::Binary(_)) => {
                        s.error(ApiError::bad_request("invalid_message", "binary messages are not accepted: send JSON text messages")).await
                    }
                    Some(ClientMsg::Text(t)) => s.on_client(&t).await,
                }
            }
            ev = next_event(&mut s.current) => s.on_event(ev).await,
            _ = tokio::time::sleep_until(idle_deadline), if idle_applies => {
                let _ = s.error(ApiError::request_timeout(format!(
                    "no message for {:.0} s: closing the session", idle.as_secs_f64()
                ))).await;
                let _ = s.send(ServerMsg::Close(1000, "idle timeout".into())).await;
                Flow::Stop
            }
            _ = shutdown.changed(), if !shutting_down => {
                shutting_down = true;
                Flow::Continue
            }
        };
        if matches!(flow, Flow::Stop) {
            break;
        }
    }
    tracing::debug!(session = %s.session_id, "websocket session closed");
    // Dropping an unfinished utterance cancels it.
}

async fn next_event(current: &mut Option<Utterance>) -> Option<Event> {
    match current {
        Some(u) => u.handle.recv().await,
        None => std::future::pending().await,
    }
}

impl<S> Session<S>
where
    S: Sink<ServerMsg> + Unpin,
    S::Error: std::fmt::Display,
{
    /// Sends one message; a stalled or gone client ends the session.
    async fn send(&mut self, msg: ServerMsg) -> Flow {
        match tokio::time::timeout(self.write_timeout, self.sink.send(msg)).await {
            Ok(Ok(())) => Flow::Continue,
            Ok(Err(e)) => {
                tracing::debug!(session = %self.session_id, error = %e, "websocket send failed");
                Flow::Stop
            }
            Err(_) => {
                tracing::warn!(session = %self.session_id, "websocket client stalled: closing");
                Flow::Stop
            }
        }
    }

    async fn send_json(&mut self, v: Value) -> Flow {
        self.send(ServerMsg::Text(v.to_string())).await
    }

    /// An `error` event; the session goes on.
    async fn error(&mut self, e: ApiError) -> Flow {
        let mut v = e.body();
        v["type"] = json!("error");
        if let Some(u) = &self.current {
            v["request_id"] = json!(u.id);
        }
        if let Some(secs) = e.retry_after_secs() {
            v["error"]["retry_after"] = json!(secs);
        }
        self.send_json(v).await
    }

    async fn on_client(&mut self, text: &str) -> Flow {
        let map = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                return self
                    .error(ApiError::bad_request(
                        "invalid_message",
                        "messages must be JSON objects",
                    ))
                    .await
            }
            Err(e) => {
                return self
                    .error(ApiError::bad_request(
                        "invalid_json",
                        format!("invalid JSON: {e}"),
                    ))
                    .await
            }
        };
        let kind = match Fields::new(&map).required_string("type", "invalid_message") {
            Ok(k) => k.to_string(),
            Err(e) => return self.error(e).await,
        };
        match kind.as_str() {
            "start" => self.start(&map).await,
            "text" => self.text(&map).await,
            "end" | "flush" => self.end().await,
            "cancel" => self.cancel().await,
            other => {
                self.error(ApiError::invalid(
                    "type",
                    "invalid_message",
                    format!("unknown message type `{other}` (start, text, end, cancel)"),
                ))
                .await
            }
        }
    }

    async fn start(&mut self, map: &Map<String, Value>) -> Flow {
        if self.current.is_some() {
            return self
                .error(ApiError::bad_request(
                    "busy",
                    "an utterance is already running: send `end` and wait for `done`, or `cancel`",
                ))
                .await;
        }
        match self.try_start(map).await {
            Ok(u) => {
                tracing::info!(request_id = %u.id, format = %u.format, seed = u.handle.seed(), "websocket utterance admitted");
                self.current = Some(u);
                Flow::Continue
            }
            Err(e) => self.error(e).await,
        }
    }

    async fn try_start(&mut self, map: &Map<String, Value>) -> Result<Utterance, ApiError> {
        let state = &self.state;
        let p = params::ws_start(map, state.catalog(), state.limits())?;
        let first = Fields::new(map).string("text")?.unwrap_or("").to_string();
        if first.chars().count() > state.config().max_input_chars {
            params::check_text("text", &first, state.limits())?;
        }
        let encoder = audio::encoder(p.format, state.model().sample_rate()).map_err(|e| {
            tracing::error!(error = %e, "cannot make the encoder");
            ApiError::internal()
        })?;
        admission::ready_engine(state)?;
        let clone = admission::cloned_voice(state, &p).await?;
        let (handle, text) = admission::submit_streaming(state, first, &p, clone)?;
        self.utterances += 1;
        Ok(Utterance {
            id: format!("{}-{}", self.session_id, self.utterances),
            handle,
            text: Some(text),
            audio: AudioOut::new(encoder, p.speed, state.model().sample_rate()),
            format: p.format,
            guard: state.metrics().stream_opened("websocket"),
            started: Instant::now(),
            admitted: None,
            first_sent: false,
        })
    }

    async fn text(&mut self, map: &Map<String, Value>) -> Flow {
        let piece = match Fields::new(map).required_string("text", "invalid_value") {
            Ok(t) => t.to_string(),
            Err(e) => return self.error(e).await,
        };
        let Some(sender) = self.current.as_mut().and_then(|u| u.text.as_mut()) else {
            return self
                .error(ApiError::bad_request(
                    "no_utterance",
                    "no utterance is taking text: send `start` first",
                ))
                .await;
        };
        match sender.push(&piece) {
            Ok(()) => Flow::Continue,
            Err(TextError::TooLong { max }) => {
                let e = ApiError::invalid(
                    "text",
                    "input_too_long",
                    format!("the text is too long: at most {max} characters; the utterance is cancelled"),
                );
                let flow = self.error(e).await;
                self.current = None;
                flow
            }
            // The request already ended; its outcome arrives as an event.
            Err(TextError::Closed) => Flow::Continue,
            Err(TextError::Tokenizer(detail)) => {
                tracing::error!(%detail, "tokenizing streamed text failed");
                let flow = self.error(ApiError::internal()).await;
                self.current = None;
                flow
            }
        }
    }

    async fn end(&mut self) -> Flow {
        let Some(u) = self.current.as_mut() else {
            return self
                .error(ApiError::bad_request(
                    "no_utterance",
                    "no utterance is running",
                ))
                .await;
        };
        if let Some(sender) = u.text.take() {
            if let Err(e) = sender.finish() {
                tracing::debug!(error = %e, "ending streamed text");
            }
        }
        Flow::Continue
    }

    async fn cancel(&mut self) -> Flow {
        match self.current.take() {
            Some(u) => {
                u.handle.cancel();
                let id = u.id.clone();
                // The guard counts this as a client-side end, as a disconnect would.
                drop(u);
                tracing::info!(request_id = %id, "websocket utterance cancelled by the client");
                self.send_json(json!({"type": "cancelled", "request_id": id}))
                    .await
            }
            None => {
                self.error(ApiError::bad_request(
                    "no_utterance",
                    "no utterance is running",
                ))
                .await
            }
        }
    }

    async fn on_event(&mut self, ev: Option<Event>) -> Flow {
        let Some(u) = self.current.as_mut() else {
            return Flow::Continue;
        };
        match ev {
            Some(Event::Started(st)) => {
                u.admitted = Some(Instant::now());
                let v = json!({
                    "type": "started",
                    "request_id": u.id,
                    "sample_rate": st.sample_rate,
                    "seed": st.seed,
                    "format": u.format.name(),
                    "queue_wait_ms": st.queue_wait.as_secs_f64() * 1e3,
                });
                self.send_json(v).await
            }
            Some(Event::Audio(pcm)) => match u.audio.push(pcm) {
                Ok(bytes) if bytes.is_empty() => Flow::Continue,
                Ok(bytes) => {
                    if !u.first_sent {
                        u.first_sent = true;
                        self.state.metrics().first_audio(u.started.elapsed());
                    }
                    self.send(ServerMsg::Binary(Bytes::from(bytes))).await
                }
                Err(e) => {
                    tracing::error!(error = %e, "encoding failed");
                    self.fail(ApiError::internal()).await
                }
            },
            Some(Event::Done(usage)) => {
                let Some(mut u) = self.current.take() else {
                    return Flow::Continue;
                };
                u.guard.finished();
                if let (Some(t), true) = (u.admitted, usage.audio_seconds > 0.0) {
                    self.state
                        .metrics()
                        .real_time_factor(t.elapsed().as_secs_f64() / usage.audio_seconds);
                }
                let tail = match u.audio.finish() {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::error!(error = %e, "finishing the encoder failed");
                        return self.error(ApiError::internal()).await;
                    }
                };
                if !tail.is_empty() {
                    if let Flow::Stop = self.send(ServerMsg::Binary(Bytes::from(tail))).await {
                        return Flow::Stop;
                    }
                }
                let sr = self.state.model().sample_rate();
                tracing::info!(request_id = %u.id, frames = usage.frames, "websocket utterance done");
                let v = json!({
                    "type": "done",
                    "request_id": u.id,
                    "usage": usage_json(&usage, u.audio.samples(), sr),
                });
                self.send_json(v).await
            }
            Some(Event::Failed(why)) => {
                let e = match why {
                    RequestFailure::EmptyText => {
                        ApiError::invalid("text", "empty_input", "the utterance's text is empty")
                    }
                    RequestFailure::ShuttingDown => {
                        ApiError::shutting_down(self.state.retry_after())
                    }
                    RequestFailure::Backend => ApiError::internal(),
                };
                self.fail(e).await
            }
            None => self.fail(ApiError::internal()).await,
        }
    }

    /// Ends the current utterance with an error event.
    async fn fail(&mut self, e: ApiError) -> Flow {
        let flow = self.error(e).await;
        if let Some(mut u) = self.current.take() {
            u.guard.finished();
        }
        flow
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::mpsc;

    use super::*;
    use crate::server::catalog::Catalog;
    use crate::server::config::ServerConfig;
    use crate::server::metrics::ServerMetrics;

    /// A session over in-memory channels: (to the session, from the session).
    fn session(state: AppState) -> (mpsc::Sender<ClientMsg>, mpsc::Receiver<ServerMsg>) {
        let (in_tx, in_rx) = mpsc::channel::<ClientMsg>(16);
        let (out_tx, out_rx) = mpsc::channel::<ServerMsg>(1024);
        let sink = futures_util::sink::unfold(out_tx, |tx, m: ServerMsg| async move {
            tx.send(m).await.map_err(|_| "closed")?;
            Ok::<_, &str>(tx)
        });
        let stream = futures_util::stream::unfold(in_rx, |mut rx| async move {
            rx.recv().await.map(|m| (m, rx))
        });
        tokio::spawn(run(state, Box::pin(sink), Box::pin(stream), "t".into()));
        (in_tx, out_rx)
    }

    async fn event(rx: &mut mpsc::Receiver<ServerMsg>) -> (Value, usize) {
        let mut audio = 0;
        loop {
            match rx.recv().await.expect("session alive") {
                ServerMsg::Text(t) => return (serde_json::from_str(&t).unwrap(), audio),
                ServerMsg::Binary(b) => audio += b.len(),
                ServerMsg::Close(..) => panic!("closed"),
            }
        }
    }

    fn text(v: Value) -> ClientMsg {
        ClientMsg::Text(v.to_string())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_without_a_network() {
        let config = ServerConfig::default();
        let model = Arc::new(tts_model::Model::load("demo", Default::default()).unwrap());
        let catalog = Catalog::new(&model, &[], &[]).unwrap();
        let state = AppState::new(config, model, catalog, ServerMetrics::new().unwrap(), None);
        let s = state.clone();
        tokio::task::spawn_blocking(move || super::super::start_engine(&s))
            .await
            .unwrap()
            .unwrap();
        let (tx, mut rx) = session(state.clone());

        tx.send(text(json!({"type": "start", "text": "Hello, "})))
            .await
            .unwrap();
        let (started, _) = event(&mut rx).await;
        assert_eq!(started["type"], "started");
        assert_eq!(started["request_id"], "t-1");
        tx.send(text(json!({"type": "text", "text": "world."})))
            .await
            .unwrap();
        tx.send(text(json!({"type": "end"}))).await.unwrap();
        let (done, audio) = event(&mut rx).await;
        assert_eq!(done["type"], "done", "{done}");
        assert_eq!(
            audio as u64,
            2 * done["usage"]["audio_samples"].as_u64().unwrap()
        );

        tx.send(text(json!({"type": "start"}))).await.unwrap();
        assert_eq!(event(&mut rx).await.0["type"], "started");
        tx.send(text(json!({"type": "cancel"}))).await.unwrap();
        let (cancelled, _) = event(&mut rx).await;
        assert_eq!(cancelled, json!({"type": "cancelled", "request_id": "t-2"}));

        // Closing ends the session.
        tx.send(ClientMsg::Close).await.unwrap();
        assert!(rx.recv().await.is_none());
        state.sessions().idle().await;
        state.begin_shutdown();
        if let Some(e) = state.engine() {
            e.shutdown(Duration::ZERO);
        }
    }
}
