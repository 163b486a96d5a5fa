//! The codec's sliding-window transformer (8 layers in the release): RMSNorm, multi-head
//! attention with RoPE over the last `sliding_window` frames (the current one included),
//! LayerScale residuals, SwiGLU. Streaming keeps the last `window - 1` keys/values per
//! layer with their absolute positions, so chunked decoding equals whole decoding.

use super::super::ops::{
    attention, linear, rms_norm, scaled_add, swiglu, AttnDims, LayerKv, Mat, Rope,
};
use super::super::stack::CpuTensor;
use crate::config::CodecDecoderConfig;
use crate::weights::{CodecLayerW, LinearW};

#[derive(Debug, Clone)]
struct Layer {
    input_norm: Vec<f32>,
    q: Mat,
    k: Mat,
    v: Mat,
    o: Mat,
    attn_scale: Vec<f32>,
    post_norm: Vec<f32>,
    gate: Mat,
    up: Mat,
    down: Mat,
    mlp_scale: Vec<f32>,
}

/// Per-stream state: each layer's recent keys/values and the next position.
#[derive(Debug, Clone)]
pub struct TransformerState {
    kv: Vec<LayerKv>,
    pos: usize,
}

#[derive(Debug, Clone)]
pub struct CodecTransformer {
    input_proj: (Mat, Vec<f32>),
    layers: Vec<Layer>,
    norm: Vec<f32>,
    output_proj: (Mat, Vec<f32>),
    rope: Rope,
    attn: AttnDims,
    eps: f32,
}

fn lin(w: LinearW<CpuTensor>) -> (Mat, Vec<f32>) {
    (
        w.weight.into_mat(),
        w.bias.map(|b| b.data).unwrap_or_default(),
    )
}

impl CodecTransformer {
    pub fn new(
        cfg: &CodecDecoderConfig,
        input_proj: LinearW<CpuTensor>,
        layers: Vec<CodecLayerW<CpuTensor>>,
        norm: CpuTensor,
        output_proj: LinearW<CpuTensor>,
    ) -> Self {
        Self {
            input_proj: lin(input_proj),
            layers: layers
                .into_iter()
                .map(|l| Layer {
                    input_norm: l.input_layernorm.data,
                    q: l.q_proj.into_mat(),
                    k: l.k_proj.into_mat(),
                    v: l.v_proj.into_mat(),
                    o: l.o_proj.into_mat(),
                    attn_scale: l.attn_layer_scale.data,
                    post_norm: l.post_attention_layernorm.data,
                    gate: l.gate_proj.into_mat(),
                    up: l.up_proj.into_mat(),
                    down: l.down_proj.into_mat(),
                    mlp_scale: l.mlp_layer_scale.data,
                })
                .collect(),
            norm: norm.data,
            output_proj: lin(output_proj),
            rope: Rope::new(cfg.head_dim(), cfg.rope_theta),
            attn: AttnDims {
                heads: cfg.num_attention_heads,
                kv_heads: cfg.num_key_value_heads,
                head_dim: cfg.head_dim(),
                window: Some(cfg.sliding_window),
            },
            eps: cfg.rms_norm_eps as f32,
        }
    }

    pub fn new_state(&self) -> TransformerState {
        TransformerState {
            kv: vec![LayerKv::default(); self.layers.len()],
            pos: 0,
        }
    }

    /// `[t, latent]` -> `[t, latent]`, continuing the stream in `st`.
    pub fn forward(&self, x: &[f32], st: &mut TransformerState) -> Vec<f32> {
        let t = x.len() / self.input_proj.0.cols;
        let (qd, kvd) = (
            self.attn.heads * self.attn.head_dim,
            self.attn.kv_heads * self.attn.head_dim,
        );
        let mut h = linear(x, t, &self.input_proj.0, Some(&self.input_proj.1));
        for (layer, kv) in self.layers.iter().zip(st.kv.iter_mut()) {
            // 1. attention with LayerScale
            let hn = rms_norm(&h, &layer.input_norm, self.eps);
            let mut q = linear(&hn, t, &layer.q, None);
            let mut k = linear(&hn, t, &layer.k, None);
            let v = linear(&hn, t, &layer.v, None);
            for i in 0..t {
                self.rope.apply(&mut q[i * qd..(i + 1) * qd], st.pos + i);
                self.rope.apply(&mut k[i * kvd..(i + 1) * kvd], st.pos + i);
            }
            kv.k.extend_from_slice(&k);
            kv.v.extend_from_slice(&v);
            let a = attention(&q, st.pos, kv, &self.attn);
            let o = linear(&a, t, &layer.o, None);
            scaled_add(&mut h, &o, &layer.attn_scale);
            // 2. MLP with LayerScale
            let hn = rms_norm(&h, &layer.post_norm, self.eps);
            let m = swiglu(&hn, t, &layer.gate, &layer.up, &layer.down);
            scaled_add(&mut h, &m, &layer.mlp_scale);
            if let Some(w) = self.attn.window {
                kv.keep_last(w.saturating_sub(1), kvd);
            }
        }
        st.pos += t;
        let hn = rms_norm(&h, &self.norm, self.eps);
        linear(&hn, t, &self.output_proj.0, Some(&self.output_proj.1))
    }
}
