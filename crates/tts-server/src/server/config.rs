//! The server's configuration: `qwen3-tts serve` flags (each also read from a
//! `QWEN3_TTS_*` environment variable), an optional TOML file (`--config`, unknown keys
//! rejected), and the resolved [`ServerConfig`]. Precedence: flag or environment, then the
//! file, then the default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;
use tts_engine::Profile;

use crate::backend::Device;

/// `qwen3-tts serve` options. Every one is optional here: what is not given comes from the
/// `--config` file, then from the defaults (shown in brackets).
// The doc comments are clap's help texts: `[default]` there is not a link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML file with any of these options (snake_case keys, e.g. `max_queue = 64`);
    /// flags and environment variables override it.
    #[arg(long, env = "QWEN3_TTS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Checkpoint directory, `demo`, `random:1.7b` or `random:0.6b` (`-base`: voice cloning) [demo].
    #[arg(long, env = "QWEN3_TTS_MODEL")]
    pub model: Option<String>,
    /// Device: cpu, cuda or cuda:N [cpu].
    #[arg(long, env = "QWEN3_TTS_DEVICE")]
    pub device: Option<Device>,
    /// Address to listen on [127.0.0.1].
    #[arg(long, env = "QWEN3_TTS_HOST")]
    pub host: Option<String>,
    /// Port to listen on; 0 picks a free one (logged) [8000].
    #[arg(long, env = "QWEN3_TTS_PORT")]
    pub port: Option<u16>,
    /// Scheduling profile: latency, balanced or throughput [balanced].
    #[arg(long, env = "QWEN3_TTS_PROFILE")]
    pub profile: Option<String>,
    /// A stream whose client buffer runs dry within this many ms goes first [the
    /// profile's: 40 for balanced].
    #[arg(long, env = "QWEN3_TTS_RESERVE_MS")]
    pub reserve_ms: Option<u64>,
    /// Such a stream goes first for the model stages its next frame needs too, not only
    /// for its codec call (true/false) [true].
    #[arg(long, env = "QWEN3_TTS_URGENT_MODEL_STAGES", action = clap::ArgAction::Set)]
    pub urgent_model_stages: Option<bool>,
    /// Run each code-predictor call beside a talker step of other requests, on two CUDA
    /// streams (true/false): more requests per second without underruns, a higher TTFA
    /// [false].
    #[arg(long, env = "QWEN3_TTS_SIDE_BY_SIDE", action = clap::ArgAction::Set)]
    pub side_by_side: Option<bool>,
    /// Run each prefill together with a talker step of other requests as one talker pass
    /// (true/false; CUDA): a higher request rate at the same TTFA [the profile's: true for
    /// balanced, false for the others].
    #[arg(long, env = "QWEN3_TTS_PREFILL_WITH_STEP", action = clap::ArgAction::Set)]
    pub prefill_with_step: Option<bool>,
    /// Most frames one codec call decodes, over all its streams [the profile's: 160 for
    /// balanced].
    #[arg(long, env = "QWEN3_TTS_CODEC_MAX_FRAMES")]
    pub codec_max_frames: Option<usize>,
    /// Streams with a chunk ready to decode from which a codec call also takes longer
    /// chunks than its own rows' (fewer, larger codec calls under deep load); a number
    /// above --max-slots turns it off [the profile's: 64 for balanced, never for the
    /// others].
    #[arg(long, env = "QWEN3_TTS_CODEC_LONG_TOP_UPS_FROM")]
    pub codec_long_top_ups_from: Option<usize>,
    /// Most rows in one call of a stage, a power of two (the largest CUDA graph bucket;
    /// the backend's is also at most the slots rounded up to a power of two) [128].
    #[arg(long, env = "QWEN3_TTS_MAX_BATCH")]
    pub max_batch: Option<usize>,
    /// Requests that may wait for a slot; beyond it 429 with Retry-After [64].
    #[arg(long, env = "QWEN3_TTS_MAX_QUEUE")]
    pub max_queue: Option<usize>,
    /// Backend slots (per-request state kept in memory) [8 on cpu, 64 on cuda].
    #[arg(long, env = "QWEN3_TTS_MAX_SLOTS")]
    pub max_slots: Option<usize>,
    /// Most requests generating at once [= max-slots].
    #[arg(long, env = "QWEN3_TTS_MAX_ACTIVE")]
    pub max_active: Option<usize>,
    /// Engines sharing the device, each with its own backend (a copy of the weights, its
    /// own stream) and an equal share of the slots, queue and active limit; a request goes
    /// to the least loaded. Their stage calls run side by side on the GPU [1].
    #[arg(long, env = "QWEN3_TTS_REPLICAS")]
    pub replicas: Option<usize>,
    /// Longest `input` (and streamed text) in characters [4096].
    #[arg(long, env = "QWEN3_TTS_MAX_INPUT_CHARS")]
    pub max_input_chars: Option<usize>,
    /// Accepted API key (repeatable; env: comma-separated). With none, no key is needed.
    #[arg(
        long = "api-key",
        env = "QWEN3_TTS_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<String>,
    /// Voice alias `name=speaker` (repeatable; env: comma-separated). OpenAI's voice names
    /// map onto the model's speakers by default.
    #[arg(
        long = "voice-alias",
        env = "QWEN3_TTS_VOICE_ALIASES",
        value_delimiter = ','
    )]
    pub voice_aliases: Vec<String>,
    /// Model name accepted for the loaded model (repeatable; env: comma-separated)
    /// [tts-1, tts-1-hd, gpt-4o-mini-tts].
    #[arg(
        long = "model-alias",
        env = "QWEN3_TTS_MODEL_ALIASES",
        value_delimiter = ','
    )]
    pub model_aliases: Vec<String>,
    /// Seconds a client may take to send a request's headers [10].
    #[arg(long, env = "QWEN3_TTS_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: Option<f64>,
    /// Seconds a client may take to send a request's body [10].
    #[arg(long, env = "QWEN3_TTS_BODY_READ_TIMEOUT")]
    pub body_read_timeout: Option<f64>,
    /// Seconds a write to a client may stall (a client that stopped reading) [30].
    #[arg(long, env = "QWEN3_TTS_WRITE_TIMEOUT")]
    pub write_timeout: Option<f64>,
    /// Seconds a WebSocket may stay silent while nothing is being generated [120].
    #[arg(long, env = "QWEN3_TTS_WS_IDLE_TIMEOUT")]
    pub ws_idle_timeout: Option<f64>,
    /// Seconds in-flight streams may take to finish after SIGTERM/SIGINT [30].
    #[arg(long, env = "QWEN3_TTS_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<f64>,
    /// After its last work the engine polls for new requests this many ms before it
    /// sleeps, keeping one CPU core busy meanwhile: a request arriving then skips the
    /// thread's wake-up (~0.2 ms of its first audio on an H100 machine) [0].
    #[arg(long, env = "QWEN3_TTS_IDLE_SPIN_MS")]
    pub idle_spin_ms: Option<u64>,
    /// Report ready without the warm-up synthesis.
    #[arg(long, env = "QWEN3_TTS_NO_WARMUP")]
    pub no_warmup: bool,
    /// Ignore unknown keys in the checkpoint's config files (logged) instead of failing.
    #[arg(long, env = "QWEN3_TTS_LENIENT_CONFIG")]
    pub lenient_config: bool,
}

/// The `--config` file: the same options, snake_case; unknown keys are an error.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub model: Option<String>,
    pub device: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub profile: Option<String>,
    pub reserve_ms: Option<u64>,
    pub urgent_model_stages: Option<bool>,
    pub side_by_side: Option<bool>,
    pub prefill_with_step: Option<bool>,
    pub codec_max_frames: Option<usize>,
    pub codec_long_top_ups_from: Option<usize>,
    pub max_batch: Option<usize>,
    pub max_queue: Option<usize>,
    pub max_slots: Option<usize>,
    pub max_active: Option<usize>,
    pub replicas: Option<usize>,
    pub max_input_chars: Option<usize>,
    pub api_keys: Option<Vec<String>>,
    /// `alias = "speaker"`.
    pub voice_aliases: Option<BTreeMap<String, String>>,
    pub model_aliases: Option<Vec<String>>,
    pub header_read_timeout: Option<f64>,
    pub body_read_timeout: Option<f64>,
    pub write_timeout: Option<f64>,
    pub ws_idle_timeout: Option<f64>,
    pub shutdown_grace: Option<f64>,
    pub idle_spin_ms: Option<u64>,
    pub warmup: Option<bool>,
    pub lenient_config: Option<bool>,
}

/// A configuration that cannot be used (names the option at fault).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("option `{option}`: {message}")]
    Invalid {
        option: &'static str,
        message: String,
    },
}

fn invalid(option: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        option,
        message: message.into(),
    }
}

/// Timeouts for slow or stalled clients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    pub header_read: Duration,
    pub body_read: Duration,
    pub write: Duration,
    pub ws_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            header_read: Duration::from_secs(10),
            body_read: Duration::from_secs(10),
            write: Duration::from_secs(30),
            ws_idle: Duration::from_secs(120),
        }
    }
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub model: String,
    pub device: Device,
    pub host: String,
    pub port: u16,
    pub profile: Profile,
    pub max_queue: usize,
    pub max_slots: usize,
    pub max_active: Option<usize>,
    /// Engines sharing the device (slots, queue and active limit split between them).
    pub replicas: usize,
    pub max_input_chars: usize,
    pub api_keys: Vec<String>,
    /// (alias, speaker), in the order given.
    pub voice_aliases: Vec<(String, String)>,
    pub model_aliases: Vec<String>,
    pub timeouts: Timeouts,
    pub shutdown_grace: Duration,
    /// How long the idle engine polls before it sleeps.
    pub idle_spin: Duration,
    pub warmup: bool,
    pub lenient_config: bool,
}

/// Longest idle poll (`idle_spin_ms`): a minute.
pub const MAX_IDLE_SPIN_MS: u64 = 60_000;

pub const DEFAULT_MODEL_ALIASES: [&str; 3] = ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"];

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            model: "demo".into(),
            device: Device::Cpu,
            host: "127.0.0.1".into(),
            port: 8000,
            profile: Profile::balanced(),
            max_queue: 64,
            max_slots: default_slots(Device::Cpu),
            max_active: None,
            replicas: 1,
            max_input_chars: 4096,
            api_keys: Vec::new(),
            voice_aliases: Vec::new(),
            model_aliases: DEFAULT_MODEL_ALIASES.map(String::from).to_vec(),
            timeouts: Timeouts::default(),
            shutdown_grace: Duration::from_secs(30),
            idle_spin: Duration::ZERO,
            warmup: true,
            lenient_config: false,
        }
    }
}

fn default_slots(device: Device) -> usize {
    match device {
        Device::Cpu => 8,
        Device::Cuda(_) => 64,
    }
}

impl FileConfig {
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }
}

impl ServeArgs {
    /// Reads the `--config` file (if any) and resolves everything.
    pub fn resolve(&self) -> Result<ServerConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => FileConfig::read(path)?,
            None => FileConfig::default(),
        };
        self.resolve_with(file)
    }

    /// Resolves these arguments over `file` over the defaults.
    pub fn resolve_with(&self, file: FileConfig) -> Result<ServerConfig, ConfigError> {
        let d = ServerConfig::default();
        let device = match (self.device, &file.device) {
            (Some(dev), _) => dev,
            (None, Some(s)) => s.parse().map_err(|e: String| invalid("device", e))?,
            (None, None) => d.device,
        };
        let profile_name = self.profile.clone().or(file.profile);
        let mut profile = match profile_name {
            Some(name) => Profile::named(&name).map_err(|e| invalid("profile", e.to_string()))?,
            None => d.profile,
        };
        if let Some(ms) = self.reserve_ms.or(file.reserve_ms) {
            profile.policy.reserve = Duration::from_millis(ms);
            profile
                .policy
                .validate()
                .map_err(|e| invalid("reserve_ms", e.to_string()))?;
        }
        if let Some(on) = self.urgent_model_stages.or(file.urgent_model_stages) {
            profile.policy.urgent_model_stages = on;
        }
        if let Some(on) = self.side_by_side.or(file.side_by_side) {
            profile.policy.side_by_side = on;
        }
        if let Some(on) = self.prefill_with_step.or(file.prefill_with_step) {
            profile.policy.prefill_with_step = on;
        }
        if let Some(frames) = self.codec_max_frames.or(file.codec_max_frames) {
            profile.policy.codec_max_frames = frames;
            profile
                .policy
                .validate()
                .map_err(|e| invalid("codec_max_frames", e.to_string()))?;
        }
        if let Some(rows) = self
            .codec_long_top_ups_from
            .or(file.codec_long_top_ups_from)
        {
            profile.policy.codec_long_top_ups_from = rows;
        }
        if let Some(rows) = self.max_batch.or(file.max_batch) {
            profile
                .policy
                .set_max_batch(rows)
                .map_err(|e| invalid("max_batch", e.to_string()))?;
        }
        let secs = |option: &'static str,
                    cli: Option<f64>,
                    file: Option<f64>,
                    default: Duration| {
            match cli.or(file) {
                None => Ok(default),
                Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
                Some(s) => Err(invalid(
                    option,
                    format!("{s} is not a positive number of seconds"),
                )),
            }
        };
        let timeouts = Timeouts {
            header_read: secs(
                "header_read_timeout",
                self.header_read_timeout,
                file.header_read_timeout,
                d.timeouts.header_read,
            )?,
            body_read: secs(
                "body_read_timeout",
                self.body_read_timeout,
                file.body_read_timeout,
                d.timeouts.body_read,
            )?,
            write: secs(
                "write_timeout",
                self.write_timeout,
                file.write_timeout,
                d.timeouts.write,
            )?,
            ws_idle: secs(
                "ws_idle_timeout",
                self.ws_idle_timeout,
                file.ws_idle_timeout,
                d.timeouts.ws_idle,
            )?,
        };
        // A grace of 0 is allowed: stop at once.
        let shutdown_grace = match self.shutdown_grace.or(file.shutdown_grace) {
            None => d.shutdown_grace,
            Some(s) if s.is_finite() && (0.0..1e9).contains(&s) => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(invalid(
                    "shutdown_grace",
                    format!("{s} is not a number of seconds"),
                ))
            }
        };
        let idle_spin = match self.idle_spin_ms.or(file.idle_spin_ms) {
            None => d.idle_spin,
            Some(ms) if ms <= MAX_IDLE_SPIN_MS => Duration::from_millis(ms),
            Some(ms) => {
                return Err(invalid(
                    "idle_spin_ms",
                    format!("{ms} is more than {MAX_IDLE_SPIN_MS} ms"),
                ))
            }
        };
        let voice_aliases = if !self.voice_aliases.is_empty() {
            self.voice_aliases
                .iter()
                .map(|s| parse_alias(s))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            file.voice_aliases.unwrap_or_default().into_iter().collect()
        };
        let list = |cli: &[String], file: Option<Vec<String>>, default: Vec<String>| {
            let v: Vec<String> = if !cli.is_empty() {
                cli.to_vec()
            } else {
                file.unwrap_or(default)
            };
            v.into_iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        };
        let cfg = ServerConfig {
            model: self.model.clone().or(file.model).unwrap_or(d.model),
            device,
            host: self.host.clone().or(file.host).unwrap_or(d.host),
            port: self.port.or(file.port).unwrap_or(d.port),
            profile,
            max_queue: self.max_queue.or(file.max_queue).unwrap_or(d.max_queue),
            max_slots: self
                .max_slots
                .or(file.max_slots)
                .unwrap_or_else(|| default_slots(device)),
            max_active: self.max_active.or(file.max_active),
            replicas: self.replicas.or(file.replicas).unwrap_or(d.replicas),
            max_input_chars: self
                .max_input_chars
                .or(file.max_input_chars)
                .unwrap_or(d.max_input_chars),
            api_keys: list(&self.api_keys, file.api_keys, Vec::new()),
            voice_aliases,
            model_aliases: list(&self.model_aliases, file.model_aliases, d.model_aliases),
            timeouts,
            shutdown_grace,
            idle_spin,
            warmup: !self.no_warmup && file.warmup.unwrap_or(true),
            lenient_config: self.lenient_config || file.lenient_config.unwrap_or(false),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl ServerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_queue == 0 {
            return Err(invalid("max_queue", "must be at least 1"));
        }
        if self.max_slots == 0 {
            return Err(invalid("max_slots", "must be at least 1"));
        }
        match self.max_active {
            Some(0) => return Err(invalid("max_active", "must be at least 1")),
            Some(n) if n > self.max_slots => {
                return Err(invalid(
                    "max_active",
                    format!("{n} exceeds max_slots ({})", self.max_slots),
                ))
            }
            _ => {}
        }
        if self.replicas == 0 || self.replicas > self.max_slots.min(self.max_queue) {
            return Err(invalid(
                "replicas",
                format!(
                    "{} engines: need at least 1, and at most max_slots ({}) and max_queue ({})",
                    self.replicas, self.max_slots, self.max_queue
                ),
            ));
        }
        if self.max_input_chars == 0 {
            return Err(invalid("max_input_chars", "must be at least 1"));
        }
        Ok(())
    }
}

/// `name=speaker`.
fn parse_alias(s: &str) -> Result<(String, String), ConfigError> {
    match s.split_once('=') {
        Some((a, v)) if !a.trim().is_empty() && !v.trim().is_empty() => {
            Ok((a.trim().to_string(), v.trim().to_string()))
        }
        _ => Err(invalid(
            "voice_alias",
            format!("`{s}` is not of the form name=speaker"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_overrides_file_overrides_defaults() {
        let file: FileConfig = toml::from_str(
            "port = 9000\nmax_queue = 3\nprofile = \"latency\"\n[voice_aliases]\nalloy = \"vivian\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            port: Some(9100),
            ..Default::default()
        };
        let c = args.resolve_with(file).unwrap();
        assert_eq!(c.port, 9100);
        assert_eq!(c.max_queue, 3);
        assert_eq!(c.profile.name, "latency");
        assert_eq!(c.voice_aliases, vec![("alloy".into(), "vivian".into())]);
        assert_eq!(c.model, "demo");
        assert_eq!(c.model_aliases.len(), 3);
        assert!(c.profile.policy.urgent_model_stages);
    }

    #[test]
    fn scheduling_knobs_override_the_profile() {
        let file: FileConfig = toml::from_str(
            "reserve_ms = 55\nside_by_side = true\ncodec_long_top_ups_from = 48\n\
                 prefill_with_step = false\n",
        )
        .unwrap();
        let args = ServeArgs {
            urgent_model_stages: Some(false),
            ..Default::default()
        };
        let c = args.resolve_with(file).unwrap();
        assert!(c.profile.policy.side_by_side);
        assert!(!c.profile.policy.prefill_with_step);
        assert_eq!(c.profile.policy.codec_long_top_ups_from, 48);
        assert_eq!(c.profile.name, "balanced");
        assert_eq!(c.profile.policy.reserve, Duration::from_millis(55));
        assert!(!c.profile.policy.urgent_model_stages);
        let args = ServeArgs {
            codec_long_top_ups_from: Some(32),
            ..Default::default()
        };
        let c = args.resolve_with(FileConfig::default()).unwrap();
        assert_eq!(c.profile.policy.codec_long_top_ups_from, 32);
        let c = ServeArgs::default()
            .resolve_with(FileConfig::default())
            .unwrap();
        assert_eq!(c.profile.policy.codec_long_top_ups_from, 64);
        assert!(c.profile.policy.prefill_with_step);
        let args = ServeArgs {
            profile: Some("throughput".into()),
            ..Default::default()
        };
        let c = args.resolve_with(FileConfig::default()).unwrap();
        assert_eq!(c.profile.policy.codec_long_top_ups_from, usize::MAX);
        assert!(!c.profile.policy.prefill_with_step);
        // A reserve beyond the profile's lead (150 ms for balanced) is refused by name.
        let args = ServeArgs {
            reserve_ms: Some(500),
            ..Default::default()
        };
        let err = args.resolve_with(FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("reserve_ms"), "{err}");
        let file: FileConfig = toml::from_str("codec_max_frames = 0\n").unwrap();
        let err = ServeArgs::default().resolve_with(file).unwrap_err();
        assert!(err.to_string().contains("codec_max_frames"), "{err}");
        assert_eq!(
            ServeArgs::default()
                .resolve_with(FileConfig::default())
                .unwrap()
                .profile
                .policy
                .codec_max_frames,
            160
        );
        let c = ServeArgs::default()
            .resolve_with(FileConfig::default())
            .unwrap();
        assert_eq!(c.profile.policy.max_rows(), 128);
        let file: FileConfig = toml::from_str("max_batch = 32\n").unwrap();
        let c = ServeArgs::default().resolve_with(file).unwrap();
        assert_eq!(c.profile.policy.max_rows(), 32);
        let args = ServeArgs {
            max_batch: Some(100),
            ..Default::default()
        };
        let err = args.resolve_with(FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("max_batch"), "{err}");
    }

    #[test]
    fn idle_spin_is_off_by_default_and_bounded() {
        let c = ServeArgs::default()
            .resolve_with(FileConfig::default())
            .unwrap();
        assert_eq!(c.idle_spin, Duration::ZERO);
        let file: FileConfig = toml::from_str("idle_spin_ms = 1500\n").unwrap();
        let c = ServeArgs::default().resolve_with(file.clone()).unwrap();
        assert_eq!(c.idle_spin, Duration::from_millis(1500));
        let args = ServeArgs {
            idle_spin_ms: Some(20),
            ..Default::default()
        };
        assert_eq!(
            args.resolve_with(file).unwrap().idle_spin,
            Duration::from_millis(20)
        );
        let args = ServeArgs {
            idle_spin_ms: Some(MAX_IDLE_SPIN_MS + 1),
            ..Default::default()
        };
        let err = args.resolve_with(FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("idle_spin_ms"), "{err}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let err = toml::from_str::<FileConfig>("prot = 1\n").unwrap_err();
        assert!(err.to_string().contains("prot"), "{err}");
        let args = ServeArgs {
            profile: Some("fast".into()),
            ..Default::default()
        };
        assert!(args.resolve_with(FileConfig::default()).is_err());
        let args = ServeArgs {
            voice_aliases: vec!["alloy".into()],
            ..Default::default()
        };
        assert!(args.resolve_with(FileConfig::default()).is_err());
        let args = ServeArgs {
            write_timeout: Some(-1.0),
            ..Default::default()
        };
        assert!(args.resolve_with(FileConfig::default()).is_err());
        let args = ServeArgs {
            max_slots: Some(2),
            max_active: Some(3),
            ..Default::default()
        };
        assert!(args.resolve_with(FileConfig::default()).is_err());
        for (replicas, slots) in [(0, 8), (3, 2)] {
            let args = ServeArgs {
                replicas: Some(replicas),
                max_slots: Some(slots),
                ..Default::default()
            };
            let err = args.resolve_with(FileConfig::default()).unwrap_err();
            assert!(err.to_string().contains("replicas"), "{err}");
        }
    }

    #[test]
    fn replicas_come_from_the_flag_or_the_file() {
        let c = ServeArgs::default()
            .resolve_with(FileConfig::default())
            .unwrap();
        assert_eq!(c.replicas, 1);
        let file: FileConfig = toml::from_str("replicas = 2\n").unwrap();
        assert_eq!(ServeArgs::default().resolve_with(file).unwrap().replicas, 2);
        let file: FileConfig = toml::from_str("replicas = 2\n").unwrap();
        let args = ServeArgs {
            replicas: Some(3),
            ..Default::default()
        };
        assert_eq!(args.resolve_with(file).unwrap().replicas, 3);
    }
}
