//! A step's whole attention half for one row in one launch: `x += O · attention(QKV(norm
//! x))`, one thread-block cluster of [`QKV_ATTENTION_O_CLUSTER`] blocks per q head, the
//! head's QKV rows split across the cluster and exchanged through distributed shared
//! memory, the O projection summed across heads in fixed point. Two kernels:
//! `qkv_attention_o.cu` for the code predictor's short caches (held in shared memory; its
//! QKV slices staged in shared memory before the PDL wait), `qkv_attention_o_long.cu` for
//! the talker's (the positions split across the cluster, the parts of the softmax
//! combined; its QKV slices streamed through registers and L2). Taken where
//! `LinearPaths::fused_attention` asks and the shapes fit; start-up turns a kernel off
//! where the device cannot run every head's cluster at once ([`qkv_attention_o_fits`]).

use crate::device::{Arg, Gpu};
use crate::error::CudaError;
use crate::linear::{GemmScratch, Linear};
use tts_model::config::StackDims;

/// Blocks per cluster (`QAO_CS`): one cluster per q head.
pub const QKV_ATTENTION_O_CLUSTER: usize = 8;
/// Most bytes of dynamic shared memory a block takes (its QKV slice when staged, O tile
/// and sums; `Gpu::open` lets the kernels take that beside their ≤ 20 KB of static
/// shared memory).
pub const QKV_ATTENTION_O_MAX_SMEM: usize = 160 << 10;
/// Row padding of the O tile in shared memory (`AO_PAD`).
const PAD: usize = 8;
/// `MLP_MAX_STEPS` of `mlp_fused.cu`: the widest row a warp holds.
const MAX_HIDDEN: usize = 256 * 8;

/// Which kernel: over caches held in shared memory (the code predictor's) or any cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfKind {
    /// `qkv_attention_o_m1*`: caches of at most 16 positions, QKV slices staged.
    Short,
    /// `qkv_attention_o_long_m1*`: any cache, QKV slices streamed, head dim 128.
    Long,
}

impl HalfKind {
    fn kernel(self, f32_kv: bool) -> &'static str {
        match (self, f32_kv) {
            (HalfKind::Short, false) => "qkv_attention_o_m1",
            (HalfKind::Short, true) => "qkv_attention_o_m1_f32",
            (HalfKind::Long, false) => "qkv_attention_o_long_m1",
            (HalfKind::Long, true) => "qkv_attention_o_long_m1_f32",
        }
    }
}

/// How a kernel covers a layer: each block's QKV rows and O rows, and its dynamic shared
/// memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QaoPlan {
    pub kind: HalfKind,
    pub slice_rows: usize,
    pub o_rows: usize,
    pub smem: usize,
}

/// The cover of the attention half of a stack `hidden` wide with `heads` q heads over
/// `kv_heads` groups of `head_dim`, or None where the kernel does not take the shape
/// (width a multiple of 256 up to 2048, head dims a multiple of 8 up to 128 whose 3·hd
/// rows split evenly across the cluster, whole groups, a block's tiles within
/// [`QKV_ATTENTION_O_MAX_SMEM`]; `Long`: head dim 128, whole row pairs a block).
pub fn qkv_attention_o_plan(
    kind: HalfKind,
    hidden: usize,
    (heads, kv_heads, head_dim): (usize, usize, usize),
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
        && heads.is_multiple_of(kv_heads)
        && (kind == HalfKind::Short || (head_dim == 128 && (3 * head_dim).is_multiple_of(2 * cs)));
    if !fits {
        return None;
    }
    let (slice_rows, o_rows) = (3 * head_dim / cs, hidden / cs);
    let tiles = o_rows * (head_dim + PAD) * 2;
    let smem = match kind {
        HalfKind::Short => slice_rows * hidden * 2 + tiles + slice_rows * 4,
        // its sums (whole 16-byte units), then the block's part of the softmax: its
        // weighted values, maximum and sum
        HalfKind::Long => tiles + slice_rows.next_multiple_of(4) * 4 + (head_dim + 2) * 4,
    };
    (smem <= QKV_ATTENTION_O_MAX_SMEM).then_some(QaoPlan {
        kind,
        slice_rows,
        o_rows,
        smem,
    })
}

fn plan_for(kind: HalfKind, d: &StackDims) -> Option<QaoPlan> {
    qkv_attention_o_plan(kind, d.hidden, (d.heads, d.kv_heads, d.head_dim))
}

/// Whether the device runs the `kind` kernel for a stack of `dims`: clusters and the
/// kernels' shared memory, a shape the kernel takes, and every head's cluster on the
/// device at once (the occupancy API; asked at start-up, not while a graph is captured).
pub fn qkv_attention_o_fits(gpu: &Gpu, dims: &StackDims, kind: HalfKind) -> bool {
    let name = kind.kernel(false);
    let Some(plan) = plan_for(kind, dims) else {
        tracing::warn!(
            ?dims,
            name,
            "the fused attention half does not take this shape"
        );
        return false;
    };
    if !(gpu.clusters && gpu.staged) {
        tracing::warn!(
            name,
            "the fused attention half needs thread-block clusters (sm_90)"
        );
        return false;
    }
    let grid = (QKV_ATTENTION_O_CLUSTER as u32, dims.heads as u32, 1);
    match gpu.max_active_clusters(name, grid, 256, plan.smem) {
        Ok(n) if n as usize >= dims.heads => true,
        Ok(n) => {
            tracing::warn!(
                clusters = n,
                heads = dims.heads,
                name,
                "not every head's cluster fits on the device at once: attention apart"
            );
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, name, "cluster occupancy unknown: attention apart");
            false
        }
    }
}

/// The plan for the attention half (`qkv`, then attention, then `o`) of `rows` rows of a
/// stack of `dims`, when the call takes it: one row, the path on for `kind` (start-up
/// checked the device, [`qkv_attention_o_fits`]; `Short`: in a staged stage call), bf16
/// weights without bias or FP8 codes, shapes that fit.
pub fn qkv_attention_o_call(
    gpu: &Gpu,
    scratch: &GemmScratch,
    (qkv, o): (&Linear, &Linear),
    (dims, kind): (&StackDims, HalfKind),
    rows: usize,
) -> Option<QaoPlan> {
    let codes =
        |l: &Linear, norm: bool| l.fp8.is_some() && scratch.paths.fp8_codes(1, l.n, l.k, norm);
    let asked = match kind {
        HalfKind::Short => scratch.paths.fused_attention.with_qkv && gpu.staged_gemv(),
        HalfKind::Long => scratch.paths.fused_attention.talker,
    };
    let takes = rows == 1
        && asked
        && dims.hidden <= scratch.row_sums_len()
        && qkv.bias.is_none()
        && o.bias.is_none()
        && !codes(qkv, true)
        && !codes(o, false)
        && qkv.k == dims.hidden
        && qkv.n == dims.q_dim() + 2 * dims.kv_dim()
        && o.n == dims.hidden
        && o.k == dims.q_dim();
    takes.then(|| plan_for(kind, dims)).flatten()
}

/// `x += O · attention(QKV(norm x))` for one row `x` of a stack of `dims` (`plan` from
/// [`qkv_attention_o_call`]): `input_norm` the layer's RMSNorm gains (its eps is the
/// stack's, in `norm_rope_kv`), `norm_rope_kv` the argument list `fused_attention` takes
/// after its qkv rows and shape, `f32_kv` picks the f32-cache kernel. `early`: the next
/// launch reads nothing but weights before its wait (see `gemv_staged.cu`).
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
    // the cluster size is the kernel's own (`__cluster_dims__`)
    gpu.launch_reading(
        (qkv.w.ptr, qkv.bf16_bytes()),
        plan.kind.kernel(f32_kv),
        (QKV_ATTENTION_O_CLUSTER as u32, dims.heads as u32, 1),
        256,
        plan.smem as u32,
        None,
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::{qkv_attention_o_plan, HalfKind, QKV_ATTENTION_O_MAX_SMEM};

    /// The 1.7B and 0.6B code predictors (16 heads of 128 over 8 groups, 1024 wide): 48
    /// QKV rows and 128 O rows a block, 130 KiB staged; the 1.7B talker (2048 wide) on the
    /// long kernel: 256 O rows, 69 KiB; shapes the kernels do not take have no plan.
    #[test]
    fn plans_cover_the_release_shapes() {
        let cp = qkv_attention_o_plan(HalfKind::Short, 1024, (16, 8, 128)).expect("fits");
        assert_eq!((cp.slice_rows, cp.o_rows), (48, 128));
        assert_eq!(cp.smem, 48 * 1024 * 2 + 128 * 136 * 2 + 48 * 4);
        let talker = qkv_attention_o_plan(HalfKind::Long, 2048, (16, 8, 128)).expect("fits");
        assert_eq!((talker.slice_rows, talker.o_rows), (48, 256));
        assert_eq!(talker.smem, 256 * 136 * 2 + 48 * 4 + 130 * 4);
        let small = qkv_attention_o_plan(HalfKind::Short, 256, (4, 2, 32)).expect("fits");
        assert_eq!((small.slice_rows, small.o_rows), (12, 32));
        // a 2048-wide stack's slices take 192 KiB: too much to stage beside the rest
        assert!(qkv_attention_o_plan(HalfKind::Short, 2048, (16, 8, 128)).is_none());
        // the long kernel takes head dims of 128 only
        assert!(qkv_attention_o_plan(HalfKind::Long, 1024, (16, 8, 64)).is_none());
        for (h, heads, kvh, hd) in [
            (1000, 16, 8, 128),
            (1024, 16, 8, 12),
            (1024, 16, 8, 256),
            (1024, 16, 3, 128),
            (4096, 16, 8, 64),
        ] {
            for kind in [HalfKind::Short, HalfKind::Long] {
                let plan = qkv_attention_o_plan(kind, h, (heads, kvh, hd));
                assert!(plan.is_none(), "{kind:?} {h} {heads}/{kvh}x{hd}");
            }
        }
        let p = qkv_attention_o_plan(HalfKind::Short, 2048, (16, 8, 64)).expect("fits");
        assert!(p.smem <= QKV_ATTENTION_O_MAX_SMEM);
    }
}
