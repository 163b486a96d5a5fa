//! The CUDA backend against the CPU reference on the same weights: greedy codes identical,
//! logits within bf16 tolerances, sampling seeded and batch-independent, and exact codes
//! on the official fixtures. Skips (and says so) when no CUDA device is present.
//!
//! Both sides use the same bf16 weights; the GPU keeps f32 activations with f32
//! accumulation (GEMV, and split hi/lo bf16 GEMMs on cuBLAS). Tolerances: in "exact"
//! mode (f32 KV cache) greedy codes are identical to the CPU reference and to the
//! official fixtures; in the production mode (bf16 KV cache) talker logits after a
//! prefill are within 2e-2 relative error (max |Δ| / max |ref|) and greedy codes are
//! identical for the first frames compared.

mod common;

use std::path::Path;

use tts_cuda::bench::pad_steps;
use tts_cuda::codec::CodecPrecision;
use tts_cuda::{CudaBackend, CudaError, CudaOptions};
use tts_model::generate::synthesize;
use tts_model::reference::{CpuBackend, CpuModel};
use tts_model::{
    Backend, Fp8Scope, LoadOptions, Model, PrefillRow, SpeechRequest, StepRow, TextMode,
};

/// `fixtures/` of the repository (`$QWEN3_TTS_FIXTURES` when the binary runs elsewhere).
fn fixtures() -> std::path::PathBuf {
    std::env::var("QWEN3_TTS_FIXTURES")
        .map(Into::into)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"))
}

/// The GPU backend for `model`, or None (printing why) when there is no GPU. `exact`
/// keeps the KV caches in f32 (the production default is bf16).
fn gpu_backend_with(model: &Model, test: &str, exact: bool) -> Option<CudaBackend> {
    open_backend(model, test, options(exact))
}

/// The tests' backend options; `exact` as in [`gpu_backend_with`].
fn options(exact: bool) -> CudaOptions {
    CudaOptions {
        limits: tts_cuda::workspace::Limits {
            max_slots: 8,
            max_positions: 1024,
            max_batch: 16,
            max_prefill_tokens: 512,
            f32_kv: exact,
        },
        codec_precision: if exact {
            CodecPrecision::F32
        } else {
            CodecPrecision::Tf32
        },
        ..CudaOptions::default()
    }
}

/// The GPU backend for `model` with `opts`, or None (printing why) when there is no GPU.
fn open_backend(model: &Model, test: &str, opts: CudaOptions) -> Option<CudaBackend> {
    match CudaBackend::new(model, opts) {
        Ok(b) => Some(b),
        Err(CudaError::Unavailable(why)) => {
            common::report_skip(&format!("{test}: no CUDA device ({why})"));
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// (frame, codebook) of the first differing code, if any.
fn first_mismatch(a: &[[u32; 16]], b: &[[u32; 16]]) -> Option<(usize, usize)> {
    for (f, (x, y)) in a.iter().zip(b).enumerate() {
        if let Some(c) = (0..16).find(|&c| x[c] != y[c]) {
            return Some((f, c));
        }
    }
    (a.len() != b.len()).then(|| (a.len().min(b.len()), 0))
}

/// The production configuration (bf16 KV cache).
fn gpu_backend(model: &Model, test: &str) -> Option<CudaBackend> {
    gpu_backend_with(model, test, false)
}

fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn request(text: &str, voice: Option<&str>, mode: TextMode) -> SpeechRequest {
    SpeechRequest {
        text: text.into(),
        voice: voice.map(Into::into),
        language: "english".into(),
        text_mode: mode,
        ..Default::default()
    }
}

#[test]
fn fixture_cases_give_the_official_greedy_codes_on_the_gpu() {
    for (model_dir, case) in [
        ("tiny-1b7-customvoice", "cv17_stream_english_eos"),
        ("tiny-1b7-customvoice", "cv17_prefill_instruct"),
        ("tiny-0b6-customvoice", "cv06_prefill_auto"),
        ("tiny-1b7-voicedesign", "vd17_stream"),
    ] {
        let model = Model::from_dir(
            &fixtures().join("models").join(model_dir),
            LoadOptions::default(),
        )
        .unwrap();
        let Some(mut gpu) = gpu_backend_with(
            &model,
            "fixture_cases_give_the_official_greedy_codes_on_the_gpu",
            true,
        ) else {
            return;
        };
        let c: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures().join(format!("cases/{case}.json"))).unwrap(),
        )
        .unwrap();
        let req = SpeechRequest {
            text: c["text"].as_str().unwrap().into(),
            voice: c["speaker"].as_str().map(Into::into),
            language: c["language"].as_str().unwrap().into(),
            instructions: c["instruct"].as_str().map(Into::into),
            text_mode: if c["non_streaming_mode"].as_bool().unwrap() {
                TextMode::Prefill
            } else {
                TextMode::Stream
            },
        };
        let prompt = model.prompt(&req).unwrap();
        let max = c["max_new_tokens"].as_u64().unwrap() as usize - 1;
        let out = synthesize(
            &mut gpu,
            &prompt,
            &model.default_sampling(0).greedy(),
            max,
            false,
        )
        .unwrap();
        let want: Vec<[u32; 16]> = serde_json::from_value(c["codes"].clone()).unwrap();
        let mm = first_mismatch(&out.frames, &want);
        assert!(mm.is_none(), "{case}: GPU greedy codes differ from the official ones at (frame, codebook) {mm:?} of {} frames", want.len());
        assert_eq!(
            out.ended_by_eos,
            c["ended_by_eos"].as_bool().unwrap(),
            "{case}"
        );
    }
}

/// Greedy generation on both backends for `frames` frames; returns the GPU's prefill
/// logits error and asserts the codes agree.
fn compare_greedy(model: &Model, test: &str, frames: usize, exact: bool) -> Option<f32> {
    compare_greedy_fp8(model, test, frames, exact, Fp8Scope::None)
}

/// [`compare_greedy`] with the FP8 weights of `fp8` on both backends.
fn compare_greedy_fp8(
    model: &Model,
    test: &str,
    frames: usize,
    exact: bool,
    fp8: Fp8Scope,
) -> Option<f32> {
    let mut gpu = open_backend(
        model,
        test,
        CudaOptions {
            fp8,
            ..options(exact)
        },
    )?;
    let mut cpu = CpuBackend::with_fp8(model, 2, fp8).unwrap();
    let req = request(
        "The quick brown fox jumps over the lazy dog.",
        Some("ryan"),
        TextMode::Stream,
    );
    let prompt = model.prompt(&req).unwrap();
    let params = model.default_sampling(0).greedy();
    // prefill logits
    let gs = gpu.alloc_slot(&params).unwrap();
    gpu.prefill(&[PrefillRow {
        slot: gs,
        prompt: &prompt,
    }])
    .unwrap();
    let vocab = model.config.talker.vocab_size;
    let gl = gpu.debug_logits(1, vocab).unwrap();
    gpu.free_slot(gs);
    let cl = cpu.cpu_model().talker.prefill_logits(&prompt);
    let err = rel_err(&gl, &cl);
    let g = synthesize(&mut gpu, &prompt, &params, frames, true).unwrap();
    let c = synthesize(&mut cpu, &prompt, &params, frames, true).unwrap();
    let mm = first_mismatch(&g.frames, &c.frames);
    assert!(
        mm.is_none(),
        "{test}: greedy codes differ at (frame, codebook) {mm:?} (prefill logits rel err {err})"
    );
    let pcm_err = g
        .pcm
        .iter()
        .zip(&c.pcm)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!("{test}: prefill logits rel err {err:.2e}, pcm max abs err {pcm_err:.2e}, {} frames identical", frames);
    if exact {
        // Random codec weights amplify rounding (the fixture codecs match to < 5e-4 in
        // tests/gpu_codec.rs); the demo's stays within 5e-2.
        assert!(
            pcm_err < 5e-2,
            "{test}: GPU codec (f32) differs from the CPU reference by {pcm_err}"
        );
    }
    Some(err)
}

#[test]
fn demo_model_matches_the_cpu_reference() {
    let model = Model::load("demo", LoadOptions::default()).unwrap();
    if let Some(err) = compare_greedy(&model, "demo_model_matches_the_cpu_reference", 12, true) {
        assert!(err < 2e-2, "prefill logits rel err {err}");
    }
}

#[test]
fn full_size_random_1_7b_matches_the_cpu_reference() {
    if std::env::var("QWEN3_TTS_SKIP_FULL_SIZE").is_ok() {
        common::report_skip(
            "full_size_random_1_7b_matches_the_cpu_reference: QWEN3_TTS_SKIP_FULL_SIZE set",
        );
        return;
    }
    let model = Model::load("random:1.7b", LoadOptions::default()).unwrap();
    if let Some(err) = compare_greedy(
        &model,
        "full_size_random_1_7b_matches_the_cpu_reference",
        3,
        false,
    ) {
        assert!(err < 2e-2, "prefill logits rel err {err}");
    }
}

/// FP8 weights (`tts_model::fp8`, E4M3 with power-of-two row scales): the GPU, which
/// streams the 8-bit codes in its GEMV and a bf16 copy of the same values elsewhere,
/// gives the CPU reference's greedy codes on the same quantized weights (demo: every
/// layer matrix, 12 frames; 1.7B: the talker MLP and every layer, 3 frames; f32 caches:
/// with bf16 caches the two sides' rounding parts the greedy codes of random weights
/// now and then, see the persistent results). Also prints how far the FP8 model's prefill logits are from the
/// stored weights' on the CPU reference.
#[test]
fn fp8_weights_match_the_cpu_reference() {
    let test = "fp8_weights_match_the_cpu_reference";
    let demo = Model::load("demo", LoadOptions::default()).unwrap();
    let Some(err) = compare_greedy_fp8(&demo, test, 12, true, Fp8Scope::Layers) else {
        return;
    };
    assert!(err < 2e-2, "demo, fp8 layers: prefill logits rel err {err}");
    if std::env::var("QWEN3_TTS_SKIP_FULL_SIZE").is_ok() {
        common::report_skip(&format!("{test} (1.7B part): QWEN3_TTS_SKIP_FULL_SIZE set"));
        return;
    }
    let model = Model::load("random:1.7b", LoadOptions::default()).unwrap();
    let prompt = model
        .prompt(&request(
            "The quick brown fox jumps over the lazy dog.",
            Some("ryan"),
            TextMode::Stream,
        ))
        .unwrap();
    let stored = CpuModel::load(&model)
        .unwrap()
        .talker
        .prefill_logits(&prompt);
    for scope in [Fp8Scope::TalkerMlp, Fp8Scope::Layers] {
        let err = compare_greedy_fp8(&model, test, 3, true, scope).unwrap();
        assert!(
            err < 2e-2,
            "1.7B, fp8 {scope}: prefill logits rel err {err}"
        );
        let q = CpuModel::load_with(&model, scope)
            .unwrap()
            .talker
            .prefill_logits(&prompt);
        eprintln!(
            "{test}: 1.7B fp8 {scope}: CPU prefill logits rel err {:.3e} vs the stored weights",
            rel_err(&q, &stored)
        );
    }
}

/// A prefill that finds its prompt head in the prefix cache (a second request with the same
/// voice and language) prefills only its text and still gives the CPU reference's greedy
/// codes, in both text modes; the first request of each head misses and stores it.
/// Returns None (nothing run) without a GPU.
fn prefix_hits_match(model: &Model, test: &str, frames: usize, exact: bool) -> Option<()> {
    let mut gpu = gpu_backend_with(model, test, exact)?;
    let mut cpu = CpuBackend::new(model, 2).unwrap();
    let params = model.default_sampling(0).greedy();
    for (voice, mode) in [
        (Some("ryan"), TextMode::Stream),
        (Some("vivian"), TextMode::Prefill),
    ] {
        let first = model
            .prompt(&request("A first request warms the cache.", voice, mode))
            .unwrap();
        let (h0, m0, _) = gpu.prefix_stats();
        synthesize(&mut gpu, &first, &params, 1, false).unwrap();
        let (h1, m1, held) = gpu.prefix_stats();
        assert_eq!(
            (h1, m1),
            (h0, m0 + 1),
            "{test} {mode:?}: a new head must miss"
        );
        assert!(held >= 1, "{test} {mode:?}: the head was not stored");
        let prompt = model
            .prompt(&request(
                "The quick brown fox jumps over the lazy dog.",
                voice,
                mode,
            ))
            .unwrap();
        assert_eq!(
            prompt.positions[..prompt.head_len],
            first.positions[..first.head_len]
        );
        let g = synthesize(&mut gpu, &prompt, &params, frames, false).unwrap();
        let (h2, _, _) = gpu.prefix_stats();
        assert_eq!(
            h2,
            h1 + 1,
            "{test} {mode:?}: the second prompt's head was not found"
        );
        let c = synthesize(&mut cpu, &prompt, &params, frames, false).unwrap();
        let mm = first_mismatch(&g.frames, &c.frames);
        assert!(
            mm.is_none(),
            "{test} {mode:?}: greedy codes after a prefix-cache hit differ from the CPU \
             reference at (frame, codebook) {mm:?}"
        );
        eprintln!("{test} {mode:?}: {frames} frames identical after a prefix-cache hit");
    }
    Some(())
}

#[test]
fn prefix_cache_hits_give_the_cpu_reference_codes() {
    let model = Model::load("demo", LoadOptions::default()).unwrap();
    let test = "prefix_cache_hits_give_the_cpu_reference_codes";
    if prefix_hits_match(&model, test, 12, true).is_none() {
        return; // no GPU: the full-size model is not worth building
    }
    // a cache of one head: each new head evicts the other, which then misses again
    let opts = CudaOptions {
        prefix_cache: 1,
        ..options(true)
    };
    let mut gpu = open_backend(&model, test, opts).unwrap();
    let params = model.default_sampling(0).greedy();
    let mut misses = Vec::new();
    for voice in ["ryan", "vivian", "ryan", "ryan"] {
        let p = model
            .prompt(&request("Hello there.", Some(voice), TextMode::Stream))
            .unwrap();
        synthesize(&mut gpu, &p, &params, 1, false).unwrap();
        misses.push(gpu.prefix_stats().1);
    }
    assert_eq!(
        misses,
        [1, 2, 3, 3],
        "{test}: eviction of the least recently used head"
    );
    assert_eq!(gpu.prefix_stats().2, 1);
    if std::env::var("QWEN3_TTS_SKIP_FULL_SIZE").is_ok() {
        common::report_skip("prefix_cache_hits (random:1.7b): QWEN3_TTS_SKIP_FULL_SIZE set");
        return;
    }
    let model = Model::load("random:1.7b", LoadOptions::default()).unwrap();
    prefix_hits_match(
        &model,
        "prefix_cache_hits (random:1.7b, bf16 caches)",
        3,
        false,
    );
}

/// GPU sampling (repetition penalty, EOS and suppression masks, temperature, top-k, the
/// top-p, the seeded inverse-CDF draw; talker and code predictor) draws what the CPU
/// reference draws: with f32 caches, the sampled codes of several seeds are identical frame
/// by frame, on the demo model and on a fixture checkpoint with the released generation
/// settings (and top-p below 1 for one seed).
#[test]
fn sampled_codes_match_the_cpu_reference() {
    let test = "sampled_codes_match_the_cpu_reference";
    let demo = Model::load("demo", LoadOptions::default()).unwrap();
    let fixture = Model::from_dir(
        &fixtures().join("models").join("tiny-1b7-customvoice"),
        LoadOptions::default(),
    )
    .unwrap();
    for model in [&demo, &fixture] {
        let Some(mut gpu) = gpu_backend_with(model, test, true) else {
            return;
        };
        let mut cpu = CpuBackend::new(model, 2).unwrap();
        let req = request(
            "Sampled codes agree with the reference.",
            model.voices().first().map(String::as_str),
            TextMode::Stream,
        );
        let prompt = model.prompt(&req).unwrap();
        for seed in [1u64, 7, 42] {
            let mut params = model.default_sampling(seed);
            assert!(params.talker.do_sample && params.code_predictor.do_sample);
            if seed == 42 {
                // top-p too (the released settings leave it at 1)
                params.talker.top_p = 0.9;
                params.code_predictor.top_p = 0.8;
            }
            let g = synthesize(&mut gpu, &prompt, &params, 12, false).unwrap();
            let c = synthesize(&mut cpu, &prompt, &params, 12, false).unwrap();
            assert_eq!(
                first_mismatch(&g.frames, &c.frames),
                None,
                "{}, seed {seed}: sampled codes differ at (frame, codebook)",
                model.name
            );
            eprintln!(
                "{test}: {}, seed {seed}: {} frames identical",
                model.name,
                g.frames.len()
            );
        }
    }
}

#[test]
fn gpu_sampling_is_seeded_and_batch_independent() {
    let model = Model::load("demo", LoadOptions::default()).unwrap();
    let Some(mut gpu) = gpu_backend(&model, "gpu_sampling_is_seeded_and_batch_independent") else {
        return;
    };
    let a = request(
        "Sampling on the GPU is seeded.",
        Some("vivian"),
        TextMode::Stream,
    );
    let pa = model.prompt(&a).unwrap();
    let run = |gpu: &mut CudaBackend, seed| {
        synthesize(gpu, &pa, &model.default_sampling(seed), 10, false)
            .unwrap()
            .frames
    };
    let x = run(&mut gpu, 5);
    assert_eq!(x, run(&mut gpu, 5), "same seed, different codes");
    assert_ne!(x, run(&mut gpu, 6), "different seeds, same codes");

    // The same request inside a batch of three, in lock step.
    let others = [
        request(
            "Another one, longer than the first, with more words.",
            Some("eric"),
            TextMode::Stream,
        ),
        request("Third.", Some("aiden"), TextMode::Prefill),
    ];
    let prompts: Vec<_> = [pa.clone()]
        .into_iter()
        .chain(others.iter().map(|r| model.prompt(r).unwrap()))
        .collect();
    let slots = prefilled(&mut gpu, &model, &prompts, &[5, 11, 12]);
    let mut frames = Vec::new();
    let pad = gpu.info().tts_pad_token_id;
    for step in 0..10 {
        let f = gpu.predict_codes(&slots).unwrap();
        frames.push(f[0]);
        let steps: Vec<_> = slots
            .iter()
            .zip(&prompts)
            .map(|(&slot, p)| StepRow {
                slot,
                text_token: p.trailing_text.get(step).copied().unwrap_or(pad),
            })
            .collect();
        gpu.talker_step(&steps).unwrap();
    }
    assert_eq!(frames, x, "batch companions changed a request's codes");
}

/// One slot per prompt, sampled with its seed, all prefilled in one call.
fn prefilled(
    gpu: &mut CudaBackend,
    model: &Model,
    prompts: &[tts_model::Prompt],
    seeds: &[u64],
) -> Vec<tts_model::SlotId> {
    let slots: Vec<_> = seeds
        .iter()
        .map(|&s| gpu.alloc_slot(&model.default_sampling(s)).unwrap())
        .collect();
    let rows: Vec<_> = slots
        .iter()
        .zip(prompts)
        .map(|(&slot, prompt)| PrefillRow { slot, prompt })
        .collect();
    gpu.prefill(&rows).unwrap();
    slots
}

/// Two groups of requests half a frame apart: group A's code predictor runs beside group
/// B's talker step and the other way round, `frames` times, through `predict_and_step`.
/// Each group's frames.
fn half_a_frame_apart(
    gpu: &mut CudaBackend,
    model: &Model,
    prompts: &[tts_model::Prompt],
    frames: usize,
) -> (Vec<[u32; 16]>, Vec<[u32; 16]>) {
    let seeds: Vec<u64> = (20..).take(prompts.len()).collect();
    let slots = prefilled(gpu, model, prompts, &seeds);
    let (a, b) = slots.split_at(slots.len() / 2);
    let (steps_a, steps_b) = (pad_steps(gpu, a), pad_steps(gpu, b));
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    fb.extend(gpu.predict_codes(b).unwrap());
    for _ in 0..frames {
        let (f, c) = gpu.predict_and_step(a, &steps_b);
        fa.extend(f.unwrap());
        assert_eq!(c.unwrap().len(), b.len());
        let (f, c) = gpu.predict_and_step(b, &steps_a);
        fb.extend(f.unwrap());
        assert_eq!(c.unwrap().len(), a.len());
    }
    for s in slots {
        gpu.free_slot(s);
    }
    (fa, fb)
}

/// The code predictor on its own stream beside a talker step of other slots
/// (`CudaOptions::side_by_side`) computes what the two calls compute one after the other:
/// identical sampled codes for 6 frames of two groups (2 and 3 rows), and a slot in both
/// parts is refused without running either.
#[test]
fn side_by_side_stages_match_one_after_the_other() {
    let test = "side_by_side_stages_match_one_after_the_other";
    let model = Model::load("demo", LoadOptions::default()).unwrap();
    let opts = CudaOptions {
        side_by_side: true,
        ..options(false)
    };
    let Some(mut lane) = open_backend(&model, test, opts) else {
        return;
    };
    assert!(lane.runs_side_by_side(), "{test}: no code-predictor lane");
    let mut serial = gpu_backend(&model, test).unwrap();
    assert!(!serial.runs_side_by_side());
    let prompts: Vec<_> = [
        ("Side by side on the GPU.", "vivian"),
        ("A second request in the first group.", "eric"),
        ("The other group starts half a frame later.", "vivian"),
        ("Its second row.", "aiden"),
        ("And a third row, a little longer than the others.", "eric"),
    ]
    .iter()
    .map(|(t, v)| {
        model
            .prompt(&request(t, Some(v), TextMode::Stream))
            .unwrap()
    })
    .collect();
    let got = half_a_frame_apart(&mut lane, &model, &prompts, 6);
    let want = half_a_frame_apart(&mut serial, &model, &prompts, 6);
    assert_eq!(first_mismatch(&got.0, &want.0), None, "{test}: group A");
    assert_eq!(first_mismatch(&got.1, &want.1), None, "{test}: group B");
    eprintln!("{test}: 2 + 3 rows x 6 frames identical");
    // one slot in both parts: both refused, nothing changed
    let p = &prompts[0];
    let s = lane.alloc_slot(&model.default_sampling(1)).unwrap();
    lane.prefill(&[PrefillRow { slot: s, prompt: p }]).unwrap();
    let (f, c) = lane.predict_and_step(
        &[s],
        &[StepRow {
            slot: s,
            text_token: 0,
        }],
    );
    assert!(f.is_err() && c.is_err(), "{test}: a slot in both parts ran");
    assert_eq!(lane.predict_codes(&[s]).unwrap().len(), 1);
    lane.free_slot(s);
}

/// What [`lock_step`] hands back: each row's frames, the last head's logits per frame.
type LockStep = (Vec<Vec<[u32; 16]>>, Vec<Vec<f32>>);

/// Asserts that two lock-step runs agree: every row's codes identical, every frame's
/// last-head logits within `tol` (relative); `what` names the case in the messages.
fn assert_same_run(what: &str, (fa, la): &LockStep, (fb, lb): &LockStep, tol: f32) {
    for (f, (a, b)) in la.iter().zip(lb).enumerate() {
        let err = rel_err(a, b);
        assert!(
            err < tol,
            "{what}, frame {f}: last-head logits rel err {err}"
        );
    }
    for (r, (a, b)) in fa.iter().zip(fb).enumerate() {
        assert_eq!(
            first_mismatch(a, b),
            None,
            "{what}: row {r}'s codes differ (frame, codebook)"
        );
    }
}

/// [`assert_same_run`] for a run over another path than `base`'s: also, on the full-size
/// model (whose sums the paths round apart), that some logit bit changed, so the path did
/// run. Returns the largest logits rel err.
fn assert_same_run_on_another_path(
    what: &str,
    model: &str,
    run: &LockStep,
    base: &LockStep,
    tol: f32,
) -> f32 {
    assert_same_run(&format!("{model}, {what}"), run, base, tol);
    let worst = run
        .1
        .iter()
        .zip(&base.1)
        .map(|(a, b)| rel_err(a, b))
        .fold(0f32, f32::max);
    if model != "demo" {
        assert!(
            worst > 0.0,
            "{model}: the {what} changed no logit bit: did it run?"
        );
    }
    worst
}

/// `rows` requests prefilled together, then `frames` frames in lock step (code predictor,
/// talker step); each row's frames, and the last code-predictor head's logits per frame.
fn lock_step(
    gpu: &mut CudaBackend,
    model: &Model,
    prompts: &[tts_model::Prompt],
    seeds: &[u64],
    frames: usize,
) -> LockStep {
    lock_step_in(gpu, model, prompts, seeds, frames, prompts.len(), false)
}

/// [`lock_step`] on a backend of its own, opened with `opts` and dropped when it is done
/// (so two such runs never hold two full-size models at once); None (printing why)
/// without a GPU.
fn lock_step_on(
    model: &Model,
    test: &str,
    opts: CudaOptions,
    prompts: &[tts_model::Prompt],
    seeds: &[u64],
    frames: usize,
) -> Option<LockStep> {
    let mut gpu = open_backend(model, test, opts)?;
    Some(lock_step(&mut gpu, model, prompts, seeds, frames))
}

/// As [`lock_step`], the prompts prefilled `prefill_rows` at a time, every stage call over
/// all the slots; with `reverse` each call lists them backwards. Frames and logits are in
/// request order either way.
fn lock_step_in(
    gpu: &mut CudaBackend,
    model: &Model,
    prompts: &[tts_model::Prompt],
    seeds: &[u64],
    frames: usize,
    prefill_rows: usize,
    reverse: bool,
) -> LockStep {
    let slots: Vec<_> = prompts
        .chunks(prefill_rows)
        .zip(seeds.chunks(prefill_rows))
        .flat_map(|(p, s)| prefilled(gpu, model, p, s))
        .collect();
    let mut order: Vec<usize> = (0..slots.len()).collect();
    if reverse {
        order.reverse();
    }
    let call: Vec<_> = order.iter().map(|&i| slots[i]).collect();
    let pad = gpu.info().tts_pad_token_id;
    let vocab = model.config.talker.code_predictor.vocab_size;
    let mut out = vec![Vec::new(); slots.len()];
    let mut logits = Vec::new();
    for step in 0..frames {
        let f = gpu.predict_codes(&call).unwrap();
        let l = gpu.debug_logits(call.len(), vocab).unwrap();
        let mut by_request = vec![0f32; l.len()];
        for (row, (&i, f)) in order.iter().zip(f).enumerate() {
            out[i].push(f);
            by_request[i * vocab..(i + 1) * vocab]
                .copy_from_slice(&l[row * vocab..(row + 1) * vocab]);
        }
        logits.push(by_request);
        let steps: Vec<_> = order
            .iter()
            .map(|&i| StepRow {
                slot: slots[i],
                text_token: prompts[i].trailing_text.get(step).copied().unwrap_or(pad),
            })
            .collect();
        gpu.talker_step(&steps).unwrap();
    }
    for s in slots {
        gpu.free_slot(s);
    }
    (out, logits)
}

/// `rows` prompts over five voices, every `stream_every`-th in text-streaming mode, the
/// rest prefilled whole; `text(i)` is request i's text.
fn many_prompts(
    model: &Model,
    rows: usize,
    stream_every: usize,
    text: impl Fn(usize) -> String,
) -> Vec<tts_model::Prompt> {
    let voices = ["vivian", "ryan", "eric", "aiden", "serena"];
    (0..rows)
        .map(|i| {
            let mode = if i % stream_every == 0 {
                TextMode::Stream
            } else {
                TextMode::Prefill
            };
            model
                .prompt(&request(&text(i), Some(voices[i % voices.len()]), mode))
                .unwrap()
        })
        .collect()
}

/// Batched prefill (`CudaOptions::batched_prefill`: the prompts of one call in one pass,
/// padded to token and row buckets) computes what one pass per prompt computes, with f32
/// KV caches: identical codes for 8 frames and the same code-predictor logits, for three
/// prompts of different lengths and modes, cold and with their heads then cached.
#[test]
fn batched_prefill_matches_one_pass_per_prompt() {
    let test = "batched_prefill_matches_one_pass_per_prompt";
    let model = Model::load("demo", LoadOptions::default()).unwrap();
    let Some(mut one) = gpu_backend_with(&model, test, true) else {
        return;
    };
    let opts = CudaOptions {
        batched_prefill: true,
        ..options(true)
    };
    let mut batched = open_backend(&model, test, opts).unwrap();
    let prompts: Vec<_> = [
        request(
            "A first prompt for the batch.",
            Some("vivian"),
            TextMode::Stream,
        ),
        request(
            "A second one, much longer than the first, with many more words in it.",
            Some("eric"),
            TextMode::Prefill,
        ),
        request("Third.", Some("vivian"), TextMode::Stream),
    ]
    .iter()
    .map(|r| model.prompt(r).unwrap())
    .collect();
    let seeds = [3u64, 4, 5];
    // twice: cold, then with the prompt heads in the prefix cache
    for round in ["cold", "cached heads"] {
        let a = lock_step(&mut one, &model, &prompts, &seeds, 8);
        let b = lock_step(&mut batched, &model, &prompts, &seeds, 8);
        assert_same_run(&format!("{test} ({round})"), &a, &b, 1e-3);
        eprintln!("{test} ({round}): 3 rows x 8 frames identical");
    }
}

/// The persistent kernels (`persistent.cu`: the code-predictor loop, buckets of up to 4
/// rows, and the talker step's layers, up to 8) compute what the launch-by-launch path
/// computes, with f32 KV caches: sampled codes identical and the last code-predictor
/// head's logits within f32 rounding, for 1, 3 (bucket 4) and 8 rows (where the code
/// predictor goes launch by launch); on the demo model and on the full-size 1.7B geometry
/// (whose wider inputs are staged in chunks). Row 0, the same request each time, must not
/// depend on its batch on either path.
#[test]
fn persistent_kernels_match_the_launch_path() {
    let test = "persistent_kernels_match_the_launch_path";
    let models = models_to_check();
    for name in models {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        // f32 caches on both sides: with bf16 caches the two paths' f32 rounding
        // differences flip cached values by an ulp now and then, and sampled codes part
        // after a few frames on random weights.
        let Some(mut fast) = open_backend(
            &model,
            test,
            CudaOptions {
                persistent_cp_rows: tts_cuda::persistent::CP_MAX_ROWS,
                persistent_talker_rows: tts_cuda::persistent::TALKER_MAX_ROWS,
                ..options(true)
            },
        ) else {
            return;
        };
        let mut plain = open_backend(
            &model,
            test,
            CudaOptions {
                persistent_cp_rows: 0,
                persistent_talker_rows: 0,
                ..options(true)
            },
        )
        .unwrap();
        let texts = [
            "The persistent loop runs every step in one launch.",
            "Short.",
            "A third request with a different voice and more words in it.",
            "Four.",
            "Five requests now, each its own row.",
            "Six, and counting.",
            "Seven rows fill most of the bucket.",
            "Eight rows fill it.",
        ];
        let voices = [
            "ryan", "vivian", "eric", "aiden", "serena", "dylan", "sohee", "ono_anna",
        ];
        // Row 0 is the same request in every batch: its codes must not depend on the
        // batch (each path on its own), and the two paths must agree.
        // row 0's frames alone: (persistent, launch by launch)
        type Frames = Vec<[u32; 16]>;
        let mut solo: Option<(Frames, Frames)> = None;
        for rows in [1usize, 3, 8] {
            let prompts: Vec<_> = (0..rows)
                .map(|i| {
                    let mode = if i % 2 == 0 {
                        TextMode::Stream
                    } else {
                        TextMode::Prefill
                    };
                    model
                        .prompt(&request(texts[i], Some(voices[i]), mode))
                        .unwrap()
                })
                .collect();
            let seeds: Vec<u64> = (0..rows as u64).map(|i| 100 + i).collect();
            let (fa, la) = lock_step(&mut fast, &model, &prompts, &seeds, 4);
            let (fb, lb) = lock_step(&mut plain, &model, &prompts, &seeds, 4);
            match &solo {
                None => solo = Some((fa[0].clone(), fb[0].clone())),
                Some((sa, sb)) => {
                    assert_eq!(
                        first_mismatch(&fb[0], sb),
                        None,
                        "{name}: launch-by-launch path, row 0 in a batch of {rows} differs from alone"
                    );
                    assert_eq!(
                        first_mismatch(&fa[0], sa),
                        None,
                        "{name}: persistent kernels, row 0 in a batch of {rows} differs from alone"
                    );
                }
            }
            assert_same_run(&format!("{name}, {rows} rows"), &(fa, la), &(fb, lb), 1e-3);
            eprintln!("{test}: {name}, {rows} rows: 4 frames identical");
        }
    }
}

/// A cuBLAS epilogue that also writes the next layer's split bf16 input rows
/// (`CudaOptions::chain_split`), and with `chain_attention` the attention kernels writing the
/// O projection's (both on by default), compute what each layer converting its own input
/// computes: 20 rows in lock step give identical sampled codes for 4 frames and the same
/// last-head logits, with the production bf16 caches; on the demo model (whose shapes the
/// tile kernels do not take: every layer of 20 rows on cuBLAS) and the full-size 1.7B
/// geometry (its 20-row stage calls on `tile_wg.cu` since 2026-12-04, the attention's rows
/// read there; the batched prefill's hundreds of rows on cuBLAS). `chain_tile` is on in
/// both runs: what it writes does not depend on where its input rows came from.
#[test]
fn chained_split_rows_match_separate_conversion() {
    let test = "chained_split_rows_match_separate_conversion";
    let models = models_to_check();
    let rows = 20usize;
    let opts = |chain_split, chain_attention| {
        let mut o = CudaOptions {
            chain_split,
            chain_attention,
            ..options(false)
        };
        o.limits.max_slots = 24;
        o.limits.max_batch = 32;
        o
    };
    for name in models {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!("Request {i} of twenty, with words enough for a real prefill.")
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 40 + i).collect();
        let separate = opts(false, false);
        let Some(base) = lock_step_on(&model, test, separate, &prompts, &seeds, 4) else {
            return;
        };
        for (label, attention) in [("epilogues", false), ("epilogues and attention", true)] {
            let chained = opts(true, attention);
            let run = lock_step_on(&model, test, chained, &prompts, &seeds, 4).unwrap();
            assert_same_run(&format!("{name}, chained {label}"), &run, &base, 1e-6);
            eprintln!("{test}: {name}, {rows} rows, chained {label}: 4 frames identical");
        }
    }
}

/// A `tile_wg.cu` layer writing the next layer's split input rows (`CudaOptions::chain_tile`:
/// into the second buffer, and before a norm as g ⊙ y with per-tile Σ y², the next layer
/// scaling its sums by 1 / rms) computes what each layer converting its own input computes,
/// to f32 rounding: 20 rows in lock step (the talker step and the code predictor on the tile
/// path on the 1.7B geometry; the demo model's shapes never take it) with f32 caches give
/// identical sampled codes for 4 frames and last-head logits within 1e-4; and on the 1.7B
/// the logits are not bit-identical, so the chain ran (the norm is applied after the sums).
#[test]
fn tile_chain_matches_separate_conversion() {
    let test = "tile_chain_matches_separate_conversion";
    let rows = 20usize;
    let opts = |chain_tile| {
        let mut o = CudaOptions {
            chain_tile,
            ..options(true)
        };
        o.limits.max_slots = 24;
        o.limits.max_batch = 32;
        o
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!("Request {i}, its layers handing split rows on.")
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 140 + i).collect();
        let Some(separate) = lock_step_on(&model, test, opts(false), &prompts, &seeds, 4) else {
            return;
        };
        let chained = lock_step_on(&model, test, opts(true), &prompts, &seeds, 4).unwrap();
        let worst = assert_same_run_on_another_path("tile chain", name, &chained, &separate, 1e-4);
        eprintln!("{test}: {name}, {rows} rows: 4 frames identical, logits rel err {worst:.2e}");
    }
}

/// The talker's row attention (`attention_row.cu`: cached K/V rows requested before the
/// PDL wait, online softmax per lane group, `CudaOptions::row_attention_rows`) computes
/// what `fused_attention` computes, and its split form (`row_attention_split`, the
/// prefill's attention) what `decode_attention` computes: 3 rows in lock step with f32
/// caches give identical sampled codes for 6 frames and last-head logits within 1e-4, on
/// the demo model (16-dim heads) and the full-size 1.7B geometry, whose long prompts (over
/// 64 positions) take two chunks of cached rows.
#[test]
fn row_attention_matches_fused_attention() {
    let test = "row_attention_matches_fused_attention";
    let rows = 3usize;
    let opts = |row_attention_rows, row_attention_split| CudaOptions {
        row_attention_rows,
        row_attention_split,
        ..options(true)
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!(
                "Request {i} has a long prompt, so that its talker attends over more cached \
                 positions than one chunk of registers holds: the quick brown fox jumps over \
                 the lazy dog, then runs through the forest, across the river and up the hill \
                 until the evening light fades and the stars come out one by one."
            )
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 210 + i).collect();
        let Some(fused) = lock_step_on(&model, test, opts(0, false), &prompts, &seeds, 6) else {
            return;
        };
        for (what, rows_on, split_on) in [("row", 8, false), ("split", 0, true)] {
            let run =
                lock_step_on(&model, test, opts(rows_on, split_on), &prompts, &seeds, 6).unwrap();
            let worst = assert_same_run_on_another_path(
                &format!("{what} attention"),
                name,
                &run,
                &fused,
                1e-4,
            );
            eprintln!(
                "{test}: {name}, {rows} rows, {what} attention: 6 frames identical, \
                 logits rel err {worst:.2e}"
            );
        }
    }
}

/// The one-row GEMV norm chain (`CudaOptions::chain_gemv`: the talker step's O and down
/// projections write the next normed layer's input with its gains applied and Σ x²
/// partials, that layer scaling its sums by 1 / rms) computes what the fused norm
/// computes: one request, f32 caches, identical sampled codes for 6 frames and last-head
/// logits within 1e-4, on the demo model and the full-size 1.7B geometry.
#[test]
fn gemv_norm_chain_matches_the_fused_norm() {
    let test = "gemv_norm_chain_matches_the_fused_norm";
    let opts = |chain_gemv| CudaOptions {
        chain_gemv,
        ..options(true)
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, 1, 2, |_| {
            "One request, its talker step's layers handing normed rows on.".to_string()
        });
        let seeds = [330u64];
        let Some(fused) = lock_step_on(&model, test, opts(false), &prompts, &seeds, 6) else {
            return;
        };
        let chained = lock_step_on(&model, test, opts(true), &prompts, &seeds, 6).unwrap();
        let worst = assert_same_run_on_another_path("norm chain", name, &chained, &fused, 1e-4);
        eprintln!("{test}: {name}, 1 row: 6 frames identical, logits rel err {worst:.2e}");
    }
}

/// The code predictor's short-cache attention by kv-head group (one block doing every q
/// head of its group, `CudaOptions::group_attention`) computes what one block per q head
/// computes: 20 rows in lock step give identical sampled codes for 4 frames and the same
/// last-head logits, with f32 caches and with the production bf16 ones; on the demo model
/// (2 q heads, 1 kv head) and the full-size 1.7B geometry (16, 8).
#[test]
fn grouped_attention_matches_one_block_per_head() {
    let test = "grouped_attention_matches_one_block_per_head";
    let rows = 20usize;
    let opts = |exact, by_group| {
        let mut o = CudaOptions {
            group_attention: Some(by_group),
            ..options(exact)
        };
        o.limits.max_slots = 24;
        o.limits.max_batch = 32;
        o
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!("Request {i}, its code predictor attending by group.")
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 70 + i).collect();
        for (caches, exact) in [("f32", true), ("bf16", false)] {
            let Some(per_head) =
                lock_step_on(&model, test, opts(exact, false), &prompts, &seeds, 4)
            else {
                return;
            };
            let grouped =
                lock_step_on(&model, test, opts(exact, true), &prompts, &seeds, 4).unwrap();
            assert_same_run(
                &format!("{name}, {caches} caches, by group"),
                &grouped,
                &per_head,
                1e-6,
            );
            eprintln!("{test}: {name}, {rows} rows, {caches} caches: 4 frames identical");
        }
    }
}

/// Stage calls of 128 rows (the server's largest bucket) keep each request in its own
/// row: 128 requests, prefilled 8 at a time, then 2 frames in lock step (code predictor,
/// talker step, twice: the code 0 of both frames is sampled with EOS masked, so no row can
/// end), once with each call's rows in slot order and once in reverse, with the production
/// bf16 caches: every request gets identical sampled codes and last-head logits; on the
/// demo model and the full-size 1.7B geometry. (Calls of different sizes are not compared:
/// above 16 rows cuBLAS picks its kernel by the batch, so the rounding differs, and on the
/// 1.7B geometry with bf16 caches 8 of 128 requests sampled a different code somewhere in
/// the first frame in 64-row calls than in 32-row calls, H200, 2026-12-02.)
#[test]
fn stage_calls_of_128_rows_keep_each_request_in_its_row() {
    let test = "stage_calls_of_128_rows_keep_each_request_in_its_row";
    let rows = 128usize;
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let mut opts = options(false);
        opts.limits.max_slots = rows;
        opts.limits.max_batch = rows;
        opts.limits.max_positions = 256;
        // both runs prefill every prompt whole, as the same chunks (no cached heads)
        opts.prefix_cache = 0;
        let Some(mut gpu) = open_backend(&model, test, opts) else {
            return;
        };
        let prompts = many_prompts(&model, rows, 4, |i| {
            format!("Row {i} of a full bucket, {} words long.", 5 + i % 7)
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 900 + i).collect();
        let forward = lock_step_in(&mut gpu, &model, &prompts, &seeds, 2, 8, false);
        let reverse = lock_step_in(&mut gpu, &model, &prompts, &seeds, 2, 8, true);
        assert_same_run(
            &format!("{name}, 128 rows reversed"),
            &reverse,
            &forward,
            1e-6,
        );
        eprintln!("{test}: {name}, {rows} rows in either order: 2 frames identical");
    }
}

/// The demo model, and the full-size 1.7B geometry unless `QWEN3_TTS_SKIP_FULL_SIZE` is set.
fn models_to_check() -> Vec<&'static str> {
    let mut models = vec!["demo"];
    if std::env::var("QWEN3_TTS_SKIP_FULL_SIZE").is_err() {
        models.push("random:1.7b");
    }
    models
}

/// cuBLASLt's tuned algorithms (`lt.rs`; every bucket kept on cuBLASLt here, whatever its
/// time) give what `cublasGemmEx` gives for the batched linear layers' GEMM (bf16 weights
/// × bf16 columns, f32 out) at column counts inside and at the edges of the buckets: the
/// same products summed in another order (K splits), so within 1e-5 of the largest output.
#[test]
fn cublaslt_gemms_match_cublas_gemm_ex() {
    use tts_cuda::lt::{tune_with, weight_gemm, Keep};
    let test = "cublaslt_gemms_match_cublas_gemm_ex";
    let Some(gpu) = common::open_gpu(test) else {
        return;
    };
    let Some(lt) = gpu.lt.as_ref() else {
        panic!("{test}: cuBLASLt did not open on {}", gpu.name);
    };
    let mut rnd = common::uniform(777, -1.0, 1.0);
    let max_cols = 512;
    for (n, k) in [(4096usize, 1024usize), (1024, 2048), (2048, 6144)] {
        let w: Vec<half::bf16> = (0..n * k)
            .map(|_| half::bf16::from_f32(rnd() * 0.05))
            .collect();
        let x: Vec<half::bf16> = (0..max_cols * k)
            .map(|_| half::bf16::from_f32(rnd()))
            .collect();
        let w = gpu.upload(&w).unwrap();
        let xb = gpu.upload(&x).unwrap();
        let mut acc = gpu.zeros::<f32>(max_cols * n).unwrap();
        let tuned = tune_with(
            &gpu,
            &[(n, k, w.ptr)],
            (xb.ptr, xb.len),
            (acc.ptr, acc.len),
            2,
            Keep::Fastest,
        )
        .unwrap();
        assert!(
            tuned.iter().any(|t| t.kept),
            "{test}: no cuBLASLt candidate ran for {n}x{k}: {tuned:?}"
        );
        for cols in [2usize, 16, 18, 34, 64, 66, 128, 200, 512] {
            lt.set_enabled(false);
            weight_gemm(&gpu, n, k, cols, w.ptr, xb.ptr, acc.ptr).unwrap();
            let reference = gpu.read(&acc, cols * n).unwrap();
            gpu.write(&mut acc, &vec![f32::NAN; cols * n]).unwrap();
            lt.set_enabled(true);
            weight_gemm(&gpu, n, k, cols, w.ptr, xb.ptr, acc.ptr).unwrap();
            let got = gpu.read(&acc, cols * n).unwrap();
            let on_lt = lt.runs(n, k, cols);
            // a bucket's own column count always takes the algorithm tuned at it
            assert!(
                on_lt || !tts_cuda::lt::BUCKETS.contains(&cols),
                "{test}: {n}x{k}, {cols} columns did not run on cuBLASLt"
            );
            let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = got
                .iter()
                .zip(&reference)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
                / scale;
            assert!(
                scale > 0.0 && err <= 1e-5,
                "{test}: {n}x{k}, {cols} columns: rel err {err}"
            );
            eprintln!("{test}: {n}x{k}, {cols} columns (cuBLASLt: {on_lt}): rel err {err:.2e}");
        }
    }
}

/// The multi-row paths (tensor cores for any row count up to 64, the cluster kernel up to
/// 64, cuBLAS beyond and when asked) compute what the GEMV computes row by row, with the
/// RMSNorm prologue and every epilogue, to f32-level accuracy; the cluster kernel on every
/// K split it takes (slices of 128, 192 and 256 in clusters of 4, 8 and 16); `tile.cu` on
/// 1 to 8 K splits, blocks of 2 to 6 K tiles, and a row's result the same bits
/// whatever the batch; the same for `tile_wg.cu` (warpgroup MMA) where the device has it.
#[test]
fn tensor_core_linear_matches_the_gemv() {
    use tts_cuda::linear::{linear, Act, GemmScratch, Linear, LinearPath, LinearPaths, Rows};
    let Some(gpu) = common::open_gpu("tensor_core_linear_matches_the_gemv") else {
        return;
    };
    if !gpu.clusters {
        eprintln!("tensor_core_linear_matches_the_gemv: no thread-block clusters on {}: cluster cases not run", gpu.arch);
    }
    let mut rnd = common::uniform(12345, -1.0, 1.0);
    // `wg`: the tile path on tile_wg.cu
    let scratch_for = |p: LinearPath, wg: bool, n: usize, k: usize| {
        let mut s = GemmScratch::new(&gpu, 256, k, n).unwrap();
        s.paths = LinearPaths::forced(p, gpu.clusters, gpu.tiles)
            .with_wide(p == LinearPath::Wide && gpu.wides);
        s.paths.tile_wg = wg;
        s
    };
    if !gpu.tiles {
        eprintln!(
            "tensor_core_linear_matches_the_gemv: tile.cu does not run on {}: tile cases not run",
            gpu.arch
        );
    }
    if !gpu.tile_wg {
        eprintln!(
            "tensor_core_linear_matches_the_gemv: tile_wg.cu does not run on {}: its cases not run",
            gpu.arch
        );
    }
    if !gpu.wides {
        eprintln!(
            "tensor_core_linear_matches_the_gemv: wide.cu does not run on {}: wide cases not run",
            gpu.arch
        );
    }
    let (gemv, tc, cublas, cluster, tile, wide) = (
        LinearPath::Gemv,
        LinearPath::TensorCores,
        LinearPath::Cublas,
        LinearPath::Cluster,
        LinearPath::Tile,
        LinearPath::Wide,
    );
    let cluster_rows = [5usize, 9, 16, 17, 33, 64];
    let tile_rows = [1usize, 9, 16, 17, 32, 33, 64];
    // wide.cu: every row bucket, and (by the shapes below) 1, 2, 8 and 16 K slices
    let wide_rows = [2usize, 9, 16, 17, 32, 33, 64];
    // (n, k, the non-cluster cases: rows and path)
    type Cases<'a> = &'a [(usize, LinearPath)];
    let shapes: [(usize, usize, Cases); 6] = [
        (
            1024,
            2048,
            &[
                (1, tc),
                (5, tc),
                (9, tc),
                (16, tc),
                (33, tc),
                (64, tc),
                (100, tc),
                (9, cublas),
                (40, cublas),
            ],
        ),
        (256, 1024, &[]),
        (128, 3072, &[]),
        (4096, 1024, &[]),
        (16384, 256, &[]),
        (1024, 192, &[]),
    ];
    for (n, k, cases) in shapes {
        let w: Vec<u16> = (0..n * k)
            .map(|_| half::bf16::from_f32(rnd() * 0.05).to_bits())
            .collect();
        let bias: Vec<f32> = (0..n).map(|_| rnd() * 0.1).collect();
        let g: Vec<f32> = (0..k).map(|_| 1.0 + rnd() * 0.2).collect();
        let l = Linear::new(&gpu, &w, n, k, Some(&bias)).unwrap();
        let reference = scratch_for(gemv, false, n, k);
        let by_path: Vec<((LinearPath, bool), GemmScratch)> = [
            (tc, false),
            (cublas, false),
            (cluster, false),
            (tile, false),
            (tile, true),
            (wide, false),
        ]
        .into_iter()
        .map(|(p, wg)| ((p, wg), scratch_for(p, wg, n, k)))
        .collect();
        let gd = gpu.upload(&g).unwrap();
        let mut cluster_cases: Vec<(usize, LinearPath, bool)> = Vec::new();
        if gpu.clusters && tts_cuda::linear::cluster_split(n, k).is_some() {
            cluster_cases.extend(cluster_rows.iter().map(|&m| (m, cluster, false)));
        }
        if gpu.tiles && tts_cuda::linear::tile_split(n, k).is_some() {
            cluster_cases.extend(tile_rows.iter().map(|&m| (m, tile, false)));
            if gpu.tile_wg {
                cluster_cases.extend(tile_rows.iter().map(|&m| (m, tile, true)));
            }
        }
        if gpu.wides && tts_cuda::linear::wide_split(n, k).is_some() {
            cluster_cases.extend(wide_rows.iter().map(|&m| (m, wide, false)));
        }
        let plain = cases.iter().map(|&(m, p)| (m, p, false));
        for (m, path, wg) in plain.chain(cluster_cases.iter().copied()) {
            let batched = &by_path.iter().find(|(p, _)| *p == (path, wg)).unwrap().1;
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let res: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
            let xd = gpu.upload(&x).unwrap();
            for (act, norm) in [
                (Act::None, true),
                (Act::Silu, true),
                (Act::SwigluPairs, true),
                (Act::None, false),
                (Act::SwigluPairs, false),
            ] {
                let norm = norm.then_some((gd.ptr, 1e-6));
                let out_n = if act == Act::SwigluPairs { n / 2 } else { n };
                let yb = gpu.upload(&res[..m * out_n]).unwrap();
                let yr = gpu.upload(&res[..m * out_n]).unwrap();
                linear(
                    &gpu,
                    &l,
                    Rows {
                        ptr: xd.ptr,
                        ld: k,
                        count: m,
                    },
                    norm,
                    act,
                    Some((yb.ptr, out_n)),
                    yb.ptr,
                    out_n,
                    batched,
                )
                .unwrap();
                for r in 0..m {
                    let row = Rows {
                        ptr: xd.at(r * k),
                        ld: k,
                        count: 1,
                    };
                    linear(
                        &gpu,
                        &l,
                        row,
                        norm,
                        act,
                        Some((yr.at(r * out_n), out_n)),
                        yr.at(r * out_n),
                        out_n,
                        &reference,
                    )
                    .unwrap();
                }
                let a = gpu.read(&yb, m * out_n).unwrap();
                let b = gpu.read(&yr, m * out_n).unwrap();
                let err = rel_err(&a, &b);
                assert!(
                    err < 1e-4,
                    "{n}x{k} m={m} act={act:?} norm {} path {:?} (tile_wg {wg}): batched vs GEMV rel err {err}",
                    norm.is_some(),
                    batched.paths.choose(m, n, k)
                );
                if (path == tile || path == wide) && m > 1 {
                    // the first row alone (another row bucket): the same bits
                    let y1 = gpu.upload(&res[..out_n]).unwrap();
                    let first = Rows {
                        ptr: xd.ptr,
                        ld: k,
                        count: 1,
                    };
                    linear(
                        &gpu,
                        &l,
                        first,
                        norm,
                        act,
                        Some((y1.ptr, out_n)),
                        y1.ptr,
                        out_n,
                        batched,
                    )
                    .unwrap();
                    let one = gpu.read(&y1, out_n).unwrap();
                    assert!(
                        one.iter()
                            .zip(&a[..out_n])
                            .all(|(p, q)| p.to_bits() == q.to_bits()),
                        "{n}x{k} m={m} act={act:?}: {path:?} (tile_wg {wg}) row 0 differs between 1 and {m} rows"
                    );
                }
            }
        }
    }
}

/// The FP8 GEMV (`gemv8_*`: E4M3 codes, scale per row) against the bf16 GEMV over the
/// dequantized weights (the same numbers, bf16-exact): one and two rows (the FP8
/// kernels' sizes; here forced onto the codes, whatever `routing::fp8_gemv` would pick),
/// with and without the norm, every epilogue, on shapes of both stacks' layers (K of
/// 1024 to 6144, so each K split of the launch is covered).
#[test]
fn fp8_gemv_matches_the_bf16_gemv_on_the_same_weights() {
    use tts_cuda::linear::{linear, Act, GemmScratch, Linear, LinearPath, LinearPaths, Rows};
    use tts_model::fp8::Fp8Rows;
    let Some(gpu) = common::open_gpu("fp8_gemv_matches_the_bf16_gemv_on_the_same_weights") else {
        return;
    };
    let mut rnd = common::uniform(777, -1.0, 1.0);
    let mut scratch = GemmScratch::new(&gpu, 16, 6144, 4096).unwrap();
    scratch.paths = LinearPaths::forced(LinearPath::Gemv, false, false);
    scratch.paths.fp8_codes = Some(true);
    for (n, k) in [
        (4096, 1024),
        (1024, 2048),
        (2048, 6144),
        (6144, 1024),
        (256, 3072),
    ] {
        // a row-dependent magnitude, a few outliers and some subnormal-range values
        let w: Vec<f32> = (0..n * k)
            .map(|i| {
                let v = rnd() * 0.05 * (1.0 + (i / k % 7) as f32);
                if i % 997 == 0 {
                    v * 20.0
                } else if i % 101 == 0 {
                    v * 1e-4
                } else {
                    v
                }
            })
            .collect();
        let q = Fp8Rows::quantize(&w, n, k);
        let bias: Vec<f32> = (0..n).map(|_| rnd() * 0.1).collect();
        let l8 = Linear::new_fp8(&gpu, &q, Some(&bias)).unwrap();
        // the same layer's bf16 copy of the dequantized weights, without its codes
        let l16 = Linear {
            fp8: None,
            ..Linear::new_fp8(&gpu, &q, Some(&bias)).unwrap()
        };
        let g: Vec<f32> = (0..k).map(|_| 1.0 + rnd() * 0.2).collect();
        let gd = gpu.upload(&g).unwrap();
        for m in [1usize, 2] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let res: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
            let xd = gpu.upload(&x).unwrap();
            for (act, norm) in [
                (Act::None, true),
                (Act::SwigluPairs, true),
                (Act::Silu, false),
                (Act::SwigluPairs, false),
            ] {
                let norm = norm.then_some((gd.ptr, 1e-6));
                let out_n = if act == Act::SwigluPairs { n / 2 } else { n };
                let mut outs = Vec::new();
                for l in [&l8, &l16] {
                    let y = gpu.upload(&res[..m * out_n]).unwrap();
                    let rows = Rows {
                        ptr: xd.ptr,
                        ld: k,
                        count: m,
                    };
                    linear(
                        &gpu,
                        l,
                        rows,
                        norm,
                        act,
                        Some((y.ptr, out_n)),
                        y.ptr,
                        out_n,
                        &scratch,
                    )
                    .unwrap();
                    outs.push(gpu.read(&y, m * out_n).unwrap());
                }
                let err = rel_err(&outs[0], &outs[1]);
                assert!(
                    err < 1e-5,
                    "{n}x{k} m={m} act={act:?} norm {}: fp8 vs bf16 GEMV rel err {err}",
                    norm.is_some()
                );
                let moved = outs[0].iter().zip(&res).any(|(a, b)| a != b);
                assert!(moved, "{n}x{k} m={m}: the FP8 GEMV wrote nothing");
            }
        }
    }
}

/// The code predictor's first-layer QKV of steps 1..14 from the table computed at load
/// (`CudaOptions::cp_qkv_table`, the default; 1.7B geometry) gives what computing that
/// projection in the loop gives: at 1 and 2 rows (GEMV rows, the table's kernel) the same
/// sampled codes and last-head logits for 4 frames. (On models without the input
/// projection, the demo's, there is no table and both runs are the same path.)
#[test]
fn qkv_table_matches_the_first_layers_projection() {
    let test = "qkv_table_matches_the_first_layers_projection";
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        // (the staged MMA off: two-row calls on the GEMV, the table's kernel)
        let opts = |cp_qkv_table| CudaOptions {
            cp_qkv_table,
            staged_mma_rows: 0,
            ..options(false)
        };
        for rows in [1usize, 2] {
            let prompts = many_prompts(&model, rows, 3, |i| {
                format!("Table check {i}, a sentence of a few words.")
            });
            let seeds: Vec<u64> = (0..rows as u64).map(|i| 70 + i).collect();
            let Some(base) = lock_step_on(&model, test, opts(false), &prompts, &seeds, 4) else {
                return;
            };
            let run = lock_step_on(&model, test, opts(true), &prompts, &seeds, 4).unwrap();
            assert_same_run(&format!("{name}, {rows} rows, table"), &run, &base, 1e-6);
            eprintln!("{test}: {name}, {rows} rows: 4 frames identical with the table");
        }
    }
}

/// The GPU for a test of the staged kernels (`what`), or None (printing why) when there is
/// none or it does not run them.
fn open_staged_gpu(test: &str, what: &str) -> Option<tts_cuda::device::Gpu> {
    let gpu = common::open_gpu(test)?;
    if !gpu.staged {
        eprintln!(
            "{test}: {what} does not run on {}: nothing to compare",
            gpu.arch
        );
        return None;
    }
    Some(gpu)
}

/// A random bf16 `n × k` layer with a bias, and random RMSNorm gains for its input.
fn random_linear(
    gpu: &tts_cuda::device::Gpu,
    rnd: &mut impl FnMut() -> f32,
    n: usize,
    k: usize,
) -> (tts_cuda::linear::Linear, tts_cuda::device::DBuf<f32>) {
    let w: Vec<u16> = (0..n * k)
        .map(|_| half::bf16::from_f32(rnd() * 0.05).to_bits())
        .collect();
    let bias: Vec<f32> = (0..n).map(|_| rnd() * 0.1).collect();
    let l = tts_cuda::linear::Linear::new(gpu, &w, n, k, Some(&bias)).unwrap();
    let g: Vec<f32> = (0..k).map(|_| 1.0 + rnd() * 0.2).collect();
    (l, gpu.upload(&g).unwrap())
}

/// The staged one-row GEMV (`gemv_staged.cu`: weights copied to shared memory before the
/// PDL wait) gives the bits `gemv_m1` / `gemv_m1_pre` give, on the layer shapes it takes
/// in the 1.7B geometry (code predictor, talker O projection and head) and on odd ones (a
/// last block with fewer rows, an odd row count, K not a multiple of 256), with and
/// without the norm, every epilogue, bias and residual, its trigger early or not. With
/// the kernel left out the output stays as it was: the staged launch is what wrote it.
#[test]
fn staged_gemv_matches_the_gemv_bit_for_bit() {
    use tts_cuda::device::SmallCall;
    use tts_cuda::linear::{linear_then, staged_plan, Act, GemmScratch, NextLinear, Rows};
    let test = "staged_gemv_matches_the_gemv_bit_for_bit";
    let Some(mut gpu) = open_staged_gpu(test, "gemv_staged.cu") else {
        return;
    };
    let sms = gpu.sm_count as usize;
    let mut rnd = common::uniform(4242, -1.0, 1.0);
    let scratch = GemmScratch::new(&gpu, 4, 3072, 6144).unwrap();
    for (n, k) in [
        (4096, 1024),
        (1024, 2048),
        (6144, 1024),
        (1024, 3072),
        (2048, 1024),
        (2048, 2048),
        (3072, 2048),
        (1001, 1000),
        (250, 520),
    ] {
        assert!(
            staged_plan(n, k, sms).is_some(),
            "{test}: {n}x{k} should fit the staged GEMV on {sms} multiprocessors"
        );
        let (l, gd) = random_linear(&gpu, &mut rnd, n, k);
        let x: Vec<f32> = (0..k).map(|_| rnd()).collect();
        let xd = gpu.upload(&x).unwrap();
        let res: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let acts: &[(Act, bool)] = if n % 2 == 0 {
            &[
                (Act::None, true),
                (Act::None, false),
                (Act::Silu, true),
                (Act::SwigluPairs, true),
                (Act::SwigluPairs, false),
            ]
        } else {
            &[(Act::None, true), (Act::Silu, false)]
        };
        for &(act, norm) in acts {
            let norm = norm.then_some((gd.ptr, 1e-6));
            let out_n = if act == Act::SwigluPairs { n / 2 } else { n };
            let run = |gpu: &tts_cuda::device::Gpu, mode: SmallCall, early: bool| {
                let y = gpu.upload(&res[..out_n]).unwrap();
                let rows = Rows {
                    ptr: xd.ptr,
                    ld: k,
                    count: 1,
                };
                let next = early.then_some(NextLinear { n: 8, norm: None });
                gpu.with_small_call(mode, || {
                    linear_then(
                        gpu,
                        &l,
                        rows,
                        norm,
                        act,
                        Some((y.ptr, out_n)),
                        y.ptr,
                        out_n,
                        &scratch,
                        next,
                    )
                })
                .unwrap();
                gpu.read(&y, out_n).unwrap()
            };
            let what = format!("{n}x{k} act={act:?} norm {}", norm.is_some());
            let base = run(&gpu, SmallCall::Default, false);
            assert!(
                base.iter().zip(&res).any(|(a, b)| a != b),
                "{what}: the GEMV wrote nothing"
            );
            for early in [false, true] {
                let staged = run(&gpu, SmallCall::Staged, early);
                let differ = base
                    .iter()
                    .zip(&staged)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                assert_eq!(differ, 0, "{what} early {early}: outputs whose bits differ");
            }
            gpu.without = vec!["gemv_staged".into()];
            let left_out = run(&gpu, SmallCall::Staged, false);
            gpu.without.clear();
            assert_eq!(
                left_out,
                res[..out_n].to_vec(),
                "{what}: with gemv_staged left out something else wrote the output"
            );
        }
        eprintln!("{test}: {n}x{k}: staged = GEMV, bit for bit");
    }
}

/// Stage calls of one row with the staged GEMV (`CudaOptions::staged_gemv`: the code
/// predictor's, then both stages') give what they give without it: the same sampled codes
/// and the same last-head logits, bit for bit, for 4 frames of both models.
#[test]
fn staged_gemv_stages_match_the_gemv_stages() {
    let test = "staged_gemv_stages_match_the_gemv_stages";
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        // (the staged MMA off: it takes the 2-token linear layers of a one-row call's
        // first step, and its sums differ from the GEMV's; the GEMV's norm chain off: the
        // staged GEMV does not take it, and it sums the norm in another order)
        let opts = |staged: &str| CudaOptions {
            staged_gemv: staged.parse().unwrap(),
            staged_mma_rows: 0,
            chain_gemv: false,
            ..options(false)
        };
        let prompts = many_prompts(&model, 1, 2, |i| format!("Staged check {i}, a few words."));
        let Some(base) = lock_step_on(&model, test, opts("0"), &prompts, &[91], 4) else {
            return;
        };
        for staged in ["cp", "1"] {
            let run = lock_step_on(&model, test, opts(staged), &prompts, &[91], 4).unwrap();
            assert_same_run(
                &format!("{name}, staged {staged}"),
                &run,
                &base,
                f32::MIN_POSITIVE,
            );
            eprintln!("{test}: {name}, staged {staged}: 4 frames identical, logits bit for bit");
        }
    }
}

/// A prefill merged into a talker step of other slots (`CudaOptions::merge_prefill`,
/// one talker pass over both) computes what a prefill and then the step compute, in
/// exact mode (f32 KV cache): the codes of the merged call and of 3 frames after it
/// identical, the step rows' talker logits within 1e-3; a prompt that fails its checks
/// leaves the step to run on its own.
#[test]
fn merged_prefill_matches_prefill_then_step() {
    let test = "merged_prefill_matches_prefill_then_step";
    let model = Model::load("demo", LoadOptions::default()).unwrap();
    let opts = CudaOptions {
        merge_prefill: true,
        ..options(true)
    };
    let Some(mut merged) = open_backend(&model, test, opts) else {
        return;
    };
    assert!(merged.merges_prefill_with_step());
    let mut apart = gpu_backend_with(&model, test, true).unwrap();
    assert!(!apart.merges_prefill_with_step());
    let prompts: Vec<_> = [
        (
            "Three requests are already speaking.",
            "vivian",
            TextMode::Stream,
        ),
        ("The second of them.", "eric", TextMode::Stream),
        (
            "And the third one, a little longer.",
            "aiden",
            TextMode::Prefill,
        ),
        (
            "A new request arrives mid-stream.",
            "eric",
            TextMode::Prefill,
        ),
    ]
    .iter()
    .map(|(t, v, m)| model.prompt(&request(t, Some(v), *m)).unwrap())
    .collect();
    let vocab = model.config.talker.vocab_size;
    let run = |gpu: &mut CudaBackend, merge: bool| {
        let mut slots = prefilled(gpu, &model, &prompts[..3], &[40, 41, 42]);
        let mut frames: Vec<[u32; 16]> = gpu.predict_codes(&slots).unwrap();
        let new = gpu.alloc_slot(&model.default_sampling(43)).unwrap();
        let row = [PrefillRow {
            slot: new,
            prompt: &prompts[3],
        }];
        let steps = pad_steps(gpu, &slots);
        let (code0, codes) = if merge {
            let (p, s) = gpu.prefill_and_step(&row, &steps);
            (p.unwrap(), s.unwrap())
        } else {
            (gpu.prefill(&row).unwrap(), gpu.talker_step(&steps).unwrap())
        };
        // the step rows' logits: after the prompt's row in the merged call
        let skip = if merge { 1 } else { 0 };
        let logits = gpu.debug_logits(skip + slots.len(), vocab).unwrap()[skip * vocab..].to_vec();
        slots.push(new);
        let steps = pad_steps(gpu, &slots);
        for _ in 0..3 {
            frames.extend(gpu.predict_codes(&slots).unwrap());
            gpu.talker_step(&steps).unwrap();
        }
        frames.extend(gpu.predict_codes(&slots).unwrap());
        for s in slots {
            gpu.free_slot(s);
        }
        (code0, codes, logits, frames)
    };
    let got = run(&mut merged, true);
    let want = run(&mut apart, false);
    assert_eq!(got.0, want.0, "{test}: the prompt's code 0");
    assert_eq!(got.1, want.1, "{test}: the step rows' codes 0");
    let err = rel_err(&got.2, &want.2);
    assert!(err < 1e-3, "{test}: step rows' talker logits rel err {err}");
    assert_eq!(
        first_mismatch(&got.3, &want.3),
        None,
        "{test}: frames after the merged call"
    );
    eprintln!("{test}: 1 prompt + 3 step rows merged, then 4 rows x 3 frames identical (logits rel err {err:.2e})");
    // a prompt that fails its checks (its slot is already prefilled): the step runs alone
    let slots = prefilled(&mut merged, &model, &prompts[..2], &[50, 51]);
    merged.predict_codes(&slots[1..]).unwrap();
    let (p, s) = merged.prefill_and_step(
        &[PrefillRow {
            slot: slots[0],
            prompt: &prompts[0],
        }],
        &pad_steps(&merged, &slots[1..]),
    );
    assert!(p.is_err(), "{test}: a second prefill of one slot ran");
    assert_eq!(
        s.unwrap().len(),
        1,
        "{test}: the step did not run on its own"
    );
    for s in slots {
        merged.free_slot(s);
    }
}

/// The staged MMA (`mma_staged.cu`, `SmallCall::StagedMma`) against one GEMV call per row
/// (the one-row kernel, outside any staged mode): every code-predictor matrix of the 1.7B
/// geometry plus a short last block (250 × 512) and a block of one m16 tile (64 × 1024), at
/// row counts on both sides of each template's and group's edge, with and without the
/// norm (where its gains fit: not on the down projection's K, which has none in the
/// stack), every epilogue, bias and residual: within 1e-4 (relative to the largest
/// output) of the GEMV; the first rows of a 2-row call equal (bit for bit) the same rows
/// inside 17- and 93-row calls (other templates, several groups); with `mma_staged` left
/// out the output stays untouched (the staged launch wrote it).
#[test]
fn staged_mma_matches_the_gemv() {
    use tts_cuda::device::SmallCall;
    use tts_cuda::linear::{linear, staged_mma_plan, Act, GemmScratch, Rows};
    let test = "staged_mma_matches_the_gemv";
    let Some(mut gpu) = open_staged_gpu(test, "mma_staged.cu") else {
        return;
    };
    let sms = gpu.sm_count as usize;
    let mut rnd = common::uniform(777, -1.0, 1.0);
    let scratch = GemmScratch::new(&gpu, 256, 3072, 6144).unwrap();
    for (n, k) in [
        (4096, 1024),
        (1024, 2048),
        (6144, 1024),
        (1024, 3072),
        (2048, 1024),
        (250, 512),
        (64, 1024),
    ] {
        let (l, gd) = random_linear(&gpu, &mut rnd, n, k);
        let max_m = 128;
        let x: Vec<f32> = (0..max_m * k).map(|_| rnd()).collect();
        let xd = gpu.upload(&x).unwrap();
        let res: Vec<f32> = (0..max_m * n).map(|_| rnd()).collect();
        // the gains of a fused norm take shared memory too: the widest K (down, which
        // has no norm in the stack) fits without them only
        let with_norm = staged_mma_plan(n, k, 128, true, sms).is_some();
        for (act, norm) in [
            (Act::None, true),
            (Act::None, false),
            (Act::Silu, true),
            (Act::SwigluPairs, true),
            (Act::SwigluPairs, false),
        ] {
            if norm && !with_norm {
                continue;
            }
            let norm = norm.then_some((gd.ptr, 1e-6));
            let out_n = if act == Act::SwigluPairs { n / 2 } else { n };
            let what = format!("{n}x{k} act={act:?} norm {}", norm.is_some());
            // rows 0..m through `linear` in `mode`, the residual added in place
            let run = |gpu: &tts_cuda::device::Gpu, m: usize, mode: SmallCall| {
                let y = gpu.upload(&res[..m * out_n]).unwrap();
                let rows = Rows {
                    ptr: xd.ptr,
                    ld: k,
                    count: m,
                };
                gpu.with_small_call(mode, || {
                    let res = Some((y.ptr, out_n));
                    linear(gpu, &l, rows, norm, act, res, y.ptr, out_n, &scratch)
                })
                .unwrap();
                gpu.read(&y, m * out_n).unwrap()
            };
            // the reference: one GEMV call per row
            let y = gpu.upload(&res[..max_m * out_n]).unwrap();
            for r in 0..max_m {
                let row = Rows {
                    ptr: xd.at(r * k),
                    ld: k,
                    count: 1,
                };
                let yr = y.at(r * out_n);
                linear(
                    &gpu,
                    &l,
                    row,
                    norm,
                    act,
                    Some((yr, out_n)),
                    yr,
                    out_n,
                    &scratch,
                )
                .unwrap();
            }
            let reference = gpu.read(&y, max_m * out_n).unwrap();
            let mut firsts: Vec<Vec<f32>> = Vec::new();
            for m in [2usize, 5, 8, 9, 16, 17, 32, 33, 64, 93, 128] {
                assert!(
                    staged_mma_plan(n, k, m, norm.is_some(), sms).is_some(),
                    "{what}: {m} rows should fit the staged MMA on {sms} multiprocessors"
                );
                let out = run(&gpu, m, SmallCall::StagedMma);
                let err = rel_err(&out, &reference[..m * out_n]);
                assert!(err < 1e-4, "{what} m={m}: staged MMA vs GEMV rel err {err}");
                if [2, 17, 93].contains(&m) {
                    firsts.push(out[..2 * out_n].to_vec());
                }
            }
            for (i, f) in firsts.iter().enumerate().skip(1) {
                assert!(
                    f.iter()
                        .zip(&firsts[0])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: rows 0-1 differ between 2 rows and call {i} (17, 93 rows)"
                );
            }
            gpu.without = vec!["mma_staged".into()];
            let left_out = run(&gpu, 9, SmallCall::StagedMma);
            gpu.without.clear();
            assert_eq!(
                left_out,
                res[..9 * out_n].to_vec(),
                "{what}: with mma_staged left out something else wrote the output"
            );
        }
        eprintln!(
            "{test}: {n}x{k} (norm: {with_norm}): staged MMA within 1e-4 of the GEMV, rows batch-independent"
        );
    }
}

/// The staged MMA reads rows of a stride wider than K and writes rows of a stride wider
/// than N as the code predictor does (its input projection writes every other row of
/// `cp_x`; the first head reads every other one): each written row within 1e-4 of the
/// GEMV, the gaps between rows left as they were.
#[test]
fn staged_mma_reads_and_writes_strided_rows() {
    use tts_cuda::device::SmallCall;
    use tts_cuda::linear::{linear, staged_mma_plan, Act, GemmScratch, Rows};
    let test = "staged_mma_reads_and_writes_strided_rows";
    let Some(gpu) = open_staged_gpu(test, "mma_staged.cu") else {
        return;
    };
    let mut rnd = common::uniform(31337, -1.0, 1.0);
    let scratch = GemmScratch::new(&gpu, 16, 3072, 6144).unwrap();
    for (n, k, norm) in [(1024, 2048, false), (2048, 1024, true), (4096, 1024, true)] {
        let (l, gd) = random_linear(&gpu, &mut rnd, n, k);
        let norm = norm.then_some((gd.ptr, 1e-6));
        let (ldx, ldy) = (2 * k, 2 * n);
        for m in [2usize, 3, 8] {
            let x: Vec<f32> = (0..m * ldx).map(|_| rnd()).collect();
            let xd = gpu.upload(&x).unwrap();
            let before: Vec<f32> = (0..m * ldy).map(|_| rnd()).collect();
            let run = |rows: &[(usize, usize)], mode: SmallCall| {
                let y = gpu.upload(&before).unwrap();
                for &(first, count) in rows {
                    let x = Rows {
                        ptr: xd.at(first * ldx),
                        ld: ldx,
                        count,
                    };
                    let yp = y.at(first * ldy);
                    gpu.with_small_call(mode, || {
                        linear(&gpu, &l, x, norm, Act::None, None, yp, ldy, &scratch)
                    })
                    .unwrap();
                }
                gpu.read(&y, m * ldy).unwrap()
            };
            let one_by_one: Vec<_> = (0..m).map(|r| (r, 1)).collect();
            let reference = run(&one_by_one, SmallCall::Default);
            let out = run(&[(0, m)], SmallCall::StagedMma);
            let what = format!("{n}x{k} norm {} m={m}", norm.is_some());
            let sms = gpu.sm_count as usize;
            assert!(
                staged_mma_plan(n, k, m, norm.is_some(), sms).is_some(),
                "{what}: should take the staged MMA"
            );
            for r in 0..m {
                let row = r * ldy..r * ldy + n;
                let err = rel_err(&out[row.clone()], &reference[row]);
                assert!(err < 1e-4, "{what}: row {r} rel err {err}");
                let gap = r * ldy + n..(r + 1) * ldy;
                assert_eq!(
                    out[gap.clone()],
                    before[gap],
                    "{what}: row {r}'s gap was written"
                );
            }
        }
        eprintln!("{test}: {n}x{k}: strided rows within 1e-4 of the GEMV, gaps untouched");
    }
}

/// Code-predictor calls of 2-8 rows with the staged MMA (`CudaOptions::staged_mma_rows`,
/// the default) compute what the other paths compute (the GEMV at 2 rows, GEMV and
/// cluster layers at 5 and 8): with f32 KV caches the same sampled codes for 4 frames and
/// last-head logits within 1e-4 (relative; 6-9e-6 measured on the H200), but not the
/// same bits on the 1.7B (the demo's layers are too narrow for the kernel). Its split
/// bf16 rows carry ~1e-5 of a row's size where the GEMV is exact to f32; a bf16 cache
/// rounds such a difference to a whole bf16 step now and then, and on random weights the
/// sampled codes then part after a few frames, as between any two paths
/// (`bench/results/2026-12-03-h200-staged-mma/diagnostic-2.txt`).
#[test]
fn staged_mma_stages_match_the_other_paths() {
    let test = "staged_mma_stages_match_the_other_paths";
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let opts = |rows: usize| CudaOptions {
            staged_mma_rows: rows,
            ..options(true)
        };
        // (the tests' backends hold 8 slots)
        for rows in [2usize, 5, 8] {
            let prompts = many_prompts(&model, rows, 2, |i| {
                format!("Staged rows {i}, a few more words.")
            });
            let seeds: Vec<u64> = (0..rows as u64).map(|s| 91 + s).collect();
            let Some(base) = lock_step_on(&model, test, opts(0), &prompts, &seeds, 4) else {
                return;
            };
            let run = lock_step_on(&model, test, opts(16), &prompts, &seeds, 4).unwrap();
            assert_same_run(&format!("{name}, {rows} rows"), &run, &base, 1e-4);
            // the demo's layers (K = 32) are too narrow for it: both runs take the same paths
            if name != "demo" {
                assert_ne!(
                    run.1, base.1,
                    "{name}, {rows} rows: the same logits bit for bit; the staged MMA did not run"
                );
            }
            eprintln!("{test}: {name}, {rows} rows: 4 frames of the same codes");
        }
    }
}
