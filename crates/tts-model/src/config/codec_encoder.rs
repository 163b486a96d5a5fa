//! `encoder_config` of `speech_tokenizer/config.json`: the codec encoder (Kyutai Mimi) that
//! turns voice-clone reference audio into codes, with what the official code would refuse.

use std::path::Path;

use serde::Deserialize;

use super::codec::CodecConfig;
use super::strict::{invalid, Section};
use crate::error::ModelError;

/// `encoder_config`: transformers' `MimiConfig` (Kyutai Mimi), of which the encoder half is
/// used: SEANet conv encoder -> transformer -> stride-2 downsample -> split RVQ. Every key
/// is optional with `MimiConfig`'s default (the released values), as the official code
/// builds the encoder with `MimiConfig(**encoder_config)`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct CodecEncoderConfig {
    /// Input sample rate (Hz).
    pub sampling_rate: u32,
    /// `_frame_rate` (how `MimiConfig` saves it) or `frame_rate`: the code frame rate (Hz).
    /// When absent it is `sampling_rate / (2 · Π upsampling_ratios)`.
    #[serde(rename = "_frame_rate")]
    pub frame_rate_saved: Option<f64>,
    /// `frame_rate` as a constructor argument; `_frame_rate` wins when both are given.
    pub frame_rate: Option<f64>,
    /// Audio channels (1: mono).
    pub audio_channels: usize,
    /// Width of the latent frames (SEANet output, transformer, downsample).
    pub hidden_size: usize,
    /// Channels of the first conv; doubled by every downsampling conv.
    pub num_filters: usize,
    /// Residual blocks before every downsampling conv.
    pub num_residual_layers: usize,
    /// The decoder's upsampling ratios; the encoder downsamples by them in reverse order.
    /// Null or empty means `[8, 6, 5, 4]`.
    pub upsampling_ratios: Option<Vec<usize>>,
    /// Kernel of the first conv.
    pub kernel_size: usize,
    /// Kernel of the last conv.
    pub last_kernel_size: usize,
    /// Kernel of the first conv of a residual block (the second has kernel 1).
    pub residual_kernel_size: usize,
    /// Dilation of residual block `j` is `dilation_growth_rate^j`.
    pub dilation_growth_rate: usize,
    /// Causal convs (all padding on the left) or centred ones.
    pub use_causal_conv: bool,
    /// `constant` (zeros), `replicate` or `reflect`: how convs pad (the downsampling conv
    /// always replicates).
    pub pad_mode: String,
    /// A residual block's inner width is `dim / compress`.
    pub compress: usize,
    /// Entries per codebook.
    pub codebook_size: usize,
    /// Codebook vector width (256 when absent); null means `hidden_size`.
    pub codebook_dim: Option<usize>,
    /// Codebooks in all (semantic + acoustic).
    pub num_quantizers: usize,
    /// Residual blocks add a 1x1 conv of their input instead of the input itself.
    pub use_conv_shortcut: bool,
    /// Width the quantizers work in (a 1x1 `input_proj` maps to it unless it equals
    /// `hidden_size`).
    pub vector_quantization_hidden_dimension: usize,
    /// Codebooks of the semantic quantizer; the acoustic one has the rest.
    pub num_semantic_quantizers: usize,
    /// Transformer layers.
    pub num_hidden_layers: usize,
    /// Width of the transformer MLP.
    pub intermediate_size: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than the query heads).
    pub num_key_value_heads: usize,
    /// Null means `hidden_size / num_attention_heads`.
    pub head_dim: Option<usize>,
    /// MLP activation; only `gelu` (exact) is supported.
    pub hidden_act: String,
    /// LayerNorm epsilon.
    pub norm_eps: f64,
    /// RoPE base (default rotary embedding, positions from 0).
    pub rope_theta: f64,
    /// Declared, but the official encoder (eager/SDPA attention in transformers 4.57.3, one
    /// pass without a KV cache) attends causally over the whole input: it is not applied.
    pub sliding_window: Option<usize>,
    /// Biases on the attention projections.
    pub attention_bias: bool,
    /// Streaming mode: convs pad only on the left (no extra right padding), so a partial
    /// last frame is dropped.
    pub use_streaming: bool,
}

impl Default for CodecEncoderConfig {
    /// `MimiConfig()`'s defaults.
    fn default() -> Self {
        Self {
            sampling_rate: 24_000,
            frame_rate_saved: None,
            frame_rate: None,
            audio_channels: 1,
            hidden_size: 512,
            num_filters: 64,
            num_residual_layers: 1,
            upsampling_ratios: None,
            kernel_size: 7,
            last_kernel_size: 3,
            residual_kernel_size: 3,
            dilation_growth_rate: 2,
            use_causal_conv: true,
            pad_mode: "constant".into(),
            compress: 2,
            codebook_size: 2048,
            codebook_dim: Some(256),
            num_quantizers: 32,
            use_conv_shortcut: false,
            vector_quantization_hidden_dimension: 256,
            num_semantic_quantizers: 1,
            num_hidden_layers: 8,
            intermediate_size: 2048,
            num_attention_heads: 8,
            num_key_value_heads: 8,
            head_dim: None,
            hidden_act: "gelu".into(),
            norm_eps: 1e-5,
            rope_theta: 10_000.0,
            sliding_window: Some(250),
            attention_bias: false,
            use_streaming: false,
        }
    }
}

impl CodecEncoderConfig {
    /// The downsampling ratios in the order the encoder applies them (`[4, 5, 6, 8]`).
    pub fn encoder_ratios(&self) -> Vec<usize> {
        let mut r = match &self.upsampling_ratios {
            Some(r) if !r.is_empty() => r.clone(),
            _ => vec![8, 6, 5, 4],
        };
        r.reverse();
        r
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Width of a codebook vector.
    pub fn codebook_dim(&self) -> usize {
        self.codebook_dim.unwrap_or(self.hidden_size)
    }

    /// Width of the SEANet output before the last conv: `num_filters · 2^stages`.
    pub fn seanet_width(&self) -> usize {
        self.num_filters << self.encoder_ratios().len()
    }

    /// Frame rate of the SEANet output (`encodec_frame_rate`): `ceil(sr / Π ratios)`.
    pub fn encodec_frame_rate(&self) -> f64 {
        let hop: usize = self.encoder_ratios().iter().product();
        (self.sampling_rate as f64 / hop.max(1) as f64).ceil()
    }

    /// The code frame rate: the saved one, else `sampling_rate / frame size`.
    pub fn frame_rate(&self) -> f64 {
        self.frame_rate_saved
            .or(self.frame_rate)
            .unwrap_or_else(|| {
                let hop: usize = self.encoder_ratios().iter().product();
                self.sampling_rate as f64 / (2 * hop).max(1) as f64
            })
    }

    /// Kernel of the stride-2 downsampling conv: `2 · int(encodec_frame_rate / frame_rate)`
    /// (4 in the release); 0 when the model has none.
    pub fn downsample_kernel(&self) -> usize {
        if self.frame_rate() == self.encodec_frame_rate() {
            return 0;
        }
        2 * (self.encodec_frame_rate() / self.frame_rate()) as usize
    }

    /// Input samples per code frame: `2 · Π ratios` (1920 in the release).
    pub fn hop_length(&self) -> usize {
        2 * self.encoder_ratios().iter().product::<usize>()
    }
}

pub(super) const ENCODER: Section = Section {
    name: "encoder_config",
    required: &[],
    optional: &[
        "sampling_rate",
        "_frame_rate",
        "frame_rate",
        "audio_channels",
        "hidden_size",
        "num_filters",
        "num_residual_layers",
        "upsampling_ratios",
        "kernel_size",
        "last_kernel_size",
        "residual_kernel_size",
        "dilation_growth_rate",
        "use_causal_conv",
        "pad_mode",
        "compress",
        "codebook_size",
        "codebook_dim",
        "num_quantizers",
        "use_conv_shortcut",
        "vector_quantization_hidden_dimension",
        "num_semantic_quantizers",
        "num_hidden_layers",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "hidden_act",
        "norm_eps",
        "rope_theta",
        "sliding_window",
        "attention_bias",
        "use_streaming",
    ],
    // Decoder-side (transposed conv), initialisation-only, or unused by the default RoPE.
    ignored: &[
        "trim_right_ratio",
        "upsample_groups",
        "layer_scale_initial_scale",
        "max_position_embeddings",
    ],
};

impl CodecConfig {
    /// Checks what the official code would reject (or crash on) and what this implementation
    /// does not support, naming the field.
    pub(super) fn validate_encoder(&self, path: &Path) -> Result<(), ModelError> {
        let e = &self.encoder;
        let bad =
            |field: &str, msg: String| Err(invalid(path, &format!("encoder_config.{field}"), msg));
        if e.audio_channels != 1 {
            return bad(
                "audio_channels",
                format!("{}, only mono (1) is supported", e.audio_channels),
            );
        }
        if !matches!(e.pad_mode.as_str(), "constant" | "replicate" | "reflect") {
            return bad(
                "pad_mode",
                format!(
                    "`{}`, expected `constant`, `replicate` or `reflect`",
                    e.pad_mode
                ),
            );
        }
        if e.use_streaming && (e.pad_mode == "reflect" || !e.use_causal_conv) {
            return bad(
                "use_streaming",
                "streaming needs causal convs padded with `constant` or `replicate`".into(),
            );
        }
        if e.hidden_act != "gelu" {
            return bad(
                "hidden_act",
                format!("`{}`, only `gelu` is supported", e.hidden_act),
            );
        }
        let sizes = [
            ("hidden_size", e.hidden_size),
            ("num_filters", e.num_filters),
            ("kernel_size", e.kernel_size),
            ("last_kernel_size", e.last_kernel_size),
            ("residual_kernel_size", e.residual_kernel_size),
            ("dilation_growth_rate", e.dilation_growth_rate),
            ("compress", e.compress),
            ("intermediate_size", e.intermediate_size),
            ("num_attention_heads", e.num_attention_heads),
            ("num_key_value_heads", e.num_key_value_heads),
        ];
        for (field, v) in sizes {
            if v == 0 {
                return bad(field, "must be at least 1".into());
            }
        }
        if e.encoder_ratios().contains(&0) {
            return bad("upsampling_ratios", "ratios must be at least 1".into());
        }
        if e.num_filters < e.compress {
            return bad(
                "compress",
                format!(
                    "{}: residual blocks of {} channels would have none",
                    e.compress, e.num_filters
                ),
            );
        }
        if !e.hidden_size.is_multiple_of(e.num_attention_heads)
            || !e.num_attention_heads.is_multiple_of(e.num_key_value_heads)
            || e.head_dim() == 0
            || !e.head_dim().is_multiple_of(2)
        {
            return bad(
                "num_attention_heads",
                "hidden_size must split into the heads, heads into kv heads, head_dim even".into(),
            );
        }
        if e.downsample_kernel() < 2 {
            return bad(
                "_frame_rate",
                format!(
                    "{} Hz: the encoder needs its stride-2 downsampling conv (frame rate below {} Hz)",
                    e.frame_rate(),
                    e.encodec_frame_rate()
                ),
            );
        }
        if !e.codebook_size.is_power_of_two() {
            return bad(
                "codebook_size",
                format!("{}, must be a power of 2", e.codebook_size),
            );
        }
        if e.num_semantic_quantizers == 0 {
            return bad("num_semantic_quantizers", "must be at least 1".into());
        }
        if e.num_semantic_quantizers >= e.num_quantizers {
            return bad(
                "num_semantic_quantizers",
                format!(
                    "{}, must be below num_quantizers ({})",
                    e.num_semantic_quantizers, e.num_quantizers
                ),
            );
        }
        let vq_dim = e.vector_quantization_hidden_dimension;
        if vq_dim == 0 || e.codebook_dim() != vq_dim {
            return bad(
                "codebook_dim",
                format!(
                    "{}, but the quantizers work in {vq_dim} dimensions",
                    e.codebook_dim()
                ),
            );
        }
        let valid = self.encoder_valid_num_quantizers;
        if valid != super::NUM_CODE_GROUPS || valid > e.num_quantizers {
            return Err(invalid(
                path,
                "encoder_valid_num_quantizers",
                format!(
                    "{valid}, expected {} (at most encoder_config.num_quantizers = {})",
                    super::NUM_CODE_GROUPS,
                    e.num_quantizers
                ),
            ));
        }
        if self.encode_downsample_rate == 0 {
            return Err(invalid(
                path,
                "encode_downsample_rate",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UnknownKeys;
    use serde_json::{json, Value};

    fn parse(encoder: Option<Value>) -> Result<CodecConfig, ModelError> {
        let mut top = json!({
            "output_sample_rate": 24000,
            "decode_upsample_rate": 1920,
            "decoder_config": {
                "codebook_size": 64, "codebook_dim": 8, "hidden_size": 8, "latent_dim": 8,
                "rope_theta": 10000.0, "num_attention_heads": 1, "num_key_value_heads": 1,
                "sliding_window": 4, "intermediate_size": 16, "hidden_act": "silu",
                "rms_norm_eps": 1e-5, "num_hidden_layers": 1, "num_quantizers": 16,
                "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2], "decoder_dim": 16
            }
        });
        if let Some(e) = encoder {
            top["encoder_config"] = e;
        }
        let map = match top {
            Value::Object(m) => m.into_iter().collect(),
            _ => unreachable!(),
        };
        CodecConfig::from_object(Path::new("config.json"), &map, UnknownKeys::Reject)
    }

    #[test]
    fn absent_encoder_config_means_the_released_mimi() {
        for enc in [None, Some(Value::Null), Some(json!({}))] {
            let e = parse(enc).unwrap().encoder;
            assert_eq!(e.encoder_ratios(), [4, 5, 6, 8]);
            assert_eq!(
                (e.hidden_size, e.seanet_width(), e.head_dim()),
                (512, 1024, 64)
            );
            assert_eq!((e.frame_rate(), e.encodec_frame_rate()), (12.5, 25.0));
            assert_eq!((e.downsample_kernel(), e.hop_length()), (4, 1920));
            assert_eq!(e.codebook_dim(), 256);
        }
    }

    #[test]
    fn saved_frame_rate_wins_and_unknown_keys_are_refused() {
        let e = parse(Some(
            json!({"frame_rate": 25.0, "_frame_rate": 12.5, "codebook_dim": 256}),
        ))
        .unwrap()
        .encoder;
        assert_eq!(e.downsample_kernel(), 4);
        let err = parse(Some(json!({"codebook_dim": 256, "surprise": 1}))).unwrap_err();
        assert!(err.to_string().contains("encoder_config.surprise"), "{err}");
        let err = parse(Some(json!({"codebook_dim": 256, "frame_rate": 25.0}))).unwrap_err();
        assert!(err.to_string().contains("downsampling"), "{err}");
    }
}
