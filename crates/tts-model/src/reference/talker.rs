//! The talker on the CPU: the text and codec tracks' embeddings, the decoder stack
//! with its KV cache, and the codec head that scores code 0.

use super::ops::{linear, silu, Mat};
use super::stack::{CpuTensor, Stack, StackKv};
use crate::config::ModelConfig;
use crate::weights::TalkerW;

/// Talker weights in f32 and the maths that uses them.
#[derive(Debug, Clone)]
pub struct Talker {
    pub stack: Stack,
    codec_embedding: Mat,
    text_embedding: Mat,
    fc1: (Mat, Vec<f32>),
    fc2: (Mat, Vec<f32>),
    codec_head: Mat,
}

fn linear_parts(w: crate::weights::LinearW<CpuTensor>) -> (Mat, Vec<f32>) {
    (
        w.weight.into_mat(),
        w.bias.map(|b| b.data).unwrap_or_default(),
    )
}

impl Talker {
    pub fn new(cfg: &ModelConfig, w: TalkerW<CpuTensor>) -> Self {
        Self {
            stack: Stack::new(cfg.talker.dims(), w.layers, w.norm),
            codec_embedding: w.codec_embedding.into_mat(),
            text_embedding: w.text_embedding.into_mat(),
            fc1: linear_parts(w.text_fc1),
            fc2: linear_parts(w.text_fc2),
            codec_head: w.codec_head.into_mat(),
        }
    }

    pub fn hidden(&self) -> usize {
        self.stack.dims.hidden
    }

    pub fn layers(&self) -> usize {
        self.stack.dims.layers
    }

    /// `T(ids)`: text embeddings through the text projection MLP, `[ids.len(), H]`.
    pub fn text_vectors(&self, ids: &[u32]) -> Vec<f32> {
        let mut e = Vec::with_capacity(ids.len() * self.text_embedding.cols);
        for &id in ids {
            e.extend_from_slice(self.text_embedding.row(id as usize));
        }
        let mut h = linear(&e, ids.len(), &self.fc1.0, Some(&self.fc1.1));
        for v in h.iter_mut() {
            *v = silu(*v);
        }
        linear(&h, ids.len(), &self.fc2.0, Some(&self.fc2.1))
    }

    /// `C(id)`: one row of the talker's codec embedding.
    pub fn codec_vector(&self, id: u32) -> &[f32] {
        self.codec_embedding.row(id as usize)
    }

    /// Runs `x` through the stack (see [`Stack::forward`]); returns normed hidden states.
    pub fn forward(
        &self,
        x: Vec<f32>,
        segments: &[usize],
        caches: &mut [&mut StackKv],
    ) -> Vec<f32> {
        self.stack.forward(x, segments, caches)
    }

    /// Code-0 logits of `m` hidden rows, `[m, codec vocab]`.
    pub fn logits(&self, hidden: &[f32], m: usize) -> Vec<f32> {
        linear(hidden, m, &self.codec_head, None)
    }

    pub fn codec_vocab(&self) -> usize {
        self.codec_head.rows
    }
}
