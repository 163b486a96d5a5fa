//! Voice cloning over the API with a Base model (the tiny fixture checkpoint): a reference
//! recording in `ref_audio` (base64 or a data: URI, any rate), in-context or from the
//! speaker vector alone, over HTTP and the WebSocket; and every way such a request can be
//! wrong answered with a 400 naming the field.

use std::io::Cursor;

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;
use crate::faults::next_json;

fn base_config() -> tts_server::server::ServerConfig {
    tts_server::server::ServerConfig {
        model: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/models/tiny-1b7-base"
        )
        .into(),
        ..config()
    }
}

/// A 16-bit mono WAV of a voiced sound (a few harmonics with vibrato), `seconds` long.
fn recording(rate: u32, seconds: f32) -> String {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
    let n = (rate as f32 * seconds) as usize;
    for i in 0..n {
        let t = i as f32 / rate as f32;
        let f0 = 140.0 + 8.0 * (2.0 * std::f32::consts::PI * 5.0 * t).sin();
        let x: f32 = (1..6)
            .map(|h| (2.0 * std::f32::consts::PI * f0 * h as f32 * t).sin() / h as f32)
            .sum::<f32>()
            * 0.3;
        w.write_sample((x * 32767.0) as i16).unwrap();
    }
    w.finalize().unwrap();
    base64::engine::general_purpose::STANDARD.encode(out.into_inner())
}

async fn pcm_of(t: &TestServer, body: Value) -> Vec<i16> {
    let r = t.speech(body).await;
    assert_eq!(r.status(), 200);
    s16le(&r.bytes().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_recording_clones_a_voice() {
    let t = TestServer::start(base_config()).await;
    let wav = recording(16_000, 2.0);
    let icl = json!({"input": "Hello there.", "response_format": "pcm", "seed": 3,
        "ref_audio": format!("data:audio/wav;base64,{wav}"),
        "ref_text": "Good morning, how are you?"});
    let a = pcm_of(&t, icl.clone()).await;
    assert!(!a.is_empty(), "no audio");
    // The same request (its clone now cached) gives the same audio.
    assert_eq!(pcm_of(&t, icl.clone()).await, a);
    // The speaker vector alone needs no transcript and gives other audio.
    let xvec = json!({"input": "Hello there.", "response_format": "pcm", "seed": 3,
        "ref_audio": wav, "x_vector_only_mode": true});
    let b = pcm_of(&t, xvec).await;
    assert!(!b.is_empty());
    assert_ne!(a, b);
    // So does another recording.
    let other = json!({"input": "Hello there.", "response_format": "pcm", "seed": 3,
        "ref_audio": recording(24_000, 1.5), "ref_text": "Good morning, how are you?"});
    assert_ne!(pcm_of(&t, other).await, a);
    // SSE reports usage as usual.
    let mut sse = icl;
    sse["stream_format"] = json!("sse");
    let r = t.speech(sse).await;
    assert_eq!(r.status(), 200);
    let events = sse_events(&r.text().await.unwrap());
    let done = events.last().unwrap();
    assert_eq!(done["type"], "speech.audio.done", "{done}");
    assert!(done["usage"]["frames"].as_u64().unwrap() > 0, "{done}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clone_requests_are_400s_naming_the_field() {
    let t = TestServer::start(base_config()).await;
    let wav = recording(24_000, 1.0);
    let cases = [
        (json!({"input": "Hi."}), "invalid_value", "ref_audio"),
        (
            json!({"input": "Hi.", "ref_audio": wav}),
            "invalid_value",
            "ref_text",
        ),
        (
            json!({"input": "Hi.", "ref_audio": "%%%", "ref_text": "a"}),
            "invalid_value",
            "ref_audio",
        ),
        (
            json!({"input": "Hi.", "ref_audio": "https://example.com/a.wav", "ref_text": "a"}),
            "invalid_value",
            "ref_audio",
        ),
        (
            json!({"input": "Hi.", "ref_audio": base64::engine::general_purpose::STANDARD
                .encode(b"RIFF but not really a wav file"), "ref_text": "a"}),
            "invalid_value",
            "ref_audio",
        ),
        (
            json!({"input": "Hi.", "ref_audio": recording(8_000, 31.0), "x_vector_only_mode": true}),
            "invalid_value",
            "ref_audio",
        ),
        (
            json!({"input": "Hi.", "ref_audio": wav, "x_vector_only_mode": "yes"}),
            "invalid_type",
            "x_vector_only_mode",
        ),
        (
            json!({"input": "Hi.", "ref_audio": wav, "x_vector_only_mode": true,
                "instructions": "whisper"}),
            "unsupported",
            "",
        ),
    ];
    for (body, code, param) in cases {
        let r = t.speech(body.clone()).await;
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_error(&v, code, (!param.is_empty()).then_some(param));
    }
    // and it still serves
    let ok = json!({"input": "Hi.", "ref_audio": wav, "x_vector_only_mode": true,
        "response_format": "pcm"});
    assert!(!pcm_of(&t, ok).await.is_empty());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_models_refuse_a_reference() {
    let t = TestServer::start(config()).await;
    let r = t
        .speech(json!({"input": "Hi.", "ref_audio": recording(24_000, 0.5), "ref_text": "a"}))
        .await;
    assert_eq!(r.status(), 400);
    assert_error(
        &r.json().await.unwrap(),
        "unsupported_value",
        Some("ref_audio"),
    );
    let r = t.speech(json!({"input": "Hi.", "ref_text": "a"})).await;
    assert_eq!(r.status(), 400);
    assert_error(&r.json().await.unwrap(), "invalid_value", Some("ref_text"));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_session_clones_from_the_speaker_vector() {
    let t = TestServer::start(base_config()).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(t.ws_url("/v1/audio/speech/stream"))
        .await
        .unwrap();
    let wav = recording(24_000, 1.0);
    // In-context cloning needs the whole text: refused, the session stays usable.
    let start = json!({"type": "start", "ref_audio": wav, "ref_text": "a b c", "text": "Hi "});
    ws.send(Message::text(start.to_string())).await.unwrap();
    let e = next_json(&mut ws).await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["param"], "x_vector_only_mode", "{e}");
    let start = json!({"type": "start", "ref_audio": wav, "x_vector_only_mode": true,
        "text": "Hello "});
    ws.send(Message::text(start.to_string())).await.unwrap();
    let started = next_json(&mut ws).await;
    assert_eq!(started["type"], "started", "{started}");
    ws.send(Message::text(
        json!({"type": "text", "text": "there."}).to_string(),
    ))
    .await
    .unwrap();
    ws.send(Message::text(json!({"type": "end"}).to_string()))
        .await
        .unwrap();
    let mut audio = 0usize;
    let done = loop {
        match ws.next().await.expect("message").expect("ws ok") {
            Message::Binary(b) => audio += b.len(),
            Message::Text(m) => break serde_json::from_str::<Value>(&m).unwrap(),
            _ => {}
        }
    };
    assert_eq!(done["type"], "done", "{done}");
    assert!(audio > 0);
    t.stop().await;
}
