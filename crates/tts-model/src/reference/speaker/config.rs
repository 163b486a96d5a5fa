//! `speaker_encoder_config` of a Base checkpoint's `config.json`: the ECAPA-TDNN geometry.
//! Field names and defaults are those of the official `Qwen3TTSSpeakerEncoderConfig`.

use std::path::Path;

use serde::Deserialize;

use super::mel;
use crate::error::ModelError;

/// The speaker encoder's configuration (`speaker_encoder_config`). Every field is optional in
/// the JSON; a missing one takes the official default (the released Base files only set
/// `enc_dim` and `sample_rate`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SpeakerEncoderConfig {
    /// Mel bands of the input (default 128; the official code always computes 128).
    pub mel_dim: usize,
    /// Size of the x-vector (default 1024; must equal the talker's hidden size).
    pub enc_dim: usize,
    /// Output channels of the first TDNN, of each SE-Res2Net block, and of the multi-layer
    /// feature aggregation (default `[512, 512, 512, 512, 1536]`).
    pub enc_channels: Vec<usize>,
    /// Kernel size of each layer of `enc_channels` (default `[5, 3, 3, 3, 1]`).
    pub enc_kernel_sizes: Vec<usize>,
    /// Dilation of each layer of `enc_channels` (default `[1, 2, 3, 4, 1]`).
    pub enc_dilations: Vec<usize>,
    /// Hidden channels of the attentive statistics pooling (default 128).
    pub enc_attention_channels: usize,
    /// Res2Net scale: channel groups per SE-Res2Net block (default 8).
    pub enc_res2net_scale: usize,
    /// Squeeze channels of the squeeze-excitation blocks (default 128).
    pub enc_se_channels: usize,
    /// Sample rate the reference audio is resampled to (default 24000; the official code
    /// only accepts 24000).
    pub sample_rate: u32,
}

impl Default for SpeakerEncoderConfig {
    fn default() -> Self {
        Self {
            mel_dim: 128,
            enc_dim: 1024,
            enc_channels: vec![512, 512, 512, 512, 1536],
            enc_kernel_sizes: vec![5, 3, 3, 3, 1],
            enc_dilations: vec![1, 2, 3, 4, 1],
            enc_attention_channels: 128,
            enc_res2net_scale: 8,
            enc_se_channels: 128,
            sample_rate: 24_000,
        }
    }
}

impl SpeakerEncoderConfig {
    /// The JSON keys this struct reads (for strict config parsing).
    pub const FIELDS: &'static [&'static str] = &[
        "mel_dim",
        "enc_dim",
        "enc_channels",
        "enc_kernel_sizes",
        "enc_dilations",
        "enc_attention_channels",
        "enc_res2net_scale",
        "enc_se_channels",
        "sample_rate",
    ];

    /// Number of SE-Res2Net blocks (between the first TDNN and the aggregation).
    pub fn num_blocks(&self) -> usize {
        self.enc_channels.len().saturating_sub(2)
    }

    /// Checks that the official code could build and run this geometry. `path` names the
    /// config file in errors.
    pub fn validate(&self, path: &Path) -> Result<(), ModelError> {
        let fail = |field: &str, message: String| {
            Err(ModelError::Config {
                path: path.to_path_buf(),
                field: format!("speaker_encoder_config.{field}"),
                message,
            })
        };
        let n = self.enc_channels.len();
        if self.enc_kernel_sizes.len() != n || self.enc_dilations.len() != n {
            return fail(
                "enc_channels",
                format!(
                    "enc_channels, enc_kernel_sizes and enc_dilations have lengths {n}, {}, {}; \
                     they must be equal",
                    self.enc_kernel_sizes.len(),
                    self.enc_dilations.len()
                ),
            );
        }
        if n < 3 {
            return fail(
                "enc_channels",
                format!("{n} layers; need at least 3 (TDNN, SE-Res2Net blocks, aggregation)"),
            );
        }
        if self.mel_dim != mel::N_MELS {
            return fail(
                "mel_dim",
                format!(
                    "{}; the official code always computes {} mel bands",
                    self.mel_dim,
                    mel::N_MELS
                ),
            );
        }
        if self.sample_rate != mel::SAMPLE_RATE {
            return fail(
                "sample_rate",
                format!(
                    "{}; the official code only accepts {}",
                    self.sample_rate,
                    mel::SAMPLE_RATE
                ),
            );
        }
        let positive = [
            ("enc_dim", self.enc_dim),
            ("enc_attention_channels", self.enc_attention_channels),
            ("enc_res2net_scale", self.enc_res2net_scale),
            ("enc_se_channels", self.enc_se_channels),
        ];
        for (field, v) in positive {
            if v == 0 {
                return fail(field, "must be positive".into());
            }
        }
        for (field, list) in [
            ("enc_channels", &self.enc_channels),
            ("enc_kernel_sizes", &self.enc_kernel_sizes),
            ("enc_dilations", &self.enc_dilations),
        ] {
            if list.contains(&0) {
                return fail(field, format!("{list:?}: every entry must be positive"));
            }
        }
        let scale = self.enc_res2net_scale;
        for i in 1..n - 1 {
            let c = self.enc_channels[i];
            if c != self.enc_channels[i - 1] {
                return fail(
                    "enc_channels",
                    format!(
                        "block {i} maps {} to {c} channels; its residual needs them equal",
                        self.enc_channels[i - 1]
                    ),
                );
            }
            if !c.is_multiple_of(scale) {
                return fail(
                    "enc_res2net_scale",
                    format!("{scale} does not divide the {c} channels of block {i}"),
                );
            }
        }
        let aggregated: usize = self.enc_channels[1..n - 1].iter().sum();
        if aggregated != self.enc_channels[n - 1] {
            return fail(
                "enc_channels",
                format!(
                    "the aggregation reads the {aggregated} concatenated block channels but is \
                     declared with {}",
                    self.enc_channels[n - 1]
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_official_config() {
        let c: SpeakerEncoderConfig = serde_json::from_str(r#"{"enc_dim": 2048}"#).unwrap();
        assert_eq!(c.enc_dim, 2048);
        assert_eq!(c.enc_channels, [512, 512, 512, 512, 1536]);
        assert_eq!(c.sample_rate, 24_000);
        assert_eq!(c.num_blocks(), 3);
        c.validate(Path::new("config.json")).unwrap();
        assert_eq!(SpeakerEncoderConfig::default().enc_dim, 1024);
    }

    #[test]
    fn inconsistent_geometry_is_rejected() {
        let p = Path::new("config.json");
        let mut c = SpeakerEncoderConfig {
            enc_channels: vec![512, 512, 512, 512, 1024],
            ..Default::default()
        };
        assert!(c.validate(p).is_err());
        c.enc_channels = vec![512, 512, 512, 512, 1536];
        c.enc_res2net_scale = 7;
        assert!(c.validate(p).is_err());
        c.enc_res2net_scale = 8;
        c.enc_dilations.pop();
        assert!(c.validate(p).is_err());
    }
}
