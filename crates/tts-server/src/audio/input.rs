//! Audio input: a voice-clone reference recording as a request carries it (`ref_audio`:
//! base64, or a `data:` URI of base64, of a WAV, FLAC, MP3 or Ogg Vorbis file), decoded to
//! mono `f32` at the file's own rate (channels averaged, as the reference does).

use std::io::Cursor;

use base64::Engine as _;
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::DecoderOptions;
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

/// A decoded recording.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedAudio {
    /// Mono samples, nominally in [-1, 1].
    pub samples: Vec<f32>,
    pub sample_rate: u32,
}

impl DecodedAudio {
    pub fn seconds(&self) -> f64 {
        self.samples.len() as f64 / f64::from(self.sample_rate.max(1))
    }
}

/// Why a reference recording could not be read (the client's to fix).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InputError {
    #[error("this server does not fetch URLs: send the audio itself, base64 or as a data: URI")]
    Url,
    #[error("not base64 (or a data: URI of base64): {0}")]
    Base64(String),
    #[error("not a WAV, FLAC, MP3 or Ogg Vorbis file this server can decode: {0}")]
    Decode(String),
    #[error("the recording has no audio")]
    Empty,
    #[error("the recording is longer than {max_seconds} s")]
    TooLong { max_seconds: f32 },
}

/// The bytes of an inline recording: base64, or a `data:[<type>];base64,<data>` URI.
pub fn inline_bytes(field: &str) -> Result<Vec<u8>, InputError> {
    let s = field.trim();
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Err(InputError::Url);
    }
    let data = match s.strip_prefix("data:") {
        Some(rest) => {
            let (meta, data) = rest
                .split_once(',')
                .ok_or_else(|| InputError::Base64("a data: URI without a comma".into()))?;
            if !meta.to_ascii_lowercase().ends_with(";base64") {
                return Err(InputError::Base64(
                    "a data: URI must say `;base64` before its comma".into(),
                ));
            }
            data
        }
        None => s,
    };
    // Line breaks are common in pasted base64; padding is optional in practice.
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let compact = compact.trim_end_matches('=');
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(compact)
        .map_err(|e| InputError::Base64(e.to_string()))
}

/// Decodes a whole audio file, refusing one longer than `max_seconds`.
pub fn decode_file(bytes: Vec<u8>, max_seconds: f32) -> Result<DecodedAudio, InputError> {
    let decode_err = |e: SymphoniaError| InputError::Decode(e.to_string());
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let probed = symphonia::default::get_probe()
        .format(
            &Hint::new(),
            mss,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(decode_err)?;
    let mut reader = probed.format;
    let track = reader
        .default_track()
        .ok_or_else(|| InputError::Decode("no audio track".into()))?;
    let track_id = track.id;
    let sample_rate = track
        .codec_params
        .sample_rate
        .filter(|&r| r > 0)
        .ok_or_else(|| InputError::Decode("no sample rate".into()))?;
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(decode_err)?;
    let max_samples = (f64::from(max_seconds) * f64::from(sample_rate)).ceil() as usize;
    let mut samples = Vec::new();
    loop {
        let packet = match reader.next_packet() {
            Ok(p) => p,
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break
            }
            Err(e) => return Err(decode_err(e)),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = decoder.decode(&packet).map_err(decode_err)?;
        let channels = decoded.spec().channels.count().max(1);
        let mut buf = SampleBuffer::<f32>::new(decoded.capacity() as u64, *decoded.spec());
        buf.copy_interleaved_ref(decoded);
        samples.extend(
            buf.samples()
                .chunks(channels)
                .map(|frame| frame.iter().sum::<f32>() / channels as f32),
        );
        if samples.len() > max_samples {
            return Err(InputError::TooLong { max_seconds });
        }
    }
    if samples.is_empty() {
        return Err(InputError::Empty);
    }
    Ok(DecodedAudio {
        samples,
        sample_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16-bit WAV of `channels` interleaved channels.
    fn wav(rate: u32, channels: u16, frames: &[Vec<f32>]) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut out = Cursor::new(Vec::new());
        let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
        for f in frames {
            for &x in f {
                w.write_sample((x * 32767.0).round() as i16).unwrap();
            }
        }
        w.finalize().unwrap();
        out.into_inner()
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn a_stereo_wav_is_averaged_to_mono_at_its_rate() {
        let frames: Vec<Vec<f32>> = (0..1000)
            .map(|i| vec![(i as f32 / 1000.0) * 0.5, -0.25])
            .collect();
        let bytes = wav(16_000, 2, &frames);
        let a = decode_file(inline_bytes(&b64(&bytes)).unwrap(), 10.0).unwrap();
        assert_eq!(a.sample_rate, 16_000);
        assert_eq!(a.samples.len(), 1000);
        for (got, f) in a.samples.iter().zip(&frames) {
            let want = (f[0] + f[1]) / 2.0;
            assert!((got - want).abs() < 1e-4, "{got} {want}");
        }
    }

    #[test]
    fn data_uris_line_breaks_and_missing_padding_are_accepted() {
        let bytes = wav(24_000, 1, &vec![vec![0.1]; 7]);
        let plain = b64(&bytes);
        let wrapped: String = plain
            .as_bytes()
            .chunks(20)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        for s in [
            format!("data:audio/wav;base64,{plain}"),
            wrapped,
            plain.trim_end_matches('=').to_string(),
        ] {
            assert_eq!(inline_bytes(&s).unwrap(), bytes);
        }
    }

    #[test]
    fn bad_inputs_are_named() {
        assert_eq!(inline_bytes("https://x/y.wav"), Err(InputError::Url));
        assert!(matches!(inline_bytes("%%%"), Err(InputError::Base64(_))));
        assert!(matches!(
            inline_bytes("data:audio/wav,abc"),
            Err(InputError::Base64(_))
        ));
        assert!(matches!(
            decode_file(b"not audio at all".to_vec(), 10.0),
            Err(InputError::Decode(_))
        ));
        let long = wav(8_000, 1, &vec![vec![0.0]; 8_001]);
        assert_eq!(
            decode_file(long, 1.0),
            Err(InputError::TooLong { max_seconds: 1.0 })
        );
        assert_eq!(decode_file(wav(8_000, 1, &[]), 1.0), Err(InputError::Empty));
    }
}
