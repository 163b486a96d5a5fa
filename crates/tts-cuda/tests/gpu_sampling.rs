//! The GPU samplers (`kernels/sampling.cu`) pick what the CPU reference picks
//! (`tts_model::sampling`), row by row, on logits built to take every path of the top-k
//! select: the boundary bin ranked directly (spread values, ties inside the bin) and the
//! radix select behind it (ties across the row, values too close together, too few or too
//! far from the maximum, overflowing distances), with the released settings and others
//! (no top-k, top-k 1, top-p, temperature 1, argmax). The code predictor's sampler also
//! copies the next step's input rows of the picked code; those copies are checked too.
//! Needs a CUDA device; skips (and says so) without one.

mod common;

use half::bf16;
use tts_cuda::device::{Arg, DBuf, Gpu, SAMPLER_THREADS};
use tts_model::sampling::{
    choose, draw_uniform, process_talker_logits, SamplerParams, TalkerRules,
};

/// Named logit rows of `v` values that lead the top-k select down its different paths.
fn logit_rows(v: usize, seed: u64) -> Vec<(&'static str, Vec<f32>)> {
    let mut rnd = common::uniform(seed, -1.0, 1.0);
    // roughly normal: a sum of four uniforms, standard deviation ~1.15
    let mut normal = move || rnd() + rnd() + rnd() + rnd();
    let mut rows: Vec<(&'static str, Vec<f32>)> = Vec::new();
    rows.push(("spread", (0..v).map(|_| 3.0 * normal()).collect()));
    let mut peaked: Vec<f32> = (0..v).map(|_| normal()).collect();
    for (k, i) in (0..v).step_by(v / 10).enumerate() {
        peaked[i] = 8.0 + k as f32 * 0.4;
    }
    rows.push(("peaked", peaked));
    // ties inside the boundary bin: values on a grid of 1/4
    rows.push((
        "quantized",
        (0..v).map(|_| (12.0 * normal()).round() / 4.0).collect(),
    ));
    rows.push(("tied", vec![0.5; v]));
    rows.push(("narrow", (0..v).map(|_| 0.001 * normal()).collect()));
    rows.push(("far apart", (0..v).map(|_| 60.0 * normal()).collect()));
    rows.push(("huge", (0..v).map(|_| 1e37 * normal()).collect()));
    let mut few = vec![f32::NEG_INFINITY; v];
    for i in (0..v).step_by(v / 20) {
        few[i] = normal();
    }
    rows.push(("few finite", few));
    let mut one = vec![f32::NEG_INFINITY; v];
    one[v / 3] = -2.0;
    rows.push(("one finite", one));
    rows.push(("all masked", vec![f32::NEG_INFINITY; v]));
    rows
}

/// Sampling settings: the released ones first.
fn settings(v: usize) -> Vec<SamplerParams> {
    let s = |do_sample, temperature, top_k, top_p| SamplerParams {
        do_sample,
        temperature,
        top_k,
        top_p,
    };
    vec![
        s(true, 0.9, 50, 1.0),
        s(true, 1.0, 50, 1.0),
        s(true, 0.7, 1, 1.0),
        s(true, 0.9, v - 1, 1.0),
        s(true, 0.9, 0, 1.0),
        s(true, 0.9, v, 1.0),
        s(true, 0.9, 50, 0.8),
        s(false, 1.0, 0, 1.0),
    ]
}

/// One sampled row: logits, settings, seed and frame (the draw's counter).
struct Case {
    name: &'static str,
    logits: Vec<f32>,
    params: SamplerParams,
    seed: u64,
    frame: u32,
}

fn cases(v: usize, seeds: u64) -> Vec<Case> {
    let mut out = Vec::new();
    for (ri, (name, logits)) in logit_rows(v, 99).into_iter().enumerate() {
        for params in settings(v) {
            for k in 0..seeds {
                out.push(Case {
                    name,
                    logits: logits.clone(),
                    params,
                    seed: 1000 * ri as u64 + k,
                    frame: (k % 7) as u32,
                });
            }
        }
    }
    out
}

/// The sampler parameter block of one slot (`sampling.cu`'s layout).
fn slot_params(c: &Case, talker: bool, penalty: f32, count: u32) -> [u32; 16] {
    let mut p = [0u32; 16];
    p[0] = c.seed as u32;
    p[1] = (c.seed >> 32) as u32;
    let base = if talker { 2 } else { 7 };
    p[base] = u32::from(c.params.do_sample);
    p[base + 1] = c.params.top_k as u32;
    p[base + 2] = c.params.temperature.to_bits();
    p[base + 3] = c.params.top_p.to_bits();
    p[6] = penalty.to_bits();
    p[11] = count;
    p
}

fn describe(c: &Case) -> String {
    format!(
        "{} row, seed {}, frame {}, {:?}",
        c.name, c.seed, c.frame, c.params
    )
}

/// Whether `got` is the CPU reference's pick from `logits` (processed as the sampler
/// processes them) at draw `u`: the same id, or, where the reference's weights' running
/// sum (in index order) and the GPU's (per thread, per warp, then across warps) round
/// apart, an id whose share of the running sum touches the draw's target to within 1e-5 of
/// the total (counted in `near`).
fn check_pick(
    got: i32,
    mut logits: Vec<f32>,
    params: &SamplerParams,
    u: f32,
    near: &mut usize,
) -> Result<(), String> {
    let want = choose(&mut logits, params, u) as i32;
    if got == want {
        return Ok(());
    }
    // `choose` left the processed logits (temperature, top-k, top-p) in place
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !params.do_sample || max == f32::NEG_INFINITY || !(0..logits.len() as i32).contains(&got) {
        return Err(format!("picked {got}, the reference {want}"));
    }
    let weights: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    let target = f64::from(u) * total;
    let before: f64 = weights[..got as usize].iter().sum();
    let w = weights[got as usize];
    let tol = 1e-5 * total;
    if w > 0.0 && before <= target + tol && before + w > target - tol {
        *near += 1;
        Ok(())
    } else {
        Err(format!(
            "picked {got} (running sum {before:.6e}..{:.6e}), the reference {want}; target \
             {target:.6e} of {total:.6e}",
            before + w
        ))
    }
}

/// The cases' logits and slot ids (slot r = row r) on the GPU, and their parameter
/// blocks (each slot's count of earlier samples from `count`).
fn upload_rows(
    gpu: &Gpu,
    cases: &[Case],
    talker: bool,
    penalty: f32,
    count: impl Fn(&Case) -> u32,
) -> (DBuf<f32>, DBuf<i32>, Vec<u32>) {
    let logits: Vec<f32> = cases
        .iter()
        .flat_map(|c| c.logits.iter().copied())
        .collect();
    let slots: Vec<i32> = (0..cases.len() as i32).collect();
    let params = cases
        .iter()
        .flat_map(|c| slot_params(c, talker, penalty, count(c)))
        .collect();
    (
        gpu.upload(&logits).unwrap(),
        gpu.upload(&slots).unwrap(),
        params,
    )
}

/// The arguments both samplers start with: logits, V, rows, slots, parameter blocks.
fn row_args(logits: &DBuf<f32>, v: usize, slots: &DBuf<i32>, params: &DBuf<u32>) -> Vec<Arg> {
    vec![
        Arg::P(logits.ptr),
        Arg::I(v as i32),
        Arg::I(slots.len as i32),
        Arg::P(slots.ptr),
        Arg::P(params.ptr),
    ]
}

/// Copies a table of `len` f32 values from `f(i)`.
fn table(len: usize, f: impl Fn(usize) -> f32) -> Vec<f32> {
    (0..len).map(f).collect()
}

#[test]
fn code_predictor_sampler_picks_what_the_cpu_reference_picks() {
    let test = "code_predictor_sampler_picks_what_the_cpu_reference_picks";
    let Some(gpu) = common::open_gpu(test) else {
        return;
    };
    // the 1.7B's code predictor vocabulary, and one that is not a multiple of four; blocks
    // of the launches' size and of the persistent loop's (256)
    for (v, threads) in [
        (2048usize, SAMPLER_THREADS),
        (301, SAMPLER_THREADS),
        (2048, 256),
    ] {
        let cases = cases(v, 6);
        let step = 15; // the last step: no next input to copy
        let (frames, _, _) = run_cp(&gpu, &cases, v, step, None, threads);
        let mut near = 0;
        for (r, c) in cases.iter().enumerate() {
            let u = draw_uniform(c.seed, c.frame, step as u32);
            if let Err(e) = check_pick(
                frames[r * 16 + step],
                c.logits.clone(),
                &c.params,
                u,
                &mut near,
            ) {
                panic!("{test}: V {v}, {threads} threads, {}: {e}", describe(c));
            }
        }
        assert!(
            near * 50 <= cases.len(),
            "{test}: V {v}, {threads} threads: {near} picks off by rounding"
        );
        eprintln!(
            "{test}: V {v}, {threads} threads: {} rows, every pick the reference's ({near} at \
             a boundary the two sums round apart)",
            cases.len()
        );
    }
}

/// The next step's inputs the code predictor's sampler writes: the picked code's row of
/// the folded embedding (f32) and of the first layer's QKV table, or of the raw bf16
/// embedding when there is no folded one.
#[test]
fn code_predictor_sampler_copies_the_picked_codes_rows() {
    let test = "code_predictor_sampler_copies_the_picked_codes_rows";
    let Some(gpu) = common::open_gpu(test) else {
        return;
    };
    let v = 2048usize;
    let cases = cases(v, 2);
    for (d, q) in [(64usize, 128usize), (62, 0)] {
        let step = 3usize;
        // f32 tables: a different value for every (table, code, element); the bf16 one:
        // values bf16 holds exactly
        let value = |t: usize, code: usize, i: usize| (t * v + code) as f32 + i as f32 / 256.0;
        let small =
            |t: usize, code: usize, i: usize| ((t * v + code) % 61) as f32 + (i % 4) as f32 / 4.0;
        let folded = table(15 * v * d, |x| value(x / (v * d), (x / d) % v, x % d));
        let qkv0 = table(14 * v * q, |x| value(x / (v * q), (x / q) % v, x % q));
        let raw: Vec<bf16> = (0..15 * v * d)
            .map(|x| bf16::from_f32(small(x / (v * d), (x / d) % v, x % d)))
            .collect();
        let tables = Tables {
            // the f32 tables in 16-byte pieces; the bf16 table (and an odd width) one by one
            folded: (q > 0).then(|| gpu.upload(&folded).unwrap()),
            raw: gpu.upload(&raw).unwrap(),
            qkv0: (q > 0).then(|| gpu.upload(&qkv0).unwrap()),
            d,
            q,
        };
        let (frames, next_x, qkv) = run_cp(&gpu, &cases, v, step, Some(&tables), SAMPLER_THREADS);
        for (r, c) in cases.iter().enumerate() {
            let code = frames[r * 16 + step];
            assert!(
                (0..v as i32).contains(&code),
                "{test}: {}: code {code}",
                describe(c)
            );
            let code = code as usize;
            // table step - 1 holds the inputs for codebook `step`'s successor
            let t = step - 1;
            let want_x: Vec<f32> = (0..d)
                .map(|i| {
                    if q > 0 {
                        value(t, code, i)
                    } else {
                        small(t, code, i)
                    }
                })
                .collect();
            assert_eq!(
                &next_x[r * d..(r + 1) * d],
                &want_x[..],
                "{test}: width {d}: next input of row {r} (code {code})"
            );
            let want_q: Vec<f32> = (0..q).map(|i| value(t, code, i)).collect();
            assert_eq!(
                &qkv[r * q..(r + 1) * q],
                &want_q[..],
                "{test}: QKV row {r} (code {code})"
            );
        }
        eprintln!(
            "{test}: width {d}, QKV {q}: {} rows copied from their codes' table rows",
            cases.len()
        );
    }
}

/// The tables the code predictor's sampler copies from.
struct Tables {
    folded: Option<DBuf<f32>>,
    raw: DBuf<bf16>,
    qkv0: Option<DBuf<f32>>,
    d: usize,
    q: usize,
}

/// Runs `sample_cp` at `step` over one row per case (slot r = row r), blocks of `threads`;
/// returns the frames [rows][16] and, with tables, the next-input rows [rows][d] and QKV
/// rows [rows][q].
fn run_cp(
    gpu: &Gpu,
    cases: &[Case],
    v: usize,
    step: usize,
    tables: Option<&Tables>,
    threads: u32,
) -> (Vec<i32>, Vec<f32>, Vec<f32>) {
    let rows = cases.len();
    let (logits, slots, params) = upload_rows(gpu, cases, false, 1.0, |c| c.frame + 1);
    let params = gpu.upload(&params).unwrap();
    let frames = gpu.zeros::<i32>(rows * 16).unwrap();
    let (d, q) = tables.map_or((0, 0), |t| (t.d, t.q));
    let next_x = gpu.zeros::<f32>(rows * d.max(1)).unwrap();
    let qkv = gpu.zeros::<f32>(rows * q.max(1)).unwrap();
    let ptr = |b: Option<&DBuf<f32>>| b.map_or(0, |b| b.ptr);
    gpu.launch(
        "sample_cp",
        (rows as u32, 1, 1),
        threads,
        &[
            row_args(&logits, v, &slots, &params),
            vec![
                Arg::I(step as i32),
                Arg::P(frames.ptr),
                Arg::P(ptr(tables.and_then(|t| t.folded.as_ref()))),
                Arg::P(tables.map_or(0, |t| t.raw.ptr)),
                Arg::I(d as i32),
                Arg::P(next_x.ptr),
                Arg::I(d as i32),
                Arg::P(ptr(tables.and_then(|t| t.qkv0.as_ref()))),
                Arg::I(q as i32),
                Arg::P(qkv.ptr),
                Arg::I(q as i32),
            ],
        ]
        .concat(),
    )
    .unwrap();
    (
        gpu.read(&frames, rows * 16).unwrap(),
        gpu.read(&next_x, rows * d).unwrap(),
        gpu.read(&qkv, rows * q).unwrap(),
    )
}

/// The talker's sampler: repetition penalty over the code-0 ids sampled so far, EOS masked
/// before `min_new` samples, suppressed ids, then the same choice; it also counts the
/// sample and marks the id seen.
#[test]
fn talker_sampler_picks_what_the_cpu_reference_picks() {
    let test = "talker_sampler_picks_what_the_cpu_reference_picks";
    let Some(gpu) = common::open_gpu(test) else {
        return;
    };
    // the 1.7B's talker vocabulary and rules
    let v = 3072usize;
    let rules = TalkerRules {
        eos: 2150,
        suppress_from: 2048,
        min_new_tokens: 2,
    };
    let penalty = 1.05f32;
    let cases = cases(v, 4);
    let rows = cases.len();
    let seen_words = v.div_ceil(32);
    let mut next = common::uniform(5, 0.0, 2048.0);
    // earlier ids of each row: `frame` of them, duplicates allowed
    let history: Vec<Vec<u32>> = cases
        .iter()
        .map(|c| (0..c.frame).map(|_| next() as u32).collect())
        .collect();
    let mut seen = vec![0u32; rows * seen_words];
    for (r, h) in history.iter().enumerate() {
        for &id in h {
            seen[r * seen_words + id as usize / 32] |= 1 << (id % 32);
        }
    }
    let (logits, slots, params) = upload_rows(&gpu, &cases, true, penalty, |c| c.frame);
    // blocks of either size `device::sampler_threads` launches
    for threads in [SAMPLER_THREADS, SAMPLER_THREADS / 2] {
        let mut near = 0;
        let params = gpu.upload(&params).unwrap();
        let seen = gpu.upload(&seen).unwrap();
        let out = gpu.zeros::<i32>(rows * 2).unwrap();
        gpu.launch(
            "sample_talker",
            (rows as u32, 1, 1),
            threads,
            &[
                row_args(&logits, v, &slots, &params),
                vec![
                    Arg::P(seen.ptr),
                    Arg::I(seen_words as i32),
                    Arg::I(rules.eos as i32),
                    Arg::I(rules.suppress_from as i32),
                    Arg::I(rules.min_new_tokens as i32),
                    Arg::P(out.ptr),
                    Arg::I(2),
                ],
            ]
            .concat(),
        )
        .unwrap();
        let got = gpu.read(&out, rows * 2).unwrap();
        let params_after = gpu.read(&params, rows * 16).unwrap();
        let seen_after = gpu.read(&seen, rows * seen_words).unwrap();
        for (r, c) in cases.iter().enumerate() {
            let mut l = c.logits.clone();
            process_talker_logits(&mut l, &history[r], penalty, &rules);
            let picked = got[r * 2] as u32;
            let u = draw_uniform(c.seed, c.frame, 0);
            if let Err(e) = check_pick(got[r * 2], l, &c.params, u, &mut near) {
                panic!("{test}: {threads} threads, {}: {e}", describe(c));
            }
            assert_eq!(
                params_after[r * 16 + 11],
                c.frame + 1,
                "{test}: row {r}: the sample was not counted"
            );
            assert!(
                seen_after[r * seen_words + picked as usize / 32] & (1 << (picked % 32)) != 0,
                "{test}: row {r}: id {picked} not marked seen"
            );
        }
        assert!(
            near * 50 <= rows,
            "{test}: {threads} threads: {near} picks off by rounding"
        );
        eprintln!(
            "{test}: {threads} threads: {rows} rows, every pick the reference's ({near} at a \
             boundary the two sums round apart)"
        );
    }
}
