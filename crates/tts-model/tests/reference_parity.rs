//! The CPU reference against outputs recorded from the official Python implementation
//! (`fixtures/`, made by `tools/fixtures/make_fixtures.py`): prompts, prompt embeddings,
//! talker hidden states and logits, code-predictor logits, greedy codes and decoded PCM.

mod common;

use std::collections::HashMap;

use common::{codec_cases, generation_cases, load_model, max_abs_err, rel_err, Case};
use tts_model::generate::synthesize;
use tts_model::reference::stack::StackKv;
use tts_model::reference::{CpuBackend, CpuModel};
use tts_model::{Backend, CodecRow, Model, TextMode};

struct Loaded {
    model: Model,
    cpu: CpuModel,
}

fn models() -> HashMap<String, Loaded> {
    let mut out = HashMap::new();
    for c in generation_cases() {
        out.entry(c.model.clone()).or_insert_with(|| {
            let model = load_model(&c.model);
            let cpu = CpuModel::load(&model).expect("cpu model");
            Loaded { model, cpu }
        });
    }
    out
}

#[test]
fn prompts_and_prompt_embeddings_match_the_reference() {
    let models = models();
    for case in generation_cases() {
        let m = &models[&case.model];
        let prompt = m.model.prompt(&case.request()).unwrap();
        assert_eq!(prompt.input_ids, case.input_ids, "{}: input ids", case.name);
        assert_eq!(
            prompt.instruct_ids, case.instruct_ids,
            "{}: instruct ids",
            case.name
        );
        assert_eq!(
            prompt.positions.len(),
            case.prompt_len,
            "{}: prompt length",
            case.name
        );

        let t = case.tensors();
        let (want, shape) = t.get("prompt_embeds");
        assert_eq!(shape, vec![case.prompt_len, m.cpu.talker.hidden()]);
        let got = m.cpu.embed_prompt(&prompt).unwrap();
        let e = rel_err(&got, &want);
        assert!(e < 1e-5, "{}: prompt embeddings rel err {e}", case.name);

        // The trailing text track: one vector per generation step, then tts_pad.
        let (want, shape) = t.get("trailing_text");
        let ids: Vec<u32> = match case.request().text_mode {
            TextMode::Stream => prompt.trailing_text.clone(),
            TextMode::Prefill => {
                assert!(prompt.trailing_text.is_empty());
                vec![m.model.config.tts_pad_token_id]
            }
        };
        assert_eq!(shape[0], ids.len(), "{}: trailing text length", case.name);
        let e = rel_err(&m.cpu.talker.text_vectors(&ids), &want);
        assert!(e < 1e-5, "{}: trailing text rel err {e}", case.name);
    }
}

/// Teacher-forced talker: prefill, then one step per reference frame; compares the hidden
/// state after the prefill and the code-0 logits of the first frames.
#[test]
fn talker_hidden_and_logits_match_the_reference() {
    let models = models();
    for case in generation_cases() {
        let m = &models[&case.model];
        let prompt = m.model.prompt(&case.request()).unwrap();
        let t = case.tensors();
        let (want_logits, shape) = t.get("talker_logits");
        let vocab = shape[1];
        let h = m.cpu.talker.hidden();

        let mut kv = StackKv::new(m.cpu.talker.stack.dims.layers);
        let x = m.cpu.embed_prompt(&prompt).unwrap();
        let hidden = m
            .cpu
            .talker
            .forward(x, &[prompt.positions.len()], &mut [&mut kv]);
        let last = hidden[hidden.len() - h..].to_vec();
        let (want_hidden, _) = t.get("prefill_hidden");
        let e = rel_err(&last, &want_hidden);
        assert!(e < 1e-4, "{}: prefill hidden rel err {e}", case.name);

        let mut logits = vec![m.cpu.talker.logits(&last, 1)];
        for step in 0..shape[0] - 1 {
            let pad = m.model.config.tts_pad_token_id;
            let text = prompt.trailing_text.get(step).copied().unwrap_or(pad);
            let mut x = m.cpu.frame_embedding(&case.codes[step]);
            for (a, b) in x.iter_mut().zip(m.cpu.talker.text_vectors(&[text])) {
                *a += b;
            }
            let hs = m.cpu.talker.forward(x, &[1], &mut [&mut kv]);
            logits.push(m.cpu.talker.logits(&hs, 1));
        }
        for (i, got) in logits.iter().enumerate() {
            let e = rel_err(got, &want_logits[i * vocab..(i + 1) * vocab]);
            assert!(
                e < 1e-4,
                "{}: talker logits of sample {i}: rel err {e}",
                case.name
            );
        }
    }
}

#[test]
fn code_predictor_logits_match_the_reference() {
    let models = models();
    let mut checked = 0;
    for case in generation_cases() {
        let t = case.tensors();
        if !t.has("cp_logits_frame0") {
            continue;
        }
        let m = &models[&case.model];
        let (want_hidden, _) = t.get("prefill_hidden");
        let (want, shape) = t.get("cp_logits_frame0");
        let code0 = m.cpu.talker.codec_vector(case.codes[0][0]).to_vec();
        let mut got: Vec<Vec<f32>> = Vec::new();
        m.cpu
            .code_predictor
            .predict(&want_hidden, &code0, 1, |_, j, logits| {
                got.push(logits.to_vec());
                case.codes[0][j] // teacher forcing with the reference codes
            });
        assert_eq!(got.len(), shape[0]);
        for (j, g) in got.iter().enumerate() {
            let e = rel_err(g, &want[j * shape[1]..(j + 1) * shape[1]]);
            assert!(
                e < 1e-4,
                "{}: code predictor logits of code {}: rel err {e}",
                case.name,
                j + 1
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "no case has code-predictor logits");
}

fn greedy_run(m: &Model, case: &Case) -> tts_model::generate::Synthesis {
    let prompt = m.prompt(&case.request()).unwrap();
    let params = m.default_sampling(0).greedy();
    let mut backend = CpuBackend::new(m, 1).unwrap();
    synthesize(&mut backend, &prompt, &params, case.max_frames(), true).unwrap()
}

#[test]
fn greedy_codes_are_identical_and_pcm_matches() {
    let models = models();
    let mut saw_eos = false;
    for case in generation_cases() {
        let m = &models[&case.model];
        let out = greedy_run(&m.model, &case);
        assert_eq!(out.frames, case.codes, "{}: greedy codes", case.name);
        assert_eq!(
            out.ended_by_eos, case.ended_by_eos,
            "{}: ended by EOS",
            case.name
        );
        saw_eos |= out.ended_by_eos;
        let (want, _) = case.tensors().get("pcm");
        assert_eq!(out.pcm.len(), want.len(), "{}: pcm length", case.name);
        let e = max_abs_err(&out.pcm, &want);
        assert!(e < 1e-3, "{}: pcm max abs err {e}", case.name);
    }
    assert!(saw_eos, "no fixture case ended by EOS");
}

/// Decodes the long codec cases whole, frame by frame and in uneven chunks: all equal the
/// official decode, and the three ways are bit-identical to each other.
#[test]
fn codec_decoding_streams_exactly_past_the_window() {
    for case in codec_cases() {
        assert!(
            case.codes.len() > 72,
            "{}: needs more frames than the window",
            case.name
        );
        let model = load_model(&case.model);
        assert_eq!(model.codec.decoder.sliding_window, case.sliding_window);
        let mut backend = CpuBackend::new(&model, 3).unwrap();
        let params = model.default_sampling(0);
        let slots: Vec<_> = (0..3)
            .map(|_| backend.alloc_slot(&params).unwrap())
            .collect();

        let whole = backend
            .codec_decode(&[CodecRow {
                slot: slots[0],
                frames: &case.codes,
            }])
            .unwrap()
            .remove(0);
        let (want, _) = case.tensors().get("pcm");
        let e = max_abs_err(&whole, &want);
        assert!(e < 1e-3, "{}: pcm max abs err {e}", case.name);

        let mut by_frame = Vec::new();
        for f in case.codes.chunks(1) {
            by_frame.extend(
                backend
                    .codec_decode(&[CodecRow {
                        slot: slots[1],
                        frames: f,
                    }])
                    .unwrap()
                    .remove(0),
            );
        }
        let mut chunked = Vec::new();
        let sizes = [1usize, 2, 3, 5, 8, 13, 4, 7, 30, 6, 11];
        let mut at = 0;
        for s in sizes.iter().cycle() {
            if at >= case.codes.len() {
                break;
            }
            let end = (at + s).min(case.codes.len());
            chunked.extend(
                backend
                    .codec_decode(&[CodecRow {
                        slot: slots[2],
                        frames: &case.codes[at..end],
                    }])
                    .unwrap()
                    .remove(0),
            );
            at = end;
        }
        assert!(
            whole == by_frame,
            "{}: frame-by-frame decode differs from whole",
            case.name
        );
        assert!(
            whole == chunked,
            "{}: chunked decode differs from whole",
            case.name
        );
    }
}
