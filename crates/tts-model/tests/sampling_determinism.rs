//! Seeded sampling: the same (seed, request) always gives the same audio, another seed
//! gives other audio, and a request's audio does not depend on its batch companions.

use tts_model::generate::synthesize;
use tts_model::reference::CpuBackend;
use tts_model::{Backend, CodecRow, Frame, LoadOptions, Model, PrefillRow, SpeechRequest, StepRow};

fn demo() -> Model {
    Model::load("demo", LoadOptions::default()).unwrap()
}

fn request(text: &str, voice: &str) -> SpeechRequest {
    SpeechRequest {
        text: text.into(),
        voice: Some(voice.into()),
        language: "English".into(),
        ..Default::default()
    }
}

#[test]
fn same_seed_same_audio_other_seed_other_audio() {
    let m = demo();
    let prompt = m
        .prompt(&request("The same seed gives the same audio.", "vivian"))
        .unwrap();
    let mut backend = CpuBackend::new(&m, 2).unwrap();
    let run = |b: &mut CpuBackend, seed| {
        synthesize(b, &prompt, &m.default_sampling(seed), 12, true).unwrap()
    };
    let a = run(&mut backend, 42);
    let b = run(&mut backend, 42);
    let c = run(&mut backend, 43);
    assert_eq!(a.frames.len(), 12);
    assert_eq!(a.frames, b.frames);
    assert!(a.pcm == b.pcm, "same seed, different audio");
    assert_ne!(a.frames, c.frames);
    assert!(a.pcm != c.pcm, "different seeds, same audio");
    // Sampling really samples: the codes are not the greedy ones.
    let g = synthesize(
        &mut backend,
        &prompt,
        &m.default_sampling(42).greedy(),
        12,
        true,
    )
    .unwrap();
    assert_ne!(a.frames, g.frames);
}

/// Runs several requests in lock-step batches on one backend; returns each one's frames
/// and audio.
fn run_batched(
    m: &Model,
    backend: &mut CpuBackend,
    reqs: &[(SpeechRequest, u64)],
    frames: usize,
) -> Vec<(Vec<Frame>, Vec<f32>)> {
    let prompts: Vec<_> = reqs.iter().map(|(r, _)| m.prompt(r).unwrap()).collect();
    let slots: Vec<_> = reqs
        .iter()
        .map(|(_, seed)| backend.alloc_slot(&m.default_sampling(*seed)).unwrap())
        .collect();
    let rows: Vec<PrefillRow<'_>> = slots
        .iter()
        .zip(&prompts)
        .map(|(&slot, prompt)| PrefillRow { slot, prompt })
        .collect();
    backend.prefill(&rows).unwrap();
    let mut out: Vec<(Vec<Frame>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); reqs.len()];
    for step in 0..frames {
        let fs = backend.predict_codes(&slots).unwrap();
        let codec_rows: Vec<CodecRow<'_>> = slots
            .iter()
            .zip(&fs)
            .map(|(&slot, f)| CodecRow {
                slot,
                frames: std::slice::from_ref(f),
            })
            .collect();
        let pcm = backend.codec_decode(&codec_rows).unwrap();
        for (o, (f, p)) in out.iter_mut().zip(fs.iter().zip(pcm)) {
            o.0.push(*f);
            o.1.extend(p);
        }
        let pad = backend.info().tts_pad_token_id;
        let steps: Vec<StepRow> = slots
            .iter()
            .zip(&prompts)
            .map(|(&slot, p)| StepRow {
                slot,
                text_token: p.trailing_text.get(step).copied().unwrap_or(pad),
            })
            .collect();
        backend.talker_step(&steps).unwrap();
    }
    for s in slots {
        backend.free_slot(s);
    }
    out
}

#[test]
fn batch_companions_do_not_change_a_request() {
    let m = demo();
    let mut backend = CpuBackend::new(&m, 4).unwrap();
    let mut a = request("A request alone and in company.", "ryan");
    a.text_mode = tts_model::TextMode::Stream;
    let alone = run_batched(&m, &mut backend, &[(a.clone(), 7)], 6).remove(0);
    let crowd = run_batched(
        &m,
        &mut backend,
        &[
            (
                request("Someone else, longer, with other words in it.", "serena"),
                1,
            ),
            (a.clone(), 7),
            (request("A third.", "eric"), 99),
        ],
        6,
    );
    assert_eq!(alone.0, crowd[1].0, "codes changed with batch companions");
    assert!(alone.1 == crowd[1].1, "audio changed with batch companions");
    // and lock-step batching equals the sequential driver
    let prompt = m.prompt(&a).unwrap();
    let seq = synthesize(&mut backend, &prompt, &m.default_sampling(7), 6, true).unwrap();
    assert_eq!(seq.frames, alone.0);
    assert!(
        seq.pcm == alone.1,
        "frame-by-frame decode differs from whole decode"
    );
}

/// A prompt without positions is refused with an error, not a panic, and the slot stays
/// usable.
#[test]
fn an_empty_prompt_is_an_error() {
    let model = demo();
    let mut cpu = CpuBackend::new(&model, 2).unwrap();
    let params = model.default_sampling(0);
    let slot = cpu.alloc_slot(&params).unwrap();
    let mut empty = model.prompt(&request("Hello.", "ryan")).unwrap();
    empty.positions.clear();
    let err = cpu
        .prefill(&[PrefillRow {
            slot,
            prompt: &empty,
        }])
        .unwrap_err();
    assert!(err.to_string().contains("empty prompt"), "{err}");
    let good = model.prompt(&request("Hello.", "ryan")).unwrap();
    cpu.prefill(&[PrefillRow {
        slot,
        prompt: &good,
    }])
    .unwrap();
}
