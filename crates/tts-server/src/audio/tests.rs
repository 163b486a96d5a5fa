//! Round trips through real decoders, for every format: uneven chunks in, `symphonia`
//! (wav, flac, mp3) or `ogg` + libopus's decoder (opus) out; decoded length and content
//! against the input; and the streaming property, that a decoder fed the bytes returned so
//! far gets all the audio pushed so far but the frame being filled and the codec look-ahead.

use symphonia::core::conv::ConvertibleSample;

#[path = "../../tests/common/decode.rs"]
mod decode;
use decode::OggOpus;

use super::pcm::to_i16;
use super::{encoder, AudioError, AudioFormat};

const RATE: u32 = 24_000;
/// ~2.3 s, a multiple of no codec frame (1920, 960, 576, 480).
const TOTAL: usize = 55_213;
/// Push sizes, cycled: engine chunks (1920·n) and odd ones down to one sample.
const CHUNKS: [usize; 8] = [1920, 3840, 7, 1920 * 3, 1913, 1, 1920 * 2, 333];
/// MP3 decoder output starts with LAME's encoder delay (576) and the decoder's (529).
const MP3_DELAY: usize = 1105;
/// MP3 frame length at 24 kHz (MPEG-2 layer III).
const MP3_FRAME: usize = 576;

/// Speech-like test audio: a gliding 110-220 Hz voice with 8 harmonics, a 4 Hz syllable
/// envelope, a little deterministic noise, and a short over-range burst (clamped by every
/// encoder).
fn signal(n: usize) -> Vec<f32> {
    let mut phase = 0.0f64;
    let mut noise = 0x1234_5678u32;
    (0..n)
        .map(|i| {
            let t = i as f64 / f64::from(RATE);
            let f0 = 110.0 + 110.0 * (0.5 + 0.5 * (2.0 * std::f64::consts::PI * 0.3 * t).sin());
            phase += 2.0 * std::f64::consts::PI * f0 / f64::from(RATE);
            let voice: f64 = (1..=8).map(|k| (k as f64 * phase).sin() / k as f64).sum();
            let env = 0.55 + 0.45 * (2.0 * std::f64::consts::PI * 4.0 * t).sin();
            noise = noise.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let hiss = (f64::from(noise >> 8) / f64::from(1u32 << 24) - 0.5) * 0.02;
            let x = 0.35 * env * voice + hiss;
            let burst = if (30_000..30_100).contains(&i) {
                2.5
            } else {
                1.0
            };
            (x * burst) as f32
        })
        .collect()
}

/// Pushes `pcm` in `CHUNKS`; returns each push's bytes and `finish`'s.
fn encode_chunked(format: AudioFormat, pcm: &[f32]) -> (Vec<(usize, Vec<u8>)>, Vec<u8>) {
    let mut enc = encoder(format, RATE).unwrap();
    let mut pushes = Vec::new();
    let (mut at, mut i) = (0, 0);
    while at < pcm.len() {
        let n = CHUNKS[i % CHUNKS.len()].min(pcm.len() - at);
        pushes.push((at + n, enc.push(&pcm[at..at + n]).unwrap()));
        at += n;
        i += 1;
    }
    let tail = enc.finish().unwrap();
    (pushes, tail)
}

fn encode_whole(format: AudioFormat, pcm: &[f32]) -> Vec<u8> {
    let (pushes, tail) = encode_chunked(format, pcm);
    let mut bytes: Vec<u8> = pushes.into_iter().flat_map(|(_, b)| b).collect();
    bytes.extend(tail);
    bytes
}

/// Decodes a whole file (or a prefix) with symphonia, at the encoders' rate.
fn symphonia_decode<S: ConvertibleSample>(bytes: &[u8], ext: &str) -> Vec<S> {
    let (rate, samples) = decode::symphonia_decode(bytes, ext);
    assert_eq!(rate, RATE);
    samples
}

/// Pearson correlation and SNR (dB) of `decoded` against `reference`.
fn similarity(reference: &[f32], decoded: &[f32]) -> (f64, f64) {
    let n = reference.len().min(decoded.len());
    let (r, d) = (&reference[..n], &decoded[..n]);
    let mean = |x: &[f32]| x.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
    let (mr, md) = (mean(r), mean(d));
    let (mut srd, mut srr, mut sdd, mut err) = (0.0, 0.0, 0.0, 0.0);
    for (&a, &b) in r.iter().zip(d) {
        let (a, b) = (f64::from(a) - mr, f64::from(b) - md);
        srd += a * b;
        srr += a * a;
        sdd += b * b;
        err += (a - b) * (a - b);
    }
    (srd / (srr * sdd).sqrt(), 10.0 * (srr / err).log10())
}

/// What every encoder is fed: the signal after the clamping all of them apply.
fn clamped(pcm: &[f32]) -> Vec<f32> {
    pcm.iter().map(|x| x.clamp(-1.0, 1.0)).collect()
}

#[test]
fn pcm_is_exact_s16le() {
    let x = signal(TOTAL);
    let bytes = encode_whole(AudioFormat::Pcm, &x);
    let decoded: Vec<i16> = bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(decoded, to_i16(&x));
}

#[test]
fn wav_decodes_exactly() {
    let x = signal(TOTAL);
    let bytes = encode_whole(AudioFormat::Wav, &x);
    assert_eq!(bytes.len(), 44 + 2 * TOTAL);
    let decoded: Vec<i16> = symphonia_decode(&bytes, "wav");
    assert_eq!(decoded, to_i16(&x));
}

#[test]
fn flac_decodes_exactly() {
    let x = signal(TOTAL);
    let bytes = encode_whole(AudioFormat::Flac, &x);
    let decoded: Vec<i16> = symphonia_decode(&bytes, "flac");
    assert_eq!(decoded, to_i16(&x));
    println!(
        "flac: {TOTAL} samples -> {} bytes ({:.1}% of s16le)",
        bytes.len(),
        100.0 * bytes.len() as f64 / (2 * TOTAL) as f64
    );
}

#[test]
fn opus_decodes_to_the_input_length_and_signal() {
    let x = signal(TOTAL);
    let bytes = encode_whole(AudioFormat::Opus, &x);
    let ogg = OggOpus::decode(&bytes);
    let lookahead = opus::Encoder::new(RATE, opus::Channels::Mono, opus::Application::Audio)
        .unwrap()
        .get_lookahead()
        .unwrap();
    assert_eq!(
        ogg.pre_skip,
        2 * lookahead as u64,
        "pre-skip is the look-ahead at 48 kHz"
    );
    assert!(ogg.ends_with_eos);
    assert_eq!(&ogg.page_granules[..2], &[0, 0], "header pages");
    assert!(ogg.page_granules.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(
        *ogg.page_granules.last().unwrap(),
        ogg.pre_skip + 2 * TOTAL as u64,
        "last granule = pre-skip + input length (48 kHz)"
    );
    // The packets cover the look-ahead and the input, with less than one packet to spare.
    assert_eq!(
        ogg.audio_packets,
        (TOTAL + lookahead as usize).div_ceil(480)
    );
    let trimmed = ogg.trimmed();
    assert_eq!(trimmed.len(), TOTAL);
    let (corr, snr) = similarity(&clamped(&x), trimmed);
    println!(
        "opus: pre-skip {} (48 kHz), {} packets, {} bytes, correlation {corr:.4}, SNR {snr:.1} dB",
        ogg.pre_skip,
        ogg.audio_packets,
        bytes.len()
    );
    assert!(corr > 0.95, "correlation {corr}");
}

#[test]
fn mp3_decodes_to_the_input_after_the_codec_delay() {
    let x = signal(TOTAL);
    let bytes = encode_whole(AudioFormat::Mp3, &x);
    // 64 kb/s at 24 kHz: every frame is 192 bytes, none padded.
    assert_eq!(bytes.len() % 192, 0);
    let decoded: Vec<f32> = symphonia_decode(&bytes, "mp3");
    assert_eq!(decoded.len(), bytes.len() / 192 * MP3_FRAME);
    // Output = delay + input + padding to a whole frame (< 1 frame beyond the delay).
    assert!(decoded.len() >= MP3_DELAY + TOTAL, "{}", decoded.len());
    assert!(
        decoded.len() < MP3_DELAY + TOTAL + 2 * MP3_FRAME,
        "{}",
        decoded.len()
    );
    let reference = clamped(&x);
    let best = (MP3_DELAY - 50..=MP3_DELAY + 50)
        .max_by(|&a, &b| {
            let ca = similarity(&reference, &decoded[a..]).0;
            let cb = similarity(&reference, &decoded[b..]).0;
            ca.total_cmp(&cb)
        })
        .unwrap();
    let (corr, snr) = similarity(&reference, &decoded[MP3_DELAY..]);
    println!(
        "mp3: {} bytes, decoded {} = {TOTAL} + {} samples, best lag {best}, correlation at \
         {MP3_DELAY}: {corr:.4}, SNR {snr:.1} dB",
        bytes.len(),
        decoded.len(),
        decoded.len() - TOTAL
    );
    assert_eq!(best, MP3_DELAY);
    assert!(corr > 0.95, "correlation {corr}");
}

/// Input samples a decoder recovers from a prefix of a stream: what it decodes, less the
/// codec delay at the start (Opus: pre-skip; MP3: encoder + decoder delay); may be < 0.
fn recoverable(format: AudioFormat, bytes: &[u8]) -> i64 {
    match format {
        AudioFormat::Pcm => bytes.len() as i64 / 2,
        AudioFormat::Wav => (bytes.len() as i64 - 44) / 2,
        AudioFormat::Flac => symphonia_decode::<i16>(bytes, "flac").len() as i64,
        AudioFormat::Mp3 if bytes.is_empty() => -(MP3_DELAY as i64),
        AudioFormat::Mp3 => symphonia_decode::<f32>(bytes, "mp3").len() as i64 - MP3_DELAY as i64,
        AudioFormat::Opus => {
            let ogg = OggOpus::decode(bytes);
            ogg.decoded.len() as i64 - (ogg.pre_skip / 2) as i64
        }
    }
}

#[test]
fn every_format_streams() {
    let x = signal(TOTAL);
    // The most input a decoder may lack after any push: pcm and wav none; flac the block
    // being filled; opus the packet being filled and libopus's look-ahead (156); mp3 the
    // frame being filled (576) and LAME's psychoacoustic look-ahead (1328).
    let max_held = |f: AudioFormat| match f {
        AudioFormat::Pcm | AudioFormat::Wav => 0,
        AudioFormat::Flac => super::flac::BLOCK_LEN as i64 - 1,
        AudioFormat::Opus => 479 + 156,
        AudioFormat::Mp3 => 576 + 1328,
    };
    for format in AudioFormat::ALL {
        let (pushes, _) = encode_chunked(format, &x);
        let mut prefix = Vec::new();
        let mut worst = i64::MIN;
        for (i, (pushed, bytes)) in pushes.into_iter().enumerate() {
            if format == AudioFormat::Mp3 {
                assert_eq!(bytes.len() % 192, 0, "mp3: a push returns whole frames");
            }
            prefix.extend_from_slice(&bytes);
            let got = recoverable(format, &prefix);
            if i == 0 {
                assert!(
                    got > 0,
                    "{format}: the first 1920 samples give audio at once"
                );
            }
            let held = pushed as i64 - got;
            worst = worst.max(held);
            assert!(
                held <= max_held(format),
                "{format}: {held} samples held after {pushed}"
            );
        }
        println!("{format}: at most {worst} input samples not yet decodable after a push");
    }
}

#[test]
fn short_and_empty_streams_round_trip() {
    for n in [0, 1, 7, 479, 480, 481, 1919, 1920, 1921, 2500] {
        let x = signal(n);
        let expect = to_i16(&x);
        let pcm = encode_whole(AudioFormat::Pcm, &x);
        assert_eq!(pcm.len(), 2 * n);
        let wav = encode_whole(AudioFormat::Wav, &x);
        assert_eq!(wav.len(), 44 + 2 * n);
        if n > 0 {
            assert_eq!(symphonia_decode::<i16>(&wav, "wav"), expect, "wav {n}");
        }
        let flac = encode_whole(AudioFormat::Flac, &x);
        if n > 0 {
            assert_eq!(symphonia_decode::<i16>(&flac, "flac"), expect, "flac {n}");
        } else {
            // symphonia cannot open a FLAC without frames; check the header is all there is.
            assert_eq!(flac.len(), 4 + 4 + 34);
            assert_eq!(&flac[..5], b"fLaC\x80");
        }
        let ogg = OggOpus::decode(&encode_whole(AudioFormat::Opus, &x));
        assert!(ogg.ends_with_eos);
        assert_eq!(ogg.trimmed().len(), n, "opus {n}");
        let mp3 = encode_whole(AudioFormat::Mp3, &x);
        let decoded = if mp3.is_empty() {
            0
        } else {
            symphonia_decode::<f32>(&mp3, "mp3").len()
        };
        assert!(decoded >= n, "mp3 {n}: {decoded}");
    }
}

#[test]
fn nothing_after_finish() {
    for format in AudioFormat::ALL {
        let mut enc = encoder(format, RATE).unwrap();
        enc.push(&[0.0; 100]).unwrap();
        enc.finish().unwrap();
        assert!(matches!(enc.push(&[0.0]), Err(AudioError::Finished)));
        assert!(matches!(enc.finish(), Err(AudioError::Finished)));
    }
}

#[test]
fn unsupported_sample_rates_are_typed_errors() {
    for (format, rate) in [
        (AudioFormat::Pcm, 0),
        (AudioFormat::Wav, 0),
        (AudioFormat::Opus, 44_100),
        (AudioFormat::Mp3, 23_000),
        (AudioFormat::Flac, 192_000),
    ] {
        let err = encoder(format, rate).err().expect("an error");
        let rejected = match err {
            AudioError::UnsupportedSampleRate { sample_rate, .. } => sample_rate,
            other => panic!("{format} {rate}: {other}"),
        };
        assert_eq!(rejected, rate, "{format}");
    }
    for format in AudioFormat::ALL {
        assert!(encoder(format, 48_000).is_ok(), "{format} at 48 kHz");
    }
}

#[test]
fn nan_and_out_of_range_input_is_safe() {
    let mut x = signal(4000);
    x[10] = f32::NAN;
    x[11] = f32::INFINITY;
    x[12] = f32::NEG_INFINITY;
    for format in AudioFormat::ALL {
        assert!(!encode_whole(format, &x).is_empty(), "{format}");
    }
}
