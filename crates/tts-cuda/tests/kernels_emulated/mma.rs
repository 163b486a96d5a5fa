//! The emulator's twins of the warp-level tensor-core instructions (`emu/mma_twins.hpp`:
//! ldmatrix, mma.sync m16n8k16 on f16 and bf16, cvt.rn.bf16x2, cp.async's zero fill) on
//! small warp kernels against the PTX ISA's layouts, and the linear kernels that use them
//! on the backend's default paths.

use crate::{run_emulated, H200_SMS};

/// The twins against the PTX ISA's fragment layouts, written out independently in the
/// driver (`emu/mma_twins.cpp`), before the kernels rely on them.
#[test]
fn tensor_core_twins_follow_the_ptx_layouts() {
    run_emulated(
        "tensor_core_twins_follow_the_ptx_layouts",
        "mma_twins.cpp",
        &[],
        &[],
    );
}

/// `mma_staged.cu`, the code predictor's linear layers at 2..8 rows on the GPU's default
/// path (`CudaOptions::staged_mma_rows`: `mma_staged_t1`), on the plans
/// `linear::staged_mma_plan` gives the 1.7B's shapes on the H200: QKV with the fused
/// RMSNorm at 2 rows, O adding the residual in place at 5, gate/up with the norm and
/// SwiGLU pairs at 8 (48 weight rows a block), down adding the residual at 3; an odd shape
/// on a smaller machine (a last block of 8 rows, input rows wider than K, bias, SiLU); and
/// the entries a larger `staged_mma_rows` selects (`mma_staged_t2` at 12 rows, `_t4` at
/// 40: two groups of rows).
#[test]
fn staged_mma_matches_the_reference() {
    let mut args = Vec::new();
    // (act, norm, bias, res, alias)
    let mut case = |(n, k): (usize, usize), m: usize, ldx: usize, sms: usize, flags: [usize; 5]| {
        let norm = flags[1] != 0;
        let plan = tts_cuda::linear::staged_mma_plan(n, k, m, norm, sms)
            .unwrap_or_else(|| panic!("{n}x{k} at {m} rows on {sms} SMs fits"));
        args.push(tts_cuda::linear::staged_mma_kernel(m).0.to_string());
        let fields = [n, k, m, plan.rows_per_block, plan.blocks, plan.smem, ldx];
        args.extend(fields.iter().chain(&flags).map(|v| v.to_string()));
    };
    let (norm, in_place, residual) = ([0, 1, 0, 0, 0], [0, 0, 0, 1, 1], [0, 0, 0, 1, 0]);
    case((4096, 1024), 2, 1024, H200_SMS, norm);
    case((1024, 2048), 5, 2048, H200_SMS, in_place);
    case((6144, 1024), 8, 1024, H200_SMS, [2, 1, 0, 0, 0]);
    case((1024, 3072), 3, 3072, H200_SMS, residual);
    case((200, 320), 7, 324, 8, [1, 1, 1, 1, 0]);
    case((256, 512), 12, 512, H200_SMS, norm);
    case((256, 512), 40, 512, H200_SMS, [2, 1, 0, 0, 0]);
    run_emulated(
        "staged_mma_matches_the_reference",
        "mma_staged.cpp",
        &["mma_staged.cu"],
        &args,
    );
}
