//! `generation_config.json`: default sampling settings. Missing keys fall back to the
//! reference's hard defaults (`_merge_generate_kwargs` in `qwen_tts`), unknown keys are
//! ignored (they carry no model maths).

use std::path::Path;

use serde::Deserialize;

use super::strict::read_json_object;
use crate::error::ModelError;

/// Generation defaults of a checkpoint.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct GenerationConfig {
    pub do_sample: bool,
    pub top_k: usize,
    pub top_p: f32,
    pub temperature: f32,
    pub repetition_penalty: f32,
    pub subtalker_dosample: bool,
    pub subtalker_top_k: usize,
    pub subtalker_top_p: f32,
    pub subtalker_temperature: f32,
    pub max_new_tokens: usize,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            do_sample: true,
            top_k: 50,
            top_p: 1.0,
            temperature: 0.9,
            repetition_penalty: 1.05,
            subtalker_dosample: true,
            subtalker_top_k: 50,
            subtalker_top_p: 1.0,
            subtalker_temperature: 0.9,
            max_new_tokens: 2048,
        }
    }
}

impl GenerationConfig {
    /// Reads `generation_config.json`; a missing file gives the reference defaults.
    pub fn load_or_default(path: &Path) -> Result<Self, ModelError> {
        if !path.exists() {
            tracing::info!(file = %path.display(), "no generation config; using the reference defaults");
            return Ok(Self::default());
        }
        let obj = read_json_object(path)?;
        let known: serde_json::Map<String, serde_json::Value> = obj
            .into_iter()
            .filter(|(k, _)| KEYS.contains(&k.as_str()))
            .collect();
        serde_json::from_value(serde_json::Value::Object(known)).map_err(|e| ModelError::Config {
            path: path.to_path_buf(),
            field: "(top level)".into(),
            message: e.to_string(),
        })
    }
}

const KEYS: &[&str] = &[
    "do_sample",
    "top_k",
    "top_p",
    "temperature",
    "repetition_penalty",
    "subtalker_dosample",
    "subtalker_top_k",
    "subtalker_top_p",
    "subtalker_temperature",
    "max_new_tokens",
];
