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

mod attention;
mod numerics;

use numerics::{apply, bf16, f16, inv_rms, swiglu, tf32, RoundFn};

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
                // cuBLAS's arithmetic (the f16 copy with f16 convolutions); on tensor cores
                // (codec_gemv_mma.cu) its inputs keep ~22 bits (f16 hi + lo), not emulated
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
}

#[cfg(test)]
mod tests;
