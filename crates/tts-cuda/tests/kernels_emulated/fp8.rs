//! `gemv.cu`'s FP8 entries (`gemv8_m1`, `gemv8_m2`) on codes and scales from the one
//! quantizer every backend uses (`tts_model::fp8::Fp8Rows`), and the E4M3 decoding they run.
//!
//! Which decoding runs: the emulator compiles `gemv.cu` without `__CUDA_ARCH__` (it is not
//! one of main.rs's `SM90A_SOURCES`, whose arch sections have twins), so `e4m3x4_to_f32`
//! takes its bit-manipulation fallback here, not the `cvt.rn.f16x2.e4m3x2` the GPU runs;
//! no twin of that instruction is written (the harness twins whole helpers of arch
//! sections it compiles, and this one stays off). `gpu_parity` checks the device's path.

use tts_cuda::linear::{gemv_choice, gemv_ksplit};
use tts_cuda::routing::{fp8_gemv, FP8_GEMV_MAX_ROWS};
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

/// `gemv8_m1` and `gemv8_m2` on the launches `linear::gemv` makes for FP8 codes (blocks and
/// ksplit from `gemv_choice` and `gemv_ksplit`, 256 threads, the codes and scales of
/// `Fp8Rows`), against an f64 reference on the dequantized weights (code value × row scale:
/// exact in bf16, so the reference is gemv.cpp's), with poison in the row padding and a row
/// past the valid ones, which must keep it:
/// - the 1.7B talker's down projection (2048 × 6144, which `routing::fp8_gemv` sends to the
///   codes at one and two rows) adding the residual in place (`res` = `y`, as stack.rs),
///   at one row also as the norm chain's writer (the next layer's normed input and Σ y²
///   pair partials: the talker step's down before the next QKV) and without (the last
///   layer);
/// - an odd 301 × 784 (ksplit 4: a last block with one valid row of four, K not a multiple
///   of a warp's 512-weight step and warps with no K at all) with bias, SiLU and a residual;
/// - 300 × 784 with the fused norm and SwiGLU pairs, what the FP8 gate/up runs when
///   `LinearPaths::fp8_codes` forces the codes (the benchmarks' override; by default normed
///   layers take the bf16 copy).
///
/// Each two-row result must have, row by row, the bits of `gemv8_m1` on that row alone
/// (gemv.cu: a row's result never depends on M). The E4M3 fallback decoder must give every
/// finite code's exact value (an independent decode in the driver, which must also agree
/// with `tts_model::fp8::e4m3_decode` on all 256 codes).
#[test]
fn fp8_gemv_matches_the_reference() {
    let test = "fp8_gemv_matches_the_reference";
    let table: Vec<f32> = (0..=255u8).map(e4m3_decode).collect();
    let mut args = vec![input_file(&format!("{test}.e4m3"), &f32_bytes(&table))
        .display()
        .to_string()];
    let mut case = |(n, k): (usize, usize), rows: usize, epi: Epilogue, backend: bool| {
        assert!(rows <= FP8_GEMV_MAX_ROWS, "gemv8 takes at most 2 rows");
        let (act, norm, bias, res, writer) = epi;
        if backend {
            assert!(
                fp8_gemv(rows, n, k, norm),
                "{n}x{k} at {rows} rows runs on the codes"
            );
        }
        let blocks = gemv_choice(n, k, rows).1;
        let files = quantized(test, n, k, (n * 31 + k) as u64);
        let fields = [
            rows,
            n,
            k,
            blocks,
            gemv_ksplit(n),
            act,
            usize::from(norm),
            usize::from(bias),
            res,
            usize::from(writer),
        ];
        args.extend(fields.map(|v| v.to_string()));
        args.extend(files);
    };
    let (h, inter) = talker_widths();
    case((h, inter), 1, (0, false, false, 2, true), true);
    case((h, inter), 1, (0, false, false, 2, false), true);
    case((h, inter), 2, (0, false, false, 2, false), true);
    case((301, 784), 1, (1, false, true, 1, false), false);
    case((301, 784), 2, (1, false, true, 1, false), false);
    case((300, 784), 1, (2, true, false, 0, false), false);
    case((300, 784), 2, (2, true, false, 0, false), false);
    run_emulated(test, "gemv8.cpp", &["gemv.cu"], &args);
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
