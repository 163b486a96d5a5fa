//! Audio output: PCM conversion and the streaming encoders behind each response format.
//!
//! The engine produces 24 kHz mono `f32` PCM in [-1, 1], in chunks of 1920·n samples. An
//! [`Encoder`] turns that into the bytes of one response, as audio arrives: `push` returns
//! what can be sent now (every complete codec frame), `finish` flushes the rest and
//! finalises the container. No encoder holds more than the codec frame being filled
//! (plus, for the lossy codecs, the codec's own look-ahead). Audio held at most, at 24 kHz:
//!
//! | format | what | held |
//! | --- | --- | --- |
//! | `pcm` | raw s16le | none |
//! | `wav` | streaming WAV (sizes 0xFFFFFFFF), s16le | none |
//! | `opus` | Ogg Opus (RFC 7845), 20 ms packets, 32 kb/s | 20 ms + 6.5 ms look-ahead |
//! | `mp3` | MPEG-2 layer III, 64 kb/s CBR (LAME) | 24 ms + 55 ms look-ahead |
//! | `flac` | FLAC, 16-bit, 1920-sample blocks | 80 ms (one block) |
//!
//! Before the encoder, a request's `speed` other than 1 goes through [`tempo::Tempo`]
//! (time-scale modification, pitch kept), which holds back ~40 ms more.

pub mod flac;
pub mod format;
pub mod input;
pub mod mp3;
pub mod ogg_opus;
pub mod pcm;
pub mod tempo;
pub mod wav;

#[cfg(test)]
mod tests;

pub use format::AudioFormat;

/// Why an encoder could not be made or could not encode.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    /// A `response_format` name that is not one of ours (a client error).
    #[error("unsupported audio format {0:?}; supported: {list}", list = format::supported_list())]
    UnknownFormat(String),
    /// The format cannot carry audio at this sample rate.
    #[error("{format} cannot encode {sample_rate} Hz audio (supported: {supported})")]
    UnsupportedSampleRate {
        format: AudioFormat,
        sample_rate: u32,
        supported: &'static str,
    },
    /// The codec library failed (an internal error: log it, end the stream).
    #[error("{format} encoder: {detail}")]
    Codec { format: AudioFormat, detail: String },
    /// `push` or `finish` after `finish`.
    #[error("encoder already finished")]
    Finished,
}

impl AudioError {
    pub(crate) fn codec(format: AudioFormat, detail: impl std::fmt::Display) -> Self {
        AudioError::Codec {
            format,
            detail: detail.to_string(),
        }
    }
}

/// A streaming encoder for one response: mono `f32` PCM in, container bytes out.
///
/// Bytes returned by successive calls are concatenated by the caller, in order; the
/// container's header comes with the first call's bytes.
pub trait Encoder: Send {
    /// Takes the next samples (any count, including 0); returns the bytes ready to send.
    fn push(&mut self, pcm: &[f32]) -> Result<Vec<u8>, AudioError>;
    /// Encodes what is held, finalises the stream and returns the last bytes. Calling
    /// `push` or `finish` again returns [`AudioError::Finished`].
    fn finish(&mut self) -> Result<Vec<u8>, AudioError>;
}

/// A response's audio path: the speed's time-scale modification (none at speed 1), then
/// the encoder; it counts the samples it encoded (what the client gets).
pub struct AudioOut {
    tempo: Option<tempo::Tempo>,
    encoder: Box<dyn Encoder>,
    samples: u64,
}

impl AudioOut {
    pub fn new(encoder: Box<dyn Encoder>, speed: f32, sample_rate: u32) -> Self {
        Self {
            tempo: (speed != 1.0).then(|| tempo::Tempo::new(speed, sample_rate)),
            encoder,
            samples: 0,
        }
    }

    /// Takes the next generated samples; returns the bytes ready to send.
    pub fn push(&mut self, pcm: Vec<f32>) -> Result<Vec<u8>, AudioError> {
        let pcm = match &mut self.tempo {
            Some(t) => t.push(&pcm),
            None => pcm,
        };
        self.samples += pcm.len() as u64;
        self.encoder.push(&pcm)
    }

    /// The audio held back (by the speed, then the encoder) and the stream's last bytes.
    pub fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        let rest = self
            .tempo
            .as_mut()
            .map(tempo::Tempo::finish)
            .unwrap_or_default();
        self.samples += rest.len() as u64;
        let mut out = self.encoder.push(&rest)?;
        out.extend(self.encoder.finish()?);
        Ok(out)
    }

    /// Samples encoded so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

/// Makes the encoder of `format` for mono audio at `sample_rate` Hz.
pub fn encoder(format: AudioFormat, sample_rate: u32) -> Result<Box<dyn Encoder>, AudioError> {
    Ok(match format {
        AudioFormat::Pcm => Box::new(Once::new(pcm::PcmEncoder::new(sample_rate)?)),
        AudioFormat::Wav => Box::new(Once::new(wav::WavEncoder::new(sample_rate)?)),
        AudioFormat::Opus => Box::new(Once::new(ogg_opus::OggOpusEncoder::new(sample_rate)?)),
        AudioFormat::Mp3 => Box::new(Once::new(mp3::Mp3Encoder::new(sample_rate)?)),
        AudioFormat::Flac => Box::new(Once::new(flac::FlacEncoder::new(sample_rate)?)),
    })
}

/// Enforces the end of the [`Encoder`] contract, so that codecs need not: nothing after
/// `finish`.
struct Once<E> {
    inner: E,
    finished: bool,
}

impl<E> Once<E> {
    fn new(inner: E) -> Self {
        Once {
            inner,
            finished: false,
        }
    }
}

impl<E: Encoder> Encoder for Once<E> {
    fn push(&mut self, pcm: &[f32]) -> Result<Vec<u8>, AudioError> {
        if self.finished {
            return Err(AudioError::Finished);
        }
        self.inner.push(pcm)
    }

    fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        if self.finished {
            return Err(AudioError::Finished);
        }
        self.finished = true;
        self.inner.finish()
    }
}
