//! Voice cloning for Base models: a request's reference recording (`ref_audio`, with
//! `ref_text` and `x_vector_only_mode`) becomes a cloned voice before the request is
//! admitted, so a bad recording is a 400 like any other bad field. Decoding and both
//! encoders run on a blocking thread, one recording at a time (they are CPU work beside the
//! engine); the result is kept per distinct (recording, transcript, mode), so a client
//! that sends the same reference again is not charged for it twice. At most
//! [`MAX_WAITING`] requests wait for the cloner; more are refused with a 429.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
/// Requests that may wait for the cloner at once; more are a 429.
pub const MAX_WAITING: usize = 16;

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
    cache: Mutex<VoiceCache>,
    /// One recording at a time.
    permit: Semaphore,
    /// Requests waiting for (or holding) the permit.
    waiting: AtomicUsize,
}

/// Counts a request among the waiting ones while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Cloned voices by key, the least recently used dropped first.
struct VoiceCache {
    entries: HashMap<CacheKey, (Arc<ClonedVoice>, u64)>,
    clock: u64,
    capacity: usize,
}

impl VoiceCache {
    fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            clock: 0,
            capacity,
        }
    }

    fn get(&mut self, key: CacheKey) -> Option<Arc<ClonedVoice>> {
        self.clock += 1;
        let now = self.clock;
        self.entries.get_mut(&key).map(|(v, used)| {
            *used = now;
            Arc::clone(v)
        })
    }

    fn insert(&mut self, key: CacheKey, voice: Arc<ClonedVoice>) {
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        self.clock += 1;
        self.entries.insert(key, (voice, self.clock));
    }
}

impl Cloning {
    pub fn new(cloner: VoiceCloner) -> Self {
        Self {
            cloner: Arc::new(cloner),
            cache: Mutex::new(VoiceCache::new(CACHE_ENTRIES)),
            permit: Semaphore::new(1),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The cloned voice of `r`: from the cache, or decoded and encoded now.
    pub async fn voice(&self, r: &ReferenceParams) -> Result<Arc<ClonedVoice>, ApiError> {
        let key = r.key();
        if let Some(v) = self.cached(key) {
            return Ok(v);
        }
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::queue_full(MAX_WAITING, Duration::from_secs(1)));
        }
        let _waiting = Waiting(&self.waiting);
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
        self.cache.lock().ok()?.get(key)
    }

    fn store(&self, key: CacheKey, voice: Arc<ClonedVoice>) {
        if let Ok(mut c) = self.cache.lock() {
            c.insert(key, voice);
        }
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

#[cfg(test)]
mod tests {
    use tts_model::prompt::SpeakerVector;

    use super::*;

    fn voice(x: f32) -> Arc<ClonedVoice> {
        Arc::new(ClonedVoice {
            speaker: Arc::new(SpeakerVector::new(vec![x])),
            reference: None,
        })
    }

    fn params(audio: &str, text: &str, mode: CloneMode) -> ReferenceParams {
        ReferenceParams {
            audio: Arc::from(audio),
            text: Some(text.into()),
            mode,
        }
    }

    #[test]
    fn the_cache_drops_the_least_recently_used_voice() {
        let mut c = VoiceCache::new(2);
        let [a, b, d] = ["a", "b", "d"].map(|x| params(x, "t", CloneMode::InContext).key());
        c.insert(a, voice(1.0));
        c.insert(b, voice(2.0));
        assert!(c.get(a).is_some()); // a is now the most recent
        c.insert(d, voice(3.0));
        assert!(c.get(b).is_none(), "b was the least recently used");
        assert_eq!(c.get(a).unwrap().speaker.values(), [1.0]);
        assert_eq!(c.get(d).unwrap().speaker.values(), [3.0]);
        // the same key again replaces its voice and evicts nothing
        c.insert(d, voice(4.0));
        assert_eq!(c.entries.len(), 2);
        assert_eq!(c.get(d).unwrap().speaker.values(), [4.0]);
        assert!(c.get(a).is_some());
    }

    #[test]
    fn the_key_tells_recordings_transcripts_and_modes_apart() {
        let base = params("UklGRg==", "hello", CloneMode::InContext);
        assert_eq!(base.key(), base.clone().key());
        for other in [
            params("UklGRh==", "hello", CloneMode::InContext),
            params("UklGRg==", "hullo", CloneMode::InContext),
            params("UklGRg==", "hello", CloneMode::SpeakerOnly),
        ] {
            assert_ne!(base.key(), other.key());
        }
    }
}
