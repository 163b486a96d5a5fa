//! Runs a codec [`Program`] on the GPU: one launch (kernel or cuBLAS GEMM) per op, all on
//! the device's stream, reading the pass inputs already written to the device. Nothing
//! here allocates, copies from the host or synchronises, so a pass can be captured in a
//! CUDA graph.

use super::conv::{self, ConvLaunch, ImplicitConv};
use super::plan::{fold_into_gemm, Act, Buf, FoldedGemm, Op, Program, Prologue, View};
use super::state::InputLayout;
use crate::device::{Arg, DBuf, GemmType, Gpu};
use crate::error::CudaError;

/// Device memory of a codec.
pub struct DevBufs {
    pub weights: DBuf<f32>,
    /// The same arena as f16 bits (`CodecPrecision::F16`), made when first asked for.
    pub weights_f16: Option<DBuf<u16>>,
    /// `[max_slots][slot_stride]`.
    pub state: DBuf<f32>,
    pub inputs: DBuf<i32>,
    /// By [`Buf::index`].
    pub scratch: Vec<DBuf<f32>>,
}

impl DevBufs {
    fn view(&self, v: View) -> u64 {
        self.scratch[v.buf.index()].at(v.off)
    }

    fn w(&self, off: usize) -> u64 {
        self.weights.at(off)
    }

    /// (alpha, inv_beta) pointers of an activation (null when unused).
    fn act(&self, a: Act) -> (u64, u64) {
        match a {
            Act::Snake { alpha, inv_beta } => (self.w(alpha), self.w(inv_beta)),
            _ => (0, 0),
        }
    }
}

/// Sizes were checked against `i32::MAX` when the codec was built.
fn i(v: usize) -> Arg {
    Arg::I(v as i32)
}

fn grid(blocks: usize) -> (u32, u32, u32) {
    (blocks.max(1) as u32, 1, 1)
}

/// Shared memory a kernel may take without asking (48 KiB).
const DEFAULT_SMEM: usize = 48 << 10;

/// `codec_final`'s samples per block (the largest power of two up to 64 that divides the
/// frame's `rate` and whose window of `c` channels and the `k` taps' weights fit the
/// default shared memory) and those bytes (public for the emulated kernel tests).
pub fn final_tile(rate: usize, c: usize, k: usize) -> (usize, usize) {
    let smem = |t: usize| ((t + k - 1) * (c + 1) + k * c) * 4;
    let tile = [64, 32, 16, 8, 4, 2]
        .into_iter()
        .find(|&t| rate.is_multiple_of(t) && smem(t) <= DEFAULT_SMEM)
        .unwrap_or(1);
    (tile, smem(tile))
}

/// How a pass runs its GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmMode {
    /// cuBLAS arithmetic.
    pub blas: GemmType,
    /// GEMMs of at most [`GEMV_MAX_STEPS`] steps (and the norm or SwiGLU before them) as
    /// one `codec_gemv` launch.
    pub small_gemv: bool,
    /// Those of at least this many steps, over f16 weights and without a prologue, on
    /// tensor cores ([`gemv_mma_choice`]; 0: never).
    pub gemv_mma_steps: usize,
    /// The GEMMs over an im2col on f16 operands ([`conv_gemm_f16`]).
    pub conv_f16: bool,
    /// Which of those f16 convolutions run as one implicit GEMM (`conv`) instead.
    pub implicit: ImplicitConv,
    /// Those whose frames are whole tiles take the window kernel (`conv::window_fits`).
    pub conv_window: bool,
    /// ... with the weights resident where they fit (`conv::resident_fits`).
    pub conv_resident: bool,
    /// The im2col and the final conv's input moved 8 / 4 values per thread where the
    /// layout allows ([`wide_fits`]; `codec_im2col8*`, `codec_final`'s `wide`), and the
    /// attention's cached keys and values staged in shared memory at once
    /// (`codec_attention`'s `wide`): the same values as one at a time.
    pub wide_copies: bool,
}

/// Whether rows of `width` floats (a multiple of `mult`) at `ptrs` with row strides
/// `strides` (floats) are 16-byte aligned throughout: the wide copies' float4 loads.
pub(super) fn wide_fits(width: usize, mult: usize, ptrs: &[u64], strides: &[usize]) -> bool {
    width.is_multiple_of(mult)
        && ptrs.iter().all(|p| p.is_multiple_of(16))
        && strides.iter().all(|s| s.is_multiple_of(4))
}

/// Whether `ops[at]` is a convolution's GEMM that cuBLAS runs (not the few-step GEMV)
/// right after the im2col that writes its input: with f16 convolutions on, that im2col
/// writes f16 and the GEMM reads f16 weights. The GPU and the emulation decide alike.
pub(super) fn conv_gemm_f16(ops: &[Op], at: usize, steps: usize, small_gemv: bool) -> bool {
    let Some(Op::Gemm {
        w, ldw, k, x, ldx, ..
    }) = ops.get(at)
    else {
        return false;
    };
    let after_im2col = at > 0 && matches!(ops[at - 1], Op::Im2col { col, .. } if col == *x);
    after_im2col && !(small_gemv && gemv_fits(steps, *k, *ldw, *ldx, *w, x.off))
}

/// The f16 copy (saturated to ±65504) of an f32 weight arena.
pub fn to_f16(gpu: &Gpu, w: &DBuf<f32>) -> Result<DBuf<u16>, CudaError> {
    let out = gpu.zeros::<u16>(w.len)?;
    gpu.launch(
        "codec_to_f16",
        grid(w.len.div_ceil(256).min(8192)),
        256,
        &[Arg::P(w.ptr), Arg::P(out.ptr), i(w.len)],
    )?;
    gpu.sync()?;
    Ok(out)
}

/// Most steps (rows) of a pass a GEMM runs as `codec_gemv` (`kernels/codec_gemv.cu`).
pub const GEMV_MAX_STEPS: usize = 8;

/// Whether `codec_gemv` can take a GEMM: few steps, and the 16-byte alignment of its loads
/// (K, the leading dimensions and the offsets in floats, multiples of 4).
pub(super) fn gemv_fits(
    steps: usize,
    k: usize,
    ldw: usize,
    ldx: usize,
    w_off: usize,
    x_off: usize,
) -> bool {
    steps <= GEMV_MAX_STEPS && [k, ldw, ldx, w_off, x_off].iter().all(|v| v % 4 == 0)
}

/// The GEMM with a folded prologue that `ops[at]` starts in a pass of `frames` frames, when
/// the few-step GEMV path is on and can take it (the GPU and the emulation fold alike).
pub(super) fn fold_at(
    ops: &[Op],
    at: usize,
    inter: usize,
    frames: usize,
    small_gemv: bool,
) -> Option<FoldedGemm> {
    if !small_gemv || frames > GEMV_MAX_STEPS {
        return None;
    }
    fold_into_gemm(ops, at, inter).filter(|f| gemv_fits(frames, f.k, f.ldw, f.ldx, f.w, f.x.off))
}

/// The `codec_gemv` entry point for `steps` (1..=`GEMV_MAX_STEPS`) steps of an `n × k`
/// GEMM (`half`: over f16 weights) on `sm_count` multiprocessors, its K split and its
/// blocks of 256 threads (public for the emulated kernel tests).
pub fn gemv_choice(
    steps: usize,
    n: usize,
    k: usize,
    half: bool,
    sm_count: usize,
) -> (&'static str, usize, usize) {
    let bucket = crate::linear::gemv_bucket(steps);
    let name = if half {
        [
            "codec_gemv_h1",
            "codec_gemv_h2",
            "codec_gemv_h4",
            "codec_gemv_h8",
        ][bucket]
    } else {
        [
            "codec_gemv_m1",
            "codec_gemv_m2",
            "codec_gemv_m4",
            "codec_gemv_m8",
        ][bucket]
    };
    // Split K over more warps until the layer has about two blocks per multiprocessor, or
    // four for long rows (two are resident at a time: the large decoder matrices would
    // leave a ragged last wave; measured on the H200, bench/results/2026-12-01-h200-codec).
    let passes = k.div_ceil(128);
    let per_sm = if passes >= 16 { 4 } else { 2 };
    let want = per_sm * sm_count;
    // output rows a block takes without a K split: 8 warps of 2 rows, or of 8 at 8 steps
    // (`CgShape` in codec_gemv.cu)
    let rows = if bucket == 3 { 64 } else { 16 };
    let ksplit = [1usize, 2, 4, 8]
        .into_iter()
        .find(|&s| s == 8 || s >= passes || n.div_ceil(rows / s) >= want)
        .unwrap_or(8);
    (name, ksplit, n.div_ceil(rows / ksplit))
}

/// Fewest steps of a few-step GEMV that runs on tensor cores by default
/// (`QWEN3_TTS_CODEC_GEMV_MMA`): from 3 steps a codec pass of 2 frames at one row took
/// 0.646 / 0.648 ms on an H100 against 0.690 / 0.689 with none and 0.657 / 0.654 from 1
/// step (`bench/results/2026-12-06-codec-gemv-mma`).
pub const GEMV_MMA_STEPS: usize = 3;

/// The `codec_gemv_mma.cu` entry point for an `n × k` GEMM over f16 weights whose rows
/// are 16-byte aligned (`v16`; else 8-byte) and its blocks of 256 threads: 8 chunks of
/// 32 in flight per warp for rows of at least 4096 (decoder_in's 7176), else 4.
pub fn gemv_mma_choice(n: usize, k: usize, v16: bool) -> (&'static str, usize) {
    let name = match (v16, k >= 4096) {
        (true, true) => "codec_gemv_mma8",
        (true, false) => "codec_gemv_mma4",
        (false, _) => "codec_gemv_mma4_v8",
    };
    (name, n.div_ceil(16))
}

/// `C = pro(X) · Wᵀ (+ beta·C)` for `steps` <= [`GEMV_MAX_STEPS`] rows in one launch
/// (`pro`: the folded norm's gain pointer and eps, or the SwiGLU, or nothing); W at `w`
/// is f32, or f16 when `half` (the arena's f16 copy).
fn codec_gemv(
    gpu: &Gpu,
    ((w, half), ldw, n, k): ((u64, bool), usize, usize, usize),
    (x, ldx): (u64, usize),
    (c, ldc): (u64, usize),
    (steps, mma_steps): (usize, usize),
    beta: f32,
    (pro, g, eps): (i32, u64, f32),
) -> Result<(), CudaError> {
    if steps == 0 {
        return Ok(());
    }
    // the arguments both kernels take first
    let args = [
        Arg::P(w),
        i(ldw),
        i(n),
        i(k),
        Arg::P(x),
        i(ldx),
        Arg::P(c),
        i(ldc),
        i(steps),
        Arg::F(beta),
    ];
    // 8-byte weight pieces need rows of 4n halves at an 8-byte address, 16-byte ones 8n
    if half && pro == 0 && mma_steps > 0 && steps >= mma_steps && w.is_multiple_of(8) {
        let v16 = ldw.is_multiple_of(8) && w.is_multiple_of(16);
        let (name, blocks) = gemv_mma_choice(n, k, v16);
        return gpu.launch(name, grid(blocks), 256, &args);
    }
    let (name, ksplit, blocks) = gemv_choice(steps, n, k, half, gpu.sm_count as usize);
    let mut args = args.to_vec();
    args.extend([i(ksplit), Arg::I(pro), Arg::P(g), Arg::F(eps)]);
    gpu.launch(name, grid(blocks), 256, &args)
}

/// What every launch of one pass shares: slot state, pass metadata and row counts.
#[derive(Debug, Clone, Copy)]
struct PassCtx {
    state: u64,
    slot_stride: usize,
    meta: u64,
    cap_rows: usize,
    rows: usize,
}

/// The implicit convolution of the im2col at `ops[at]` and its f16 GEMM (`half`), when
/// `mode` wants it at `steps` steps and the shapes fit, with the `ActPad` of its output
/// that may follow (a residual unit's second activation) folded into its epilogue; and
/// how many ops after `ops[at]` it covers.
fn implicit_conv(
    gpu: &Gpu,
    p: &Program,
    d: &DevBufs,
    at: usize,
    (steps, pass): (usize, PassCtx),
    (mode, window, resident): (ImplicitConv, bool, bool),
    half: bool,
) -> Option<(ConvLaunch, usize)> {
    let (
        Some(&Op::Im2col {
            x,
            ldx,
            cin,
            taps,
            dil,
            rate,
            act,
            hist,
            col,
            ..
        }),
        Some(&Op::Gemm {
            w,
            ldw,
            m,
            c,
            ldc,
            beta,
            ..
        }),
    ) = (p.ops.get(at), p.ops.get(at + 1))
    else {
        return None;
    };
    let w16 = d.weights_f16.as_ref()?;
    let room = 2 * d.scratch[col.buf.index()].len.saturating_sub(col.off);
    let ok = half
        && conv::scratch_halves(steps, pass.rows, cin, (taps - 1) * dil) <= room
        && c.buf != x.buf
        && conv::fits(cin, ldx, x.off, ldw, w, taps)
        && conv::wanted(mode, steps, m, gpu.sm_count);
    let (alpha, inv_beta) = d.act(act);
    // codec_act_pad over exactly this output next
    let post = match p.ops.get(at + 2) {
        Some(&Op::ActPad {
            x: px,
            ld,
            c: pc,
            rate: prate,
            act: pact,
        }) if px == c && ld == ldc && pc == m && prate == rate => {
            let (a2, ib2) = d.act(pact);
            Some((pact.code(), a2, ib2))
        }
        _ => None,
    };
    let launch = ConvLaunch {
        x: d.view(x),
        ldx,
        cin,
        taps,
        dil,
        rate,
        act: act.code(),
        alpha,
        inv_beta,
        state: pass.state,
        slot_stride: pass.slot_stride,
        hist,
        meta: pass.meta,
        cap_rows: pass.cap_rows,
        steps,
        rows: pass.rows,
        xh: d.view(col),
        w: w16.at(w),
        ldw,
        n: m,
        c: d.view(c),
        ldc,
        beta,
        post,
        window,
        resident,
    };
    ok.then_some((launch, if post.is_some() { 2 } else { 1 }))
}

/// Writes the constant ones/zero columns of the GEMM-output buffers (once, at start-up).
pub fn init_pads(gpu: &Gpu, p: &Program, d: &DevBufs, frames_cap: usize) -> Result<(), CudaError> {
    for pad in &p.pads {
        let rows = frames_cap * pad.rate;
        gpu.launch(
            "codec_act_pad",
            grid(rows),
            32,
            &[
                Arg::P(d.view(View {
                    buf: pad.buf,
                    off: 0,
                })),
                i(pad.ld),
                i(pad.c),
                Arg::I(0),
                Arg::P(0),
                Arg::P(0),
                i(rows),
            ],
        )?;
    }
    Ok(())
}

/// Zeroes `n` floats of slot state at `ptr`.
pub fn zero(gpu: &Gpu, ptr: u64, n: usize) -> Result<(), CudaError> {
    gpu.launch(
        "codec_zero",
        grid(n.div_ceil(256).min(1024)),
        256,
        &[Arg::P(ptr), i(n)],
    )
}

/// Enqueues every op of one pass of `frames` frames in `rows` rows.
pub fn run(
    gpu: &Gpu,
    p: &Program,
    d: &DevBufs,
    layout: &InputLayout,
    frames: usize,
    rows: usize,
    mode: GemmMode,
) -> Result<(), CudaError> {
    let GemmMode {
        blas: gemm,
        small_gemv,
        gemv_mma_steps,
        conv_f16,
        implicit,
        conv_window,
        conv_resident,
        wide_copies,
    } = mode;
    let half = |at: usize, steps: usize| conv_f16 && conv_gemm_f16(&p.ops, at, steps, small_gemv);
    // the few-step GEMVs read the f16 copy of the weights with f16 convolutions on (half
    // the bytes; `emulate::Rounding::F16Conv` rounds their weights alike)
    let gemv_w = |off: usize| match d.weights_f16.as_ref().filter(|_| conv_f16) {
        Some(w16) => (w16.at(off), true),
        None => (d.w(off), false),
    };
    let meta = d.inputs.at(layout.meta());
    let codes = d.inputs.at(layout.codes());
    let (state, stride, cap_rows) = (d.state.ptr, p.state_stride, layout.rows);
    let a = &p.attn;
    // ops already covered by a launch that folded them in
    let mut skip = 0usize;
    for (at, op) in p.ops.iter().enumerate() {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        // a few frames: a norm or SwiGLU and the GEMM after it as one GEMV launch
        if let Some(f) = fold_at(&p.ops, at, a.inter, frames, small_gemv) {
            let g = match f.pro {
                Prologue::Norm { w } => d.w(w),
                Prologue::SwiGlu => 0,
            };
            codec_gemv(
                gpu,
                (gemv_w(f.w), f.ldw, f.m, f.k),
                (d.view(f.x), f.ldx),
                (d.view(f.c), f.ldc),
                (frames, gemv_mma_steps),
                f.beta,
                (f.pro.code(), g, p.eps),
            )?;
            skip = 1;
            continue;
        }
        match *op {
            Op::Rvq { tables, out, ld } => gpu.launch(
                "codec_rvq",
                grid(frames),
                128,
                &[
                    Arg::P(codes),
                    Arg::P(meta),
                    i(cap_rows),
                    Arg::P(d.w(tables)),
                    i(p.codebook_size),
                    i(p.half),
                    i(p.num_quantizers),
                    Arg::P(d.view(out)),
                    i(ld),
                    i(frames),
                ],
            )?,
            Op::Gemm {
                w,
                ldw,
                m,
                k,
                x,
                ldx,
                c,
                ldc,
                rate,
                beta,
            } => {
                let steps = frames * rate;
                let (wp, xp, cp) = (d.w(w), d.view(x), d.view(c));
                if small_gemv && gemv_fits(steps, k, ldw, ldx, w, x.off) {
                    codec_gemv(
                        gpu,
                        (gemv_w(w), ldw, m, k),
                        (xp, ldx),
                        (cp, ldc),
                        (steps, gemv_mma_steps),
                        beta,
                        (0, 0, 0.0),
                    )?
                } else if half(at, steps) {
                    let w16 = d.weights_f16.as_ref().ok_or_else(|| {
                        CudaError::Shape("codec: f16 convolutions without f16 weights".into())
                    })?;
                    gpu.gemm(
                        true,
                        false,
                        m,
                        steps,
                        k,
                        w16.at(w),
                        ldw,
                        xp,
                        ldx,
                        beta,
                        cp,
                        ldc,
                        GemmType::F16,
                    )?
                } else {
                    gpu.gemm(
                        true, false, m, steps, k, wp, ldw, xp, ldx, beta, cp, ldc, gemm,
                    )?
                }
            }
            Op::Im2col {
                x,
                ldx,
                cin,
                taps,
                dil,
                rate,
                act,
                hist,
                col,
                ldcol,
            } => {
                let steps = frames * rate;
                // the f16 GEMM after it as one implicit GEMM, when it fits and pays
                let pass = PassCtx {
                    state,
                    slot_stride: stride,
                    meta,
                    cap_rows,
                    rows,
                };
                let half_gemm = half(at + 1, steps);
                if let Some((l, covered)) = implicit_conv(
                    gpu,
                    p,
                    d,
                    at,
                    (steps, pass),
                    (implicit, conv_window, conv_resident),
                    half_gemm,
                ) {
                    conv::launch(gpu, &l)?;
                    skip = covered;
                    continue;
                }
                let ctx = (taps - 1) * dil;
                let hist_blocks = if hist.is_some() { rows * ctx } else { 0 };
                let (al, ib) = d.act(act);
                // eight columns per thread where the rows are 16-byte aligned (the history
                // rows sit at state + slot·stride + hist + parity·ctx·cin)
                let (xp, colp) = (d.view(x), d.view(col));
                let hist_at = hist.unwrap_or(0);
                let wide = wide_copies
                    && ldcol == taps * cin + 8
                    && steps * cin / 8 < i32::MAX as usize
                    && wide_fits(cin, 8, &[xp, state, colp], &[ldx, stride, hist_at]);
                let octets = (steps * cin / 8).div_ceil(256);
                // f16 columns for a GEMM that reads them as f16 (the same buffer, half used)
                let (name, blocks, threads) = match (wide, half_gemm) {
                    (true, true) => ("codec_im2col8_h", octets, 256),
                    (true, false) => ("codec_im2col8", octets, 256),
                    (false, true) => ("codec_im2col_h", steps, 128),
                    (false, false) => ("codec_im2col", steps, 128),
                };
                gpu.launch(
                    name,
                    grid(blocks + hist_blocks),
                    threads,
                    &[
                        Arg::P(xp),
                        i(ldx),
                        i(cin),
                        i(taps),
                        i(dil),
                        i(rate),
                        Arg::I(act.code()),
                        Arg::P(al),
                        Arg::P(ib),
                        Arg::P(state),
                        i(stride),
                        Arg::I(hist.map_or(-1, |h| h as i32)),
                        Arg::P(meta),
                        i(cap_rows),
                        i(steps),
                        i(rows),
                        Arg::P(colp),
                        i(ldcol),
                    ],
                )?
            }
            Op::ActPad {
                x,
                ld,
                c,
                rate,
                act,
            } => {
                let (al, ib) = d.act(act);
                let n = frames * rate;
                let block = if c >= 512 { 256 } else { 128 };
                gpu.launch(
                    "codec_act_pad",
                    grid(n),
                    block,
                    &[
                        Arg::P(d.view(x)),
                        i(ld),
                        i(c),
                        Arg::I(act.code()),
                        Arg::P(al),
                        Arg::P(ib),
                        i(n),
                    ],
                )?
            }
            Op::RmsNorm {
                x,
                ldx,
                c,
                w,
                out,
                ldo,
            } => gpu.launch(
                "codec_rms_norm",
                grid(frames),
                256,
                &[
                    Arg::P(d.view(x)),
                    i(ldx),
                    i(c),
                    Arg::P(d.w(w)),
                    Arg::F(p.eps),
                    Arg::P(d.view(out)),
                    i(ldo),
                    i(frames),
                ],
            )?,
            Op::Attention { qkv, out, kv } => gpu.launch(
                "codec_attention",
                (frames.max(1) as u32, a.heads as u32, 1),
                128,
                &[
                    Arg::P(d.view(qkv)),
                    i(a.ld_qkv),
                    Arg::P(d.view(out)),
                    i(a.ld_attn),
                    Arg::P(state),
                    i(stride),
                    i(kv),
                    i(a.ring),
                    i(a.heads),
                    i(a.kv_heads),
                    i(a.head_dim),
                    i(a.window),
                    Arg::F(a.scale),
                    Arg::P(d.w(a.inv_freq)),
                    Arg::P(meta),
                    i(cap_rows),
                    Arg::I(i32::from(wide_copies)),
                ],
            )?,
            Op::SwiGlu { gu, out } => gpu.launch(
                "codec_swiglu",
                grid(frames),
                256,
                &[
                    Arg::P(d.view(gu)),
                    i(a.inter),
                    Arg::P(d.view(out)),
                    i(frames),
                ],
            )?,
            Op::DwLn {
                x,
                ldx,
                taps,
                bias,
                k,
                ln_w,
                ln_b,
                rate,
                hist,
                out,
                ldo,
            } => {
                let steps = frames * rate;
                gpu.launch(
                    "codec_dw_ln",
                    grid(steps + rows * (k - 1)),
                    256,
                    &[
                        Arg::P(d.view(x)),
                        i(ldx),
                        i(p.latent),
                        Arg::P(d.w(taps)),
                        Arg::P(d.w(bias)),
                        i(k),
                        Arg::P(d.w(ln_w)),
                        Arg::P(d.w(ln_b)),
                        Arg::F(p.ln_eps),
                        i(rate),
                        Arg::P(state),
                        i(stride),
                        i(hist),
                        Arg::P(meta),
                        i(cap_rows),
                        i(steps),
                        i(rows),
                        Arg::P(d.view(out)),
                        i(ldo),
                    ],
                )?
            }
            Op::Final {
                x,
                c,
                k,
                act,
                w,
                bias,
                rate,
                hist,
            } => {
                let steps = frames * rate;
                let (al, ib) = d.act(act);
                let (tile, smem) = final_tile(rate, c, k);
                let wide = wide_copies && wide_fits(c, 4, &[d.view(x), state], &[stride, hist]);
                gpu.launch_with(
                    "codec_final",
                    grid(steps / tile + rows * (k - 1)),
                    256,
                    smem as u32,
                    &[
                        Arg::P(d.view(x)),
                        i(c),
                        i(k),
                        Arg::P(al),
                        Arg::P(ib),
                        Arg::P(d.w(w)),
                        Arg::F(bias),
                        i(rate),
                        Arg::P(state),
                        i(stride),
                        i(hist),
                        Arg::P(meta),
                        i(cap_rows),
                        i(steps),
                        i(rows),
                        i(tile),
                        Arg::P(d.view(View {
                            buf: Buf::Pcm,
                            off: 0,
                        })),
                        Arg::I(i32::from(wide)),
                    ],
                )?
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{final_tile, wide_fits, DEFAULT_SMEM};

    #[test]
    fn wide_copies_need_whole_vectors_and_aligned_rows() {
        assert!(wide_fits(96, 8, &[0x1000, 0x2010], &[200, 4, 0]));
        // a width that is not whole octets, a pointer off 16 bytes, a stride off 4 floats
        assert!(!wide_fits(100, 8, &[0x1000], &[200]));
        assert!(!wide_fits(96, 8, &[0x1008], &[200]));
        assert!(!wide_fits(96, 8, &[0x1000], &[202]));
    }

    #[test]
    fn final_tiles_divide_the_frame_and_fit() {
        // the 1.7B codec: 1920 samples per frame, 96 channels, 7 taps
        assert_eq!(final_tile(1920, 96, 7), (64, (70 * 97 + 7 * 96) * 4));
        assert_eq!(final_tile(24, 16, 7).0, 8);
        assert_eq!(final_tile(15, 16, 7).0, 1);
        // wide layers take smaller tiles
        let (tile, smem) = final_tile(1920, 512, 7);
        assert!(tile < 64 && smem <= DEFAULT_SMEM, "{tile} {smem}");
    }
}
