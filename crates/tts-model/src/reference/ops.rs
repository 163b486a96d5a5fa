//! Plain f32 building blocks of the CPU reference: matrices, linear layers, norms,
//! activations, RoPE and causal (optionally sliding-window) attention over a KV cache.
//! Activations are row-major `[rows, features]`.

use rayon::prelude::*;

/// A row-major matrix, e.g. a PyTorch Linear weight `[out, in]`.
#[derive(Debug, Clone, Default)]
pub struct Mat {
    pub data: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl Mat {
    pub fn new(data: Vec<f32>, rows: usize, cols: usize) -> Self {
        debug_assert_eq!(data.len(), rows * cols);
        Self { data, rows, cols }
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// Multiply-adds below which a linear layer runs on the calling thread.
const PARALLEL_MACS: usize = 1 << 18;

/// Dot product with eight partial sums (lets the compiler vectorise).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// `y = x W^T (+ b)` for `x` of shape `[m, w.cols]`; returns `[m, w.rows]`.
///
/// Every output is one [`dot`] of an input row with a weight row (plus the bias), so a
/// row's result never depends on `m` or on the other rows: batched, chunked and
/// whole-utterance runs give bit-identical numbers. Parallel over outputs for few rows,
/// over rows otherwise.
pub fn linear(x: &[f32], m: usize, w: &Mat, bias: Option<&[f32]>) -> Vec<f32> {
    let (k, n) = (w.cols, w.rows);
    debug_assert_eq!(x.len(), m * k);
    let b = |j: usize| bias.map_or(0.0, |b| b[j]);
    let mut y = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return y;
    }
    if m < 8 {
        const BLOCK: usize = 64;
        let mut yt = vec![0f32; n * m];
        yt.par_chunks_mut(m * BLOCK)
            .enumerate()
            .for_each(|(c, chunk)| {
                for (jj, out) in chunk.chunks_mut(m).enumerate() {
                    let j = c * BLOCK + jj;
                    let wrow = w.row(j);
                    for (r, o) in out.iter_mut().enumerate() {
                        *o = dot(&x[r * k..(r + 1) * k], wrow) + b(j);
                    }
                }
            });
        for j in 0..n {
            for r in 0..m {
                y[r * n + j] = yt[j * m + r];
            }
        }
    } else {
        const ROWS: usize = 16;
        y.par_chunks_mut(ROWS * n)
            .enumerate()
            .for_each(|(c, chunk)| {
                let rows = chunk.len() / n;
                let xs = &x[c * ROWS * k..(c * ROWS + rows) * k];
                for j in 0..n {
                    let wrow = w.row(j);
                    for r in 0..rows {
                        chunk[r * n + j] = dot(&xs[r * k..(r + 1) * k], wrow) + b(j);
                    }
                }
            });
    }
    y
}

/// RMSNorm of every `dim`-wide row: `w * x / sqrt(mean(x^2) + eps)`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let dim = w.len();
    let mut out = vec![0f32; x.len()];
    for (o, row) in out.chunks_mut(dim).zip(x.chunks(dim)) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for ((o, v), g) in o.iter_mut().zip(row).zip(w) {
            *o = g * (v * inv);
        }
    }
    out
}

/// In-place RMSNorm of every `w.len()`-wide chunk (per-head QK-norm).
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let dim = w.len();
    for row in x.chunks_mut(dim) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for (v, g) in row.iter_mut().zip(w) {
            *v = g * (*v * inv);
        }
    }
}

/// LayerNorm of every row (biased variance), as `torch.nn.LayerNorm`.
pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let dim = w.len();
    for row in x.chunks_mut(dim) {
        let mean = row.iter().sum::<f32>() / dim as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / dim as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), bb) in row.iter_mut().zip(w).zip(b) {
            *v = (*v - mean) * inv * g + bb;
        }
    }
}

pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Exact (erf) GELU, as `torch.nn.GELU()`.
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// SwiGLU MLP: `down(silu(gate(x)) * up(x))`.
pub fn swiglu(x: &[f32], m: usize, gate: &Mat, up: &Mat, down: &Mat) -> Vec<f32> {
    let mut g = linear(x, m, gate, None);
    let u = linear(x, m, up, None);
    for (a, b) in g.iter_mut().zip(&u) {
        *a = silu(*a) * b;
    }
    linear(&g, m, down, None)
}

/// Rotary embedding with rotate-half (NeoX) pairing: dims `i` and `i + d/2` share a
/// frequency. Frequencies and angles are computed in f32 as the reference does.
#[derive(Debug, Clone)]
pub struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    pub fn new(head_dim: usize, theta: f64) -> Self {
        let base = theta as f32;
        let inv_freq = (0..head_dim / 2)
            .map(|i| 1.0 / base.powf((2 * i) as f32 / head_dim as f32))
            .collect();
        Self { inv_freq }
    }

    /// Rotates every `head_dim`-wide chunk of `x` (all heads of one token) for position `pos`.
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let half = self.inv_freq.len();
        let p = pos as f32;
        let (cos, sin): (Vec<f32>, Vec<f32>) = self
            .inv_freq
            .iter()
            .map(|f| {
                let a = p * f;
                (a.cos(), a.sin())
            })
            .unzip();
        for head in x.chunks_mut(2 * half) {
            for i in 0..half {
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * cos[i] - b * sin[i];
                head[i + half] = b * cos[i] + a * sin[i];
            }
        }
    }
}

/// Keys and values of one layer for one sequence, `[positions, kv_heads * head_dim]`,
/// holding absolute positions `start..start + len`.
#[derive(Debug, Clone, Default)]
pub struct LayerKv {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub start: usize,
}

impl LayerKv {
    pub fn len(&self, kv_dim: usize) -> usize {
        self.k.len() / kv_dim
    }

    /// Keeps only the last `keep` positions.
    pub fn keep_last(&mut self, keep: usize, kv_dim: usize) {
        let len = self.len(kv_dim);
        if len > keep {
            let drop = len - keep;
            self.k.drain(..drop * kv_dim);
            self.v.drain(..drop * kv_dim);
            self.start += drop;
        }
    }
}

/// Attention geometry.
#[derive(Debug, Clone, Copy)]
pub struct AttnDims {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Keys visible to a query: the last `window` positions including its own.
    pub window: Option<usize>,
}

/// Causal attention of `q` (`[n, heads * head_dim]`, absolute positions `first..first + n`)
/// over the cache (which already contains those positions). Softmax in f32; query head `h`
/// reads kv head `h / (heads / kv_heads)`.
pub fn attention(q: &[f32], first: usize, kv: &LayerKv, d: &AttnDims) -> Vec<f32> {
    let (hd, kvd) = (d.head_dim, d.kv_heads * d.head_dim);
    let qd = d.heads * hd;
    let n = q.len() / qd;
    let rep = d.heads / d.kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; q.len()];
    let keys = kv.len(kvd);
    let per_query = |(i, o_tok): (usize, &mut [f32])| {
        let pos = first + i;
        let lo = match d.window {
            Some(w) => (pos + 1).saturating_sub(w).max(kv.start),
            None => kv.start,
        };
        let mut scores = vec![0f32; pos + 1 - lo];
        for h in 0..d.heads {
            let qh = &q[i * qd + h * hd..i * qd + (h + 1) * hd];
            let kh = (h / rep) * hd;
            for (s, p) in scores.iter_mut().zip(lo..=pos) {
                let row = (p - kv.start) * kvd + kh;
                *s = dot(qh, &kv.k[row..row + hd]) * scale;
            }
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            let oh = &mut o_tok[h * hd..(h + 1) * hd];
            for (s, p) in scores.iter().zip(lo..=pos) {
                let wgt = s / sum;
                let row = (p - kv.start) * kvd + kh;
                for (o, v) in oh.iter_mut().zip(&kv.v[row..row + hd]) {
                    *o += wgt * v;
                }
            }
        }
    };
    if n * keys * qd >= PARALLEL_MACS {
        out.par_chunks_mut(qd).enumerate().for_each(per_query);
    } else {
        out.chunks_mut(qd).enumerate().for_each(per_query);
    }
    debug_assert_eq!(out.len(), n * qd);
    out
}

/// `h += scale ⊙ y` per row (a layer scale: one factor per channel).
pub fn scaled_add(h: &mut [f32], y: &[f32], scale: &[f32]) {
    let c = scale.len();
    for (hr, yr) in h.chunks_mut(c).zip(y.chunks(c)) {
        for ((a, b), s) in hr.iter_mut().zip(yr).zip(scale) {
            *a += s * b;
        }
    }
}

/// Adds `b` to `a` element-wise.
pub fn add_assign(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_rows_do_not_depend_on_the_batch() {
        let w = Mat::new(
            (0..40 * 33).map(|i| (i as f32 * 0.013).sin()).collect(),
            40,
            33,
        );
        let x: Vec<f32> = (0..20 * 33).map(|i| (i as f32 * 0.07).cos()).collect();
        let all = linear(&x, 20, &w, None);
        for r in 0..20 {
            let one = linear(&x[r * 33..(r + 1) * 33], 1, &w, None);
            assert_eq!(&all[r * 40..(r + 1) * 40], &one[..]);
        }
    }

    #[test]
    fn linear_paths_agree() {
        let w = Mat::new((0..6 * 5).map(|i| (i as f32 * 0.37).sin()).collect(), 6, 5);
        let b: Vec<f32> = (0..6).map(|i| i as f32 * 0.1).collect();
        for m in [1, 3, 9] {
            let x: Vec<f32> = (0..m * 5).map(|i| (i as f32 * 0.11).cos()).collect();
            let y = linear(&x, m, &w, Some(&b));
            for r in 0..m {
                for j in 0..6 {
                    let want: f32 = (0..5)
                        .map(|c| x[r * 5 + c] * w.data[j * 5 + c])
                        .sum::<f32>()
                        + b[j];
                    assert!((y[r * 6 + j] - want).abs() < 1e-5, "m={m}");
                }
            }
        }
    }

    #[test]
    fn sliding_window_limits_keys() {
        let d = AttnDims {
            heads: 1,
            kv_heads: 1,
            head_dim: 2,
            window: Some(2),
        };
        let kv = LayerKv {
            k: vec![0.0; 8],
            v: vec![1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0],
            start: 0,
        };
        // query at position 3 with zero scores: mean of values at positions 2 and 3
        let o = attention(&[0.0, 0.0], 3, &kv, &d);
        assert!((o[0] - 3.5).abs() < 1e-6);
    }

    #[test]
    fn rope_rotates_pairs_by_position() {
        let r = Rope::new(4, 10000.0);
        let mut x = vec![1.0, 0.0, 0.0, 0.0];
        r.apply(&mut x, 1);
        assert!((x[0] - 1f32.cos()).abs() < 1e-6 && (x[2] - 1f32.sin()).abs() < 1e-6);
    }
}
