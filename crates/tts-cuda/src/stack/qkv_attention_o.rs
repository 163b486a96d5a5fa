//! A code-predictor step's whole attention half for one row in one launch
//! (`qkv_attention_o.cu`): `x += O · attention(QKV(norm x))`, one thread-block cluster of
//! [`QKV_ATTENTION_O_CLUSTER`] blocks per q head, the head's QKV rows split across the
//! cluster and exchanged through distributed shared memory, the O projection summed across
//! heads in fixed point. Taken by one-row staged stage calls where the shapes fit and
//! `LinearPaths::fused_attention` asks for it; start-up turns that off where the device
//! cannot run every head's cluster at once ([`qkv_attention_o_fits`]).

use crate::device::{Arg, Gpu};
use crate::error::CudaError;
use crate::linear::{GemmScratch, Linear};
use tts_model::config::StackDims;

/// Blocks per cluster (`QAO_CS`): one cluster per q head.
pub const QKV_ATTENTION_O_CLUSTER: usize = 8;
/// Most bytes of dynamic shared memory a block takes (its QKV slice, O tile and sums;
/// `Gpu::open` lets the kernels take that beside their ~20 KB of static shared memory).
pub const QKV_ATTENTION_O_MAX_SMEM: usize = 160 << 10;
/// Row padding of the O tile in shared memory (`AO_PAD`).
const PAD: usize = 8;
/// `MLP_MAX_STEPS` of `mlp_fused.cu`: the widest row a warp holds.
const MAX_HIDDEN: usize = 256 * 8;

/// How `qkv_attention_o_m1` covers a layer: each block's QKV rows and O rows, and its
/// dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QaoPlan {
    pub slice_rows: usize,
    pub o_rows: usize,
    pub smem: usize,
}

/// The cover of the attention half of a stack `hidden` wide with `heads` q heads over
/// `kv_heads` groups of `head_dim`, or None where the kernel does not take the shape
/// (width a multiple of 256 up to 2048, head dims a multiple of 8 up to 128 whose 3·hd
/// rows split evenly across the cluster, whole groups, a block's tiles within
/// [`QKV_ATTENTION_O_MAX_SMEM`]).
pub fn qkv_attention_o_plan(
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> Option<QaoPlan> {
    let cs = QKV_ATTENTION_O_CLUSTER;
    let fits = hidden > 0
        && hidden.is_multiple_of(256)
        && hidden <= MAX_HIDDEN
        && head_dim > 0
        && head_dim.is_multiple_of(8)
        && head_dim <= 128
        && (3 * head_dim).is_multiple_of(cs)
        && kv_heads > 0
        && heads.is_multiple_of(kv_heads);
    if !fits {
        return None;
    }
    let (slice_rows, o_rows) = (3 * head_dim / cs, hidden / cs);
    let smem = slice_rows * hidden * 2 + o_rows * (head_dim + PAD) * 2 + slice_rows * 4;
    (smem <= QKV_ATTENTION_O_MAX_SMEM).then_some(QaoPlan {
        slice_rows,
        o_rows,
        smem,
    })
}

/// Whether the device runs `qkv_attention_o_m1` for a stack of `dims`: clusters, a shape
/// the kernel takes, and every head's cluster on the device at once (the occupancy API;
/// asked at start-up, not while a graph is captured).
pub fn qkv_attention_o_fits(gpu: &Gpu, dims: &StackDims) -> bool {
    let Some(plan) = qkv_attention_o_plan(dims.hidden, dims.heads, dims.kv_heads, dims.head_dim)
    else {
        tracing::warn!(?dims, "qkv_attention_o does not take this stack's shape");
        return false;
    };
    if !gpu.clusters {
        tracing::warn!("qkv_attention_o needs thread-block clusters (sm_90)");
        return false;
    }
    let grid = (QKV_ATTENTION_O_CLUSTER as u32, dims.heads as u32, 1);
    match gpu.max_active_clusters("qkv_attention_o_m1", grid, 256, plan.smem) {
        Ok(n) if n as usize >= dims.heads => true,
        Ok(n) => {
            tracing::warn!(
                clusters = n,
                heads = dims.heads,
                "qkv_attention_o: not every head's cluster fits on the device at once"
            );
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "qkv_attention_o: cluster occupancy unknown");
            false
        }
    }
}

/// The plan for the attention half (`qkv`, then attention, then `o`) of `rows` rows of a
/// stack of `dims`, when the call takes it: one row of a staged stage call, the path on
/// (start-up checked the device, [`qkv_attention_o_fits`]), bf16 weights without bias or
/// FP8 codes, shapes that fit.
pub fn qkv_attention_o_call(
    gpu: &Gpu,
    scratch: &GemmScratch,
    (qkv, o): (&Linear, &Linear),
    dims: &StackDims,
    rows: usize,
) -> Option<QaoPlan> {
    let codes =
        |l: &Linear, norm: bool| l.fp8.is_some() && scratch.paths.fp8_codes(1, l.n, l.k, norm);
    let takes = rows == 1
        && scratch.paths.fused_attention.with_qkv
        && gpu.staged_gemv()
        && dims.hidden <= scratch.row_sums_len()
        && qkv.bias.is_none()
        && o.bias.is_none()
        && !codes(qkv, true)
        && !codes(o, false)
        && qkv.k == dims.hidden
        && qkv.n == dims.q_dim() + 2 * dims.kv_dim()
        && o.n == dims.hidden
        && o.k == dims.q_dim();
    takes
        .then(|| qkv_attention_o_plan(dims.hidden, dims.heads, dims.kv_heads, dims.head_dim))
        .flatten()
}

/// `x += O · attention(QKV(norm x))` for one row `x` of a stack of `dims` (`plan` from
/// [`qkv_attention_o_call`]): `input_norm` the layer's RMSNorm (gains, eps),
/// `norm_rope_kv` the argument list `fused_attention_short` takes after its qkv rows and
/// shape, `f32_kv` picks the f32-cache kernel. `early`: the next launch reads nothing but
/// weights before its wait (see `gemv_staged.cu`).
#[allow(clippy::too_many_arguments)]
pub fn qkv_attention_o(
    gpu: &Gpu,
    scratch: &GemmScratch,
    (qkv, o, dims, plan): (&Linear, &Linear, &StackDims, QaoPlan),
    input_norm: u64,
    norm_rope_kv: &[Arg],
    f32_kv: bool,
    x: u64,
    early: bool,
) -> Result<(), CudaError> {
    scratch.forget_ready();
    let (sums, arrived) = scratch.row_sums();
    let args = [
        &[Arg::P(qkv.w.ptr), Arg::P(input_norm)],
        norm_rope_kv,
        &[
            Arg::P(o.w.ptr),
            Arg::I(o.n as i32),
            Arg::P(x),
            Arg::P(sums),
            Arg::P(arrived),
            Arg::I(i32::from(early)),
        ],
    ]
    .concat();
    let name = if f32_kv {
        "qkv_attention_o_m1_f32"
    } else {
        "qkv_attention_o_m1"
    };
    // the cluster size is the kernel's own (`__cluster_dims__`)
    gpu.launch_reading(
        (qkv.w.ptr, qkv.bf16_bytes()),
        name,
        (QKV_ATTENTION_O_CLUSTER as u32, dims.heads as u32, 1),
        256,
        plan.smem as u32,
        None,
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::{qkv_attention_o_plan, QaoPlan, QKV_ATTENTION_O_MAX_SMEM};

    /// The 1.7B and 0.6B code predictors (16 heads of 128 over 8 groups, 1024 wide): 48
    /// QKV rows and 128 O rows a block, 130 KiB; shapes the kernel does not take have no
    /// plan.
    #[test]
    fn plans_cover_the_code_predictors() {
        assert_eq!(
            qkv_attention_o_plan(1024, 16, 8, 128),
            Some(QaoPlan {
                slice_rows: 48,
                o_rows: 128,
                smem: 48 * 1024 * 2 + 128 * 136 * 2 + 48 * 4
            })
        );
        let small = qkv_attention_o_plan(256, 4, 2, 32).expect("fits");
        assert_eq!((small.slice_rows, small.o_rows), (12, 32));
        // a 2048-wide stack's slices take 192 KiB: too much beside the static memory
        assert!(qkv_attention_o_plan(2048, 16, 8, 128).is_none());
        for (h, heads, kvh, hd) in [
            (1000, 16, 8, 128),
            (1024, 16, 8, 12),
            (1024, 16, 8, 256),
            (1024, 16, 3, 128),
            (4096, 16, 8, 64),
        ] {
            assert!(
                qkv_attention_o_plan(h, heads, kvh, hd).is_none(),
                "{h} {heads}/{kvh}x{hd}"
            );
        }
        let p = qkv_attention_o_plan(2048, 16, 8, 64).expect("fits");
        assert!(p.smem <= QKV_ATTENTION_O_MAX_SMEM);
    }
}
