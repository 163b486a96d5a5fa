//! The engine's configuration: profile, queue and buffer sizes, trimming, limits.

use std::time::Duration;

use tts_model::config::ModelKind;
use tts_model::generate::FrameCap;
use tts_model::Model;

use crate::error::ConfigError;
use crate::onset::OnsetRule;
use crate::profile::Profile;
use crate::trim::TrimConfig;

/// Engine settings. `Default` is the `balanced` profile with trimming on.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub profile: Profile,
    /// Requests that may wait for a slot; beyond it `submit` fails with `QueueFull`.
    pub queue_capacity: usize,
    /// Events a request's channel holds; when a client reads slower than that, the engine
    /// holds its audio and pauses it (other requests go on).
    pub audio_buffer_chunks: usize,
    /// Most requests generating at once (`None`: the backend's slot count).
    pub max_active: Option<usize>,
    /// Frames whose audio is dropped at the start of every reply (`None`: the model's
    /// default, see [`EngineConfig::default_drop_frames`]).
    pub drop_leading_frames: Option<usize>,
    /// Trim leading PCM until speech onset (`None`: off).
    pub onset_trim: Option<OnsetRule>,
    /// The runaway guard (`None`: the default cap, at most the checkpoint's
    /// `max_new_tokens - 1` frames, as `synth` uses).
    pub frame_cap: Option<FrameCap>,
    /// Longest text a request may have (streamed text included), in characters.
    pub max_text_chars: usize,
    /// Run one short synthesis before reporting ready.
    pub warmup: bool,
    /// The `Retry-After` hint given with `QueueFull`.
    pub retry_after: Duration,
    /// After its last work the engine thread polls its inbox this long before it sleeps
    /// (one CPU core busy meanwhile), so a request arriving then does not wait for the
    /// thread to be woken.
    pub idle_spin: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            profile: Profile::balanced(),
            queue_capacity: 256,
            audio_buffer_chunks: 64,
            max_active: None,
            drop_leading_frames: None,
            onset_trim: Some(OnsetRule::default()),
            frame_cap: None,
            max_text_chars: 5_000,
            warmup: true,
            retry_after: Duration::from_secs(1),
            idle_spin: Duration::ZERO,
        }
    }
}

impl EngineConfig {
    /// Frames dropped by default: CustomVoice replies start with a silent bootstrap frame.
    pub fn default_drop_frames(kind: ModelKind) -> usize {
        match kind {
            ModelKind::CustomVoice => 1,
            ModelKind::VoiceDesign | ModelKind::Base => 0,
        }
    }

    /// The trimming this configuration gives for `model`.
    pub fn trim_for(&self, model: &Model) -> TrimConfig {
        TrimConfig {
            drop_frames: self
                .drop_leading_frames
                .unwrap_or_else(|| Self::default_drop_frames(model.kind())),
            onset: self.onset_trim,
        }
    }

    /// The frame cap this configuration gives for `model`.
    pub fn frame_cap_for(&self, model: &Model) -> FrameCap {
        self.frame_cap.unwrap_or(FrameCap {
            hard_max: model.generation.max_new_tokens.saturating_sub(1),
            ..FrameCap::default()
        })
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.profile.policy.validate()?;
        if self.queue_capacity == 0 {
            return Err(ConfigError::Invalid("queue_capacity must be >= 1".into()));
        }
        // Started + Done + at least one audio chunk in flight.
        if self.audio_buffer_chunks < 3 {
            return Err(ConfigError::Invalid(
                "audio_buffer_chunks must be >= 3".into(),
            ));
        }
        if self.max_active == Some(0) {
            return Err(ConfigError::Invalid("max_active must be >= 1".into()));
        }
        Ok(())
    }
}
