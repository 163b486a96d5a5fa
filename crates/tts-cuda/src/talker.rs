//! The talker on the GPU: prefill (eager, variable length) and the generation step
//! (fixed shapes per batch bucket, graph-captured by the backend).
//!
//! Both end the same way: final norm + codec head on each row's last token, the normed
//! hidden state stored in the slot (the code predictor's input), code 0 sampled on the
//! device and written to the slot's frame.

use tts_model::config::NUM_CODE_GROUPS;

use crate::device::{Arg, Gpu};
use crate::error::CudaError;
use crate::kernels;
use crate::linear::{linear, Act, Rows};
use crate::persistent::Persistent;
use crate::stack::{final_norm, run_layers, Attention, Kv, Tokens};
use crate::weights::{DevCodePredictor, DevTalker};
use crate::workspace::Workspace;

/// Fixed facts the sampler needs.
#[derive(Debug, Clone, Copy)]
pub struct SampleRules {
    pub eos: i32,
    pub suppress_from: i32,
    pub min_new: i32,
}

/// The talker's KV cache view.
pub fn talker_kv(ws: &Workspace) -> Kv {
    Kv {
        k: ws.k_cache.ptr,
        v: ws.v_cache.ptr,
        rows: ws.limits.max_slots,
        max_pos: ws.limits.max_positions,
    }
}

/// `out[r] = T(ids[r])`: text embedding, fc1 + SiLU, fc2, for `n` rows.
fn text_vectors(
    gpu: &Gpu,
    t: &DevTalker,
    ws: &Workspace,
    ids: u64,
    n: usize,
    out: u64,
) -> Result<(), CudaError> {
    let th = t.text_hidden;
    kernels::gather_rows(
        gpu,
        t.text_embedding.ptr,
        th,
        ids,
        n,
        ws.text_in.ptr,
        th,
        false,
    )?;
    let r = Rows {
        ptr: ws.text_in.ptr,
        ld: th,
        count: n,
    };
    linear(
        gpu,
        &t.fc1,
        r,
        None,
        Act::Silu,
        None,
        ws.text_h.ptr,
        th,
        &ws.scratch,
    )?;
    let r = Rows {
        ptr: ws.text_h.ptr,
        ld: th,
        count: n,
    };
    linear(
        gpu,
        &t.fc2,
        r,
        None,
        Act::None,
        None,
        out,
        t.stack.dims.hidden,
        &ws.scratch,
    )
}

/// From the last-token rows in `ws.last` (`n` of them): logits, normed hidden stored per
/// slot, code 0 sampled into `ws.codes` and the slots' frames.
fn finish_rows(
    gpu: &Gpu,
    t: &DevTalker,
    ws: &Workspace,
    n: usize,
    slots: u64,
    rules: SampleRules,
) -> Result<(), CudaError> {
    let h = t.stack.dims.hidden;
    let vocab = t.codec_head.n;
    let r = Rows {
        ptr: ws.last.ptr,
        ld: h,
        count: n,
    };
    linear(
        gpu,
        &t.codec_head,
        r,
        Some((t.stack.norm.ptr, t.stack.dims.rms_eps)),
        Act::None,
        None,
        ws.logits.ptr,
        vocab,
        &ws.scratch,
    )?;
    final_norm(gpu, &t.stack, ws.last.ptr, h, n, ws.hidden.ptr)?;
    kernels::scatter_u32(gpu, ws.hidden.ptr, h, h, slots, n, ws.slot_hidden.ptr, h)?;
    gpu.launch(
        "sample_talker",
        (n as u32, 1, 1),
        crate::device::sampler_threads(n, gpu.sm_count),
        &[
            Arg::P(ws.logits.ptr),
            Arg::I(vocab as i32),
            Arg::I(n as i32),
            Arg::P(slots),
            Arg::P(ws.params.ptr),
            Arg::P(ws.seen.ptr),
            Arg::I(ws.seen_words as i32),
            Arg::I(rules.eos),
            Arg::I(rules.suppress_from),
            Arg::I(rules.min_new),
            Arg::P(ws.codes.ptr),
            Arg::I(1),
        ],
    )?;
    kernels::scatter_u32(
        gpu,
        ws.codes.ptr,
        1,
        1,
        slots,
        n,
        ws.slot_frames.ptr,
        NUM_CODE_GROUPS,
    )
}

/// A prefill call's token layout (host side).
pub struct PrefillPlan {
    /// Per token: text id, codec id (-1 none), slot, position.
    pub text: Vec<i32>,
    pub codec: Vec<i32>,
    pub slots: Vec<i32>,
    pub positions: Vec<i32>,
    /// Per row: index of its last token, and its slot.
    pub last: Vec<i32>,
    pub row_slots: Vec<i32>,
}

/// The prompt tokens' input rows: `x[r] = T(text[r]) + codec_embedding(codec[r])` (no
/// codec term where the id is -1), for `n` tokens into `ws.x`.
fn embed_prompt_tokens(
    gpu: &Gpu,
    t: &DevTalker,
    ws: &Workspace,
    (text_ids, codec_ids): (u64, u64),
    n: usize,
) -> Result<(), CudaError> {
    let h = t.stack.dims.hidden;
    text_vectors(gpu, t, ws, text_ids, n, ws.x.ptr)?;
    kernels::gather_rows(
        gpu,
        t.codec_embedding.ptr,
        h,
        codec_ids,
        n,
        ws.x.ptr,
        h,
        true,
    )
}

/// The step rows' input rows: the text vector of each row's text id (via `ws.last`) plus
/// the 16 code embeddings of its slot's current frame, for `b` rows into `out` (ld hidden).
fn embed_step_rows(
    gpu: &Gpu,
    t: &DevTalker,
    cp: &DevCodePredictor,
    ws: &Workspace,
    (text_ids, slots): (u64, u64),
    b: usize,
    out: u64,
) -> Result<(), CudaError> {
    let h = t.stack.dims.hidden;
    text_vectors(gpu, t, ws, text_ids, b, ws.last.ptr)?;
    ws.load_frames(gpu, ws.slot_frames.ptr, slots, b)?;
    gpu.launch(
        "frame_embedding",
        (b as u32, 1, 1),
        256,
        &[
            Arg::P(t.codec_embedding.ptr),
            Arg::P(cp.embeddings.ptr),
            Arg::I(h as i32),
            Arg::P(ws.frames.ptr),
            Arg::P(ws.last.ptr),
            Arg::I(h as i32),
            Arg::P(out),
            Arg::I(h as i32),
            Arg::I(b as i32),
            Arg::I(cp.vocab as i32),
        ],
    )
}

/// Writes a prefill plan's integer inputs (one host-to-device copy). Regions of `n` =
/// `plan.text.len()` ints each: text | codec | slots | positions | last + row slots.
pub fn write_prefill_inputs(
    gpu: &Gpu,
    ws: &mut Workspace,
    plan: &PrefillPlan,
) -> Result<(), CudaError> {
    let n = plan.text.len();
    let rows = plan.last.len();
    if n > ws.limits.max_prefill_tokens.max(2 * ws.limits.max_batch) || rows > ws.limits.max_batch {
        return Err(CudaError::Shape(format!(
            "prefill of {n} tokens / {rows} rows exceeds the workspace"
        )));
    }
    let mut ints = Vec::with_capacity(5 * n);
    ints.extend(&plan.text);
    ints.extend(&plan.codec);
    ints.extend(&plan.slots);
    ints.extend(&plan.positions);
    ints.extend(&plan.last);
    ints.extend(&plan.row_slots);
    gpu.write(&mut ws.prefill_ints, &ints)
}

/// Enqueues a prefill of `n` tokens and `rows` rows whose inputs were written by
/// [`write_prefill_inputs`] (no host work: capturable per token bucket). Codes land in
/// `ws.codes[..rows]`.
pub fn prefill(
    gpu: &Gpu,
    t: &DevTalker,
    ws: &Workspace,
    n: usize,
    rows: usize,
    rules: SampleRules,
) -> Result<(), CudaError> {
    let p = |region: usize| ws.prefill_ints.at(region * n);
    embed_prompt_tokens(gpu, t, ws, (p(0), p(1)), n)?;
    split_pass(gpu, t, ws, n, rows, rules)
}

/// [`prefill`] of a pass whose tokens have extra input rows (eager: `extra` = (an f32
/// table `[m, hidden]`, one i32 per token: its table row or -1) on the device): the rows
/// are added to the embedded tokens before the layers.
pub fn prefill_with_extra(
    gpu: &Gpu,
    t: &DevTalker,
    ws: &Workspace,
    (n, rows): (usize, usize),
    (table, ids): (u64, u64),
    rules: SampleRules,
) -> Result<(), CudaError> {
    let h = t.stack.dims.hidden;
    let p = |region: usize| ws.prefill_ints.at(region * n);
    embed_prompt_tokens(gpu, t, ws, (p(0), p(1)), n)?;
    kernels::gather_rows_f32(gpu, table, h, ids, n, ws.x.ptr, h, true)?;
    split_pass(gpu, t, ws, n, rows, rules)
}

/// The layers over the `n` tokens in `ws.x` at the slots and positions of the prefill plan
/// in `ws.prefill_ints` (split attention: tokens of any slots and positions), then the head
/// and sampling over the plan's `rows` rows (each at its last token). A pass of one token
/// (a text-streaming prompt whose head was cached) has a talker step's shape and takes
/// its fused attention instead, one launch fewer per layer.
fn split_pass(
    gpu: &Gpu,
    t: &DevTalker,
    ws: &Workspace,
    n: usize,
    rows: usize,
    rules: SampleRules,
) -> Result<(), CudaError> {
    let h = t.stack.dims.hidden;
    let p = |region: usize| ws.prefill_ints.at(region * n);
    let tok = Tokens {
        x: ws.x.ptr,
        n,
        slots: p(2),
        positions: p(3),
    };
    // (a bucket of one token holds exactly one: its row's only token)
    let attention = if n == 1 {
        Attention::Fused { tokens_per_row: 1 }
    } else {
        Attention::Split
    };
    run_layers(
        gpu,
        &t.stack,
        ws,
        tok,
        talker_kv(ws),
        (attention, false),
        None,
    )?;
    kernels::gather_u32(gpu, ws.x.ptr, h, h, p(4), rows, ws.last.ptr, h)?;
    let row_slots = ws.prefill_ints.at(4 * n + rows);
    finish_rows(gpu, t, ws, rows, row_slots, rules)
}

/// Enqueues one talker pass over a merged plan written by [`write_prefill_inputs`]
/// (`prefill_plan::merged_plan`): `n` tokens, the last `b` of them one step row each,
/// and `rows` output rows (the prompts' last tokens, then the step rows). The prompts'
/// inputs are built as in [`prefill`], the step rows' as in [`step`]; then every token
/// goes through the layers with the split attention path (tokens of any slots and
/// positions). Codes land in `ws.codes[..rows]`. Eager (no graph).
pub fn prefill_with_step(
    gpu: &Gpu,
    t: &DevTalker,
    cp: &DevCodePredictor,
    ws: &Workspace,
    (n, b, rows): (usize, usize, usize),
    rules: SampleRules,
) -> Result<(), CudaError> {
    let h = t.stack.dims.hidden;
    let np = n - b;
    let p = |region: usize| ws.prefill_ints.at(region * n);
    if np > 0 {
        embed_prompt_tokens(gpu, t, ws, (p(0), p(1)), np)?;
    }
    // the step rows after the prompts' tokens: their text ids and slots
    let step_ids = (ws.prefill_ints.at(np), ws.prefill_ints.at(2 * n + np));
    embed_step_rows(gpu, t, cp, ws, step_ids, b, ws.x.at(np * h))?;
    split_pass(gpu, t, ws, n, rows, rules)
}

/// Enqueues one generation step for `b` rows (a bucket; padding rows have slot -1). Reads
/// `ws.inputs` (row slots, positions, text ids); codes land in `ws.codes[..b]`.
/// With `persistent` and at most its `max_rows()` rows the layers run as one persistent
/// kernel.
pub fn step(
    gpu: &Gpu,
    t: &DevTalker,
    cp: &DevCodePredictor,
    ws: &Workspace,
    b: usize,
    rules: SampleRules,
    persistent: Option<&Persistent>,
) -> Result<(), CudaError> {
    let h = t.stack.dims.hidden;
    let lay = &ws.layout;
    let (slots, positions, text_ids) = (
        ws.inputs.at(lay.row_slots),
        ws.inputs.at(lay.step_pos),
        ws.inputs.at(lay.text_ids),
    );
    embed_step_rows(gpu, t, cp, ws, (text_ids, slots), b, ws.x.ptr)?;
    if let Some(p) = persistent.filter(|p| b <= p.max_rows()) {
        p.launch(gpu, b)?;
    } else {
        let tok = Tokens {
            x: ws.x.ptr,
            n: b,
            slots,
            positions,
        };
        run_layers(
            gpu,
            &t.stack,
            ws,
            tok,
            talker_kv(ws),
            (Attention::Fused { tokens_per_row: 1 }, false),
            None,
        )?;
    }
    kernels::copy_rows(gpu, ws.x.ptr, h, ws.last.ptr, h, h, b)?;
    finish_rows(gpu, t, ws, b, slots, rules)
}
