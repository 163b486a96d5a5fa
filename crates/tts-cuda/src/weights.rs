//! Model weights on the device, built from the same checkpoint walk as the CPU reference
//! (`tts_model::weights`): matrices and embeddings in bf16, norms and biases in f32, the
//! talker's q/k/v concatenated and gate/up interleaved (for the fused GEMV epilogue), and
//! the code predictor's input projection folded into f32 embedding tables (1.7B). The
//! decoder-layer matrices an [`Fp8Scope`] covers are quantized here with the CPU
//! reference's quantizer (`tts_model::fp8`), row by row, after the concatenation.

use tts_model::checkpoint::{HostTensor, Init, WeightSource};
use tts_model::config::{ModelConfig, StackDims};
use tts_model::fp8::{Fp8Rows, Fp8Scope, LayerPart, Stack};
use tts_model::weights::{CodePredictorW, DecoderLayerW, LinearW, TalkerW, TensorLoader};

use crate::device::{DBuf, GemmType, Gpu};
use crate::error::CudaError;
use crate::linear::Linear;
use crate::routing::{Fp8Gemv, LinearPaths, FP8_GEMV_MAX_ROWS};

/// Loads host tensors (bf16 or f32 as stored / generated).
pub struct HostLoader<'a>(pub &'a WeightSource);

impl TensorLoader for HostLoader<'_> {
    type T = HostTensor;
    fn load(
        &mut self,
        name: &str,
        shape: &[usize],
        init: Init,
    ) -> Result<HostTensor, tts_model::ModelError> {
        self.0.tensor(name, shape, init)
    }
}

fn f32_buf(gpu: &Gpu, t: &HostTensor) -> Result<DBuf<f32>, CudaError> {
    gpu.upload(&t.to_f32())
}

fn linear(gpu: &Gpu, w: &LinearW<HostTensor>) -> Result<Linear, CudaError> {
    let (n, k) = (w.weight.shape[0], w.weight.shape[1]);
    let bias = w.bias.as_ref().map(|b| b.to_f32());
    Linear::new(gpu, &w.weight.to_bf16_bits(), n, k, bias.as_deref())
}

fn matrix(gpu: &Gpu, t: &HostTensor) -> Result<Linear, CudaError> {
    Linear::new(gpu, &t.to_bf16_bits(), t.shape[0], t.shape[1], None)
}

/// One decoder layer: fused QKV and gate/up weights.
pub struct DevLayer {
    pub input_norm: DBuf<f32>,
    /// Rows: q (heads·hd), k (kv·hd), v (kv·hd).
    pub qkv: Linear,
    pub q_norm: DBuf<f32>,
    pub k_norm: DBuf<f32>,
    pub o: Linear,
    pub post_norm: DBuf<f32>,
    /// Rows interleaved (gate_0, up_0, gate_1, up_1, ...).
    pub gate_up: Linear,
    pub down: Linear,
}

/// A layer matrix built from the rows of `parts` (concatenated, or interleaved row by
/// row with `interleave`), in bf16 or, with `fp8`, quantized.
fn layer_matrix(
    gpu: &Gpu,
    parts: &[&HostTensor],
    k: usize,
    interleave: bool,
    fp8: bool,
) -> Result<Linear, CudaError> {
    let n: usize = parts.iter().map(|t| t.shape[0]).sum();
    if fp8 {
        let rows = stack_rows(parts.iter().map(|t| t.to_f32()).collect(), k, interleave);
        Linear::new_fp8(gpu, &Fp8Rows::quantize(&rows, n, k), None)
    } else {
        let rows = stack_rows(
            parts.iter().map(|t| t.to_bf16_bits()).collect(),
            k,
            interleave,
        );
        Linear::new(gpu, &rows, n, k, None)
    }
}

/// The parts' rows of width `k` back to back, or taking one row of each part in turn.
fn stack_rows<T: Copy>(parts: Vec<Vec<T>>, k: usize, interleave: bool) -> Vec<T> {
    if !interleave || parts.len() == 1 {
        return parts.concat();
    }
    let rows = parts[0].len() / k.max(1);
    let mut out = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for i in 0..rows {
        for p in &parts {
            out.extend_from_slice(&p[i * k..(i + 1) * k]);
        }
    }
    out
}

impl DevLayer {
    fn new(
        gpu: &Gpu,
        w: &DecoderLayerW<HostTensor>,
        d: &StackDims,
        fp8: Fp8Scope,
        stack: Stack,
    ) -> Result<Self, CudaError> {
        let h = d.hidden;
        let attn8 = fp8.covers(stack, LayerPart::Attention);
        let mlp8 = fp8.covers(stack, LayerPart::Mlp);
        let a = &w.attn;
        Ok(Self {
            input_norm: f32_buf(gpu, &w.input_layernorm)?,
            qkv: layer_matrix(gpu, &[&a.q_proj, &a.k_proj, &a.v_proj], h, false, attn8)?,
            q_norm: f32_buf(gpu, &a.q_norm)?,
            k_norm: f32_buf(gpu, &a.k_norm)?,
            o: layer_matrix(gpu, &[&a.o_proj], d.q_dim(), false, attn8)?,
            post_norm: f32_buf(gpu, &w.post_attention_layernorm)?,
            gate_up: layer_matrix(gpu, &[&w.gate_proj, &w.up_proj], h, true, mlp8)?,
            down: layer_matrix(gpu, &[&w.down_proj], d.intermediate, false, mlp8)?,
        })
    }
}

/// The attention kernels (`kernels/attention.cu`) hold one head in 128 floats of shared
/// memory and read keys and values four at a time.
fn check_head_dim(hd: usize) -> Result<(), CudaError> {
    if hd == 0 || hd > 128 || !hd.is_multiple_of(4) {
        return Err(CudaError::Shape(format!(
            "head_dim {hd}: the CUDA attention kernels need a multiple of 4 up to 128"
        )));
    }
    Ok(())
}

/// A decoder stack's weights plus its RoPE frequencies.
pub struct DevStack {
    pub dims: StackDims,
    pub layers: Vec<DevLayer>,
    pub norm: DBuf<f32>,
    pub inv_freq: DBuf<f32>,
}

impl DevStack {
    /// Bytes of the bf16 matrices of its layers (what one pass over them reads).
    pub fn layer_bytes(&self) -> usize {
        (self.layers.iter())
            .map(|l| {
                [&l.qkv, &l.o, &l.gate_up, &l.down]
                    .map(Linear::bf16_bytes)
                    .iter()
                    .sum::<usize>()
            })
            .sum()
    }

    fn new(
        gpu: &Gpu,
        d: StackDims,
        layers: &[DecoderLayerW<HostTensor>],
        norm: &HostTensor,
        fp8: (Fp8Scope, Stack),
    ) -> Result<Self, CudaError> {
        check_head_dim(d.head_dim)?;
        let base = d.rope_theta as f32;
        let inv: Vec<f32> = (0..d.head_dim / 2)
            .map(|i| 1.0 / base.powf((2 * i) as f32 / d.head_dim as f32))
            .collect();
        Ok(Self {
            dims: d,
            layers: layers
                .iter()
                .map(|l| DevLayer::new(gpu, l, &d, fp8.0, fp8.1))
                .collect::<Result<_, _>>()?,
            norm: f32_buf(gpu, norm)?,
            inv_freq: gpu.upload(&inv)?,
        })
    }
}

/// Talker weights.
pub struct DevTalker {
    pub stack: DevStack,
    /// `[codec vocab][H]` bf16.
    pub codec_embedding: DBuf<u16>,
    /// `[text vocab][text hidden]` bf16.
    pub text_embedding: DBuf<u16>,
    pub text_hidden: usize,
    pub fc1: Linear,
    pub fc2: Linear,
    pub codec_head: Linear,
}

/// Code-predictor weights.
pub struct DevCodePredictor {
    pub stack: DevStack,
    /// 15 tables `[2048][talker H]` bf16, back to back.
    pub embeddings: DBuf<u16>,
    pub lm_heads: Vec<Linear>,
    pub projection: Option<Linear>,
    /// With a projection: `proj(E_j(c))` for all j, c, f32 `[15][2048][cp H]`.
    pub folded: Option<DBuf<f32>>,
    /// With a projection: `proj(C(c))` for c < 2048, f32 `[2048][cp H]`.
    pub folded_code0: Option<DBuf<f32>>,
    /// With a projection, when asked for: the first layer's QKV projection (input norm
    /// applied) of every input row of steps 1..14, `qkv(norm(folded[j][c]))` for j < 14,
    /// f32 `[14][vocab][qkv n]` (`qkv_table`); the sampler copies a row's into place and
    /// those steps skip that projection.
    pub qkv0: Option<DBuf<f32>>,
    pub vocab: usize,
}

impl DevTalker {
    pub fn load(
        gpu: &Gpu,
        cfg: &ModelConfig,
        src: &WeightSource,
        fp8: Fp8Scope,
    ) -> Result<Self, CudaError> {
        let w = TalkerW::load(cfg, &mut HostLoader(src))?;
        let d = cfg.talker.dims();
        Ok(Self {
            stack: DevStack::new(gpu, d, &w.layers, &w.norm, (fp8, Stack::Talker))?,
            codec_embedding: gpu.upload(&w.codec_embedding.to_bf16_bits())?,
            text_embedding: gpu.upload(&w.text_embedding.to_bf16_bits())?,
            text_hidden: cfg.talker.text_hidden_size,
            fc1: linear(gpu, &w.text_fc1)?,
            fc2: linear(gpu, &w.text_fc2)?,
            codec_head: matrix(gpu, &w.codec_head)?,
        })
    }
}

impl DevCodePredictor {
    /// Loads the code predictor and, for the 1.7B geometry, folds the projection into the
    /// embedding tables (`proj(E_j(c))`, `proj(C(c))`) with one GEMM each, and with
    /// `qkv_table` (the FP8 GEMV routing the calls will take) computes
    /// [`DevCodePredictor::qkv0`] from them.
    pub fn load(
        gpu: &Gpu,
        cfg: &ModelConfig,
        src: &WeightSource,
        talker: &DevTalker,
        (fp8, qkv_table_paths): (Fp8Scope, Option<&LinearPaths>),
    ) -> Result<Self, CudaError> {
        let w = CodePredictorW::load(cfg, &mut HostLoader(src))?;
        let d = cfg.talker.code_predictor.dims();
        let vocab = cfg.talker.code_predictor.vocab_size;
        let th = cfg.talker.hidden_size;
        let mut emb = Vec::with_capacity(15 * vocab * th);
        for t in &w.codec_embeddings {
            emb.extend(t.to_bf16_bits());
        }
        let embeddings = gpu.upload(&emb)?;
        let projection = w
            .mtp_projection
            .as_ref()
            .map(|p| linear(gpu, p))
            .transpose()?;
        let (folded, folded_code0) = match &projection {
            Some(p) => {
                let ch = d.hidden;
                let folded: DBuf<f32> = gpu.zeros(15 * vocab * ch)?;
                // folded (ch × 15·vocab, column-major) = Wᵀ (op T of th × ch) · E (th × 15·vocab)
                gpu.gemm(
                    true,
                    false,
                    ch,
                    15 * vocab,
                    th,
                    p.w.ptr,
                    th,
                    embeddings.ptr,
                    th,
                    0.0,
                    folded.ptr,
                    ch,
                    GemmType::Bf16,
                )?;
                let code0: DBuf<f32> = gpu.zeros(vocab * ch)?;
                gpu.gemm(
                    true,
                    false,
                    ch,
                    vocab,
                    th,
                    p.w.ptr,
                    th,
                    talker.codec_embedding.ptr,
                    th,
                    0.0,
                    code0.ptr,
                    ch,
                    GemmType::Bf16,
                )?;
                if let Some(b) = &p.bias {
                    add_bias_rows(gpu, &folded, 15 * vocab, ch, b)?;
                    add_bias_rows(gpu, &code0, vocab, ch, b)?;
                }
                (Some(folded), Some(code0))
            }
            None => (None, None),
        };
        let stack = DevStack::new(gpu, d, &w.layers, &w.norm, (fp8, Stack::CodePredictor))?;
        let qkv0 = match (&folded, qkv_table_paths) {
            (Some(f), Some(paths)) => qkv_table(gpu, &stack, f, vocab, paths)?,
            _ => None,
        };
        Ok(Self {
            stack,
            embeddings,
            lm_heads: w
                .lm_heads
                .iter()
                .map(|t| matrix(gpu, t))
                .collect::<Result<_, _>>()?,
            projection,
            folded,
            folded_code0,
            qkv0,
            vocab,
        })
    }
}

/// Input tables the code predictor's steps 1..14 read (`folded[0..14]`).
const QKV_TABLE_STEPS: usize = 14;

/// `qkv(norm(folded[j][c]))` for j < 14, c < `vocab`: the first layer's QKV projection of
/// every input row of steps 1..14, computed on the GEMV a one-row call runs on, 8 rows a
/// launch, so each row is what that layer computes for it at one row. An FP8 layer's table
/// comes from its bf16 copy (its dequantized values) when `paths` (the calls' routing,
/// `LinearPaths::fp8_kernel`) streams that copy at one and two rows (by the rule, every
/// code-predictor matrix of the 1.7B), else there is none (the codes' sums would differ
/// from the table's by rounding). Without the table an FP8 code predictor ran
/// one more launch a step: on an H100 its call took 1.739 / 1.884 / 3.476 ms at 1 / 2 / 32
/// rows with `QWEN3_TTS_FP8=layers` against 1.694 / 1.830 / 3.312 in bf16.
fn qkv_table(
    gpu: &Gpu,
    s: &DevStack,
    folded: &DBuf<f32>,
    vocab: usize,
    paths: &LinearPaths,
) -> Result<Option<DBuf<f32>>, CudaError> {
    let Some(l0) = s.layers.first() else {
        return Ok(None);
    };
    let (n, k) = (l0.qkv.n, l0.qkv.k);
    let streams_codes = (1..=FP8_GEMV_MAX_ROWS)
        .any(|m| [false, true].map(|norm| paths.fp8_kernel(m, n, k, norm)) != [Fp8Gemv::Bf16; 2]);
    if l0.qkv.fp8.is_some() && streams_codes {
        return Ok(None);
    }
    let (ch, q) = (s.dims.hidden, l0.qkv.n);
    let rows = QKV_TABLE_STEPS * vocab;
    let table: DBuf<f32> = gpu.zeros(rows * q)?;
    let norm = Some((l0.input_norm.ptr, s.dims.rms_eps));
    for r0 in (0..rows).step_by(8) {
        let x = crate::linear::Rows {
            ptr: folded.at(r0 * ch),
            ld: ch,
            count: (rows - r0).min(8),
        };
        crate::linear::gemv_rows(gpu, &l0.qkv, x, norm, table.at(r0 * q), q)?;
    }
    Ok(Some(table))
}

/// `t[r][:] += b` for `rows` rows of width `n`.
fn add_bias_rows(
    gpu: &Gpu,
    t: &DBuf<f32>,
    rows: usize,
    n: usize,
    b: &DBuf<f32>,
) -> Result<(), CudaError> {
    use crate::device::Arg;
    gpu.launch(
        "add_bias_rows",
        (rows as u32, 1, 1),
        256,
        &[
            Arg::P(t.ptr),
            Arg::I(n as i32),
            Arg::P(b.ptr),
            Arg::I(rows as i32),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::{check_head_dim, stack_rows};

    #[test]
    fn layer_rows_are_concatenated_or_interleaved() {
        let (a, b) = (vec![1, 2, 3, 4], vec![5, 6, 7, 8]);
        assert_eq!(
            stack_rows(vec![a.clone(), b.clone()], 2, false),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        // gate/up: row 0 of each, then row 1 of each
        assert_eq!(stack_rows(vec![a, b], 2, true), [1, 2, 5, 6, 3, 4, 7, 8]);
    }

    #[test]
    fn head_dims_the_attention_kernels_cannot_hold_are_refused() {
        for ok in [4, 8, 64, 128] {
            assert!(check_head_dim(ok).is_ok(), "{ok}");
        }
        for bad in [0, 6, 130, 256] {
            let e = check_head_dim(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("head_dim {bad}")), "{e}");
        }
    }
}
