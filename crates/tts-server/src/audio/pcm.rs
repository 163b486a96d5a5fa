//! Raw PCM (`pcm`): 16-bit signed little-endian mono, no header; also WAV's payload and the
//! sample conversions every encoder shares.

use super::{AudioError, AudioFormat, Encoder};

/// Converts a [-1, 1] float sample to 16-bit PCM: clamped, scaled by 32767, rounded
/// (NaN becomes 0).
pub fn sample_to_i16(x: f32) -> i16 {
    (x.clamp(-1.0, 1.0) * 32767.0).round() as i16
}

/// Converts [-1, 1] float samples to 16-bit PCM (see [`sample_to_i16`]).
pub fn to_i16(pcm: &[f32]) -> Vec<i16> {
    pcm.iter().copied().map(sample_to_i16).collect()
}

/// A float sample made safe for a codec's float input: clamped to [-1, 1], NaN as 0.
pub fn sanitize(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(-1.0, 1.0)
    }
}

/// Appends `pcm` as s16le bytes to `out`.
pub fn extend_s16le(out: &mut Vec<u8>, pcm: &[f32]) {
    out.reserve(2 * pcm.len());
    for &x in pcm {
        out.extend_from_slice(&sample_to_i16(x).to_le_bytes());
    }
}

/// The `pcm` encoder: every sample goes out at once.
#[derive(Debug)]
pub struct PcmEncoder;

impl PcmEncoder {
    /// Any positive rate: raw PCM does not record it.
    pub fn new(sample_rate: u32) -> Result<Self, AudioError> {
        if sample_rate == 0 {
            return Err(AudioError::UnsupportedSampleRate {
                format: AudioFormat::Pcm,
                sample_rate,
                supported: "any positive rate",
            });
        }
        Ok(PcmEncoder)
    }
}

impl Encoder for PcmEncoder {
    fn push(&mut self, pcm: &[f32]) -> Result<Vec<u8>, AudioError> {
        let mut out = Vec::new();
        extend_s16le(&mut out, pcm);
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_clamps_rounds_and_zeroes_nan() {
        let x = [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.25, f32::NAN];
        assert_eq!(
            to_i16(&x),
            [0, 32767, -32767, 32767, -32767, 16384, -8192, 0]
        );
        let mut bytes = Vec::new();
        extend_s16le(&mut bytes, &[1.0, -1.0]);
        assert_eq!(bytes, [0xff, 0x7f, 0x01, 0x80]);
        assert_eq!(sanitize(f32::NAN), 0.0);
        assert_eq!(sanitize(-3.0), -1.0);
    }
}
