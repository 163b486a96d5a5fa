//! End to end against a tiny fake server on 127.0.0.1:0 that streams synthetic PCM at a set
//! pace: what each prompt gets is chosen by its first word.
//!
//! - `Steady`: 240 ms of silence then tone, 2 s in all: 1.5 s at once (cut at an odd byte),
//!   the last 0.5 s 10 ms later. No underrun unless the client stalls for 1.5 s.
//! - `Stall`: 100 ms of tone, a 1 s pause, 100 ms more: at least one underrun.
//! - `Busy`: 429 with `Retry-After: 1` and an OpenAI-style error (WebSocket: an error event).
//! - `Hang`: 100 ms of tone, then nothing, never ending.
//!
//! No timing assertions: only structural facts (audible TTFA comes at least the leading
//! silence after the first byte) and generous ordering ones (a 1 s stall underruns).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde_json::{json, Value};
use tts_bench::{parse_args, BenchReport, BenchSpec, Outcome, RequestRecord};
use tts_engine::onset::{find_onset, OnsetRule};

const SR: usize = 24_000;

/// PCM bytes (s16le) of `silence_ms` of zeros then a tone, `total_ms` in all.
fn pcm(silence_ms: usize, total_ms: usize) -> Vec<u8> {
    let silence = silence_ms * SR / 1000;
    (0..total_ms * SR / 1000)
        .flat_map(|i| {
            let x = if i < silence {
                0.0
            } else {
                0.3 * (i as f32 * 0.07).sin()
            };
            ((x * 32767.0) as i16).to_le_bytes()
        })
        .collect()
}

/// The onset of the `Steady` reply in ms, by the project's rule on the whole buffer.
fn steady_onset_ms() -> f64 {
    let f: Vec<f32> = pcm(240, 2000)
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0)
        .collect();
    let onset = find_onset(&f, OnsetRule::default(), SR as u32).expect("tone is audible");
    onset as f64 * 1000.0 / SR as f64
}

/// A reply: (pause before, bytes) pieces, then whether the stream ends.
enum Reply {
    Stream(Vec<(Duration, Vec<u8>)>, bool),
    Busy,
}

fn reply_for(text: &str) -> Reply {
    let ms = Duration::from_millis;
    match text.split_whitespace().next().unwrap_or("") {
        "Steady" => {
            let b = pcm(240, 2000);
            Reply::Stream(
                vec![
                    (ms(0), b[..72_001].to_vec()),
                    (ms(10), b[72_001..].to_vec()),
                ],
                true,
            )
        }
        "Stall" => Reply::Stream(vec![(ms(0), pcm(0, 100)), (ms(1000), pcm(0, 100))], true),
        "Hang" => Reply::Stream(vec![(ms(0), pcm(0, 100))], false),
        _ => Reply::Busy,
    }
}

/// What the fake server saw of one request: Authorization, x-request-id, and the body
/// (HTTP) or the `start` message (WebSocket).
type Seen = (Option<String>, Option<String>, Value);

#[derive(Default)]
struct Fake {
    not_ready: bool,
    seen: Mutex<Vec<Seen>>,
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn ready(State(fake): State<Arc<Fake>>) -> StatusCode {
    if fake.not_ready {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn speech(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    fake.seen.lock().expect("not poisoned").push((
        header(&headers, "authorization"),
        header(&headers, "x-request-id"),
        body.clone(),
    ));
    let text = body["input"].as_str().unwrap_or("").to_string();
    match reply_for(&text) {
        Reply::Busy => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            Json(json!({"error": {"message": "queue full", "type": "rate_limit_error", "param": null, "code": "busy"}})),
        )
            .into_response(),
        Reply::Stream(pieces, ends) => {
            let stream = futures_util::stream::unfold(
                (pieces.into_iter(), ends),
                |(mut it, ends)| async move {
                    match it.next() {
                        Some((pause, bytes)) => {
                            tokio::time::sleep(pause).await;
                            Some((Ok::<_, Infallible>(Bytes::from(bytes)), (it, ends)))
                        }
                        None if ends => None,
                        None => std::future::pending().await,
                    }
                },
            );
            (
                [
                    ("content-type", "audio/pcm"),
                    ("x-sample-rate", "24000"),
                    ("x-request-id", "fake-id"),
                ],
                Body::from_stream(stream),
            )
                .into_response()
        }
    }
}

async fn ws(State(fake): State<Arc<Fake>>, headers: HeaderMap, up: WebSocketUpgrade) -> Response {
    let auth = header(&headers, "authorization");
    let id = header(&headers, "x-request-id");
    up.on_upgrade(move |socket| ws_session(fake, auth, id, socket))
}

async fn ws_session(
    fake: Arc<Fake>,
    auth: Option<String>,
    id: Option<String>,
    mut socket: WebSocket,
) {
    let mut start = Value::Null;
    let mut text = String::new();
    while let Some(Ok(msg)) = socket.recv().await {
        let Message::Text(t) = msg else { continue };
        let Ok(v) = serde_json::from_str::<Value>(t.as_str()) else {
            return;
        };
        match v["type"].as_str() {
            Some("start") => start = v,
            Some("text") => text.push_str(v["text"].as_str().unwrap_or("")),
            Some("end") => break,
            _ => {}
        }
    }
    fake.seen
        .lock()
        .expect("not poisoned")
        .push((auth, id, start));
    let send_json = |v: Value| Message::Text(v.to_string().into());
    if socket
        .send(send_json(json!({"type": "started", "sample_rate": 24000})))
        .await
        .is_err()
    {
        return;
    }
    match reply_for(&text) {
        Reply::Busy => {
            let _ = socket
                .send(send_json(
                    json!({"type": "error", "error": {"message": "queue full", "code": "busy"}}),
                ))
                .await;
        }
        Reply::Stream(pieces, ends) => {
            for (pause, bytes) in pieces {
                tokio::time::sleep(pause).await;
                if socket.send(Message::Binary(bytes.into())).await.is_err() {
                    return;
                }
            }
            if !ends {
                std::future::pending::<()>().await;
            }
            let _ = socket
                .send(send_json(
                    json!({"type": "done", "usage": {"characters": text.len()}}),
                ))
                .await;
        }
    }
}

/// Starts a fake server on its own runtime thread; returns its address and state.
fn start_fake(not_ready: bool) -> (SocketAddr, Arc<Fake>) {
    let fake = Arc::new(Fake {
        not_ready,
        ..Fake::default()
    });
    let app = Router::new()
        .route("/ready", get(ready))
        .route("/v1/audio/speech", post(speech))
        .route("/v1/audio/speech/stream", get(ws))
        .with_state(fake.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send");
            // Without TCP_NODELAY, a reply's header and first audio (separate writes) meet
            // Nagle's algorithm and the client's delayed ACK: ~40 ms added to TTFB.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app).await.expect("serve");
        });
    });
    (rx.recv().expect("server address"), fake)
}

/// A prompt file in a temporary directory.
fn prompt_file(dir: &tempfile::TempDir, lines: &[&str]) -> String {
    let path = dir.path().join("prompts.txt");
    std::fs::write(&path, lines.join("\n")).expect("write prompts");
    path.display().to_string()
}

fn bench(addr: SocketAddr, args: &[&str]) -> anyhow::Result<BenchReport> {
    let url = format!("http://{addr}");
    let mut argv = vec!["bench", "--url", &url];
    argv.extend_from_slice(args);
    let spec = BenchSpec::from_args(parse_args(argv)?)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(tts_bench::run::run(spec, None))
}

fn first_word(r: &RequestRecord, prompts: &[&str]) -> &'static str {
    match prompts[r.prompt].split_whitespace().next() {
        Some("Steady") => "steady",
        Some("Stall") => "stall",
        Some("Hang") => "hang",
        _ => "busy",
    }
}

const MIXED: [&str; 3] = [
    "Steady speech for the listener.",
    "Stall halfway through, please.",
    "Busy server says no.",
];

/// Checks what a mixed run saw, per kind; returns (steady, stall, busy) measured counts.
fn check_mixed(report: &BenchReport, busy_outcome: Outcome) -> (usize, usize, usize) {
    let onset_ms = steady_onset_ms();
    let rate = &report.rates[0];
    let records = rate.records.as_ref().expect("--raw keeps records");
    let (mut steady, mut stall, mut busy) = (0, 0, 0);
    for r in records.iter().filter(|r| r.measured) {
        match first_word(r, &MIXED) {
            "steady" => {
                steady += 1;
                assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
                let (ttfb, ttfa) = (r.ttfb_ms.expect("ttfb"), r.ttfa_ms.expect("ttfa"));
                // Playback starts with the first byte; the onset plays after the silence.
                assert!(ttfa >= ttfb + onset_ms - 1e-6, "ttfb {ttfb} ttfa {ttfa}");
                assert!(r.e2e_ms.expect("e2e") >= ttfb);
                assert_eq!(r.audio_s, 2.0);
                assert_eq!(r.bytes, 96_000);
                assert_eq!(r.underruns, 0, "a 1.5 s buffer: {r:?}");
            }
            "stall" => {
                stall += 1;
                assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
                assert!(r.underruns >= 1, "{r:?}");
                assert!(r.underrun_ms > 0.0);
                assert!(r.e2e_ms.expect("e2e") >= r.ttfa_ms.expect("ttfa"));
                assert!((r.audio_s - 0.2).abs() < 1e-9);
            }
            _ => {
                busy += 1;
                assert_eq!(r.outcome, busy_outcome, "{r:?}");
                assert!(
                    r.error.as_deref().unwrap_or("").contains("queue full"),
                    "{r:?}"
                );
                assert_eq!(r.ttfb_ms, None);
            }
        }
    }
    assert!(
        steady >= 1 && stall >= 1 && busy >= 1,
        "{steady} {stall} {busy}"
    );
    assert_eq!(rate.ok, steady + stall);
    assert_eq!(rate.sent, steady + stall + busy);
    assert_eq!(rate.errors.get(&busy_outcome.label()), Some(&busy));
    assert_eq!(rate.error_count(), busy);
    assert!(rate.streams_with_underruns >= stall);
    assert!(rate.underruns >= stall as u64);
    let ttfa = rate.ttfa_ms.expect("ttfa percentiles");
    assert_eq!(ttfa.n, steady + stall);
    assert!(ttfa.p50 <= ttfa.p95 && ttfa.p95 <= ttfa.p99 && ttfa.p99 <= ttfa.max);
    assert!(rate.throughput.chars_per_s > 0.0);
    assert!(rate.cost_per_million_chars.is_some());
    (steady, stall, busy)
}

#[test]
fn http_run_measures_ttfb_ttfa_underruns_and_errors_by_kind() {
    let (addr, fake) = start_fake(false);
    let dir = tempfile::tempdir().expect("tempdir");
    let prompts = prompt_file(&dir, &MIXED);
    let report = bench(
        addr,
        &[
            "--prompts",
            &prompts,
            "--rates",
            "12",
            "--warmup",
            "0.3",
            "--duration",
            "1.5",
            "--drain-timeout",
            "20",
            "--raw",
            "--api-key",
            "k3y",
            "--text-mode",
            "stream",
            "--extra",
            "seed=7",
            "--voice",
            "ryan",
        ],
    )
    .expect("bench runs");
    check_mixed(&report, Outcome::Http { status: 429 });
    let records = report.rates[0].records.as_ref().expect("records");
    let busy = records
        .iter()
        .find(|r| matches!(r.outcome, Outcome::Http { .. }))
        .expect("a busy one");
    assert_eq!(busy.retry_after.as_deref(), Some("1"));
    let ok = records
        .iter()
        .find(|r| r.outcome == Outcome::Ok)
        .expect("an ok one");
    assert_eq!(ok.request_id.as_deref(), Some("fake-id"));

    // Every arrival reached the server, with the request the contract describes.
    let seen = fake.seen.lock().expect("not poisoned");
    assert_eq!(seen.len(), records.len());
    for (auth, id, body) in seen.iter() {
        assert_eq!(auth.as_deref(), Some("Bearer k3y"));
        assert!(id.as_deref().unwrap_or("").starts_with("bench-0-"));
        assert_eq!(body["model"], "tts-1");
        assert_eq!(body["voice"], "ryan");
        assert_eq!(body["language"], "english");
        assert_eq!(body["response_format"], "pcm");
        assert_eq!(body["stream_format"], "audio");
        assert_eq!(body["text_mode"], "stream");
        assert_eq!(body["seed"], 7);
        assert!(MIXED.contains(&body["input"].as_str().unwrap_or("")));
    }
    println!("{}", report.table());
}

#[test]
fn websocket_run_measures_streams_and_error_events() {
    let (addr, fake) = start_fake(false);
    let dir = tempfile::tempdir().expect("tempdir");
    let prompts = prompt_file(&dir, &MIXED);
    let report = bench(
        addr,
        &[
            "--protocol",
            "ws",
            "--prompts",
            &prompts,
            "--rates",
            "12",
            "--warmup",
            "0.3",
            "--duration",
            "1.5",
            "--drain-timeout",
            "20",
            "--raw",
            "--api-key",
            "k3y",
        ],
    )
    .expect("bench runs");
    check_mixed(
        &report,
        Outcome::ErrorEvent {
            code: Some("busy".into()),
        },
    );
    let rate = &report.rates[0];
    assert_eq!(rate.connect_ms.map(|p| p.n), Some(rate.ok));
    let seen = fake.seen.lock().expect("not poisoned");
    for (auth, _, start) in seen.iter() {
        assert_eq!(auth.as_deref(), Some("Bearer k3y"));
        assert_eq!(start["type"], "start");
        assert_eq!(start["response_format"], "pcm");
        assert_eq!(start["language"], "english");
    }
    println!("{}", report.table());
}

#[test]
fn hung_streams_are_cut_at_the_drain_timeout_and_the_in_flight_bound_skips() {
    let (addr, _) = start_fake(false);
    let dir = tempfile::tempdir().expect("tempdir");
    let prompts = prompt_file(&dir, &["Hang on forever."]);
    let report = bench(
        addr,
        &[
            "--prompts",
            &prompts,
            "--rates",
            "20",
            "--warmup",
            "0",
            "--duration",
            "0.6",
            "--drain-timeout",
            "0.3",
            "--max-in-flight",
            "2",
            "--raw",
        ],
    )
    .expect("bench runs");
    let rate = &report.rates[0];
    let records = rate.records.as_ref().expect("records");
    assert!(records.len() >= 3, "seed 1 gives more than 2 arrivals");
    for r in &records[..2] {
        assert_eq!(r.outcome, Outcome::Timeout, "{r:?}");
        // Partial measurements survive the cut.
        assert!(r.ttfb_ms.is_some() && r.ttfa_ms.is_some());
        assert_eq!(r.e2e_ms, None);
    }
    assert!(records[2..].iter().all(|r| r.outcome == Outcome::Skipped));
    assert_eq!(rate.errors.get("timeout"), Some(&2));
    assert_eq!(rate.errors.get("skipped"), Some(&(records.len() - 2)));
    assert_eq!(rate.sent, 2);
    assert_eq!(rate.ok, 0);
    assert_eq!(rate.ttfa_ms, None);
    assert_eq!(rate.cost_per_million_chars, None);
}

#[test]
fn a_server_that_never_gets_ready_is_an_error() {
    let (addr, fake) = start_fake(true);
    let err = bench(addr, &["--ready-timeout", "0.3", "--duration", "1"]).expect_err("not ready");
    assert!(err.to_string().contains("not ready"), "{err}");
    assert!(fake.seen.lock().expect("not poisoned").is_empty());
}

#[test]
fn a_sweep_through_cli_main_writes_json_markdown_and_the_plot() {
    let (addr, _) = start_fake(false);
    let dir = tempfile::tempdir().expect("tempdir");
    let prompts = prompt_file(&dir, &["Steady one.", "Steady two, a little longer."]);
    let out = dir.path().join("out");
    let url = format!("http://{addr}");
    let args = parse_args([
        "bench",
        "--url",
        &url,
        "--prompts",
        &prompts,
        "--rates",
        "5,10,20",
        "--warmup",
        "0.2",
        "--duration",
        "1",
        "--label",
        "fake <server>",
        "--out",
        out.to_str().expect("utf-8 path"),
    ])
    .expect("parses");
    tts_bench::cli_main(args).expect("bench runs");

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("bench.json")).expect("json"))
            .expect("valid JSON");
    let rates = json["rates"].as_array().expect("rates");
    assert_eq!(rates.len(), 3);
    assert_eq!(json["label"], "fake <server>");
    assert_eq!(json["gpu_price_per_hour"], 4.29);
    for r in rates {
        assert_eq!(r["errors"], json!({}));
        assert_eq!(r["underruns"], 0);
        assert!(r["ttfa_ms"]["p95"].as_f64().is_some());
        assert!(r.get("records").is_none(), "no --raw");
    }
    let md = std::fs::read_to_string(out.join("bench.md")).expect("md");
    for row in ["| 5 |", "| 10 |", "| 20 |"] {
        assert!(md.contains(row), "{md}");
    }
    let svg = std::fs::read_to_string(out.join("latency_vs_rate.svg")).expect("svg");
    assert_eq!(svg.matches("<polyline").count(), 3);
    assert!(svg.contains("fake &lt;server&gt;"));
}
