//! WAV (RIFF, 16-bit PCM, mono): whole files for `synth`, and the streaming `wav` encoder.
//!
//! A streamed WAV cannot know its length when the header goes out, so the RIFF and `data`
//! sizes are 0xFFFFFFFF ("unknown"), as streaming servers write them; decoders read the
//! data to the end of the stream.

use std::path::Path;

use super::{pcm, AudioError, AudioFormat, Encoder};

pub use super::pcm::to_i16;

/// The length of [`streaming_header`].
pub const HEADER_LEN: usize = 44;

/// Writes a mono 16-bit WAV file.
pub fn write_file(path: &Path, pcm: &[f32], sample_rate: u32) -> anyhow::Result<()> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec)?;
    for s in to_i16(pcm) {
        w.write_sample(s)?;
    }
    w.finalize()?;
    Ok(())
}

/// The 44-byte header of a streamed mono 16-bit WAV, sizes "unknown".
pub fn streaming_header(sample_rate: u32) -> [u8; HEADER_LEN] {
    const CHANNELS: u16 = 1;
    const BITS: u16 = 16;
    let block_align = CHANNELS * BITS / 8;
    let mut h = [0u8; HEADER_LEN];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        h[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(b"RIFF");
    put(&u32::MAX.to_le_bytes());
    put(b"WAVE");
    put(b"fmt ");
    put(&16u32.to_le_bytes());
    put(&1u16.to_le_bytes()); // integer PCM
    put(&CHANNELS.to_le_bytes());
    put(&sample_rate.to_le_bytes());
    put(&sample_rate
        .wrapping_mul(u32::from(block_align))
        .to_le_bytes());
    put(&block_align.to_le_bytes());
    put(&BITS.to_le_bytes());
    put(b"data");
    put(&u32::MAX.to_le_bytes());
    h
}

/// The `wav` encoder: the header with the first bytes, then s16le samples as they come.
#[derive(Debug)]
pub struct WavEncoder {
    sample_rate: u32,
    header_sent: bool,
}

impl WavEncoder {
    /// Any positive rate whose byte rate fits the header's 32 bits.
    pub fn new(sample_rate: u32) -> Result<Self, AudioError> {
        if sample_rate == 0 || sample_rate > u32::MAX / 2 {
            return Err(AudioError::UnsupportedSampleRate {
                format: AudioFormat::Wav,
                sample_rate,
                supported: "1 to 2147483647 Hz",
            });
        }
        Ok(WavEncoder {
            sample_rate,
            header_sent: false,
        })
    }

    fn start(&mut self, capacity: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + capacity);
        if !self.header_sent {
            out.extend_from_slice(&streaming_header(self.sample_rate));
            self.header_sent = true;
        }
        out
    }
}

impl Encoder for WavEncoder {
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, AudioError> {
        let mut out = self.start(2 * samples.len());
        pcm::extend_s16le(&mut out, samples);
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        // An empty response is still a (silent) WAV.
        Ok(self.start(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let h = streaming_header(24_000);
        assert_eq!(&h[0..4], b"RIFF");
        assert_eq!(&h[4..8], &[0xff; 4]);
        assert_eq!(&h[8..16], b"WAVEfmt ");
        assert_eq!(u32::from_le_bytes([h[16], h[17], h[18], h[19]]), 16);
        assert_eq!(u16::from_le_bytes([h[20], h[21]]), 1);
        assert_eq!(u16::from_le_bytes([h[22], h[23]]), 1);
        assert_eq!(u32::from_le_bytes([h[24], h[25], h[26], h[27]]), 24_000);
        assert_eq!(u32::from_le_bytes([h[28], h[29], h[30], h[31]]), 48_000);
        assert_eq!(u16::from_le_bytes([h[32], h[33]]), 2);
        assert_eq!(u16::from_le_bytes([h[34], h[35]]), 16);
        assert_eq!(&h[36..40], b"data");
        assert_eq!(&h[40..44], &[0xff; 4]);
    }

    #[test]
    fn empty_stream_is_a_header() {
        let mut e = WavEncoder::new(24_000).unwrap();
        assert_eq!(e.finish().unwrap(), streaming_header(24_000));
    }
}
