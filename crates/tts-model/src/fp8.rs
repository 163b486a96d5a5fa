//! FP8 (E4M3) weights: which decoder-layer matrices are stored in 8 bits, and the one
//! quantizer every backend uses, so the CPU reference and a GPU backend run on the same
//! numbers.
//!
//! Each output row `r` of a matrix gets a power-of-two scale `s_r` chosen so that the row's
//! largest magnitude lands in (224, 448] (E4M3's top binade, no saturation); every weight is
//! then rounded to the nearest E4M3 value of `w / s_r` (ties to even). Because `s_r` is a
//! power of two and E4M3 has 3 mantissa bits, every dequantized weight `q · s_r` is exactly
//! representable in bf16: a backend may multiply either the 8-bit codes (and apply `s_r` to
//! the row's sum) or a bf16 copy of the dequantized matrix and compute the same products.

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Which matrices of the decoder layers are FP8. Embeddings, the text projection, the
/// codec head and the code predictor's heads always keep their stored precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fp8Scope {
    /// No FP8 weights (the default).
    #[default]
    None,
    /// The talker's MLPs (gate, up, down: ~75 % of its weight bytes).
    TalkerMlp,
    /// Every linear layer of both decoder stacks (q, k, v, o, gate, up, down).
    Layers,
}

/// The two decoder stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    Talker,
    CodePredictor,
}

/// The two halves of a decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerPart {
    /// q, k, v and o projections.
    Attention,
    /// gate, up and down projections.
    Mlp,
}

impl Fp8Scope {
    /// Whether `part` of the layers of `stack` is stored in FP8.
    pub fn covers(self, stack: Stack, part: LayerPart) -> bool {
        match self {
            Fp8Scope::None => false,
            Fp8Scope::TalkerMlp => stack == Stack::Talker && part == LayerPart::Mlp,
            Fp8Scope::Layers => true,
        }
    }
}

impl FromStr for Fp8Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "off" | "0" | "" => Ok(Fp8Scope::None),
            "talker-mlp" => Ok(Fp8Scope::TalkerMlp),
            "layers" => Ok(Fp8Scope::Layers),
            _ => Err(format!(
                "unknown FP8 scope `{s}` (use none, talker-mlp or layers)"
            )),
        }
    }
}

impl fmt::Display for Fp8Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fp8Scope::None => "none",
            Fp8Scope::TalkerMlp => "talker-mlp",
            Fp8Scope::Layers => "layers",
        })
    }
}

/// The largest finite E4M3 magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// The value of an E4M3 code (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; 0x7f and
/// 0xff are NaN, which [`e4m3_encode`] never produces).
pub fn e4m3_decode(code: u8) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((code >> 3) & 0x0f);
    let m = f32::from(code & 0x07);
    if e == 0 && m == 0.0 {
        return sign * 0.0;
    }
    if (code & 0x7f) == 0x7f {
        return f32::NAN;
    }
    let v = if e == 0 {
        m * (-9f32).exp2()
    } else {
        (1.0 + m / 8.0) * ((e - 7) as f32).exp2()
    };
    sign * v
}

/// The E4M3 code nearest to `v` (ties to the even code), saturating at ±448.
pub fn e4m3_encode(v: f32) -> u8 {
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    let a = v.abs();
    if a.is_nan() {
        return sign; // never produced by finite weights; keep it harmless
    }
    if a >= E4M3_MAX {
        return sign | 0x7e;
    }
    // The binade's step: 2^(e-3) for normals (e >= -6), 2^-9 for subnormals.
    let e = if a < (-6f32).exp2() {
        -6
    } else {
        ((a.to_bits() >> 23) as i32 - 127).max(-6)
    };
    let step = ((e - 3) as f32).exp2();
    let q = a / step; // exact: a power-of-two division
    let mut n = q.floor();
    let frac = q - n;
    if frac > 0.5 || (frac == 0.5 && (n as u32) % 2 == 1) {
        n += 1.0;
    }
    // n counts steps of this binade: 8..=16 for normals (16 = the next binade's 1.0),
    // 0..=8 for subnormals (8 = the smallest normal).
    let n = n as u32;
    let code = if a < (-6f32).exp2() {
        n // 0..=8: the subnormals, and 8 is the smallest normal's code
    } else {
        (((e + 7) as u32) << 3) + (n - 8)
    };
    sign | code.min(0x7e) as u8
}

/// A row-scaled FP8 matrix `[rows][cols]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Rows {
    pub rows: usize,
    pub cols: usize,
    /// E4M3 codes, row-major.
    pub codes: Vec<u8>,
    /// Each row's power-of-two scale.
    pub scales: Vec<f32>,
}

/// The power-of-two scale that puts `max_abs` into (224, 448] (1 for an all-zero row).
fn row_scale(max_abs: f32) -> f32 {
    if max_abs == 0.0 || !max_abs.is_finite() {
        return 1.0;
    }
    let mut s = (max_abs / E4M3_MAX).log2().ceil().exp2();
    // guard against log2 rounding at exact powers of two
    while max_abs / s > E4M3_MAX {
        s *= 2.0;
    }
    while max_abs / (s * 0.5) <= E4M3_MAX {
        s *= 0.5;
    }
    s
}

impl Fp8Rows {
    /// Quantizes a row-major `[rows][cols]` f32 matrix.
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(w.len(), rows * cols, "matrix size");
        let mut codes = vec![0u8; rows * cols];
        let mut scales = vec![1f32; rows];
        if cols > 0 {
            codes
                .par_chunks_mut(cols)
                .zip(scales.par_iter_mut())
                .zip(w.par_chunks(cols))
                .for_each(|((c, s), row)| {
                    *s = row_scale(row.iter().fold(0f32, |m, v| m.max(v.abs())));
                    for (c, &v) in c.iter_mut().zip(row) {
                        *c = e4m3_encode(v / *s);
                    }
                });
        }
        Self {
            rows,
            cols,
            codes,
            scales,
        }
    }

    /// The dequantized matrix, row-major f32 (every value exact in bf16).
    pub fn dequantize(&self) -> Vec<f32> {
        let table: Vec<f32> = (0..=255u8).map(e4m3_decode).collect();
        let mut out = vec![0f32; self.codes.len()];
        if self.cols > 0 {
            out.par_chunks_mut(self.cols)
                .zip(self.codes.par_chunks(self.cols))
                .zip(self.scales.par_iter())
                .for_each(|((o, c), &s)| {
                    for (o, &c) in o.iter_mut().zip(c) {
                        *o = table[c as usize] * s;
                    }
                });
        }
        out
    }
}

/// Replaces a row-major matrix by its FP8-dequantized values (what an FP8 backend computes
/// with).
pub fn round_trip(w: &mut [f32], rows: usize, cols: usize) {
    let q = Fp8Rows::quantize(w, rows, cols);
    w.copy_from_slice(&q.dequantize());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finite positive E4M3 value, by code.
    fn positives() -> Vec<(u8, f32)> {
        (0u8..=0x7e).map(|c| (c, e4m3_decode(c))).collect()
    }

    #[test]
    fn decoding_follows_the_e4m3_layout() {
        assert_eq!(e4m3_decode(0x00), 0.0);
        assert_eq!(e4m3_decode(0x01), 2f32.powi(-9)); // smallest subnormal
        assert_eq!(e4m3_decode(0x07), 7.0 * 2f32.powi(-9));
        assert_eq!(e4m3_decode(0x08), 2f32.powi(-6)); // smallest normal
        assert_eq!(e4m3_decode(0x38), 1.0);
        assert_eq!(e4m3_decode(0x3c), 1.5);
        assert_eq!(e4m3_decode(0x7e), 448.0);
        assert_eq!(e4m3_decode(0xb8), -1.0);
        assert!(e4m3_decode(0x7f).is_nan());
        // strictly increasing over the positive codes
        let p = positives();
        assert!(p.windows(2).all(|w| w[0].1 < w[1].1));
    }

    #[test]
    fn encoding_gives_the_nearest_code_ties_to_even() {
        let p = positives();
        // every code encodes to itself
        for &(c, v) in &p {
            assert_eq!(e4m3_encode(v), c, "{v}");
            assert_eq!(e4m3_encode(-v), c | 0x80, "-{v}");
        }
        // midpoints go to the even code; points beside them to the nearer one
        for w in p.windows(2) {
            let ((c0, v0), (c1, v1)) = (w[0], w[1]);
            let mid = 0.5 * (v0 + v1);
            let even = if c0 % 2 == 0 { c0 } else { c1 };
            assert_eq!(e4m3_encode(mid), even, "tie between {v0} and {v1}");
            let d = (v1 - v0) * 0.01;
            assert_eq!(e4m3_encode(mid - d), c0, "below the midpoint of {v0}, {v1}");
            assert_eq!(e4m3_encode(mid + d), c1, "above the midpoint of {v0}, {v1}");
        }
        assert_eq!(e4m3_encode(1e6), 0x7e);
        assert_eq!(e4m3_encode(-500.0), 0xfe);
        assert_eq!(e4m3_encode(1e-9), 0x00);
    }

    #[test]
    fn rows_get_power_of_two_scales_and_bf16_exact_values() {
        let (rows, cols) = (5, 64);
        let mut w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i as f32 * 0.37).sin() * 0.05) * (1 + i / cols) as f32)
            .collect();
        w[cols..2 * cols].iter_mut().for_each(|v| *v = 0.0); // an all-zero row
        let q = Fp8Rows::quantize(&w, rows, cols);
        let d = q.dequantize();
        for r in 0..rows {
            let s = q.scales[r];
            assert_eq!(
                s.log2().fract(),
                0.0,
                "row {r} scale {s} is not a power of two"
            );
            let row = &w[r * cols..(r + 1) * cols];
            let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            if max > 0.0 {
                assert!(max / s > 224.0 && max / s <= 448.0, "row {r}: {}", max / s);
            }
            for (c, (&a, &b)) in row.iter().zip(&d[r * cols..(r + 1) * cols]).enumerate() {
                // within half a step of E4M3's 3-bit mantissa, relative to the value or
                // to the row's subnormal step
                let tol = (a.abs() / 16.0).max(s * 2f32.powi(-10));
                assert!((a - b).abs() <= tol, "({r}, {c}): {a} -> {b}");
                assert_eq!(half::bf16::from_f32(b).to_f32(), b, "not exact in bf16");
            }
        }
        let mut rt = w.clone();
        round_trip(&mut rt, rows, cols);
        assert_eq!(rt, d);
    }

    #[test]
    fn scopes_parse_and_cover_their_matrices() {
        use LayerPart::*;
        use Stack::*;
        for s in ["none", "talker-mlp", "layers"] {
            let scope: Fp8Scope = s.parse().unwrap();
            assert_eq!(scope.to_string(), s);
        }
        assert!("fp4"
            .parse::<Fp8Scope>()
            .unwrap_err()
            .contains("talker-mlp"));
        let t = Fp8Scope::TalkerMlp;
        assert!(t.covers(Talker, Mlp));
        assert!(!t.covers(Talker, Attention) && !t.covers(CodePredictor, Mlp));
        assert!(Fp8Scope::Layers.covers(CodePredictor, Attention));
        assert!(!Fp8Scope::None.covers(Talker, Mlp));
    }
}
