//! The linear kernels the backend runs by default at one and few rows.

use tts_cuda::linear::GemvPasses;

use crate::{run_emulated, H200_SMS};

/// `gemv_staged_m1`, the code predictor's one-row linear layers on the GPU's default path,
/// on the plans `linear::staged_plan` gives the 1.7B's shapes on the H200: QKV and the head
/// with the fused RMSNorm, O and down adding the residual, gate/up with the norm and
/// SwiGLU pairs; an odd shape on a smaller machine (a block whose last pair lacks its
/// partner, K not a multiple of 256, bias, SiLU); and a padding call (nothing written).
#[test]
fn staged_gemv_matches_the_reference() {
    let mut args = Vec::new();
    let mut case = |(n, k): (usize, usize), sms: usize, act: usize, flags: [bool; 3], valid| {
        let plan = tts_cuda::linear::staged_plan(n, k, sms)
            .unwrap_or_else(|| panic!("{n}x{k} on {sms} SMs fits"));
        let [norm, bias, res] = flags.map(usize::from);
        let fields = [
            n,
            k,
            plan.rows_per_block,
            plan.blocks,
            plan.smem,
            tts_cuda::linear::gemv_ksplit(n),
            act,
            norm,
            bias,
            res,
            valid,
        ];
        args.extend(fields.map(|v| v.to_string()));
    };
    let (norm, plain, residual) = ([true, false, false], [false; 3], [false, false, true]);
    case((4096, 1024), H200_SMS, 0, norm, 1);
    case((1024, 2048), H200_SMS, 0, residual, 1);
    case((6144, 1024), H200_SMS, 2, norm, 1);
    case((1024, 3072), H200_SMS, 0, residual, 1);
    case((2048, 1024), H200_SMS, 0, norm, 1);
    case((301, 264), 32, 1, [true, true, true], 1);
    case((1024, 2048), H200_SMS, 0, plain, 0);
    run_emulated(
        "staged_gemv_matches_the_reference",
        "gemv_staged.cpp",
        &["gemv_staged.cu"],
        &args,
    );
}

/// `gemv.cu`'s bf16 entries as the backend picks them (`linear::gemv_choice`): the 1.7B
/// talker's one-row layers (QKV with the fused norm on `gemv_m1_pre`; O adding the residual
/// and writing the next layer's normed input and Σ y² partials, the norm chain's writer;
/// gate/up reading them, the chain's reader, SwiGLU pairs; down adding the residual), the
/// code predictor's O (ksplit 4), calls of 2, 3 (on `gemv_m4`, one padding row) and 7 rows
/// (on `gemv_m8`), an odd shape with bias and SiLU, and the one-row entries with passes of
/// 8 steps.
#[test]
fn gemv_matches_the_reference() {
    let mut args = Vec::new();
    // (act, norm: 0 none, 1 fused, 2 chain reader, bias, res, chain writer)
    let mut with = |(n, k): (usize, usize), rows, passes, (act, norm, bias, res, writer)| {
        let (kernel, blocks) = tts_cuda::linear::gemv_choice_with(n, k, rows, passes);
        let template = match kernel {
            "gemv_m2" => 2,
            "gemv_m4" => 4,
            "gemv_m8" => 8,
            _ => 1,
        };
        args.push(kernel.to_string());
        let fields = [
            template,
            n,
            k,
            blocks,
            tts_cuda::linear::gemv_ksplit(n),
            act,
            norm,
            bias,
            res,
            writer,
            rows,
        ];
        args.extend(fields.map(|v| v.to_string()));
    };
    let four = GemvPasses::Four;
    let mut case = |shape, rows, flags| with(shape, rows, four, flags);
    let talker = (4096, 2048, 2048, 6144);
    case((talker.0, talker.1), 1, (0, 1, 0, 0, 0));
    case((talker.2, talker.1), 1, (0, 0, 0, 1, 1));
    case((2 * talker.3, talker.1), 1, (2, 2, 0, 0, 0));
    case((talker.2, talker.3), 1, (0, 0, 0, 1, 0));
    case((1024, 2048), 1, (0, 0, 0, 1, 0));
    case((1024, 1024), 2, (2, 1, 0, 0, 0));
    case((2048, 1024), 3, (0, 1, 0, 1, 0));
    case((512, 1024), 7, (0, 1, 0, 1, 0));
    case((301, 264), 1, (1, 1, 1, 1, 0));
    // passes of 8 steps (`gemv_m1_u8`, `gemv_m1_u8_pre`): QKV with the fused norm, gate/up
    // as the chain's reader, down adding the residual; also bit for bit against gemv_m1
    for passes in [GemvPasses::Eight, GemvPasses::EightPre] {
        with((talker.0, talker.1), 1, passes, (0, 1, 0, 0, 0));
        with((2 * talker.3, talker.1), 1, passes, (2, 2, 0, 0, 0));
        with((talker.2, talker.3), 1, passes, (0, 0, 0, 1, 0));
    }
    run_emulated(
        "gemv_matches_the_reference",
        "gemv.cpp",
        &["gemv.cu"],
        &args,
    );
}
