//! The HTTP API as clients use it, against a real server on loopback with the `demo`
//! model: every format streams and decodes to exactly the samples the server reports,
//! SSE is well-formed, metadata endpoints answer, and API keys guard every route but
//! `/health`.

use crate::common::*;
use serde_json::json;
use tts_model::generate::random_model_frames;

const TEXT: &str = "The quick brown fox jumps over the lazy dog.";
const SEED: u64 = 1234;
const FRAME: u64 = 1920;

/// Streams a request; returns (headers, the body's chunks).
async fn stream(
    t: &TestServer,
    body: serde_json::Value,
) -> (reqwest::header::HeaderMap, Vec<bytes::Bytes>) {
    let mut r = t
        .client
        .post(t.url("/v1/audio/speech"))
        .header("x-request-id", "test-abc")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{body}");
    let headers = r.headers().clone();
    let mut chunks = Vec::new();
    while let Some(c) = r.chunk().await.unwrap() {
        chunks.push(c);
    }
    (headers, chunks)
}

fn concat(chunks: &[bytes::Bytes]) -> Vec<u8> {
    chunks.iter().flat_map(|c| c.iter().copied()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_streams_the_reported_samples() {
    let t = TestServer::start(config()).await;
    let req = |format: &str, sse: bool| {
        let mut b = json!({"model": "tts-1", "input": TEXT, "voice": "alloy", "seed": SEED,
            "response_format": format, "language": "English"});
        if sse {
            b["stream_format"] = json!("sse");
        }
        b
    };

    // The usage of this seeded request, from its SSE stream.
    let (h, chunks) = stream(&t, req("pcm", true)).await;
    assert_eq!(h["content-type"], "text/event-stream");
    let events = sse_events(std::str::from_utf8(&concat(&chunks)).unwrap());
    let usage = &events.last().unwrap()["usage"];
    let samples = usage["audio_samples"].as_u64().unwrap();
    let frames = usage["frames"].as_u64().unwrap();
    let trimmed = usage["trimmed_samples"].as_u64().unwrap();
    // Random weights: the reply is lengthed from the text (unless the noise samples EOS
    // first); the bootstrap frame and any leading silence are trimmed, and everything
    // else is sent.
    match usage["end_reason"].as_str() {
        Some("frame_limit") => assert_eq!(frames, random_model_frames(TEXT) as u64),
        Some("eos") => assert!(frames <= random_model_frames(TEXT) as u64),
        other => panic!("end_reason {other:?}"),
    }
    assert_eq!(samples + trimmed, frames * FRAME, "{usage}");
    assert!(trimmed >= FRAME, "the bootstrap frame is dropped: {usage}");
    assert_eq!(usage["sample_rate"], 24_000);
    assert_eq!(usage["output_tokens"], frames);

    // pcm: raw s16le, exactly those samples, in several chunks (streamed).
    let (h, chunks) = stream(&t, req("pcm", false)).await;
    assert_eq!(h["content-type"], "audio/pcm");
    assert_eq!(h["x-sample-rate"], "24000");
    assert_eq!(h["x-seed"], SEED.to_string().as_str());
    assert_eq!(h["x-request-id"], "test-abc");
    assert!(chunks.len() > 1, "pcm arrives in pieces as generated");
    let pcm = s16le(&concat(&chunks));
    assert_eq!(pcm.len() as u64, samples);
    let sse_pcm: Vec<u8> = events[..events.len() - 1]
        .iter()
        .flat_map(|e| {
            assert_eq!(e["type"], "speech.audio.delta");
            base64_decode(e["audio"].as_str().unwrap())
        })
        .collect();
    assert_eq!(s16le(&sse_pcm), pcm, "SSE carries the same audio");

    // wav: a streaming header (sizes unknown), then the same samples.
    let (h, chunks) = stream(&t, req("wav", false)).await;
    assert_eq!(h["content-type"], "audio/wav");
    let wav = concat(&chunks);
    assert_eq!(&wav[..4], b"RIFF");
    assert_eq!(&wav[4..8], &[0xFF; 4], "RIFF size unknown");
    assert_eq!(&wav[40..44], &[0xFF; 4], "data size unknown");
    let (rate, decoded) = symphonia_decode::<i16>(&wav, "wav");
    assert_eq!(rate, 24_000);
    assert_eq!(decoded, pcm);

    // flac: lossless, the same samples.
    let (h, chunks) = stream(&t, req("flac", false)).await;
    assert_eq!(h["content-type"], "audio/flac");
    let (rate, decoded) = symphonia_decode::<i16>(&concat(&chunks), "flac");
    assert_eq!(rate, 24_000);
    assert_eq!(decoded, pcm);

    // opus in Ogg: pre-skip and the end granule trim the decoder's output to the input.
    let (h, chunks) = stream(&t, req("opus", false)).await;
    assert_eq!(h["content-type"], "audio/ogg");
    let decoded = opus_decode(&concat(&chunks));
    assert_eq!(decoded.len() as u64, samples);

    // mp3: 192-byte frames of 576 samples; the decoder adds LAME's and its own delay
    // (1105 samples) and pads the end to a whole frame.
    let (h, chunks) = stream(&t, req("mp3", false)).await;
    assert_eq!(h["content-type"], "audio/mpeg");
    let mp3 = concat(&chunks);
    assert_eq!(mp3.len() % 192, 0);
    let (rate, decoded) = symphonia_decode::<f32>(&mp3, "mp3");
    assert_eq!(rate, 24_000);
    assert_eq!(decoded.len(), mp3.len() / 192 * 576);
    let n = decoded.len() as u64;
    assert!(
        n >= samples + 1105 && n < samples + 1105 + 2 * 576,
        "{n} vs {samples}"
    );

    // The default format is mp3.
    let r = t.speech(json!({"input": "Hi.", "voice": "nova"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/mpeg");
    let _ = r.bytes().await.unwrap();

    // A generated request id when none is sent.
    let r = t
        .speech(json!({"input": "Hi.", "response_format": "pcm"}))
        .await;
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(id.starts_with("req_"), "{id}");
    let _ = r.bytes().await.unwrap();
    t.stop().await;
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}

/// `speed` plays the same generation faster or slower: the same seed's audio, its length
/// divided by the speed (to the sample), reported as sent; out of OpenAI's 0.25-4 range it
/// is a 400 naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speed_changes_the_duration_of_the_same_audio() {
    let t = TestServer::start(config()).await;
    let req = |speed: f64, sse: bool| {
        let mut b = json!({"input": TEXT, "voice": "ryan", "seed": SEED, "speed": speed,
            "response_format": "pcm", "language": "English"});
        if sse {
            b["stream_format"] = json!("sse");
        }
        b
    };
    let (_, chunks) = stream(&t, req(1.0, false)).await;
    let normal = s16le(&concat(&chunks)).len() as f64;
    for speed in [0.5, 1.5, 2.0] {
        let (_, chunks) = stream(&t, req(speed, false)).await;
        let got = s16le(&concat(&chunks)).len() as f64;
        assert_eq!(got, (normal / speed).round(), "speed {speed}");
        let (_, chunks) = stream(&t, req(speed, true)).await;
        let events = sse_events(std::str::from_utf8(&concat(&chunks)).unwrap());
        let usage = &events.last().unwrap()["usage"];
        assert_eq!(usage["audio_samples"].as_f64(), Some(got), "{usage}");
        let secs = usage["audio_seconds"].as_f64().unwrap();
        assert!((secs - got / 24_000.0).abs() < 1e-9, "{usage}");
    }
    for speed in [0.2, 4.5] {
        let r = t
            .client
            .post(t.url("/v1/audio/speech"))
            .json(&req(speed, false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["param"], "speed", "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_events_are_well_formed() {
    let t = TestServer::start(config()).await;
    let body = json!({"input": TEXT, "voice": "ryan", "seed": 9, "response_format": "wav",
        "stream_format": "sse"});
    let (_, chunks) = stream(&t, body.clone()).await;
    let events = sse_events(std::str::from_utf8(&concat(&chunks)).unwrap());
    assert!(events.len() >= 3, "several deltas and a done");
    let (done, deltas) = events.split_last().unwrap();
    assert_eq!(done["type"], "speech.audio.done");
    let u = &done["usage"];
    for key in [
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "audio_samples",
        "frames",
    ] {
        assert!(u[key].as_u64().is_some(), "usage.{key}: {u}");
    }
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()
    );
    let mut wav = Vec::new();
    for d in deltas {
        assert_eq!(d["type"], "speech.audio.delta");
        let audio = base64_decode(d["audio"].as_str().unwrap());
        assert!(!audio.is_empty());
        wav.extend(audio);
    }
    // The deltas concatenate to the file the audio stream sends for the same seed.
    let mut plain = body;
    plain.as_object_mut().unwrap().remove("stream_format");
    let (_, chunks) = stream(&t, plain).await;
    assert_eq!(wav, concat(&chunks));
    let (_, decoded) = symphonia_decode::<i16>(&wav, "wav");
    assert_eq!(decoded.len() as u64, u["audio_samples"].as_u64().unwrap());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voices_models_health_ready_metrics() {
    let t = TestServer::start(config()).await;
    let get = |p: &str| t.client.get(t.url(p)).send();
    let v: serde_json::Value = get("/v1/audio/voices").await.unwrap().json().await.unwrap();
    assert!(v["voices"].as_array().unwrap().iter().any(|x| x == "ryan"));
    assert_eq!(v["aliases"]["alloy"], "ryan");
    assert!(v["languages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x == "english"));
    let m: serde_json::Value = get("/v1/models").await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = m["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["demo", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]);
    assert_eq!(m["data"][0]["random_weights"], true);
    assert_eq!(get("/health").await.unwrap().status(), 200);
    assert_eq!(get("/ready").await.unwrap().status(), 200);
    let page = get("/").await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("playground.js"));
    for js in ["/playground.js", "/playground.css"] {
        assert_eq!(get(js).await.unwrap().status(), 200);
    }
    let text = t.metrics().await;
    for name in [
        "tts_http_requests_total",
        "tts_active_requests",
        "tts_queue_depth",
        "tts_ready",
        "tts_engines_ready",
    ] {
        assert!(metric(&text, name).is_some(), "{name} in\n{text}");
    }
    assert_eq!(metric(&text, "tts_ready"), Some(1.0));
    assert_eq!(metric(&text, "tts_engines_ready"), Some(1.0));
    // After a request: the server-side TTFA and real-time-factor histograms, with buckets.
    t.assert_serving().await;
    let text = t.metrics().await;
    assert!(
        text.contains("tts_http_time_to_first_audio_seconds_bucket{le=\"0.001\"}"),
        "{text}"
    );
    assert!(
        text.contains("tts_http_time_to_first_audio_seconds_bucket{le=\"10\"}"),
        "{text}"
    );
    assert!(metric(&text, "tts_real_time_factor_count").unwrap() >= 1.0);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_guard_every_route_but_health() {
    let mut cfg = config();
    cfg.api_keys = vec!["sekrit".into(), "other".into()];
    let t = TestServer::start_unready(cfg).await;
    let c = &t.client;
    assert_eq!(c.get(t.url("/health")).send().await.unwrap().status(), 200);
    for path in ["/ready", "/v1/models", "/v1/audio/voices", "/metrics", "/"] {
        let r = c.get(t.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_error(&body, "invalid_api_key", None);
    }
    let r = c
        .get(t.url("/v1/models"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    t.wait_ready_with_key("other").await;
    let r = c
        .get(t.url("/v1/models"))
        .bearer_auth("sekrit")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .get(t.url("/v1/models?api_key=other"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(t.url("/v1/audio/speech"))
        .json(&json!({"input": "Hi."}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .post(t.url("/v1/audio/speech"))
        .bearer_auth("sekrit")
        .json(&json!({"input": "Hi.", "response_format": "pcm"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await.unwrap();
    t.stop().await;
}
