//! The codec decoder's kernels that run without tensor cores (`codec.cu`, `codec_gemv.cu`,
//! `codec_conv.cu`'s `codec_act_h`), on the 1.7B codec's layers and the launches exec.rs
//! and conv.rs make with the server's defaults (f16 convolutions, the few-step GEMV, wide
//! copies, implicit convolutions of the narrow layers), plus the forms its options select
//! (f32 GEMV weights with TF32, one value per thread without wide copies). The kernels
//! with stream state (convolution inputs, ConvNeXt front, final layer, attention) run
//! passes of rows of several slots at different positions and parities, with a padding row
//! and padding frames; most cases run two, the second reading the histories and KV rings
//! the first left.

use tts_cuda::codec::layers::{conv_padded, padded};
use tts_cuda::codec::{final_tile, gemv_choice, gemv_mma_choice};
use tts_model::config::CodecDecoderConfig;
use tts_model::weights::RES_UNIT_DILATIONS;

use crate::{run_emulated, H200_SMS};

/// Taps of the released decoder's depthwise, residual-unit, decoder_in and final
/// convolutions (weights.rs).
const TAPS: usize = 7;
/// Taps of its pre_conv (weights.rs).
const PRE_CONV_TAPS: usize = 3;
/// Metadata capacity (rows) of every pass: more than any pass here has.
const ROWS_CAP: usize = 5;
/// The slots' first positions: 0 deep in its stream (its window wraps the KV ring), 1 fresh
/// (zero history, as reset_slot leaves it), 2 and 3 partway in.
const POSITIONS: &str = "150,0,30,80";

/// The built-in 1.7B model's codec decoder (the released geometry).
fn decoder() -> CodecDecoderConfig {
    let model = tts_model::builtin::load("random:1.7b")
        .expect("random:1.7b")
        .expect("a built-in model");
    model.codec.decoder
}

/// Steps per frame at the input of decoder block `i`: after both upsampling stages and the
/// blocks before it.
fn block_rate(d: &CodecDecoderConfig, i: usize) -> usize {
    d.upsampling_ratios.iter().product::<usize>() * d.upsample_rates[..i].iter().product::<usize>()
}

fn strings(fields: &[usize]) -> impl Iterator<Item = String> + '_ {
    fields.iter().map(|v| v.to_string())
}

/// `codec_rvq` (a pass of 5 frames and a padding frame, codes outside the codebook
/// clamped), `codec_act_pad` as exec.rs launches it (the ConvNeXt's GELU at 2 frames of
/// upsampling stage 0, 256 threads; a residual unit's SnakeBeta in block 1, 128 threads;
/// init_pads' ones columns of P over the pass capacity, 32 threads), and `codec_rms_norm`
/// and `codec_swiglu` at 12 frames (more than the GEMV's 8, so not folded into it).
#[test]
fn codec_row_kernels_match_the_reference() {
    let d = decoder();
    let (lat, frames_cap) = (d.latent_dim, tts_cuda::codec::MAX_FRAMES_PER_PASS);
    let mut args: Vec<String> = vec!["rvq".into()];
    args.extend(strings(&[
        d.codebook_size,
        d.codebook_dim / 2,
        d.num_quantizers,
        5,
        1,
    ]));
    let threads = |c: usize| if c >= 512 { 256 } else { 128 };
    let res_cout = d.decoder_dim >> 2;
    for (rows, c, act, block) in [
        (2 * d.upsampling_ratios[0], 4 * lat, 2, threads(4 * lat)),
        (block_rate(&d, 2), res_cout, 1, threads(res_cout)),
        (frames_cap, lat, 0, 32),
    ] {
        args.push("act_pad".into());
        args.extend(strings(&[rows, padded(c, true), c, act, block]));
    }
    args.push("rms_norm".into());
    let hid = d.hidden_size;
    args.extend(strings(&[12, hid, hid, padded(hid, true)]));
    args.push(d.rms_norm_eps.to_string());
    args.push("swiglu".into());
    args.extend(strings(&[12, d.intermediate_size]));
    run_emulated(
        "codec_row_kernels_match_the_reference",
        "codec_rows.cpp",
        &["codec.cu"],
        &args,
    );
}

/// `codec_gemv_h1..h8`, the few-step GEMMs on the f16 weights (the default f16 precision),
/// with the entry point, K split and blocks of `codec::gemv_choice` on the H200: the RVQ
/// projection at 1 step; the transformer's QKV at 2 steps with the folded RMSNorm; the
/// input projection at 3 steps (a padding step, K = 1028: a partial last pass); the down
/// projection at 8 steps with the folded SwiGLU adding the residual. And `codec_gemv_m2`
/// (f32 weights, TF32 precision) on an upsampling phase GEMM: 2 steps written every other
/// row from the second (ldc = 2 rows, an offset).
#[test]
fn codec_gemv_matches_the_reference() {
    let d = decoder();
    let (hid, lat, inter) = (d.hidden_size, d.latent_dim, d.intermediate_size);
    let qkv = (d.num_attention_heads + 2 * d.num_key_value_heads) * d.head_dim();
    let ld_lat = padded(lat, true);
    let mut args = Vec::new();
    // (steps, n, k, ldx, ldc, c_off, beta, pro, f16)
    let mut case = |steps, n, k, (ldx, ldc, c_off), beta: f32, pro: usize, half| {
        let (kernel, ksplit, blocks) = gemv_choice(steps, n, k, half, H200_SMS);
        args.push(kernel.to_string());
        args.extend(strings(&[steps, n, k, ldx, ldc, c_off, ksplit, blocks]));
        args.extend([beta.to_string(), pro.to_string()]);
    };
    let cbd = d.codebook_dim;
    case(1, cbd, cbd, (cbd, cbd, 0), 0.0, 0, true);
    case(2, qkv, hid, (hid, qkv, 0), 0.0, 1, true);
    case(3, hid, ld_lat, (ld_lat, hid, 0), 0.0, 0, true);
    case(8, hid, inter, (2 * inter, hid, 0), 1.0, 2, true);
    let f = d.upsampling_ratios[0];
    case(2, lat, ld_lat, (ld_lat, f * ld_lat, ld_lat), 0.0, 0, false);
    run_emulated(
        "codec_gemv_matches_the_reference",
        "codec_gemv.cpp",
        &["codec_gemv.cu", "codec_gemv_mma.cu"],
        &args,
    );
}

/// `codec_gemv_mma*` (`codec_gemv_mma.cu`), the few-step GEMMs of 3-8 steps on tensor
/// cores, with the entry point and blocks of `codec::gemv_mma_choice`, on the first rows
/// of the 1.7B codec's 8-step layers of a two-frame pass: decoder_in (K =
/// 7176, 8 chunks in flight), block 0's transposed convolution (K = 3080, a last chunk of
/// 8 columns) at 8 steps and at 5 (steps past the call), the second ConvNeXt linear layer
/// adding the residual (K = 4100, rows of 8-byte pieces) and the first at 3 steps, its
/// rows written every other step from the second (ldc = 2 rows, an offset). The row
/// counts end inside a 16-row tile, so rows past N read the last one and write nothing.
#[test]
fn codec_gemv_mma_matches_the_reference() {
    let d = decoder();
    let (lat, ddim) = (d.latent_dim, d.decoder_dim);
    let ld_lat = padded(lat, true);
    let mut args = Vec::new();
    // (steps, n, k, ldx, ldc, c_off, beta)
    let mut case = |steps, n, k: usize, (ldx, ldc, c_off), beta: f32| {
        let (kernel, blocks) = gemv_mma_choice(n, k, k.is_multiple_of(8));
        args.push(kernel.to_string());
        args.extend(strings(&[steps, n, k, ldx, ldc, c_off, 1, blocks]));
        args.extend([beta.to_string(), "0".to_string()]);
    };
    let k_in = conv_padded(TAPS * lat);
    case(8, 40, k_in, (k_in, ddim, 0), 0.0);
    let k_t0 = conv_padded(2 * ddim);
    case(8, 24, k_t0, (k_t0, 24, 0), 0.0);
    case(5, 24, k_t0, (k_t0, 24, 0), 0.0);
    let ld_e = padded(4 * lat, true);
    case(8, 20, ld_e, (ld_e, ld_lat, 0), 1.0);
    case(3, 36, ld_lat, (ld_lat, 2 * ld_e, ld_e), 0.0);
    run_emulated(
        "codec_gemv_mma_matches_the_reference",
        "codec_gemv.cpp",
        &["codec_gemv.cu", "codec_gemv_mma.cu"],
        &args,
    );
}

/// The convolutions' inputs over one or two passes: `codec_im2col8` (the pre_conv at up to 8
/// steps, whose GEMM is the few-step GEMV), `codec_im2col8_h` (decoder_in, 1028-float input
/// rows; block 0's residual unit of dilation 9, its 54 steps of history longer than a
/// one-frame row), `codec_im2col_h` and `codec_im2col` without wide copies (block 1's
/// transposed convolution, the pre_conv), and `codec_act_h` (block 3's residual unit of
/// dilation 9 at 3 and 4 frames, where the narrow layers take the implicit convolution).
#[test]
fn codec_conv_inputs_match_the_reference() {
    let d = decoder();
    let (cbd, lat, ddim) = (d.codebook_dim, d.latent_dim, d.decoder_dim);
    let mut args = Vec::new();
    // (kernel, cin, taps, dil, rate, act (1 SnakeBeta), ldx, passes)
    let mut case = |kernel: &str, (cin, taps, dil), rate, act, ldx, passes: &str| {
        args.push(kernel.to_string());
        args.extend(strings(&[
            cin,
            taps,
            dil,
            rate,
            act,
            ldx,
            conv_padded(taps * cin),
            ROWS_CAP,
        ]));
        args.extend([POSITIONS.to_string(), passes.to_string()]);
    };
    let pre = (cbd, PRE_CONV_TAPS, 1);
    let two_passes = "2:3,1:1,-1:0/1;0:2,2:2,1:1,3:1";
    case("codec_im2col8", pre, 1, 0, cbd, two_passes);
    let rate = block_rate(&d, 0);
    let ld_lat = padded(lat, true);
    case(
        "codec_im2col8_h",
        (lat, TAPS, 1),
        rate,
        0,
        ld_lat,
        "2:2,1:1/1;1:1,2:1,0:1",
    );
    let dil = RES_UNIT_DILATIONS[2];
    let c0 = ddim >> 1;
    case(
        "codec_im2col8_h",
        (c0, TAPS, dil),
        block_rate(&d, 1),
        1,
        c0,
        "2:1,0:2,-1:0/1;0:1,2:1",
    );
    // block 1's transposed convolution (kernel 2·r, stride r): 2 taps of its input
    case(
        "codec_im2col_h",
        (c0, 2, 1),
        block_rate(&d, 1),
        1,
        c0,
        "1:1,3:1",
    );
    case("codec_im2col", pre, 1, 0, cbd, two_passes);
    let c3 = ddim >> 4;
    case(
        "codec_act_h",
        (c3, TAPS, dil),
        block_rate(&d, 4),
        1,
        c3,
        "1:2,-1:0,0:1;0:2,3:1/1",
    );
    run_emulated(
        "codec_conv_inputs_match_the_reference",
        "codec_im2col.cpp",
        &["codec.cu", "codec_conv.cu"],
        &args,
    );
}

/// `codec_dw_ln`, the ConvNeXt front of both upsampling stages (rates 2 and 4, 1028-float
/// rows), and `codec_final` on the last block's output (96 channels at 1920 steps a frame,
/// exec.rs's `final_tile`), wide (the default) and not.
#[test]
fn codec_dw_ln_and_final_match_the_reference() {
    let d = decoder();
    let ld_lat = padded(d.latent_dim, true);
    let mut args = Vec::new();
    for (rate, passes) in [
        (block_rate(&d, 0), "2:2,1:1,-1:0/1;1:1,0:2,3:1"),
        (d.upsampling_ratios[0], "0:1"),
    ] {
        args.push("dw_ln".to_string());
        args.extend(strings(&[
            d.latent_dim,
            TAPS,
            rate,
            ld_lat,
            ld_lat,
            ROWS_CAP,
        ]));
        args.extend([POSITIONS.to_string(), passes.to_string()]);
    }
    let (c, rate) = (d.decoder_dim >> d.upsample_rates.len(), d.total_upsample());
    let (tile, smem) = final_tile(rate, c, TAPS);
    for (wide, passes) in [(1, "1:1,-1:0,0:1/1;0:1,2:1"), (0, "3:1,1:1")] {
        args.push("final".to_string());
        args.extend(strings(&[c, TAPS, rate, tile, smem, wide, ROWS_CAP]));
        args.extend([POSITIONS.to_string(), passes.to_string()]);
    }
    run_emulated(
        "codec_dw_ln_and_final_match_the_reference",
        "codec_dw_final.cpp",
        &["codec.cu"],
        &args,
    );
}

/// `codec_attention` with the release geometry (16 heads of 64, window 72) and the KV ring
/// of the default 16 frames per call (87 positions): wide (the default; cached keys and
/// values staged in shared memory) over a pass whose first row's window wraps the ring,
/// a fresh slot, a padding row and frame, then a pass of 16 frames of one row (the ring
/// exactly window - 1 + 16) reading the positions the first stored; not wide, one pass;
/// and wide with query heads grouped over kv heads (4 over 2, head dim 32: the kernel's
/// grouped path, which the released codec does not use).
#[test]
fn codec_attention_matches_the_reference() {
    let d = decoder();
    let per_call = tts_cuda::CudaOptions::default().codec_frames_per_call;
    let ring = d.sliding_window - 1 + per_call;
    let mut args = Vec::new();
    let mut case =
        |(heads, kvh, hd): (usize, usize, usize), wide: usize, pos: &str, passes: &str| {
            args.extend(strings(&[heads, kvh, hd, d.sliding_window, ring]));
            args.push(d.rope_theta.to_string());
            args.extend(strings(&[wide, ROWS_CAP]));
            args.extend([pos.to_string(), passes.to_string()]);
        };
    let release = (d.num_attention_heads, d.num_key_value_heads, d.head_dim());
    let two_passes = format!("0:3,1:2,-1:0,2:1/1;0:{per_call},3:1");
    case(release, 1, POSITIONS, &two_passes);
    case(release, 0, POSITIONS, "0:2,2:1");
    case((4, 2, 32), 1, "100,5", "0:2,1:1/1;1:3,0:1");
    run_emulated(
        "codec_attention_matches_the_reference",
        "codec_attention.cpp",
        &["codec.cu"],
        &args,
    );
}
