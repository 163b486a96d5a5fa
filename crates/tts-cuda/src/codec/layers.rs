//! Host-side re-layout of the codec's weights into GEMM-ready f32 matrices (plain Rust,
//! unit-tested on small arrays), and the arena they are packed into before one upload.
//!
//! Every layer becomes a row-major weight `[out][Kp]` that multiplies a time-major input
//! `[steps][Kp]`: a convolution's input is its im2col (`col[t][j*cin + i]` = input tap `j`
//! of channel `i`), a transposed convolution's output phases are extra output rows, and a
//! bias rides as column `K` against an input column of ones (`Kp = roundup(K + 1, 4)`, or
//! 8 for the convolutions' im2col, the rest zero), so one GEMM does the whole layer.

/// Input width of a GEMM over `k` values, plus the ones column when the layer has a bias,
/// rounded up to 4 floats (16-byte rows for the tensor-core kernels).
pub fn padded(k: usize, bias: bool) -> usize {
    if bias {
        (k + 1).next_multiple_of(4)
    } else {
        k
    }
}

/// Width of a convolution's im2col rows (and its weight rows) over `k` values: the ones
/// column, then zeros up to a multiple of 8 (16-byte rows also when the columns are f16,
/// `CodecPrecision::F16`).
pub fn conv_padded(k: usize) -> usize {
    (k + 1).next_multiple_of(8)
}

/// Appends `[w_row | b | 0..]` (width `kp`) per output.
fn push_row(out: &mut Vec<f32>, row: impl Iterator<Item = f32>, bias: Option<f32>, kp: usize) {
    let start = out.len();
    out.extend(row);
    if let Some(b) = bias {
        out.push(b);
    }
    out.resize(start + kp, 0.0);
}

/// A causal Conv1d, PyTorch weight `[cout][cin][k]` + bias `[cout]` -> `[cout][Kp]` with
/// column `j*cin + i` = `W[o][i][j]` (tap `j` multiplies input `t - (k-1-j)·d`). Rows are
/// `kp` wide (at least `k·cin + 1`): [`conv_padded`] behind an im2col, the input's own
/// width when a 1x1 conv's GEMM reads the input directly.
pub fn conv_rows(
    w: &[f32],
    bias: &[f32],
    cout: usize,
    cin: usize,
    k: usize,
    kp: usize,
) -> Vec<f32> {
    debug_assert_eq!(w.len(), cout * cin * k);
    debug_assert!(kp > k * cin);
    let mut out = Vec::with_capacity(cout * kp);
    for (o, &b) in bias.iter().enumerate().take(cout) {
        let row = (0..k).flat_map(|j| (0..cin).map(move |i| w[(o * cin + i) * k + j]));
        push_row(&mut out, row, Some(b), kp);
    }
    out
}

/// A causal ConvTranspose1d of kernel `g·s`, stride `s`, right-trimmed, PyTorch weight
/// `[cin][cout][g·s]` + bias `[cout]` -> `[s·cout][Kp]` over an im2col of `g` taps:
/// output row `q·cout + o` (phase `q` of output channel `o`), column `j·cin + i` =
/// `W[i][o][(g-1-j)·s + q]`. Output block `t` (`s` steps) is `b + Σ_g' W_g' · x[t - g']`,
/// so the GEMM's output `[steps][s·cout]` is already the time-major `[steps·s][cout]`.
/// With `g = 1` (kernel = stride) rows `q·cout..(q+1)·cout` are phase `q` alone. Rows are
/// `kp` wide (at least `g·cin + 1`): [`conv_padded`] behind an im2col, the input's own
/// width when the GEMM reads the input directly (`g = 1`).
pub fn tconv_rows(
    w: &[f32],
    bias: &[f32],
    cin: usize,
    cout: usize,
    s: usize,
    kp: usize,
) -> Vec<f32> {
    let k = w.len() / (cin * cout).max(1);
    debug_assert!(k.is_multiple_of(s));
    let g = k / s;
    debug_assert!(kp > g * cin);
    let mut out = Vec::with_capacity(s * cout * kp);
    for q in 0..s {
        for (o, &b) in bias.iter().enumerate().take(cout) {
            let row = (0..g)
                .flat_map(|j| (0..cin).map(move |i| w[(i * cout + o) * k + (g - 1 - j) * s + q]));
            push_row(&mut out, row, Some(b), kp);
        }
    }
    out
}

/// A linear layer `[n][k]` (+ bias), each output row scaled by `scale[o]` when given
/// (LayerScale / ConvNeXt γ folded in: `s·(W x + b) = (s·W) x + s·b`).
pub fn linear_rows(
    w: &[f32],
    bias: Option<&[f32]>,
    n: usize,
    k: usize,
    scale: Option<&[f32]>,
) -> Vec<f32> {
    debug_assert_eq!(w.len(), n * k);
    let kp = padded(k, bias.is_some());
    let mut out = Vec::with_capacity(n * kp);
    for o in 0..n {
        let s = scale.map_or(1.0, |s| s[o]);
        let row = w[o * k..(o + 1) * k].iter().map(|v| v * s);
        push_row(&mut out, row, bias.map(|b| b[o] * s), kp);
    }
    out
}

/// EMA codebook vectors: `embedding_sum / max(cluster_usage, 1e-5)` per row (divided, as
/// the reference does, so the tables are bit-identical to the CPU's).
pub fn codebook(sum: &[f32], usage: &[f32], dim: usize) -> Vec<f32> {
    let mut out = sum.to_vec();
    for (row, u) in out.chunks_mut(dim).zip(usage) {
        let d = u.max(1e-5);
        for v in row.iter_mut() {
            *v /= d;
        }
    }
    out
}

/// The two RVQ output projections (`[cbd][half]` each, no bias) side by side: one GEMM
/// over `(first, Σ rest)` gives `proj_first(first) + proj_rest(Σ rest)`.
pub fn rvq_projection(first: &[f32], rest: &[f32], cbd: usize, half: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(cbd * 2 * half);
    for o in 0..cbd {
        out.extend_from_slice(&first[o * half..(o + 1) * half]);
        out.extend_from_slice(&rest[o * half..(o + 1) * half]);
    }
    out
}

/// SnakeBeta parameters as the kernels use them: `(exp(α), 1 / (exp(β) + 1e-9))`.
pub fn snake_params(alpha: &[f32], beta: &[f32]) -> (Vec<f32>, Vec<f32>) {
    (
        alpha.iter().map(|a| a.exp()).collect(),
        beta.iter().map(|b| 1.0 / (b.exp() + 1e-9)).collect(),
    )
}

/// Depthwise conv weight `[c][1][k]` -> tap-major `[k][c]`.
pub fn depthwise_taps(w: &[f32], c: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; k * c];
    for ch in 0..c {
        for j in 0..k {
            out[j * c + ch] = w[ch * k + j];
        }
    }
    out
}

/// The C -> 1 final conv `[1][c][k]` -> tap-major `[k][c]`.
pub fn final_taps(w: &[f32], c: usize, k: usize) -> Vec<f32> {
    depthwise_taps(w, c, k)
}

/// All weights in one f32 vector (uploaded once); every tensor starts on a 64-float
/// (256-byte) boundary.
#[derive(Debug, Default)]
pub struct Arena {
    pub data: Vec<f32>,
}

impl Arena {
    /// Appends `v`, returns its offset.
    pub fn push(&mut self, v: &[f32]) -> usize {
        let at = self.data.len().next_multiple_of(64);
        self.data.resize(at, 0.0);
        self.data.extend_from_slice(v);
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + 1.0) * seed).sin()).collect()
    }

    /// `y[t] = W_rows · col[t]` with col built as the im2col kernel does.
    fn gemm_rows(w: &[f32], kp: usize, col: &[f32]) -> Vec<f32> {
        w.chunks(kp)
            .map(|r| r.iter().zip(col).map(|(a, b)| a * b).sum())
            .collect()
    }

    #[test]
    fn conv_rows_match_a_direct_causal_conv() {
        let (cout, cin, k, d, t) = (3, 2, 3, 2, 6);
        let w = vals(cout * cin * k, 0.37);
        let b = vals(cout, 1.1);
        let x = vals(t * cin, 0.53);
        let rows = conv_rows(&w, &b, cout, cin, k, conv_padded(k * cin));
        let kp = conv_padded(k * cin);
        assert_eq!(kp, 8);
        for ti in 0..t {
            // im2col with zero history
            let mut col = vec![0f32; kp];
            for j in 0..k {
                let src = ti as isize - ((k - 1 - j) * d) as isize;
                for i in 0..cin {
                    col[j * cin + i] = if src >= 0 {
                        x[src as usize * cin + i]
                    } else {
                        0.0
                    };
                }
            }
            col[k * cin] = 1.0;
            let got = gemm_rows(&rows, kp, &col);
            for o in 0..cout {
                let mut want = b[o];
                for i in 0..cin {
                    for j in 0..k {
                        let src = ti as isize - ((k - 1 - j) * d) as isize;
                        if src >= 0 {
                            want += w[(o * cin + i) * k + j] * x[src as usize * cin + i];
                        }
                    }
                }
                assert!(
                    (got[o] - want).abs() < 1e-5,
                    "t {ti} o {o}: {} vs {want}",
                    got[o]
                );
            }
        }
    }

    /// ConvTranspose1d(kernel g·s, stride s) by its definition, then the last k-s outputs
    /// trimmed, against GEMM phases over [x_t, x_{t-1}, ...].
    #[test]
    fn tconv_rows_match_a_trimmed_transposed_conv() {
        for (g, s) in [(2usize, 3usize), (1, 2), (2, 1)] {
            let (cin, cout, t) = (2, 3, 5);
            let k = g * s;
            let w = vals(cin * cout * k, 0.29);
            let b = vals(cout, 0.7);
            let x = vals(t * cin, 0.41);
            // full transposed conv: y[u][o] for u < (t-1)·s + k, then keep the first t·s
            let mut y = vec![0f32; ((t - 1) * s + k) * cout];
            for ti in 0..t {
                for i in 0..cin {
                    for o in 0..cout {
                        for j in 0..k {
                            y[(ti * s + j) * cout + o] +=
                                x[ti * cin + i] * w[(i * cout + o) * k + j];
                        }
                    }
                }
            }
            let kp = conv_padded(g * cin);
            let rows = tconv_rows(&w, &b, cin, cout, s, kp);
            for ti in 0..t {
                let mut col = vec![0f32; kp];
                for j in 0..g {
                    let src = ti as isize - (g - 1 - j) as isize;
                    for i in 0..cin {
                        col[j * cin + i] = if src >= 0 {
                            x[src as usize * cin + i]
                        } else {
                            0.0
                        };
                    }
                }
                col[g * cin] = 1.0;
                let got = gemm_rows(&rows, kp, &col);
                for q in 0..s {
                    for o in 0..cout {
                        let want = y[(ti * s + q) * cout + o] + b[o];
                        let v = got[q * cout + o];
                        assert!(
                            (v - want).abs() < 1e-5,
                            "g {g} s {s} t {ti} q {q} o {o}: {v} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn linear_rows_fold_scale_and_bias() {
        let (n, k) = (3, 5);
        let w = vals(n * k, 0.3);
        let b = vals(n, 0.9);
        let s = [0.5f32, -2.0, 0.1];
        let x = vals(k, 0.2);
        let rows = linear_rows(&w, Some(&b), n, k, Some(&s));
        let kp = padded(k, true);
        assert_eq!(kp, 8);
        let mut xin = x.clone();
        xin.push(1.0);
        xin.resize(kp, 0.0);
        let got = gemm_rows(&rows, kp, &xin);
        for o in 0..n {
            let want = s[o]
                * (w[o * k..(o + 1) * k]
                    .iter()
                    .zip(&x)
                    .map(|(a, b)| a * b)
                    .sum::<f32>()
                    + b[o]);
            assert!((got[o] - want).abs() < 1e-5);
        }
        // no bias: no padding
        assert_eq!(linear_rows(&w, None, n, k, None), w);
    }

    #[test]
    fn small_helpers() {
        let cb = codebook(&[2.0, 4.0, 1.0, 1.0], &[2.0, 0.0], 2);
        assert_eq!(cb, vec![1.0, 2.0, 1e5, 1e5]);
        let p = rvq_projection(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], 2, 2);
        assert_eq!(p, vec![1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0]);
        assert_eq!(
            depthwise_taps(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        let (a, ib) = snake_params(&[0.0], &[0.0]);
        assert_eq!(a, vec![1.0]);
        assert!((ib[0] - 1.0).abs() < 1e-6);
        let mut ar = Arena::default();
        assert_eq!(ar.push(&[1.0; 3]), 0);
        assert_eq!(ar.push(&[2.0; 3]), 64);
        assert_eq!(padded(7, false), 7);
        assert_eq!(padded(7, true), 8);
        assert_eq!(padded(8, true), 12);
        assert_eq!(conv_padded(6), 8);
        assert_eq!(conv_padded(8), 16);
    }
}
