//! Helpers that run requests frame by frame on one or two GPU backends (lock step) and
//! compare the runs.

use super::*;

/// One slot per prompt, sampled with its seed, all prefilled in one call.
pub(crate) fn prefilled(
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
pub(crate) fn half_a_frame_apart(
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

/// What [`lock_step`] hands back: each row's frames, the last head's logits per frame.
pub(crate) type LockStep = (Vec<Vec<[u32; 16]>>, Vec<Vec<f32>>);

/// The `tol` of [`assert_same_run`] for the same logits bit for bit: the smallest positive
/// f32 (a subnormal), so only a rel err of exactly 0 is below it.
pub(crate) const SAME_BITS: f32 = f32::from_bits(1);

/// Asserts that two lock-step runs agree: every row's codes identical, every frame's
/// last-head logits within `tol` (relative); `what` names the case in the messages.
pub(crate) fn assert_same_run(what: &str, (fa, la): &LockStep, (fb, lb): &LockStep, tol: f32) {
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

/// The largest last-head logits rel err of `run` against `base` over their frames.
pub(crate) fn worst_logits_err((_, la): &LockStep, (_, lb): &LockStep) -> f32 {
    la.iter()
        .zip(lb)
        .map(|(a, b)| rel_err(a, b))
        .fold(0f32, f32::max)
}

/// [`assert_same_run`] for a run over another path than `base`'s: also, on the full-size
/// model (whose sums the paths round apart), that some logit bit changed, so the path did
/// run. Returns the largest logits rel err.
pub(crate) fn assert_same_run_on_another_path(
    what: &str,
    model: &str,
    run: &LockStep,
    base: &LockStep,
    tol: f32,
) -> f32 {
    assert_same_run(&format!("{model}, {what}"), run, base, tol);
    let worst = worst_logits_err(run, base);
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
pub(crate) fn lock_step(
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
pub(crate) fn lock_step_on(
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
pub(crate) fn lock_step_in(
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
pub(crate) fn many_prompts(
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

/// `o` with room for the 20-row lock-step tests: 24 slots, calls of up to 32 rows.
pub(crate) fn twenty_rows(mut o: CudaOptions) -> CudaOptions {
    o.limits.max_slots = 24;
    o.limits.max_batch = 32;
    o
}
