//! The WebSocket session (`GET /v1/audio/speech/stream`): text that arrives in pieces
//! (slower than speech), audio back as binary frames, `started`/`done`/`error` events,
//! cancellation, and protocol errors that leave the session usable.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;
use crate::faults::next_json;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(t: &TestServer) -> Ws {
    tokio_tungstenite::connect_async(t.ws_url("/v1/audio/speech/stream"))
        .await
        .expect("websocket connects")
        .0
}

async fn send(ws: &mut Ws, v: serde_json::Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

/// Reads until a JSON event; returns it with the binary bytes received before it.
async fn until_event(ws: &mut Ws) -> (serde_json::Value, Vec<u8>) {
    let mut audio = Vec::new();
    loop {
        match ws.next().await.expect("message").expect("ws ok") {
            Message::Text(t) => return (serde_json::from_str(&t).unwrap(), audio),
            Message::Binary(b) => audio.extend_from_slice(&b),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_streams_in_and_audio_streams_out() {
    let t = TestServer::start(config()).await;
    let mut ws = connect(&t).await;
    send(
        &mut ws,
        json!({"type": "start", "voice": "vivian", "language": "english",
        "seed": 5, "text": "Hello there, "}),
    )
    .await;
    let (started, _) = until_event(&mut ws).await;
    assert_eq!(started["type"], "started", "{started}");
    assert_eq!(started["sample_rate"], 24_000);
    assert_eq!(started["seed"], 5);
    assert_eq!(started["format"], "pcm");
    let id = started["request_id"].as_str().unwrap().to_string();
    // The rest of the text comes in pieces, with pauses (as from an LLM).
    for piece in [
        "this text ",
        "arrives ",
        "piece by piece, ",
        "slower than speech.",
    ] {
        tokio::time::sleep(Duration::from_millis(150)).await;
        send(&mut ws, json!({"type": "text", "text": piece})).await;
    }
    send(&mut ws, json!({"type": "end"})).await;
    let (done, audio) = until_event(&mut ws).await;
    assert_eq!(done["type"], "done", "{done}");
    assert_eq!(done["request_id"], id.as_str());
    let u = &done["usage"];
    assert_eq!(
        audio.len() as u64,
        2 * u["audio_samples"].as_u64().unwrap(),
        "{u}"
    );
    assert!(u["frames"].as_u64().unwrap() > 0);
    assert_eq!(
        u["audio_samples"].as_u64().unwrap() + u["trimmed_samples"].as_u64().unwrap(),
        u["frames"].as_u64().unwrap() * 1920
    );

    // Another utterance on the same session, in another format.
    send(
        &mut ws,
        json!({"type": "start", "response_format": "wav", "text": "Second one."}),
    )
    .await;
    let (started, _) = until_event(&mut ws).await;
    assert_eq!(started["type"], "started");
    send(&mut ws, json!({"type": "end"})).await;
    let (done, wav) = until_event(&mut ws).await;
    assert_eq!(done["type"], "done", "{done}");
    let (_, samples) = symphonia_decode::<i16>(&wav, "wav");
    assert_eq!(
        samples.len() as u64,
        done["usage"]["audio_samples"].as_u64().unwrap()
    );
    ws.close(None).await.unwrap();
    t.wait_idle().await;
    t.stop().await;
}

/// `speed` in `start`: the same seeded utterance at 1.5x is its samples / 1.5, counted so
/// in `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speed_in_start_shortens_the_utterance() {
    let t = TestServer::start(config()).await;
    let mut ws = connect(&t).await;
    let mut lengths = Vec::new();
    for speed in [1.0, 1.5] {
        send(
            &mut ws,
            json!({"type": "start", "voice": "vivian", "language": "english", "seed": 9,
            "speed": speed, "text": "The same words at two speeds."}),
        )
        .await;
        send(&mut ws, json!({"type": "end"})).await;
        let (started, _) = until_event(&mut ws).await;
        assert_eq!(started["type"], "started", "{started}");
        let (done, audio) = until_event(&mut ws).await;
        assert_eq!(done["type"], "done", "{done}");
        let samples = done["usage"]["audio_samples"].as_u64().unwrap();
        assert_eq!(audio.len() as u64, 2 * samples, "{done}");
        lengths.push(samples as f64);
    }
    assert_eq!(lengths[1], (lengths[0] / 1.5).round(), "{lengths:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_utterance_and_frees_the_slot() {
    let t = TestServer::start(config()).await;
    let mut ws = connect(&t).await;
    // Seeded: this utterance is 638 frames (51 s) long, far from over when cancelled.
    let long = "A long sentence that would take a good while to speak out loud. ".repeat(12);
    send(&mut ws, json!({"type": "start", "text": long, "seed": 5})).await;
    send(&mut ws, json!({"type": "end"})).await;
    let (started, _) = until_event(&mut ws).await;
    assert_eq!(started["type"], "started");
    // Wait for audio, then cancel.
    loop {
        if let Message::Binary(b) = ws.next().await.unwrap().unwrap() {
            assert!(!b.is_empty());
            break;
        }
    }
    send(&mut ws, json!({"type": "cancel"})).await;
    let (cancelled, _) = until_event(&mut ws).await;
    assert_eq!(cancelled["type"], "cancelled", "{cancelled}");
    t.wait_idle().await;
    // The session is still usable.
    send(
        &mut ws,
        json!({"type": "start", "text": "After the cancel."}),
    )
    .await;
    send(&mut ws, json!({"type": "end"})).await;
    let (started, _) = until_event(&mut ws).await;
    assert_eq!(started["type"], "started");
    let (done, audio) = until_event(&mut ws).await;
    assert_eq!(done["type"], "done");
    assert!(!audio.is_empty());

    // A client that just goes away mid-utterance frees its slot too.
    send(&mut ws, json!({"type": "start", "text": long, "seed": 5})).await;
    let (started, _) = until_event(&mut ws).await;
    assert_eq!(started["type"], "started");
    drop(ws);
    t.wait_idle().await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_are_events_and_the_session_goes_on() {
    let t = TestServer::start(config()).await;
    let mut ws = connect(&t).await;
    let cases = [
        (Message::text("not json"), "invalid_json"),
        (Message::text("[1]"), "invalid_message"),
        (
            Message::text(json!({"type": "dance"}).to_string()),
            "invalid_message",
        ),
        (
            Message::text(json!({"type": "text", "text": "hi"}).to_string()),
            "no_utterance",
        ),
        (
            Message::text(json!({"type": "end"}).to_string()),
            "no_utterance",
        ),
        (
            Message::text(json!({"type": "start", "voice": "nobody"}).to_string()),
            "unknown_voice",
        ),
        (
            Message::text(json!({"type": "start", "response_format": "aac"}).to_string()),
            "unsupported_format",
        ),
        (
            Message::text(json!({"type": "start", "text_mode": "prefill"}).to_string()),
            "unsupported_value",
        ),
        (Message::binary(vec![1u8, 2, 3]), "invalid_message"),
    ];
    for (msg, code) in cases {
        ws.send(msg).await.unwrap();
        let ev = next_json(&mut ws).await;
        assert_eq!(ev["type"], "error", "{ev}");
        assert_eq!(ev["error"]["code"], code, "{ev}");
        assert!(ev["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // Starting twice is refused; text after `end` of an empty utterance fails it cleanly.
    send(&mut ws, json!({"type": "start"})).await;
    assert_eq!(next_json(&mut ws).await["type"], "started");
    send(&mut ws, json!({"type": "start"})).await;
    let ev = next_json(&mut ws).await;
    assert_eq!(ev["error"]["code"], "busy", "{ev}");
    send(&mut ws, json!({"type": "end"})).await;
    let ev = next_json(&mut ws).await;
    assert_eq!(ev["type"], "error", "{ev}");
    assert_eq!(ev["error"]["code"], "empty_input", "{ev}");
    // Still usable.
    send(&mut ws, json!({"type": "start", "text": "Fine."})).await;
    send(&mut ws, json!({"type": "end"})).await;
    assert_eq!(next_json(&mut ws).await["type"], "started");
    assert_eq!(next_json(&mut ws).await["type"], "done");
    t.wait_idle().await;
    t.stop().await;
}
