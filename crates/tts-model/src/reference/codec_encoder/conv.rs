//! Mimi's padded 1-D convolution over a whole sequence, time-major (`[T, C]`), and ELU.
//!
//! `MimiConv1d` pads before convolving: `k_eff - stride` samples in all (`k_eff` the
//! dilated kernel), on the left for causal convs (split `⌈·/2⌉` left / `⌊·/2⌋` right
//! otherwise), plus extra right padding so the last window is complete: the output has
//! `⌈T / stride⌉` rows. In streaming mode the extra padding is left out.

use rayon::prelude::*;

use super::super::ops::{dot, Mat};
use crate::checkpoint::{Init, WeightSource};
use crate::error::ModelError;
use crate::reference::CpuLoader;
use crate::weights::TensorLoader;

/// How the padding is filled (`torch.nn.functional.pad` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// Zeros.
    Constant,
    /// Copies of the edge row.
    Replicate,
    /// Mirror images without the edge row.
    Reflect,
}

impl PadMode {
    /// From the config's `pad_mode` (validated when the config was read).
    pub fn parse(s: &str) -> Self {
        match s {
            "replicate" => Self::Replicate,
            "reflect" => Self::Reflect,
            _ => Self::Constant,
        }
    }
}

/// Geometry of one conv.
#[derive(Debug, Clone, Copy)]
pub struct ConvSpec {
    pub cin: usize,
    pub cout: usize,
    pub kernel: usize,
    pub stride: usize,
    pub dilation: usize,
    pub bias: bool,
    pub causal: bool,
    pub pad_mode: PadMode,
    /// Streaming: no extra right padding.
    pub streaming: bool,
}

/// `MimiConv1d` at inference (no weight norm: the checkpoint holds plain weights).
#[derive(Debug, Clone)]
pub struct Conv1d {
    /// PyTorch's `[out, in, k]` weight as `[out, in·k]`: one dot per output.
    weight: Mat,
    bias: Vec<f32>,
    spec: ConvSpec,
}

impl Conv1d {
    /// Loads `{prefix}.weight` (and `{prefix}.bias` when the spec has one).
    pub fn load(src: &WeightSource, prefix: &str, spec: ConvSpec) -> Result<Self, ModelError> {
        let fan_in = spec.cin * spec.kernel;
        let w = CpuLoader(src).load(
            &format!("{prefix}.weight"),
            &[spec.cout, spec.cin, spec.kernel],
            Init::FanIn(fan_in),
        )?;
        let bias = if spec.bias {
            CpuLoader(src)
                .load(&format!("{prefix}.bias"), &[spec.cout], Init::Bias)?
                .data
        } else {
            vec![0.0; spec.cout]
        };
        Ok(Self {
            weight: Mat::new(w.data, spec.cout, fan_in),
            bias,
            spec,
        })
    }

    /// Output rows for `t` input rows.
    pub fn output_len(&self, t: usize) -> usize {
        let (left, right) = self.padding(t);
        let padded = t + left + right;
        let k_eff = self.k_eff();
        if t == 0 || padded < k_eff {
            0
        } else {
            (padded - k_eff) / self.spec.stride + 1
        }
    }

    fn k_eff(&self) -> usize {
        (self.spec.kernel - 1) * self.spec.dilation + 1
    }

    /// (left, right) padding for `t` input rows.
    fn padding(&self, t: usize) -> (usize, usize) {
        let s = self.spec.stride;
        let total = self.k_eff().saturating_sub(s);
        // `ideal_length - length` of `_get_extra_padding_for_conv1d`: up to a whole window.
        let extra = if self.spec.streaming {
            0
        } else {
            t.div_ceil(s) * s - t
        };
        if self.spec.causal {
            (total, extra)
        } else {
            let right = total / 2;
            (total - right, right + extra)
        }
    }

    /// Convolves `x` (`[t, in]`); returns `[output_len(t), out]`.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let ConvSpec {
            cin,
            cout,
            kernel,
            stride,
            dilation,
            ..
        } = self.spec;
        let t = x.len() / cin;
        let t_out = self.output_len(t);
        if t_out == 0 {
            return Vec::new();
        }
        let (left, right) = self.padding(t);
        let xp = pad_rows(x, cin, left, right, self.spec.pad_mode);
        let mut out = vec![0f32; t_out * cout];
        const ROWS: usize = 32;
        out.par_chunks_mut(ROWS * cout)
            .enumerate()
            .for_each(|(c, chunk)| {
                let mut patch = vec![0f32; cin * kernel];
                for (r, row) in chunk.chunks_mut(cout).enumerate() {
                    let start = (c * ROWS + r) * stride;
                    for i in 0..cin {
                        for j in 0..kernel {
                            patch[i * kernel + j] = xp[(start + j * dilation) * cin + i];
                        }
                    }
                    for (o, y) in row.iter_mut().enumerate() {
                        *y = dot(&patch, self.weight.row(o)) + self.bias[o];
                    }
                }
            });
        out
    }
}

/// `x` (`[t, c]`) with `left` rows before and `right` after, filled per `mode`. Reflection
/// of an input no longer than the padding first appends zeros, as Mimi's `_pad1d` does.
fn pad_rows(x: &[f32], c: usize, left: usize, right: usize, mode: PadMode) -> Vec<f32> {
    let t = x.len() / c;
    let mut out = Vec::with_capacity((t + left + right) * c);
    match mode {
        PadMode::Constant => {
            out.resize(left * c, 0.0);
            out.extend_from_slice(x);
            out.resize((t + left + right) * c, 0.0);
        }
        PadMode::Replicate => {
            let (first, last) = (&x[..c], &x[(t - 1) * c..]);
            for _ in 0..left {
                out.extend_from_slice(first);
            }
            out.extend_from_slice(x);
            for _ in 0..right {
                out.extend_from_slice(last);
            }
        }
        PadMode::Reflect => {
            let max_pad = left.max(right);
            let zeros = if t <= max_pad { max_pad - t + 1 } else { 0 };
            let mut ext = x.to_vec();
            ext.resize((t + zeros) * c, 0.0);
            let n = t + zeros;
            let row = |i: usize| &ext[i * c..(i + 1) * c];
            for p in (1..=left).rev() {
                out.extend_from_slice(row(p));
            }
            out.extend_from_slice(&ext);
            for p in 1..=right {
                out.extend_from_slice(row(n - 1 - p));
            }
            out.truncate((t + left + right) * c);
        }
    }
    out
}

/// ELU (α = 1) in place: `x` if positive, else `exp(x) - 1`.
pub fn elu(x: &mut [f32]) {
    for v in x.iter_mut() {
        if *v <= 0.0 {
            *v = v.exp_m1();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_modes_match_torch() {
        let x = [1.0, 2.0, 3.0];
        assert_eq!(
            pad_rows(&x, 1, 2, 1, PadMode::Constant),
            [0.0, 0.0, 1.0, 2.0, 3.0, 0.0]
        );
        assert_eq!(
            pad_rows(&x, 1, 2, 1, PadMode::Replicate),
            [1.0, 1.0, 1.0, 2.0, 3.0, 3.0]
        );
        assert_eq!(
            pad_rows(&x, 1, 2, 1, PadMode::Reflect),
            [3.0, 2.0, 1.0, 2.0, 3.0, 2.0]
        );
        // Input no longer than the padding: zeros are appended before reflecting, and as
        // many rows are dropped from the end afterwards.
        assert_eq!(
            pad_rows(&[1.0, 2.0], 1, 3, 0, PadMode::Reflect),
            [0.0, 0.0, 2.0, 1.0, 2.0]
        );
    }

    #[test]
    fn strided_causal_conv_covers_every_input() {
        let spec = ConvSpec {
            cin: 1,
            cout: 1,
            kernel: 4,
            stride: 2,
            dilation: 1,
            bias: false,
            causal: true,
            pad_mode: PadMode::Constant,
            streaming: false,
        };
        let conv = Conv1d {
            weight: Mat::new(vec![1.0, 1.0, 1.0, 1.0], 1, 4),
            bias: vec![0.0],
            spec,
        };
        // 5 inputs -> ⌈5/2⌉ = 3 outputs; left pad 2, right pad 1.
        let y = conv.forward(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(y, [3.0, 10.0, 12.0]);
        let streaming = Conv1d {
            spec: ConvSpec {
                streaming: true,
                ..spec
            },
            ..conv
        };
        assert_eq!(streaming.output_len(5), 2);
    }
}
