//! The attention and O projection of a step of up to [`ATTENTION_O_MAX_ROWS`] rows of one
//! token each in one launch (`attention_o.cu`), for the short caches held in shared memory
//! (the code predictor's): grid (heads, chunks of O rows, rows), each block one row's head's
//! attention and that head's share of its O rows, summed across heads in fixed point.
//! Taken by staged stage calls (`SmallCall::Staged`, `StagedMma`) where the shapes fit and
//! `LinearPaths::fused_attention_o` is on.

use crate::device::{Arg, Gpu};
use crate::error::CudaError;
use crate::linear::{GemmScratch, Linear};
use tts_model::config::StackDims;

/// Most bytes of O weights a block copies (its dynamic shared memory; `Gpu::open` lets the
/// kernels take that beside their ~25 KB of static shared memory).
pub const ATTENTION_O_MAX_SMEM: usize = 40 << 10;
/// Most rows a call takes (each row's blocks copy the O tiles again).
pub const ATTENTION_O_MAX_ROWS: usize = 4;
/// Row padding of the O tile in shared memory (`AO_PAD`).
const PAD: usize = 8;

/// How `attention_o_m1` covers a layer: `chunks` chunks of `rows` O rows per head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AoPlan {
    pub chunks: usize,
    pub rows: usize,
    pub smem: usize,
}

/// The cover of an O projection of `hidden` rows for `heads` heads of `head_dim` on `sms`
/// multiprocessors: the most chunks (dividing `hidden`) with at most one block per
/// multiprocessor whose tile fits, or None (head dims the kernel does not take: a multiple
/// of 8, at most 128).
pub fn attention_o_plan(
    hidden: usize,
    heads: usize,
    head_dim: usize,
    sms: usize,
) -> Option<AoPlan> {
    if head_dim == 0 || !head_dim.is_multiple_of(8) || head_dim > 128 || heads == 0 {
        return None;
    }
    let tile = |rows: usize| rows * (head_dim + PAD) * 2;
    (1..=hidden)
        .rev()
        .filter(|&c| hidden.is_multiple_of(c) && heads * c <= sms)
        .map(|c| (c, hidden / c))
        .find(|&(_, rows)| tile(rows) <= ATTENTION_O_MAX_SMEM)
        .map(|(chunks, rows)| AoPlan {
            chunks,
            rows,
            smem: tile(rows),
        })
}

/// The plan for the attention + O projection `o` of `rows` rows of a stack of `dims`,
/// when the call takes it: a staged stage call of at most [`ATTENTION_O_MAX_ROWS`] rows,
/// the path on, the O weights bf16 without bias or FP8 codes, shapes that fit.
pub fn attention_o_call(
    gpu: &Gpu,
    scratch: &GemmScratch,
    o: &Linear,
    dims: &StackDims,
    rows: usize,
) -> Option<AoPlan> {
    let takes = (1..=ATTENTION_O_MAX_ROWS).contains(&rows)
        && rows * dims.hidden <= scratch.row_sums_len()
        && scratch.paths.fused_attention.with_o
        && gpu.staged_gemv()
        && o.bias.is_none()
        && !(o.fp8.is_some() && scratch.paths.fp8_codes(rows, o.n, o.k, false))
        && o.n == dims.hidden
        && o.k == dims.q_dim();
    takes
        .then(|| {
            attention_o_plan(
                dims.hidden,
                dims.heads,
                dims.head_dim,
                gpu.sm_count as usize,
            )
        })
        .flatten()
}

/// `x[r] += O · attention(...)` for `rows` rows (x `ldx` apart) of a stack of `dims`:
/// `norm_rope_kv` is the argument list `fused_attention_short` takes after its qkv rows and
/// shape (cache rows and positions through the layer's cache and its max position);
/// `f32_kv` picks the f32-cache kernel.
#[allow(clippy::too_many_arguments)]
pub fn attention_o(
    gpu: &Gpu,
    scratch: &GemmScratch,
    (qkv, ldq): (u64, usize),
    norm_rope_kv: &[Arg],
    (o, dims, plan): (&Linear, &StackDims, AoPlan),
    f32_kv: bool,
    (x, ldx, rows): (u64, usize, usize),
) -> Result<(), CudaError> {
    scratch.forget_ready();
    let (sums, arrived) = scratch.row_sums();
    let args = [
        &[Arg::P(qkv), Arg::I(ldq as i32)],
        norm_rope_kv,
        &[
            Arg::P(o.w.ptr),
            Arg::I(o.n as i32),
            Arg::I(plan.rows as i32),
            Arg::I(rows as i32),
            Arg::P(x),
            Arg::I(ldx as i32),
            Arg::P(sums),
            Arg::P(arrived),
        ],
    ]
    .concat();
    let name = if f32_kv {
        "attention_o_m1_f32"
    } else {
        "attention_o_m1"
    };
    gpu.launch_reading(
        (o.w.ptr, o.bf16_bytes()),
        name,
        (dims.heads as u32, plan.chunks as u32, rows as u32),
        128,
        plan.smem as u32,
        None,
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::{attention_o_plan, AoPlan};

    /// The 1.7B and 0.6B code predictors (16 heads of 128, 1024 wide) take 8 chunks of 128
    /// rows on the H200's 132 multiprocessors: 128 blocks of 34 KiB tiles; head dims the
    /// kernel does not take have no plan.
    #[test]
    fn plans_cover_the_code_predictors() {
        assert_eq!(
            attention_o_plan(1024, 16, 128, 132),
            Some(AoPlan {
                chunks: 8,
                rows: 128,
                smem: 128 * 136 * 2
            })
        );
        // fewer multiprocessors: longer chunks, until a tile no longer fits (150 rows)
        assert_eq!(
            attention_o_plan(1024, 16, 128, 128).map(|p| p.chunks),
            Some(8)
        );
        assert!(attention_o_plan(1024, 16, 128, 100).is_none());
        let small = attention_o_plan(64, 2, 16, 132).expect("fits");
        assert_eq!((small.chunks, small.rows), (64, 1));
        for hd in [0, 12, 256] {
            assert!(attention_o_plan(1024, 16, hd, 132).is_none(), "{hd}");
        }
    }
}
