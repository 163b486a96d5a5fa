//! Server-sent events of `stream_format: "sse"`, as OpenAI sends them: `data:` lines with
//! a JSON object whose `type` is `speech.audio.delta` (base64 audio) or
//! `speech.audio.done` (usage); `error` if the request fails mid-stream.

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Value};

use super::error::ApiError;

fn event(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// A `speech.audio.delta` event carrying `audio` (encoded bytes of the response format).
pub fn delta(audio: &[u8]) -> Bytes {
    let b64 = base64::engine::general_purpose::STANDARD.encode(audio);
    event(&json!({"type": "speech.audio.delta", "audio": b64}))
}

/// The last event of a finished request.
pub fn done(usage: Value) -> Bytes {
    event(&json!({"type": "speech.audio.done", "usage": usage}))
}

/// The last event of a request that failed after the response began.
pub fn error(e: &ApiError) -> Bytes {
    let mut body = e.body();
    body["type"] = json!("error");
    event(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_data_lines() {
        let d = delta(&[0, 1, 2]);
        let text = std::str::from_utf8(&d).unwrap();
        let json = text
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        let v: Value = serde_json::from_str(json).unwrap();
        assert_eq!(v, json!({"type": "speech.audio.delta", "audio": "AAEC"}));
        let e = error(&ApiError::internal());
        let text = std::str::from_utf8(&e).unwrap();
        assert!(text.starts_with("data: {") && text.ends_with("}\n\n"));
        assert!(text.contains("\"type\":\"error\""));
    }
}
