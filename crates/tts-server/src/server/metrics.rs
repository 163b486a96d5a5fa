//! Prometheus metrics. Each server owns a recorder (so that several servers can run in one
//! test process); `qwen3-tts serve` also installs it as the global recorder, which is where
//! the engine's `tts_*` metrics (stage batch sizes and times, queue wait, TTFA, underruns,
//! cancellations) go. The server's own metrics are recorded into its recorder directly.

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use tts_engine::Load;

pub const HTTP_REQUESTS: &str = "tts_http_requests_total";
pub const STREAMS_ACTIVE: &str = "tts_http_streams_active";
pub const DISCONNECTS: &str = "tts_http_disconnects_total";
pub const REJECTED: &str = "tts_requests_rejected_total";
pub const HTTP_TTFA: &str = "tts_http_time_to_first_audio_seconds";
pub const REAL_TIME_FACTOR: &str = "tts_real_time_factor";
pub const READY: &str = "tts_ready";
pub const ENGINES_READY: &str = "tts_engines_ready";

/// Histogram buckets for durations: 1 ms .. 10 s.
pub const SECONDS_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
];
/// Batch sizes (the CUDA graph buckets).
pub const BATCH_BUCKETS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];
/// Real-time factor (processing time / audio time).
pub const RTF_BUCKETS: [f64; 11] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0];

/// The server's metrics: its recorder and the handle that renders it.
#[derive(Clone)]
pub struct ServerMetrics {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

impl std::fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerMetrics")
    }
}

impl ServerMetrics {
    pub fn new() -> Result<Self, metrics_exporter_prometheus::BuildError> {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)?
            .set_buckets_for_metric(
                Matcher::Full(tts_engine::metrics::STAGE_BATCH_SIZE.into()),
                &BATCH_BUCKETS,
            )?
            .set_buckets_for_metric(Matcher::Full(REAL_TIME_FACTOR.into()), &RTF_BUCKETS)?
            .build_recorder();
        let handle = recorder.handle();
        let m = Self {
            recorder: Arc::new(recorder),
            handle,
        };
        m.with(|| {
            tts_engine::metrics::describe();
            describe();
        });
        Ok(m)
    }

    /// Installs this recorder as the process's global one (the engine's metrics go there).
    pub fn install_global(&self) -> Result<(), metrics::SetRecorderError<SharedRecorder>> {
        metrics::set_global_recorder(SharedRecorder(self.recorder.clone()))
    }

    /// Runs `f` with this server's recorder as the current one.
    pub fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(self.recorder.as_ref(), f)
    }

    /// The exposition text; `load`, `ready` and `engines_ready` (engines warmed up, of
    /// `--replicas`) refresh their gauges first.
    pub fn render(&self, load: Option<Load>, ready: bool, engines_ready: usize) -> String {
        self.with(|| {
            let load = load.unwrap_or(Load {
                queued: 0,
                active: 0,
            });
            metrics::gauge!(tts_engine::metrics::ACTIVE_REQUESTS).set(load.active as f64);
            metrics::gauge!(tts_engine::metrics::QUEUE_DEPTH).set(load.queued as f64);
            metrics::gauge!(READY).set(if ready { 1.0 } else { 0.0 });
            metrics::gauge!(ENGINES_READY).set(engines_ready as f64);
        });
        self.handle.run_upkeep();
        self.handle.render()
    }

    pub fn http_request(&self, route: &str, status: u16) {
        let route = route.to_string();
        self.with(|| {
            metrics::counter!(HTTP_REQUESTS, "route" => route, "status" => status.to_string())
                .increment(1)
        });
    }

    pub fn rejected(&self, reason: &'static str) {
        self.with(|| metrics::counter!(REJECTED, "reason" => reason).increment(1));
    }

    pub fn first_audio(&self, since_request: Duration) {
        self.with(|| metrics::histogram!(HTTP_TTFA).record(since_request.as_secs_f64()));
    }

    pub fn real_time_factor(&self, rtf: f64) {
        self.with(|| metrics::histogram!(REAL_TIME_FACTOR).record(rtf));
    }

    /// Counts a stream as open until the guard drops; a guard dropped before
    /// [`StreamGuard::finished`] counts a client disconnect.
    pub fn stream_opened(&self, kind: &'static str) -> StreamGuard {
        self.with(|| metrics::gauge!(STREAMS_ACTIVE).increment(1.0));
        StreamGuard {
            metrics: self.clone(),
            kind,
            finished: false,
        }
    }
}

/// An open audio stream (HTTP body or WebSocket utterance).
#[derive(Debug)]
pub struct StreamGuard {
    metrics: ServerMetrics,
    kind: &'static str,
    finished: bool,
}

impl StreamGuard {
    /// The stream ended as it should (done, or failed on our side).
    pub fn finished(&mut self) {
        self.finished = true;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let kind = self.kind;
        let finished = self.finished;
        self.metrics.with(|| {
            metrics::gauge!(STREAMS_ACTIVE).decrement(1.0);
            if !finished {
                metrics::counter!(DISCONNECTS, "kind" => kind).increment(1);
            }
        });
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        HTTP_REQUESTS,
        Unit::Count,
        "HTTP requests by route and status."
    );
    describe_gauge!(
        STREAMS_ACTIVE,
        Unit::Count,
        "Audio streams being sent (HTTP bodies and WebSocket utterances)."
    );
    describe_counter!(DISCONNECTS, Unit::Count, "Streams whose client went away (or stalled) before the end; their requests were cancelled.");
    describe_counter!(
        REJECTED,
        Unit::Count,
        "Requests refused at admission, by reason (queue_full, not_ready, shutting_down, invalid)."
    );
    describe_histogram!(HTTP_TTFA, Unit::Seconds, "From the HTTP request (or WebSocket start) to its first audio bytes handed to the connection.");
    describe_histogram!(
        REAL_TIME_FACTOR,
        Unit::Count,
        "Per request: time from admission to the end of generation over seconds of audio."
    );
    describe_gauge!(
        READY,
        Unit::Count,
        "1 when the server is warmed up and accepting requests."
    );
    describe_gauge!(
        ENGINES_READY,
        Unit::Count,
        "Engines (--replicas) warmed up and accepting requests; the server is ready from the first."
    );
}

/// The recorder shared between the server (rendering) and the global facade (the engine).
pub struct SharedRecorder(Arc<PrometheusRecorder>);

impl std::fmt::Debug for SharedRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedRecorder")
    }
}

impl Recorder for SharedRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_counter(key, unit, description)
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description)
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_histogram(key, unit, description)
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.0.register_counter(key, metadata)
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.register_gauge(key, metadata)
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.0.register_histogram(key, metadata)
    }
}
