//! What the HTTP and WebSocket clients share: how a call fails, and the target a run
//! sends its requests to.

use std::time::{Duration, Instant};

use crate::client_http::HttpClient;
use crate::client_ws::WsClient;
use crate::record::{CallInfo, Outcome};
use crate::spec::{BenchSpec, Protocol};
use crate::stream::StreamTrace;

/// Why a call did not end with a complete stream.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("HTTP {status}: {message}")]
    Http {
        status: u16,
        message: String,
        retry_after: Option<String>,
    },
    #[error("transport: {0}")]
    Transport(String),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("error event{}: {message}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default())]
    ErrorEvent {
        code: Option<String>,
        message: String,
    },
}

impl CallError {
    pub fn outcome(&self) -> Outcome {
        match self {
            CallError::Http { status, .. } => Outcome::Http { status: *status },
            CallError::Transport(_) => Outcome::Transport,
            CallError::Protocol(_) => Outcome::Protocol,
            CallError::ErrorEvent { code, .. } => Outcome::ErrorEvent { code: code.clone() },
        }
    }
}

/// The server under load, through one protocol.
#[derive(Debug, Clone)]
pub enum Target {
    Http(Box<HttpClient>),
    Ws(WsClient),
}

impl Target {
    pub fn new(spec: &BenchSpec) -> anyhow::Result<Self> {
        Ok(match spec.protocol {
            Protocol::Http => Target::Http(Box::new(HttpClient::new(spec)?)),
            Protocol::Ws => Target::Ws(WsClient::new(spec)),
        })
    }

    /// Synthesizes `text`, feeding the stream to `trace` as it arrives (offsets from
    /// `sent`). Partial results stay in `trace` and `info` if the call is cut.
    pub async fn speak(
        &self,
        spec: &BenchSpec,
        text: &str,
        request_id: &str,
        sent: Instant,
        trace: &mut StreamTrace,
        info: &mut CallInfo,
    ) -> Result<(), CallError> {
        match self {
            Target::Http(c) => c.speak(spec, text, request_id, sent, trace, info).await,
            Target::Ws(c) => c.speak(spec, text, request_id, sent, trace, info).await,
        }
    }
}

/// Polls `GET /ready` (always over HTTP) until it answers 200, at most `timeout`.
pub async fn wait_ready(spec: &BenchSpec, timeout: Duration) -> anyhow::Result<()> {
    let client = HttpClient::new(spec)?;
    let deadline = Instant::now() + timeout;
    loop {
        let last = match client.ready().await {
            Ok(200) => return Ok(()),
            Ok(status) => format!("HTTP {status}"),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            anyhow::bail!(
                "{} is not ready after {:.0} s (last answer: {last})",
                spec.ready_uri,
                timeout.as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
