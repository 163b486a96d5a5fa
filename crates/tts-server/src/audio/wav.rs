//! WAV (RIFF, 16-bit PCM, mono) writing.

use std::path::Path;

/// Converts [-1, 1] float samples to 16-bit PCM (clamped, rounded).
pub fn to_i16(pcm: &[f32]) -> Vec<i16> {
    pcm.iter()
        .map(|&x| (x.clamp(-1.0, 1.0) * 32767.0).round() as i16)
        .collect()
}

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
