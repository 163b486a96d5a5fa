//! The ECAPA-TDNN network of the official `Qwen3TTSSpeakerEncoder`, time-major (`[T, C]`).
//!
//! Every conv is a Conv1d with bias, stride 1, `padding="same"` and `padding_mode="reflect"`
//! (the pad `d·(k-1)` split as `floor` left, the rest right). A "TDNN" is such a conv followed
//! by ReLU; there is no BatchNorm anywhere.

use super::config::SpeakerEncoderConfig;
use super::mel::reflect_index;
use super::weights::{SeRes2NetW, SpeakerEncoderW};
use crate::reference::codec::conv::conv_taps;
use crate::reference::ops::{add_assign, linear, Mat};
use crate::reference::stack::CpuTensor;
use crate::weights::ConvW;

/// `std`'s clamp floor in the attentive statistics pooling.
const STD_EPS: f32 = 1e-12;

/// Conv1d, stride 1, PyTorch `padding="same"` in reflect mode, on `[T, in]` rows.
#[derive(Debug, Clone)]
pub struct SameConv {
    /// Tap j as `[out, in]`.
    taps: Vec<Mat>,
    bias: Vec<f32>,
    dilation: usize,
    cin: usize,
}

impl SameConv {
    /// From PyTorch's `[out, in, k]` weight.
    pub fn new(w: ConvW<CpuTensor>, dilation: usize) -> Self {
        Self {
            taps: conv_taps(&w.weight),
            cin: w.weight.shape[1],
            bias: w.bias.data,
            dilation,
        }
    }

    /// Padding rows (left, right).
    pub fn padding(&self) -> (usize, usize) {
        let total = self.dilation * (self.taps.len() - 1);
        (total / 2, total - total / 2)
    }

    /// Fewest rows reflect padding accepts (each pad must be shorter than the input).
    pub fn min_rows(&self) -> usize {
        self.padding().1 + 1
    }

    /// Output channels.
    pub fn out_channels(&self) -> usize {
        self.bias.len()
    }

    /// Convolves `x` (`[t, in]`, `t >= min_rows()`); returns `[t, out]`.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let cin = self.cin;
        debug_assert_eq!(x.len(), t * cin);
        debug_assert!(t >= self.min_rows());
        let (left, right) = self.padding();
        let padded: Vec<f32>;
        let src = if left + right == 0 {
            x
        } else {
            padded = (-(left as isize)..(t + right) as isize)
                .flat_map(|i| {
                    let r = reflect_index(i, t);
                    x[r * cin..(r + 1) * cin].iter().copied()
                })
                .collect();
            &padded
        };
        let cout = self.out_channels();
        let mut out: Vec<f32> = self.bias.iter().copied().cycle().take(t * cout).collect();
        for (j, tap) in self.taps.iter().enumerate() {
            let off = j * self.dilation * cin;
            add_assign(&mut out, &linear(&src[off..off + t * cin], t, tap, None));
        }
        out
    }

    /// `relu(conv(x))`: the official `TimeDelayNetBlock`.
    pub fn tdnn(&self, x: &[f32], t: usize) -> Vec<f32> {
        let mut y = self.forward(x, t);
        y.iter_mut().for_each(|v| *v = v.max(0.0));
        y
    }
}

/// Mean over time of every channel of `[t, c]` rows.
fn time_mean(x: &[f32], t: usize, c: usize) -> Vec<f32> {
    let mut sum = vec![0f64; c];
    for row in x.chunks_exact(c) {
        for (s, &v) in sum.iter_mut().zip(row) {
            *s += v as f64;
        }
    }
    sum.iter().map(|&s| (s / t as f64) as f32).collect()
}

/// TDNN -> Res2Net -> TDNN -> squeeze-excitation, plus the input (`SqueezeExcitationRes2NetBlock`).
#[derive(Debug, Clone)]
struct SeRes2Net {
    tdnn1: SameConv,
    /// Convs of channel groups 1..scale (group 0 passes through).
    res2net: Vec<SameConv>,
    tdnn2: SameConv,
    se_conv1: SameConv,
    se_conv2: SameConv,
    scale: usize,
}

impl SeRes2Net {
    fn new(w: SeRes2NetW<CpuTensor>, dilation: usize, scale: usize) -> Self {
        Self {
            tdnn1: SameConv::new(w.tdnn1, 1),
            res2net: w
                .res2net
                .into_iter()
                .map(|c| SameConv::new(c, dilation))
                .collect(),
            tdnn2: SameConv::new(w.tdnn2, 1),
            se_conv1: SameConv::new(w.se_conv1, 1),
            se_conv2: SameConv::new(w.se_conv2, 1),
            scale,
        }
    }

    fn min_rows(&self) -> usize {
        self.res2net
            .iter()
            .map(SameConv::min_rows)
            .max()
            .unwrap_or(1)
    }

    fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let h = self.tdnn1.tdnn(x, t);
        let c = self.tdnn1.out_channels();
        let h = self.res2net(&h, t, c);
        let mut h = self.tdnn2.tdnn(&h, t);
        // Squeeze-excitation: a per-channel gate from the time mean.
        let squeezed = self.se_conv1.tdnn(&time_mean(&h, t, c), 1);
        let gate = self.se_conv2.forward(&squeezed, 1);
        for row in h.chunks_exact_mut(c) {
            for (v, g) in row.iter_mut().zip(&gate) {
                *v *= 1.0 / (1.0 + (-g).exp());
            }
        }
        add_assign(&mut h, x);
        h
    }

    /// Res2Net: split the channels into `scale` groups; group 0 passes, group 1 goes through
    /// conv 0, group i >= 2 through conv i-1 after adding the previous group's output.
    fn res2net(&self, x: &[f32], t: usize, c: usize) -> Vec<f32> {
        let w = c / self.scale;
        let mut out = vec![0f32; t * c];
        let mut prev: Vec<f32> = Vec::new();
        for g in 0..self.scale {
            let mut part: Vec<f32> = x
                .chunks_exact(c)
                .flat_map(|row| row[g * w..(g + 1) * w].iter().copied())
                .collect();
            if g >= 2 {
                add_assign(&mut part, &prev);
            }
            if g >= 1 {
                part = self.res2net[g - 1].tdnn(&part, t);
            }
            for (row, src) in out.chunks_exact_mut(c).zip(part.chunks_exact(w)) {
                row[g * w..(g + 1) * w].copy_from_slice(src);
            }
            prev = part;
        }
        out
    }
}

/// Weighted mean and std over time of every channel of `[t, c]` rows: `weight(tt, ch)`
/// is the weight of row `tt` in channel `ch`; `std = sqrt(max(Σ w (x - mean)², 1e-12))`.
fn weighted_stats(
    x: &[f32],
    c: usize,
    weight: impl Fn(usize, usize) -> f32,
) -> (Vec<f32>, Vec<f32>) {
    let mut mean = vec![0f64; c];
    for (tt, row) in x.chunks_exact(c).enumerate() {
        for (ch, (m, &v)) in mean.iter_mut().zip(row).enumerate() {
            *m += (weight(tt, ch) * v) as f64;
        }
    }
    let mean: Vec<f32> = mean.iter().map(|&m| m as f32).collect();
    let mut var = vec![0f64; c];
    for (tt, row) in x.chunks_exact(c).enumerate() {
        for (ch, (s, &v)) in var.iter_mut().zip(row).enumerate() {
            let d = v - mean[ch];
            *s += (weight(tt, ch) * d * d) as f64;
        }
    }
    let std = var
        .iter()
        .map(|&s| (s as f32).max(STD_EPS).sqrt())
        .collect();
    (mean, std)
}

/// The ECAPA-TDNN speaker network: log-mel rows in, x-vector out.
#[derive(Debug, Clone)]
pub struct Ecapa {
    tdnn0: SameConv,
    blocks: Vec<SeRes2Net>,
    mfa: SameConv,
    asp_tdnn: SameConv,
    asp_conv: SameConv,
    fc: SameConv,
    mel_dim: usize,
}

impl Ecapa {
    /// Builds the network from its f32 weights (`cfg` validated).
    pub fn new(cfg: &SpeakerEncoderConfig, w: SpeakerEncoderW<CpuTensor>) -> Self {
        let d = &cfg.enc_dilations;
        let n = d.len();
        Self {
            tdnn0: SameConv::new(w.tdnn0, d[0]),
            blocks: w
                .blocks
                .into_iter()
                .enumerate()
                .map(|(i, b)| SeRes2Net::new(b, d[i + 1], cfg.enc_res2net_scale))
                .collect(),
            mfa: SameConv::new(w.mfa, d[n - 1]),
            asp_tdnn: SameConv::new(w.asp_tdnn, 1),
            asp_conv: SameConv::new(w.asp_conv, 1),
            fc: SameConv::new(w.fc, 1),
            mel_dim: cfg.mel_dim,
        }
    }

    /// Fewest mel frames every reflect-padded conv accepts.
    pub fn min_frames(&self) -> usize {
        self.blocks
            .iter()
            .map(SeRes2Net::min_rows)
            .chain([self.tdnn0.min_rows(), self.mfa.min_rows()])
            .max()
            .unwrap_or(1)
    }

    /// The x-vector of `t` mel frames (`[t, mel_dim]`, `t >= min_frames()`).
    pub fn forward(&self, mel: &[f32], t: usize) -> Vec<f32> {
        debug_assert_eq!(mel.len(), t * self.mel_dim);
        let mut h = self.tdnn0.tdnn(mel, t);
        let mut outs = Vec::with_capacity(self.blocks.len());
        for b in &self.blocks {
            h = b.forward(&h, t);
            outs.push(h.clone());
        }
        // Multi-layer feature aggregation: the SE-Res2Net outputs side by side.
        let cat: Vec<f32> = (0..t)
            .flat_map(|tt| {
                outs.iter().flat_map(move |o| {
                    let c = o.len() / t;
                    o[tt * c..(tt + 1) * c].iter().copied()
                })
            })
            .collect();
        let h = self.mfa.tdnn(&cat, t);
        let pooled = self.pool(&h, t);
        self.fc.forward(&pooled, 1)
    }

    /// Attentive statistics pooling: `[t, C]` -> `[mean; std]` (`2C`).
    fn pool(&self, x: &[f32], t: usize) -> Vec<f32> {
        let c = self.mfa.out_channels();
        // Global context: the plain mean and std, appended to every frame.
        let inv_t = 1.0 / t as f32;
        let (mean, std) = weighted_stats(x, c, |_, _| inv_t);
        let context: Vec<f32> = x
            .chunks_exact(c)
            .flat_map(|row| row.iter().chain(&mean).chain(&std).copied())
            .collect();
        let mut a = self.asp_tdnn.tdnn(&context, t);
        a.iter_mut().for_each(|v| *v = v.tanh());
        let mut a = self.asp_conv.forward(&a, t);
        // Softmax over time, per channel.
        for ch in 0..c {
            let max = (0..t).fold(f32::NEG_INFINITY, |m, tt| m.max(a[tt * c + ch]));
            let mut sum = 0f32;
            for tt in 0..t {
                let e = (a[tt * c + ch] - max).exp();
                a[tt * c + ch] = e;
                sum += e;
            }
            for tt in 0..t {
                a[tt * c + ch] /= sum;
            }
        }
        let (mean, std) = weighted_stats(x, c, |tt, ch| a[tt * c + ch]);
        mean.into_iter().chain(std).collect()
    }
}
