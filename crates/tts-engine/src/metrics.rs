//! Metrics hooks (the `metrics` facade; the server installs an exporter). Names are
//! `tts_*`; durations in seconds. Without a recorder every hook is a no-op.

use std::time::Duration;

use crate::scheduler::Stage;

pub const QUEUE_WAIT: &str = "tts_queue_wait_seconds";
pub const TIME_TO_FIRST_AUDIO: &str = "tts_time_to_first_audio_seconds";
pub const STAGE_BATCH_SIZE: &str = "tts_stage_batch_size";
pub const STAGE_DURATION: &str = "tts_stage_duration_seconds";
pub const ACTIVE_REQUESTS: &str = "tts_active_requests";
pub const QUEUE_DEPTH: &str = "tts_queue_depth";
pub const FRAMES_GENERATED: &str = "tts_frames_generated_total";
pub const UNDERRUNS: &str = "tts_underruns_total";
pub const UNDERRUN_GAP: &str = "tts_underrun_gap_seconds";
pub const REQUESTS_ADMITTED: &str = "tts_requests_admitted_total";
pub const REQUESTS_COMPLETED: &str = "tts_requests_completed_total";
pub const REQUESTS_CANCELLED: &str = "tts_requests_cancelled_total";
pub const REQUESTS_FAILED: &str = "tts_requests_failed_total";
pub const SIDE_BY_SIDE: &str = "tts_side_by_side_calls_total";
pub const SHARED_CALL_DURATION: &str = "tts_shared_call_duration_seconds";

/// Registers descriptions and units of the engine's metrics with the installed recorder.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_histogram!(
        QUEUE_WAIT,
        Unit::Seconds,
        "Time from submission to admission."
    );
    describe_histogram!(
        TIME_TO_FIRST_AUDIO,
        Unit::Seconds,
        "Time from submission to the first (trimmed) audio handed to the client."
    );
    describe_histogram!(
        STAGE_BATCH_SIZE,
        Unit::Count,
        "Rows per backend call, by stage."
    );
    describe_histogram!(
        STAGE_DURATION,
        Unit::Seconds,
        "Duration of backend calls, by stage."
    );
    describe_gauge!(ACTIVE_REQUESTS, Unit::Count, "Requests holding a slot.");
    describe_gauge!(QUEUE_DEPTH, Unit::Count, "Requests waiting for a slot.");
    describe_counter!(FRAMES_GENERATED, Unit::Count, "Frames (80 ms) generated.");
    describe_counter!(
        UNDERRUNS,
        Unit::Count,
        "Estimated playback gaps (immediate playback)."
    );
    describe_histogram!(
        UNDERRUN_GAP,
        Unit::Seconds,
        "Length of estimated playback gaps."
    );
    describe_counter!(
        REQUESTS_ADMITTED,
        Unit::Count,
        "Requests admitted to a slot."
    );
    describe_counter!(REQUESTS_COMPLETED, Unit::Count, "Requests finished.");
    describe_counter!(
        REQUESTS_CANCELLED,
        Unit::Count,
        "Requests cancelled or abandoned."
    );
    describe_counter!(REQUESTS_FAILED, Unit::Count, "Requests failed.");
    describe_counter!(
        SIDE_BY_SIDE,
        Unit::Count,
        "Backend calls that ran a code-predictor batch and a talker step side by side (both stages' duration histograms count each such call's wall time)."
    );
    describe_histogram!(
        SHARED_CALL_DURATION,
        Unit::Seconds,
        "Duration of backend calls that served two stages at once, by `stages` (`code_predictor+talker_step` side by side, `prefill+talker_step` merged); both stages' duration histograms count each such call too, so busy time is their sum less this one's."
    );
}

pub(crate) fn admitted(queue_wait: Duration) {
    metrics::histogram!(QUEUE_WAIT).record(queue_wait.as_secs_f64());
    metrics::counter!(REQUESTS_ADMITTED).increment(1);
}

pub(crate) fn first_audio(ttfa: Duration) {
    metrics::histogram!(TIME_TO_FIRST_AUDIO).record(ttfa.as_secs_f64());
}

pub(crate) fn stage(stage: Stage, rows: usize, took: Duration) {
    metrics::histogram!(STAGE_BATCH_SIZE, "stage" => stage.name()).record(rows as f64);
    metrics::histogram!(STAGE_DURATION, "stage" => stage.name()).record(took.as_secs_f64());
}

/// One engine's part of a gauge that every engine of a pool adds to: it keeps the value it
/// last reported and adds the difference, so the gauge is the sum over engines.
#[derive(Debug, Default)]
pub(crate) struct GaugeShare {
    last: f64,
}

impl GaugeShare {
    fn report(&mut self, name: &'static str, n: usize) {
        // an increment of 0 too: the gauge is then listed from the first report on
        let v = n as f64;
        metrics::gauge!(name).increment(v - self.last);
        self.last = v;
    }

    /// This engine's requests holding a slot.
    pub(crate) fn active(&mut self, n: usize) {
        self.report(ACTIVE_REQUESTS, n);
    }

    /// This engine's requests waiting for a slot.
    pub(crate) fn queue_depth(&mut self, n: usize) {
        self.report(QUEUE_DEPTH, n);
    }
}

/// One backend call that served `first` (`first_rows` rows) and `second` (`second_rows`):
/// its wall time under both stages, and once under the shared-call histogram.
pub(crate) fn shared_call(
    (first, first_rows): (Stage, usize),
    (second, second_rows): (Stage, usize),
    took: Duration,
) {
    stage(first, first_rows, took);
    stage(second, second_rows, took);
    if (first, second) == (Stage::CodePredictor, Stage::TalkerStep) {
        metrics::counter!(SIDE_BY_SIDE).increment(1);
    }
    let stages = format!("{}+{}", first.name(), second.name());
    metrics::histogram!(SHARED_CALL_DURATION, "stages" => stages).record(took.as_secs_f64());
}

pub(crate) fn frames(n: usize) {
    metrics::counter!(FRAMES_GENERATED).increment(n as u64);
}

pub(crate) fn underrun(gap: Duration) {
    metrics::counter!(UNDERRUNS).increment(1);
    metrics::histogram!(UNDERRUN_GAP).record(gap.as_secs_f64());
}

pub(crate) fn completed() {
    metrics::counter!(REQUESTS_COMPLETED).increment(1);
}

pub(crate) fn cancelled() {
    metrics::counter!(REQUESTS_CANCELLED).increment(1);
}

pub(crate) fn failed() {
    metrics::counter!(REQUESTS_FAILED).increment(1);
}
