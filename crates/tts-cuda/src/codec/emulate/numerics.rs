//! The emulation's scalar maths: operand rounding and the activations, as the codec's
//! kernels compute them.

use crate::codec::plan::Act;

/// One operand's rounding.
pub(super) type RoundFn = fn(f32) -> f32;

pub(super) fn bf16(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

pub(super) fn f16(v: f32) -> f32 {
    half::f16::from_f32(v.clamp(-65504.0, 65504.0)).to_f32()
}

pub(super) fn tf32(v: f32) -> f32 {
    f32::from_bits(v.to_bits().wrapping_add(0x1000) & 0xffff_e000)
}

/// The activation of `codec_act` (codec.cu).
pub(super) fn apply(v: f32, w: &[f32], act: Act, ch: usize) -> f32 {
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
pub(super) fn erf(x: f32) -> f32 {
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
pub(super) fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    1.0 / (ms + eps).sqrt()
}

/// `silu(gate) · up`, as `codec_swiglu` (and the folded SwiGLU of `codec_gemv`).
pub(super) fn swiglu(gate: f32, up: f32) -> f32 {
    gate / (1.0 + (-gate).exp()) * up
}
