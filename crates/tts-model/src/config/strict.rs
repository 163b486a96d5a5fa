//! Strict reading of JSON config sections: every key must be known (used by us, or
//! Hugging Face bookkeeping that does not change the maths), every required key present,
//! and every value of the right type. Errors name the file and the dotted field path.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ModelError;

/// Keys written by `transformers.PretrainedConfig.save_pretrained` (and by uploaders) that
/// carry no model maths. Accepted anywhere, never read.
pub const HF_BOOKKEEPING: &[&str] = &[
    "_name_or_path",
    "_attn_implementation_autoset",
    "add_cross_attention",
    "architectures",
    "auto_map",
    "bad_words_ids",
    "begin_suppress_tokens",
    "bos_token_id",
    "chunk_size_feed_forward",
    "cross_attention_hidden_size",
    "decoder_start_token_id",
    "diversity_penalty",
    "do_sample",
    "dtype",
    "early_stopping",
    "encoder_no_repeat_ngram_size",
    "eos_token_id",
    "exponential_decay_length_penalty",
    "finetuning_task",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "id2label",
    "initializer_range",
    "is_decoder",
    "is_encoder_decoder",
    "label2id",
    "length_penalty",
    "max_length",
    "min_length",
    "model_type",
    "no_repeat_ngram_size",
    "num_beam_groups",
    "num_beams",
    "num_return_sequences",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "pad_token_id",
    "prefix",
    "problem_type",
    "pruned_heads",
    "remove_invalid_values",
    "repetition_penalty",
    "return_dict",
    "return_dict_in_generate",
    "sep_token_id",
    "suppress_tokens",
    "task_specific_params",
    "temperature",
    "tf_legacy_loss",
    "tie_encoder_decoder",
    "tie_word_embeddings",
    "tokenizer_class",
    "top_k",
    "top_p",
    "torch_dtype",
    "torchscript",
    "transformers_version",
    "typical_p",
    "use_bfloat16",
    "use_cache",
    "attention_dropout",
];

/// Which keys a config section may hold.
pub struct Section<'a> {
    /// Dotted path of the section for messages, e.g. `talker_config`.
    pub name: &'a str,
    /// Keys that must be present.
    pub required: &'a [&'a str],
    /// Keys that may be absent (a documented default applies).
    pub optional: &'a [&'a str],
    /// Keys specific to this section that are accepted and ignored.
    pub ignored: &'a [&'a str],
}

/// How to treat keys we do not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownKeys {
    /// An unknown key is an error (the default: a new field may change the maths).
    #[default]
    Reject,
    /// An unknown key is logged and ignored.
    Warn,
}

/// Reads a JSON object from `path`.
pub fn read_json_object(path: &Path) -> Result<BTreeMap<String, Value>, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    match value {
        Value::Object(map) => Ok(map.into_iter().collect()),
        _ => Err(ModelError::Json {
            path: path.to_path_buf(),
            message: "expected a JSON object at the top level".into(),
        }),
    }
}

/// Checks the keys of `obj` against `section`, then deserializes it into `T`.
pub fn parse_section<T: DeserializeOwned>(
    path: &Path,
    obj: &BTreeMap<String, Value>,
    section: &Section<'_>,
    unknown: UnknownKeys,
) -> Result<T, ModelError> {
    let dotted = |key: &str| {
        if section.name.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", section.name)
        }
    };
    for key in section.required {
        match obj.get(*key) {
            None => {
                return Err(ModelError::Config {
                    path: path.to_path_buf(),
                    field: dotted(key),
                    message: "missing".into(),
                })
            }
            Some(Value::Null) => {
                return Err(ModelError::Config {
                    path: path.to_path_buf(),
                    field: dotted(key),
                    message: "is null".into(),
                })
            }
            Some(_) => {}
        }
    }
    for key in obj.keys() {
        let k = key.as_str();
        let known = section.required.contains(&k)
            || section.optional.contains(&k)
            || section.ignored.contains(&k)
            || HF_BOOKKEEPING.contains(&k);
        if !known {
            match unknown {
                UnknownKeys::Reject => {
                    return Err(ModelError::Config {
                        path: path.to_path_buf(),
                        field: dotted(k),
                        message: "unknown field (it may change the model's behaviour; \
                                  load with lenient config checking to ignore it)"
                            .into(),
                    })
                }
                UnknownKeys::Warn => {
                    tracing::warn!(file = %path.display(), field = %dotted(k), "ignoring unknown config field")
                }
            }
        }
    }
    let used: serde_json::Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| {
            section.required.contains(&k.as_str()) || section.optional.contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::from_value(Value::Object(used)).map_err(|e| ModelError::Config {
        path: path.to_path_buf(),
        field: if section.name.is_empty() {
            "(top level)".into()
        } else {
            section.name.to_string()
        },
        message: e.to_string(),
    })
}

/// Returns the object stored under `key`, or an error naming it.
pub fn sub_object(
    path: &Path,
    obj: &BTreeMap<String, Value>,
    key: &str,
    dotted: &str,
) -> Result<BTreeMap<String, Value>, ModelError> {
    match obj.get(key) {
        Some(Value::Object(map)) => Ok(map.clone().into_iter().collect()),
        Some(_) => Err(ModelError::Config {
            path: path.to_path_buf(),
            field: dotted.into(),
            message: "expected an object".into(),
        }),
        None => Err(ModelError::Config {
            path: path.to_path_buf(),
            field: dotted.into(),
            message: "missing".into(),
        }),
    }
}

/// A config-level consistency error (a value that parses but cannot be right).
pub fn invalid(path: &Path, field: &str, message: impl Into<String>) -> ModelError {
    ModelError::Config {
        path: path.to_path_buf(),
        field: field.into(),
        message: message.into(),
    }
}
