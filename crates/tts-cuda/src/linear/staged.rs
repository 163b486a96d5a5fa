//! The staged kernels' plans and launch: `gemv_staged.cu` (one row) and `mma_staged.cu`
//! (a few rows), whose blocks copy their weight tiles into shared memory before the PDL
//! wait.

use super::{gemv_ksplit, row_kernel_args, Linear, RowCall, Rows};
use crate::device::{Arg, Gpu};
use crate::error::CudaError;

/// Most bytes of weights a `gemv_staged.cu` block holds: two such blocks (consecutive
/// launches) fit one H200 multiprocessor's 227 KiB.
pub const STAGED_MAX_SMEM: usize = 96 << 10;

/// When a staged one-row GEMV followed by another linear layer lets that layer's launch
/// start (`gemv_staged.cu`'s `early`; `CudaOptions::staged_trigger`). A GEMV followed by
/// anything else always triggers after its PDL wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StagedTrigger {
    /// Before its own wait, right after its weight copies are issued.
    #[default]
    Early,
    /// After its wait, as every other kernel.
    Wait,
}

impl StagedTrigger {
    /// The kernel's `early` argument for a launch followed by another linear layer.
    pub fn code(self) -> i32 {
        match self {
            Self::Wait => 0,
            Self::Early => 1,
        }
    }
}

impl std::str::FromStr for StagedTrigger {
    type Err = String;

    /// `early` or `wait`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "early" => Ok(Self::Early),
            "wait" => Ok(Self::Wait),
            _ => Err(format!("expected early or wait, got `{s}`")),
        }
    }
}

/// How `gemv_staged_m1` covers an `n × k` layer: `blocks` blocks of `rows_per_block`
/// weight rows, `smem` bytes of shared memory each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagedPlan {
    pub rows_per_block: usize,
    pub blocks: usize,
    pub smem: usize,
}

/// The staged GEMV's cover of an `n × k` layer on `sms` multiprocessors (row pairs spread
/// evenly, at most one block each), or None when it does not fit `gemv_staged.cu`'s
/// limits: `STAGED_MAX_SMEM`, at most 64 (row pair, K part) tasks a block (and so at most
/// 128 rows: one storing thread each), at most four 256-wide K steps per K part, `k` a
/// multiple of 8.
pub fn staged_plan(n: usize, k: usize, sms: usize) -> Option<StagedPlan> {
    if n == 0 || k == 0 || !k.is_multiple_of(8) || sms == 0 {
        return None;
    }
    let pairs = n.div_ceil(2);
    let pairs_per_block = pairs.div_ceil(sms);
    let rows_per_block = 2 * pairs_per_block;
    let smem = rows_per_block * k * 2;
    let ksplit = gemv_ksplit(n);
    let steps_per_part = k.div_ceil(256).div_ceil(ksplit);
    let tasks = pairs_per_block * ksplit;
    (smem <= STAGED_MAX_SMEM && tasks <= 64 && steps_per_part <= 4).then(|| StagedPlan {
        rows_per_block,
        blocks: pairs.div_ceil(pairs_per_block),
        smem,
    })
}

/// Bytes of shared memory a `mma_staged.cu` block may take: its weight tile and its sums,
/// with two such blocks (consecutive launches) on one H200 multiprocessor (228 KiB, 1 KiB
/// of each block's reserved by the system).
pub const STAGED_MMA_MAX_SMEM: usize = 113 << 10;

/// `mma_staged.cu`'s entry points: (name, row tiles of 8 per group of rows).
pub const STAGED_MMA_KERNELS: [(&str, usize); 3] = [
    ("mma_staged_t1", 1),
    ("mma_staged_t2", 2),
    ("mma_staged_t4", 4),
];

/// Most m16 row tiles a `mma_staged.cu` block owns (`MS_MAX_RT`).
pub(super) const STAGED_MMA_MAX_TILES: usize = 3;

/// `mma_staged.cu`'s entry for `m` rows: (name, row tiles of 8 per group). Public for the
/// emulated kernel tests.
pub fn staged_mma_kernel(m: usize) -> (&'static str, usize) {
    match m {
        0..=8 => STAGED_MMA_KERNELS[0],
        9..=16 => STAGED_MMA_KERNELS[1],
        _ => STAGED_MMA_KERNELS[2],
    }
}

/// Bytes of shared memory a `mma_staged.cu` block of `rows_per_block` weight rows of width
/// `k` takes with `mt` row tiles per group: the tile, the norm gains (`norm`), the 8 warps'
/// partial sums of up to two row tiles of one m16 tile, one norm factor per group row.
pub const fn staged_mma_smem(rows_per_block: usize, k: usize, mt: usize, norm: bool) -> usize {
    let gains = if norm { k * 4 } else { 0 };
    let rh = if mt < 2 { mt } else { 2 };
    rows_per_block * k * 2 + gains + 8 * rh * 4 * 32 * 4 + 8 * mt * 4
}

/// How `mma_staged.cu` covers an `n × k` layer for `m` rows (`norm`: with the fused
/// RMSNorm) on `sms` multiprocessors: at most one block each, of a multiple of 16 weight
/// rows (at most 48); or None when the shape does not fit (`k` a multiple of 64, `n`
/// even, shared memory within [`STAGED_MMA_MAX_SMEM`]).
pub fn staged_mma_plan(n: usize, k: usize, m: usize, norm: bool, sms: usize) -> Option<StagedPlan> {
    if n == 0 || k == 0 || m == 0 || !k.is_multiple_of(64) || !n.is_multiple_of(2) || sms == 0 {
        return None;
    }
    let rows_per_block = 16 * n.div_ceil(16 * sms);
    let smem = staged_mma_smem(rows_per_block, k, staged_mma_kernel(m).1, norm);
    (rows_per_block <= 16 * STAGED_MMA_MAX_TILES && smem <= STAGED_MMA_MAX_SMEM).then(|| {
        StagedPlan {
            rows_per_block,
            blocks: n.div_ceil(rows_per_block),
            smem,
        }
    })
}

/// The staged MMA's plan for `x` over an `n × k` layer (`norm`: with the fused RMSNorm)
/// when the call takes it: two rows or more, enqueued in `SmallCall::StagedMma`, rows
/// that 16-byte loads can read, a shape that fits.
pub(super) fn staged_mma_call(
    gpu: &Gpu,
    x: Rows,
    n: usize,
    k: usize,
    norm: bool,
) -> Option<StagedPlan> {
    (x.count >= 2 && x.quad_aligned() && gpu.staged_mma())
        .then(|| staged_mma_plan(n, k, x.count, norm, gpu.sm_count as usize))
        .flatten()
}

/// One launch of `mma_staged.cu`.
pub(super) fn staged_mma(
    gpu: &Gpu,
    l: &Linear,
    c: &RowCall,
    p: StagedPlan,
) -> Result<(), CudaError> {
    let mut args = row_kernel_args(l, c).to_vec();
    args.push(Arg::I(p.rows_per_block as i32));
    gpu.launch_reading(
        (l.w.ptr, l.bf16_bytes()),
        staged_mma_kernel(c.x.count).0,
        (p.blocks as u32, 1, 1),
        256,
        p.smem as u32,
        None,
        &args,
    )
}

/// The staged GEMV's plan for one row over an `n × k` layer, when the call takes it: the
/// stage enqueues staged calls (`SmallCall::Staged`), the bf16 weights are streamed (not
/// FP8 `codes`) and the shape fits.
pub(super) fn staged_gemv_plan(gpu: &Gpu, n: usize, k: usize, codes: bool) -> Option<StagedPlan> {
    (!codes && gpu.staged_gemv())
        .then(|| staged_plan(n, k, gpu.sm_count as usize))
        .flatten()
}
