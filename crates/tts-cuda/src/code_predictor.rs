//! The code-predictor loop on the GPU for one batch bucket: codes 1..15 of each row's
//! frame, sampling included, with no host round trip (graph-captured by the backend).
//!
//! Step 0 runs two tokens per row, `[proj(talker hidden), proj(C(code 0))]`, at positions
//! 0 and 1; steps 1..14 run one token, `proj(E_{j-1}(code j))`, at position j+1. The
//! cache is per batch row (fresh every frame), so rows index it directly. When asked for
//! (`CudaOptions::persistent_cp_rows`), small buckets run the steps as one persistent
//! kernel (`persistent.cu`); otherwise launch by launch.

use tts_model::config::NUM_CODE_GROUPS;

use crate::device::{Arg, Gpu};
use crate::error::CudaError;
use crate::kernels;
use crate::linear::{linear, Act, NextLinear, Rows};
use crate::persistent::Persistent;
use crate::stack::{run_layers, Attention, Kv, Tokens};
use crate::weights::{DevCodePredictor, DevTalker};
use crate::workspace::{SlotBuffers, Workspace};

/// Enqueues the 15-step loop for `b` rows. Reads `ws.inputs` (row slots, cp row maps) and
/// the slots' hidden states and parameters in `state` (`ws`'s own, or those of the
/// backend's main workspace when `ws` is a lane's); the completed frames land in
/// `ws.frames[..b]` and in the slots' frames. With
/// `persistent` and at most its `max_rows()` rows the steps run as one persistent kernel,
/// else launch by launch.
pub fn predict(
    gpu: &Gpu,
    t: &DevTalker,
    cp: &DevCodePredictor,
    ws: &Workspace,
    state: SlotBuffers,
    b: usize,
    persistent: Option<&Persistent>,
) -> Result<(), CudaError> {
    let th = t.stack.dims.hidden;
    let ch = cp.stack.dims.hidden;
    // a QKV row's width (ws.qkv's row stride: q, k, v back to back)
    let qkv_n = cp.stack.dims.q_dim() + 2 * cp.stack.dims.kv_dim();
    let lay = &ws.layout;
    let slots = ws.inputs.at(lay.row_slots);
    let (rows1, rows2) = (ws.inputs.at(lay.cp_rows1), ws.inputs.at(lay.cp_rows2));
    kernels::gather_u32(gpu, state.hidden, th, th, slots, b, ws.cp_h.ptr, th)?;
    ws.load_frames(gpu, state.frames, slots, b)?;
    // Step 0 inputs, interleaved rows [hidden_r, code0_r].
    let h_rows = Rows {
        ptr: ws.cp_h.ptr,
        ld: th,
        count: b,
    };
    match &cp.projection {
        Some(p) => linear(
            gpu,
            p,
            h_rows,
            None,
            Act::None,
            None,
            ws.cp_x.ptr,
            2 * ch,
            &ws.scratch,
        )?,
        None => kernels::copy_rows(gpu, ws.cp_h.ptr, th, ws.cp_x.ptr, 2 * ch, ch, b)?,
    }
    gpu.launch(
        "cp_first_input",
        (b as u32, 1, 1),
        256,
        &[
            Arg::P(cp.folded_code0.as_ref().map_or(0, |f| f.ptr)),
            Arg::P(t.codec_embedding.ptr),
            Arg::I(ch as i32),
            Arg::P(ws.frames.ptr),
            Arg::I(b as i32),
            Arg::P(ws.cp_x.ptr),
        ],
    )?;
    if let Some(lp) = persistent.filter(|p| b <= p.max_rows()) {
        lp.launch(gpu, b)?;
        return ws.store_frames(gpu, state.frames, slots, b);
    }
    let kv = Kv {
        k: ws.cp_k_cache.ptr,
        v: ws.cp_v_cache.ptr,
        rows: ws.limits.max_batch,
        max_pos: NUM_CODE_GROUPS,
    };
    let bmax = ws.limits.max_batch;
    let tok = Tokens {
        x: ws.cp_x.ptr,
        n: 2 * b,
        slots: rows2,
        positions: ws.cp_pos.ptr,
    };
    // The stack over `tok` (rows of `per_row` new tokens; with `qkv_given` the first
    // layer's QKV rows are the table's, written by the sampler). Its weights are read 15
    // times a frame: a share stays in L2 when reserved (`Gpu::reserve_l2_for`).
    // `then`: the head that reads the stack's rows next (one token a row only).
    let layers = |tok: Tokens, per_row: usize, qkv_given: bool, then: Option<NextLinear>| {
        gpu.with_l2_persist(|| {
            let mode = Attention::Fused {
                tokens_per_row: per_row,
            };
            run_layers(gpu, &cp.stack, ws, tok, kv, (mode, qkv_given), then)
        })
    };
    layers(tok, 2, false, None)?;
    // The head reads each row's second token.
    let mut last = Rows {
        ptr: ws.cp_x.at(ch),
        ld: 2 * ch,
        count: b,
    };
    for j in 0..NUM_CODE_GROUPS - 1 {
        if j > 0 {
            let positions = ws.cp_pos.at(2 * bmax + (j - 1) * bmax);
            let tok = Tokens {
                x: ws.cp_x.ptr,
                n: b,
                slots: rows1,
                positions,
            };
            let head = NextLinear {
                n: cp.lm_heads[j].n,
                norm: Some((cp.stack.norm.ptr, cp.stack.dims.rms_eps)),
            };
            layers(tok, 1, cp.qkv0.is_some(), Some(head))?;
            last = Rows {
                ptr: ws.cp_x.ptr,
                ld: ch,
                count: b,
            };
        }
        let head = &cp.lm_heads[j];
        linear(
            gpu,
            head,
            last,
            Some((cp.stack.norm.ptr, cp.stack.dims.rms_eps)),
            Act::None,
            None,
            ws.logits.ptr,
            head.n,
            &ws.scratch,
        )?;
        gpu.launch(
            "sample_cp",
            (b as u32, 1, 1),
            crate::device::sampler_threads(b, gpu.sm_count),
            &[
                Arg::P(ws.logits.ptr),
                Arg::I(head.n as i32),
                Arg::I(b as i32),
                Arg::P(slots),
                Arg::P(state.params),
                Arg::I(j as i32 + 1),
                Arg::P(ws.frames.ptr),
                // the next step's input, embedded by the sampler (saves a launch per step)
                Arg::P(cp.folded.as_ref().map_or(0, |f| f.ptr)),
                Arg::P(cp.embeddings.ptr),
                Arg::I(ch as i32),
                Arg::P(ws.cp_x.ptr),
                Arg::I(ch as i32),
                // and its first-layer QKV row (the table, when there is one)
                Arg::P(cp.qkv0.as_ref().map_or(0, |t| t.ptr)),
                Arg::I(qkv_n as i32),
                Arg::P(ws.qkv.ptr),
                Arg::I(qkv_n as i32),
            ],
        )?;
    }
    ws.store_frames(gpu, state.frames, slots, b)
}
