//! Weight names and shapes of the speaker encoder (`speaker_encoder.*` in a Base
//! checkpoint's `model.safetensors`). Every layer is a Conv1d with bias, `[out, in, k]`.

use super::config::SpeakerEncoderConfig;
use crate::checkpoint::Init;
use crate::error::ModelError;
use crate::weights::{ConvW, TensorLoader};

/// Name prefix of the speaker encoder's tensors.
pub const PREFIX: &str = "speaker_encoder";

/// One SE-Res2Net block (`blocks.{i}`, i >= 1).
#[derive(Debug, Clone)]
pub struct SeRes2NetW<T> {
    /// `tdnn1.conv`: 1x1, C -> C.
    pub tdnn1: ConvW<T>,
    /// `res2net_block.blocks.{j}.conv`, j < scale - 1: C/scale -> C/scale, kernel k.
    pub res2net: Vec<ConvW<T>>,
    /// `tdnn2.conv`: 1x1, C -> C.
    pub tdnn2: ConvW<T>,
    /// `se_block.conv1`: 1x1, C -> se_channels.
    pub se_conv1: ConvW<T>,
    /// `se_block.conv2`: 1x1, se_channels -> C.
    pub se_conv2: ConvW<T>,
}

/// All speaker-encoder weights.
#[derive(Debug, Clone)]
pub struct SpeakerEncoderW<T> {
    /// `blocks.0.conv`: `mel_dim` -> `channels[0]`, kernel `k[0]`.
    pub tdnn0: ConvW<T>,
    /// `blocks.1 ..= blocks.{n-2}`.
    pub blocks: Vec<SeRes2NetW<T>>,
    /// `mfa.conv`: `channels[-1]` -> `channels[-1]`.
    pub mfa: ConvW<T>,
    /// `asp.tdnn.conv`: 1x1, `3 * channels[-1]` -> attention channels.
    pub asp_tdnn: ConvW<T>,
    /// `asp.conv`: 1x1, attention channels -> `channels[-1]`.
    pub asp_conv: ConvW<T>,
    /// `fc`: 1x1, `2 * channels[-1]` -> `enc_dim`.
    pub fc: ConvW<T>,
}

/// Loads `{p}.weight` `[out, inp, k]` and `{p}.bias` `[out]`.
fn conv<L: TensorLoader>(
    l: &mut L,
    p: &str,
    out: usize,
    inp: usize,
    k: usize,
) -> Result<ConvW<L::T>, ModelError> {
    Ok(ConvW {
        weight: l.load(&format!("{p}.weight"), &[out, inp, k], Init::FanIn(inp * k))?,
        bias: l.load(&format!("{p}.bias"), &[out], Init::Bias)?,
    })
}

impl<T> SpeakerEncoderW<T> {
    /// Loads every tensor of a (validated) configuration.
    pub fn load<L: TensorLoader<T = T>>(
        cfg: &SpeakerEncoderConfig,
        l: &mut L,
    ) -> Result<Self, ModelError> {
        let ch = &cfg.enc_channels;
        let ks = &cfg.enc_kernel_sizes;
        let n = ch.len();
        let tdnn0 = conv(
            l,
            &format!("{PREFIX}.blocks.0.conv"),
            ch[0],
            cfg.mel_dim,
            ks[0],
        )?;
        let mut blocks = Vec::with_capacity(cfg.num_blocks());
        for i in 1..n - 1 {
            let p = format!("{PREFIX}.blocks.{i}");
            let (cin, c) = (ch[i - 1], ch[i]);
            let part = c / cfg.enc_res2net_scale;
            let res2net = (0..cfg.enc_res2net_scale - 1)
                .map(|j| {
                    let q = format!("{p}.res2net_block.blocks.{j}.conv");
                    conv(l, &q, part, part, ks[i])
                })
                .collect::<Result<_, _>>()?;
            blocks.push(SeRes2NetW {
                tdnn1: conv(l, &format!("{p}.tdnn1.conv"), c, cin, 1)?,
                res2net,
                tdnn2: conv(l, &format!("{p}.tdnn2.conv"), c, c, 1)?,
                se_conv1: conv(l, &format!("{p}.se_block.conv1"), cfg.enc_se_channels, c, 1)?,
                se_conv2: conv(l, &format!("{p}.se_block.conv2"), c, cfg.enc_se_channels, 1)?,
            });
        }
        let c = ch[n - 1];
        let a = cfg.enc_attention_channels;
        Ok(Self {
            tdnn0,
            blocks,
            mfa: conv(l, &format!("{PREFIX}.mfa.conv"), c, c, ks[n - 1])?,
            asp_tdnn: conv(l, &format!("{PREFIX}.asp.tdnn.conv"), a, 3 * c, 1)?,
            asp_conv: conv(l, &format!("{PREFIX}.asp.conv"), c, a, 1)?,
            fc: conv(l, &format!("{PREFIX}.fc"), cfg.enc_dim, 2 * c, 1)?,
        })
    }
}
