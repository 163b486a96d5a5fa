//! The linear layer's kernels against each other on random layers: cuBLASLt against
//! cuBLAS, the tensor-core paths and the FP8 GEMV against the GEMV.

use super::*;

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

/// The FP8 GEMVs (E4M3 codes, scale per row: `gemv.cu`'s `gemv8_*` and `gemv8_mma.cu`'s
/// tensor-core `gemv8_mma_*`) against the bf16 GEMV over the dequantized weights (the
/// same numbers, bf16-exact): one and two rows (the FP8 kernels' sizes; here forced onto
/// the codes, whatever `routing::fp8_gemv` would pick), with and without the norm, every
/// epilogue, on shapes of both stacks' layers (K of 1024 to 6144, so each K split of the
/// launch is covered).
#[test]
fn fp8_gemv_matches_the_bf16_gemv_on_the_same_weights() {
    use tts_cuda::linear::{linear, Act, GemmScratch, Linear, LinearPath, LinearPaths, Rows};
    use tts_model::fp8::Fp8Rows;
    let Some(gpu) = common::open_gpu("fp8_gemv_matches_the_bf16_gemv_on_the_same_weights") else {
        return;
    };
    let mut rnd = common::uniform(777, -1.0, 1.0);
    let mut scratch = GemmScratch::new(&gpu, 16, 6144, 12288).unwrap();
    scratch.paths = LinearPaths::forced(LinearPath::Gemv, false, false);
    scratch.paths.fp8_codes = Some(true);
    for (n, k, mma) in [
        (4096, 1024, false),
        (1024, 2048, false),
        (2048, 6144, false),
        (6144, 1024, false),
        (256, 3072, false),
        (4096, 1024, true),
        (1024, 2048, true),
        (2048, 6144, true),
        (12288, 2048, true),
        (256, 3072, true),
    ] {
        scratch.paths.fp8_mma = mma;
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
                    "{n}x{k} m={m} act={act:?} norm {} (tensor cores {mma}): fp8 vs bf16 GEMV rel err {err}",
                    norm.is_some()
                );
                let moved = outs[0].iter().zip(&res).any(|(a, b)| a != b);
                assert!(moved, "{n}x{k} m={m}: the FP8 GEMV wrote nothing");
            }
        }
    }
}
