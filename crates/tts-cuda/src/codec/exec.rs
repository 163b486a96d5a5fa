//! Runs a codec [`Program`] on the GPU: one launch (kernel or cuBLAS GEMM) per op, all on
//! the device's stream, reading the pass inputs already written to the device. Nothing
//! here allocates, copies from the host or synchronises, so a pass can be captured in a
//! CUDA graph.

use super::plan::{Act, Buf, Op, Program, View};
use super::state::InputLayout;
use crate::device::{Arg, DBuf, GemmType, Gpu};
use crate::error::CudaError;

/// Device memory of a codec.
pub struct DevBufs {
    pub weights: DBuf<f32>,
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
    gemm: GemmType,
) -> Result<(), CudaError> {
    let meta = d.inputs.at(layout.meta());
    let codes = d.inputs.at(layout.codes());
    let (state, stride, cap_rows) = (d.state.ptr, p.state_stride, layout.rows);
    let a = &p.attn;
    for op in &p.ops {
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
            } => gpu.gemm(
                true,
                false,
                m,
                frames * rate,
                k,
                d.w(w),
                ldw,
                d.view(x),
                ldx,
                beta,
                d.view(c),
                ldc,
                gemm,
            )?,
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
                let hist_blocks = if hist.is_some() { rows * ctx } else { 0 };
                let (al, ib) = d.act(act);
                gpu.launch(
                    "codec_im2col",
                    grid(steps + hist_blocks),
                    128,
                    &[
                        Arg::P(d.view(x)),
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
                        Arg::P(d.view(col)),
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
                gpu.launch(
                    "codec_final",
                    grid(steps.div_ceil(8) + rows * (k - 1)),
                    256,
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
                        Arg::P(d.view(View {
                            buf: Buf::Pcm,
                            off: 0,
                        })),
                    ],
                )?
            }
        }
    }
    Ok(())
}
