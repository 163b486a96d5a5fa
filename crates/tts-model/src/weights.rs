//! Weight names and shapes of the released checkpoints, in one place.
//!
//! Each module's weights are a plain struct generic over the tensor type `T`, built by walking
//! the checkpoint tree through a [`TensorLoader`]. The CPU reference loads `T` as f32 host
//! tensors; a GPU backend loads the same names into device buffers. Shapes are PyTorch's:
//! Linear `[out, in]`, Conv1d `[out, in/groups, k]`, ConvTranspose1d `[in, out, k]`.

use crate::checkpoint::Init;
use crate::config::{CodecConfig, ModelConfig, StackDims, NUM_CODE_GROUPS};
use crate::error::ModelError;

/// Turns (name, shape, init hint) into a backend tensor.
pub trait TensorLoader {
    type T;
    fn load(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Self::T, ModelError>;
}

/// A linear layer: weight `[out, in]`, optional bias `[out]`.
#[derive(Debug, Clone)]
pub struct LinearW<T> {
    pub weight: T,
    pub bias: Option<T>,
}

/// A bias-free linear layer's weight `[out, in]` (initialised from its fan-in).
fn matrix<L: TensorLoader>(
    l: &mut L,
    name: &str,
    out: usize,
    inp: usize,
) -> Result<L::T, ModelError> {
    l.load(name, &[out, inp], Init::FanIn(inp))
}

/// A norm's weight `[n]`.
fn norm<L: TensorLoader>(l: &mut L, name: &str, n: usize) -> Result<L::T, ModelError> {
    l.load(name, &[n], Init::Norm)
}

fn linear<L: TensorLoader>(
    l: &mut L,
    prefix: &str,
    out: usize,
    inp: usize,
    bias: bool,
) -> Result<LinearW<L::T>, ModelError> {
    Ok(LinearW {
        weight: matrix(l, &format!("{prefix}.weight"), out, inp)?,
        bias: if bias {
            Some(l.load(&format!("{prefix}.bias"), &[out], Init::Bias)?)
        } else {
            None
        },
    })
}

/// Self-attention of a Qwen3 decoder layer (QK-norm, no biases).
#[derive(Debug, Clone)]
pub struct AttentionW<T> {
    pub q_proj: T,
    pub k_proj: T,
    pub v_proj: T,
    pub o_proj: T,
    pub q_norm: T,
    pub k_norm: T,
}

/// One Qwen3 decoder layer (talker and code predictor share the layout).
#[derive(Debug, Clone)]
pub struct DecoderLayerW<T> {
    pub input_layernorm: T,
    pub attn: AttentionW<T>,
    pub post_attention_layernorm: T,
    pub gate_proj: T,
    pub up_proj: T,
    pub down_proj: T,
}

fn decoder_layer<L: TensorLoader>(
    l: &mut L,
    p: &str,
    d: &StackDims,
) -> Result<DecoderLayerW<L::T>, ModelError> {
    let (h, q, kv, i) = (d.hidden, d.q_dim(), d.kv_dim(), d.intermediate);
    Ok(DecoderLayerW {
        input_layernorm: norm(l, &format!("{p}.input_layernorm.weight"), h)?,
        attn: AttentionW {
            q_proj: matrix(l, &format!("{p}.self_attn.q_proj.weight"), q, h)?,
            k_proj: matrix(l, &format!("{p}.self_attn.k_proj.weight"), kv, h)?,
            v_proj: matrix(l, &format!("{p}.self_attn.v_proj.weight"), kv, h)?,
            o_proj: matrix(l, &format!("{p}.self_attn.o_proj.weight"), h, q)?,
            q_norm: norm(l, &format!("{p}.self_attn.q_norm.weight"), d.head_dim)?,
            k_norm: norm(l, &format!("{p}.self_attn.k_norm.weight"), d.head_dim)?,
        },
        post_attention_layernorm: norm(l, &format!("{p}.post_attention_layernorm.weight"), h)?,
        gate_proj: matrix(l, &format!("{p}.mlp.gate_proj.weight"), i, h)?,
        up_proj: matrix(l, &format!("{p}.mlp.up_proj.weight"), i, h)?,
        down_proj: matrix(l, &format!("{p}.mlp.down_proj.weight"), h, i)?,
    })
}

/// The talker: 28 (or so) Qwen3 layers, the text and codec embeddings and the codec head.
#[derive(Debug, Clone)]
pub struct TalkerW<T> {
    pub layers: Vec<DecoderLayerW<T>>,
    pub norm: T,
    /// `[codec vocab, H]`
    pub codec_embedding: T,
    /// `[text vocab, text hidden]`
    pub text_embedding: T,
    /// text hidden -> text hidden, SiLU, then -> H (both with bias).
    pub text_fc1: LinearW<T>,
    pub text_fc2: LinearW<T>,
    /// `[codec vocab, H]`, no bias, not tied.
    pub codec_head: T,
}

impl<T> TalkerW<T> {
    pub fn load<L: TensorLoader<T = T>>(cfg: &ModelConfig, l: &mut L) -> Result<Self, ModelError> {
        let t = &cfg.talker;
        let d = t.dims();
        let layers = (0..d.layers)
            .map(|i| decoder_layer(l, &format!("talker.model.layers.{i}"), &d))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            layers,
            norm: norm(l, "talker.model.norm.weight", d.hidden)?,
            codec_embedding: l.load(
                "talker.model.codec_embedding.weight",
                &[t.vocab_size, d.hidden],
                Init::Embedding,
            )?,
            text_embedding: l.load(
                "talker.model.text_embedding.weight",
                &[t.text_vocab_size, t.text_hidden_size],
                Init::Embedding,
            )?,
            text_fc1: linear(
                l,
                "talker.text_projection.linear_fc1",
                t.text_hidden_size,
                t.text_hidden_size,
                true,
            )?,
            text_fc2: linear(
                l,
                "talker.text_projection.linear_fc2",
                d.hidden,
                t.text_hidden_size,
                true,
            )?,
            codec_head: matrix(l, "talker.codec_head.weight", t.vocab_size, d.hidden)?,
        })
    }
}

/// The code predictor ("sub-talker"): 5 Qwen3 layers run 15 times per frame.
#[derive(Debug, Clone)]
pub struct CodePredictorW<T> {
    pub layers: Vec<DecoderLayerW<T>>,
    pub norm: T,
    /// 15 tables `[2048, talker H]`; table j embeds code j+1.
    pub codec_embeddings: Vec<T>,
    /// 15 heads `[2048, cp H]`; head j predicts code j+1.
    pub lm_heads: Vec<T>,
    /// talker H -> cp H with bias (only when the widths differ).
    pub mtp_projection: Option<LinearW<T>>,
}

impl<T> CodePredictorW<T> {
    pub fn load<L: TensorLoader<T = T>>(cfg: &ModelConfig, l: &mut L) -> Result<Self, ModelError> {
        let cp = &cfg.talker.code_predictor;
        let d = cp.dims();
        let talker_h = cfg.talker.hidden_size;
        let p = "talker.code_predictor";
        let layers = (0..d.layers)
            .map(|i| decoder_layer(l, &format!("{p}.model.layers.{i}"), &d))
            .collect::<Result<Vec<_>, _>>()?;
        let groups = NUM_CODE_GROUPS - 1;
        let codec_embeddings = (0..groups)
            .map(|j| {
                l.load(
                    &format!("{p}.model.codec_embedding.{j}.weight"),
                    &[cp.vocab_size, talker_h],
                    Init::Embedding,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let lm_heads = (0..groups)
            .map(|j| {
                matrix(
                    l,
                    &format!("{p}.lm_head.{j}.weight"),
                    cp.vocab_size,
                    d.hidden,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mtp_projection = if cfg.has_mtp_projection() {
            Some(linear(
                l,
                &format!("{p}.small_to_mtp_projection"),
                d.hidden,
                talker_h,
                true,
            )?)
        } else {
            None
        };
        Ok(Self {
            layers,
            norm: norm(l, &format!("{p}.model.norm.weight"), d.hidden)?,
            codec_embeddings,
            lm_heads,
            mtp_projection,
        })
    }
}

/// A 1-D convolution with bias: weight `[out, in/groups, k]` (Conv1d) or `[in, out, k]`
/// (ConvTranspose1d), bias `[out]`.
#[derive(Debug, Clone)]
pub struct ConvW<T> {
    pub weight: T,
    pub bias: T,
}

/// Loads `{p}.weight` with `shape` and `{p}.bias`; `transposed` says the layout is
/// ConvTranspose1d's `[in, out, k]`.
fn conv<L: TensorLoader>(
    l: &mut L,
    p: &str,
    shape: [usize; 3],
    fan_in: usize,
    transposed: bool,
) -> Result<ConvW<L::T>, ModelError> {
    let out = if transposed { shape[1] } else { shape[0] };
    Ok(ConvW {
        weight: l.load(&format!("{p}.weight"), &shape, Init::FanIn(fan_in))?,
        bias: l.load(&format!("{p}.bias"), &[out], Init::Bias)?,
    })
}

/// SnakeBeta activation parameters, stored in log space: `alpha`, `beta` `[C]`.
#[derive(Debug, Clone)]
pub struct SnakeW<T> {
    pub alpha: T,
    pub beta: T,
}

fn snake<L: TensorLoader>(l: &mut L, p: &str, c: usize) -> Result<SnakeW<L::T>, ModelError> {
    Ok(SnakeW {
        alpha: l.load(&format!("{p}.alpha"), &[c], Init::LogScale)?,
        beta: l.load(&format!("{p}.beta"), &[c], Init::LogScale)?,
    })
}

/// A residual vector quantizer's decode side: EMA codebooks and the output projection.
#[derive(Debug, Clone)]
pub struct RvqW<T> {
    /// Per quantizer: (`embedding_sum` `[bins, dim]`, `cluster_usage` `[bins]`).
    pub codebooks: Vec<(T, T)>,
    /// 1x1 conv `[codebook_dim, dim, 1]`, no bias.
    pub output_proj: T,
}

/// One layer of the codec's sliding-window transformer.
#[derive(Debug, Clone)]
pub struct CodecLayerW<T> {
    pub input_layernorm: T,
    pub q_proj: T,
    pub k_proj: T,
    pub v_proj: T,
    pub o_proj: T,
    pub attn_layer_scale: T,
    pub post_attention_layernorm: T,
    pub gate_proj: T,
    pub up_proj: T,
    pub down_proj: T,
    pub mlp_layer_scale: T,
}

/// ConvNeXt block of the codec's upsampler.
#[derive(Debug, Clone)]
pub struct ConvNextW<T> {
    /// Depthwise causal conv `[C, 1, 7]` + bias.
    pub dwconv: ConvW<T>,
    pub norm_weight: T,
    pub norm_bias: T,
    pub pwconv1: LinearW<T>,
    pub pwconv2: LinearW<T>,
    pub gamma: T,
}

/// One upsampling stage: ConvTranspose1d(k = s = factor) then ConvNeXt.
#[derive(Debug, Clone)]
pub struct UpsampleW<T> {
    pub factor: usize,
    pub tconv: ConvW<T>,
    pub convnext: ConvNextW<T>,
}

/// Residual unit: Snake -> causal conv k7 (dilated) -> Snake -> conv k1, plus the input.
#[derive(Debug, Clone)]
pub struct ResUnitW<T> {
    pub dilation: usize,
    pub act1: SnakeW<T>,
    pub conv1: ConvW<T>,
    pub act2: SnakeW<T>,
    pub conv2: ConvW<T>,
}

/// Decoder block: Snake -> causal ConvTranspose1d(k = 2r, s = r) -> 3 residual units.
#[derive(Debug, Clone)]
pub struct DecoderBlockW<T> {
    pub rate: usize,
    pub in_dim: usize,
    pub out_dim: usize,
    pub snake: SnakeW<T>,
    pub tconv: ConvW<T>,
    pub res_units: Vec<ResUnitW<T>>,
}

/// The codec decoder (speech tokenizer, decode side).
#[derive(Debug, Clone)]
pub struct CodecW<T> {
    pub rvq_first: RvqW<T>,
    pub rvq_rest: RvqW<T>,
    pub pre_conv: ConvW<T>,
    pub input_proj: LinearW<T>,
    pub layers: Vec<CodecLayerW<T>>,
    pub norm: T,
    pub output_proj: LinearW<T>,
    pub upsample: Vec<UpsampleW<T>>,
    pub decoder_in: ConvW<T>,
    pub blocks: Vec<DecoderBlockW<T>>,
    pub final_snake: SnakeW<T>,
    pub final_conv: ConvW<T>,
}

/// Dilations of the three residual units in every decoder block.
pub const RES_UNIT_DILATIONS: [usize; 3] = [1, 3, 9];

impl<T> CodecW<T> {
    pub fn load<L: TensorLoader<T = T>>(cfg: &CodecConfig, l: &mut L) -> Result<Self, ModelError> {
        let d = &cfg.decoder;
        let half = d.codebook_dim / 2;
        let rvq = |l: &mut L, name: &str, n: usize| -> Result<RvqW<L::T>, ModelError> {
            let p = format!("decoder.quantizer.{name}");
            let codebooks = (0..n)
                .map(|i| {
                    let cb = format!("{p}.vq.layers.{i}._codebook");
                    Ok((
                        l.load(
                            &format!("{cb}.embedding_sum"),
                            &[d.codebook_size, half],
                            Init::Embedding,
                        )?,
                        l.load(
                            &format!("{cb}.cluster_usage"),
                            &[d.codebook_size],
                            Init::Usage,
                        )?,
                    ))
                })
                .collect::<Result<Vec<_>, ModelError>>()?;
            Ok(RvqW {
                codebooks,
                output_proj: l.load(
                    &format!("{p}.output_proj.weight"),
                    &[d.codebook_dim, half, 1],
                    Init::FanIn(half),
                )?,
            })
        };
        let rvq_first = rvq(l, "rvq_first", 1)?;
        let rvq_rest = rvq(l, "rvq_rest", d.num_quantizers - 1)?;
        let (h, lat, hd) = (d.hidden_size, d.latent_dim, d.head_dim());
        let (q, kv) = (d.num_attention_heads * hd, d.num_key_value_heads * hd);
        let pt = "decoder.pre_transformer";
        let layers = (0..d.num_hidden_layers)
            .map(|i| {
                let p = format!("{pt}.layers.{i}");
                Ok(CodecLayerW {
                    input_layernorm: norm(l, &format!("{p}.input_layernorm.weight"), h)?,
                    q_proj: matrix(l, &format!("{p}.self_attn.q_proj.weight"), q, h)?,
                    k_proj: matrix(l, &format!("{p}.self_attn.k_proj.weight"), kv, h)?,
                    v_proj: matrix(l, &format!("{p}.self_attn.v_proj.weight"), kv, h)?,
                    o_proj: matrix(l, &format!("{p}.self_attn.o_proj.weight"), h, q)?,
                    attn_layer_scale: l.load(
                        &format!("{p}.self_attn_layer_scale.scale"),
                        &[h],
                        Init::Scale(0.3),
                    )?,
                    post_attention_layernorm: norm(
                        l,
                        &format!("{p}.post_attention_layernorm.weight"),
                        h,
                    )?,
                    gate_proj: matrix(
                        l,
                        &format!("{p}.mlp.gate_proj.weight"),
                        d.intermediate_size,
                        h,
                    )?,
                    up_proj: matrix(
                        l,
                        &format!("{p}.mlp.up_proj.weight"),
                        d.intermediate_size,
                        h,
                    )?,
                    down_proj: matrix(
                        l,
                        &format!("{p}.mlp.down_proj.weight"),
                        h,
                        d.intermediate_size,
                    )?,
                    mlp_layer_scale: l.load(
                        &format!("{p}.mlp_layer_scale.scale"),
                        &[h],
                        Init::Scale(0.3),
                    )?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let upsample = d
            .upsampling_ratios
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                let p = format!("decoder.upsample.{i}");
                Ok(UpsampleW {
                    factor: f,
                    tconv: conv(l, &format!("{p}.0.conv"), [lat, lat, f], lat, true)?,
                    convnext: ConvNextW {
                        dwconv: conv(l, &format!("{p}.1.dwconv.conv"), [lat, 1, 7], 7, false)?,
                        norm_weight: norm(l, &format!("{p}.1.norm.weight"), lat)?,
                        norm_bias: l.load(&format!("{p}.1.norm.bias"), &[lat], Init::Bias)?,
                        pwconv1: linear(l, &format!("{p}.1.pwconv1"), 4 * lat, lat, true)?,
                        pwconv2: linear(l, &format!("{p}.1.pwconv2"), lat, 4 * lat, true)?,
                        gamma: l.load(&format!("{p}.1.gamma"), &[lat], Init::Scale(0.3))?,
                    },
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let blocks = d
            .upsample_rates
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let (cin, cout) = (d.decoder_dim >> i, d.decoder_dim >> (i + 1));
                let p = format!("decoder.decoder.{}.block", i + 1);
                let res_units = RES_UNIT_DILATIONS
                    .iter()
                    .enumerate()
                    .map(|(u, &dil)| {
                        let pu = format!("{p}.{}", u + 2);
                        Ok(ResUnitW {
                            dilation: dil,
                            act1: snake(l, &format!("{pu}.act1"), cout)?,
                            conv1: conv(
                                l,
                                &format!("{pu}.conv1.conv"),
                                [cout, cout, 7],
                                7 * cout,
                                false,
                            )?,
                            act2: snake(l, &format!("{pu}.act2"), cout)?,
                            conv2: conv(
                                l,
                                &format!("{pu}.conv2.conv"),
                                [cout, cout, 1],
                                cout,
                                false,
                            )?,
                        })
                    })
                    .collect::<Result<Vec<_>, ModelError>>()?;
                Ok(DecoderBlockW {
                    rate: r,
                    in_dim: cin,
                    out_dim: cout,
                    snake: snake(l, &format!("{p}.0"), cin)?,
                    tconv: conv(l, &format!("{p}.1.conv"), [cin, cout, 2 * r], 2 * cin, true)?,
                    res_units,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let n_blocks = d.upsample_rates.len();
        let out_dim = d.decoder_dim >> n_blocks;
        Ok(Self {
            rvq_first,
            rvq_rest,
            pre_conv: conv(
                l,
                "decoder.pre_conv.conv",
                [lat, d.codebook_dim, 3],
                3 * d.codebook_dim,
                false,
            )?,
            input_proj: linear(l, &format!("{pt}.input_proj"), h, lat, true)?,
            layers,
            norm: norm(l, &format!("{pt}.norm.weight"), h)?,
            output_proj: linear(l, &format!("{pt}.output_proj"), lat, h, true)?,
            upsample,
            decoder_in: conv(
                l,
                "decoder.decoder.0.conv",
                [d.decoder_dim, lat, 7],
                7 * lat,
                false,
            )?,
            blocks,
            final_snake: snake(l, &format!("decoder.decoder.{}", n_blocks + 1), out_dim)?,
            final_conv: conv(
                l,
                &format!("decoder.decoder.{}.conv", n_blocks + 2),
                [1, out_dim, 7],
                7 * out_dim,
                false,
            )?,
        })
    }
}
