//! The streamed body of `POST /v1/audio/speech`: engine events in, encoded audio (or SSE
//! events) out, as they are generated. It owns the request's handle: when the client goes
//! away the connection drops the body, the handle drops, and the engine frees the slot
//! at its next step.

use std::time::Instant;

use bytes::Bytes;
use futures_util::Stream;
use tts_engine::{Event, RequestHandle, Usage};

use super::error::ApiError;
use super::metrics::StreamGuard;
use super::params::StreamFormat;
use super::sse;
use super::state::AppState;
use super::usage::usage_json;
use crate::audio::AudioOut;

/// One response body's state.
pub struct AudioBody {
    pub state: AppState,
    pub handle: RequestHandle,
    pub audio: AudioOut,
    pub framing: StreamFormat,
    pub request_id: String,
    /// When the HTTP request arrived.
    pub received: Instant,
    pub sample_rate: u32,
    pub guard: StreamGuard,
    admitted: Option<Instant>,
    first_audio_sent: bool,
    over: bool,
}

impl AudioBody {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        state: AppState,
        handle: RequestHandle,
        audio: AudioOut,
        framing: StreamFormat,
        request_id: String,
        received: Instant,
        sample_rate: u32,
        guard: StreamGuard,
    ) -> Self {
        Self {
            state,
            handle,
            audio,
            framing,
            request_id,
            received,
            sample_rate,
            guard,
            admitted: None,
            first_audio_sent: false,
            over: false,
        }
    }

    /// The body as a stream of chunks. An `Err` item aborts the response (the client sees
    /// a broken transfer, not a complete file).
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
        futures_util::stream::unfold(self, |mut body| async move {
            body.next_chunk().await.map(|item| (item, body))
        })
    }

    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if self.over {
            return None;
        }
        loop {
            match self.handle.recv().await {
                Some(Event::Started(_)) => self.admitted = Some(Instant::now()),
                Some(Event::Audio(pcm)) => match self.audio.push(pcm) {
                    Ok(bytes) if bytes.is_empty() => {}
                    Ok(bytes) => {
                        if !self.first_audio_sent {
                            self.first_audio_sent = true;
                            self.state.metrics().first_audio(self.received.elapsed());
                        }
                        return Some(Ok(self.frame(&bytes)));
                    }
                    Err(e) => {
                        tracing::error!(request_id = %self.request_id, error = %e, "encoding failed");
                        return self.fail();
                    }
                },
                Some(Event::Done(usage)) => return self.done(&usage),
                Some(Event::Failed(why)) => {
                    tracing::warn!(request_id = %self.request_id, reason = %why, "request failed mid-stream");
                    return self.fail();
                }
                None => {
                    tracing::warn!(request_id = %self.request_id, "request ended without a result");
                    return self.fail();
                }
            }
        }
    }

    fn frame(&self, audio: &[u8]) -> Bytes {
        match self.framing {
            StreamFormat::Audio => Bytes::copy_from_slice(audio),
            StreamFormat::Sse => sse::delta(audio),
        }
    }

    fn done(&mut self, usage: &Usage) -> Option<Result<Bytes, std::io::Error>> {
        self.over = true;
        self.guard.finished();
        if let Some(t) = self.admitted {
            if usage.audio_seconds > 0.0 {
                let rtf = t.elapsed().as_secs_f64() / usage.audio_seconds;
                self.state.metrics().real_time_factor(rtf);
            }
        }
        let tail = match self.audio.finish() {
            Ok(tail) => tail,
            Err(e) => {
                tracing::error!(request_id = %self.request_id, error = %e, "finishing the encoder failed");
                return self.fail();
            }
        };
        tracing::info!(
            request_id = %self.request_id,
            frames = usage.frames,
            end = ?usage.end,
            audio_s = usage.audio_seconds,
            ttfa_ms = usage.time_to_first_audio.map(|d| d.as_secs_f64() * 1e3),
            "done"
        );
        match self.framing {
            StreamFormat::Audio if tail.is_empty() => None,
            StreamFormat::Audio => Some(Ok(Bytes::from(tail))),
            StreamFormat::Sse => {
                let mut out = Vec::new();
                if !tail.is_empty() {
                    out.extend_from_slice(&sse::delta(&tail));
                }
                out.extend_from_slice(&sse::done(usage_json(
                    usage,
                    self.audio.samples(),
                    self.sample_rate,
                )));
                Some(Ok(Bytes::from(out)))
            }
        }
    }

    /// Ends a response whose request failed after the headers went out.
    fn fail(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        self.over = true;
        self.guard.finished();
        match self.framing {
            StreamFormat::Audio => Some(Err(std::io::Error::other("synthesis failed"))),
            StreamFormat::Sse => {
                let e = if self.state.is_shutting_down() {
                    ApiError::shutting_down(self.state.retry_after())
                } else {
                    ApiError::internal()
                };
                Some(Ok(sse::error(&e)))
            }
        }
    }
}
