//! `qwen3-tts synth` as a user runs it: outputs, exact parity on a fixture checkpoint, and
//! one-line errors with a non-zero exit for every bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qwen3-tts"));
    c.env("RUST_LOG", "error");
    c
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn synth(args: &[&str]) -> Output {
    bin()
        .arg("synth")
        .args(args)
        .output()
        .expect("run qwen3-tts")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails with exit status 1 and exactly one `error:` line that contains `needle`.
fn assert_clean_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(needle), "expected `{needle}` in: {err}");
}

#[test]
fn demo_synth_writes_wav_and_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let wav = tmp.path().join("out.wav");
    let codes = tmp.path().join("codes.json");
    let o = synth(&[
        "--model",
        "demo",
        "--text",
        "Hello there.",
        "--voice",
        "RYAN",
        "--language",
        "English",
        "--seed",
        "3",
        "--out",
        wav.to_str().unwrap(),
        "--codes-out",
        codes.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let frames: Vec<Vec<u32>> =
        serde_json::from_str(&std::fs::read_to_string(&codes).unwrap()).unwrap();
    assert!(!frames.is_empty());
    assert!(frames
        .iter()
        .all(|f| f.len() == 16 && f.iter().all(|&c| c < 2048)));
    let r = hound::WavReader::open(&wav).unwrap();
    let spec = r.spec();
    assert_eq!(
        (spec.sample_rate, spec.channels, spec.bits_per_sample),
        (24000, 1, 16)
    );
    assert_eq!(r.duration() as usize, frames.len() * 1920);
}

#[test]
fn fixture_checkpoint_greedy_codes_match_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let case: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("cases/cv17_stream_english.json")).unwrap(),
    )
    .unwrap();
    let codes_path = tmp.path().join("codes.json");
    let model = fixtures().join("models/tiny-1b7-customvoice");
    let max_frames = (case["max_new_tokens"].as_u64().unwrap() - 1).to_string();
    let o = synth(&[
        "--model",
        model.to_str().unwrap(),
        "--text",
        case["text"].as_str().unwrap(),
        "--voice",
        "ryan",
        "--language",
        "english",
        "--text-mode",
        "stream",
        "--greedy",
        "--max-frames",
        &max_frames,
        "--out",
        tmp.path().join("o.wav").to_str().unwrap(),
        "--codes-out",
        codes_path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&codes_path).unwrap()).unwrap();
    assert_eq!(got, case["codes"]);
}

/// The fixture reference recording as a 32-bit float WAV (exact samples).
fn reference_wav(path: &Path) {
    let files = tts_model::checkpoint::SafetensorsFiles::open_files(vec![
        fixtures().join("cases/base17_ref.safetensors")
    ])
    .unwrap();
    let shape = files.shape("ref_audio").unwrap().to_vec();
    let audio = files.tensor("ref_audio", &shape).unwrap().to_f32();
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 24_000,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for x in audio {
        w.write_sample(x).unwrap();
    }
    w.finalize().unwrap();
}

/// Cloning from a recording file, in context and from the speaker vector alone: the
/// official implementation's greedy codes.
#[test]
fn voice_cloning_from_a_file_gives_the_reference_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let wav = tmp.path().join("ref.wav");
    reference_wav(&wav);
    let model = fixtures().join("models/tiny-1b7-base");
    for (case, extra) in [
        (
            "base17_icl_stream",
            vec!["--ref-text", "Good morning! How are you doing?"],
        ),
        ("base17_xvec_stream", vec!["--x-vector-only"]),
    ] {
        let c: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures().join(format!("cases/{case}.json"))).unwrap(),
        )
        .unwrap();
        let codes_path = tmp.path().join("codes.json");
        let max_frames = (c["max_new_tokens"].as_u64().unwrap() - 1).to_string();
        let out_wav = tmp.path().join("o.wav");
        let mut args = vec![
            "--model",
            model.to_str().unwrap(),
            "--text",
            c["text"].as_str().unwrap(),
            "--language",
            "english",
            "--text-mode",
            "stream",
            "--greedy",
            "--max-frames",
            &max_frames,
            "--ref-audio",
            wav.to_str().unwrap(),
            "--out",
            out_wav.to_str().unwrap(),
            "--codes-out",
            codes_path.to_str().unwrap(),
        ];
        args.extend(extra);
        let o = synth(&args);
        assert!(o.status.success(), "{case}: {}", stderr(&o));
        let got: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&codes_path).unwrap()).unwrap();
        assert_eq!(got, c["codes"], "{case}");
    }
    let out = tmp.path().join("x.wav");
    let o = synth(&[
        "--model",
        "demo",
        "--text",
        "Hi.",
        "--ref-audio",
        wav.to_str().unwrap(),
        "--x-vector-only",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_error(&o, "clones a voice with a Base model");
    let o = synth(&[
        "--model",
        model.to_str().unwrap(),
        "--text",
        "Hi.",
        "--ref-audio",
        wav.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_error(&o, "ref_text");
}

#[test]
fn bad_inputs_give_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.wav");
    let out = out.to_str().unwrap();
    let o = synth(&[
        "--model", "demo", "--text", "Hi.", "--voice", "nobody", "--out", out,
    ]);
    assert_clean_error(&o, "unknown voice `nobody`");
    let o = synth(&[
        "--model",
        "demo",
        "--text",
        "Hi.",
        "--voice",
        "ryan",
        "--language",
        "klingon",
        "--out",
        out,
    ]);
    assert_clean_error(&o, "unknown language `klingon`");
    let o = synth(&[
        "--model", "demo", "--text", "   ", "--voice", "ryan", "--out", out,
    ]);
    assert_clean_error(&o, "text is empty");
    let o = synth(&[
        "--model",
        "/no/such/checkpoint",
        "--text",
        "Hi.",
        "--out",
        out,
    ]);
    assert_clean_error(&o, "unknown model `/no/such/checkpoint`");
    let o = synth(&[
        "--model",
        "demo",
        "--text",
        "Hi.",
        "--temperature",
        "0",
        "--out",
        out,
    ]);
    assert_clean_error(&o, "temperature");
    let vd = fixtures().join("models/tiny-1b7-voicedesign");
    let o = synth(&[
        "--model",
        vd.to_str().unwrap(),
        "--text",
        "Hi.",
        "--voice",
        "ryan",
        "--out",
        out,
    ]);
    assert_clean_error(&o, "takes no preset voice");
    assert!(!Path::new(out).exists(), "no output file after a failure");
}

#[test]
fn malformed_checkpoint_gives_a_one_line_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    std::fs::create_dir_all(dir.join("speech_tokenizer")).unwrap();
    std::fs::write(
        dir.join("config.json"),
        "{\"tts_model_type\": \"custom_voice\"}",
    )
    .unwrap();
    let o = synth(&[
        "--model",
        dir.to_str().unwrap(),
        "--text",
        "Hi.",
        "--out",
        tmp.path().join("x.wav").to_str().unwrap(),
    ]);
    assert_clean_error(&o, "config.json");
}
