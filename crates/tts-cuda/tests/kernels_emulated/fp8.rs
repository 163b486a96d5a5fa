//! The FP8 GEMVs (`gemv.cu`'s `gemv8_m1` / `gemv8_m2`, `gemv8_mma.cu`'s tensor-core
//! `gemv8_mma_m1` / `gemv8_mma_m2`) on codes and scales from the one quantizer every
//! backend uses (`tts_model::fp8::Fp8Rows`), and the E4M3 decoding `gemv.cu` runs.
//!
//! Which decoding runs: the emulator compiles `gemv.cu` without `__CUDA_ARCH__` (it is not
//! one of main.rs's `SM90A_SOURCES`, whose arch sections have twins), so `e4m3x4_to_f32`
//! takes its bit-manipulation fallback here, not the `cvt.rn.f16x2.e4m3x2` the GPU runs;
//! no twin of that instruction is written (the harness twins whole helpers of arch
//! sections it compiles, and this one stays off). `gpu_parity` checks the device's path.
//! `gemv8_mma.cu` decodes with integer ops only, the same code here and on the GPU.

use tts_cuda::linear::{gemv8_mma_fits, gemv_choice, gemv_ksplit};
use tts_cuda::routing::{fp8_gemv, Fp8Gemv, FP8_GEMV_MAX_ROWS};
use tts_model::fp8::{e4m3_decode, Fp8Rows};

use crate::{input_file, run_emulated};

/// The built-in 1.7B talker's hidden and MLP widths.
fn talker_widths() -> (usize, usize) {
    let t = tts_model::builtin::load("random:1.7b")
        .expect("random:1.7b")
        .expect("a built-in model")
        .config
        .talker;
    (t.hidden_size, t.intermediate_size)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// An `n × k` matrix quantized by `Fp8Rows::quantize`, written as two files (codes, then
/// the rows' scales as little-endian f32). Row r's magnitudes reach 2^(r % 5 - 1) / √k (sums
/// of order 0.1 to 2 on inputs in ±1): the rows get different scales; the cubed uniform
/// draws put a few percent of the codes among E4M3's subnormals.
fn quantized(test: &str, n: usize, k: usize, seed: u64) -> [String; 2] {
    let mut draw = crate::common::uniform(seed, -1.0, 1.0);
    let w: Vec<f32> = (0..n * k)
        .map(|i| {
            let u = draw();
            u * u * u * ((i / k % 5) as f32 - 1.0).exp2() / (k as f32).sqrt()
        })
        .collect();
    let q = Fp8Rows::quantize(&w, n, k);
    let codes = input_file(&format!("{test}.{n}x{k}.codes"), &q.codes);
    let scales = input_file(&format!("{test}.{n}x{k}.scales"), &f32_bytes(&q.scales));
    [codes, scales].map(|p| p.display().to_string())
}

/// One epilogue of a case: (act, fused norm, bias, residual: 0 none, 1 its own buffer, 2 in
/// place in the output, norm-chain writer).
type Epilogue = (usize, bool, bool, usize, bool);

/// The E4M3 table file, the driver's first argument.
fn e4m3_table(test: &str) -> String {
    let table: Vec<f32> = (0..=255u8).map(e4m3_decode).collect();
    input_file(&format!("{test}.e4m3"), &f32_bytes(&table))
        .display()
        .to_string()
}

/// One case's 15 arguments for gemv8.cpp: `kernel` 0 (`gemv8_*`) or 1 (`gemv8_mma_*`) and
/// its launch (`blocks`, `ksplit`), the shape, the epilogue, whether the input is a norm
/// chain's (`reader`) and the magnitude of x (±2^`xmag`), then the codes and scales files.
#[allow(clippy::too_many_arguments)]
fn case_args(
    test: &str,
    kernel: usize,
    (n, k): (usize, usize),
    rows: usize,
    (blocks, ksplit): (usize, usize),
    epi: Epilogue,
    reader: bool,
    xmag: usize,
) -> Vec<String> {
    let (act, norm, bias, res, writer) = epi;
    let fields = [
        kernel,
        rows,
        n,
        k,
        blocks,
        ksplit,
        act,
        usize::from(norm),
        usize::from(bias),
        res,
        usize::from(writer),
        usize::from(reader),
        xmag,
    ];
    let mut args: Vec<String> = fields.iter().map(|v| v.to_string()).collect();
    args.extend(quantized(test, n, k, (n * 31 + k) as u64));
    args
}

/// `gemv8_m1` and `gemv8_m2` on the launches `linear::gemv` makes for FP8 codes (blocks and
/// ksplit from `gemv_choice` and `gemv_ksplit`, 256 threads, the codes and scales of
/// `Fp8Rows`), against an f64 reference on the dequantized weights (code value × row scale:
/// exact in bf16, so the reference is gemv.cpp's), with poison in the row padding and a row
/// past the valid ones, which must keep it:
/// - the 1.7B talker's down projection (2048 × 6144, which `routing::fp8_gemv` sends to
///   `gemv8_*` at one and two rows) adding the residual in place (`res` = `y`, as stack.rs),
///   at one row also as the norm chain's writer (the next layer's normed input and Σ y²
///   pair partials: the talker step's down before the next QKV) and without (the last
///   layer);
/// - an odd 301 × 784 (ksplit 4: a last block with one valid row of four, K not a multiple
///   of a warp's 512-weight step and warps with no K at all) with bias, SiLU and a residual;
/// - the talker's gate/up at one row as a norm-chain reader (x = g ⊙ y with y's Σ y² pair
///   partials: the fused norm's result on y), SwiGLU pairs, on 1024 of its 12288 rows
///   (`routing::fp8_gemv` sends the whole matrix to `gemv8_m1` so);
/// - 300 × 784 with the fused norm and SwiGLU pairs, what a normed FP8 layer runs when
///   the codes are forced without tensor cores (`LinearPaths::fp8_codes`; by default
///   normed layers take `gemv8_mma.cu` or the bf16 copy).
///
/// Each two-row result must have, row by row, the bits of `gemv8_m1` on that row alone
/// (gemv.cu: a row's result never depends on M). The E4M3 fallback decoder must give every
/// finite code's exact value (an independent decode in the driver, which must also agree
/// with `tts_model::fp8::e4m3_decode` on all 256 codes).
#[test]
fn fp8_gemv_matches_the_reference() {
    let test = "fp8_gemv_matches_the_reference";
    let mut args = vec![e4m3_table(test)];
    let mut case = |(n, k): (usize, usize), rows: usize, epi: Epilogue, reader: bool, backend| {
        assert!(rows <= FP8_GEMV_MAX_ROWS, "gemv8 takes at most 2 rows");
        if let Some(n_backend) = backend {
            assert_eq!(
                fp8_gemv(rows, n_backend, k, epi.1, gemv8_mma_fits(k, rows)),
                Fp8Gemv::Simt,
                "{n_backend}x{k} at {rows} rows runs on gemv8_*"
            );
        }
        let launch = (gemv_choice(n, k, rows).1, gemv_ksplit(n));
        args.extend(case_args(test, 0, (n, k), rows, launch, epi, reader, 0));
    };
    let (h, inter) = talker_widths();
    case((h, inter), 1, (0, false, false, 2, true), false, Some(h));
    case((h, inter), 1, (0, false, false, 2, false), false, Some(h));
    case((h, inter), 2, (0, false, false, 2, false), false, Some(h));
    case(
        (1024, h),
        1,
        (2, false, false, 0, false),
        true,
        Some(2 * inter),
    );
    case((301, 784), 1, (1, false, true, 1, false), false, None);
    case((301, 784), 2, (1, false, true, 1, false), false, None);
    case((300, 784), 1, (2, true, false, 0, false), false, None);
    case((300, 784), 2, (2, true, false, 0, false), false, None);
    run_emulated(test, "gemv8.cpp", &["gemv.cu", "gemv8_mma.cu"], &args);
}

/// `gemv8_mma_m1` and `gemv8_mma_m2` (`gemv8_mma.cu`: the codes as f16 on tensor cores,
/// the rows split into f16 hi + lo with a power-of-two scale) on the launches
/// `linear::gemv` makes for them (one block per 16 outputs, `4·K·M` bytes of shared
/// memory; `gemv8_mma_fits` must take the shape), against the f64 reference, with poison
/// where nothing may be written:
/// - the 1.7B talker's down projection (2048 × 6144), residual in place, at one row as the
///   norm chain's writer and without, and its O projection (2048 × 2048) at two rows;
/// - the talker's gate/up as a norm-chain reader (x = g ⊙ y with y's Σ y² pair partials:
///   the fused norm's result on y), SwiGLU pairs, on 1024 of its 12288 rows;
/// - an odd 301 × 832 (a last block with 13 of 16 rows valid, 13 chunks over 8 warps) with
///   bias, SiLU and a residual, and the fused norm with SwiGLU pairs (300 rows);
/// - x in ±2^20, past f16's range, which the row scale must bring back;
/// - the widest rows it takes (K·M = 10240: its prologue's loop bound; the values past the
///   2048 of a row it holds in registers are read again), with the fused norm.
///
/// Each two-row result must have, row by row, the bits of the one-row launch.
#[test]
fn fp8_gemv_on_tensor_cores_matches_the_reference() {
    let test = "fp8_gemv_on_tensor_cores_matches_the_reference";
    let mut args = vec![e4m3_table(test)];
    let mut case = |(n, k): (usize, usize), rows: usize, epi: Epilogue, reader: bool, xmag| {
        assert!(
            gemv8_mma_fits(k, rows),
            "gemv8_mma takes {n}x{k} at {rows} rows"
        );
        let launch = (n.div_ceil(16), gemv_ksplit(n));
        args.extend(case_args(test, 1, (n, k), rows, launch, epi, reader, xmag));
    };
    let (h, inter) = talker_widths();
    case((h, inter), 1, (0, false, false, 2, true), false, 0);
    case((h, inter), 1, (0, false, false, 2, false), false, 0);
    case((h, h), 2, (0, false, false, 2, false), false, 0);
    case((1024, h), 1, (2, false, false, 0, false), true, 0);
    case((301, 832), 1, (1, false, true, 1, false), false, 0);
    case((301, 832), 2, (1, false, true, 1, false), false, 0);
    case((300, 832), 1, (2, true, false, 0, false), false, 0);
    case((300, 832), 2, (2, true, false, 0, false), false, 0);
    case((256, 1024), 1, (0, false, false, 0, false), false, 20);
    case((256, 1024), 2, (0, false, false, 1, false), false, 20);
    case((32, 10240), 1, (0, true, false, 0, false), false, 0);
    case((32, 5120), 2, (0, true, false, 0, false), false, 0);
    assert!(!gemv8_mma_fits(10240 + 64, 1) && !gemv8_mma_fits(5120 + 64, 2));
    run_emulated(test, "gemv8.cpp", &["gemv.cu", "gemv8_mma.cu"], &args);
}

/// `codec_to_f16` (exec.rs's `to_f16`: the f16 copy of the codec's weight arena) and
/// `codec_zero` (exec.rs's `zero`: a slot's state on reset) on exec.rs's launches, 256
/// threads and `n.div_ceil(256)` blocks capped at 8192 and 1024 (exec.rs's `grid` and its
/// caps are private: mirrored here), on odd lengths and on lengths past the cap (each
/// thread looping). `codec_to_f16` must give the nearest f16 (ties to even) of every value,
/// saturated to ±65504: halfway cases among normals and subnormals, the smallest subnormal
/// and the ties below it, the largest finite value and the values that would round to
/// infinity, ±∞ and NaN (fminf/fmaxf's rule: the clamp's bound, -65504), ±0. An
/// independent reference in the driver (the nearest multiple of the binade's quantum, in
/// f64). Nothing past `n` may be written in either kernel.
#[test]
fn codec_f16_copy_and_zero_match_the_reference() {
    let blocks = |n: usize, cap: usize| n.div_ceil(256).min(cap);
    let mut args = Vec::new();
    for (kernel, n, cap) in [
        ("to_f16", 1001, 8192),
        ("to_f16", 8192 * 256 + 333, 8192),
        ("zero", 999, 1024),
        ("zero", 1024 * 256 * 2 + 77, 1024),
    ] {
        args.extend([
            kernel.to_string(),
            n.to_string(),
            blocks(n, cap).to_string(),
        ]);
    }
    run_emulated(
        "codec_f16_copy_and_zero_match_the_reference",
        "codec_small.cpp",
        &["codec.cu"],
        &args,
    );
}
