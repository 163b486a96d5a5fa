//! The codec's implicit-GEMM convolutions on tensor cores (`codec_conv.cu`: `codec_act_h`,
//! then `codec_conv_win96r`, `codec_conv_win96`, `codec_conv_mma64` or `codec_conv_mma32`),
//! through the emulator's ldmatrix / mma.sync twins, on the plans `codec::conv_plan` makes
//! (the launches of `codec::launch_implicit_conv`), against an f64 reference over the same
//! f16 operands (`emu/conv_implicit.hpp`). Shapes are the 1.7B codec's layers; passes run
//! rows of several slots at different positions and parities, a padding row and padding
//! frames, and most cases two passes, the second reading the histories the first left.
//!
//! A pass here is a few frames, fewer than the `ImplicitConv` rule asks before it takes the
//! kernel (its tiles should cover the GPU): the kernels' launch logic is the same for any
//! number of steps, and a frame of the last block (1920 steps) costs the emulator about a
//! second and a half.

use tts_cuda::codec::conv_plan;
use tts_cuda::codec::layers::{conv_padded, padded};
use tts_model::config::CodecDecoderConfig;
use tts_model::weights::RES_UNIT_DILATIONS;

use crate::{run_emulated, H200_SMS};

/// Taps of the released decoder's residual-unit convolutions (weights.rs).
const TAPS: usize = 7;
/// Metadata capacity (rows) of every pass.
const ROWS_CAP: usize = 5;
/// The slots' first positions: 0 deep in its stream, 1 fresh (zero history), 2, 3 partway.
const POSITIONS: &str = "150,0,30,80";
/// `plan::Act::code` of SnakeBeta (a residual unit's activations, a block's before its
/// transposed convolution).
const SNAKE: i32 = 1;

fn decoder() -> CodecDecoderConfig {
    let model = tts_model::builtin::load("random:1.7b")
        .expect("random:1.7b")
        .expect("a built-in model");
    model.codec.decoder
}

/// Steps per frame after decoder block `i`'s transposed convolution (its residual units'
/// rate), or at its input for `after = false`.
fn rate(d: &CodecDecoderConfig, i: usize, after: bool) -> usize {
    let end = if after { i + 1 } else { i };
    d.upsampling_ratios.iter().product::<usize>()
        * d.upsample_rates[..end].iter().product::<usize>()
}

/// (frames, rows) of a pass "slot:frames,...[/padding frames]" (emu/codec_ref.hpp's
/// make_pass).
fn pass_shape(spec: &str) -> (usize, usize) {
    let (rows, pad) = spec.split_once('/').unwrap_or((spec, "0"));
    let rows: Vec<&str> = rows.split(',').collect();
    let frames: usize = rows
        .iter()
        .map(|r| {
            r.split_once(':')
                .expect("slot:frames")
                .1
                .parse::<usize>()
                .expect("frames")
        })
        .sum();
    (
        frames + pad.parse::<usize>().expect("padding frames"),
        rows.len(),
    )
}

/// One layer as exec.rs hands it to the implicit convolution.
struct Layer {
    /// (cin, taps, dil, rate)
    shape: (usize, usize, usize, usize),
    /// Input row stride (floats).
    ldx: usize,
    n: usize,
    ldc: usize,
    beta: f32,
    /// The fused `codec_act_pad` activation (`plan::Act::code`), or -1.
    post: i32,
}

/// A residual unit's first convolution in a block of `c` channels at `rate` (build.rs): its
/// input the block's stream (rows of `c`), its output H (rows of `padded(c)`) with the
/// unit's second SnakeBeta fused.
fn res_conv1(c: usize, dil: usize, rate: usize) -> Layer {
    Layer {
        shape: (c, TAPS, dil, rate),
        ldx: c,
        n: c,
        ldc: padded(c, true),
        beta: 0.0,
        post: SNAKE,
    }
}

/// The arguments of one case: each pass's plans (`(window, resident)` each, with `sms`
/// multiprocessors; several plans of one pass must give the same bits).
fn case(args: &mut Vec<String>, l: &Layer, passes: &[(&str, &[(bool, bool)])], sms: usize) {
    let (cin, taps, dil, rate) = l.shape;
    let fields = [cin, taps, dil, rate, SNAKE as usize, l.ldx, l.n, l.ldc];
    args.extend(fields.map(|v| v.to_string()));
    args.push(conv_padded(taps * cin).to_string());
    args.extend([l.beta.to_string(), l.post.to_string(), ROWS_CAP.to_string()]);
    args.push(POSITIONS.to_string());
    let specs: Vec<&str> = passes.iter().map(|p| p.0).collect();
    args.push(specs.join(";"));
    let plans: Vec<String> = passes
        .iter()
        .map(|(spec, modes)| {
            let (frames, rows) = pass_shape(spec);
            let each: Vec<String> = modes
                .iter()
                .map(|&mode| {
                    let p = conv_plan((frames * rate, rows), l.shape, l.n, true, mode, sms);
                    let f = [p.act_blocks, p.blocks, 4 * p.outputs_per_tile, p.smem];
                    format!("{}:{}", p.kernel, f.map(|v| v.to_string()).join(":"))
                })
                .collect();
            each.join("|")
        })
        .collect();
    args.push(plans.join(";"));
}

/// The server's default path (`ImplicitConv::Narrow`, window and resident kernels on): the
/// residual units of the last block (96 channels at 1920 steps a frame) on
/// `codec_conv_win96r`, planned for a machine of 8 multiprocessors so that each block takes
/// several tiles (double-buffered windows); those of the block before (192 channels at 640
/// steps a frame) on `codec_conv_win96` (two output tiles), on the H200's plan.
#[test]
fn codec_conv_window_matches_the_reference() {
    let d = decoder();
    let [_, dil3, dil9] = RES_UNIT_DILATIONS;
    let (c3, c2) = (d.decoder_dim >> 4, d.decoder_dim >> 3);
    let on = (true, true);
    let mut args = Vec::new();
    case(
        &mut args,
        &res_conv1(c3, dil9, rate(&d, 3, true)),
        &[("1:1,-1:0,0:1", &[on]), ("1:1", &[on])],
        8,
    );
    case(
        &mut args,
        &res_conv1(c2, dil3, rate(&d, 2, true)),
        &[("2:1,-1:0/1", &[on])],
        H200_SMS,
    );
    let out = run_emulated(
        "codec_conv_window_matches_the_reference",
        "conv_window.cpp",
        &["codec.cu", "codec_conv.cu"],
        &args,
    );
    if let Some(out) = out {
        for kernel in ["codec_conv_win96r", "codec_conv_win96 "] {
            assert!(out.contains(kernel), "{kernel} ran");
        }
    }
}

/// The per-tap kernels (window off, or frames that are not whole tiles under
/// `ImplicitConv::All`): `codec_conv_mma64` on block 0's residual unit of dilation 9 (768
/// channels at 32 steps a frame: each tile spans four frames of different rows, and the
/// history of 54 steps is longer than a frame), here with 128 of its outputs (two output
/// tiles, the same tile logic); `codec_conv_mma32` on the last block's transposed
/// convolution (192 channels in, 288 outputs at 640 steps a frame: 2 taps), adding to its
/// output (beta 1, the kernel's accumulate path, which no layer uses now) without a fused
/// activation, and the same pass on `codec_conv_win96` (window on, `ImplicitConv::Large`),
/// which must give the same bits (the same products summed in the same order).
#[test]
fn codec_conv_per_tap_matches_the_reference() {
    let d = decoder();
    let dil9 = RES_UNIT_DILATIONS[2];
    let off = (false, false);
    let mut args = Vec::new();
    let c0 = d.decoder_dim >> 1;
    let block0 = Layer {
        n: 128,
        ldc: padded(128, true),
        ..res_conv1(c0, dil9, rate(&d, 0, true))
    };
    case(
        &mut args,
        &block0,
        &[("2:2,1:1,-1:0,0:1/1", &[off]), ("0:2,3:1", &[off])],
        H200_SMS,
    );
    let (cin, r) = (d.decoder_dim >> 3, d.upsample_rates[3]);
    let cout = cin / 2;
    let tconv = Layer {
        // kernel 2r, stride r: 2 taps of the input (codec_im2col_h's case in codec.rs)
        shape: (cin, 2, 1, rate(&d, 3, false)),
        ldx: cin,
        n: r * cout,
        ldc: r * cout,
        beta: 1.0,
        post: -1,
    };
    let on = (true, true);
    case(&mut args, &tconv, &[("3:1,-1:0/1", &[off, on])], H200_SMS);
    let out = run_emulated(
        "codec_conv_per_tap_matches_the_reference",
        "conv_per_tap.cpp",
        &["codec.cu", "codec_conv.cu"],
        &args,
    );
    if let Some(out) = out {
        for kernel in ["codec_conv_mma64", "codec_conv_mma32", "codec_conv_win96 "] {
            assert!(out.contains(kernel), "{kernel} ran");
        }
    }
}
