//! What one request showed: its outcome and its timings, as written to `bench.json --raw`
//! and summarised per rate by `report`.

use std::time::Duration;

use serde::Serialize;

use crate::stream::StreamSummary;

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// A complete stream: HTTP 200 and the whole body, or WebSocket `done`.
    Ok,
    /// The server answered with an error status (429/503 when full or not ready, 4xx/5xx).
    Http { status: u16 },
    /// Connection refused or reset, a body cut short, a WebSocket closed before `done`.
    Transport,
    /// The server said something the benchmark does not understand (bad header, event).
    Protocol,
    /// A WebSocket `error` event.
    ErrorEvent { code: Option<String> },
    /// Still running at the end of the drain timeout; cut.
    Timeout,
    /// Not sent: `--max-in-flight` requests were already in flight.
    Skipped,
}

impl Outcome {
    /// The label errors are grouped by: `ok`, `http_429`, `transport`, `protocol`,
    /// `error_event` (or `error_event:CODE`), `timeout`, `skipped`.
    pub fn label(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::Http { status } => format!("http_{status}"),
            Outcome::Transport => "transport".into(),
            Outcome::Protocol => "protocol".into(),
            Outcome::ErrorEvent { code: None } => "error_event".into(),
            Outcome::ErrorEvent { code: Some(c) } => format!("error_event:{c}"),
            Outcome::Timeout => "timeout".into(),
            Outcome::Skipped => "skipped".into(),
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok)
    }
}

/// One request. Times in ms are from the moment the request was sent; times in s are
/// offsets from the start of its rate's run (warm-up included).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Arrival number within its rate's run.
    pub index: usize,
    /// Line of the prompt set (0-based).
    pub prompt: usize,
    pub chars: usize,
    /// Its arrival fell in the measured window.
    pub measured: bool,
    pub scheduled_s: f64,
    /// When it was actually sent (the arrival plus timer and spawn latency).
    pub sent_s: f64,
    pub outcome: Outcome,
    /// Error text (the server's message for HTTP and error events), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// WebSocket only: the upgrade completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
    pub ttfb_ms: Option<f64>,
    /// Audible TTFA: the onset sample plays under immediate playback.
    pub ttfa_ms: Option<f64>,
    /// The whole stream received (also set, as the time of failure, for failed requests).
    pub e2e_ms: Option<f64>,
    /// When it finished, from the start of the rate's run.
    pub done_s: Option<f64>,
    pub audio_s: f64,
    pub bytes: u64,
    pub underruns: u32,
    pub underrun_ms: f64,
    pub tolerated_gaps: u32,
    pub tolerated_gap_ms: f64,
    /// The least audio left in the player when later audio arrived (0 after a gap).
    pub tightest_ms: Option<f64>,
    /// When the player first ran dry past the tolerance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_underrun_ms: Option<f64>,
}

/// Where a request stands when it is recorded.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub index: usize,
    pub prompt: usize,
    pub chars: usize,
    pub measured: bool,
    pub scheduled: Duration,
    pub sent: Duration,
}

/// What a client call returned besides the stream itself.
#[derive(Debug, Clone, Default)]
pub struct CallInfo {
    pub error: Option<String>,
    pub retry_after: Option<String>,
    pub request_id: Option<String>,
    pub connect: Option<Duration>,
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl RequestRecord {
    /// Assembles a record; `elapsed` is from sending to the end (success or failure).
    pub fn new(
        meta: &RequestMeta,
        outcome: Outcome,
        info: CallInfo,
        stream: &StreamSummary,
        elapsed: Option<Duration>,
    ) -> Self {
        Self {
            index: meta.index,
            prompt: meta.prompt,
            chars: meta.chars,
            measured: meta.measured,
            scheduled_s: meta.scheduled.as_secs_f64(),
            sent_s: meta.sent.as_secs_f64(),
            outcome,
            error: info.error,
            retry_after: info.retry_after,
            request_id: info.request_id,
            connect_ms: info.connect.map(ms),
            ttfb_ms: stream.first_byte.map(ms),
            ttfa_ms: stream.audible.map(ms),
            e2e_ms: elapsed.map(ms),
            done_s: elapsed.map(|e| (meta.sent + e).as_secs_f64()),
            audio_s: stream.audio.as_secs_f64(),
            bytes: stream.bytes,
            underruns: stream.underruns,
            underrun_ms: ms(stream.underrun_time),
            tolerated_gaps: stream.tolerated_gaps,
            tolerated_gap_ms: ms(stream.tolerated_time),
            tightest_ms: stream.tightest.map(ms),
            first_underrun_ms: stream.first_underrun.map(ms),
        }
    }

    /// A request not sent (`--max-in-flight`).
    pub fn skipped(meta: &RequestMeta) -> Self {
        let empty = crate::stream::StreamTrace::new(1, Duration::ZERO).summary();
        Self::new(meta, Outcome::Skipped, CallInfo::default(), &empty, None)
    }
}
