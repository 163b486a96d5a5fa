//! A loaded model description: configs, tokenizer and weight sources, from a checkpoint
//! directory in the released Hugging Face layout or from a built-in spec (`demo`,
//! `random:1.7b`, `random:0.6b`). Backends build their weights from it.

use std::path::{Path, PathBuf};

use crate::builtin;
use crate::checkpoint::{SafetensorsFiles, WeightSource};
use crate::config::{CodecConfig, GenerationConfig, ModelConfig, ModelKind, UnknownKeys};
use crate::error::ModelError;
use crate::prompt::{build_prompt, Prompt, SpeechRequest};
use crate::sampling::SamplingParams;
use crate::tokenizer::TextTokenizer;

/// Options for loading.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// What to do with config keys we do not know.
    pub unknown_config_keys: UnknownKeys,
}

/// Everything about a model except backend-specific weights.
pub struct Model {
    /// Display name (directory name or built-in spec).
    pub name: String,
    /// The checkpoint directory, for models loaded from disk.
    pub dir: Option<PathBuf>,
    pub config: ModelConfig,
    pub generation: GenerationConfig,
    pub codec: CodecConfig,
    pub tokenizer: TextTokenizer,
    /// Talker + code predictor weights (`model.safetensors`).
    pub weights: WeightSource,
    /// Codec weights (`speech_tokenizer/model.safetensors`).
    pub codec_weights: WeightSource,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("kind", &self.config.tts_model_type)
            .field("size", &self.config.tts_model_size)
            .finish()
    }
}

impl Model {
    /// Loads `spec`: a checkpoint directory, `demo`, or `random:<size>`.
    pub fn load(spec: &str, opts: LoadOptions) -> Result<Self, ModelError> {
        if let Some(m) = builtin::load(spec)? {
            return Ok(m);
        }
        let dir = Path::new(spec);
        if dir.is_dir() {
            return Self::from_dir(dir, opts);
        }
        Err(ModelError::UnknownModel(spec.to_string()))
    }

    /// Loads a checkpoint directory in the released layout.
    pub fn from_dir(dir: &Path, opts: LoadOptions) -> Result<Self, ModelError> {
        let config = ModelConfig::load(&dir.join("config.json"), opts.unknown_config_keys)?;
        let generation = GenerationConfig::load_or_default(&dir.join("generation_config.json"))?;
        let st_dir = dir.join("speech_tokenizer");
        let codec = CodecConfig::load(&st_dir.join("config.json"), opts.unknown_config_keys)?;
        let tokenizer = TextTokenizer::from_dir(dir)?;
        check_tokenizer(&config, &tokenizer, dir)?;
        let weights = WeightSource::Files(SafetensorsFiles::open(dir, "model")?);
        let codec_weights = WeightSource::Files(SafetensorsFiles::open(&st_dir, "model")?);
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        Ok(Self {
            name,
            dir: Some(dir.to_path_buf()),
            config,
            generation,
            codec,
            tokenizer,
            weights,
            codec_weights,
        })
    }

    /// Builds the talker prompt of a request.
    pub fn prompt(&self, req: &SpeechRequest) -> Result<Prompt, ModelError> {
        build_prompt(&self.config, &self.tokenizer, req)
    }

    /// The checkpoint's default sampling settings with `seed`.
    pub fn default_sampling(&self, seed: u64) -> SamplingParams {
        SamplingParams::from_generation(&self.generation, seed)
    }

    pub fn kind(&self) -> ModelKind {
        self.config.tts_model_type
    }

    /// Preset voices (CustomVoice speakers), sorted.
    pub fn voices(&self) -> Vec<String> {
        self.config.talker.spk_id.keys().cloned().collect()
    }

    /// Languages a request may name ("auto" first).
    pub fn languages(&self) -> Vec<String> {
        self.config.talker.supported_languages()
    }

    /// Whether the weights are random (built-in models): the audio is noise.
    pub fn is_random(&self) -> bool {
        self.weights.is_random()
    }

    pub fn sample_rate(&self) -> u32 {
        self.codec.output_sample_rate
    }

    pub fn samples_per_frame(&self) -> usize {
        self.codec.decode_upsample_rate
    }
}

/// The config's special text ids must exist in the tokenizer.
fn check_tokenizer(cfg: &ModelConfig, tok: &TextTokenizer, dir: &Path) -> Result<(), ModelError> {
    let n = cfg.talker.text_vocab_size;
    if tok.vocab_size() > n {
        return Err(ModelError::Tokenizer(format!(
            "{}: tokenizer has {} ids but talker_config.text_vocab_size is {n}",
            dir.display(),
            tok.vocab_size()
        )));
    }
    Ok(())
}
