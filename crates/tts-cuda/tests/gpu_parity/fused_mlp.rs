//! The one-row fused MLP (`mlp_fused.cu`) against its CPU reference and the two staged
//! GEMVs it replaces, on random layers.

use super::*;

/// `x + down(silu(gate(n)) · up(n))`, `n = norm(x) ⊙ g`, in f64 over the same bf16
/// weights (gate/up rows in SwiGLU pairs): the maths `reference::mlp` does.
fn mlp_reference(x: &[f32], g: &[f32], gu: &[u16], down: &[u16], inter: usize) -> Vec<f64> {
    let h = x.len();
    let w = |v: u16| half::bf16::from_bits(v).to_f64();
    let ms = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / h as f64;
    let inv = 1.0 / (ms + 1e-6).sqrt();
    let n: Vec<f64> = x
        .iter()
        .zip(g)
        .map(|(&v, &gv)| f64::from(v) * inv * f64::from(gv))
        .collect();
    let dot = |row: &[u16]| row.iter().zip(&n).map(|(&a, b)| w(a) * b).sum::<f64>();
    let act: Vec<f64> = (0..inter)
        .map(|j| {
            let gate = dot(&gu[2 * j * h..(2 * j + 1) * h]);
            let up = dot(&gu[(2 * j + 1) * h..(2 * j + 2) * h]);
            gate / (1.0 + (-gate).exp()) * up
        })
        .collect();
    (0..h)
        .map(|o| {
            let row = &down[o * inter..(o + 1) * inter];
            f64::from(x[o]) + row.iter().zip(&act).map(|(&a, b)| w(a) * b).sum::<f64>()
        })
        .collect()
}

/// Both fused MLP kernels (`mlp_fused_m1` in a staged call; the stream kernels outside
/// one, and in a staged one where asked, `staged-stream`: its gate/up rows asked into L2)
/// give their reference's row within 2e-5 of the largest MLP output, the gate/up + down
/// GEMVs' row within 1e-5, and the same bits when run again (the fixed-point sums do not
/// depend on the blocks' order, and a launch leaves them zero for the next): on the code
/// predictor's shape (1024 × 3072, 128 blocks of 24 columns), a 2048-wide one (blocks of 8
/// columns), a small one (512 × 1536), and, streamed only, the 1.7B talker's (2048 × 6144,
/// 48 columns a block). With the kernel left out the row stays as it was: the fused
/// launch is what wrote it.
#[test]
fn fused_mlp_matches_its_reference_and_the_staged_gemvs() {
    use tts_cuda::device::SmallCall;
    use tts_cuda::linear::{
        fused_mlp, fused_mlp_call, linear, linear_then, Act, GemmScratch, Linear, NextLinear, Rows,
    };
    let test = "fused_mlp_matches_its_reference_and_the_staged_gemvs";
    let Some(mut gpu) = common::open_gpu(test) else {
        return;
    };
    if !gpu.staged {
        eprintln!(
            "{test}: mlp_fused.cu does not run on {}: nothing to compare",
            gpu.arch
        );
        return;
    }
    let mut rnd = common::uniform(9090, -1.0, 1.0);
    let scratch_for = |fused: &str| {
        let mut s = GemmScratch::new(&gpu, 4, 6144, 12288).unwrap();
        s.paths.fused_mlp = fused.parse().unwrap();
        s
    };
    let (scratch, all_stream) = (scratch_for("1"), scratch_for("all-stream"));
    for (h, inter) in [
        (1024usize, 3072usize),
        (2048, 1024),
        (512, 1536),
        (2048, 6144),
    ] {
        let mut weights = |n: usize, k: usize| -> Vec<u16> {
            (0..n * k)
                .map(|_| half::bf16::from_f32(rnd() * 0.05).to_bits())
                .collect()
        };
        let (gu, down) = (weights(2 * inter, h), weights(h, inter));
        let gate_up = Linear::new(&gpu, &gu, 2 * inter, h, None).unwrap();
        let down_l = Linear::new(&gpu, &down, h, inter, None).unwrap();
        let g: Vec<f32> = (0..h).map(|_| 1.0 + rnd() * 0.2).collect();
        let x: Vec<f32> = (0..h).map(|_| rnd() * 2.0).collect();
        let gd = gpu.upload(&g).unwrap();
        let gu_out = gpu.zeros::<f32>(inter).unwrap();
        let norm = (gd.ptr, 1e-6f32);
        let what = format!("{h}x{inter}");

        let fused = |gpu: &tts_cuda::device::Gpu, mode: SmallCall, scratch: &GemmScratch| {
            let xd = gpu.upload(&x).unwrap();
            let rows = Rows {
                ptr: xd.ptr,
                ld: h,
                count: 1,
            };
            gpu.with_small_call(mode, || {
                let Some(plan) = fused_mlp_call(gpu, scratch, (&gate_up, &down_l), rows) else {
                    return Ok(None);
                };
                fused_mlp(gpu, scratch, (&gate_up, &down_l), rows, norm, plan, false)?;
                Ok::<_, tts_cuda::CudaError>(Some(plan.staged))
            })
            .unwrap()
            .map(|staged| (staged, gpu.read(&xd, h).unwrap()))
        };
        let staged_row = {
            let xd = gpu.upload(&x).unwrap();
            let rows = |ptr, width| Rows {
                ptr,
                ld: width,
                count: 1,
            };
            gpu.with_small_call(SmallCall::Staged, || {
                let next = Some(NextLinear { n: h, norm: None });
                linear_then(
                    &gpu,
                    &gate_up,
                    rows(xd.ptr, h),
                    Some(norm),
                    Act::SwigluPairs,
                    None,
                    gu_out.ptr,
                    inter,
                    &scratch,
                    next,
                )?;
                linear(
                    &gpu,
                    &down_l,
                    rows(gu_out.ptr, inter),
                    None,
                    Act::None,
                    Some((xd.ptr, h)),
                    xd.ptr,
                    h,
                    &scratch,
                )
            })
            .unwrap();
            gpu.read(&xd, h).unwrap()
        };
        let reference = mlp_reference(&x, &g, &gu, &down, inter);
        // errors relative to the largest MLP output (the residual itself is exact)
        let scale = reference
            .iter()
            .zip(&x)
            .fold(0f64, |m, (r, &v)| m.max((r - f64::from(v)).abs()));
        assert!(
            scale > 0.1,
            "{what}: the MLP's outputs are all ~0 ({scale})"
        );
        let err = |a: &[f32], b: &dyn Fn(usize) -> f64| {
            (0..h).fold(0f64, |m, i| m.max((f64::from(a[i]) - b(i)).abs())) / scale
        };
        let mut kernels = 0;
        for (mode, sc, kernel) in [
            (SmallCall::Staged, &scratch, "mlp_fused"),
            (SmallCall::Staged, &all_stream, "mlp_stream"),
            (SmallCall::Default, &scratch, "mlp_stream"),
        ] {
            let Some((staged, got)) = fused(&gpu, mode, sc) else {
                // only the talker's shape is too big for shared memory
                assert!(
                    kernel == "mlp_fused" && h * inter == 2048 * 6144,
                    "{what}: {kernel} should take this row"
                );
                continue;
            };
            assert_eq!(staged, kernel == "mlp_fused", "{what}: {kernel}'s plan");
            let vs_ref = err(&got, &|i| reference[i]);
            let vs_staged = err(&got, &|i| f64::from(staged_row[i]));
            assert!(
                vs_ref <= 2e-5,
                "{what} {kernel}: rel err {vs_ref:e} against the reference"
            );
            assert!(
                vs_staged <= 1e-5,
                "{what} {kernel}: rel err {vs_staged:e} against the GEMVs"
            );
            let (_, again) = fused(&gpu, mode, sc).unwrap();
            let differ = got
                .iter()
                .zip(&again)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ, 0,
                "{what} {kernel}: a second launch changed {differ} outputs' bits"
            );
            gpu.without = vec![kernel.into()];
            let (_, left_out) = fused(&gpu, mode, sc).unwrap();
            gpu.without.clear();
            assert_eq!(
                left_out, x,
                "{what}: with {kernel} left out the row changed"
            );
            eprintln!(
                "{test}: {what} {kernel} ({mode:?}): rel err {vs_ref:.2e} against the reference, {vs_staged:.2e} against the GEMVs, the same bits again"
            );
            kernels += 1;
        }
        assert!(kernels > 0, "{what}: no fused kernel ran");
    }
}
