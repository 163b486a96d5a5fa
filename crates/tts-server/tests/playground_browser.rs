//! The playground in headless Chromium, driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`; installed with apt-get when absent and we are root, otherwise the
//! test prints SKIPPED): the page loads its voices, plays a sentence while it streams
//! (the page reports its first scheduled audio and shows the time to first audio), and
//! Stop really cancels (the server sees the disconnect and frees the slot); with a Base
//! model it clones the voice of a recording put in its file input.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Chromium and its driver, installing them when possible; `Err` says why not.
fn ensure_chromium() -> Result<(), String> {
    let present = || Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if present() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("chromium/chromium-driver are not installed and we are not root".into());
    }
    eprintln!("installing chromium and chromium-driver with apt-get");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| format!("apt-get: {e}"))
    };
    apt(&["update", "-qq"])?;
    let st = apt(&["install", "-y", "-qq", "chromium", "chromium-driver"])?;
    if !st.success() || !present() {
        return Err("apt-get install chromium chromium-driver failed".into());
    }
    Ok(())
}

/// POSTs `body` as JSON to a WebDriver endpoint and returns the JSON answer.
async fn post_json(http: &reqwest::Client, url: String, body: &Value) -> Value {
    http.post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

struct Driver {
    child: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

impl Driver {
    async fn start(profile_dir: &Path) -> Driver {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually("chromedriver answers", || async {
            matches!(http.get(format!("{base}/status")).send().await, Ok(r) if r.status() == 200)
        })
        .await;
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-dev-shm-usage", "--window-size=1000,1000",
                    "--autoplay-policy=no-user-gesture-required",
                    format!("--user-data-dir={}", profile_dir.display()),
                ],
            },
        }}});
        let r = post_json(&http, format!("{base}/session"), &caps).await;
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"))
            .to_string();
        Driver {
            child,
            base,
            session,
            http,
        }
    }

    async fn cmd(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        let r = post_json(&self.http, url, &body).await;
        if r["value"]["error"].is_string() {
            panic!("webdriver {path}: {r}");
        }
        r["value"].clone()
    }

    async fn js(&self, script: &str) -> Value {
        self.cmd("execute/sync", json!({"script": script, "args": []}))
            .await
    }

    async fn screenshot(&self, path: &Path) {
        let r: Value = self
            .http
            .get(format!("{}/session/{}/screenshot", self.base, self.session))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(b64) = r["value"].as_str() {
            use base64::Engine as _;
            if let Ok(png) = base64::engine::general_purpose::STANDARD.decode(b64) {
                let _ = std::fs::write(path, png);
            }
        }
    }

    async fn quit(mut self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.base, self.session))
            .send()
            .await;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_plays_while_streaming_and_stop_cancels() {
    if let Err(why) = tokio::task::block_in_place(ensure_chromium) {
        report_skip(&format!(
            "playground_plays_while_streaming_and_stop_cancels: {why}"
        ));
        return;
    }
    let t = TestServer::start(config()).await;
    let profile = tempfile::tempdir().unwrap();
    let d = Driver::start(profile.path()).await;
    d.cmd("url", json!({"url": t.url("/")})).await;
    eventually("the page lists the voices", || async {
        d.js("return document.getElementById('voice').options.length")
            .await
            .as_u64()
            > Some(0)
    })
    .await;
    let title = d.js("return document.title").await;
    assert_eq!(title, "Qwen3-TTS playground");
    assert_eq!(
        d.js("return document.getElementById('noise-warning').hidden")
            .await,
        false,
        "the demo model's noise warning is shown"
    );

    // A long reply (seeded: 2092 frames, 167 s), so that Stop comes while it streams.
    let long = "The playground plays speech while it is still being generated. ".repeat(40);
    d.js(&format!(
        "document.getElementById('text').value = {}; \
         document.getElementById('seed').value = '7'; \
         document.getElementById('format').value = 'pcm'; \
         document.getElementById('play').click(); return true",
        json!(long)
    ))
    .await;
    eventually("audio starts playing", || async {
        let s = d.js("return window.playground.state").await;
        if s == "error" {
            panic!(
                "the page failed: {}",
                d.js("return window.playground.error").await
            );
        }
        s == "playing"
            && d.js("return window.playground.firstAudioMs")
                .await
                .is_number()
    })
    .await;
    let ttfa = d
        .js("return document.getElementById('ttfa').textContent")
        .await;
    assert!(
        ttfa.as_str().is_some_and(|s| s.ends_with(" ms")),
        "TTFA shown: {ttfa}"
    );
    eventually("the real-time factor is shown", || async {
        d.js("return document.getElementById('rtf').textContent")
            .await
            != "–"
    })
    .await;
    let m = t.metrics().await;
    assert_eq!(
        metric(&m, "tts_http_streams_active"),
        Some(1.0),
        "streaming: {m}"
    );
    d.screenshot(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("playground.png"))
        .await;

    // Stop: the fetch is aborted, the server notices and frees the slot.
    d.js("document.getElementById('stop').click(); return true")
        .await;
    assert_eq!(d.js("return window.playground.state").await, "stopped");
    t.wait_idle().await;
    let m = t.metrics().await;
    assert!(
        metric(&m, "tts_http_disconnects_total").unwrap_or(0.0) >= 1.0,
        "{m}"
    );
    d.quit().await;
    t.assert_serving().await;
    t.stop().await;
}

/// A 1 s 16-bit WAV of a voiced sound, base64.
fn recording_b64() -> String {
    use base64::Engine as _;
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = std::io::Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
    for i in 0..16_000 {
        let t = i as f32 / 16_000.0;
        let x = (2.0 * std::f32::consts::PI * 160.0 * t).sin() * 0.4;
        w.write_sample((x * 32767.0) as i16).unwrap();
    }
    w.finalize().unwrap();
    base64::engine::general_purpose::STANDARD.encode(out.into_inner())
}

/// With a Base model the page asks for a recording (and hides the instructions); a file
/// put in its input clones the voice and the reply plays to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_clones_a_voice_from_a_recording() {
    if let Err(why) = tokio::task::block_in_place(ensure_chromium) {
        report_skip(&format!(
            "playground_clones_a_voice_from_a_recording: {why}"
        ));
        return;
    }
    let t = TestServer::start(tts_server::server::ServerConfig {
        model: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/models/tiny-1b7-base"
        )
        .into(),
        ..config()
    })
    .await;
    let profile = tempfile::tempdir().unwrap();
    let d = Driver::start(profile.path()).await;
    d.cmd("url", json!({"url": t.url("/")})).await;
    eventually("the page asks for a recording", || async {
        d.js("return !document.getElementById('clone').hidden")
            .await
            == true
    })
    .await;
    assert_eq!(
        d.js("return document.getElementById('instructions-row').hidden")
            .await,
        true
    );
    // without a recording: a clear error, nothing sent
    d.js("document.getElementById('play').click(); return true")
        .await;
    eventually("the missing recording is reported", || async {
        d.js("return window.playground.state").await == "error"
    })
    .await;
    d.js(&format!(
        "const b = Uint8Array.from(atob({}), c => c.charCodeAt(0)); \
         const dt = new DataTransfer(); \
         dt.items.add(new File([b], 'ref.wav', {{type: 'audio/wav'}})); \
         document.getElementById('ref-audio').files = dt.files; \
         document.getElementById('ref-text').value = 'A short test recording.'; \
         document.getElementById('text').value = 'Hello there.'; \
         document.getElementById('format').value = 'pcm'; \
         document.getElementById('play').click(); return true",
        json!(recording_b64())
    ))
    .await;
    eventually("the cloned reply plays to the end", || async {
        let s = d.js("return window.playground.state").await;
        if s == "error" {
            panic!(
                "the page failed: {}",
                d.js("return window.playground.error").await
            );
        }
        s == "done"
    })
    .await;
    let seconds = d.js("return window.playground.audioSeconds").await;
    assert!(seconds.as_f64().is_some_and(|s| s > 0.0), "{seconds}");
    d.quit().await;
    t.stop().await;
}
