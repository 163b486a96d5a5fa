//! The attention kernels of the code predictor's short cache and the talker's long one.

use tts_model::config::StackDims;

use crate::run_emulated;

/// Cache rows (slots) of every case: the rows index them directly.
const CACHE_ROWS: usize = 4;
/// stack.rs launches every attention kernel with 128 threads (FA_ENTRY's and AR_ENTRY's
/// launch bounds).
const THREADS: usize = 128;

/// The dimensions of a built-in model's talker, or of its code predictor (`cp`).
fn builtin_dims(spec: &str, cp: bool) -> StackDims {
    let model = tts_model::builtin::load(spec)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .unwrap_or_else(|| panic!("{spec} is a built-in model"));
    let talker = &model.config.talker;
    if cp {
        talker.code_predictor.dims()
    } else {
        talker.dims()
    }
}

/// One case's arguments for either attention driver, in their order: the kernel, its grid
/// (x, tokens or rows) and threads, the stack's heads, kv heads and head dim, stack.rs's QKV
/// and output row strides plus `pad`, the cache's positions and rows, `last` (tokens per
/// row, or the window), eps, RoPE theta, whether `xb` is written, and the rows' spec.
fn attention_args(
    kernel: &str,
    d: &StackDims,
    grid: (usize, usize),
    (max_pos, last): (usize, usize),
    pad: usize,
    xb: bool,
    spec: &str,
) -> Vec<String> {
    let (qd, kvd) = (d.q_dim(), d.kv_dim());
    let fields = [
        grid.0,
        grid.1,
        THREADS,
        d.heads,
        d.kv_heads,
        d.head_dim,
        qd + 2 * kvd + pad,
        qd + pad,
        max_pos,
        CACHE_ROWS,
        last,
    ];
    let mut args = vec![kernel.to_string()];
    args.extend(fields.map(|v| v.to_string()));
    args.extend([
        d.rms_eps.to_string(),
        d.rope_theta.to_string(),
        usize::from(xb).to_string(),
        spec.to_string(),
    ]);
    args
}

/// `fused_attention_short` (bf16 cache), `fused_attention_short_f32` and their `_group`
/// twins, the code predictor's attention (QK-norm + RoPE of the new tokens, their K and V
/// stored in the cache, attention over positions 0..pos), on the launches stack.rs makes
/// (grid (q heads, rows), or (kv heads, rows) by group, 128 threads, production row
/// strides) over the code predictor's cache of one position per code group: for the 1.7B's
/// code predictor (16 heads of 128 over 8 kv heads) one row of 1 token at a middle and at
/// the last position, step 0's rows of 2 tokens at positions 0-1, and several rows of
/// different slots and positions with a padding row (nothing written), some also writing
/// the O projection's split bf16 rows (`xb`); for a small stack (4 heads of 32 over 2,
/// padded row strides) and the demo's code predictor (2 heads of 16 over 1).
#[test]
fn short_attention_matches_the_reference() {
    use tts_model::config::NUM_CODE_GROUPS;
    let (cp, demo) = (
        builtin_dims("random:1.7b", true),
        builtin_dims("demo", true),
    );
    // The code predictor's cache: one position per code group (code_predictor.rs), which
    // stack.rs hands to the short kernels as it is at most SHORT_CACHE_POSITIONS (private
    // there; attention.cu's FA_SPOS) = 16.
    let max_pos = NUM_CODE_GROUPS;
    assert!(
        max_pos <= 16,
        "the code predictor's cache takes the short kernels"
    );
    let mut args = Vec::new();
    // `rows`: "slot:pos0,..." (slot -1: padding); `pad`: added to stack.rs's row strides
    let mut case = |d: &StackDims, kernel: &str, tpr: usize, rows: &str, xb: bool, pad: usize| {
        let grid_x = if kernel.contains("_group") {
            d.kv_heads
        } else {
            d.heads
        };
        let grid = (grid_x, rows.split(',').count());
        args.extend(attention_args(
            kernel,
            d,
            grid,
            (max_pos, tpr),
            pad,
            xb,
            rows,
        ));
    };
    let (short, short_f32) = ("fused_attention_short", "fused_attention_short_f32");
    let (group, group_f32) = (
        "fused_attention_short_group",
        "fused_attention_short_group_f32",
    );
    case(&cp, short, 1, "1:7", false, 0);
    case(&cp, short, 1, "2:15", false, 0);
    case(&cp, short, 2, "0:0", false, 0);
    case(&cp, short, 2, "2:0,-1:0,0:0,3:0", true, 0);
    case(&cp, short, 1, "3:4,-1:4,1:15,0:9", true, 0);
    case(&cp, short_f32, 2, "2:0,-1:0,0:0", true, 0);
    case(&cp, short_f32, 1, "1:15,-1:15,2:7", false, 0);
    case(&cp, group, 2, "1:0,-1:0,3:0", true, 0);
    case(&cp, group, 1, "0:15,-1:15,2:6", false, 0);
    case(&cp, group_f32, 2, "3:0,-1:0", false, 0);
    case(&cp, group_f32, 1, "2:15,-1:15,0:3", true, 0);
    let small = StackDims {
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
        ..cp
    };
    case(&small, short, 2, "1:0,-1:0,2:0", true, 8);
    case(&small, short_f32, 1, "0:15,-1:15,3:10", false, 8);
    case(&small, group, 1, "2:15,-1:15,1:5", true, 8);
    case(&demo, short, 2, "0:0,-1:0", false, 0);
    case(&demo, group_f32, 1, "1:15,3:8,-1:8", true, 0);
    run_emulated(
        "short_attention_matches_the_reference",
        "attention_short.cpp",
        &["attention.cu"],
        &args,
    );
}

/// `row_attention` (bf16 cache) and `row_attention_f32`, the talker's decode attention for
/// small steps (one new token per row: QK-norm + RoPE, its K and V stored in the cache,
/// attention over positions 0..pos), and `row_attention_split` / `_f32`, the split attention
/// of prefills and merged steps (q already normed and rotated, every token's K and V already
/// cached: attention over positions lo..pos), on the launches stack.rs makes (grid (q heads,
/// tokens), 128 threads, production row strides, window 0) over the talker's cache of
/// `Limits::default().max_positions`: for the 1.7B's talker (16 heads of 128 over 8 kv heads,
/// so groups of 16 lanes, 8 positions at a time, chunks of 64) rows at the first position (no
/// cached one), at one cached position, at the end and one past the end of a chunk, at
/// middle and large positions and at the cache's last position, several rows of different
/// slots with a padding row (nothing written, nor cached); the split form's prefills (tokens
/// at consecutive positions of one slot, from 0 and across a chunk's end) merged with steps
/// and a padding row, and a sliding window (lo > 0, not a chunk's start; stack.rs passes 0);
/// some also writing the O projection's split bf16 rows (`xb`); for the demo's talker (4
/// heads of 16 over 2: groups of 2 lanes, chunks of 512, padded row strides) rows across its
/// chunk's end.
#[test]
fn row_attention_matches_the_reference() {
    let (talker, demo) = (
        builtin_dims("random:1.7b", false),
        builtin_dims("demo", false),
    );
    // the talker's cache positions per slot (talker.rs: `ws.limits.max_positions`)
    let max_pos = tts_cuda::workspace::Limits::default().max_positions;
    // stack.rs takes row_attention for steps of at most this many rows
    let max_rows = tts_cuda::CudaOptions::default().row_attention_rows;
    let mut args = Vec::new();
    // `tokens`: "slot:pos" per token, "slot:p0-p1" for positions p0..=p1 of one slot, slot
    // -1: padding; `pad`: added to stack.rs's row strides
    let mut case = |d: &StackDims, kernel: &str, tokens: &str, window: usize, xb: bool, pad| {
        let count: usize = tokens
            .split(',')
            .map(|t| {
                let pos = t.split_once(':').expect("slot:pos").1;
                match pos.split_once('-') {
                    Some((a, b)) => b.parse::<usize>().unwrap() + 1 - a.parse::<usize>().unwrap(),
                    None => 1,
                }
            })
            .sum();
        assert!(
            kernel.contains("_split") || count <= max_rows,
            "{kernel}: a step of {count} rows takes fused_attention"
        );
        let grid = (d.heads, count);
        args.extend(attention_args(
            kernel,
            d,
            grid,
            (max_pos, window),
            pad,
            xb,
            tokens,
        ));
    };
    let (row, row_f32) = ("row_attention", "row_attention_f32");
    let (split, split_f32) = ("row_attention_split", "row_attention_split_f32");
    case(&talker, row, "0:0", 0, false, 0);
    case(&talker, row, "1:64", 0, false, 0);
    case(&talker, row, "2:65,-1:65,0:137,3:1000", 0, true, 0);
    case(&talker, row_f32, "3:2047,0:1,-1:0,1:128", 0, true, 0);
    case(&talker, split, "2:60-67", 0, false, 0);
    case(&talker, split, "0:0-3,-1:0,3:1000,1:137", 0, true, 0);
    case(&talker, split_f32, "1:2045-2047,-1:9,2:64", 0, true, 0);
    case(&talker, split_f32, "0:98-101,3:300", 100, false, 0);
    case(&demo, row, "1:512,0:513,-1:0,2:3", 0, true, 8);
    case(&demo, split_f32, "3:509-514,-1:0", 0, true, 8);
    run_emulated(
        "row_attention_matches_the_reference",
        "attention_row.cpp",
        &["attention.cu", "attention_row.cu"],
        &args,
    );
}
