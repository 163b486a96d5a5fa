//! The GPU samplers against the CPU reference sampler.

use crate::{common, run_emulated, H200_SMS};

/// One row of a sampler launch: its slot (-1: padding), the slot's sampling settings and
/// code-0 count (parameter word 11), the talker's earlier code-0 ids, and the logits.
struct SampledRow {
    what: String,
    slot: i32,
    params: tts_model::SamplingParams,
    count: u32,
    history: Vec<u32>,
    logits: Vec<f32>,
}

/// One launch of `sample_cp` (at `step`, next-step tables of width `d`, QKV width `q`,
/// folded f32 or bf16 embedding) or of `sample_talker`, on `threads` threads per row.
struct SamplerLaunch {
    kernel: &'static str,
    v: usize,
    threads: u32,
    step: usize,
    d: usize,
    q: usize,
    folded: bool,
    rows: Vec<SampledRow>,
}

/// The CPU reference's pick for each row of `l` (`tts_model::sampling`, as the CPU backend
/// calls it: the talker's processors over the row's history, then `choose` with the draw
/// of (seed, frame, codebook)); -1 for a padding row.
fn reference_codes(l: &SamplerLaunch, rules: &tts_model::sampling::TalkerRules) -> Vec<i32> {
    use tts_model::sampling::{choose, draw_uniform, process_talker_logits};
    l.rows
        .iter()
        .map(|r| {
            if r.slot < 0 {
                return -1;
            }
            let p = &r.params;
            let mut logits = r.logits.clone();
            let code = if l.kernel == "sample_talker" {
                assert_eq!(r.count as usize, r.history.len(), "{}", r.what);
                process_talker_logits(&mut logits, &r.history, p.repetition_penalty, rules);
                choose(&mut logits, &p.talker, draw_uniform(p.seed, r.count, 0))
            } else {
                // the code predictor draws for the frame of the slot's latest code 0
                let u = draw_uniform(p.seed, r.count - 1, l.step as u32);
                choose(&mut logits, &p.code_predictor, u)
            };
            code as i32
        })
        .collect()
}

/// `sample_cp` (the code predictor's sampler for codes 1..15, which also writes the frame
/// entry and the next step's input rows) and `sample_talker` (code 0) pick exactly the codes
/// the CPU reference sampler (`tts_model::sampling`) picks from the same logits and settings,
/// with the parameter blocks packed by the backend's own `backend::sampler_words` and the
/// draws from the per-request counter (seed, frame, codebook); on the backend's launches (a
/// block of `device::sampler_threads` per row, the 1.7B's vocabularies and talker rules,
/// slots out of row order among slots of other settings, padding rows). Code predictor:
/// one-row calls (the released settings at step 1 with the 1.7B's bf16 embedding rows,
/// greedy at the last step, top-k with top-p and a seed over 32 bits); seven rows of an
/// H200 (greedy, temperature only, top-k, top-p, mostly masked logits, values too close for
/// the binned top-k select; folded f32 rows with QKV rows); seven of a small machine (256
/// threads; greedy over a tied maximum, top-k 1 and V - 1, ties, every logit masked, a top-k
/// boundary far below the maximum; an odd row width); eight seeds and frames of the
/// released settings. Talker: the repetition penalty over earlier ids flipping the argmax
/// (positive and negative logits) and shaping draws, EOS masked for the first two samples,
/// then picked and drawn, suppressed ids masked however large, greedy and sampled with
/// temperature, top-k (binned and radix select), top-p; eight seeds and histories of the
/// released settings. The driver checks the frame entries, copied rows, counts and seen
/// bits itself.
#[test]
fn samplers_pick_what_the_cpu_reference_picks() {
    use tts_cuda::backend::sampler_words;
    use tts_cuda::device::sampler_threads;
    use tts_model::sampling::SamplerParams;
    let test = "samplers_pick_what_the_cpu_reference_picks";
    let model = tts_model::builtin::load("random:1.7b")
        .expect("random:1.7b")
        .expect("a built-in model");
    let rules = tts_model::reference::talker_rules(&model);
    let cp_cfg = &model.config.talker.code_predictor;
    let (cp_v, talker_v) = (cp_cfg.vocab_size, model.config.talker.vocab_size);
    let cp_d = cp_cfg.dims().hidden;
    let released = |seed: u64| model.default_sampling(seed);
    let s = |do_sample, temperature, top_k, top_p| SamplerParams {
        do_sample,
        temperature,
        top_k,
        top_p,
    };
    // code-predictor settings (the talker's stay the released ones)
    let cp = |seed: u64, p: SamplerParams| tts_model::SamplingParams {
        code_predictor: p,
        ..released(seed)
    };
    // talker settings and repetition penalty
    let talker = |seed: u64, p: SamplerParams, penalty: f32| tts_model::SamplingParams {
        talker: p,
        repetition_penalty: penalty,
        ..released(seed)
    };
    let greedy = SamplerParams::GREEDY;
    // roughly normal logits (a sum of four uniforms) times `scale`
    let spread = |v: usize, seed: u64, scale: f32| -> Vec<f32> {
        let mut rnd = common::uniform(seed, -1.0, 1.0);
        (0..v)
            .map(|_| scale * (rnd() + rnd() + rnd() + rnd()))
            .collect()
    };
    let row = |what: &str, slot, params, count, logits| SampledRow {
        what: what.to_string(),
        slot,
        params,
        count,
        history: Vec::new(),
        logits,
    };
    let pad = |v: usize| row("padding", -1, released(0), 1, spread(v, 3, 3.0));

    let mut launches = Vec::new();
    // ---- sample_cp, one row a call: the released settings at step 1 with the 1.7B's bf16
    // embedding rows; greedy at the last step (no next input); top-k + top-p, seed > 2^32
    let one = |what: &str, params, count, step, seed| SamplerLaunch {
        kernel: "sample_cp",
        v: cp_v,
        threads: sampler_threads(1, H200_SMS as u32),
        step,
        d: cp_d,
        q: 0,
        folded: false,
        rows: vec![row(what, 2, params, count, spread(cp_v, seed, 3.0))],
    };
    launches.push(one("released", released(7), 1, 1, 11));
    launches.push(one("greedy", cp(8, greedy), 4, 15, 12));
    launches.push(one(
        "top-k 50 + top-p 0.9, temperature 0.9",
        cp((1 << 40) + 5, s(true, 0.9, 50, 0.9)),
        9,
        8,
        13,
    ));
    // ---- sample_cp, seven rows on an H200 (one a padding row), folded f32 rows with QKV rows
    let mut few = vec![f32::NEG_INFINITY; cp_v];
    for (i, v) in spread(cp_v, 21, 2.0).into_iter().enumerate().step_by(37) {
        few[i] = v;
    }
    let rows = vec![
        row("greedy", 5, cp(1, greedy), 3, spread(cp_v, 14, 3.0)),
        row(
            "temperature 0.6 only",
            1,
            cp(2, s(true, 0.6, 0, 1.0)),
            1,
            spread(cp_v, 15, 1.0),
        ),
        pad(cp_v),
        row(
            "top-k 20",
            0,
            cp(3, s(true, 1.0, 20, 1.0)),
            6,
            spread(cp_v, 16, 3.0),
        ),
        row(
            "top-p 0.7, temperature 1.3",
            3,
            cp(4, s(true, 1.3, 0, 0.7)),
            2,
            spread(cp_v, 17, 2.0),
        ),
        row(
            "released, logits mostly masked",
            4,
            cp(u64::MAX - 9, released(0).code_predictor),
            31,
            few,
        ),
        // every value in the maximum's bin: the radix select decides
        row(
            "narrow (values within 0.01), top-k 50",
            7,
            cp(5, s(true, 1.0, 50, 1.0)),
            8,
            spread(cp_v, 24, 0.002),
        ),
    ];
    launches.push(SamplerLaunch {
        kernel: "sample_cp",
        v: cp_v,
        threads: sampler_threads(rows.len(), H200_SMS as u32),
        step: 5,
        d: 64,
        q: 192,
        folded: true,
        rows,
    });
    // ---- sample_cp, seven rows on a machine of 4 multiprocessors (256 threads a block), an
    // odd width of bf16 rows
    let mut quantized = spread(cp_v, 22, 3.0);
    for l in &mut quantized {
        *l = (4.0 * *l).round() / 4.0;
    }
    // the largest value three times, far apart: the argmax takes the first
    let mut tied_max = spread(cp_v, 23, 3.0);
    for i in [500, 1200, 1900] {
        tied_max[i] = 20.0;
    }
    let rows = vec![
        row("greedy, the largest tied", 1, cp(29, greedy), 3, tied_max),
        row(
            "top-k 1",
            3,
            cp(30, s(true, 0.9, 1, 1.0)),
            2,
            spread(cp_v, 18, 3.0),
        ),
        row(
            "top-k V - 1, top-p 0.95",
            0,
            cp(31, s(true, 0.8, cp_v - 1, 0.95)),
            5,
            spread(cp_v, 19, 3.0),
        ),
        row(
            "ties (logits on a grid of 1/4), top-k 40",
            6,
            cp(32, s(true, 1.0, 40, 1.0)),
            12,
            quantized,
        ),
        row(
            "every logit masked",
            2,
            released(33),
            1,
            vec![f32::NEG_INFINITY; cp_v],
        ),
        row("released", 7, released(34), 40, spread(cp_v, 20, 3.0)),
        // the boundary far below the maximum: the radix select decides
        row(
            "far apart, top-k 300",
            5,
            cp(35, s(true, 1.0, 300, 1.0)),
            17,
            spread(cp_v, 25, 10.0),
        ),
    ];
    launches.push(SamplerLaunch {
        kernel: "sample_cp",
        v: cp_v,
        threads: sampler_threads(rows.len(), 4),
        step: 14,
        d: 62,
        q: 0,
        folded: false,
        rows,
    });
    // ---- sample_cp, the released settings over eight seeds and frames (H200, bf16 rows)
    let rows = (0..8)
        .map(|k| {
            let what = format!("released, seed sweep {k}");
            let logits = spread(cp_v, 200 + k, 2.0 + k as f32 / 4.0);
            row(
                &what,
                (k as i32 * 5) % 8,
                released(100 + 37 * k),
                1 + 3 * k as u32,
                logits,
            )
        })
        .collect::<Vec<_>>();
    launches.push(SamplerLaunch {
        kernel: "sample_cp",
        v: cp_v,
        threads: sampler_threads(rows.len(), H200_SMS as u32),
        step: 3,
        d: cp_d,
        q: 0,
        folded: false,
        rows,
    });
    // ---- sample_talker
    let eos = rules.eos as usize;
    let suppressed = rules.suppress_from;
    // spread logits with large ones on suppressed ids (never picked) and EOS at `eos_logit`
    let talker_logits = |seed: u64, scale: f32, eos_logit: f32| -> Vec<f32> {
        let mut l = spread(talker_v, seed, scale);
        for i in (suppressed..talker_v).step_by(97) {
            l[i] = 40.0;
        }
        l[eos] = eos_logit;
        l
    };
    // `n` earlier ids, each twice in a row, from the row's 40 largest logits below `suppressed`
    let top_ids = |l: &[f32], n: usize| -> Vec<u32> {
        let mut ids: Vec<u32> = (0..suppressed as u32).collect();
        ids.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]));
        (0..n).map(|k| ids[k / 2 * 3 % 40]).collect()
    };
    let with_history = |mut r: SampledRow, history: Vec<u32>| {
        r.count = history.len() as u32;
        r.history = history;
        r
    };
    // greedy, the penalty flips the argmax: the largest positive logit was sampled before
    // (id 33: in the second seen word of a thread's chunk at 512 threads and at 256)
    let mut flip_pos = talker_logits(40, 1.0, -5.0);
    flip_pos[33] = 9.0;
    flip_pos[1900] = 8.8;
    // ... and the largest negative one
    let mut flip_neg: Vec<f32> = talker_logits(41, 1.0, -9.0)
        .into_iter()
        .map(|l| if l < 40.0 { -3.0 - l.abs() } else { l })
        .collect();
    flip_neg[33] = -1.0;
    flip_neg[1500] = -1.02;
    let mut eos_top = talker_logits(42, 2.0, 30.0);
    eos_top[333] = 12.0;
    let penalised = talker_logits(43, 3.0, 0.0);
    let nucleus = talker_logits(44, 2.0, 1.0);
    let released_hist = top_ids(&penalised, 7);
    let nucleus_hist = top_ids(&nucleus, 4);
    let rows = vec![
        with_history(
            row(
                "greedy, penalty over a positive argmax",
                3,
                talker(50, greedy, 1.05),
                0,
                flip_pos,
            ),
            vec![33, 5, 33],
        ),
        with_history(
            row(
                "greedy, EOS the largest before two samples",
                0,
                talker(51, greedy, 1.05),
                0,
                eos_top.clone(),
            ),
            vec![],
        ),
        with_history(
            row(
                "greedy, EOS the largest after two samples",
                5,
                talker(52, greedy, 1.05),
                0,
                eos_top,
            ),
            vec![333, 12],
        ),
        pad(talker_v),
        with_history(
            row("released, penalty", 1, released(53), 0, penalised),
            released_hist,
        ),
        with_history(
            row(
                "top-p 0.8, temperature 0.7, penalty 1.3",
                2,
                talker(54, s(true, 0.7, 0, 0.8), 1.3),
                0,
                nucleus,
            ),
            nucleus_hist,
        ),
    ];
    launches.push(SamplerLaunch {
        kernel: "sample_talker",
        v: talker_v,
        threads: sampler_threads(rows.len(), H200_SMS as u32),
        step: 0,
        d: 0,
        q: 0,
        folded: false,
        rows,
    });
    let sampled_eos = talker_logits(45, 1.0, 8.0);
    let rows = vec![
        with_history(
            row(
                "greedy, penalty over a negative argmax",
                4,
                talker(60, greedy, 1.05),
                0,
                flip_neg,
            ),
            vec![33, 33, 1499],
        ),
        with_history(
            row(
                "temperature 1, no penalty, EOS large before two samples",
                0,
                talker(61, s(true, 1.0, 0, 1.0), 1.0),
                0,
                talker_logits(46, 1.0, 30.0),
            ),
            vec![17],
        ),
        with_history(
            row(
                "top-k 10, temperature 1.2, EOS among the candidates",
                6,
                talker(62, s(true, 1.2, 10, 1.0), 1.05),
                0,
                sampled_eos,
            ),
            (0..12).map(|k| 40 * k).collect(),
        ),
        with_history(
            row(
                "released, many samples",
                2,
                released(u64::MAX),
                0,
                talker_logits(47, 3.0, 2.0),
            ),
            (0..300).map(|k| (k * 7) % 2048).collect(),
        ),
        with_history(
            row(
                "released, first sample",
                7,
                released(64),
                0,
                talker_logits(48, 3.0, 2.0),
            ),
            vec![],
        ),
        // ties across the boundary bin: the radix select decides
        with_history(
            row(
                "ties (logits on a grid of 1/2), temperature 2, top-k 50",
                5,
                talker(65, s(true, 2.0, 50, 1.0), 1.05),
                0,
                talker_logits(49, 1.0, 0.0)
                    .into_iter()
                    .map(|l| (2.0 * l).round() / 2.0)
                    .collect(),
            ),
            vec![1, 2, 3],
        ),
    ];
    launches.push(SamplerLaunch {
        kernel: "sample_talker",
        v: talker_v,
        threads: sampler_threads(rows.len(), 4),
        step: 0,
        d: 0,
        q: 0,
        folded: false,
        rows,
    });

    // the released settings over eight seeds and histories (H200)
    let rows = (0..8u64)
        .map(|k| {
            let what = format!("released, seed sweep {k}");
            let l = talker_logits(300 + k, 2.0 + k as f32 / 4.0, 1.0);
            let history = top_ids(&l, 4 * k as usize);
            with_history(
                row(&what, (k as i32 * 3) % 8, released(500 + k), 0, l),
                history,
            )
        })
        .collect::<Vec<_>>();
    launches.push(SamplerLaunch {
        kernel: "sample_talker",
        v: talker_v,
        threads: sampler_threads(rows.len(), H200_SMS as u32),
        step: 0,
        d: 0,
        q: 0,
        folded: false,
        rows,
    });

    // the inputs: one file per launch, shapes on the command line
    const MAX_SLOTS: usize = 8;
    let seen_words = talker_v.div_ceil(32);
    let mut args = Vec::new();
    let mut want = Vec::new();
    for (i, l) in launches.iter().enumerate() {
        let talker = l.kernel == "sample_talker";
        // slots no row uses hold other settings and history: a wrong slot shows
        let mut params: Vec<[u32; 16]> = (0..MAX_SLOTS)
            .map(|k| {
                let mut w = sampler_words(&unused_slot_params(k));
                w[11] = 1000 + k as u32;
                w
            })
            .collect();
        let mut seen = vec![0x5555_5555u32; MAX_SLOTS * seen_words];
        for r in l.rows.iter().filter(|r| r.slot >= 0) {
            let slot = r.slot as usize;
            params[slot] = sampler_words(&r.params);
            params[slot][11] = r.count;
            let words = &mut seen[slot * seen_words..(slot + 1) * seen_words];
            words.fill(0);
            for &id in &r.history {
                words[id as usize / 32] |= 1 << (id % 32);
            }
        }
        let mut bytes = Vec::new();
        for r in &l.rows {
            assert_eq!(r.logits.len(), l.v, "{}", r.what);
            bytes.extend(r.slot.to_le_bytes());
        }
        bytes.extend(params.iter().flatten().flat_map(|w| w.to_le_bytes()));
        if talker {
            bytes.extend(seen.iter().flat_map(|w| w.to_le_bytes()));
        }
        for r in &l.rows {
            bytes.extend(r.logits.iter().flat_map(|x| x.to_le_bytes()));
        }
        let path = crate::input_file(&format!("sampling_{i}.bin"), &bytes);
        args.extend([l.kernel.to_string(), path.display().to_string()]);
        let extra = if talker {
            [
                seen_words,
                rules.eos as usize,
                rules.suppress_from,
                rules.min_new_tokens,
            ]
        } else {
            [l.step, l.d, l.q, usize::from(l.folded)]
        };
        let shape = [l.v, l.rows.len(), l.threads as usize, MAX_SLOTS];
        args.extend(shape.iter().chain(&extra).map(|v| v.to_string()));
        want.push(reference_codes(l, &rules));
    }
    let Some(stdout) = run_emulated(test, "sampling.cpp", &["sampling.cu"], &args) else {
        return;
    };
    let got: Vec<Vec<i32>> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("codes "))
        .map(|line| {
            let (_, codes) = line.split_once(':').expect("codes <kernel> <case>: ...");
            codes
                .split_whitespace()
                .map(|c| c.parse().expect("a code"))
                .collect()
        })
        .collect();
    assert_eq!(
        got.len(),
        launches.len(),
        "{test}: one codes line per launch"
    );
    let mut wrong = Vec::new();
    for (i, l) in launches.iter().enumerate() {
        assert_eq!(
            got[i].len(),
            l.rows.len(),
            "{test}: launch {i}: one code per row"
        );
        for (r, row) in l.rows.iter().enumerate() {
            if got[i][r] == want[i][r] {
                continue;
            }
            let p = &row.params;
            let settings = if l.kernel == "sample_talker" {
                format!(
                    "{:?}, penalty {}, {} earlier ids",
                    p.talker,
                    p.repetition_penalty,
                    row.history.len()
                )
            } else {
                format!("{:?}, step {}", p.code_predictor, l.step)
            };
            wrong.push(format!(
                "{} launch {i} ({} threads), row {r} (slot {}, {}: seed {}, count {}, \
                 {settings}): the GPU sampler picked {}, the CPU reference {}",
                l.kernel, l.threads, row.slot, row.what, p.seed, row.count, got[i][r], want[i][r]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{test}: {} rows picked otherwise than the CPU reference:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let rows: usize = launches.iter().map(|l| l.rows.len()).sum();
    eprintln!(
        "{test}: {} launches, {rows} rows: every code the CPU reference's",
        launches.len()
    );
}

/// Settings of a slot no row of a launch uses.
fn unused_slot_params(k: usize) -> tts_model::SamplingParams {
    let p = tts_model::sampling::SamplerParams {
        do_sample: true,
        temperature: 0.5 + k as f32 / 8.0,
        top_k: 3 + k,
        top_p: 0.5,
    };
    tts_model::SamplingParams {
        talker: p,
        repetition_penalty: 2.0,
        code_predictor: p,
        seed: 777 + k as u64,
    }
}
