//! The end of a one-row code-predictor step in one launch (`head_sample.cu`): the
//! codebook's head over the normed row, then the sampler (the frame entry and the next
//! step's input rows, as `sample_cp`), where the staged path takes the head's GEMV and
//! `sample_cp` apart. Taken where `LinearPaths::fused_head` asks and the shapes fit.

use crate::device::{Arg, Gpu};
use crate::error::CudaError;
use crate::linear::{GemmScratch, Linear, Rows};

/// Most bytes of head rows a block stages (`Gpu::open` lets the kernel take that beside
/// the sampler's ~40 KB of static shared memory).
pub const HEAD_SAMPLE_MAX_SMEM: usize = 48 << 10;
/// `SAMPLE_MAXV` of `sampling.cu`.
const MAX_VOCAB: usize = 4096;
/// `MLP_MAX_STEPS` of `mlp_fused.cu`: the widest row a warp holds.
const MAX_HIDDEN: usize = 256 * 8;

/// How `head_sample_cp_m1` covers a head: `blocks` blocks of `rows_per_block` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadSamplePlan {
    pub blocks: usize,
    pub rows_per_block: usize,
    pub smem: usize,
}

/// The cover of a head of `vocab` rows `hidden` wide on `sms` multiprocessors: the fewest
/// rows a block that needs at most one block per multiprocessor, or None where the kernel
/// does not take the shape (width a multiple of 256 up to 2048, at most 4096 rows, a
/// block's rows within 48 KiB).
pub fn head_sample_plan(vocab: usize, hidden: usize, sms: usize) -> Option<HeadSamplePlan> {
    let fits = vocab > 0
        && vocab <= MAX_VOCAB
        && hidden > 0
        && hidden.is_multiple_of(256)
        && hidden <= MAX_HIDDEN
        && sms > 0;
    if !fits {
        return None;
    }
    let rows_per_block = vocab.div_ceil(sms);
    let smem = rows_per_block * hidden * 2;
    (smem <= HEAD_SAMPLE_MAX_SMEM).then_some(HeadSamplePlan {
        blocks: vocab.div_ceil(rows_per_block),
        rows_per_block,
        smem,
    })
}

/// The plan for `head` over the one row `x`, when the call takes it: one row, the path on,
/// a device that took the kernel's shared memory (`Gpu::staged`), bf16 weights without
/// bias or FP8 codes, a shape that fits.
pub fn head_sample_call(
    gpu: &Gpu,
    scratch: &GemmScratch,
    head: &Linear,
    x: Rows,
) -> Option<HeadSamplePlan> {
    let codes = head.fp8.is_some() && scratch.paths.fp8_codes(1, head.n, head.k, true);
    let takes = x.count == 1
        && x.ptr.is_multiple_of(16)
        && scratch.paths.fused_head
        && gpu.staged
        && head.bias.is_none()
        && !codes;
    takes
        .then(|| head_sample_plan(head.n, head.k, gpu.sm_count as usize))
        .flatten()
}

/// `logits = head(norm x)` for the one row `x` (`norm`: gains and eps), then
/// `sample_cp`'s choice and writes for step `step` with `sampler` (its arguments after
/// `logits, V, rows`: slots, parameters, step, frames and the next step's rows), in one
/// launch (`plan` from [`head_sample_call`]).
pub fn head_sample(
    gpu: &Gpu,
    scratch: &GemmScratch,
    (head, plan): (&Linear, HeadSamplePlan),
    (x, norm): (Rows, (u64, f32)),
    logits: u64,
    sampler: &[Arg],
) -> Result<(), CudaError> {
    scratch.forget_ready();
    let (_, arrived) = scratch.row_sums();
    let args = [
        &[
            Arg::P(head.w.ptr),
            Arg::I(head.n as i32),
            Arg::I(head.k as i32),
            Arg::I(plan.rows_per_block as i32),
            Arg::P(norm.0),
            Arg::F(norm.1),
            Arg::P(x.ptr),
            Arg::P(logits),
            Arg::P(arrived),
        ],
        sampler,
    ]
    .concat();
    gpu.launch_reading(
        (head.w.ptr, head.bf16_bytes()),
        "head_sample_cp_m1",
        (plan.blocks as u32, 1, 1),
        // as sample_cp's one-row launch (its sums in the same order)
        crate::device::SAMPLER_THREADS,
        plan.smem as u32,
        None,
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::head_sample_plan;

    /// The 1.7B code predictor's heads (2048 × 1024) take 128 blocks of 16 rows on the
    /// H200's 132 multiprocessors; shapes the kernel does not take have no plan.
    #[test]
    fn plans_cover_the_code_predictor() {
        let p = head_sample_plan(2048, 1024, 132).expect("fits");
        assert_eq!(
            (p.blocks, p.rows_per_block, p.smem),
            (128, 16, 16 * 1024 * 2)
        );
        let odd = head_sample_plan(300, 256, 132).expect("fits");
        assert_eq!((odd.blocks, odd.rows_per_block), (100, 3));
        for (v, h, sms) in [
            (5000, 1024, 132),
            (2048, 1000, 132),
            (2048, 4096, 132),
            (2048, 1024, 8),
        ] {
            assert!(head_sample_plan(v, h, sms).is_none(), "{v}x{h} on {sms}");
        }
    }
}
