//! The CPU reference codec encoder (Mimi) against the official `Qwen3TTSTokenizer.encode`:
//! the continuous frames before the quantizer and the reference codes of a voice-clone
//! prompt (`fixtures/cases/base17_ref.*`, made by `tools/fixtures/make_fixtures.py`).

mod common;

use std::path::Path;

use common::{fixtures_dir, max_abs_err, model_dir, rel_err};
use safetensors::{Dtype, SafeTensors};
use tts_model::checkpoint::{SafetensorsFiles, WeightSource};
use tts_model::config::{CodecConfig, UnknownKeys};
use tts_model::reference::codec_encoder::CodecEncoder;
use tts_model::{ModelError, RequestError};

/// Frames differ from PyTorch's by summation order only. Measured on the fixture: max abs
/// error 1.2e-6, relative (`max |a - b| / max |b|`) 6.8e-7; allowed 1e-5, well inside the
/// smallest quantizer margin the fixture records (5.5e-4 absolute, 2.5e-3 relative).
const FRAME_TOLERANCE: f32 = 1e-5;

fn load_encoder(speech_tokenizer: &Path) -> CodecEncoder {
    let cfg = CodecConfig::load(&speech_tokenizer.join("config.json"), UnknownKeys::Reject)
        .unwrap_or_else(|e| panic!("{e}"));
    let weights = WeightSource::Files(
        SafetensorsFiles::open(speech_tokenizer, "model").unwrap_or_else(|e| panic!("{e}")),
    );
    CodecEncoder::load(&cfg, &weights).unwrap_or_else(|e| panic!("{e}"))
}

/// A recorded case: reference audio, frames `[R, D]` and codes `[R, 16]`.
struct RefCase {
    audio: Vec<f32>,
    frames: Vec<f32>,
    frames_shape: Vec<usize>,
    codes: Vec<[u32; 16]>,
}

fn read_case(path: &Path) -> RefCase {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let f32s = |name: &str| {
        let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        let v: Vec<f32> = t
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        (v, t.shape().to_vec())
    };
    let (audio, _) = f32s("ref_audio");
    let (frames, frames_shape) = f32s("encoder_frames");
    let code = st
        .tensor("ref_code")
        .unwrap_or_else(|e| panic!("ref_code: {e}"));
    assert_eq!(code.dtype(), Dtype::I64);
    assert_eq!(code.shape()[1], 16);
    let flat: Vec<u32> = code
        .data()
        .chunks_exact(8)
        .map(|c| {
            let v = i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            u32::try_from(v).expect("code out of range")
        })
        .collect();
    let codes = flat
        .chunks(16)
        .map(|c| {
            let mut f = [0u32; 16];
            f.copy_from_slice(c);
            f
        })
        .collect();
    RefCase {
        audio,
        frames,
        frames_shape,
        codes,
    }
}

/// Runs the encoder on a case; returns the number of samples and of code frames.
fn check(speech_tokenizer: &Path, case: &Path) -> (usize, usize) {
    let enc = load_encoder(speech_tokenizer);
    let c = read_case(case);
    let r = c.codes.len();
    assert_eq!(c.frames_shape, vec![r, enc.frame_dim()], "frames shape");
    assert_eq!(enc.num_frames(c.audio.len()), r, "code frames");

    let frames = enc.frames(&c.audio).unwrap();
    let rel = rel_err(&frames, &c.frames);
    eprintln!(
        "{}: frames max abs err {:.3e}, rel err {rel:.3e}",
        case.display(),
        max_abs_err(&frames, &c.frames)
    );
    assert!(rel < FRAME_TOLERANCE, "frames rel err {rel}");

    let codes = enc.encode(&c.audio).unwrap();
    assert_eq!(codes, c.codes, "codes");
    (c.audio.len(), r)
}

#[test]
fn encoder_matches_the_official_tokenizer() {
    // Through the whole model, as a server loads it.
    let model = common::load_model("tiny-1b7-base");
    assert!(CodecEncoder::from_model(&model).is_ok());
    let (samples, frames) = check(
        &model_dir("tiny-1b7-base").join("speech_tokenizer"),
        &fixtures_dir().join("cases").join("base17_ref.safetensors"),
    );
    assert!(
        !samples.is_multiple_of(1920),
        "the case should end mid-frame"
    );
    assert_eq!(frames, samples.div_ceil(1920));
}

#[test]
fn every_fixture_model_loads_its_encoder() {
    for name in [
        "tiny-0b6-customvoice",
        "tiny-1b7-customvoice",
        "tiny-1b7-voicedesign",
    ] {
        let enc = load_encoder(&model_dir(name).join("speech_tokenizer"));
        let audio: Vec<f32> = (0..5000).map(|i| (i as f32 * 0.01).sin() * 0.3).collect();
        let codes = enc.encode(&audio).unwrap();
        assert_eq!(codes.len(), 3, "{name}");
    }
}

#[test]
fn empty_or_broken_audio_is_refused() {
    let enc = load_encoder(&model_dir("tiny-1b7-customvoice").join("speech_tokenizer"));
    for audio in [vec![], vec![0.1, f32::NAN]] {
        match enc.encode(&audio) {
            Err(ModelError::Request(RequestError::BadReference(m))) => eprintln!("{m}"),
            other => panic!("expected a bad-reference error, got {other:?}"),
        }
    }
    // One sample is enough for one frame, as in the official encoder.
    assert_eq!(enc.encode(&[0.1]).unwrap().len(), 1);
}

#[test]
fn a_config_without_encoder_config_gets_the_released_encoder() {
    // The built-in models' speech tokenizer config has no `encoder_config`: Mimi's defaults
    // (release sizes), with seeded random weights.
    let model = tts_model::Model::load("demo", tts_model::LoadOptions::default()).unwrap();
    let enc = CodecEncoder::from_model(&model).unwrap();
    assert_eq!((enc.frame_dim(), enc.sample_rate()), (512, 24_000));
    assert_eq!(enc.num_frames(1920 * 2 + 1), 3);
    assert_eq!(enc.encode(&vec![0.01; 1920]).unwrap().len(), 1);
}
