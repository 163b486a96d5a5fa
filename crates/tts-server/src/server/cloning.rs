//! Voice cloning for Base models: a request's reference recording (`ref_audio`, with
//! `ref_text` and `x_vector_only_mode`) becomes a cloned voice before the request is
//! admitted, so a bad recording is a 400 like any other bad field. Decoding and both
//! encoders run on a blocking thread, one recording at a time (they are CPU work beside the
//! engine); the result is kept per distinct (recording, transcript, mode), so a client
//! that sends the same reference again is not charged for it twice.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Semaphore;
use tts_model::clone::{CloneMode, VoiceCloner};
use tts_model::prompt::ClonedVoice;
use tts_model::ModelError;

use super::admission::request_error;
use super::error::ApiError;
use crate::audio::input::{decode_file, inline_bytes, InputError};

/// Longest reference recording accepted. Its frames join the prompt (12.5 a second),
/// so a long one takes context from the reply.
pub const MAX_REFERENCE_SECONDS: f32 = 30.0;
/// Bytes a request body may add for its reference recording (base64 of a 30 s 48 kHz
/// 16-bit stereo WAV is ~7.7 MB).
pub const REFERENCE_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Cloned voices kept.
const CACHE_ENTRIES: usize = 64;

/// A request's reference recording, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceParams {
    /// `ref_audio`: base64 or a `data:` URI.
    pub audio: Arc<str>,
    /// `ref_text`: what is said in it (needed for in-context cloning).
    pub text: Option<String>,
    pub mode: CloneMode,
}

impl ReferenceParams {
    fn key(&self) -> CacheKey {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.audio.hash(&mut h);
        self.text.hash(&mut h);
        (self.mode == CloneMode::InContext).hash(&mut h);
        CacheKey {
            hash: h.finish(),
            audio_len: self.audio.len(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct CacheKey {
    hash: u64,
    audio_len: usize,
}

/// The cloner of a Base model and its cache of cloned voices.
pub struct Cloning {
    cloner: Arc<VoiceCloner>,
    cache: Mutex<Cache>,
    /// One recording at a time.
    permit: Semaphore,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<CacheKey, (Arc<ClonedVoice>, u64)>,
    clock: u64,
}

impl Cloning {
    pub fn new(cloner: VoiceCloner) -> Self {
        Self {
            cloner: Arc::new(cloner),
            cache: Mutex::new(Cache::default()),
            permit: Semaphore::new(1),
        }
    }

    /// The cloned voice of `r`: from the cache, or decoded and encoded now.
    pub async fn voice(&self, r: &ReferenceParams) -> Result<Arc<ClonedVoice>, ApiError> {
        let key = r.key();
        if let Some(v) = self.cached(key) {
            return Ok(v);
        }
        let _permit = self
            .permit
            .acquire()
            .await
            .map_err(|_| ApiError::internal())?;
        // (another request may have cloned it while this one waited)
        if let Some(v) = self.cached(key) {
            return Ok(v);
        }
        let (cloner, params) = (Arc::clone(&self.cloner), r.clone());
        let started = Instant::now();
        let voice = tokio::task::spawn_blocking(move || clone_voice(&cloner, &params))
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "the voice-cloning task failed");
                ApiError::internal()
            })??;
        let voice = Arc::new(voice);
        tracing::info!(
            ms = started.elapsed().as_secs_f64() * 1e3,
            frames = voice.reference.as_ref().map_or(0, |r| r.frames.len()),
            "cloned a voice"
        );
        self.store(key, Arc::clone(&voice));
        Ok(voice)
    }

    fn cached(&self, key: CacheKey) -> Option<Arc<ClonedVoice>> {
        let mut c = self.cache.lock().ok()?;
        c.clock += 1;
        let now = c.clock;
        c.entries.get_mut(&key).map(|(v, used)| {
            *used = now;
            Arc::clone(v)
        })
    }

    fn store(&self, key: CacheKey, voice: Arc<ClonedVoice>) {
        let Ok(mut c) = self.cache.lock() else {
            return;
        };
        if c.entries.len() >= CACHE_ENTRIES {
            if let Some(oldest) = c
                .entries
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| *k)
            {
                c.entries.remove(&oldest);
            }
        }
        let now = c.clock;
        c.entries.insert(key, (voice, now));
    }
}

/// Decodes the recording and runs the encoders (blocking).
fn clone_voice(cloner: &VoiceCloner, r: &ReferenceParams) -> Result<ClonedVoice, ApiError> {
    let input = |e: InputError| {
        ApiError::invalid("ref_audio", "invalid_value", format!("`ref_audio`: {e}"))
    };
    let audio = decode_file(
        inline_bytes(&r.audio).map_err(input)?,
        MAX_REFERENCE_SECONDS,
    )
    .map_err(input)?;
    cloner
        .clone_voice(&audio.samples, audio.sample_rate, r.mode, r.text.as_deref())
        .map_err(|e| match e {
            ModelError::Request(r) => request_error(r),
            other => {
                tracing::error!(error = %other, "voice cloning failed");
                ApiError::internal()
            }
        })
}
