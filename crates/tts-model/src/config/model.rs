//! `config.json` of a Qwen3-TTS checkpoint: the talker, its code predictor, token ids,
//! speakers and languages. Mirrors the released file; validated once when loaded.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::strict::{invalid, parse_section, read_json_object, sub_object, Section, UnknownKeys};
use crate::error::ModelError;
use crate::reference::speaker::SpeakerEncoderConfig;

/// Number of codebooks per frame: code 0 from the talker, codes 1..15 from the code predictor.
pub const NUM_CODE_GROUPS: usize = 16;

/// Which released variant a checkpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Preset speakers (`spk_id`), optional instructions (1.7B only).
    CustomVoice,
    /// No speakers; the voice is described by the instructions.
    VoiceDesign,
    /// Voice cloning from reference audio (speaker encoder). Loaded, not yet served.
    Base,
}

impl ModelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::CustomVoice => "custom_voice",
            ModelKind::VoiceDesign => "voice_design",
            ModelKind::Base => "base",
        }
    }
}

/// A speaker's dialect flag: `false`, or the language key of its dialect.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum DialectFlag {
    Flag(bool),
    Dialect(String),
}

impl DialectFlag {
    /// The dialect language key, when the speaker has one.
    pub fn dialect(&self) -> Option<&str> {
        match self {
            DialectFlag::Dialect(d) => Some(d),
            DialectFlag::Flag(_) => None,
        }
    }
}

/// The top level of `config.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelConfig {
    pub tts_model_type: ModelKind,
    pub tts_model_size: String,
    pub tokenizer_type: String,
    pub im_start_token_id: u32,
    pub im_end_token_id: u32,
    pub tts_pad_token_id: u32,
    pub tts_bos_token_id: u32,
    pub tts_eos_token_id: u32,
    #[serde(default)]
    pub assistant_token_id: Option<u32>,
    #[serde(skip)]
    pub talker: TalkerConfig,
    /// The speaker encoder of a Base checkpoint (`None` for the other kinds).
    #[serde(skip)]
    pub speaker_encoder: Option<SpeakerEncoderConfig>,
}

/// RoPE settings as written in the talker config. With the identical temporal/height/width
/// position ids that Qwen3-TTS always uses, interleaved MRoPE equals plain 1-D RoPE.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct RopeScaling {
    #[serde(default)]
    pub interleaved: bool,
    #[serde(default)]
    pub mrope_section: Vec<usize>,
    #[serde(default)]
    pub rope_type: Option<String>,
    #[serde(default, rename = "type")]
    pub legacy_type: Option<String>,
}

/// `talker_config`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TalkerConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    pub text_hidden_size: usize,
    pub text_vocab_size: usize,
    pub vocab_size: usize,
    pub num_code_groups: usize,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub use_sliding_window: bool,
    pub codec_bos_id: u32,
    pub codec_eos_token_id: u32,
    pub codec_think_id: u32,
    pub codec_nothink_id: u32,
    pub codec_pad_id: u32,
    pub codec_think_bos_id: u32,
    pub codec_think_eos_id: u32,
    pub codec_language_id: BTreeMap<String, u32>,
    #[serde(default)]
    pub spk_id: BTreeMap<String, u32>,
    #[serde(default)]
    pub spk_is_dialect: BTreeMap<String, DialectFlag>,
    #[serde(skip)]
    pub code_predictor: CodePredictorConfig,
}

/// `talker_config.code_predictor_config`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CodePredictorConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub hidden_act: String,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub vocab_size: usize,
    pub num_code_groups: usize,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub use_sliding_window: bool,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
}

/// Shapes of one Qwen3 decoder stack (talker or code predictor), derived from a config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StackDims {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f32,
    pub rope_theta: f64,
}

impl StackDims {
    /// Dims from config fields; `head_dim` defaults to hidden / heads, as in the reference.
    fn new(
        hidden: usize,
        intermediate: usize,
        layers: usize,
        (heads, kv_heads, head_dim): (usize, usize, Option<usize>),
        rms_eps: f64,
        rope_theta: f64,
    ) -> Self {
        Self {
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim: head_dim.unwrap_or(hidden / heads.max(1)),
            rms_eps: rms_eps as f32,
            rope_theta,
        }
    }

    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

impl TalkerConfig {
    pub fn dims(&self) -> StackDims {
        StackDims::new(
            self.hidden_size,
            self.intermediate_size,
            self.num_hidden_layers,
            (
                self.num_attention_heads,
                self.num_key_value_heads,
                self.head_dim,
            ),
            self.rms_norm_eps,
            self.rope_theta,
        )
    }

    /// The language keys a request may name ("auto" plus every non-dialect language).
    pub fn supported_languages(&self) -> Vec<String> {
        let mut langs = vec!["auto".to_string()];
        langs.extend(
            self.codec_language_id
                .keys()
                .filter(|k| !k.contains("dialect"))
                .cloned(),
        );
        langs
    }
}

impl CodePredictorConfig {
    pub fn dims(&self) -> StackDims {
        StackDims::new(
            self.hidden_size,
            self.intermediate_size,
            self.num_hidden_layers,
            (
                self.num_attention_heads,
                self.num_key_value_heads,
                self.head_dim,
            ),
            self.rms_norm_eps,
            self.rope_theta,
        )
    }
}

const TOP: Section = Section {
    name: "",
    required: &[
        "tts_model_type",
        "tts_model_size",
        "tokenizer_type",
        "im_start_token_id",
        "im_end_token_id",
        "tts_pad_token_id",
        "tts_bos_token_id",
        "tts_eos_token_id",
        "talker_config",
    ],
    optional: &["assistant_token_id", "speaker_encoder_config"],
    ignored: &[],
};

const SPEAKER_ENCODER: Section = Section {
    name: "speaker_encoder_config",
    required: &[],
    optional: SpeakerEncoderConfig::FIELDS,
    ignored: &[],
};

const TALKER: Section = Section {
    name: "talker_config",
    required: &[
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "hidden_act",
        "max_position_embeddings",
        "rms_norm_eps",
        "rope_theta",
        "text_hidden_size",
        "text_vocab_size",
        "vocab_size",
        "num_code_groups",
        "codec_bos_id",
        "codec_eos_token_id",
        "codec_think_id",
        "codec_nothink_id",
        "codec_pad_id",
        "codec_think_bos_id",
        "codec_think_eos_id",
        "codec_language_id",
        "code_predictor_config",
    ],
    optional: &[
        "head_dim",
        "rope_scaling",
        "attention_bias",
        "use_sliding_window",
        "spk_id",
        "spk_is_dialect",
    ],
    // `position_id_per_seconds` is unused by the reference; `sliding_window` only matters
    // with `use_sliding_window`, which is checked to be false.
    ignored: &["position_id_per_seconds", "sliding_window"],
};

const CODE_PREDICTOR: Section = Section {
    name: "talker_config.code_predictor_config",
    required: &[
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "hidden_act",
        "rms_norm_eps",
        "rope_theta",
        "vocab_size",
        "num_code_groups",
    ],
    optional: &[
        "head_dim",
        "attention_bias",
        "use_sliding_window",
        "layer_types",
        "rope_scaling",
        "repetition_penalty",
    ],
    ignored: &[
        "max_position_embeddings",
        "sliding_window",
        "max_window_layers",
    ],
};

impl ModelConfig {
    /// Reads and validates `config.json`.
    pub fn load(path: &Path, unknown: UnknownKeys) -> Result<Self, ModelError> {
        let top = read_json_object(path)?;
        Self::from_object(path, &top, unknown)
    }

    /// Parses an already-read `config.json` object (also used by the built-in models).
    pub fn from_object(
        path: &Path,
        top: &BTreeMap<String, serde_json::Value>,
        unknown: UnknownKeys,
    ) -> Result<Self, ModelError> {
        let mut cfg: ModelConfig = parse_section(path, top, &TOP, unknown)?;
        let talker_obj = sub_object(path, top, "talker_config", "talker_config")?;
        let mut talker: TalkerConfig = parse_section(path, &talker_obj, &TALKER, unknown)?;
        let cp_obj = sub_object(
            path,
            &talker_obj,
            "code_predictor_config",
            "talker_config.code_predictor_config",
        )?;
        talker.code_predictor = parse_section(path, &cp_obj, &CODE_PREDICTOR, unknown)?;
        cfg.talker = talker;
        if cfg.tts_model_type == ModelKind::Base {
            // The reference builds it from defaults when the key is absent.
            let obj = match top.get("speaker_encoder_config") {
                Some(_) => sub_object(
                    path,
                    top,
                    "speaker_encoder_config",
                    "speaker_encoder_config",
                )?,
                None => BTreeMap::new(),
            };
            let se: SpeakerEncoderConfig = parse_section(path, &obj, &SPEAKER_ENCODER, unknown)?;
            se.validate(path)?;
            if se.enc_dim != cfg.talker.hidden_size {
                return Err(invalid(
                    path,
                    "speaker_encoder_config.enc_dim",
                    format!(
                        "{}: the x-vector is a talker input, so it must equal talker_config.hidden_size ({})",
                        se.enc_dim, cfg.talker.hidden_size
                    ),
                ));
            }
            cfg.speaker_encoder = Some(se);
        }
        if let Some(mt) = top.get("model_type").and_then(|v| v.as_str()) {
            if mt != "qwen3_tts" {
                return Err(invalid(
                    path,
                    "model_type",
                    format!("`{mt}`, expected `qwen3_tts`"),
                ));
            }
        }
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), ModelError> {
        let t = &self.talker;
        let cp = &t.code_predictor;
        if self.tokenizer_type != "qwen3_tts_tokenizer_12hz" {
            return Err(invalid(
                path,
                "tokenizer_type",
                format!(
                    "`{}`: only the 12 Hz speech tokenizer is supported",
                    self.tokenizer_type
                ),
            ));
        }
        for (field, act) in [
            ("talker_config.hidden_act", &t.hidden_act),
            (
                "talker_config.code_predictor_config.hidden_act",
                &cp.hidden_act,
            ),
        ] {
            if act != "silu" {
                return Err(invalid(
                    path,
                    field,
                    format!("`{act}`, only `silu` is supported"),
                ));
            }
        }
        if t.num_code_groups != NUM_CODE_GROUPS || cp.num_code_groups != NUM_CODE_GROUPS {
            return Err(invalid(
                path,
                "talker_config.num_code_groups",
                format!(
                    "{} / {}, expected {NUM_CODE_GROUPS}",
                    t.num_code_groups, cp.num_code_groups
                ),
            ));
        }
        if t.attention_bias || cp.attention_bias {
            return Err(invalid(
                path,
                "talker_config.attention_bias",
                "attention biases are not supported",
            ));
        }
        if t.use_sliding_window || cp.use_sliding_window {
            return Err(invalid(
                path,
                "talker_config.use_sliding_window",
                "sliding-window talkers are not supported",
            ));
        }
        if let Some(types) = &cp.layer_types {
            if types.iter().any(|t| t != "full_attention") || types.len() != cp.num_hidden_layers {
                return Err(invalid(
                    path,
                    "talker_config.code_predictor_config.layer_types",
                    "only `full_attention` layers, one per layer, are supported",
                ));
            }
        }
        if let Some(p) = cp.repetition_penalty {
            if p != 1.0 {
                return Err(invalid(
                    path,
                    "talker_config.code_predictor_config.repetition_penalty",
                    "a code-predictor repetition penalty other than 1.0 is not supported",
                ));
            }
        }
        if cp.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(invalid(
                path,
                "talker_config.code_predictor_config.rope_scaling",
                "code-predictor RoPE scaling is not supported",
            ));
        }
        if let Some(rs) = &t.rope_scaling {
            let kind = rs
                .rope_type
                .as_deref()
                .or(rs.legacy_type.as_deref())
                .unwrap_or("default");
            if kind != "default" {
                return Err(invalid(
                    path,
                    "talker_config.rope_scaling.rope_type",
                    format!("`{kind}` is not supported"),
                ));
            }
            let half = t.dims().head_dim / 2;
            if !rs.mrope_section.is_empty() && rs.mrope_section.iter().sum::<usize>() != half {
                return Err(invalid(
                    path,
                    "talker_config.rope_scaling.mrope_section",
                    format!(
                        "sections sum to {}, expected head_dim/2 = {half}",
                        rs.mrope_section.iter().sum::<usize>()
                    ),
                ));
            }
        }
        for (name, d) in [
            ("talker_config", t.dims()),
            ("talker_config.code_predictor_config", cp.dims()),
        ] {
            if d.heads == 0 || d.kv_heads == 0 || d.heads % d.kv_heads != 0 || d.head_dim % 2 != 0 {
                return Err(invalid(
                    path,
                    &format!("{name}.num_attention_heads"),
                    format!("{} heads, {} kv heads, head_dim {}: heads must be a multiple of kv heads and head_dim even", d.heads, d.kv_heads, d.head_dim),
                ));
            }
        }
        if t.vocab_size < 1024 || (cp.vocab_size as u32) > t.codec_pad_id {
            return Err(invalid(
                path,
                "talker_config.vocab_size",
                "codec vocabulary too small for its special ids",
            ));
        }
        let codec_ids = [
            ("codec_bos_id", t.codec_bos_id),
            ("codec_eos_token_id", t.codec_eos_token_id),
            ("codec_think_id", t.codec_think_id),
            ("codec_nothink_id", t.codec_nothink_id),
            ("codec_pad_id", t.codec_pad_id),
            ("codec_think_bos_id", t.codec_think_bos_id),
            ("codec_think_eos_id", t.codec_think_eos_id),
        ];
        for (field, id) in codec_ids
            .iter()
            .map(|(f, id)| (f.to_string(), *id))
            .chain(
                t.codec_language_id
                    .iter()
                    .map(|(k, id)| (format!("codec_language_id.{k}"), *id)),
            )
            .chain(t.spk_id.iter().map(|(k, id)| (format!("spk_id.{k}"), *id)))
        {
            if id as usize >= t.vocab_size {
                return Err(invalid(
                    path,
                    &format!("talker_config.{field}"),
                    format!("id {id} >= vocab_size {}", t.vocab_size),
                ));
            }
        }
        for (field, id) in [
            ("im_start_token_id", self.im_start_token_id),
            ("im_end_token_id", self.im_end_token_id),
            ("tts_pad_token_id", self.tts_pad_token_id),
            ("tts_bos_token_id", self.tts_bos_token_id),
            ("tts_eos_token_id", self.tts_eos_token_id),
        ] {
            if id as usize >= t.text_vocab_size {
                return Err(invalid(
                    path,
                    field,
                    format!("id {id} >= text_vocab_size {}", t.text_vocab_size),
                ));
            }
        }
        for (spk, flag) in &t.spk_is_dialect {
            match flag {
                DialectFlag::Flag(true) => {
                    return Err(invalid(
                        path,
                        &format!("talker_config.spk_is_dialect.{spk}"),
                        "`true` names no dialect",
                    ))
                }
                DialectFlag::Dialect(d) if !t.codec_language_id.contains_key(d) => {
                    return Err(invalid(
                        path,
                        &format!("talker_config.spk_is_dialect.{spk}"),
                        format!("dialect `{d}` is not in codec_language_id"),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether the code predictor needs `small_to_mtp_projection` (talker and code
    /// predictor widths differ, as in the 1.7B model).
    pub fn has_mtp_projection(&self) -> bool {
        self.talker.hidden_size != self.talker.code_predictor.hidden_size
    }

    /// The reference drops instructions for CustomVoice checkpoints whose size string is a
    /// substring of "0b6" (`tts_model_size in "0b6"` in `generate_custom_voice`).
    pub fn drops_instructions(&self) -> bool {
        self.tts_model_type == ModelKind::CustomVoice
            && "0b6".contains(self.tts_model_size.as_str())
    }
}
