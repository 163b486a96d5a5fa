//! Voice cloning with a Base checkpoint against the official implementation's recorded
//! outputs (`fixtures/cases/base17_*`): prompts with the speaker vector alone and with the
//! reference in context (both text modes), their embeddings, the talker's logits, greedy
//! codes and the PCM after the reference's part is cut; and the whole path from the
//! reference recording (speaker encoder and codec encoder) to the same codes.

mod common;

use std::sync::Arc;

use common::{case_names, case_tensors, load_model, max_abs_err, read_json, rel_err, Case};
use serde::Deserialize;
use tts_model::clone::{CloneMode, VoiceCloner};
use tts_model::generate::{synthesize, Synthesis};
use tts_model::prompt::{ClonedVoice, SpeakerVector, VoiceReference};
use tts_model::reference::stack::StackKv;
use tts_model::reference::{CpuBackend, CpuModel};
use tts_model::{Model, SpeechRequest, TextMode};

const MODEL: &str = "tiny-1b7-base";

/// What a voice-clone case adds to a generation case.
#[derive(Deserialize)]
struct CloneExtra {
    x_vector_only_mode: bool,
    ref_case: String,
    ref_text: Option<String>,
    ref_text_ids: Option<Vec<u32>>,
}

/// The reference recording's recorded encodings.
struct RefCase {
    audio: Vec<f32>,
    x_vector: Vec<f32>,
    frames: Vec<[u32; 16]>,
}

#[derive(Deserialize)]
struct RefJson {
    ref_code: Vec<[u32; 16]>,
}

fn ref_case(name: &str) -> RefCase {
    let t = case_tensors(name);
    let frames = read_json::<RefJson>(name).ref_code;
    RefCase {
        audio: t.get("ref_audio").0,
        x_vector: t.get("x_vector").0,
        frames,
    }
}

struct CloneCase {
    case: Case,
    extra: CloneExtra,
}

impl CloneCase {
    /// The cloned voice the reference built from the recording.
    fn voice(&self) -> ClonedVoice {
        let r = ref_case(&self.extra.ref_case);
        ClonedVoice {
            speaker: Arc::new(SpeakerVector::new(r.x_vector)),
            reference: (!self.extra.x_vector_only_mode).then(|| VoiceReference {
                frames: r.frames,
                text: self.extra.ref_text.clone().expect("ICL case has ref_text"),
            }),
        }
    }

    fn request(&self, voice: ClonedVoice) -> SpeechRequest {
        SpeechRequest {
            clone: Some(Arc::new(voice)),
            ..self.case.request()
        }
    }
}

fn cases() -> Vec<CloneCase> {
    let names = case_names("voice_clone");
    assert!(names.len() >= 3, "too few voice-clone cases");
    names
        .into_iter()
        .map(|name| {
            let mut case: Case = read_json(&name);
            case.name = name.clone();
            CloneCase {
                case,
                extra: read_json(&name),
            }
        })
        .collect()
}

fn greedy(model: &Model, req: &SpeechRequest, frames: usize) -> Synthesis {
    let prompt = model.prompt(req).unwrap();
    let params = model.default_sampling(0).greedy();
    let mut backend = CpuBackend::new(model, 1).unwrap();
    synthesize(&mut backend, &prompt, &params, frames, true).unwrap()
}

#[test]
fn clone_prompts_and_embeddings_match_the_reference() {
    let model = load_model(MODEL);
    let cpu = CpuModel::load(&model).unwrap();
    let pad = model.config.tts_pad_token_id;
    for c in cases() {
        let name = &c.case.name;
        let prompt = model.prompt(&c.request(c.voice())).unwrap();
        assert_eq!(prompt.input_ids, c.case.input_ids, "{name}: input ids");
        assert_eq!(prompt.positions.len(), c.case.prompt_len, "{name}: length");
        if let Some(ids) = &c.extra.ref_text_ids {
            // the reference transcript's ids [3:-2] open the ICL block's text track
            let text: Vec<u32> = prompt.positions[prompt.head_len..]
                .iter()
                .filter_map(|p| p.text)
                .collect();
            assert_eq!(&text[..ids.len() - 5], &ids[3..ids.len() - 2], "{name}");
        }
        let t = c.case.tensors();
        let (want, shape) = t.get("prompt_embeds");
        assert_eq!(shape, vec![c.case.prompt_len, cpu.talker.hidden()]);
        let e = rel_err(&cpu.embed_prompt(&prompt).unwrap(), &want);
        assert!(e < 1e-5, "{name}: prompt embeddings rel err {e}");

        let (want, shape) = t.get("trailing_text");
        let ids: Vec<u32> = if prompt.trailing_text.is_empty() {
            vec![pad]
        } else {
            prompt.trailing_text.clone()
        };
        assert_eq!(shape[0], ids.len(), "{name}: trailing text length");
        let e = rel_err(&cpu.talker.text_vectors(&ids), &want);
        assert!(e < 1e-5, "{name}: trailing text rel err {e}");
    }
}

/// Teacher-forced talker over each case's recorded frames.
#[test]
fn clone_talker_logits_match_the_reference() {
    let model = load_model(MODEL);
    let cpu = CpuModel::load(&model).unwrap();
    let pad = model.config.tts_pad_token_id;
    let h = cpu.talker.hidden();
    for c in cases() {
        let name = &c.case.name;
        let prompt = model.prompt(&c.request(c.voice())).unwrap();
        let t = c.case.tensors();
        let mut kv = StackKv::new(cpu.talker.layers());
        let x = cpu.embed_prompt(&prompt).unwrap();
        let hidden = cpu
            .talker
            .forward(x, &[prompt.positions.len()], &mut [&mut kv]);
        let last = hidden[hidden.len() - h..].to_vec();
        let e = rel_err(&last, &t.get("prefill_hidden").0);
        assert!(e < 1e-4, "{name}: prefill hidden rel err {e}");
        let (want, shape) = t.get("talker_logits");
        let vocab = shape[1];
        let mut got = vec![cpu.talker.logits(&last, 1)];
        for step in 0..shape[0] - 1 {
            let text = prompt.trailing_text.get(step).copied().unwrap_or(pad);
            let mut x = cpu.frame_embedding(&c.case.codes[step]);
            for (a, b) in x.iter_mut().zip(cpu.talker.text_vectors(&[text])) {
                *a += b;
            }
            let hs = cpu.talker.forward(x, &[1], &mut [&mut kv]);
            got.push(cpu.talker.logits(&hs, 1));
        }
        for (i, g) in got.iter().enumerate() {
            let e = rel_err(g, &want[i * vocab..(i + 1) * vocab]);
            assert!(e < 1e-4, "{name}: talker logits {i}: rel err {e}");
        }
    }
}

#[test]
fn clone_greedy_codes_are_identical_and_pcm_after_the_cut_matches() {
    let model = load_model(MODEL);
    for c in cases() {
        let name = &c.case.name;
        let out = greedy(&model, &c.request(c.voice()), c.case.max_frames());
        assert_eq!(out.frames, c.case.codes, "{name}: greedy codes");
        let (want, _) = c.case.tensors().get("pcm");
        assert_eq!(out.pcm.len(), want.len(), "{name}: pcm length");
        let e = max_abs_err(&out.pcm, &want);
        assert!(e < 1e-3, "{name}: pcm max abs err {e}");
    }
}

/// From the recording itself: the encoders' voice gives the recorded codes.
#[test]
fn cloning_from_the_recording_gives_the_reference_codes() {
    let model = load_model(MODEL);
    let cloner = VoiceCloner::load(&model).unwrap().expect("a Base model");
    for c in cases() {
        let name = &c.case.name;
        let r = ref_case(&c.extra.ref_case);
        let (mode, text) = match c.extra.x_vector_only_mode {
            true => (CloneMode::SpeakerOnly, None),
            false => (CloneMode::InContext, c.extra.ref_text.as_deref()),
        };
        let voice = cloner.clone_voice(&r.audio, 24_000, mode, text).unwrap();
        let e = rel_err(voice.speaker.values(), &r.x_vector);
        assert!(e < 1e-4, "{name}: x-vector rel err {e}");
        if let Some(v) = &voice.reference {
            assert_eq!(v.frames, r.frames, "{name}: reference codes");
        }
        let out = greedy(&model, &c.request(voice), c.case.max_frames());
        assert_eq!(
            out.frames, c.case.codes,
            "{name}: greedy codes from the recording"
        );
    }
}

#[test]
fn clone_requests_are_checked() {
    let model = load_model(MODEL);
    let c = &cases()[0];
    let no_voice = SpeechRequest {
        clone: None,
        ..c.case.request()
    };
    assert!(
        model.prompt(&no_voice).is_err(),
        "a Base model needs a voice"
    );
    let mut voice = c.voice();
    voice.reference = Some(VoiceReference {
        frames: vec![[0; 16]; 3],
        text: "  ".into(),
    });
    assert!(
        model.prompt(&c.request(voice.clone())).is_err(),
        "empty transcript"
    );
    voice.reference = Some(VoiceReference {
        frames: vec![[4096; 16]; 3],
        text: "words".into(),
    });
    assert!(
        model.prompt(&c.request(voice)).is_err(),
        "codes past the codebook"
    );
    // text that streams in cannot sit beside a reference
    let mut icl = c.request(
        cases()
            .into_iter()
            .find(|c| !c.extra.x_vector_only_mode)
            .unwrap()
            .voice(),
    );
    icl.text_mode = TextMode::Stream;
    let prefix = tts_model::prompt::build_streaming_prefix(&model.config, &model.tokenizer, &icl);
    assert!(prefix.is_err());
    // a CustomVoice model takes no reference
    let cv = load_model("tiny-1b7-customvoice");
    let with_ref = SpeechRequest {
        voice: Some("ryan".into()),
        ..c.request(c.voice())
    };
    assert!(cv.prompt(&with_ref).is_err());
}
