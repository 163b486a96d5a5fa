//! A convolution's im2col and f16 GEMM as one implicit GEMM (`kernels/codec_conv.cu`):
//! `codec_act_h` (the input activated once, as f16, plus the history update) and
//! `codec_conv_mma*` (tensor-core tiles that build their columns in shared memory; or
//! `codec_conv_win*`, whose tiles copy their input window once and read every tap from it,
//! where a layer's frames are whole tiles). Same
//! operands as `codec_im2col_h` + the cuBLAS f16 GEMM (f16 inputs after the activation, f16
//! weights and bias, f32 sums), so the emulation's `F16Conv` rounding describes both.

use crate::device::{Arg, Gpu};
use crate::error::CudaError;

/// When a convolution whose GEMM runs on f16 operands takes the implicit GEMM.
///
/// Measured on the H200 (Nsight Compute, one pass of 2 frames × 32 rows of `random:1.7b`,
/// `bench/results/2026-12-02-h200-implicit-conv/`): the kernel's own GEMM runs at ~140-170
/// TFLOP/s where cuBLAS's reach ~470, so it only wins where im2col dominates: the residual
/// units of the last two blocks (192 and 96 outputs; 24 kHz: 355 -> 205 µs per conv), not
/// the wide layers (768 outputs: 58 -> 133 µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImplicitConv {
    /// Never: im2col + cuBLAS.
    Off,
    /// Layers of at most `NARROW_MAX_OUTPUTS` outputs whose tiles cover every
    /// multiprocessor at least once.
    #[default]
    Narrow,
    /// Any width, when its tiles cover every multiprocessor at least once (small passes
    /// keep cuBLAS, which splits K over more blocks).
    Large,
    /// Whenever the shapes fit.
    All,
}

/// Widest layer [`ImplicitConv::Narrow`] takes.
pub const NARROW_MAX_OUTPUTS: usize = 192;

impl std::str::FromStr for ImplicitConv {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "0" | "off" => Ok(Self::Off),
            "narrow" => Ok(Self::Narrow),
            "large" => Ok(Self::Large),
            "all" => Ok(Self::All),
            other => Err(format!("expected off, narrow, large or all, not {other:?}")),
        }
    }
}

/// Columns of K per stage of the kernel: every chunk lies inside one tap.
const CHUNK: usize = 32;
const THREADS: u32 = 256;

/// Device operands of one implicit convolution (pointers are device addresses).
#[derive(Debug, Clone, Copy)]
pub struct ConvLaunch {
    /// Layer input, `steps` rows of `ldx` floats (the first `cin` used).
    pub x: u64,
    pub ldx: usize,
    pub cin: usize,
    pub taps: usize,
    pub dil: usize,
    /// Steps per frame at this layer.
    pub rate: usize,
    /// `plan::Act::code` and its per-channel (alpha, inv_beta) pointers (null unless snake).
    pub act: i32,
    pub alpha: u64,
    pub inv_beta: u64,
    pub state: u64,
    pub slot_stride: usize,
    /// Offset of the layer's two history copies in a slot's state (None: no context).
    pub hist: Option<usize>,
    /// Pass metadata (`kernels/codec.cu`) and its row capacity.
    pub meta: u64,
    pub cap_rows: usize,
    pub steps: usize,
    pub rows: usize,
    /// Scratch for the activated f16 input with each row's history before it:
    /// `scratch_halves` halves.
    pub xh: u64,
    /// f16 weights, `n` rows of `ldw` (taps·cin weights, the bias, zeros).
    pub w: u64,
    pub ldw: usize,
    pub n: usize,
    /// Output, `steps` rows of `ldc` floats; `c = beta·c + conv`.
    pub c: u64,
    pub ldc: usize,
    pub beta: f32,
    /// The `codec_act_pad` that would follow, done in the epilogue: its activation
    /// (`plan::Act::code`, alpha, inv_beta) on every output, then the ones/zero columns
    /// `n..ldc`.
    pub post: Option<(i32, u64, u64)>,
    /// Take the window kernel where it fits (`window_fits`).
    pub window: bool,
    /// ... its resident-weights form where that fits (`resident_fits`).
    pub resident: bool,
}

/// Whether the kernel can take a layer: chunks inside one tap, 16-byte loads of the input
/// (offset `x_off` and `ldx` in floats) and of the f16 weight rows (`w_off` in elements),
/// and a bias column.
pub fn fits(cin: usize, ldx: usize, x_off: usize, ldw: usize, w_off: usize, taps: usize) -> bool {
    cin.is_multiple_of(CHUNK)
        && ldx.is_multiple_of(4)
        && x_off.is_multiple_of(4)
        && ldw.is_multiple_of(8)
        && w_off.is_multiple_of(8)
        && ldw > taps * cin
}

/// Steps per tile, and shared-memory stages (`CONV_BM`, `CONV_STAGES` of the kernel).
const TILE_STEPS: usize = 128;
const STAGES: usize = 4;
/// Halves per shared-memory row (`CONV_LDS`).
const LDS: usize = 40;

/// (kernel, outputs per tile) for a layer of `n` outputs; the block has 4 threads per output.
fn tiling(n: usize) -> (&'static str, usize) {
    if n.is_multiple_of(64) {
        ("codec_conv_mma64", 64)
    } else {
        ("codec_conv_mma32", 32)
    }
}

/// Dynamic shared memory of a block with `bn` outputs per tile.
fn smem_bytes(bn: usize) -> usize {
    STAGES * (TILE_STEPS + bn) * LDS * 2
}

/// Halves a window row takes beyond its `cin` (the kernel's `wld = cin + 8`: 8 consecutive
/// rows then start in distinct banks).
const WINDOW_PAD: usize = 8;
/// The most dynamic shared memory a block may ask for (sm_90).
const MAX_SMEM: usize = 227 << 10;

/// The window kernel and its outputs per tile for a layer of `n` outputs (4 threads each).
fn window_tiling(n: usize) -> (&'static str, usize) {
    if n.is_multiple_of(96) {
        ("codec_conv_win96", 96)
    } else if n.is_multiple_of(64) {
        ("codec_conv_win64", 64)
    } else {
        ("codec_conv_win32", 32)
    }
}

/// The window kernel's weight ring: stages, and halves of K per stage
/// (`CONV_WIN_STAGES`, `CONV_WIN_BK`).
const WINDOW_STAGES: usize = 3;
const WINDOW_CHUNK: usize = 64;

/// Bytes of one window in shared memory: a tile's steps and `ctx` before them, rows of
/// `cin + WINDOW_PAD` halves.
fn window_bytes(cin: usize, ctx: usize) -> usize {
    (TILE_STEPS + ctx) * (cin + WINDOW_PAD) * 2
}

/// Dynamic shared memory of a window block: the window and the weight ring.
fn window_smem(cin: usize, ctx: usize, bn: usize) -> usize {
    window_bytes(cin, ctx) + WINDOW_STAGES * bn * WINDOW_CHUNK * 2
}

/// Whether the window kernel can take a layer (already `fits`): its frames are whole
/// tiles (a tile's steps then lie in one row) and its window fits a block.
pub fn window_fits(rate: usize, cin: usize, ctx: usize, n: usize) -> bool {
    rate.is_multiple_of(TILE_STEPS) && window_smem(cin, ctx, window_tiling(n).1) <= MAX_SMEM
}

/// Dynamic shared memory of a `codec_conv_win96r` block: the 96 outputs' weights (rows
/// of K + 8 halves) and two windows.
fn resident_smem(cin: usize, taps: usize, ctx: usize) -> usize {
    96 * (taps * cin + WINDOW_PAD) * 2 + 2 * window_bytes(cin, ctx)
}

/// Whether the resident-weights window kernel can take a layer (already `fits`): 96
/// outputs, frames of whole tiles, its weights and two windows fit a block, and a window
/// holds half a tile of outputs (its epilogue stages them there: 64 · 100 floats).
pub fn resident_fits(rate: usize, cin: usize, taps: usize, ctx: usize, n: usize) -> bool {
    n == 96
        && rate.is_multiple_of(TILE_STEPS)
        && resident_smem(cin, taps, ctx) <= MAX_SMEM
        && window_bytes(cin, ctx) >= 64 * 100 * 4
}

/// f16 values the activated input of a pass takes: its steps and each row's history.
pub fn scratch_halves(steps: usize, rows: usize, cin: usize, ctx: usize) -> usize {
    (steps + rows * ctx) * cin
}

/// The per-tap kernel's blocks for `steps` steps of `n` outputs (what [`wanted`]'s rule
/// was measured with; the window kernel takes fewer, wider tiles).
pub fn tiles(steps: usize, n: usize) -> usize {
    let (_, bn) = tiling(n);
    steps.div_ceil(TILE_STEPS) * n.div_ceil(bn)
}

/// Whether `mode` sends a fitting layer of `steps` steps and `n` outputs to the kernel.
pub fn wanted(mode: ImplicitConv, steps: usize, n: usize, sm_count: u32) -> bool {
    match mode {
        ImplicitConv::Off => false,
        ImplicitConv::Narrow => n <= NARROW_MAX_OUTPUTS && tiles(steps, n) >= sm_count as usize,
        ImplicitConv::Large => tiles(steps, n) >= sm_count as usize,
        ImplicitConv::All => true,
    }
}

fn i(v: usize) -> Arg {
    Arg::I(v as i32)
}

/// The two launches of a convolution ([`launch`]): `codec_act_h`'s blocks (of 256 threads),
/// then the GEMM kernel, its outputs per tile (4 threads each), dynamic shared memory and
/// blocks. Public for the emulated kernel tests, which launch on these plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvPlan {
    pub act_blocks: usize,
    pub kernel: &'static str,
    pub outputs_per_tile: usize,
    pub smem: usize,
    pub blocks: usize,
}

/// The plan of a convolution of `steps` steps over `rows` rows, `n` outputs (`hist`: the
/// layer keeps a history; `window`, `resident`: [`ConvLaunch`]'s), on `sm_count`
/// multiprocessors.
pub fn plan(
    (steps, rows): (usize, usize),
    (cin, taps, dil, rate): (usize, usize, usize, usize),
    n: usize,
    hist: bool,
    (window, resident): (bool, bool),
    sm_count: usize,
) -> ConvPlan {
    let ctx = (taps - 1) * dil;
    let hist_blocks = if hist { rows * ctx } else { 0 };
    // eight channels per thread (cin % 32 == 0 here: `fits`)
    let octets = cin / 8;
    let act_blocks = (steps * octets).div_ceil(THREADS as usize)
        + (rows * ctx * octets).div_ceil(THREADS as usize)
        + hist_blocks;
    let resident = window && resident && resident_fits(rate, cin, taps, ctx, n);
    let (kernel, bn, smem) = if resident {
        ("codec_conv_win96r", 96, resident_smem(cin, taps, ctx))
    } else if window && window_fits(rate, cin, ctx, n) {
        let (name, bn) = window_tiling(n);
        (name, bn, window_smem(cin, ctx, bn))
    } else {
        let (name, bn) = tiling(n);
        (name, bn, smem_bytes(bn))
    };
    let tiles = steps.div_ceil(TILE_STEPS) * n.div_ceil(bn);
    // the resident kernel: one block per multiprocessor, each taking every gridDim-th tile
    let blocks = if resident { tiles.min(sm_count) } else { tiles };
    ConvPlan {
        act_blocks,
        kernel,
        outputs_per_tile: bn,
        smem,
        blocks,
    }
}

/// Enqueues the two launches of one convolution (shapes already checked with `fits`;
/// sizes were checked against `i32::MAX` when the codec was built); returns the GEMM
/// kernel's name (none for an empty pass).
pub fn launch(gpu: &Gpu, l: &ConvLaunch) -> Result<Option<&'static str>, CudaError> {
    if l.steps == 0 {
        return Ok(None);
    }
    let p = plan(
        (l.steps, l.rows),
        (l.cin, l.taps, l.dil, l.rate),
        l.n,
        l.hist.is_some(),
        (l.window, l.resident),
        gpu.sm_count as usize,
    );
    let hist = Arg::I(l.hist.map_or(-1, |h| h as i32));
    gpu.launch(
        "codec_act_h",
        (p.act_blocks as u32, 1, 1),
        THREADS,
        &[
            Arg::P(l.x),
            i(l.ldx),
            i(l.cin),
            i(l.taps),
            i(l.dil),
            i(l.rate),
            Arg::I(l.act),
            Arg::P(l.alpha),
            Arg::P(l.inv_beta),
            Arg::P(l.state),
            i(l.slot_stride),
            hist,
            Arg::P(l.meta),
            i(l.cap_rows),
            i(l.steps),
            i(l.rows),
            Arg::P(l.xh),
        ],
    )?;
    gpu.allow_dynamic_smem(p.kernel, p.smem)?;
    gpu.launch_with(
        p.kernel,
        (p.blocks as u32, 1, 1),
        4 * p.outputs_per_tile as u32,
        p.smem as u32,
        &[
            Arg::P(l.xh),
            i(l.cin),
            i(l.taps),
            i(l.dil),
            i(l.rate),
            Arg::P(l.meta),
            i(l.cap_rows),
            i(l.steps),
            Arg::P(l.w),
            i(l.ldw),
            i(l.n),
            Arg::P(l.c),
            i(l.ldc),
            Arg::F(l.beta),
            Arg::I(l.post.map_or(-1, |p| p.0)),
            Arg::P(l.post.map_or(0, |p| p.1)),
            Arg::P(l.post.map_or(0, |p| p.2)),
        ],
    )?;
    Ok(Some(p.kernel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_follows_the_layer_width() {
        assert_eq!(tiling(768), ("codec_conv_mma64", 64));
        assert_eq!(tiling(96), ("codec_conv_mma32", 32));
        assert_eq!(tiles(122_880, 96), 960 * 3);
        assert!(smem_bytes(64) <= 227 * 1024);
        assert_eq!(tiles(64, 768), 12);
        assert!(!wanted(ImplicitConv::Large, 64, 768, 132));
        assert!(wanted(ImplicitConv::Narrow, 122_880, 96, 132));
        assert!(wanted(ImplicitConv::Narrow, 40_960, 192, 132));
        assert!(!wanted(ImplicitConv::Narrow, 40_960, 768, 132), "wide");
        assert!(!wanted(ImplicitConv::Narrow, 3_840, 96, 132), "few tiles");
        assert!(wanted(ImplicitConv::Large, 122_880, 96, 132));
        assert!(wanted(ImplicitConv::All, 64, 768, 132));
        assert!(!wanted(ImplicitConv::Off, 122_880, 96, 132));
    }

    #[test]
    fn window_takes_whole_tile_frames_that_fit() {
        // the 1.7B codec's last two blocks: 96 channels at 1920 steps per frame, 192 at
        // 640, dilations up to 9 (ctx 54)
        assert_eq!(window_tiling(96), ("codec_conv_win96", 96));
        assert_eq!(window_tiling(192), ("codec_conv_win96", 96));
        assert_eq!(window_tiling(128), ("codec_conv_win64", 64));
        assert_eq!(window_tiling(160), ("codec_conv_win32", 32));
        assert!(window_fits(1920, 96, 54, 96));
        assert!(window_fits(640, 192, 54, 192));
        // two 192-channel blocks still fit a multiprocessor (228 KiB, 1 KiB reserved each)
        assert!(2 * (window_smem(192, 54, 96) + 1024) <= 228 << 10);
        assert!(!window_fits(160, 384, 54, 384), "frames not whole tiles");
        // the 96-channel units keep their weights resident (one block per multiprocessor:
        // 96 x 680 halves of weights and two windows of 182 x 104)
        assert!(resident_fits(1920, 96, 7, 54, 96));
        assert_eq!(resident_smem(96, 7, 54), 130_560 + 75_712);
        assert!(!resident_fits(640, 192, 7, 54, 192), "not 96 outputs");
        assert!(!resident_fits(160, 96, 7, 54, 96), "frames not whole tiles");
        assert!(!resident_fits(1920, 384, 7, 54, 96), "weights too large");
        assert!(!window_fits(128, 1536, 54, 96), "window too large");
    }

    #[test]
    fn plan_follows_the_layer() {
        // the last block's residual units: resident weights, one block per multiprocessor
        let p = plan((3 * 1920, 3), (96, 7, 9, 1920), 96, true, (true, true), 132);
        assert_eq!(
            (p.kernel, p.outputs_per_tile, p.blocks),
            ("codec_conv_win96r", 96, 45)
        );
        assert_eq!(p.smem, resident_smem(96, 7, 54));
        assert_eq!(p.act_blocks, 270 + 8 + 3 * 54);
        let p = plan((3 * 1920, 3), (96, 7, 9, 1920), 96, true, (true, true), 8);
        assert_eq!(p.blocks, 8);
        // the block before: two window tiles per 128 steps
        let p = plan((640, 1), (192, 7, 3, 640), 192, true, (true, true), 132);
        assert_eq!((p.kernel, p.blocks), ("codec_conv_win96", 10));
        // frames that are not whole tiles, or the window off: the per-tap kernel
        let p = plan((160, 4), (768, 7, 9, 32), 768, true, (true, true), 132);
        assert_eq!(
            (p.kernel, p.blocks, p.smem),
            ("codec_conv_mma64", 24, smem_bytes(64))
        );
        let p = plan((640, 1), (192, 2, 1, 640), 288, true, (false, true), 132);
        assert_eq!(
            (p.kernel, p.outputs_per_tile, p.blocks),
            ("codec_conv_mma32", 32, 45)
        );
    }

    #[test]
    fn parses_the_knob() {
        assert_eq!("0".parse(), Ok(ImplicitConv::Off));
        assert_eq!("Large".parse(), Ok(ImplicitConv::Large));
        assert_eq!("narrow".parse(), Ok(ImplicitConv::Narrow));
        assert_eq!("all".parse(), Ok(ImplicitConv::All));
        assert!("sometimes".parse::<ImplicitConv>().is_err());
    }

    #[test]
    fn fits_needs_whole_chunks_and_aligned_rows() {
        assert!(fits(96, 96, 0, 680, 0, 7));
        assert!(!fits(48, 48, 0, 344, 0, 7), "cin not a multiple of 32");
        assert!(!fits(96, 98, 0, 680, 0, 7), "ldx");
        assert!(!fits(96, 96, 2, 680, 0, 7), "input offset");
        assert!(!fits(96, 96, 0, 676, 0, 7), "ldw");
        assert!(!fits(96, 96, 0, 672, 0, 7), "no bias column");
    }
}
