//! MP3 (MPEG audio layer III), the `mp3` format, encoded by LAME.
//!
//! Mono CBR at 64 kb/s; at 24 kHz that is MPEG-2 with 576-sample frames of 192 bytes. There
//! is no Xing/LAME tag (it would have to be rewritten at the start of the stream), so
//! decoders do not trim the codec delay: decoded audio starts with LAME's encoder delay plus
//! the decoder's (576 + 529 = 1105 samples at 24 kHz, the MP3 norm) and ends padded to
//! a whole frame. The bit reservoir is off, so frames are self-contained and each `push`
//! returns every frame it completed, whole; LAME itself holds its psychoacoustic
//! look-ahead and the frame being filled (at most 1904 samples at 24 kHz, ~80 ms).

use std::num::NonZeroU32;

use mp3lame_encoder::{Bitrate, Builder, FlushGap, Mode, MonoPcm, Quality};

use super::{pcm, AudioError, AudioFormat, Encoder};

const BITRATE: Bitrate = Bitrate::Kbps64;
const SUPPORTED_RATES: &str = "8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000 Hz";

/// The `mp3` encoder.
pub struct Mp3Encoder {
    lame: mp3lame_encoder::Encoder,
    /// `push` input, sanitised (LAME's float input wants [-1, 1]).
    scratch: Vec<f32>,
}

impl Mp3Encoder {
    /// Mono, 64 kb/s CBR, at an MPEG sample rate (no resampling).
    pub fn new(sample_rate: u32) -> Result<Self, AudioError> {
        const RATES: [u32; 9] = [
            8_000, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000,
        ];
        if !RATES.contains(&sample_rate) {
            return Err(AudioError::UnsupportedSampleRate {
                format: AudioFormat::Mp3,
                sample_rate,
                supported: SUPPORTED_RATES,
            });
        }
        let err = |e: mp3lame_encoder::BuildError| AudioError::codec(AudioFormat::Mp3, e);
        let mut b = Builder::new()
            .ok_or_else(|| AudioError::codec(AudioFormat::Mp3, "lame_init failed"))?;
        b.set_num_channels(1).map_err(err)?;
        b.set_mode(Mode::Mono).map_err(err)?;
        b.set_sample_rate(sample_rate).map_err(err)?;
        b.set_output_sample_rate(NonZeroU32::new(sample_rate))
            .map_err(err)?;
        b.set_brate(BITRATE).map_err(err)?;
        b.set_quality(Quality::Good).map_err(err)?;
        b.set_to_write_vbr_tag(false).map_err(err)?;
        // Without the bit reservoir every frame is self-contained, so LAME hands each frame
        // out as soon as it is encoded: a decoder gets audio ~50 ms sooner (worst case in
        // the streaming test: 1874 samples behind instead of 3026) and every `push`
        // returns whole frames; the tests' SNR is 25.6 dB with or without it.
        // SAFETY: `as_ptr` is the live `lame_global_flags` that `b` owns; LAME reads this
        // flag in `lame_init_params` (`build`), and we neither free nor keep the pointer.
        let rc = unsafe { mp3lame_encoder::ffi::lame_set_disable_reservoir(b.as_ptr(), 1) };
        if rc != 0 {
            return Err(AudioError::codec(
                AudioFormat::Mp3,
                "cannot disable the bit reservoir",
            ));
        }
        let lame = b.build().map_err(err)?;
        Ok(Mp3Encoder {
            lame,
            scratch: Vec::new(),
        })
    }
}

impl Encoder for Mp3Encoder {
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, AudioError> {
        if samples.is_empty() {
            return Ok(Vec::new());
        }
        self.scratch.clear();
        self.scratch
            .extend(samples.iter().copied().map(pcm::sanitize));
        let mut out = Vec::with_capacity(mp3lame_encoder::max_required_buffer_size(samples.len()));
        self.lame
            .encode_to_vec(MonoPcm(self.scratch.as_slice()), &mut out)
            .map_err(|e| AudioError::codec(AudioFormat::Mp3, e))?;
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        // lame_encode_flush: encodes what LAME holds, zero-padded to a whole frame. LAME
        // documents 7200 bytes as enough.
        let mut out = Vec::with_capacity(7200);
        self.lame
            .flush_to_vec::<FlushGap>(&mut out)
            .map_err(|e| AudioError::codec(AudioFormat::Mp3, e))?;
        Ok(out)
    }
}
