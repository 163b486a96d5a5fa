//! One decoder stack on the GPU (talker or code predictor), as a sequence of launches:
//! per layer QKV GEMV (RMSNorm fused) -> QK-norm/RoPE/KV write + attention -> O GEMV
//! (+residual) -> gate/up GEMV (RMSNorm + SwiGLU fused) -> down GEMV (+residual).
//! Pure enqueueing: no allocation and no host sync, so it can be graph-captured.

use crate::device::{Arg, Gpu};
use crate::error::CudaError;
use crate::linear::{linear, linear_then, Act, NextLinear, Rows};
use crate::weights::DevStack;
use crate::workspace::Workspace;

/// Most cached positions `fused_attention_short` holds in shared memory (`FA_SPOS` in
/// attention.cu).
const SHORT_CACHE_POSITIONS: usize = 16;

/// Where a stack's tokens live and which cache rows they use.
#[derive(Debug, Clone, Copy)]
pub struct Tokens {
    /// Residual stream `[n][hidden]` (updated in place).
    pub x: u64,
    pub n: usize,
    /// `[n]` cache row (slot or batch row) of each token, -1 for padding.
    pub slots: u64,
    /// `[n]` position of each token.
    pub positions: u64,
}

/// A stack's KV cache: bf16 `[layer][rows][max_pos][kv_dim]`.
#[derive(Debug, Clone, Copy)]
pub struct Kv {
    pub k: u64,
    pub v: u64,
    pub rows: usize,
    pub max_pos: usize,
}

/// How attention runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attention {
    /// QK-norm/RoPE/KV write, then attention over the cache (`decode_attention`, or
    /// `row_attention_split`): any tokens, including many of one slot (prefill).
    Split,
    /// One fused kernel (`fused_attention`; `row_attention` for small talker steps) for
    /// rows of `tokens_per_row` (1..=4) new consecutive tokens whose earlier positions are
    /// cached: decoding, the code predictor.
    Fused { tokens_per_row: usize },
}

/// Runs every layer of `s` over `tok` (final norm not applied). With `qkv_given` the
/// first layer's QKV rows are already in `ws.qkv` (the code predictor's table, written by
/// its sampler) and its projection is skipped. `then`: the linear layer that reads the
/// residual rows `tok.x` next, if the caller's next call is one (`linear_then`).
pub fn run_layers(
    gpu: &Gpu,
    s: &DevStack,
    ws: &Workspace,
    tok: Tokens,
    kv: Kv,
    (mode, qkv_given): (Attention, bool),
    then: Option<NextLinear>,
) -> Result<(), CudaError> {
    let d = &s.dims;
    let (h, qd, kvd) = (d.hidden, d.q_dim(), d.kv_dim());
    let ldq = qd + 2 * kvd;
    let layer_bytes = (kv.rows * kv.max_pos * kvd * ws.kv_elem) as u64;
    let f32_kv = ws.kv_elem == 4;
    let by_group = short_attention_by_group(gpu, ws, s, tok, kv, mode)?;
    for (l, layer) in s.layers.iter().enumerate() {
        let (kc, vc) = (kv.k + l as u64 * layer_bytes, kv.v + l as u64 * layer_bytes);
        let x = Rows {
            ptr: tok.x,
            ld: h,
            count: tok.n,
        };
        if !(l == 0 && qkv_given) {
            linear(
                gpu,
                &layer.qkv,
                x,
                Some((layer.input_norm.ptr, d.rms_eps)),
                Act::None,
                None,
                ws.qkv.ptr,
                ldq,
                &ws.scratch,
            )?;
        }
        // The arguments qk_norm_rope_kv and fused_attention share, in their order: which
        // cache rows and positions, the q/k norms and RoPE, the shape, this layer's cache.
        let norm_rope_kv = [
            Arg::P(tok.slots),
            Arg::P(tok.positions),
            Arg::P(layer.q_norm.ptr),
            Arg::P(layer.k_norm.ptr),
            Arg::F(d.rms_eps),
            Arg::P(s.inv_freq.ptr),
            Arg::I(d.heads as i32),
            Arg::I(d.kv_heads as i32),
            Arg::I(d.head_dim as i32),
            Arg::P(kc),
            Arg::P(vc),
            Arg::I(kv.max_pos as i32),
        ];
        // the O projection's input, which the attention kernels may also write as its split
        // bf16 rows (`GemmScratch::split_target`)
        let a = Rows {
            ptr: ws.attn.ptr,
            ld: qd,
            count: tok.n,
        };
        let whole_rows = match mode {
            Attention::Fused { tokens_per_row } => tok.n.is_multiple_of(tokens_per_row),
            Attention::Split => true,
        };
        let xb = ws
            .scratch
            .split_target(gpu, a, layer.o.n, qd)
            .filter(|_| whole_rows);
        let split_out = [Arg::P(xb.unwrap_or(0)), Arg::I(qd as i32)];
        match mode {
            Attention::Split => {
                gpu.launch(
                    if f32_kv {
                        "qk_norm_rope_kv_f32"
                    } else {
                        "qk_norm_rope_kv"
                    },
                    (tok.n as u32, 1, 1),
                    128,
                    &[
                        &[Arg::P(ws.qkv.ptr), Arg::I(ldq as i32), Arg::I(tok.n as i32)],
                        &norm_rope_kv[..],
                    ]
                    .concat(),
                )?;
                let by_row = ws.scratch.paths.row_attention_split && row_attention_fits(d.head_dim);
                gpu.launch(
                    match (by_row, f32_kv) {
                        (true, true) => "row_attention_split_f32",
                        (true, false) => "row_attention_split",
                        (false, true) => "decode_attention_f32",
                        (false, false) => "decode_attention",
                    },
                    (d.heads as u32, tok.n as u32, 1),
                    128,
                    &[
                        Arg::P(ws.qkv.ptr),
                        Arg::I(ldq as i32),
                        Arg::I(tok.n as i32),
                        Arg::P(tok.slots),
                        Arg::P(tok.positions),
                        Arg::P(kc),
                        Arg::P(vc),
                        Arg::I(kv.max_pos as i32),
                        Arg::I(d.heads as i32),
                        Arg::I(d.kv_heads as i32),
                        Arg::I(d.head_dim as i32),
                        Arg::I(0),
                        Arg::P(ws.attn.ptr),
                        Arg::I(qd as i32),
                        split_out[0],
                        split_out[1],
                    ],
                )?;
            }
            Attention::Fused { tokens_per_row } => {
                let rows = tok.n / tokens_per_row;
                // a cache short enough to sit in shared memory (the code predictor's)
                let short = kv.max_pos <= SHORT_CACHE_POSITIONS;
                let by_row = !short
                    && tokens_per_row == 1
                    && rows <= ws.scratch.paths.row_attention_rows
                    && row_attention_fits(d.head_dim);
                gpu.launch(
                    match (short, by_group, by_row, f32_kv) {
                        (true, true, _, true) => "fused_attention_short_group_f32",
                        (true, true, _, false) => "fused_attention_short_group",
                        (true, false, _, true) => "fused_attention_short_f32",
                        (true, false, _, false) => "fused_attention_short",
                        (false, _, true, true) => "row_attention_f32",
                        (false, _, true, false) => "row_attention",
                        (false, _, false, true) => "fused_attention_f32",
                        (false, _, false, false) => "fused_attention",
                    },
                    (
                        if by_group { d.kv_heads } else { d.heads } as u32,
                        rows as u32,
                        1,
                    ),
                    128,
                    &[
                        &[
                            Arg::P(ws.qkv.ptr),
                            Arg::I(ldq as i32),
                            Arg::I(rows as i32),
                            Arg::I(tokens_per_row as i32),
                        ],
                        &norm_rope_kv[..],
                        &[Arg::P(ws.attn.ptr), Arg::I(qd as i32)],
                        &split_out[..],
                    ]
                    .concat(),
                )?;
            }
        }
        if xb.is_some() {
            ws.scratch.split_written(a, qd);
        }
        // Each of the next three calls is told which layer reads its output next, so a
        // cuBLAS epilogue or a tile_wg.cu call can write that layer's split input rows
        // (`linear_then`).
        let post_norm = Some((layer.post_norm.ptr, d.rms_eps));
        linear_then(
            gpu,
            &layer.o,
            a,
            None,
            Act::None,
            Some((tok.x, h)),
            tok.x,
            h,
            &ws.scratch,
            Some(NextLinear {
                n: layer.gate_up.n,
                norm: post_norm,
            }),
        )?;
        linear_then(
            gpu,
            &layer.gate_up,
            x,
            post_norm,
            Act::SwigluPairs,
            None,
            ws.gu.ptr,
            d.intermediate,
            &ws.scratch,
            Some(NextLinear {
                n: layer.down.n,
                norm: None,
            }),
        )?;
        let g = Rows {
            ptr: ws.gu.ptr,
            ld: d.intermediate,
            count: tok.n,
        };
        let next_qkv = match s.layers.get(l + 1) {
            Some(nl) => Some(NextLinear {
                n: nl.qkv.n,
                norm: Some((nl.input_norm.ptr, d.rms_eps)),
            }),
            None => then,
        };
        linear_then(
            gpu,
            &layer.down,
            g,
            None,
            Act::None,
            Some((tok.x, h)),
            tok.x,
            h,
            &ws.scratch,
            next_qkv,
        )?;
    }
    Ok(())
}

/// Whether `attention_row.cu` takes heads of `head_dim`: 8 dims per lane, a power-of-two
/// group of at most 16 lanes per position.
fn row_attention_fits(head_dim: usize) -> bool {
    head_dim.is_multiple_of(8) && (head_dim / 8).is_power_of_two() && head_dim <= 128
}

/// `out[r] = final_norm(x[r])` for `n` rows of width `h` (ld `ldx`).
pub fn final_norm(
    gpu: &Gpu,
    s: &DevStack,
    x: u64,
    ldx: usize,
    n: usize,
    out: u64,
) -> Result<(), CudaError> {
    gpu.launch(
        "rms_norm_rows",
        (n as u32, 1, 1),
        256,
        &[
            Arg::P(x),
            Arg::I(ldx as i32),
            Arg::I(s.dims.hidden as i32),
            Arg::P(s.norm.ptr),
            Arg::F(s.dims.rms_eps),
            Arg::P(out),
            Arg::I(s.dims.hidden as i32),
            Arg::I(n as i32),
        ],
    )
}

/// Whether the short-cache attention (`fused_attention_short*`) of `tok` takes one block
/// per (kv-head group, row), each doing all the group's q heads in turn, instead of one
/// per (q head, row): as `LinearPaths::group_attention` says, else when the per-head grid
/// is more than the device holds at once (H200, 1.7B's code predictor: the 96- and 128-row
/// calls measured, not those of 64 rows or fewer), where half the blocks, each loading
/// its cached rows once, finish sooner.
fn short_attention_by_group(
    gpu: &Gpu,
    ws: &Workspace,
    s: &DevStack,
    tok: Tokens,
    kv: Kv,
    mode: Attention,
) -> Result<bool, CudaError> {
    let d = &s.dims;
    let Attention::Fused { tokens_per_row } = mode else {
        return Ok(false);
    };
    if kv.max_pos > SHORT_CACHE_POSITIONS || d.heads == d.kv_heads {
        return Ok(false);
    }
    if let Some(by_group) = ws.scratch.paths.group_attention {
        return Ok(by_group);
    }
    let name = if ws.kv_elem == 4 {
        "fused_attention_short_f32"
    } else {
        "fused_attention_short"
    };
    let at_once = gpu.blocks_per_sm(name, 128, 0)? as usize * gpu.sm_count as usize;
    Ok(tok.n / tokens_per_row * d.heads > at_once)
}

#[cfg(test)]
mod tests {
    use super::row_attention_fits;

    /// `attention_row.cu` takes the release heads (128) and the demo's (16), not dims its
    /// lane groups cannot split.
    #[test]
    fn row_attention_takes_power_of_two_lane_groups() {
        for hd in [8, 16, 32, 64, 128] {
            assert!(row_attention_fits(hd), "{hd}");
        }
        for hd in [0, 4, 24, 96, 120, 256] {
            assert!(!row_attention_fits(hd), "{hd}");
        }
    }
}
