//! A Qwen3 decoder stack (pre-norm, QK-norm, RoPE, GQA, SwiGLU) over a batch of sequences,
//! shared by the talker and the code predictor. Linear layers run on all tokens of the
//! batch at once; attention runs per sequence against its own KV cache.

use super::ops::{
    add_assign, attention, linear, rms_norm, rms_norm_inplace, swiglu, AttnDims, LayerKv, Mat, Rope,
};
use crate::config::StackDims;
use crate::weights::DecoderLayerW;

/// f32 weights of one decoder layer.
pub type LayerWeights = DecoderLayerW<CpuTensor>;

/// A host f32 tensor with its shape.
#[derive(Debug, Clone, Default)]
pub struct CpuTensor {
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
}

impl CpuTensor {
    /// The tensor as a matrix `[shape[0], rest]`.
    pub fn into_mat(self) -> Mat {
        let rows = self.shape.first().copied().unwrap_or(1);
        let cols = self.data.len() / rows.max(1);
        Mat::new(self.data, rows, cols)
    }
}

/// A decoder layer with weights as matrices.
#[derive(Debug, Clone)]
pub struct Layer {
    input_norm: Vec<f32>,
    q: Mat,
    k: Mat,
    v: Mat,
    o: Mat,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    post_norm: Vec<f32>,
    gate: Mat,
    up: Mat,
    down: Mat,
}

impl Layer {
    pub fn new(w: LayerWeights) -> Self {
        Self {
            input_norm: w.input_layernorm.data,
            q: w.attn.q_proj.into_mat(),
            k: w.attn.k_proj.into_mat(),
            v: w.attn.v_proj.into_mat(),
            o: w.attn.o_proj.into_mat(),
            q_norm: w.attn.q_norm.data,
            k_norm: w.attn.k_norm.data,
            post_norm: w.post_attention_layernorm.data,
            gate: w.gate_proj.into_mat(),
            up: w.up_proj.into_mat(),
            down: w.down_proj.into_mat(),
        }
    }
}

/// KV cache of one sequence through the whole stack.
#[derive(Debug, Clone, Default)]
pub struct StackKv {
    pub layers: Vec<LayerKv>,
    /// Positions held (the next token's position).
    pub len: usize,
}

impl StackKv {
    pub fn new(layers: usize) -> Self {
        Self {
            layers: vec![LayerKv::default(); layers],
            len: 0,
        }
    }
}

/// The decoder stack.
#[derive(Debug, Clone)]
pub struct Stack {
    pub dims: StackDims,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    rope: Rope,
}

impl Stack {
    pub fn new(dims: StackDims, layers: Vec<LayerWeights>, norm: CpuTensor) -> Self {
        Self {
            dims,
            layers: layers.into_iter().map(Layer::new).collect(),
            norm: norm.data,
            rope: Rope::new(dims.head_dim, dims.rope_theta),
        }
    }

    /// Runs `x` (`[tokens, hidden]`) through every layer and the final norm. `segments[i]`
    /// tokens (consecutive in `x`) continue sequence `caches[i]` at its current length.
    /// Returns the normed hidden states of all tokens.
    pub fn forward(
        &self,
        mut x: Vec<f32>,
        segments: &[usize],
        caches: &mut [&mut StackKv],
    ) -> Vec<f32> {
        let d = &self.dims;
        let (h, qd, kvd) = (d.hidden, d.q_dim(), d.kv_dim());
        let n: usize = segments.iter().sum();
        debug_assert_eq!(x.len(), n * h);
        let attn_dims = AttnDims {
            heads: d.heads,
            kv_heads: d.kv_heads,
            head_dim: d.head_dim,
            window: None,
        };
        for (li, layer) in self.layers.iter().enumerate() {
            // 1. attention block
            let hn = rms_norm(&x, &layer.input_norm, d.rms_eps);
            let mut q = linear(&hn, n, &layer.q, None);
            let mut k = linear(&hn, n, &layer.k, None);
            let v = linear(&hn, n, &layer.v, None);
            rms_norm_inplace(&mut q, &layer.q_norm, d.rms_eps);
            rms_norm_inplace(&mut k, &layer.k_norm, d.rms_eps);
            let mut attn_out = Vec::with_capacity(n * qd);
            let mut tok = 0;
            for (seg, cache) in segments.iter().zip(caches.iter_mut()) {
                let first = cache.len;
                for t in 0..*seg {
                    self.rope
                        .apply(&mut q[(tok + t) * qd..(tok + t + 1) * qd], first + t);
                    self.rope
                        .apply(&mut k[(tok + t) * kvd..(tok + t + 1) * kvd], first + t);
                }
                let kv = &mut cache.layers[li];
                kv.k.extend_from_slice(&k[tok * kvd..(tok + seg) * kvd]);
                kv.v.extend_from_slice(&v[tok * kvd..(tok + seg) * kvd]);
                attn_out.extend(attention(
                    &q[tok * qd..(tok + seg) * qd],
                    first,
                    kv,
                    &attn_dims,
                ));
                tok += seg;
            }
            let o = linear(&attn_out, n, &layer.o, None);
            add_assign(&mut x, &o);
            // 2. MLP block
            let hn = rms_norm(&x, &layer.post_norm, d.rms_eps);
            let m = swiglu(&hn, n, &layer.gate, &layer.up, &layer.down);
            add_assign(&mut x, &m);
        }
        for (seg, cache) in segments.iter().zip(caches.iter_mut()) {
            cache.len += seg;
        }
        rms_norm(&x, &self.norm, d.rms_eps)
    }
}
