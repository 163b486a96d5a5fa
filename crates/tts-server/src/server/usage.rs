//! The usage a finished request reports (SSE `speech.audio.done`, WebSocket `done`):
//! OpenAI's token counts plus what a TTS client wants to know.

use serde_json::{json, Value};
use tts_engine::{EndReason, Usage};

/// `usage` as JSON. `samples` is what was sent, counted by the server (after `speed`):
/// `audio_samples` and `audio_seconds` are that.
pub fn usage_json(u: &Usage, samples: u64, sample_rate: u32) -> Value {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    json!({
        "input_tokens": u.text_tokens,
        "output_tokens": u.frames,
        "total_tokens": u.text_tokens + u.frames,
        "frames": u.frames,
        "audio_samples": samples,
        "sample_rate": sample_rate,
        "audio_seconds": samples as f64 / f64::from(sample_rate),
        "trimmed_samples": (u.trimmed_seconds * f64::from(sample_rate)).round() as u64,
        "trimmed_seconds": u.trimmed_seconds,
        "end_reason": match u.end {
            EndReason::Eos => "eos",
            EndReason::FrameLimit => "frame_limit",
        },
        "queue_wait_ms": ms(u.queue_wait),
        "time_to_first_audio_ms": u.time_to_first_audio.map(ms),
        "underruns": u.underruns,
    })
}
