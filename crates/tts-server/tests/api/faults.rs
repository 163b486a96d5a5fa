//! Bad input and faults: each answered with the right status and OpenAI error body, and
//! the server keeps serving afterwards; nothing leaks (slots and streams back to 0).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tower::ServiceExt;

use crate::common::*;

async fn post_raw(t: &TestServer, content_type: Option<&str>, body: Vec<u8>) -> reqwest::Response {
    let mut r = t.client.post(t.url("/v1/audio/speech")).body(body);
    if let Some(ct) = content_type {
        r = r.header("content-type", ct);
    }
    r.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_4xx_and_the_server_keeps_serving() {
    let t = TestServer::start(config()).await;
    let json_ct = Some("application/json");
    let j = |v: serde_json::Value| v.to_string().into_bytes();
    // (what, content type, body, status, error code, error param)
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Vec<u8>,
        u16,
        &'a str,
        Option<&'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "empty input",
            json_ct,
            j(json!({"input": ""})),
            400,
            "empty_input",
            Some("input"),
        ),
        (
            "blank input",
            json_ct,
            j(json!({"input": " \n "})),
            400,
            "empty_input",
            Some("input"),
        ),
        (
            "missing input",
            json_ct,
            j(json!({"voice": "alloy"})),
            400,
            "missing_input",
            Some("input"),
        ),
        (
            "oversized input",
            json_ct,
            j(json!({"input": "a".repeat(4097)})),
            400,
            "input_too_long",
            Some("input"),
        ),
        (
            "oversized body",
            json_ct,
            j(json!({"input": "a", "pad": "x".repeat(140_000)})),
            413,
            "request_too_large",
            None,
        ),
        (
            "invalid UTF-8",
            json_ct,
            b"{\"input\": \"caf\xe9\"}".to_vec(),
            400,
            "invalid_json",
            None,
        ),
        (
            "malformed JSON",
            json_ct,
            b"{\"input\": \"hi\"".to_vec(),
            400,
            "invalid_json",
            None,
        ),
        (
            "not an object",
            json_ct,
            b"[\"hi\"]".to_vec(),
            400,
            "invalid_json",
            None,
        ),
        ("empty body", json_ct, Vec::new(), 400, "invalid_json", None),
        (
            "unknown voice",
            json_ct,
            j(json!({"input": "hi", "voice": "darth"})),
            400,
            "unknown_voice",
            Some("voice"),
        ),
        (
            "voice object without id",
            json_ct,
            j(json!({"input": "hi", "voice": {"name": "x"}})),
            400,
            "invalid_type",
            Some("voice"),
        ),
        (
            "unknown format",
            json_ct,
            j(json!({"input": "hi", "response_format": "aac"})),
            400,
            "unsupported_format",
            Some("response_format"),
        ),
        (
            "speed out of range",
            json_ct,
            j(json!({"input": "hi", "speed": 4.25})),
            400,
            "invalid_value",
            Some("speed"),
        ),
        (
            "speed not a number",
            json_ct,
            j(json!({"input": "hi", "speed": "fast"})),
            400,
            "invalid_type",
            Some("speed"),
        ),
        (
            "bad stream_format",
            json_ct,
            j(json!({"input": "hi", "stream_format": "ws"})),
            400,
            "invalid_value",
            Some("stream_format"),
        ),
        (
            "unknown model",
            json_ct,
            j(json!({"input": "hi", "model": "whisper-1"})),
            400,
            "model_not_found",
            Some("model"),
        ),
        (
            "unknown language",
            json_ct,
            j(json!({"input": "hi", "language": "klingon"})),
            400,
            "unknown_language",
            Some("language"),
        ),
        (
            "negative seed",
            json_ct,
            j(json!({"input": "hi", "seed": -3})),
            400,
            "invalid_type",
            Some("seed"),
        ),
        (
            "bad temperature",
            json_ct,
            j(json!({"input": "hi", "temperature": -1})),
            400,
            "invalid_value",
            Some("temperature"),
        ),
        (
            "bad top_p",
            json_ct,
            j(json!({"input": "hi", "top_p": 2})),
            400,
            "invalid_value",
            Some("top_p"),
        ),
        (
            "wrong content type",
            Some("text/plain"),
            j(json!({"input": "hi"})),
            415,
            "unsupported_media_type",
            None,
        ),
        (
            "form content type",
            Some("application/x-www-form-urlencoded"),
            b"input=hi".to_vec(),
            415,
            "unsupported_media_type",
            None,
        ),
    ];
    for (what, ct, body, status, code, param) in cases {
        let r = post_raw(&t, ct, body).await;
        assert_eq!(r.status().as_u16(), status, "{what}");
        assert!(r.headers()["x-request-id"].to_str().is_ok(), "{what}");
        let body: serde_json::Value = r.json().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_error(&body, code, param);
        assert_eq!(body["error"]["type"], "invalid_request_error", "{what}");
    }
    // Unknown fields are ignored; clients' extras are accepted.
    let r = t
        .speech(
            json!({"input": "hi", "response_format": "pcm", "stream": true,
            "non_streaming_mode": true, "task_type": "CustomVoice", "whatever": {"a": 1}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await.unwrap();
    // Routes and methods.
    let r = t.client.get(t.url("/v1/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_error(&r.json().await.unwrap(), "not_found", None);
    let r = t
        .client
        .get(t.url("/v1/audio/speech"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_error(&r.json().await.unwrap(), "method_not_allowed", None);

    t.assert_serving().await;
    let m = t.metrics().await;
    assert!(
        m.contains("tts_http_requests_total{route=\"/v1/audio/speech\",status=\"400\"}"),
        "{m}"
    );
    t.wait_idle().await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_frees_its_slot() {
    let t = TestServer::start(config()).await;
    // Seeded: this reply is 648 frames (52 s) long, far from over after its first chunk.
    let long = "A client that never reads. ".repeat(100);
    let mut r = t
        .speech(json!({"input": long, "response_format": "pcm", "seed": 5}))
        .await;
    assert_eq!(r.status(), 200);
    let first = r.chunk().await.unwrap().expect("audio starts");
    assert!(!first.is_empty());
    let m = t.metrics().await;
    assert_eq!(metric(&m, "tts_http_streams_active"), Some(1.0));
    drop(r); // the client goes away mid-stream
    t.wait_idle().await;
    let m = t.metrics().await;
    assert!(
        metric(&m, "tts_http_disconnects_total").unwrap_or(0.0) >= 1.0,
        "{m}"
    );
    t.assert_serving().await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_beyond_the_queue_gets_429_and_nothing_leaks() {
    let mut cfg = config();
    cfg.max_slots = 1;
    cfg.max_queue = 1;
    let t = Arc::new(TestServer::start(cfg).await);

    // 1. A WebSocket utterance waiting for its text holds the only slot.
    let (mut ws, _) = tokio_tungstenite::connect_async(t.ws_url("/v1/audio/speech/stream"))
        .await
        .unwrap();
    ws.send(Message::text(
        json!({"type": "start", "voice": "ryan"}).to_string(),
    ))
    .await
    .unwrap();
    let started = next_json(&mut ws).await;
    assert_eq!(started["type"], "started", "{started}");

    // 2. One request waits in the queue (admitted: its headers come back at once).
    let queued = t
        .speech(json!({"input": "I waited my turn.", "response_format": "pcm"}))
        .await;
    assert_eq!(queued.status(), 200);
    // The engine thread sets these gauges when it next wakes (the submission wakes it).
    eventually("one request holds the slot and one waits", || async {
        let m = t.metrics().await;
        metric(&m, "tts_active_requests") == Some(1.0) && metric(&m, "tts_queue_depth") == Some(1.0)
    })
    .await;

    // 3. Everything beyond is refused at once with 429 and Retry-After.
    let mut flood = Vec::new();
    for i in 0..16 {
        let t = t.clone();
        flood.push(tokio::spawn(async move {
            t.speech(json!({"input": format!("Flood {i}."), "response_format": "pcm"}))
                .await
        }));
    }
    for f in flood {
        let r = f.await.unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "1");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_error(&body, "queue_full", None);
        assert_eq!(body["error"]["type"], "rate_limit_error");
    }

    // 4. Cancel the slot holder: the queued request runs to its end.
    ws.send(Message::text(json!({"type": "cancel"}).to_string()))
        .await
        .unwrap();
    let cancelled = next_json(&mut ws).await;
    assert_eq!(cancelled["type"], "cancelled", "{cancelled}");
    let audio = queued.bytes().await.unwrap();
    assert!(!audio.is_empty() && audio.len() % 2 == 0);
    ws.close(None).await.unwrap();

    t.wait_idle().await;
    let m = t.metrics().await;
    assert!(
        m.contains("tts_requests_rejected_total{reason=\"queue_full\"} 16"),
        "{m}"
    );
    t.assert_serving().await;
    Arc::try_unwrap(t).ok().expect("sole owner").stop().await;
}

/// The next JSON text message (binary frames skipped).
pub async fn next_json<S>(ws: &mut S) -> serde_json::Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match ws.next().await.expect("message").expect("ws ok") {
            Message::Text(t) => return serde_json::from_str(&t).unwrap(),
            Message::Binary(_) | Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_others_are_served() {
    let mut cfg = config();
    cfg.timeouts.header_read = Duration::from_secs(1);
    cfg.timeouts.body_read = Duration::from_secs(1);
    let t = TestServer::start(cfg).await;
    let addr = t.server.as_ref().unwrap().addr();

    // Headers dribbled out one line at a time, never finished: the server hangs up.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = tcp.into_split();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let _ = rd.read_to_end(&mut got).await;
        got
    });
    wr.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut lines_sent = 0;
    for i in 0..150 {
        if reader.is_finished() {
            break;
        }
        // Meanwhile, an ordinary client is served.
        if i == 2 {
            t.assert_serving().await;
        }
        if wr
            .write_all(format!("X-Slow-{i}: y\r\n").as_bytes())
            .await
            .is_err()
        {
            break;
        }
        lines_sent += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let got = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the server closed the slow connection")
        .unwrap();
    assert!(lines_sent < 150, "the slow client was not cut off");
    assert!(
        !got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );

    // A connection that never sends anything is closed too.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut got = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), silent.read_to_end(&mut got)).await;
    assert!(closed.is_ok(), "a silent connection was not closed");

    // A body that never completes: 408 in the error envelope.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\":",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"code\":\"request_timeout\""), "{text}");

    t.assert_serving().await;
    t.wait_idle().await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_is_503_with_retry_after() {
    use tts_server::server::catalog::Catalog;
    use tts_server::server::{app, AppState, ServerMetrics};
    let cfg = config();
    let model = Arc::new(tts_model::Model::load("demo", Default::default()).unwrap());
    let catalog = Catalog::new(&model, &[], &cfg.model_aliases).unwrap();
    // No engine yet: the state of a server that is still warming up.
    let state = AppState::new(cfg, model, catalog, ServerMetrics::new().unwrap(), None);
    let router = app(state.clone());
    let req = |method: &str, uri: &str, body: &str| {
        axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap()
    };
    for (m, uri, body) in [
        ("GET", "/ready", ""),
        ("POST", "/v1/audio/speech", "{\"input\": \"hi\"}"),
    ] {
        let resp = router.clone().oneshot(req(m, uri, body)).await.unwrap();
        assert_eq!(resp.status(), 503, "{uri}");
        assert_eq!(resp.headers()["retry-after"], "1");
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_error(&v, "not_ready", None);
    }
    let resp = router
        .clone()
        .oneshot(req("GET", "/health", ""))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Shutting down: 503 with its own code.
    state.begin_shutdown();
    let resp = router
        .oneshot(req("POST", "/v1/audio/speech", "{\"input\": \"hi\"}"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
        .await
        .unwrap();
    assert_error(
        &serde_json::from_slice(&bytes).unwrap(),
        "shutting_down",
        None,
    );
}
