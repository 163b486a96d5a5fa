//! Typed configs mirroring the released files: `config.json` (talker + code predictor),
//! `generation_config.json` (sampling defaults) and `speech_tokenizer/config.json` (codec).

mod codec;
mod codec_encoder;
mod generation;
mod model;
mod strict;

pub use codec::{CodecConfig, CodecDecoderConfig};
pub use codec_encoder::CodecEncoderConfig;
pub use generation::GenerationConfig;
pub use model::{
    CodePredictorConfig, DialectFlag, ModelConfig, ModelKind, RopeScaling, StackDims, TalkerConfig,
    NUM_CODE_GROUPS,
};
pub use strict::UnknownKeys;
