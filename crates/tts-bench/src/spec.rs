//! What to run: the `qwen3-tts bench` options ([`BenchArgs`], parsed by clap) and their
//! checked form ([`BenchSpec`]): target URLs, rates, windows, prompts and the request fields.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};
use hyper::Uri;
use serde::Serialize;
use serde_json::{Map, Value};

/// The English prompt set shipped with the crate (1,000 sentences, CC0; see `prompts/README.md`).
pub const EMBEDDED_PROMPTS: &str = include_str!("../prompts/en.txt");

/// Sample rate assumed when the server does not say (raw `pcm` is 24 kHz s16le mono).
pub const DEFAULT_SAMPLE_RATE: u32 = 24_000;

/// Which API the load goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// `POST /v1/audio/speech`, chunked raw PCM body.
    Http,
    /// `GET /v1/audio/speech/stream` WebSocket: start, text, end; binary PCM frames back.
    Ws,
}

/// Open-loop load generator against a running server.
///
/// Arrivals are a Poisson process at each given rate, independent of responses. Each rate
/// runs a warm-up (sent, not measured), a measured window, then waits for the window's
/// requests to finish (at most the drain timeout).
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Base URL of the server (plain HTTP; meant for loopback).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// API used for every request.
    #[arg(long, value_enum, default_value_t = Protocol::Http)]
    pub protocol: Protocol,
    /// Arrival rates in requests/s; several make a sweep (one warm-up + window each).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub rates: Vec<f64>,
    /// Warm-up per rate, in seconds: requests are sent but not measured.
    #[arg(long, default_value_t = 30.0)]
    pub warmup: f64,
    /// Measured window per rate, in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// After the last arrival, how long to wait for requests still streaming (seconds);
    /// those still running then are cut and counted as `timeout`.
    #[arg(long, default_value_t = 60.0)]
    pub drain_timeout: f64,
    /// How long to wait for `GET /ready` to answer 200 before starting (seconds).
    #[arg(long, default_value_t = 120.0)]
    pub ready_timeout: f64,
    /// Prompt file, one request text per line (default: the embedded English set).
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Voice (speaker) of every request.
    #[arg(long, default_value = "vivian")]
    pub voice: String,
    /// Language of every request.
    #[arg(long, default_value = "english")]
    pub language: String,
    /// `model` field of every request.
    #[arg(long, default_value = "tts-1")]
    pub model: String,
    /// Sent as `Authorization: Bearer KEY`.
    #[arg(long, env = "QWEN3_TTS_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Seed of the arrival schedules and of the prompt order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Safety bound on requests in flight; an arrival beyond it is not sent (`skipped`).
    #[arg(long, default_value_t = 10_000)]
    pub max_in_flight: usize,
    /// GPU price in $/hour, for the cost per million characters.
    #[arg(long, default_value_t = 4.29)]
    pub gpu_price: f64,
    /// Late audio up to this many ms is not counted as an underrun (it still delays the
    /// rest of playback, and is reported separately as tolerated).
    #[arg(long, default_value_t = 1.0)]
    pub gap_tolerance_ms: f64,
    /// Write `bench.json`, `bench.md` and (several rates) `latency_vs_rate.svg` here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A name for this run, printed in the reports.
    #[arg(long)]
    pub label: Option<String>,
    /// Sent as the `text_mode` field (e.g. `prefill` or `stream`).
    #[arg(long)]
    pub text_mode: Option<String>,
    /// Extra request field, repeatable. VALUE is parsed as JSON when it is JSON
    /// (`seed=7`, `speed=1.0`, `x=true`), otherwise sent as a string.
    #[arg(long = "extra", value_name = "KEY=VALUE")]
    pub extra: Vec<String>,
    /// Also write every request's record into `bench.json`.
    #[arg(long)]
    pub raw: bool,
    /// Base models: send this recording (base64) as every request's `ref_audio`; give its
    /// transcript with `--extra ref_text=...` or `--extra x_vector_only_mode=true`.
    #[arg(long)]
    pub ref_audio: Option<PathBuf>,
}

/// A bad option value.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("--url {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("--rates: {0} is not a positive finite rate")]
    Rate(f64),
    #[error("--rates: at least one rate is needed")]
    NoRates,
    #[error("--{name}: {value} is not a valid number of seconds")]
    Seconds { name: &'static str, value: f64 },
    #[error("--{name}: {value} is not valid")]
    Value { name: &'static str, value: f64 },
    #[error("--extra {0:?}: expected KEY=VALUE")]
    Extra(String),
    #[error("--extra {0:?}: this field is set by the benchmark itself")]
    ReservedField(String),
    #[error("--max-in-flight must be at least 1")]
    MaxInFlight,
    #[error("prompt file {path}: {source}")]
    PromptFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the prompt set has no non-empty line")]
    NoPrompts,
    #[error("--ref-audio {path}: {source}")]
    RefAudio {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Request fields the benchmark sets itself; `--extra` may not override them.
const RESERVED_FIELDS: &[&str] = &["input", "response_format", "stream_format", "type", "text"];

/// The checked options of a run.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    /// The base URL as given, without a trailing slash.
    pub base: String,
    pub speech_uri: Uri,
    pub ready_uri: Uri,
    /// `ws://.../v1/audio/speech/stream`.
    pub ws_url: String,
    pub protocol: Protocol,
    pub rates: Vec<f64>,
    pub warmup: Duration,
    pub duration: Duration,
    pub drain_timeout: Duration,
    pub ready_timeout: Duration,
    pub prompts: Vec<String>,
    /// Where the prompts came from (a path, or "embedded en.txt").
    pub prompts_source: String,
    pub voice: String,
    pub language: String,
    pub model: String,
    pub api_key: Option<String>,
    pub seed: u64,
    pub max_in_flight: usize,
    pub gpu_price: f64,
    pub gap_tolerance: Duration,
    pub out: Option<PathBuf>,
    pub label: Option<String>,
    /// `text_mode` and `--extra` fields, added to every request.
    pub extra_fields: Map<String, Value>,
    pub raw: bool,
}

impl BenchSpec {
    pub fn from_args(a: BenchArgs) -> Result<Self, SpecError> {
        let base = a.url.trim_end_matches('/').to_string();
        let url_err = |reason: &str| SpecError::Url {
            url: a.url.clone(),
            reason: reason.to_string(),
        };
        let parsed: Uri =
            base.parse()
                .map_err(|e: hyper::http::uri::InvalidUri| SpecError::Url {
                    url: a.url.clone(),
                    reason: e.to_string(),
                })?;
        if parsed.scheme_str() != Some("http") {
            return Err(url_err("only plain http:// URLs are supported"));
        }
        if parsed.authority().is_none() {
            return Err(url_err("no host"));
        }
        if parsed.query().is_some() {
            return Err(url_err("a base URL has no query"));
        }
        let join = |path: &str| -> Result<Uri, SpecError> {
            format!("{base}{path}")
                .parse()
                .map_err(|e: hyper::http::uri::InvalidUri| url_err(&e.to_string()))
        };
        let speech_uri = join("/v1/audio/speech")?;
        let ready_uri = join("/ready")?;
        let ws_url = format!("ws://{}/v1/audio/speech/stream", &base["http://".len()..]);

        if a.rates.is_empty() {
            return Err(SpecError::NoRates);
        }
        if let Some(&r) = a.rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
            return Err(SpecError::Rate(r));
        }
        let secs = |name: &'static str, value: f64, positive: bool| {
            let ok = value.is_finite() && value >= 0.0 && (!positive || value > 0.0);
            if ok && value < 1e9 {
                Ok(Duration::from_secs_f64(value))
            } else {
                Err(SpecError::Seconds { name, value })
            }
        };
        let warmup = secs("warmup", a.warmup, false)?;
        let duration = secs("duration", a.duration, true)?;
        let drain_timeout = secs("drain-timeout", a.drain_timeout, false)?;
        let ready_timeout = secs("ready-timeout", a.ready_timeout, false)?;
        let gap_tolerance = secs("gap-tolerance-ms", a.gap_tolerance_ms / 1e3, false)?;
        if !(a.gpu_price.is_finite() && a.gpu_price >= 0.0) {
            return Err(SpecError::Value {
                name: "gpu-price",
                value: a.gpu_price,
            });
        }
        if a.max_in_flight == 0 {
            return Err(SpecError::MaxInFlight);
        }

        let (text, prompts_source) = match &a.prompts {
            Some(path) => (
                std::fs::read_to_string(path).map_err(|source| SpecError::PromptFile {
                    path: path.clone(),
                    source,
                })?,
                path.display().to_string(),
            ),
            None => (EMBEDDED_PROMPTS.to_string(), "embedded en.txt".to_string()),
        };
        let prompts = parse_prompts(&text);
        if prompts.is_empty() {
            return Err(SpecError::NoPrompts);
        }

        let mut extra_fields = Map::new();
        if let Some(mode) = &a.text_mode {
            extra_fields.insert("text_mode".into(), Value::String(mode.clone()));
        }
        for kv in &a.extra {
            let (key, value) = parse_extra(kv)?;
            extra_fields.insert(key, value);
        }
        if let Some(path) = &a.ref_audio {
            use base64::Engine as _;
            let bytes = std::fs::read(path).map_err(|source| SpecError::RefAudio {
                path: path.clone(),
                source,
            })?;
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            extra_fields.insert("ref_audio".into(), Value::String(b64));
        }

        Ok(Self {
            base,
            speech_uri,
            ready_uri,
            ws_url,
            protocol: a.protocol,
            rates: a.rates,
            warmup,
            duration,
            drain_timeout,
            ready_timeout,
            prompts,
            prompts_source,
            voice: a.voice,
            language: a.language,
            model: a.model,
            api_key: a.api_key.filter(|k| !k.is_empty()),
            seed: a.seed,
            max_in_flight: a.max_in_flight,
            gpu_price: a.gpu_price,
            gap_tolerance,
            out: a.out,
            label: a.label,
            extra_fields,
            raw: a.raw,
        })
    }

    /// The `POST /v1/audio/speech` body for one text.
    pub fn http_body(&self, text: &str) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), self.model.clone().into());
        body.insert("input".into(), text.into());
        body.insert("voice".into(), self.voice.clone().into());
        body.insert("response_format".into(), "pcm".into());
        body.insert("stream_format".into(), "audio".into());
        body.insert("language".into(), self.language.clone().into());
        for (k, v) in &self.extra_fields {
            body.insert(k.clone(), v.clone());
        }
        Value::Object(body)
    }

    /// The WebSocket `start` message (the text follows in `text` messages).
    pub fn ws_start(&self) -> Value {
        let mut start = Map::new();
        start.insert("type".into(), "start".into());
        start.insert("model".into(), self.model.clone().into());
        start.insert("voice".into(), self.voice.clone().into());
        start.insert("language".into(), self.language.clone().into());
        start.insert("response_format".into(), "pcm".into());
        for (k, v) in &self.extra_fields {
            start.insert(k.clone(), v.clone());
        }
        Value::Object(start)
    }
}

/// Non-empty lines, trimmed.
pub fn parse_prompts(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// `KEY=VALUE`: VALUE as JSON when it parses, else as a string.
pub fn parse_extra(kv: &str) -> Result<(String, Value), SpecError> {
    let (key, value) = kv
        .split_once('=')
        .filter(|(k, _)| !k.trim().is_empty())
        .ok_or_else(|| SpecError::Extra(kv.to_string()))?;
    let key = key.trim().to_string();
    if RESERVED_FIELDS.contains(&key.as_str()) {
        return Err(SpecError::ReservedField(kv.to_string()));
    }
    let value =
        serde_json::from_str::<Value>(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key, value))
}

/// Parses bench options from an argument list as the `bench` subcommand would (the first
/// item is the program name), for programs and tests that do not go through the binary.
pub fn parse_args<I, T>(argv: I) -> Result<BenchArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    #[derive(Parser)]
    struct Standalone {
        #[command(flatten)]
        args: BenchArgs,
    }
    Standalone::try_parse_from(argv).map(|s| s.args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &[&str]) -> Result<BenchSpec, SpecError> {
        let mut argv = vec!["bench"];
        argv.extend_from_slice(extra);
        BenchSpec::from_args(parse_args(argv).expect("parses"))
    }

    #[test]
    fn defaults_and_urls() {
        let s = spec(&[]).unwrap();
        assert_eq!(s.speech_uri, "http://127.0.0.1:8000/v1/audio/speech");
        assert_eq!(s.ready_uri, "http://127.0.0.1:8000/ready");
        assert_eq!(s.ws_url, "ws://127.0.0.1:8000/v1/audio/speech/stream");
        assert_eq!(s.prompts.len(), 1000);
        assert_eq!(s.rates, vec![1.0]);
        assert_eq!(s.warmup, Duration::from_secs(30));
        assert_eq!(s.duration, Duration::from_secs(60));
        assert_eq!(s.gpu_price, 4.29);
        let s = spec(&["--url", "http://localhost:9/base/", "--rates", "1,5,10"]).unwrap();
        assert_eq!(s.speech_uri, "http://localhost:9/base/v1/audio/speech");
        assert_eq!(s.ws_url, "ws://localhost:9/base/v1/audio/speech/stream");
        assert_eq!(s.rates, vec![1.0, 5.0, 10.0]);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(matches!(
            spec(&["--url", "https://x"]),
            Err(SpecError::Url { .. })
        ));
        assert!(matches!(spec(&["--rates", "1,0"]), Err(SpecError::Rate(_))));
        assert!(matches!(
            spec(&["--duration", "0"]),
            Err(SpecError::Seconds { .. })
        ));
        assert!(matches!(
            spec(&["--extra", "novalue"]),
            Err(SpecError::Extra(_))
        ));
        assert!(matches!(
            spec(&["--extra", "input=x"]),
            Err(SpecError::ReservedField(_))
        ));
        assert!(matches!(
            spec(&["--max-in-flight", "0"]),
            Err(SpecError::MaxInFlight)
        ));
    }

    #[test]
    fn request_fields_carry_passthrough_values() {
        let s = spec(&[
            "--voice",
            "ryan",
            "--text-mode",
            "stream",
            "--extra",
            "seed=7",
            "--extra",
            "instructions=calm and slow",
            "--extra",
            "sampling={\"top_k\":5}",
        ])
        .unwrap();
        let body = s.http_body("Hello.");
        assert_eq!(body["input"], "Hello.");
        assert_eq!(body["voice"], "ryan");
        assert_eq!(body["model"], "tts-1");
        assert_eq!(body["response_format"], "pcm");
        assert_eq!(body["stream_format"], "audio");
        assert_eq!(body["language"], "english");
        assert_eq!(body["text_mode"], "stream");
        assert_eq!(body["seed"], 7);
        assert_eq!(body["instructions"], "calm and slow");
        assert_eq!(body["sampling"]["top_k"], 5);
        let start = s.ws_start();
        assert_eq!(start["type"], "start");
        assert_eq!(start["seed"], 7);
        assert!(start.get("input").is_none());
    }

    #[test]
    fn a_reference_recording_is_sent_as_base64() {
        use base64::Engine as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ref.wav");
        std::fs::write(&path, b"RIFF....WAVE").unwrap();
        let s = spec(&[
            "--ref-audio",
            path.to_str().unwrap(),
            "--extra",
            "ref_text=hello there",
        ])
        .unwrap();
        let body = s.http_body("Hi.");
        let sent = body["ref_audio"].as_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(sent)
            .unwrap();
        assert_eq!(decoded, b"RIFF....WAVE");
        assert_eq!(body["ref_text"], "hello there");
        assert_eq!(s.ws_start()["ref_audio"], body["ref_audio"]);
        assert!(matches!(
            spec(&["--ref-audio", "/no/such/file.wav"]),
            Err(SpecError::RefAudio { .. })
        ));
    }

    #[test]
    fn prompt_lines_are_trimmed_and_blank_lines_dropped() {
        assert_eq!(parse_prompts("a \n\n  b\r\n"), vec!["a", "b"]);
    }
}
