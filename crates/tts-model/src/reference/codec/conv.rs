//! Streaming 1-D convolutions of the codec decoder, time-major (`[T, C]`).
//!
//! Each layer is exactly causal, so carrying a little input history makes chunked decoding
//! equal to whole-utterance decoding: a causal conv keeps its last `(k-1)·dilation` inputs,
//! a causal transposed conv (kernel `g·s`, stride `s`, right-trimmed) its last `g-1` inputs.

use super::super::ops::{linear, Mat};
use super::super::stack::CpuTensor;
use crate::weights::{ConvW, SnakeW};

/// PyTorch's conv weight `[out, in, k]` as one `[out, in]` matrix per tap.
pub(crate) fn conv_taps(w: &CpuTensor) -> Vec<Mat> {
    let (cout, cin, k) = (w.shape[0], w.shape[1], w.shape[2]);
    (0..k)
        .map(|j| {
            let m = (0..cout * cin).map(|oi| w.data[oi * k + j]).collect();
            Mat::new(m, cout, cin)
        })
        .collect()
}

/// Causal Conv1d, stride 1: `out[t] = b + Σ_j W[:, :, j] · x[t - (k-1-j)·d]`.
#[derive(Debug, Clone)]
pub struct CausalConv {
    /// Tap j as `[out, in]`.
    taps: Vec<Mat>,
    bias: Vec<f32>,
    dilation: usize,
    cin: usize,
}

impl CausalConv {
    /// From PyTorch's `[out, in, k]` weight.
    pub fn new(w: ConvW<CpuTensor>, dilation: usize) -> Self {
        Self {
            taps: conv_taps(&w.weight),
            cin: w.weight.shape[1],
            bias: w.bias.data,
            dilation,
        }
    }

    /// Input rows of history this layer carries.
    pub fn context(&self) -> usize {
        (self.taps.len() - 1) * self.dilation
    }

    pub fn new_state(&self) -> Vec<f32> {
        vec![0f32; self.context() * self.cin]
    }

    /// Convolves `x` (`[t, in]`) continuing from `state`; returns `[t, out]`.
    pub fn forward(&self, x: &[f32], state: &mut Vec<f32>) -> Vec<f32> {
        let cin = self.cin;
        let t = x.len() / cin;
        let cout = self.bias.len();
        let mut padded = std::mem::take(state);
        padded.extend_from_slice(x);
        let mut out: Vec<f32> = self.bias.iter().copied().cycle().take(t * cout).collect();
        for (j, tap) in self.taps.iter().enumerate() {
            let off = j * self.dilation * cin;
            let y = linear(&padded[off..off + t * cin], t, tap, None);
            for (o, v) in out.iter_mut().zip(&y) {
                *o += v;
            }
        }
        let keep = self.context() * cin;
        *state = padded[padded.len() - keep..].to_vec();
        out
    }
}

/// Causal depthwise Conv1d (groups = channels), stride 1, weight `[C, 1, k]`.
#[derive(Debug, Clone)]
pub struct DepthwiseConv {
    /// `[k, C]`: tap j of every channel.
    taps: Vec<f32>,
    bias: Vec<f32>,
    k: usize,
}

impl DepthwiseConv {
    pub fn new(w: ConvW<CpuTensor>) -> Self {
        let (c, k) = (w.weight.shape[0], w.weight.shape[2]);
        let mut taps = vec![0f32; k * c];
        for ch in 0..c {
            for j in 0..k {
                taps[j * c + ch] = w.weight.data[ch * k + j];
            }
        }
        Self {
            taps,
            bias: w.bias.data,
            k,
        }
    }

    pub fn new_state(&self) -> Vec<f32> {
        vec![0f32; (self.k - 1) * self.bias.len()]
    }

    pub fn forward(&self, x: &[f32], state: &mut Vec<f32>) -> Vec<f32> {
        let c = self.bias.len();
        let t = x.len() / c;
        let mut padded = std::mem::take(state);
        padded.extend_from_slice(x);
        let mut out = vec![0f32; t * c];
        for (ti, row) in out.chunks_mut(c).enumerate() {
            row.copy_from_slice(&self.bias);
            for j in 0..self.k {
                let xin = &padded[(ti + j) * c..(ti + j + 1) * c];
                let w = &self.taps[j * c..(j + 1) * c];
                for ((o, a), b) in row.iter_mut().zip(xin).zip(w) {
                    *o += a * b;
                }
            }
        }
        let keep = (self.k - 1) * c;
        *state = padded[padded.len() - keep..].to_vec();
        out
    }
}

/// Causal ConvTranspose1d with kernel `g·s` and stride `s`, its last `k - s` outputs
/// trimmed: output block `t` (`s` rows) is `b + Σ_{g'<g} W_{g'} · x[t - g']`.
#[derive(Debug, Clone)]
pub struct CausalTransConv {
    /// `[g][q]` -> `[out, in]` matrix of kernel index `g'·s + q`.
    parts: Vec<Vec<Mat>>,
    bias: Vec<f32>,
    stride: usize,
    cin: usize,
}

impl CausalTransConv {
    /// From PyTorch's `[in, out, k]` weight.
    pub fn new(w: ConvW<CpuTensor>, stride: usize) -> Self {
        let (cin, cout, k) = (w.weight.shape[0], w.weight.shape[1], w.weight.shape[2]);
        assert!(
            k % stride == 0,
            "kernel {k} is not a multiple of stride {stride}"
        );
        let parts = (0..k / stride)
            .map(|g| {
                (0..stride)
                    .map(|q| {
                        let j = g * stride + q;
                        let mut m = vec![0f32; cout * cin];
                        for i in 0..cin {
                            for o in 0..cout {
                                m[o * cin + i] = w.weight.data[(i * cout + o) * k + j];
                            }
                        }
                        Mat::new(m, cout, cin)
                    })
                    .collect()
            })
            .collect();
        Self {
            parts,
            bias: w.bias.data,
            stride,
            cin,
        }
    }

    pub fn new_state(&self) -> Vec<f32> {
        vec![0f32; (self.parts.len() - 1) * self.cin]
    }

    /// `[t, in]` -> `[t·s, out]`.
    pub fn forward(&self, x: &[f32], state: &mut Vec<f32>) -> Vec<f32> {
        let (cin, cout, s) = (self.cin, self.bias.len(), self.stride);
        let t = x.len() / cin;
        let g = self.parts.len();
        let mut padded = std::mem::take(state);
        padded.extend_from_slice(x);
        let mut out: Vec<f32> = self
            .bias
            .iter()
            .copied()
            .cycle()
            .take(t * s * cout)
            .collect();
        for (gi, part) in self.parts.iter().enumerate() {
            let off = (g - 1 - gi) * cin;
            let xs = &padded[off..off + t * cin];
            for (q, m) in part.iter().enumerate() {
                let y = linear(xs, t, m, None);
                for ti in 0..t {
                    let dst = &mut out[(ti * s + q) * cout..(ti * s + q + 1) * cout];
                    for (o, v) in dst.iter_mut().zip(&y[ti * cout..(ti + 1) * cout]) {
                        *o += v;
                    }
                }
            }
        }
        let keep = (g - 1) * cin;
        *state = padded[padded.len() - keep..].to_vec();
        out
    }
}

/// SnakeBeta: `x + 1/(exp(β) + 1e-9) · sin²(x · exp(α))`, per channel.
#[derive(Debug, Clone)]
pub struct Snake {
    alpha: Vec<f32>,
    inv_beta: Vec<f32>,
}

impl Snake {
    pub fn new(w: SnakeW<CpuTensor>) -> Self {
        Self {
            alpha: w.alpha.data.iter().map(|a| a.exp()).collect(),
            inv_beta: w.beta.data.iter().map(|b| 1.0 / (b.exp() + 1e-9)).collect(),
        }
    }

    pub fn forward(&self, x: &mut [f32]) {
        let c = self.alpha.len();
        for row in x.chunks_mut(c) {
            for ((v, a), ib) in row.iter_mut().zip(&self.alpha).zip(&self.inv_beta) {
                let s = (*v * a).sin();
                *v += ib * s * s;
            }
        }
    }
}
