//! FLAC, the `flac` format: 16-bit mono, encoded a block at a time by `flacenc`.
//!
//! A streamed FLAC cannot know its length or frame sizes when STREAMINFO goes out, so
//! those fields are 0 ("unknown") and the MD5 is all zeros ("not computed"), as the format
//! allows. Blocks are 1920 samples (80 ms at 24 kHz, one engine frame), fixed-blocksize
//! with frame numbers; each `push` returns every block it completed, and `finish`
//! encodes the remainder as a shorter last block.

use flacenc::bitsink::MemSink;
use flacenc::component::{BitRepr, StreamInfo};
use flacenc::error::{Verified, Verify};
use flacenc::source::{Fill, FrameBuf};

use super::{pcm, AudioError, AudioFormat, Encoder};

/// Samples per FLAC block: one engine frame at 24 kHz, so a 1920·n chunk leaves nothing
/// behind.
pub const BLOCK_LEN: usize = 1920;
const BITS_PER_SAMPLE: usize = 16;
/// `flacenc`'s limit (FLAC's own is 2^20 - 1).
const MAX_SAMPLE_RATE: u32 = 96_000;

/// The `flac` encoder.
pub struct FlacEncoder {
    config: Verified<flacenc::config::Encoder>,
    stream_info: StreamInfo,
    framebuf: FrameBuf,
    /// Samples of the next block, fewer than `BLOCK_LEN`.
    pending: Vec<i32>,
    frames_out: usize,
    header_written: bool,
    sink: MemSink<u8>,
}

fn codec_err(e: impl std::fmt::Display) -> AudioError {
    AudioError::codec(AudioFormat::Flac, e)
}

impl FlacEncoder {
    /// Mono 16-bit at 1 to 96000 Hz.
    pub fn new(sample_rate: u32) -> Result<Self, AudioError> {
        if sample_rate == 0 || sample_rate > MAX_SAMPLE_RATE {
            return Err(AudioError::UnsupportedSampleRate {
                format: AudioFormat::Flac,
                sample_rate,
                supported: "1 to 96000 Hz",
            });
        }
        let config = flacenc::config::Encoder::default()
            .into_verified()
            .map_err(|(_, e)| codec_err(e))?;
        let mut stream_info =
            StreamInfo::new(sample_rate as usize, 1, BITS_PER_SAMPLE).map_err(codec_err)?;
        stream_info
            .set_block_sizes(BLOCK_LEN, BLOCK_LEN)
            .map_err(codec_err)?;
        stream_info.set_frame_sizes(0, 0).map_err(codec_err)?;
        Ok(FlacEncoder {
            config,
            stream_info,
            framebuf: FrameBuf::with_size(1, BLOCK_LEN).map_err(codec_err)?,
            pending: Vec::with_capacity(BLOCK_LEN),
            frames_out: 0,
            header_written: false,
            sink: MemSink::new(),
        })
    }

    /// "fLaC" and the STREAMINFO block, flagged as the last metadata block.
    fn write_header(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        if self.header_written {
            return Ok(());
        }
        out.extend_from_slice(b"fLaC");
        let len = (self.stream_info.count_bits() / 8) as u32; // 34
        out.push(0x80); // last-metadata-block flag | type 0 (STREAMINFO)
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        self.sink.clear();
        self.stream_info.write(&mut self.sink).map_err(codec_err)?;
        out.extend_from_slice(self.sink.as_slice());
        self.header_written = true;
        Ok(())
    }

    /// Encodes `pending` (1 to `BLOCK_LEN` samples) as the next frame.
    fn write_frame(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.framebuf
            .fill_interleaved(&self.pending)
            .map_err(codec_err)?;
        let frame = flacenc::encode_fixed_size_frame(
            &self.config,
            &self.framebuf,
            self.frames_out,
            &self.stream_info,
        )
        .map_err(codec_err)?;
        self.sink.clear();
        frame.write(&mut self.sink).map_err(codec_err)?;
        out.extend_from_slice(self.sink.as_slice());
        self.pending.clear();
        self.frames_out += 1;
        Ok(())
    }
}

impl Encoder for FlacEncoder {
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, AudioError> {
        let mut out = Vec::new();
        self.write_header(&mut out)?;
        let mut rest = samples;
        while !rest.is_empty() {
            let take = (BLOCK_LEN - self.pending.len()).min(rest.len());
            let (now, later) = rest.split_at(take);
            self.pending
                .extend(now.iter().map(|&x| i32::from(pcm::sample_to_i16(x))));
            rest = later;
            if self.pending.len() == BLOCK_LEN {
                self.write_frame(&mut out)?;
            }
        }
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        let mut out = Vec::new();
        self.write_header(&mut out)?;
        if !self.pending.is_empty() {
            self.write_frame(&mut out)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// STREAMINFO of a stream whose length is not known: sizes and MD5 "unknown".
    #[test]
    fn streaminfo_of_a_stream() {
        let mut e = FlacEncoder::new(24_000).unwrap();
        let h = e.finish().unwrap();
        assert_eq!(h.len(), 4 + 4 + 34);
        assert_eq!(&h[..4], b"fLaC");
        assert_eq!(
            &h[4..8],
            &[0x80, 0, 0, 34],
            "last metadata block, STREAMINFO, 34 bytes"
        );
        let si = &h[8..];
        assert_eq!(u16::from_be_bytes([si[0], si[1]]), 1920, "min block");
        assert_eq!(u16::from_be_bytes([si[2], si[3]]), 1920, "max block");
        assert_eq!(&si[4..10], &[0; 6], "min/max frame size unknown");
        // 20 bits rate, 3 bits channels-1, 5 bits bps-1, 36 bits total samples.
        let packed = u64::from_be_bytes([
            si[10], si[11], si[12], si[13], si[14], si[15], si[16], si[17],
        ]);
        assert_eq!(packed >> 44, 24_000);
        assert_eq!((packed >> 41) & 0x7, 0, "mono");
        assert_eq!((packed >> 36) & 0x1f, 15, "16 bits");
        assert_eq!(packed & 0xf_ffff_ffff, 0, "total samples unknown");
        assert_eq!(&si[18..34], &[0; 16], "no MD5");
    }
}
