//! The CPU speaker encoder (log-mel front end + ECAPA-TDNN) against the official Python
//! implementation: `fixtures/cases/base17_ref.safetensors` holds a 24 kHz reference clip
//! (`ref_audio`), the official `mel_spectrogram` of it (`mel`, `[frames, 128]`) and the
//! x-vector `extract_speaker_embedding` returns for it with the weights of
//! `fixtures/models/tiny-1b7-base` (`x_vector`).

mod common;

use std::path::Path;

use common::{fixtures_dir, max_abs_err, model_dir, rel_err};
use tts_model::checkpoint::{SafetensorsFiles, WeightSource};
use tts_model::reference::speaker::{MelSpectrogram, SpeakerEncoder, SpeakerEncoderConfig};

/// Max |diff| of the log-mel values (natural log; the values span about -11.5 .. 5).
/// Measured: 1.5e-5.
const MEL_TOL: f32 = 1e-4;
/// Max |diff| of the x-vector over its max |value|, from the official mel (the network
/// alone) and from the audio (mel + network). Measured: 2.6e-7 and 3.1e-7 (the default
/// full-size geometry on random weights and a 10 s clip: 8e-7 and 9e-7).
const XVEC_TOL: f32 = 1e-4;

/// `speaker_encoder_config` of a checkpoint's `config.json`.
fn speaker_config(dir: &Path) -> SpeakerEncoderConfig {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let section = json
        .get("speaker_encoder_config")
        .unwrap_or_else(|| panic!("{}: no speaker_encoder_config", path.display()))
        .clone();
    serde_json::from_value(section).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load_encoder(dir: &Path) -> SpeakerEncoder {
    let cfg = speaker_config(dir);
    let weights = WeightSource::Files(SafetensorsFiles::open(dir, "model").unwrap());
    SpeakerEncoder::load(&cfg, &weights).unwrap_or_else(|e| panic!("{e}"))
}

/// One case file's tensors.
fn case_tensors(name: &str) -> SafetensorsFiles {
    let path = fixtures_dir()
        .join("cases")
        .join(format!("{name}.safetensors"));
    SafetensorsFiles::open_files(vec![path]).unwrap_or_else(|e| panic!("{e}"))
}

fn get(t: &SafetensorsFiles, name: &str) -> (Vec<f32>, Vec<usize>) {
    let shape = t
        .shape(name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
        .to_vec();
    (t.tensor(name, &shape).unwrap().to_f32(), shape)
}

#[test]
fn mel_and_x_vector_match_the_official_implementation() {
    let enc = load_encoder(&model_dir("tiny-1b7-base"));
    let t = case_tensors("base17_ref");
    let (audio, _) = get(&t, "ref_audio");
    let (want_mel, mel_shape) = get(&t, "mel");
    let (want_x, x_shape) = get(&t, "x_vector");
    assert_eq!(x_shape, [enc.dim()]);

    let mel = enc.mel_spectrogram(&audio).unwrap();
    assert_eq!([mel.frames, 128], mel_shape[..], "mel shape");
    let e = max_abs_err(&mel.data, &want_mel);
    eprintln!("mel: max |diff| {e:.2e}");
    assert!(e <= MEL_TOL, "mel max |diff| {e}");

    // The network alone, on the official mel.
    let official = MelSpectrogram {
        frames: mel_shape[0],
        data: want_mel,
    };
    let x = enc.embed_mel(&official).unwrap();
    let e = rel_err(&x, &want_x);
    eprintln!("x-vector from the official mel: rel err {e:.2e}");
    assert!(e <= XVEC_TOL, "x-vector (official mel) rel err {e}");

    // End to end.
    let x = enc.embed(&audio).unwrap();
    let e = rel_err(&x, &want_x);
    eprintln!("x-vector from the audio: rel err {e:.2e}");
    assert!(e <= XVEC_TOL, "x-vector (audio) rel err {e}");
}

#[test]
fn short_reference_audio_is_a_clear_error() {
    let enc = load_encoder(&model_dir("tiny-1b7-base"));
    let min = enc.min_samples();
    let err = enc.embed(&vec![0.01; min - 1]).unwrap_err();
    assert!(err.to_string().contains("too short"), "{err}");
    assert!(enc.embed(&[]).is_err());
    assert_eq!(enc.embed(&vec![0.01; min]).unwrap().len(), enc.dim());
}
