//! `speech_tokenizer/config.json`: the 12 Hz codec. The decoder turns codes into PCM; the
//! encoder (Kyutai Mimi, `encoder_config`) turns voice-clone reference audio into codes.

use std::path::Path;

use serde::Deserialize;

use super::codec_encoder::{CodecEncoderConfig, ENCODER};
use super::strict::{invalid, parse_section, read_json_object, sub_object, Section, UnknownKeys};
use crate::error::ModelError;

/// The top level of the speech tokenizer config.
#[derive(Debug, Clone, Deserialize)]
pub struct CodecConfig {
    pub output_sample_rate: u32,
    pub decode_upsample_rate: usize,
    /// Codebooks of the encoder's output that are kept (the first 16 of its 32).
    #[serde(default = "default_valid_quantizers")]
    pub encoder_valid_num_quantizers: usize,
    /// Sample rate the encoder expects.
    #[serde(default = "default_sample_rate")]
    pub input_sample_rate: u32,
    /// Input samples per code frame: the encoder's codes are trimmed to
    /// `ceil(samples / encode_downsample_rate)` frames.
    #[serde(default = "default_hop")]
    pub encode_downsample_rate: usize,
    #[serde(skip)]
    pub decoder: CodecDecoderConfig,
    /// `encoder_config`; Mimi's defaults (the released sizes) when the key is absent, as
    /// the official config class does.
    #[serde(skip)]
    pub encoder: CodecEncoderConfig,
}

fn default_valid_quantizers() -> usize {
    16
}

fn default_sample_rate() -> u32 {
    24_000
}

fn default_hop() -> usize {
    1920
}

/// `decoder_config`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CodecDecoderConfig {
    pub codebook_size: usize,
    pub codebook_dim: usize,
    pub hidden_size: usize,
    pub latent_dim: usize,
    pub rope_theta: f64,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default)]
    pub attention_bias: bool,
    pub sliding_window: usize,
    pub intermediate_size: usize,
    pub hidden_act: String,
    pub rms_norm_eps: f64,
    pub num_hidden_layers: usize,
    pub num_quantizers: usize,
    pub upsample_rates: Vec<usize>,
    pub upsampling_ratios: Vec<usize>,
    pub decoder_dim: usize,
}

impl CodecDecoderConfig {
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Output samples per input frame: the product of all upsampling factors.
    pub fn total_upsample(&self) -> usize {
        self.upsampling_ratios
            .iter()
            .chain(self.upsample_rates.iter())
            .product()
    }
}

const TOP: Section = Section {
    name: "",
    required: &[
        "output_sample_rate",
        "decode_upsample_rate",
        "decoder_config",
    ],
    optional: &[
        "encoder_config",
        "encoder_valid_num_quantizers",
        "input_sample_rate",
        "encode_downsample_rate",
    ],
    ignored: &[],
};

const DECODER: Section = Section {
    name: "decoder_config",
    required: &[
        "codebook_size",
        "codebook_dim",
        "hidden_size",
        "latent_dim",
        "rope_theta",
        "num_attention_heads",
        "num_key_value_heads",
        "sliding_window",
        "intermediate_size",
        "hidden_act",
        "rms_norm_eps",
        "num_hidden_layers",
        "num_quantizers",
        "upsample_rates",
        "upsampling_ratios",
        "decoder_dim",
    ],
    optional: &["head_dim", "attention_bias"],
    // Declared in the released config but never read by the reference decoder.
    ignored: &[
        "max_position_embeddings",
        "layer_scale_initial_scale",
        "num_semantic_quantizers",
        "semantic_codebook_size",
        "vector_quantization_hidden_dimension",
        "layer_types",
    ],
};

impl CodecConfig {
    pub fn load(path: &Path, unknown: UnknownKeys) -> Result<Self, ModelError> {
        let top = read_json_object(path)?;
        Self::from_object(path, &top, unknown)
    }

    /// Parses an already-read config object (also used by the built-in models).
    pub fn from_object(
        path: &Path,
        top: &std::collections::BTreeMap<String, serde_json::Value>,
        unknown: UnknownKeys,
    ) -> Result<Self, ModelError> {
        let mut cfg: CodecConfig = parse_section(path, top, &TOP, unknown)?;
        if let Some(mt) = top.get("model_type").and_then(|v| v.as_str()) {
            if mt != "qwen3_tts_tokenizer_12hz" {
                return Err(invalid(
                    path,
                    "model_type",
                    format!("`{mt}`, expected `qwen3_tts_tokenizer_12hz`"),
                ));
            }
        }
        let dec = sub_object(path, top, "decoder_config", "decoder_config")?;
        cfg.decoder = parse_section(path, &dec, &DECODER, unknown)?;
        // A missing or null `encoder_config` means Mimi's defaults, as in the official code.
        if top.get("encoder_config").is_some_and(|v| !v.is_null()) {
            let enc = sub_object(path, top, "encoder_config", "encoder_config")?;
            cfg.encoder = parse_section(path, &enc, &ENCODER, unknown)?;
        }
        cfg.validate(path)?;
        cfg.validate_encoder(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), ModelError> {
        let d = &self.decoder;
        if d.hidden_act != "silu" {
            return Err(invalid(
                path,
                "decoder_config.hidden_act",
                format!("`{}`, only `silu` is supported", d.hidden_act),
            ));
        }
        if d.attention_bias {
            return Err(invalid(
                path,
                "decoder_config.attention_bias",
                "attention biases are not supported",
            ));
        }
        if d.num_quantizers != super::NUM_CODE_GROUPS {
            return Err(invalid(
                path,
                "decoder_config.num_quantizers",
                format!("{}, expected {}", d.num_quantizers, super::NUM_CODE_GROUPS),
            ));
        }
        if !d.codebook_dim.is_multiple_of(2) {
            return Err(invalid(
                path,
                "decoder_config.codebook_dim",
                "must be even (two halves per quantizer)",
            ));
        }
        if d.sliding_window == 0 {
            return Err(invalid(
                path,
                "decoder_config.sliding_window",
                "must be at least 1",
            ));
        }
        if d.num_attention_heads == 0
            || d.num_key_value_heads == 0
            || !d.num_attention_heads.is_multiple_of(d.num_key_value_heads)
            || !d.head_dim().is_multiple_of(2)
        {
            return Err(invalid(
                path,
                "decoder_config.num_attention_heads",
                "heads must be a multiple of kv heads and head_dim even",
            ));
        }
        if !d.decoder_dim.is_multiple_of(1 << d.upsample_rates.len()) {
            return Err(invalid(
                path,
                "decoder_config.decoder_dim",
                "must halve cleanly once per upsample rate",
            ));
        }
        if d.total_upsample() != self.decode_upsample_rate {
            return Err(invalid(
                path,
                "decode_upsample_rate",
                format!(
                    "{}, but the decoder upsamples by {}",
                    self.decode_upsample_rate,
                    d.total_upsample()
                ),
            ));
        }
        Ok(())
    }
}
