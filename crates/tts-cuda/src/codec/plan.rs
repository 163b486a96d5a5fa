//! The codec decoder as a program: weights re-laid out into one arena (see `build`), and
//! the list of operations (kernels and GEMMs over named scratch buffers) that decodes one
//! pass.
//!
//! The program is pure data built on the host, so the same list drives the GPU
//! ([`super::exec`]) and, in tests, a plain-Rust emulation of every kernel that is checked
//! against the CPU reference: buffer sizes, leading dimensions, offsets, history and KV
//! bookkeeping are exercised without a GPU.

use super::layers::Arena;

/// Scratch buffers, each sized per frame times the pass's frame capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    /// RVQ sums `[F][2·half]`.
    Z,
    /// RVQ output `[F][codebook_dim]`.
    X0,
    /// im2col of the current conv `[steps][Kp]`.
    Col,
    /// pre_conv output `[F][Kp(latent)]` (constant ones column).
    P,
    /// Transformer residual stream `[F][hidden]`.
    H,
    /// Normalised rows `[F][Kp(hidden)]`.
    Hn,
    Qkv,
    Attn,
    Gu,
    Sw,
    /// Transformer output `[F][Kp(latent)]` (constant ones column).
    T0,
    /// ConvNeXt front output `[steps][Kp(latent)]`.
    D,
    /// ConvNeXt hidden `[steps][Kp(4·latent)]`.
    E,
    /// Decoder-block activations (ping-pong) `[steps][channels]`.
    XA,
    XB,
    /// Residual-unit hidden `[steps][Kp(channels)]`.
    Hb,
    /// Output samples `[F·samples_per_frame]`.
    Pcm,
    /// Upsample stage output `[steps][Kp(latent)]` (constant ones column).
    Up(usize),
}

pub const FIXED_BUFS: usize = 17;

impl Buf {
    pub fn index(self) -> usize {
        match self {
            Buf::Z => 0,
            Buf::X0 => 1,
            Buf::Col => 2,
            Buf::P => 3,
            Buf::H => 4,
            Buf::Hn => 5,
            Buf::Qkv => 6,
            Buf::Attn => 7,
            Buf::Gu => 8,
            Buf::Sw => 9,
            Buf::T0 => 10,
            Buf::D => 11,
            Buf::E => 12,
            Buf::XA => 13,
            Buf::XB => 14,
            Buf::Hb => 15,
            Buf::Pcm => 16,
            Buf::Up(u) => FIXED_BUFS + u,
        }
    }
}

/// Element `off` of a scratch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    pub buf: Buf,
    pub off: usize,
}

/// Activation applied to an input as it is read (offsets into the weight arena).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Act {
    None,
    Snake { alpha: usize, inv_beta: usize },
    Gelu,
}

impl Act {
    pub fn code(self) -> i32 {
        match self {
            Act::None => 0,
            Act::Snake { .. } => 1,
            Act::Gelu => 2,
        }
    }
}

/// One step of a pass. Row counts are `frames × rate`; weights are arena offsets; `hist`
/// and `kv` are offsets inside a slot's state region.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `codec_rvq`.
    Rvq { tables: usize, out: View, ld: usize },
    /// `C[n][m] = X[n][..k] · W[m][..k]ᵀ + beta·C` for `n = frames·rate` rows.
    Gemm {
        w: usize,
        ldw: usize,
        m: usize,
        k: usize,
        x: View,
        ldx: usize,
        c: View,
        ldc: usize,
        rate: usize,
        beta: f32,
    },
    /// `codec_im2col` (history of `(taps-1)·dil` steps at `hist` when that is > 0).
    Im2col {
        x: View,
        ldx: usize,
        cin: usize,
        taps: usize,
        dil: usize,
        rate: usize,
        act: Act,
        hist: Option<usize>,
        col: View,
        ldcol: usize,
    },
    /// `codec_act_pad` in place.
    ActPad {
        x: View,
        ld: usize,
        c: usize,
        rate: usize,
        act: Act,
    },
    /// `codec_rms_norm` at the frame rate.
    RmsNorm {
        x: View,
        ldx: usize,
        c: usize,
        w: usize,
        out: View,
        ldo: usize,
    },
    /// `codec_attention` of one layer (`kv`: its ring in the slot state).
    Attention { qkv: View, out: View, kv: usize },
    /// `codec_swiglu` at the frame rate.
    SwiGlu { gu: View, out: View },
    /// `codec_dw_ln`.
    DwLn {
        x: View,
        ldx: usize,
        taps: usize,
        bias: usize,
        k: usize,
        ln_w: usize,
        ln_b: usize,
        rate: usize,
        hist: usize,
        out: View,
        ldo: usize,
    },
    /// `codec_final`.
    Final {
        x: View,
        c: usize,
        k: usize,
        act: Act,
        w: usize,
        bias: f32,
        rate: usize,
        hist: usize,
    },
}

/// A buffer whose ones/zero columns are written once at start-up (GEMM outputs that feed a
/// biased GEMM; GEMMs write only the first `c` columns).
#[derive(Debug, Clone, Copy)]
pub struct Pad {
    pub buf: Buf,
    pub ld: usize,
    pub c: usize,
    pub rate: usize,
}

/// Attention geometry shared by every layer.
#[derive(Debug, Clone, Copy)]
pub struct AttnGeo {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub window: usize,
    pub ring: usize,
    pub scale: f32,
    /// Arena offset of the RoPE inverse frequencies `[hd/2]`.
    pub inv_freq: usize,
    pub ld_qkv: usize,
    pub ld_attn: usize,
    pub inter: usize,
}

/// Everything `DevCodec` uploads and runs.
#[derive(Debug)]
pub struct Program {
    pub arena: Arena,
    pub ops: Vec<Op>,
    /// Floats per frame of each buffer (by [`Buf::index`]).
    pub per_frame: Vec<usize>,
    pub pads: Vec<Pad>,
    pub state_stride: usize,
    pub attn: AttnGeo,
    pub eps: f32,
    pub ln_eps: f32,
    pub samples_per_frame: usize,
    pub num_quantizers: usize,
    pub codebook_size: usize,
    pub half: usize,
    pub latent: usize,
}

/// The op before a GEMM that a few-step GEMV folds in as its input prologue (`code`: the
/// kernel's `pro`; 0 is a plain GEMM).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Prologue {
    /// `codec_rms_norm` with gain `w` (arena offset).
    Norm { w: usize },
    /// `codec_swiglu`: the input is gate | up, `k` wide each.
    SwiGlu,
}

impl Prologue {
    pub fn code(self) -> i32 {
        match self {
            Prologue::Norm { .. } => 1,
            Prologue::SwiGlu => 2,
        }
    }
}

/// A GEMM at the frame rate with the op before it folded in (see [`fold_into_gemm`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FoldedGemm {
    pub pro: Prologue,
    /// The prologue's input (the folded op's input) and its leading dimension.
    pub x: View,
    pub ldx: usize,
    pub w: usize,
    pub ldw: usize,
    pub m: usize,
    pub k: usize,
    pub c: View,
    pub ldc: usize,
    pub beta: f32,
}

/// `ops[i]` (an `RmsNorm` or `SwiGlu`) and the frame-rate GEMM right after it that reads
/// exactly its output, as one GEMM with a prologue. The folded op's output buffer is then
/// never written: `build` gives each such buffer no other reader (the emulation, which
/// folds the same pairs, checks that against the CPU reference). An `RmsNorm` that also
/// writes a ones column (its GEMM has a bias) is not folded.
pub fn fold_into_gemm(ops: &[Op], i: usize, inter: usize) -> Option<FoldedGemm> {
    let Some(&Op::Gemm {
        w,
        ldw,
        m,
        k,
        x: gx,
        ldx: _,
        c,
        ldc,
        rate: 1,
        beta,
    }) = ops.get(i + 1)
    else {
        return None;
    };
    let (pro, x, ldx) = match *ops.get(i)? {
        Op::RmsNorm {
            x,
            ldx,
            c: nc,
            w: g,
            out,
            ..
        } if out == gx && k == nc => (Prologue::Norm { w: g }, x, ldx),
        Op::SwiGlu { gu, out } if out == gx && k == inter => (Prologue::SwiGlu, gu, 2 * inter),
        _ => return None,
    };
    Some(FoldedGemm {
        pro,
        x,
        ldx,
        w,
        ldw,
        m,
        k,
        c,
        ldc,
        beta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(buf: Buf) -> View {
        View { buf, off: 0 }
    }

    fn gemm(x: Buf, k: usize, rate: usize) -> Op {
        Op::Gemm {
            w: 64,
            ldw: k,
            m: 32,
            k,
            x: at(x),
            ldx: k,
            c: at(Buf::H),
            ldc: 32,
            rate,
            beta: 1.0,
        }
    }

    fn norm(out: Buf, c: usize, ldo: usize) -> Op {
        Op::RmsNorm {
            x: at(Buf::H),
            ldx: c,
            c,
            w: 128,
            out: at(out),
            ldo,
        }
    }

    #[test]
    fn a_norm_or_swiglu_folds_into_the_frame_rate_gemm_reading_it() {
        let ops = [norm(Buf::Hn, 16, 16), gemm(Buf::Hn, 16, 1)];
        let f = fold_into_gemm(&ops, 0, 8).expect("norm -> gemm");
        assert_eq!(f.pro, Prologue::Norm { w: 128 });
        assert_eq!(
            (f.x, f.ldx, f.k, f.m, f.beta),
            (at(Buf::H), 16, 16, 32, 1.0)
        );
        let ops = [
            Op::SwiGlu {
                gu: at(Buf::Gu),
                out: at(Buf::Sw),
            },
            gemm(Buf::Sw, 8, 1),
        ];
        let f = fold_into_gemm(&ops, 0, 8).expect("swiglu -> gemm");
        assert_eq!((f.pro, f.x, f.ldx), (Prologue::SwiGlu, at(Buf::Gu), 16));
        // the GEMM itself, or the last op, starts nothing
        assert!(fold_into_gemm(&ops, 1, 8).is_none());
        assert!(fold_into_gemm(&ops, 2, 8).is_none());
    }

    #[test]
    fn nothing_folds_that_would_change_the_gemm_input() {
        // the norm also writes the ones column of a biased GEMM (k = c + pad)
        assert!(fold_into_gemm(&[norm(Buf::Hn, 16, 20), gemm(Buf::Hn, 20, 1)], 0, 8).is_none());
        // the GEMM reads another buffer
        assert!(fold_into_gemm(&[norm(Buf::Hn, 16, 16), gemm(Buf::P, 16, 1)], 0, 8).is_none());
        // not at the frame rate
        assert!(fold_into_gemm(&[norm(Buf::Hn, 16, 16), gemm(Buf::Hn, 16, 2)], 0, 8).is_none());
        // a SwiGLU whose width is not the GEMM's K
        let sw = Op::SwiGlu {
            gu: at(Buf::Gu),
            out: at(Buf::Sw),
        };
        assert!(fold_into_gemm(&[sw, gemm(Buf::Sw, 8, 1)], 0, 4).is_none());
        // other ops before a GEMM
        let pad = Op::ActPad {
            x: at(Buf::E),
            ld: 16,
            c: 15,
            rate: 1,
            act: Act::Gelu,
        };
        assert!(fold_into_gemm(&[pad, gemm(Buf::E, 16, 1)], 0, 8).is_none());
    }
}
