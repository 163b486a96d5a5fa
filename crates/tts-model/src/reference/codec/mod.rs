//! The 12 Hz codec decoder on the CPU, incremental from the start: codes of one or more
//! frames in, their PCM out, with every causal layer's history carried in [`CodecState`].
//!
//! Pipeline per frame (release sizes): RVQ (16 codebooks -> 512) -> causal conv k3
//! (-> 1024) -> sliding-window transformer -> 2 × [ConvTranspose ×2 + ConvNeXt] ->
//! causal conv k7 (-> 1536) -> 4 × [SnakeBeta, causal ConvTranspose ×r, 3 residual units]
//! -> SnakeBeta -> causal conv k7 (-> 1) -> clamp to [-1, 1]: 1920 samples per frame.

pub(crate) mod conv;
mod transformer;

use conv::{CausalConv, CausalTransConv, DepthwiseConv, Snake};
use transformer::{CodecTransformer, TransformerState};

use super::ops::{gelu, layer_norm, linear, Mat};
use super::stack::CpuTensor;
use crate::backend::Frame;
use crate::config::CodecConfig;
use crate::weights::{CodecW, RvqW};

/// Floor of `cluster_usage` (`MimiEuclideanCodebook.epsilon`).
const USAGE_EPSILON: f32 = 1e-5;

/// A codebook's vectors, `embedding_sum / max(cluster_usage, 1e-5)`, `[bins, dim]` (the
/// decoder's and the encoder's quantizers alike).
pub(crate) fn codebook_vectors(sum: CpuTensor, usage: &[f32]) -> Mat {
    let (bins, dim) = (sum.shape[0], sum.shape[1]);
    let mut data = sum.data;
    for (row, u) in data.chunks_mut(dim).zip(usage) {
        let d = u.max(USAGE_EPSILON);
        for v in row.iter_mut() {
            *v /= d;
        }
    }
    Mat::new(data, bins, dim)
}

/// One residual vector quantizer's decode side.
#[derive(Debug, Clone)]
struct Rvq {
    /// Codebook vectors `embedding_sum / max(cluster_usage, 1e-5)`, `[bins, dim]` each.
    codebooks: Vec<Mat>,
    /// `[codebook_dim, dim]`.
    output_proj: Mat,
}

impl Rvq {
    fn new(w: RvqW<CpuTensor>) -> Self {
        let codebooks = w
            .codebooks
            .into_iter()
            .map(|(sum, usage)| codebook_vectors(sum, &usage.data))
            .collect();
        let op = w.output_proj;
        let (rows, cols) = (op.shape[0], op.shape[1]);
        Self {
            codebooks,
            output_proj: Mat::new(op.data, rows, cols),
        }
    }

    /// Sum of the codebook rows of `codes` (one per quantizer), projected.
    fn decode(&self, codes: &[&[u32]]) -> Vec<f32> {
        let dim = self.codebooks[0].cols;
        let t = codes.len();
        let mut sum = vec![0f32; t * dim];
        for (row, frame) in sum.chunks_mut(dim).zip(codes) {
            for (cb, &c) in self.codebooks.iter().zip(frame.iter()) {
                for (s, v) in row.iter_mut().zip(cb.row(c as usize)) {
                    *s += v;
                }
            }
        }
        linear(&sum, t, &self.output_proj, None)
    }
}

#[derive(Debug, Clone)]
struct ConvNext {
    dwconv: DepthwiseConv,
    norm_w: Vec<f32>,
    norm_b: Vec<f32>,
    pw1: (Mat, Vec<f32>),
    pw2: (Mat, Vec<f32>),
    gamma: Vec<f32>,
}

#[derive(Debug, Clone)]
struct Upsample {
    tconv: CausalTransConv,
    convnext: ConvNext,
}

#[derive(Debug, Clone)]
struct ResUnit {
    act1: Snake,
    conv1: CausalConv,
    act2: Snake,
    conv2: CausalConv,
}

#[derive(Debug, Clone)]
struct Block {
    snake: Snake,
    tconv: CausalTransConv,
    res_units: Vec<ResUnit>,
}

/// History of one decoder block: its transposed conv, then per residual unit the inputs
/// of conv1 and conv2.
#[derive(Debug, Clone)]
struct BlockState {
    tconv: Vec<f32>,
    res_units: Vec<(Vec<f32>, Vec<f32>)>,
}

/// Per-stream decoder state: the history of every causal layer.
#[derive(Debug, Clone)]
pub struct CodecState {
    pre_conv: Vec<f32>,
    transformer: TransformerState,
    /// Per upsample stage: (transposed-conv history, depthwise-conv history).
    upsample: Vec<(Vec<f32>, Vec<f32>)>,
    decoder_in: Vec<f32>,
    blocks: Vec<BlockState>,
    final_conv: Vec<f32>,
    /// Frames decoded so far.
    pub frames: usize,
}

/// The codec decoder.
#[derive(Debug, Clone)]
pub struct CodecDecoder {
    rvq_first: Rvq,
    rvq_rest: Rvq,
    codebook_size: usize,
    pre_conv: CausalConv,
    transformer: CodecTransformer,
    upsample: Vec<Upsample>,
    decoder_in: CausalConv,
    blocks: Vec<Block>,
    final_snake: Snake,
    final_conv: CausalConv,
    samples_per_frame: usize,
}

fn lin(w: crate::weights::LinearW<CpuTensor>) -> (Mat, Vec<f32>) {
    (
        w.weight.into_mat(),
        w.bias.map(|b| b.data).unwrap_or_default(),
    )
}

impl CodecDecoder {
    pub fn new(cfg: &CodecConfig, w: CodecW<CpuTensor>) -> Self {
        let d = &cfg.decoder;
        Self {
            rvq_first: Rvq::new(w.rvq_first),
            rvq_rest: Rvq::new(w.rvq_rest),
            codebook_size: d.codebook_size,
            pre_conv: CausalConv::new(w.pre_conv, 1),
            transformer: CodecTransformer::new(d, w.input_proj, w.layers, w.norm, w.output_proj),
            upsample: w
                .upsample
                .into_iter()
                .map(|u| Upsample {
                    tconv: CausalTransConv::new(u.tconv, u.factor),
                    convnext: ConvNext {
                        dwconv: DepthwiseConv::new(u.convnext.dwconv),
                        norm_w: u.convnext.norm_weight.data,
                        norm_b: u.convnext.norm_bias.data,
                        pw1: lin(u.convnext.pwconv1),
                        pw2: lin(u.convnext.pwconv2),
                        gamma: u.convnext.gamma.data,
                    },
                })
                .collect(),
            decoder_in: CausalConv::new(w.decoder_in, 1),
            blocks: w
                .blocks
                .into_iter()
                .map(|b| Block {
                    snake: Snake::new(b.snake),
                    tconv: CausalTransConv::new(b.tconv, b.rate),
                    res_units: b
                        .res_units
                        .into_iter()
                        .map(|r| ResUnit {
                            act1: Snake::new(r.act1),
                            conv1: CausalConv::new(r.conv1, r.dilation),
                            act2: Snake::new(r.act2),
                            conv2: CausalConv::new(r.conv2, 1),
                        })
                        .collect(),
                })
                .collect(),
            final_snake: Snake::new(w.final_snake),
            final_conv: CausalConv::new(w.final_conv, 1),
            samples_per_frame: cfg.decode_upsample_rate,
        }
    }

    pub fn samples_per_frame(&self) -> usize {
        self.samples_per_frame
    }

    pub fn codebook_size(&self) -> usize {
        self.codebook_size
    }

    /// A fresh stream (silence history).
    pub fn new_state(&self) -> CodecState {
        CodecState {
            pre_conv: self.pre_conv.new_state(),
            transformer: self.transformer.new_state(),
            upsample: self
                .upsample
                .iter()
                .map(|u| (u.tconv.new_state(), u.convnext.dwconv.new_state()))
                .collect(),
            decoder_in: self.decoder_in.new_state(),
            blocks: self
                .blocks
                .iter()
                .map(|b| BlockState {
                    tconv: b.tconv.new_state(),
                    res_units: b
                        .res_units
                        .iter()
                        .map(|r| (r.conv1.new_state(), r.conv2.new_state()))
                        .collect(),
                })
                .collect(),
            final_conv: self.final_conv.new_state(),
            frames: 0,
        }
    }

    /// Decodes `frames` (codes must be below the codebook size) continuing `st`; returns
    /// `frames.len() * samples_per_frame` samples in [-1, 1].
    pub fn decode(&self, frames: &[Frame], st: &mut CodecState) -> Vec<f32> {
        if frames.is_empty() {
            return Vec::new();
        }
        // 1. RVQ: semantic codebook + 15 acoustic codebooks.
        let first: Vec<&[u32]> = frames.iter().map(|f| &f[..1]).collect();
        let rest: Vec<&[u32]> = frames.iter().map(|f| &f[1..]).collect();
        let mut x = self.rvq_first.decode(&first);
        let r = self.rvq_rest.decode(&rest);
        for (a, b) in x.iter_mut().zip(&r) {
            *a += b;
        }
        // 2. causal conv + transformer at the frame rate.
        let x = self.pre_conv.forward(&x, &mut st.pre_conv);
        let mut x = self.transformer.forward(&x, &mut st.transformer);
        // 3. upsampling stages with ConvNeXt blocks.
        for (u, (ts, ds)) in self.upsample.iter().zip(st.upsample.iter_mut()) {
            let up = u.tconv.forward(&x, ts);
            x = convnext(&u.convnext, &up, ds);
        }
        // 4. decoder blocks.
        let mut x = self.decoder_in.forward(&x, &mut st.decoder_in);
        for (b, bs) in self.blocks.iter().zip(st.blocks.iter_mut()) {
            b.snake.forward(&mut x);
            x = b.tconv.forward(&x, &mut bs.tconv);
            for (ru, (s1, s2)) in b.res_units.iter().zip(bs.res_units.iter_mut()) {
                let mut h = x.clone();
                ru.act1.forward(&mut h);
                let mut h = ru.conv1.forward(&h, s1);
                ru.act2.forward(&mut h);
                let h = ru.conv2.forward(&h, s2);
                for (a, b) in x.iter_mut().zip(&h) {
                    *a += b;
                }
            }
        }
        self.final_snake.forward(&mut x);
        let mut pcm = self.final_conv.forward(&x, &mut st.final_conv);
        for v in pcm.iter_mut() {
            *v = v.clamp(-1.0, 1.0);
        }
        st.frames += frames.len();
        pcm
    }
}

/// ConvNeXt: depthwise causal conv -> LayerNorm -> Linear 4x -> GELU -> Linear -> γ, + input.
fn convnext(c: &ConvNext, x: &[f32], dw_state: &mut Vec<f32>) -> Vec<f32> {
    let ch = c.gamma.len();
    let t = x.len() / ch;
    let mut h = c.dwconv.forward(x, dw_state);
    layer_norm(&mut h, &c.norm_w, &c.norm_b, 1e-6);
    let mut h = linear(&h, t, &c.pw1.0, Some(&c.pw1.1));
    for v in h.iter_mut() {
        *v = gelu(*v);
    }
    let h = linear(&h, t, &c.pw2.0, Some(&c.pw2.1));
    let mut out = x.to_vec();
    for (orow, hrow) in out.chunks_mut(ch).zip(h.chunks(ch)) {
        for ((o, v), g) in orow.iter_mut().zip(hrow).zip(&c.gamma) {
            *o += g * v;
        }
    }
    out
}
