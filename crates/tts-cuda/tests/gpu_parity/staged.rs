//! The staged kernels (weights copied to shared memory before the PDL wait) against the
//! GEMV on random layers.

use super::*;

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
/// without the norm, every epilogue, bias and residual, with each trigger. With
/// the kernel left out the output stays as it was: the staged launch is what wrote it.
#[test]
fn staged_gemv_matches_the_gemv_bit_for_bit() {
    use tts_cuda::device::SmallCall;
    use tts_cuda::linear::{
        linear_then, staged_plan, Act, GemmScratch, NextLinear, Rows, StagedTrigger,
    };
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
            for (early, trigger) in [
                (false, StagedTrigger::Early),
                (true, StagedTrigger::Early),
                (true, StagedTrigger::Wait),
            ] {
                gpu.staged_trigger = trigger;
                let staged = run(&gpu, SmallCall::Staged, early);
                let differ = base
                    .iter()
                    .zip(&staged)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                assert_eq!(
                    differ, 0,
                    "{what} next linear {early}, trigger {trigger:?}: outputs whose bits differ"
                );
            }
            gpu.staged_trigger = StagedTrigger::default();
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
