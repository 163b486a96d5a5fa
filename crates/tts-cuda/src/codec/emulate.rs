//! A plain-Rust execution of the codec program: every op does what its CUDA kernel does
//! (same indexing, same history parity and KV ring, same ones columns), and GEMMs are
//! exact (f64 accumulation) or with TF32 / bf16-weight rounding, and the GEMMs of few
//! steps fold the norm or SwiGLU before them as the GPU does (`exec`). Checked against the
//! CPU reference on the fixture models, it tests the op list, weight re-layout, buffer
//! sizes and stream state without a GPU; the GPU test then only has to show the kernels
//! match this.

use tts_model::checkpoint::HostTensor;
use tts_model::config::CodecConfig;
use tts_model::weights::CodecW;
use tts_model::Frame;

use super::build;
use super::exec::{conv_gemm_f16, fold_at, gemv_fits};
use super::plan::{Act, Buf, FoldedGemm, Op, Program, Prologue, View};
use super::state::{self, InputLayout, SlotBook};

pub struct Emu {
    prog: Program,
    state: Vec<f32>,
    inputs: Vec<i32>,
    scratch: Vec<Vec<f32>>,
    layout: InputLayout,
    book: SlotBook,
    frames_cap: usize,
    piece_cap: usize,
    /// How GEMM operands are rounded (exact by default).
    pub rounding: Rounding,
    /// As `DevCodec::set_small_gemv`: GEMMs of at most `GEMV_MAX_STEPS` steps exact (no
    /// TF32 rounding), a norm or SwiGLU folded into the GEMM after it (on by default).
    pub small_gemv: bool,
}

/// GEMM operand rounding of the emulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// f32 operands, f64 sums.
    Exact,
    /// Both operands to TF32 (10-bit mantissa, nearest, ties away) like the tensor cores,
    /// to predict the GPU's default error (GEMMs the GPU runs as `codec_gemv` stay exact).
    Tf32,
    /// The weights to bf16 (nearest even), inputs f32: what bf16 codec weights would cost.
    Bf16Weights,
    /// Both operands of the cuBLAS GEMMs to bf16 (nearest even): what a bf16 convolution
    /// path would cost (an estimate; the GPU has no such path: cuBLAS's
    /// `CUBLAS_COMPUTE_32F_FAST_16BF` on f32 matrices ran the same TF32 kernels on the H200,
    /// `bench/results/2026-12-01-h200-codec-snake`).
    Bf16,
    /// The convolutions' cuBLAS GEMMs (over an im2col, `exec::conv_gemm_f16`) on f16
    /// operands (nearest even, saturated to ±65504), the few-step GEMVs on f16 weights
    /// and f32 inputs, the other GEMMs TF32, as [`super::CodecPrecision::F16`].
    F16Conv,
    /// The weights to f16 (as `F16Conv`'s), inputs f32: the few-step GEMVs under `F16Conv`.
    F16Weights,
    /// `F16Conv`, and the residual units' 1x1 convolutions (the GEMMs right after a
    /// SnakeBeta in place on their input) on f16 operands too: what moving those to f16
    /// (half their input bytes, or fused into the window kernel's tensor-core epilogue)
    /// would cost (an estimate: the GPU runs them on TF32).
    F16Pointwise,
}

/// One operand's rounding.
type RoundFn = fn(f32) -> f32;

fn bf16(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

fn f16(v: f32) -> f32 {
    half::f16::from_f32(v.clamp(-65504.0, 65504.0)).to_f32()
}

fn tf32(v: f32) -> f32 {
    f32::from_bits(v.to_bits().wrapping_add(0x1000) & 0xffff_e000)
}

/// The activation of `codec_act` (codec.cu).
fn apply(v: f32, w: &[f32], act: Act, ch: usize) -> f32 {
    match act {
        Act::None => v,
        Act::Snake { alpha, inv_beta } => {
            let s = (v * w[alpha + ch]).sin();
            v + w[inv_beta + ch] * s * s
        }
        Act::Gelu => 0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2)),
    }
}

/// erf (std has none): the Numerical Recipes erfc fit in f64, fractional error < 1.2e-7.
fn erf(x: f32) -> f32 {
    let x = x as f64;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let y = 1.0
        - t * (-x * x - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398
                                    + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    (if x >= 0.0 { y } else { -y }) as f32
}

/// `1 / sqrt(mean(x²) + eps)`, as `codec_rms_norm` (and the folded norm of `codec_gemv`).
fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    1.0 / (ms + eps).sqrt()
}

/// `silu(gate) · up`, as `codec_swiglu` (and the folded SwiGLU of `codec_gemv`).
fn swiglu(gate: f32, up: f32) -> f32 {
    gate / (1.0 + (-gate).exp()) * up
}

/// A GEMM's weights (the rows it reads) and output, for [`Emu::gemm`].
struct GemmArgs<'a> {
    w: &'a [f32],
    ldw: usize,
    m: usize,
    k: usize,
    ldx: usize,
    c: View,
    ldc: usize,
    beta: f32,
}

struct Meta<'a>(&'a [i32], usize);

impl Meta<'_> {
    fn slot(&self, r: usize) -> i32 {
        self.0[r]
    }
    fn parity(&self, r: usize) -> usize {
        self.0[self.1 + r] as usize
    }
    fn first(&self, r: usize) -> usize {
        self.0[2 * self.1 + r] as usize
    }
    fn len(&self, r: usize) -> usize {
        self.0[3 * self.1 + r] as usize
    }
    fn pos(&self, r: usize) -> usize {
        self.0[4 * self.1 + r] as usize
    }
    fn frame_row(&self, f: usize) -> i32 {
        self.0[5 * self.1 + f]
    }
}

impl Emu {
    pub fn new(
        cfg: &CodecConfig,
        w: CodecW<HostTensor>,
        max_slots: usize,
        max_frames_per_call: usize,
    ) -> Self {
        let frames_cap = (max_slots * max_frames_per_call).min(super::MAX_FRAMES_PER_PASS);
        let piece_cap = max_frames_per_call.min(frames_cap);
        let ring = cfg.decoder.sliding_window - 1 + piece_cap;
        let prog = build::build(cfg, w, ring).expect("codec program");
        let layout = InputLayout {
            rows: max_slots,
            frames: frames_cap,
            nq: prog.num_quantizers,
        };
        let mut scratch: Vec<Vec<f32>> = prog
            .per_frame
            .iter()
            .map(|n| vec![0f32; n * frames_cap])
            .collect();
        for pad in &prog.pads {
            let b = &mut scratch[pad.buf.index()];
            for r in 0..frames_cap * pad.rate {
                for c in pad.c..pad.ld {
                    b[r * pad.ld + c] = if c == pad.c { 1.0 } else { 0.0 };
                }
            }
        }
        Self {
            state: vec![0f32; max_slots * prog.state_stride],
            inputs: vec![0; layout.total()],
            scratch,
            layout,
            book: SlotBook::new(max_slots),
            frames_cap,
            piece_cap,
            rounding: Rounding::Exact,
            small_gemv: true,
            prog,
        }
    }

    pub fn reset_slot(&mut self, slot: usize) {
        let s = self.prog.state_stride;
        self.state[slot * s..(slot + 1) * s].fill(0.0);
        self.book.reset(slot);
    }

    pub fn decode(&mut self, rows: &[(usize, &[Frame])]) -> Vec<Vec<f32>> {
        let spf = self.prog.samples_per_frame;
        let mut out: Vec<Vec<f32>> = rows.iter().map(|_| Vec::new()).collect();
        let counts: Vec<(usize, usize)> = rows.iter().map(|(s, f)| (*s, f.len())).collect();
        for pass in state::plan_passes(&counts, self.frames_cap, self.piece_cap) {
            self.inputs = state::pass_inputs(&self.layout, &pass, &self.book, |p| {
                &rows[p.row].1[p.start..p.start + p.frames]
            });
            let frames: usize = pass.iter().map(|p| p.frames).sum();
            self.run(frames, pass.len());
            let pcm = &self.scratch[Buf::Pcm.index()];
            let mut at = 0;
            for p in &pass {
                out[p.row].extend_from_slice(&pcm[at..at + p.frames * spf]);
                at += p.frames * spf;
            }
            state::advance(&mut self.book, &pass);
        }
        out
    }

    /// `C = X · Wᵀ (+ beta·C)` for `n` rows of `xs`, operands rounded as asked.
    fn gemm(&mut self, g: &GemmArgs, xs: &[f32], n: usize, round: Rounding) {
        let (rw, rx): (RoundFn, RoundFn) = match round {
            Rounding::Exact => (|v| v, |v| v),
            Rounding::Tf32 => (tf32, tf32),
            Rounding::Bf16Weights => (bf16, |v| v),
            Rounding::Bf16 => (bf16, bf16),
            Rounding::F16Conv | Rounding::F16Pointwise => (f16, f16),
            Rounding::F16Weights => (f16, |v| v),
        };
        let wr: Vec<f32> = g.w.iter().map(|&v| rw(v)).collect();
        let xr: Vec<f32> = xs.iter().map(|&v| rx(v)).collect();
        let cb = self.buf(g.c);
        for row in 0..n {
            for o in 0..g.m {
                let acc: f64 = (0..g.k)
                    .map(|kk| wr[o * g.ldw + kk] as f64 * xr[row * g.ldx + kk] as f64)
                    .sum();
                let dst = &mut cb[row * g.ldc + o];
                *dst = acc as f32 + if g.beta != 0.0 { g.beta * *dst } else { 0.0 };
            }
        }
    }

    /// A norm or SwiGLU folded into the GEMM after it (`codec_gemv`'s prologue): the
    /// intermediate rows are formed here and never stored in the folded op's buffer.
    fn folded_gemm(&mut self, f: &FoldedGemm, w: &[f32], frames: usize) {
        let k = f.k;
        let width = match f.pro {
            Prologue::Norm { .. } => k,
            Prologue::SwiGlu => 2 * k,
        };
        let src = self.read(f.x, (frames - 1) * f.ldx + width);
        let mut xs = vec![0f32; frames * k];
        for (fr, out) in xs.chunks_mut(k).enumerate() {
            let xr = &src[fr * f.ldx..fr * f.ldx + width];
            match f.pro {
                Prologue::Norm { w: g } => {
                    let inv = inv_rms(xr, self.prog.eps);
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = w[g + i] * (xr[i] * inv);
                    }
                }
                Prologue::SwiGlu => {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = swiglu(xr[i], xr[k + i]);
                    }
                }
            }
        }
        let g = GemmArgs {
            w: &w[f.w..f.w + (f.m - 1) * f.ldw + k],
            ldw: f.ldw,
            m: f.m,
            k,
            ldx: k,
            c: f.c,
            ldc: f.ldc,
            beta: f.beta,
        };
        let round = match self.rounding {
            Rounding::Tf32 | Rounding::Bf16 => Rounding::Exact,
            Rounding::F16Conv | Rounding::F16Pointwise => Rounding::F16Weights,
            r => r,
        };
        self.gemm(&g, &xs, frames, round);
    }

    fn buf(&mut self, v: View) -> &mut [f32] {
        &mut self.scratch[v.buf.index()][v.off..]
    }

    fn read(&self, v: View, n: usize) -> Vec<f32> {
        self.scratch[v.buf.index()][v.off..v.off + n].to_vec()
    }

    /// The slot state of a causal layer: (read copy, write copy) offsets.
    fn hist(
        &self,
        slot: usize,
        off: usize,
        parity: usize,
        ctx: usize,
        cin: usize,
    ) -> (usize, usize) {
        let base = slot * self.prog.state_stride + off;
        (base + parity * ctx * cin, base + (1 - parity) * ctx * cin)
    }

    /// Input of `back` steps before local step `ls` of global step `s`: x or history.
    #[allow(clippy::too_many_arguments)]
    fn src(
        &self,
        x: &[f32],
        ldx: usize,
        s: usize,
        ls: usize,
        back: usize,
        hist_read: usize,
        ctx: usize,
        cin: usize,
    ) -> Vec<f32> {
        if ls >= back {
            x[(s - back) * ldx..(s - back) * ldx + cin].to_vec()
        } else {
            let at = hist_read + (ctx + ls - back) * cin;
            self.state[at..at + cin].to_vec()
        }
    }

    /// The history update every stateful kernel ends with.
    #[allow(clippy::too_many_arguments)]
    fn update_hist(
        &mut self,
        x: &[f32],
        ldx: usize,
        cin: usize,
        ctx: usize,
        rate: usize,
        off: usize,
        rows: usize,
    ) {
        let inputs = std::mem::take(&mut self.inputs);
        let m = Meta(&inputs, self.layout.rows);
        for row in 0..rows {
            if m.slot(row) < 0 {
                continue;
            }
            let (rd, wr) = self.hist(m.slot(row) as usize, off, m.parity(row), ctx, cin);
            let len = m.len(row) * rate;
            let new: Vec<f32> = (0..ctx)
                .flat_map(|p| {
                    let src = len as isize - ctx as isize + p as isize;
                    if src >= 0 {
                        let at = (m.first(row) * rate + src as usize) * ldx;
                        x[at..at + cin].to_vec()
                    } else {
                        let at = rd + (ctx as isize + src) as usize * cin;
                        self.state[at..at + cin].to_vec()
                    }
                })
                .collect();
            self.state[wr..wr + ctx * cin].copy_from_slice(&new);
        }
        self.inputs = inputs;
    }

    fn run(&mut self, frames: usize, rows: usize) {
        let ops = self.prog.ops.clone();
        let w = std::mem::take(&mut self.prog.arena.data);
        let inter = self.prog.attn.inter;
        let mut folded = false;
        for (at, op) in ops.iter().enumerate() {
            if std::mem::take(&mut folded) {
                continue;
            }
            if let Some(f) = fold_at(&ops, at, inter, frames, self.small_gemv) {
                self.folded_gemm(&f, &w, frames);
                folded = true;
                continue;
            }
            // a convolution's GEMM that the GPU runs on f16 operands when asked (and with
            // F16Pointwise a 1x1 convolution's: right after a SnakeBeta on its input)
            let conv_f16 = match *op {
                Op::Gemm { rate, x, .. } => {
                    conv_gemm_f16(&ops, at, frames * rate, self.small_gemv)
                        || (self.rounding == Rounding::F16Pointwise
                            && at > 0
                            && matches!(ops[at - 1], Op::ActPad { x: ax, act: Act::Snake { .. }, .. } if ax == x))
                }
                _ => false,
            };
            self.op(op, &w, frames, rows, conv_f16);
        }
        self.prog.arena.data = w;
    }

    fn op(&mut self, op: &Op, w: &[f32], frames: usize, rows: usize, conv_f16: bool) {
        let r = self.layout.rows;
        let inputs = self.inputs.clone();
        let meta = Meta(&inputs, r);
        match *op {
            Op::Rvq { tables, out, ld } => {
                let (half, bins, nq) = (
                    self.prog.half,
                    self.prog.codebook_size,
                    self.prog.num_quantizers,
                );
                let codes = &inputs[self.layout.codes()..];
                let o = self.buf(out);
                for f in 0..frames {
                    let z = &mut o[f * ld..f * ld + 2 * half];
                    if meta.frame_row(f) < 0 {
                        z.fill(0.0);
                        continue;
                    }
                    let c = |q: usize| codes[f * nq + q].clamp(0, bins as i32 - 1) as usize;
                    for i in 0..half {
                        z[i] = w[tables + c(0) * half + i];
                        let mut s = 0f32;
                        for q in 1..nq {
                            s += w[tables + (q * bins + c(q)) * half + i];
                        }
                        z[half + i] = s;
                    }
                }
            }
            Op::Gemm {
                w: wo,
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
                let n = frames * rate;
                let xs = self.read(x, (n - 1) * ldx + k);
                let exact = self.small_gemv && gemv_fits(n, k, ldw, ldx, wo, x.off);
                let g = GemmArgs {
                    w: &w[wo..wo + (m - 1) * ldw + k],
                    ldw,
                    m,
                    k,
                    ldx,
                    c,
                    ldc,
                    beta,
                };
                // the few-step GEMV is exact f32 over the weights as read, whatever
                // cuBLAS's arithmetic (the f16 copy with f16 convolutions)
                let round = match self.rounding {
                    Rounding::Tf32 | Rounding::Bf16 if exact => Rounding::Exact,
                    Rounding::F16Conv | Rounding::F16Pointwise if exact => Rounding::F16Weights,
                    Rounding::F16Conv | Rounding::F16Pointwise if !conv_f16 => Rounding::Tf32,
                    r => r,
                };
                self.gemm(&g, &xs, n, round);
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
                let ctx = (taps - 1) * dil;
                let xs = self.scratch[x.buf.index()][x.off..].to_vec();
                let kk = taps * cin;
                let mut out = vec![0f32; steps * ldcol];
                for s in 0..steps {
                    let o = &mut out[s * ldcol..(s + 1) * ldcol];
                    let row = meta.frame_row(s / rate);
                    if row < 0 {
                        continue;
                    }
                    let row = row as usize;
                    let ls = s - meta.first(row) * rate;
                    let rd = hist.map_or(0, |h| {
                        self.hist(meta.slot(row) as usize, h, meta.parity(row), ctx, cin)
                            .0
                    });
                    for j in 0..taps {
                        let v = self.src(&xs, ldx, s, ls, (taps - 1 - j) * dil, rd, ctx, cin);
                        for i in 0..cin {
                            o[j * cin + i] = apply(v[i], w, act, i);
                        }
                    }
                    for (c, v) in o.iter_mut().enumerate().skip(kk) {
                        *v = if c == kk { 1.0 } else { 0.0 };
                    }
                }
                self.buf(col)[..steps * ldcol].copy_from_slice(&out);
                if let Some(h) = hist {
                    self.update_hist(&xs, ldx, cin, ctx, rate, h, rows);
                }
            }
            Op::ActPad {
                x,
                ld,
                c,
                rate,
                act,
            } => {
                let b = self.buf(x);
                for row in 0..frames * rate {
                    let xr = &mut b[row * ld..(row + 1) * ld];
                    for (i, v) in xr.iter_mut().enumerate() {
                        *v = if i < c {
                            apply(*v, w, act, i)
                        } else if i == c {
                            1.0
                        } else {
                            0.0
                        };
                    }
                }
            }
            Op::RmsNorm {
                x,
                ldx,
                c,
                w: g,
                out,
                ldo,
            } => {
                let xs = self.read(x, (frames - 1) * ldx + c);
                let eps = self.prog.eps;
                let o = self.buf(out);
                for f in 0..frames {
                    let xr = &xs[f * ldx..f * ldx + c];
                    let inv = inv_rms(xr, eps);
                    for i in 0..ldo {
                        o[f * ldo + i] = if i < c {
                            w[g + i] * (xr[i] * inv)
                        } else if i == c {
                            1.0
                        } else {
                            0.0
                        };
                    }
                }
            }
            Op::SwiGlu { gu, out } => {
                let inter = self.prog.attn.inter;
                let g = self.read(gu, frames * 2 * inter);
                let o = self.buf(out);
                for f in 0..frames {
                    for i in 0..inter {
                        o[f * inter + i] =
                            swiglu(g[f * 2 * inter + i], g[f * 2 * inter + inter + i]);
                    }
                }
            }
            Op::Attention { qkv, out, kv } => self.attention(&meta, w, qkv, out, kv, frames),
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
                let c = self.prog.latent;
                let ctx = k - 1;
                let steps = frames * rate;
                let xs = self.scratch[x.buf.index()][x.off..].to_vec();
                let mut o = vec![0f32; steps * ldo];
                for s in 0..steps {
                    let row = meta.frame_row(s / rate);
                    if row < 0 {
                        continue;
                    }
                    let row = row as usize;
                    let ls = s - meta.first(row) * rate;
                    let (rd, _) =
                        self.hist(meta.slot(row) as usize, hist, meta.parity(row), ctx, c);
                    let mut v: Vec<f32> = w[bias..bias + c].to_vec();
                    for j in 0..k {
                        let src = self.src(&xs, ldx, s, ls, k - 1 - j, rd, ctx, c);
                        for ch in 0..c {
                            v[ch] += src[ch] * w[taps + j * c + ch];
                        }
                    }
                    let mean = v.iter().sum::<f32>() / c as f32;
                    let var = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f32>() / c as f32;
                    let inv = 1.0 / (var + self.prog.ln_eps).sqrt();
                    for i in 0..ldo {
                        o[s * ldo + i] = if i < c {
                            (v[i] - mean) * inv * w[ln_w + i] + w[ln_b + i]
                        } else if i == c {
                            1.0
                        } else {
                            0.0
                        };
                    }
                }
                self.buf(out)[..steps * ldo].copy_from_slice(&o);
                self.update_hist(&xs, ldx, c, ctx, rate, hist, rows);
            }
            Op::Final {
                x,
                c,
                k,
                act,
                w: fw,
                bias,
                rate,
                hist,
            } => {
                let ctx = k - 1;
                let steps = frames * rate;
                let xs = self.scratch[x.buf.index()][x.off..].to_vec();
                let mut pcm = vec![0f32; steps];
                for (s, out) in pcm.iter_mut().enumerate() {
                    let row = meta.frame_row(s / rate);
                    if row < 0 {
                        continue;
                    }
                    let row = row as usize;
                    let ls = s - meta.first(row) * rate;
                    let (rd, _) =
                        self.hist(meta.slot(row) as usize, hist, meta.parity(row), ctx, c);
                    let mut acc = 0f32;
                    for j in 0..k {
                        let v = self.src(&xs, c, s, ls, k - 1 - j, rd, ctx, c);
                        for i in 0..c {
                            acc += w[fw + j * c + i] * apply(v[i], w, act, i);
                        }
                    }
                    *out = (acc + bias).clamp(-1.0, 1.0);
                }
                self.buf(View {
                    buf: Buf::Pcm,
                    off: 0,
                })[..steps]
                    .copy_from_slice(&pcm);
                self.update_hist(&xs, c, c, ctx, rate, hist, rows);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(
        &mut self,
        meta: &Meta<'_>,
        w: &[f32],
        qkv: View,
        out: View,
        kv: usize,
        frames: usize,
    ) {
        let a = self.prog.attn;
        let (hd, half, kvd, ldq) = (
            a.head_dim,
            a.head_dim / 2,
            a.kv_heads * a.head_dim,
            a.ld_qkv,
        );
        let rep = a.heads / a.kv_heads;
        let q = self.read(qkv, frames * ldq);
        let rope = |x: &[f32], i: usize, pos: usize| {
            let j = if i < half { i } else { i - half };
            let ang = pos as f32 * w[a.inv_freq + j];
            let (c, s) = (ang.cos(), ang.sin());
            if i < half {
                x[i] * c - x[i + half] * s
            } else {
                x[i] * c + x[j] * s
            }
        };
        let mut o = vec![0f32; frames * a.ld_attn];
        // Blocks run in any order on the GPU: the last frames go first here, so a ring
        // write that aliased a key still to be read would show.
        for f in (0..frames).rev() {
            let row = meta.frame_row(f);
            if row < 0 {
                continue;
            }
            let row = row as usize;
            let (first, pos0) = (meta.first(row), meta.pos(row));
            let p = pos0 + f - first;
            let base = meta.slot(row) as usize * self.prog.state_stride + kv;
            let (kc, vc) = (base, base + a.ring * kvd);
            for h in 0..a.heads {
                let g = h / rep;
                let qrow = &q[f * ldq + h * hd..];
                let krow = &q[f * ldq + a.heads * hd + g * hd..];
                let qs: Vec<f32> = (0..hd).map(|i| rope(qrow, i, p)).collect();
                if h % rep == 0 {
                    for i in 0..hd {
                        let at = (p % a.ring) * kvd + g * hd + i;
                        self.state[kc + at] = rope(krow, i, p);
                        self.state[vc + at] = krow[kvd + i];
                    }
                }
                let lo = (p + 1).saturating_sub(a.window);
                let mut sc: Vec<f32> = (lo..=p)
                    .map(|kp| {
                        let d: f32 = if kp < pos0 {
                            let at = kc + (kp % a.ring) * kvd + g * hd;
                            (0..hd).map(|i| qs[i] * self.state[at + i]).sum()
                        } else {
                            let kr = &q[(first + kp - pos0) * ldq + a.heads * hd + g * hd..];
                            (0..hd).map(|i| qs[i] * rope(kr, i, kp)).sum()
                        };
                        d * a.scale
                    })
                    .collect();
                let m = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                for s in sc.iter_mut() {
                    *s = (*s - m).exp();
                    sum += *s;
                }
                for i in 0..hd {
                    let mut acc = 0f32;
                    for (kk, s) in sc.iter().enumerate() {
                        let kp = lo + kk;
                        let v = if kp < pos0 {
                            self.state[vc + (kp % a.ring) * kvd + g * hd + i]
                        } else {
                            q[(first + kp - pos0) * ldq + a.heads * hd + kvd + g * hd + i]
                        };
                        acc += (s / sum) * v;
                    }
                    o[f * a.ld_attn + h * hd + i] = acc;
                }
            }
        }
        self.buf(out)[..frames * a.ld_attn].copy_from_slice(&o);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tts_model::checkpoint::SafetensorsFiles;
    use tts_model::reference::load_codec;
    use tts_model::{LoadOptions, Model};

    use super::*;
    use crate::weights::HostLoader;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
    }

    struct Case {
        model: Model,
        codes: Vec<Frame>,
        official: Vec<f32>,
    }

    fn case(name: &str) -> Case {
        let dir = fixtures().join("cases");
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        let codes: Vec<Frame> = serde_json::from_value(json["codes"].clone()).unwrap();
        let model_name = json["model"].as_str().unwrap();
        let model = Model::from_dir(
            &fixtures().join("models").join(model_name),
            LoadOptions::default(),
        )
        .unwrap();
        let st =
            SafetensorsFiles::open_files(vec![dir.join(format!("{name}.safetensors"))]).unwrap();
        let shape = st.shape("pcm").unwrap().to_vec();
        let official = st.tensor("pcm", &shape).unwrap().to_f32();
        Case {
            model,
            codes,
            official,
        }
    }

    fn cpu_decode(model: &Model, codes: &[Frame]) -> Vec<f32> {
        let dec = load_codec(model).unwrap();
        let mut st = dec.new_state();
        dec.decode(codes, &mut st)
    }

    fn emu(model: &Model, slots: usize, per_call: usize) -> Emu {
        let w = CodecW::load(&model.codec, &mut HostLoader(&model.codec_weights)).unwrap();
        Emu::new(&model.codec, w, slots, per_call)
    }

    fn max_abs(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
    }

    /// Three streams decoded together in one call per step, each with its own chunking
    /// (frame by frame, uneven chunks, larger chunks split into passes by the caps).
    fn streams_together(e: &mut Emu, codes: &[Frame]) -> Vec<Vec<f32>> {
        let chunkings: [&[usize]; 3] = [&[1], &[1, 2, 3, 5, 8, 13, 4, 7, 30, 6, 11], &[40, 7]];
        let mut at = [0usize; 3];
        let mut out = vec![Vec::new(); 3];
        let mut step = 0;
        while at.iter().any(|&a| a < codes.len()) {
            let mut rows = Vec::new();
            let mut ends = [0usize; 3];
            for s in 0..3 {
                let c = chunkings[s][step % chunkings[s].len()];
                ends[s] = (at[s] + c).min(codes.len());
                if ends[s] > at[s] {
                    // slots in reverse order: rows need not be sorted by slot
                    rows.push((2 - s, &codes[at[s]..ends[s]]));
                }
            }
            let res = e.decode(&rows);
            for (r, (slot, _)) in rows.iter().enumerate() {
                out[2 - slot].extend_from_slice(&res[r]);
            }
            at = ends;
            step += 1;
        }
        out
    }

    /// Rounding noise of this fixture network: the CPU reference and the official f32
    /// decode differ by 6.2e-5 (w72), so an f32 re-implementation is held to 2e-4.
    const EXACT_TOL: f32 = 2e-4;

    /// The op list, re-laid-out weights and stream state reproduce the CPU reference
    /// (and the official decode) whole, chunked and batched, past the window.
    #[test]
    fn emulated_program_matches_the_cpu_reference() {
        for name in ["codec_long_w72", "codec_long_w16"] {
            let c = case(name);
            let want = cpu_decode(&c.model, &c.codes);
            assert!(
                max_abs(&want, &c.official) < 1e-3,
                "{name}: CPU reference vs official"
            );
            // 3 slots x 16 frames per call: passes of <= 48 frames, rows of <= 16 frames.
            let mut e = emu(&c.model, 3, 16);
            // 2 RVQ + 2 pre_conv + 1 + 8 per layer + 2 + (f + 4) per upsample + 2
            // decoder_in + 14 per block + 1 final (2 layers here; 142 at release size).
            assert_eq!(
                e.prog.ops.len(),
                2 + 2 + 1 + 8 * 2 + 2 + 2 * 6 + 2 + 4 * 14 + 1
            );
            let whole = e.decode(&[(1, &c.codes)]).remove(0);
            let err = max_abs(&whole, &want);
            eprintln!(
                "{name}: emulated whole vs CPU max abs {err:.2e}, vs official {:.2e}",
                max_abs(&whole, &c.official)
            );
            assert!(
                err < EXACT_TOL,
                "{name}: whole decode differs from the CPU reference by {err}"
            );
            assert!(max_abs(&whole, &c.official) < 1e-3);
            e.reset_slot(1);
            for (s, pcm) in streams_together(&mut e, &c.codes).iter().enumerate() {
                let err = max_abs(pcm, &want);
                assert!(
                    err < EXACT_TOL,
                    "{name}: stream {s} differs from the CPU reference by {err}"
                );
            }
            // a reset slot starts over
            e.reset_slot(0);
            let again = e.decode(&[(0, &c.codes[..5])]).remove(0);
            assert!(max_abs(&again, &want[..5 * 1920]) < EXACT_TOL);
            // Passes of one frame: each layer's two norms and its SwiGLU fold into the
            // GEMMs after them (the final norm feeds a biased GEMM and stays); and unfolded.
            let ops = &e.prog.ops;
            let folds: Vec<FoldedGemm> = (0..ops.len())
                .filter_map(|i| fold_at(ops, i, e.prog.attn.inter, 1, true))
                .collect();
            assert_eq!(folds.len(), 3 * 2, "{name}: {folds:?}");
            for small in [true, false] {
                e.small_gemv = small;
                e.reset_slot(2);
                let mut pcm = Vec::new();
                for f in 0..6 {
                    pcm.extend(e.decode(&[(2, &c.codes[f..f + 1])]).remove(0));
                }
                let err = max_abs(&pcm, &want[..6 * 1920]);
                assert!(
                    err < EXACT_TOL,
                    "{name}: frame by frame, small GEMV {small}: {err}"
                );
            }
        }
    }

    /// `(max abs, rms)` of `a - b`, and the rms of `b`.
    fn errors(a: &[f32], b: &[f32]) -> (f32, f64, f64) {
        let n = a.len().max(1) as f64;
        let rms = (a
            .iter()
            .zip(b)
            .map(|(x, y)| ((x - y) as f64).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        let sig = (b.iter().map(|y| (*y as f64).powi(2)).sum::<f64>() / n).sqrt();
        (max_abs(a, b), rms, sig)
    }

    /// Predicts the error of the GPU's default TF32 GEMMs on the fixture (the bound the
    /// GPU test uses), and of bf16 weights, bf16 operands or f16 convolutions. This random
    /// network amplifies rounding strongly: TF32 operands (relative 2^-11) give max abs
    /// 2.7e-2, rms 4.2e-3 against a signal rms of 0.24; bf16 operands on the cuBLAS GEMMs
    /// 8.7e-2 / 1.5e-2; f16 operands on the convolutions' GEMMs and f16 weights in the
    /// few-step GEMVs 2.8e-2 / 4.9e-3 (2.6e-2 / 4.2e-3 with those GEMVs on f32 weights);
    /// the residual units' 1x1 convolutions on f16 as well (`F16Pointwise`) the same to
    /// four digits here (this fixture's units have 16 to 2 channels).
    #[test]
    fn emulated_rounding_error_on_the_fixture() {
        let c = case("codec_long_w72");
        let want = cpu_decode(&c.model, &c.codes);
        let (mut err, mut outs) = (Vec::new(), Vec::new());
        for r in [
            Rounding::Tf32,
            Rounding::Bf16Weights,
            Rounding::Bf16,
            Rounding::F16Conv,
            Rounding::F16Pointwise,
        ] {
            let mut e = emu(&c.model, 1, 8);
            e.rounding = r;
            let got = e.decode(&[(0, &c.codes)]).remove(0);
            let (max, rms, sig) = errors(&got, &want);
            outs.push(got);
            eprintln!(
                "fixture, {r:?} GEMMs: max abs {max:.4e}, rms {rms:.4e} (signal rms {sig:.2e})"
            );
            // the GPU test's TF32 bounds (gpu_codec.rs) hold for both roundings
            assert!(
                max < 0.15 && rms < 2e-2,
                "{r:?} emulation error {max} / {rms}"
            );
            err.push(rms);
        }
        // bf16 weights or operands (8-bit mantissa) cost more than TF32 operands (11-bit)
        assert!(
            err[1] > err[0],
            "bf16 weights {} vs TF32 {}",
            err[1],
            err[0]
        );
        assert!(
            err[2] > err[0],
            "bf16 operands {} vs TF32 {}",
            err[2],
            err[0]
        );
        // f16 convolutions and GEMV weights (TF32's mantissa, f16's range) cost about what
        // TF32 does, and they do change the arithmetic (some GEMMs take the f16 path)
        assert!(
            err[3] < 1.25 * err[0],
            "f16 convolutions {} vs TF32 {}",
            err[3],
            err[0]
        );
        assert_ne!(outs[3], outs[0], "no GEMM took the f16 path");
        // the 1x1 convolutions on f16 as well: a change, within TF32's bounds (the loop)
        assert_ne!(outs[4], outs[3], "no 1x1 convolution took the f16 path");
        assert_eq!(
            "TF32".parse::<crate::codec::CodecPrecision>(),
            Ok(crate::codec::CodecPrecision::Tf32)
        );
        assert_eq!(
            "f16".parse::<crate::codec::CodecPrecision>(),
            Ok(crate::codec::CodecPrecision::F16)
        );
        assert!("bf16".parse::<crate::codec::CodecPrecision>().is_err());
    }

    /// The release geometry (random weights), a few frames: exact, TF32, bf16-weight and f16
    /// emulation vs the CPU reference. Slow in debug builds (about 10 GFLOP on the host).
    /// 3 frames, 5,651 of 5,760 samples clipped (2026-12-04): rms 2.8e-4 exact, 0.103
    /// TF32, 0.245 bf16 weights, 0.125 f16 convolutions, 0.131 with the 1x1 convolutions
    /// on f16 too (max abs 2.0 for all but exact: sign flips of clipped samples).
    #[test]
    #[ignore = "slow: full-size codec on the CPU"]
    fn emulated_release_geometry() {
        let model = Model::load("random:1.7b", LoadOptions::default()).unwrap();
        let codes: Vec<Frame> = (0..3u32)
            .map(|f| std::array::from_fn(|q| (f * 331 + q as u32 * 97) % 2048))
            .collect();
        let want = cpu_decode(&model, &codes);
        for r in [
            Rounding::Exact,
            Rounding::Tf32,
            Rounding::Bf16Weights,
            Rounding::F16Conv,
            Rounding::F16Pointwise,
        ] {
            let mut e = emu(&model, 1, 2);
            e.rounding = r;
            let got = e.decode(&[(0, &codes)]).remove(0);
            let (max, rms, sig) = errors(&got, &want);
            let clipped = want.iter().filter(|v| v.abs() >= 1.0).count();
            eprintln!("release geometry, {r:?}: max abs {max:.2e}, rms {rms:.2e} (signal rms {sig:.2e}, {clipped} of {} samples clipped)", want.len());
        }
    }
}
