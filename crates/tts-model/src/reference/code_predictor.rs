//! The code predictor on the CPU: for each row, a fresh 16-position KV cache, a 2-token
//! prefill `[talker hidden, C(code 0)]` that scores code 1, then 14 one-token steps each
//! feeding the previous code's embedding and scoring the next code.

use super::ops::{linear, Mat};
use super::stack::{CpuTensor, Stack, StackKv};
use crate::config::{ModelConfig, NUM_CODE_GROUPS};
use crate::weights::CodePredictorW;

/// Code-predictor weights in f32 and the maths that uses them.
#[derive(Debug, Clone)]
pub struct CodePredictor {
    stack: Stack,
    /// Table j embeds code j+1, `[2048, talker H]`.
    embeddings: Vec<Mat>,
    lm_heads: Vec<Mat>,
    projection: Option<(Mat, Vec<f32>)>,
}

impl CodePredictor {
    pub fn new(cfg: &ModelConfig, w: CodePredictorW<CpuTensor>) -> Self {
        Self {
            stack: Stack::new(cfg.talker.code_predictor.dims(), w.layers, w.norm),
            embeddings: w
                .codec_embeddings
                .into_iter()
                .map(CpuTensor::into_mat)
                .collect(),
            lm_heads: w.lm_heads.into_iter().map(CpuTensor::into_mat).collect(),
            projection: w.mtp_projection.map(|p| {
                (
                    p.weight.into_mat(),
                    p.bias.map(|b| b.data).unwrap_or_default(),
                )
            }),
        }
    }

    /// Embedding of code `j + 1` (`j` in 0..15), width of the talker.
    pub fn embedding(&self, j: usize, code: u32) -> &[f32] {
        self.embeddings[j].row(code as usize)
    }

    /// Codes each embedding table holds.
    pub fn vocab(&self) -> usize {
        self.embeddings.first().map_or(0, |m| m.rows)
    }

    /// `small_to_mtp_projection` (identity for the 0.6B geometry).
    fn project(&self, x: Vec<f32>, m: usize) -> Vec<f32> {
        match &self.projection {
            Some((w, b)) => linear(&x, m, w, Some(b)),
            None => x,
        }
    }

    /// Predicts codes 1..15 for each row. `talker_hidden` and `code0_embedding` are
    /// `[rows, talker H]`. `choose(row, j, logits)` turns the logits of code `j` (1..15)
    /// into a code (sampling lives with the caller).
    pub fn predict(
        &self,
        talker_hidden: &[f32],
        code0_embedding: &[f32],
        rows: usize,
        mut choose: impl FnMut(usize, usize, &mut [f32]) -> u32,
    ) -> Vec<[u32; NUM_CODE_GROUPS - 1]> {
        let th = self.embeddings[0].cols;
        let cp_h = self.stack.dims.hidden;
        let mut caches: Vec<StackKv> = (0..rows)
            .map(|_| StackKv::new(self.stack.dims.layers))
            .collect();
        let mut out = vec![[0u32; NUM_CODE_GROUPS - 1]; rows];

        // Step 0: two tokens per row, [hidden, C(code 0)].
        let mut x = Vec::with_capacity(rows * 2 * th);
        for r in 0..rows {
            x.extend_from_slice(&talker_hidden[r * th..(r + 1) * th]);
            x.extend_from_slice(&code0_embedding[r * th..(r + 1) * th]);
        }
        let x = self.project(x, 2 * rows);
        let mut refs: Vec<&mut StackKv> = caches.iter_mut().collect();
        let h = self.stack.forward(x, &vec![2; rows], &mut refs);
        let mut last: Vec<f32> = (0..rows)
            .flat_map(|r| h[(2 * r + 1) * cp_h..(2 * r + 2) * cp_h].iter().copied())
            .collect();

        for j in 0..NUM_CODE_GROUPS - 1 {
            let mut logits = linear(&last, rows, &self.lm_heads[j], None);
            let vocab = self.lm_heads[j].rows;
            for (r, codes) in out.iter_mut().enumerate() {
                codes[j] = choose(r, j + 1, &mut logits[r * vocab..(r + 1) * vocab]);
            }
            if j + 1 == NUM_CODE_GROUPS - 1 {
                break;
            }
            // Next step: embed the code just chosen with table j.
            let mut x = Vec::with_capacity(rows * th);
            for codes in &out {
                x.extend_from_slice(self.embedding(j, codes[j]));
            }
            let x = self.project(x, rows);
            let mut refs: Vec<&mut StackKv> = caches.iter_mut().collect();
            last = self.stack.forward(x, &vec![1; rows], &mut refs);
        }
        out
    }
}
