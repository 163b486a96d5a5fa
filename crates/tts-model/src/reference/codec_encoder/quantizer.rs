//! Mimi's split residual vector quantizer, encode side (`encoder.quantizer.*`).
//!
//! The semantic and the acoustic RVQ both start from the same frames, each projected by its
//! own 1x1 `input_proj` (no bias; absent when the quantizer width equals `hidden_size`).
//! Per codebook, in order: index = nearest codebook vector by Euclidean distance (first on
//! ties), then `residual -= vector`. Codebook vectors are
//! `embed_sum / max(cluster_usage, 1e-5)`. Codes are the semantic ones then the acoustic
//! ones; only the first `encoder_valid_num_quantizers` are computed.

use super::super::codec::codebook_vectors;
use super::super::ops::{linear, Mat};
use crate::checkpoint::{Init, WeightSource};
use crate::config::CodecConfig;
use crate::error::ModelError;
use crate::reference::CpuLoader;
use crate::weights::TensorLoader;

#[derive(Debug, Clone)]
struct Codebook {
    /// `[bins, dim]`.
    embed: Mat,
    /// `|e|²` of every row.
    norms: Vec<f32>,
}

impl Codebook {
    /// Index of the nearest row of every `dim`-wide row of `x`: argmin of `|e|² - 2 x·e`,
    /// which orders rows as `|x - e|` does.
    fn nearest(&self, x: &[f32], t: usize) -> Vec<u32> {
        let scores = linear(x, t, &self.embed, None);
        scores
            .chunks(self.embed.rows)
            .map(|row| {
                let mut best = (0usize, f32::INFINITY);
                for (b, (s, n)) in row.iter().zip(&self.norms).enumerate() {
                    let d = n - 2.0 * s;
                    if d < best.1 {
                        best = (b, d);
                    }
                }
                best.0 as u32
            })
            .collect()
    }
}

/// One residual vector quantizer (its first few codebooks).
#[derive(Debug, Clone)]
struct Rvq {
    /// `[dim, hidden]`.
    input_proj: Option<Mat>,
    codebooks: Vec<Codebook>,
}

impl Rvq {
    fn load(
        cfg: &CodecConfig,
        src: &WeightSource,
        name: &str,
        used: usize,
    ) -> Result<Self, ModelError> {
        let e = &cfg.encoder;
        let (hidden, dim, bins) = (
            e.hidden_size,
            e.vector_quantization_hidden_dimension,
            e.codebook_size,
        );
        let p = format!("encoder.quantizer.{name}");
        let input_proj = if dim != hidden {
            let w = CpuLoader(src).load(
                &format!("{p}.input_proj.weight"),
                &[dim, hidden, 1],
                Init::FanIn(hidden),
            )?;
            Some(Mat::new(w.data, dim, hidden))
        } else {
            None
        };
        let codebooks = (0..used)
            .map(|i| {
                let cb = format!("{p}.layers.{i}.codebook");
                let mut l = CpuLoader(src);
                let sum = l.load(&format!("{cb}.embed_sum"), &[bins, dim], Init::Embedding)?;
                let usage = l.load(&format!("{cb}.cluster_usage"), &[bins], Init::Usage)?;
                let embed = codebook_vectors(sum, &usage.data);
                let norms = embed
                    .data
                    .chunks(dim)
                    .map(|r| r.iter().map(|v| v * v).sum())
                    .collect();
                Ok(Codebook { embed, norms })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Self {
            input_proj,
            codebooks,
        })
    }

    /// `[t, hidden]` frames -> per codebook, the `t` indices.
    fn encode(&self, frames: &[f32], t: usize) -> Vec<Vec<u32>> {
        let mut residual = match &self.input_proj {
            Some(p) => linear(frames, t, p, None),
            None => frames.to_vec(),
        };
        let mut out = Vec::with_capacity(self.codebooks.len());
        for cb in &self.codebooks {
            let idx = cb.nearest(&residual, t);
            let dim = cb.embed.cols;
            for (r, &i) in residual.chunks_mut(dim).zip(&idx) {
                for (a, b) in r.iter_mut().zip(cb.embed.row(i as usize)) {
                    *a -= b;
                }
            }
            out.push(idx);
        }
        out
    }
}

/// The split RVQ (semantic + acoustic).
#[derive(Debug, Clone)]
pub struct SplitRvq {
    semantic: Rvq,
    acoustic: Rvq,
}

impl SplitRvq {
    /// Loads the codebooks that give the first `cfg.encoder_valid_num_quantizers` codes.
    pub fn load(cfg: &CodecConfig, src: &WeightSource) -> Result<Self, ModelError> {
        let valid = cfg.encoder_valid_num_quantizers;
        let semantic = cfg.encoder.num_semantic_quantizers.min(valid);
        Ok(Self {
            semantic: Rvq::load(cfg, src, "semantic_residual_vector_quantizer", semantic)?,
            acoustic: Rvq::load(
                cfg,
                src,
                "acoustic_residual_vector_quantizer",
                valid - semantic,
            )?,
        })
    }

    /// `[t, hidden]` frames -> codes, `[t][codebook]`.
    pub fn encode(&self, frames: &[f32], t: usize) -> Vec<Vec<u32>> {
        let mut per_codebook = self.semantic.encode(frames, t);
        if !self.acoustic.codebooks.is_empty() {
            per_codebook.extend(self.acoustic.encode(frames, t));
        }
        (0..t)
            .map(|i| per_codebook.iter().map(|c| c[i]).collect())
            .collect()
    }
}
