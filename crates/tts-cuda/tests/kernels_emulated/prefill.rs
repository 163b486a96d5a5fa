//! The talker's attention kernels of attention.cu over its long cache: the prefill's split
//! attention (`qk_norm_rope_kv` then `decode_attention`, and the default
//! `row_attention_split` after the same first launch) and the step's `fused_attention` when
//! `row_attention` is not taken.

use tts_model::config::StackDims;

use crate::run_emulated;

/// stack.rs launches every attention kernel, and qk_norm_rope_kv, with 128 threads.
const THREADS: usize = 128;

/// The talker of a built-in model.
fn talker_dims(spec: &str) -> StackDims {
    let model = tts_model::builtin::load(spec)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .unwrap_or_else(|| panic!("{spec} is a built-in model"));
    model.config.talker.dims()
}

/// The talker's cache positions per slot (talker.rs: `ws.limits.max_positions`).
fn max_positions() -> usize {
    tts_cuda::workspace::Limits::default().max_positions
}

/// Tokens of a spec "slot:p0-p1,..." (or "slot:pos"): one per position of each run.
fn token_count(spec: &str) -> usize {
    spec.split(',')
        .map(|t| {
            let pos = t.split_once(':').expect("slot:pos").1;
            match pos.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() + 1 - a.parse::<usize>().unwrap(),
                None => 1,
            }
        })
        .sum()
}

/// One case of attention_prefill.cpp, in its argument order, with the grids stack.rs
/// computes: `qk` ("-" for fused_attention) and its grid (tokens), the attention kernel,
/// its grid ((heads, tokens), or (heads, rows) for fused_attention), the threads, the
/// shape, stack.rs's QKV and output row strides plus `pad`, the cache, tokens per row
/// (fused_attention), eps, RoPE theta, whether `xb` is written, and the tokens.
struct Case<'a> {
    d: &'a StackDims,
    qk: &'a str,
    attn: &'a str,
    cache_rows: usize,
    tpr: usize,
    pad: usize,
    xb: bool,
    tokens: &'a str,
}

impl Case<'_> {
    fn args(&self) -> Vec<String> {
        let d = self.d;
        let (qd, kvd) = (d.q_dim(), d.kv_dim());
        let n = token_count(self.tokens);
        let fused = self.qk == "-";
        let (qk_grid, grid_y) = if fused {
            assert!(
                self.tpr >= 1 && n.is_multiple_of(self.tpr),
                "whole rows of tpr tokens"
            );
            (0, n / self.tpr)
        } else {
            (n, n)
        };
        let mut args = vec![
            self.qk.to_string(),
            qk_grid.to_string(),
            self.attn.to_string(),
        ];
        let fields = [
            d.heads,
            grid_y,
            THREADS,
            d.heads,
            d.kv_heads,
            d.head_dim,
            qd + 2 * kvd + self.pad,
            qd + self.pad,
            max_positions(),
            self.cache_rows,
            self.tpr,
        ];
        args.extend(fields.map(|v| v.to_string()));
        args.extend([
            d.rms_eps.to_string(),
            d.rope_theta.to_string(),
            usize::from(self.xb).to_string(),
            self.tokens.to_string(),
        ]);
        args
    }
}

/// The split attention of a prefill (stack.rs `Attention::Split`) on its two launches:
/// `qk_norm_rope_kv` (grid (tokens), 128 threads) normalises and rotates every token's q in
/// place and stores its k and v at (slot, pos), then `decode_attention` (grid (q heads,
/// tokens), 128 threads, window 0) attends each token over positions 0..pos of its slot;
/// `_f32` twins over f32 caches, and the default `row_attention_split` after the same first
/// launch. The tokens are runs of consecutive positions after a cached prefix, as a prefill
/// after a prefix-cache hit has them, so every token must see its run's earlier tokens and
/// none of its later ones (all written by the first launch): for the 1.7B's talker (16 heads
/// of 128 over 8 kv heads, production strides, the talker's 2048 positions) a run after a
/// prefix of 37, a prefill from position 0 merged with a run across attend's 256-position
/// tile and a single step and a padding token, runs at the cache's last positions, f32
/// caches, some writing the O projection's split bf16 rows (`xb`); the demo's talker (4
/// heads of 16 over 2) with padded row strides.
#[test]
fn prefill_split_attention_matches_the_reference() {
    let (talker, demo) = (talker_dims("random:1.7b"), talker_dims("demo"));
    let split = |d, attn: &'static str, xb, pad, tokens| Case {
        d,
        // stack.rs: qk_norm_rope_kv over the cache type the attention kernel reads
        qk: if attn.ends_with("_f32") {
            "qk_norm_rope_kv_f32"
        } else {
            "qk_norm_rope_kv"
        },
        attn,
        cache_rows: 4,
        tpr: 0,
        pad,
        xb,
        tokens,
    };
    let (da, da_f32) = ("decode_attention", "decode_attention_f32");
    let (rs, rs_f32) = ("row_attention_split", "row_attention_split_f32");
    let cases = [
        split(&talker, da, true, 0, "1:37-52"),
        split(&talker, da, false, 0, "0:0-5,-1:0,2:250-262,3:900"),
        split(&talker, da_f32, true, 0, "3:510-515,1:0-2,-1:7"),
        split(&talker, da_f32, false, 0, "2:2040-2047"),
        split(&talker, rs, true, 0, "1:60-70,-1:0,0:5-9"),
        split(&talker, rs_f32, false, 0, "2:127-131,0:3"),
        split(&demo, da_f32, true, 8, "0:3-9,-1:0,1:511-514"),
        split(&demo, da, false, 8, "3:0-4"),
    ];
    let args: Vec<String> = cases.iter().flat_map(Case::args).collect();
    run_emulated(
        "prefill_split_attention_matches_the_reference",
        "attention_prefill.cpp",
        &["attention.cu", "attention_row.cu"],
        &args,
    );
}

/// `fused_attention` (bf16 cache) and `fused_attention_f32`, the talker step's attention over
/// its long cache when stack.rs does not take `row_attention`: rows of `tpr` (1..=4) new
/// tokens at consecutive positions, whose k and v the kernel stores and attends over with
/// the cached positions before them (grid (q heads, rows), 128 threads). For the 1.7B's
/// talker: a step of one token per row with more rows than `row_attention_rows` (33 slots at
/// spread positions, the cache's last position among them, and a padding row), and rows of
/// 2, 3 and 4 tokens across attend's 256-position tile, from position 0 and at the cache's
/// end, with padding rows, f32 caches and split bf16 rows (`xb`).
#[test]
fn fused_long_attention_matches_the_reference() {
    let talker = talker_dims("random:1.7b");
    // stack.rs takes row_attention for steps of one token per row and at most this many
    let max_rows = tts_cuda::CudaOptions::default().row_attention_rows;
    // ... and the short kernels for caches of at most 16 positions (the code predictor's)
    assert!(
        max_positions() > 16,
        "the talker's cache is not a short one"
    );
    let fused = |attn, cache_rows, tpr, xb, tokens| Case {
        d: &talker,
        qk: "-",
        attn,
        cache_rows,
        tpr,
        pad: 0,
        xb,
        tokens,
    };
    // one row per slot 0..=max_rows at spread positions (the last at the cache's end), and a
    // padding row
    let last = max_positions() - 1;
    let wide_step: String = (0..=max_rows)
        .map(|s| {
            let pos = if s == max_rows { last } else { (s * 97) % 700 };
            format!("{s}:{pos},")
        })
        .chain(std::iter::once("-1:0".to_string()))
        .collect();
    assert!(token_count(&wide_step) > max_rows + 1);
    let (fa, fa_f32) = ("fused_attention", "fused_attention_f32");
    let cases = [
        fused(fa, max_rows + 1, 1, true, wide_step.as_str()),
        fused(fa_f32, max_rows + 1, 1, false, wide_step.as_str()),
        fused(fa, 4, 2, true, "0:255-256,1:0-1,-1:0-1,3:1000-1001"),
        fused(fa_f32, 4, 3, false, "2:254-256,0:7-9"),
        fused(fa, 4, 4, false, "1:2044-2047,-1:0-3,3:0-3"),
        fused(fa_f32, 4, 4, true, "0:300-303,2:63-66"),
    ];
    let args: Vec<String> = cases.iter().flat_map(Case::args).collect();
    run_emulated(
        "fused_long_attention_matches_the_reference",
        "attention_prefill.cpp",
        // attention_row.cu: the driver also names row_attention_split
        &["attention.cu", "attention_row.cu"],
        &args,
    );
}
