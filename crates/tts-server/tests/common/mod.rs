//! Test helpers: a real server on loopback (port 0) with the `demo` model, an HTTP client,
//! metrics scraping, audio decoders and polling without timing assertions.
#![allow(dead_code)]

pub mod decode;
// Not every test binary decodes audio.
#[allow(unused_imports)]
pub use decode::{opus_decode, symphonia_decode};

use std::time::Duration;

use tts_server::server::{Server, ServerConfig, ServerMetrics};

/// A server on 127.0.0.1:0 with the demo model on the CPU.
pub struct TestServer {
    pub server: Option<Server>,
    pub base: String,
    pub client: reqwest::Client,
}

pub fn config() -> ServerConfig {
    ServerConfig {
        port: 0,
        ..ServerConfig::default()
    }
}

impl TestServer {
    pub async fn start(config: ServerConfig) -> TestServer {
        let server = Server::start(config, ServerMetrics::new().unwrap())
            .await
            .expect("server starts");
        let base = format!("http://{}", server.addr());
        let t = TestServer {
            server: Some(server),
            base,
            client: reqwest::Client::new(),
        };
        t.wait_ready().await;
        t
    }

    /// Starts without waiting for readiness (for servers that need a key to ask).
    pub async fn start_unready(config: ServerConfig) -> TestServer {
        let server = Server::start(config, ServerMetrics::new().unwrap())
            .await
            .expect("server starts");
        TestServer {
            base: format!("http://{}", server.addr()),
            server: Some(server),
            client: reqwest::Client::new(),
        }
    }

    pub async fn wait_ready_with_key(&self, key: &str) {
        eventually("the server becomes ready", || async {
            let r = self
                .client
                .get(self.url("/ready"))
                .bearer_auth(key)
                .send()
                .await;
            matches!(r, Ok(r) if r.status() == 200)
        })
        .await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }

    pub async fn wait_ready(&self) {
        eventually("the server becomes ready", || async {
            matches!(self.client.get(self.url("/ready")).send().await, Ok(r) if r.status() == 200)
        })
        .await;
    }

    /// POSTs JSON to `/v1/audio/speech`.
    pub async fn speech(&self, body: serde_json::Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/audio/speech"))
            .json(&body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Waits until no request holds a slot or waits for one, and no stream is open.
    pub async fn wait_idle(&self) {
        eventually("the server is idle (gauges back to 0)", || async {
            let m = self.metrics().await;
            metric(&m, "tts_active_requests") == Some(0.0)
                && metric(&m, "tts_queue_depth") == Some(0.0)
                && metric(&m, "tts_http_streams_active") == Some(0.0)
        })
        .await;
    }

    pub async fn wait_idle_with_key(&self, key: &str) {
        eventually("the server is idle (gauges back to 0)", || async {
            let m = self
                .client
                .get(self.url("/metrics"))
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            metric(&m, "tts_active_requests") == Some(0.0)
                && metric(&m, "tts_http_streams_active") == Some(0.0)
        })
        .await;
    }

    /// A good request still works.
    pub async fn assert_serving(&self) {
        let r = self
            .speech(serde_json::json!({"input": "Still here.", "response_format": "pcm"}))
            .await;
        assert_eq!(r.status(), 200);
        let bytes = r.bytes().await.unwrap();
        assert!(!bytes.is_empty() && bytes.len() % 2 == 0);
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
            s.wait().await.expect("clean stop");
        }
    }
}

/// Polls `check` until it holds; fails after a generous bound (a hang, not a slow run).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..1200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

/// The value of an unlabelled metric (or the sum over a labelled one's series).
pub fn metric(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let base = key.split('{').next().unwrap_or(key);
        if base == name {
            let v: f64 = value.parse().ok()?;
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

/// An OpenAI error envelope with this code (and param), as the SDK parses it.
pub fn assert_error(body: &serde_json::Value, code: &str, param: Option<&str>) {
    let e = &body["error"];
    assert!(e.is_object(), "not an error envelope: {body}");
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    assert_eq!(e["code"], code, "{body}");
    match param {
        Some(p) => assert_eq!(e["param"], p, "{body}"),
        None => assert!(e["param"].is_null(), "{body}"),
    }
}

pub fn s16le(bytes: &[u8]) -> Vec<i16> {
    assert_eq!(bytes.len() % 2, 0);
    bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// Parses an SSE body into its JSON events (`data:` lines), checking the framing.
pub fn sse_events(body: &str) -> Vec<serde_json::Value> {
    assert!(body.ends_with("\n\n"), "events end with a blank line");
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let json = e
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data line: {e:?}"));
            assert!(!json.contains('\n'), "one line per event");
            serde_json::from_str(json).expect("event is JSON")
        })
        .collect()
}

/// Says that a test skipped, and why, on the real stderr: libtest captures `println!` of
/// passing tests, and a skip must be visible in the test log.
pub fn report_skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {msg}");
}
