//! The engine with cloned voices (the tiny Base fixture checkpoint on the CPU reference):
//! an in-context clone's reference frames are decoded first and their audio dropped, so
//! the stream is sample-identical to `synthesize` (which cuts them) then the engine's
//! trimming, and the usage counts none of the reference's audio as trimmed.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tts_engine::trim::trim_whole;
use tts_engine::{EngineConfig, EngineHandle, Event, SynthesisRequest};
use tts_model::clone::{CloneMode, VoiceCloner};
use tts_model::generate::synthesize;
use tts_model::reference::CpuBackend;
use tts_model::{LoadOptions, Model, SpeechRequest, TextMode};

fn base_model() -> Arc<Model> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/tiny-1b7-base");
    Arc::new(Model::from_dir(&dir, LoadOptions::default()).unwrap())
}

/// A voiced 16 kHz recording, `seconds` long.
fn recording(seconds: f32) -> Vec<f32> {
    (0..(16_000.0 * seconds) as usize)
        .map(|i| {
            let t = i as f32 / 16_000.0;
            (1..5)
                .map(|h| (2.0 * std::f32::consts::PI * 150.0 * h as f32 * t).sin() / h as f32)
                .sum::<f32>()
                * 0.3
        })
        .collect()
}

#[test]
fn cloned_voices_stream_exactly_what_synthesize_gives() {
    let model = base_model();
    let cloner = VoiceCloner::load(&model).unwrap().unwrap();
    let audio = recording(1.3);
    let icl = cloner
        .clone_voice(
            &audio,
            16_000,
            CloneMode::InContext,
            Some("Hello, how are you?"),
        )
        .unwrap();
    let context = icl.reference.as_ref().unwrap().frames.len();
    assert_eq!(context, 17, "ceil(1.3 s / 80 ms) reference frames");
    let xvec = cloner
        .clone_voice(&audio, 16_000, CloneMode::SpeakerOnly, None)
        .unwrap();

    let config = EngineConfig::default();
    let backend = Box::new(CpuBackend::new(&model, 2).unwrap());
    let engine = EngineHandle::start(model.clone(), backend, config.clone()).unwrap();
    assert_eq!(engine.wait_ready(Duration::from_secs(60)), Ok(true));

    let cases = [
        (icl, TextMode::Stream, 7u64, 9usize),
        (xvec, TextMode::Prefill, 8, 6),
    ];
    let mut handles = Vec::new();
    for (voice, mode, seed, frames) in cases {
        let req = SynthesisRequest {
            speech: SpeechRequest {
                text: "Good to see you again.".into(),
                language: "english".into(),
                text_mode: mode,
                clone: Some(Arc::new(voice)),
                ..Default::default()
            },
            sampling: model.default_sampling(seed),
            max_frames: Some(frames),
        };
        let prompt = model.prompt(&req.speech).unwrap();
        let mut one = CpuBackend::new(&model, 1).unwrap();
        let out = synthesize(&mut one, &prompt, &req.sampling, frames, true).unwrap();
        assert_eq!(out.pcm.len(), out.frames.len() * model.samples_per_frame());
        let want = trim_whole(
            &out.pcm,
            config.trim_for(&model),
            model.sample_rate(),
            model.samples_per_frame(),
        );
        let trimmed = out.pcm.len() - want.len();
        handles.push((engine.submit(req).unwrap(), want, trimmed));
    }
    for (i, (mut h, want, trimmed)) in handles.into_iter().enumerate() {
        let mut got = Vec::new();
        let usage = loop {
            match h.blocking_recv().expect("an event") {
                Event::Audio(a) => got.extend(a),
                Event::Done(u) => break u,
                Event::Failed(f) => panic!("request {i} failed: {f:?}"),
                Event::Started(_) => {}
            }
        };
        assert_eq!(got.len(), want.len(), "request {i}: length");
        assert!(got == want, "request {i}: differs from synthesize");
        let counted = (usage.trimmed_seconds * 24_000.0).round() as usize;
        assert_eq!(counted, trimmed, "request {i}: trimmed samples");
    }
}

/// The overhead that sizes long texts' segments bounds every segment's prompt: for an
/// in-context clone it counts the reference's transcript and frames, which the voice head
/// alone (the bound for the other kinds) does not.
#[test]
fn segment_overhead_bounds_clone_prompts() {
    use tts_engine::segment::overhead_positions;
    let model = base_model();
    let cloner = VoiceCloner::load(&model).unwrap().unwrap();
    let audio = recording(1.3);
    let long = "This sentence is here to make the text long. ".repeat(12);
    let texts = ["Hi.", "A short one, with a comma.", long.as_str()];
    for mode in [TextMode::Stream, TextMode::Prefill] {
        for clone_mode in [CloneMode::InContext, CloneMode::SpeakerOnly] {
            let voice = cloner
                .clone_voice(&audio, 16_000, clone_mode, Some("Hello, how are you?"))
                .unwrap();
            let speech = |text: &str| SpeechRequest {
                text: text.into(),
                language: "english".into(),
                text_mode: mode,
                clone: Some(Arc::new(voice.clone())),
                ..Default::default()
            };
            let whole = model.prompt(&speech(&long)).unwrap();
            let overhead = overhead_positions(&whole);
            for text in texts {
                let p = model.prompt(&speech(text)).unwrap();
                assert!(
                    p.positions.len() <= overhead + p.body_len,
                    "{mode:?} {clone_mode:?} {text:?}: {} positions, overhead {overhead} + {} tokens",
                    p.positions.len(),
                    p.body_len
                );
                if clone_mode == CloneMode::InContext && mode == TextMode::Prefill {
                    // the voice head alone would not bound it
                    assert!(p.positions.len() > p.head_len + 16 + p.body_len);
                }
            }
        }
    }
}
