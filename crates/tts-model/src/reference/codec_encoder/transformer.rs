//! Mimi's encoder transformer (`encoder.encoder_transformer.layers.*`), one pass over the
//! whole input: per layer
//! `h += scale_a ⊙ attn(LN(h))`, `h += scale_m ⊙ fc2(GELU(fc1(LN(h))))`, no final norm.
//!
//! LayerNorm with bias; RoPE (rotate-half) on q and k at positions `0..T`; attention
//! scaled by `1/sqrt(head_dim)`, causal over every earlier position: the configured
//! `sliding_window` is not applied by the official eager/SDPA attention without a cache.

use super::super::ops::{
    attention, gelu, layer_norm, linear, scaled_add, AttnDims, LayerKv, Mat, Rope,
};
use crate::checkpoint::{Init, WeightSource};
use crate::config::CodecConfig;
use crate::error::ModelError;
use crate::reference::CpuLoader;
use crate::weights::TensorLoader;

/// A projection with an optional bias.
#[derive(Debug, Clone)]
struct Proj {
    w: Mat,
    b: Option<Vec<f32>>,
}

impl Proj {
    fn apply(&self, x: &[f32], t: usize) -> Vec<f32> {
        linear(x, t, &self.w, self.b.as_deref())
    }
}

#[derive(Debug, Clone)]
struct Layer {
    ln1: (Vec<f32>, Vec<f32>),
    q: Proj,
    k: Proj,
    v: Proj,
    o: Proj,
    attn_scale: Vec<f32>,
    ln2: (Vec<f32>, Vec<f32>),
    fc1: Mat,
    fc2: Mat,
    mlp_scale: Vec<f32>,
}

/// The transformer.
#[derive(Debug, Clone)]
pub struct Transformer {
    layers: Vec<Layer>,
    hidden: usize,
    rope: Rope,
    dims: AttnDims,
    eps: f32,
}

impl Transformer {
    pub fn load(cfg: &CodecConfig, src: &WeightSource) -> Result<Self, ModelError> {
        let e = &cfg.encoder;
        let (h, hd) = (e.hidden_size, e.head_dim());
        let (qd, kvd) = (e.num_attention_heads * hd, e.num_key_value_heads * hd);
        let vec = |name: &str, init| CpuLoader(src).load(name, &[h], init).map(|t| t.data);
        let mat = |name: &str, rows: usize, cols: usize| {
            CpuLoader(src)
                .load(name, &[rows, cols], Init::FanIn(cols))
                .map(|t| Mat::new(t.data, rows, cols))
        };
        let proj = |name: &str, rows: usize, cols: usize| -> Result<Proj, ModelError> {
            Ok(Proj {
                w: mat(&format!("{name}.weight"), rows, cols)?,
                b: if e.attention_bias {
                    Some(
                        CpuLoader(src)
                            .load(&format!("{name}.bias"), &[rows], Init::Bias)?
                            .data,
                    )
                } else {
                    None
                },
            })
        };
        let layers = (0..e.num_hidden_layers)
            .map(|i| {
                let p = format!("encoder.encoder_transformer.layers.{i}");
                let ln = |n: &str| -> Result<(Vec<f32>, Vec<f32>), ModelError> {
                    Ok((
                        vec(&format!("{p}.{n}.weight"), Init::Norm)?,
                        vec(&format!("{p}.{n}.bias"), Init::Bias)?,
                    ))
                };
                Ok(Layer {
                    ln1: ln("input_layernorm")?,
                    q: proj(&format!("{p}.self_attn.q_proj"), qd, h)?,
                    k: proj(&format!("{p}.self_attn.k_proj"), kvd, h)?,
                    v: proj(&format!("{p}.self_attn.v_proj"), kvd, h)?,
                    o: proj(&format!("{p}.self_attn.o_proj"), h, qd)?,
                    attn_scale: vec(
                        &format!("{p}.self_attn_layer_scale.scale"),
                        Init::Scale(0.3),
                    )?,
                    ln2: ln("post_attention_layernorm")?,
                    fc1: mat(&format!("{p}.mlp.fc1.weight"), e.intermediate_size, h)?,
                    fc2: mat(&format!("{p}.mlp.fc2.weight"), h, e.intermediate_size)?,
                    mlp_scale: vec(&format!("{p}.mlp_layer_scale.scale"), Init::Scale(0.3))?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Self {
            layers,
            hidden: h,
            rope: Rope::new(hd, e.rope_theta),
            dims: AttnDims {
                heads: e.num_attention_heads,
                kv_heads: e.num_key_value_heads,
                head_dim: hd,
                window: None,
            },
            eps: e.norm_eps as f32,
        })
    }

    /// `[t, hidden]` -> `[t, hidden]`.
    pub fn forward(&self, mut h: Vec<f32>) -> Vec<f32> {
        let t = h.len() / self.hidden;
        let (qd, kvd) = (
            self.dims.heads * self.dims.head_dim,
            self.dims.kv_heads * self.dims.head_dim,
        );
        for l in &self.layers {
            let mut hn = h.clone();
            layer_norm(&mut hn, &l.ln1.0, &l.ln1.1, self.eps);
            let mut q = l.q.apply(&hn, t);
            let mut k = l.k.apply(&hn, t);
            let v = l.v.apply(&hn, t);
            for i in 0..t {
                self.rope.apply(&mut q[i * qd..(i + 1) * qd], i);
                self.rope.apply(&mut k[i * kvd..(i + 1) * kvd], i);
            }
            let kv = LayerKv { k, v, start: 0 };
            let a = attention(&q, 0, &kv, &self.dims);
            scaled_add(&mut h, &l.o.apply(&a, t), &l.attn_scale);

            let mut hn = h.clone();
            layer_norm(&mut hn, &l.ln2.0, &l.ln2.1, self.eps);
            let mut m = linear(&hn, t, &l.fc1, None);
            for x in m.iter_mut() {
                *x = gelu(*x);
            }
            scaled_add(&mut h, &linear(&m, t, &l.fc2, None), &l.mlp_scale);
        }
        h
    }
}
