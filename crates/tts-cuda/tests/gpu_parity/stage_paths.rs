//! Ways of scheduling the stages that must not change what they compute: side by side,
//! batched or merged prefills, persistent kernels, 128-row calls.

use super::*;
use crate::lock_step::*;

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
