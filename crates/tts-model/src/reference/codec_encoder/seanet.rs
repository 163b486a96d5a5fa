//! The SEANet conv encoder of Mimi (`encoder.encoder.layers.*`): audio `[T, 1]` ->
//! latent frames `[⌈T / Π ratios⌉, hidden]` (25 Hz in the release).
//!
//! Layers, as `MimiEncoder` lists them: conv k7 (1 -> F); then per ratio r of the reversed
//! `upsampling_ratios` ([4, 5, 6, 8]): residual blocks, ELU, conv k2r stride r (C -> 2C);
//! then ELU and conv k3 (-> hidden). A residual block is
//! `x + conv_k1(ELU(conv_k3_dilated(ELU(x))))` with a `C / compress` wide middle.

use super::super::ops::add_assign;
use super::conv::{elu, Conv1d, ConvSpec, PadMode};
use crate::checkpoint::WeightSource;
use crate::config::CodecConfig;
use crate::error::ModelError;

/// `MimiResnetBlock`.
#[derive(Debug, Clone)]
struct ResBlock {
    /// Each preceded by an ELU.
    convs: [Conv1d; 2],
    /// A 1x1 conv of the input (`use_conv_shortcut`), else the input itself.
    shortcut: Option<Conv1d>,
}

#[derive(Debug, Clone)]
enum Layer {
    Conv(Conv1d),
    Res(Box<ResBlock>),
    Elu,
}

/// The conv stack.
#[derive(Debug, Clone)]
pub struct Seanet {
    layers: Vec<Layer>,
}

impl Seanet {
    pub fn load(cfg: &CodecConfig, src: &WeightSource) -> Result<Self, ModelError> {
        let e = &cfg.encoder;
        let spec = |cin, cout, kernel, stride, dilation| ConvSpec {
            cin,
            cout,
            kernel,
            stride,
            dilation,
            bias: true,
            causal: e.use_causal_conv,
            pad_mode: PadMode::parse(&e.pad_mode),
            streaming: e.use_streaming,
        };
        let name = |i: usize, rest: &str| format!("encoder.encoder.layers.{i}.{rest}");
        let mut layers = Vec::new();
        layers.push(Layer::Conv(Conv1d::load(
            src,
            &name(0, "conv"),
            spec(e.audio_channels, e.num_filters, e.kernel_size, 1, 1),
        )?));
        let mut dim = e.num_filters;
        for ratio in e.encoder_ratios() {
            for j in 0..e.num_residual_layers {
                let i = layers.len();
                let hidden = dim / e.compress;
                let dilation = e.dilation_growth_rate.pow(j as u32);
                let shortcut = if e.use_conv_shortcut {
                    Some(Conv1d::load(
                        src,
                        &name(i, "shortcut.conv"),
                        spec(dim, dim, 1, 1, 1),
                    )?)
                } else {
                    None
                };
                layers.push(Layer::Res(Box::new(ResBlock {
                    convs: [
                        Conv1d::load(
                            src,
                            &name(i, "block.1.conv"),
                            spec(dim, hidden, e.residual_kernel_size, 1, dilation),
                        )?,
                        Conv1d::load(src, &name(i, "block.3.conv"), spec(hidden, dim, 1, 1, 1))?,
                    ],
                    shortcut,
                })));
            }
            layers.push(Layer::Elu);
            let i = layers.len();
            layers.push(Layer::Conv(Conv1d::load(
                src,
                &name(i, "conv"),
                spec(dim, 2 * dim, 2 * ratio, ratio, 1),
            )?));
            dim *= 2;
        }
        layers.push(Layer::Elu);
        let i = layers.len();
        layers.push(Layer::Conv(Conv1d::load(
            src,
            &name(i, "conv"),
            spec(dim, e.hidden_size, e.last_kernel_size, 1, 1),
        )?));
        Ok(Self { layers })
    }

    /// Rows out for `t` samples in (0 when the input is too short for a frame).
    pub fn output_len(&self, mut t: usize) -> usize {
        for l in &self.layers {
            match l {
                Layer::Conv(c) => t = c.output_len(t),
                Layer::Res(r) => {
                    for c in &r.convs {
                        t = c.output_len(t);
                    }
                }
                Layer::Elu => {}
            }
        }
        t
    }

    /// Mono samples -> `[output_len, hidden]`.
    pub fn forward(&self, audio: &[f32]) -> Vec<f32> {
        let mut x = audio.to_vec();
        for l in &self.layers {
            x = match l {
                Layer::Conv(c) => c.forward(&x),
                Layer::Elu => {
                    elu(&mut x);
                    x
                }
                Layer::Res(r) => {
                    let mut h = x.clone();
                    for c in &r.convs {
                        elu(&mut h);
                        h = c.forward(&h);
                    }
                    let mut res = match &r.shortcut {
                        Some(s) => s.forward(&x),
                        None => x,
                    };
                    add_assign(&mut res, &h);
                    res
                }
            };
        }
        x
    }
}
