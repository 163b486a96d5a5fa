//! `tile.cu` / `tile_wg.cu` launches: batched linear layers over split bf16 rows, K split
//! over a thread-block cluster. A `tile_wg.cu` call can also chain to the layer that reads
//! its output next (`CudaOptions::chain_tile`): its epilogue writes that layer's split
//! rows into the other split-row buffer, and when that layer has a norm, the rows are g ⊙ y
//! with each row's Σ y² by 128-output tile beside them; that layer's kernel then applies
//! 1 / rms to its sums (as `mma_staged.cu` does) instead of a `to_bf16_rows` launch
//! normalising its input first.

use super::{path_for, split_rows_args, staged_mma_call, GemmScratch, Linear, NextLinear};
use super::{Act, RowCall, Rows, SplitRows};
use crate::device::{Arg, Gpu};
use crate::error::CudaError;
use crate::routing::{tile_split, LinearPath, TILE_K, TILE_N};

/// Bytes of dynamic shared memory a `tile.cu` block of `mt` row tiles of 8 takes: its
/// pipeline of 3 stages.
pub const fn tile_smem(mt: usize) -> usize {
    tile_pipeline(3, mt)
}

/// Bytes of a pipeline of `stages` stages of `mt` row tiles of 8: each stage a 128 × 64
/// weight tile and 16 `mt` rows of 64 (hi and lo), bf16.
pub const fn tile_pipeline(stages: usize, mt: usize) -> usize {
    stages * (TILE_N + 16 * mt) * TILE_K * 2
}

/// `tile.cu`'s entry points by rows: (name, row tiles of 8).
pub const TILE_KERNELS: [(&str, usize); 3] = [
    ("tile_linear_t2", 2),
    ("tile_linear_t4", 4),
    ("tile_linear_t8", 8),
];

/// `tile_wg.cu`'s entry points by rows: [`TILE_KERNELS`]' row tiles and 3 (24 rows: a
/// prefill of 17 to 24 tokens, `prefill_plan::token_bucket`).
pub const TILE_WG_KERNELS: [(&str, usize); 4] = [
    ("tile_wg_linear_t2", 2),
    ("tile_wg_linear_t3", 3),
    ("tile_wg_linear_t4", 4),
    ("tile_wg_linear_t8", 8),
];

/// The entry point a call of `m` rows launches: (name, row tiles of 8) of [`TILE_KERNELS`],
/// or with `wg` (`paths.tile_wg`) of [`TILE_WG_KERNELS`]: the fewest row tiles that hold `m`
/// (up to 64).
pub fn tile_kernel(m: usize, wg: bool) -> (&'static str, usize) {
    let entries: &[(&'static str, usize)] = if wg { &TILE_WG_KERNELS } else { &TILE_KERNELS };
    let last = entries[entries.len() - 1];
    entries
        .iter()
        .copied()
        .find(|&(_, mt)| m <= 8 * mt)
        .unwrap_or(last)
}

/// Bytes of dynamic shared memory a `tile_wg.cu` block takes: its pipeline
/// ([`tile_wg_stages`] stages of `tile.cu`'s size), up to 1024 bytes to start its tiles on
/// a 1024-byte boundary, and its inbox of partial sums (`[sender][local row][129]` f32;
/// senders × local rows <= 8 `mt` + 14 for up to 8 senders).
pub const fn tile_wg_smem(mt: usize) -> usize {
    tile_pipeline(tile_wg_stages(mt), mt) + 1024 + tile_wg_inbox(mt)
}

/// The dynamic shared memory of the entry [`tile_kernel`] picks with the same `wg` for `mt`
/// row tiles.
pub const fn tile_entry_smem(mt: usize, wg: bool) -> usize {
    if wg {
        tile_wg_smem(mt)
    } else {
        tile_smem(mt)
    }
}

/// Bytes of a `tile_wg.cu` block's inbox: senders × local rows <= 8 `mt` + 14 (up to 8
/// senders) rows of 129 f32.
const fn tile_wg_inbox(mt: usize) -> usize {
    (8 * mt + 2 * (TILE_MAX_SPLITS - 1)) * (TILE_N + 1) * 4
}

/// Pipeline stages of a `tile_wg.cu` block (`TILE_WG_STAGES`): 4 for up to 24 rows (two
/// blocks of at most 109 KiB per multiprocessor), else 3.
pub const fn tile_wg_stages(mt: usize) -> usize {
    if mt <= 3 {
        4
    } else {
        3
    }
}

/// Blocks per cluster `tile.cu` and `tile_wg.cu` take at most (`TILE_MAX_SPLITS`).
pub(super) const TILE_MAX_SPLITS: usize = 8;

/// One launch of `tile.cu` (or, with `paths.tile_wg`, `tile_wg.cu`) for up to 64 rows whose
/// split rows `input` names: a cluster of `tile_split` blocks per 128 outputs. With
/// `tile_wg.cu`, the rows may be normless (`input.deferred`), and the call writes `next`'s
/// split rows when [`chain_to`] allows; the scratch then records them for that call.
pub(super) fn tile(
    gpu: &Gpu,
    l: &Linear,
    c: &RowCall,
    scratch: &GemmScratch,
    input: SplitRows,
    next: Option<NextLinear>,
) -> Result<(), CudaError> {
    let m = c.x.count;
    let splits = tile_split(l.n, l.k)
        .ok_or_else(|| CudaError::Shape(format!("tile linear cannot take {}x{}", l.n, l.k)))?;
    let wg = scratch.paths.tile_wg;
    let (name, mt) = tile_kernel(m, wg);
    let mut args = split_rows_args(l, scratch.split_buf(input.buf), c).to_vec();
    let out = wg
        .then(|| chain_to(gpu, l, c, scratch, input, next))
        .flatten();
    if wg {
        let ss_in = if input.deferred {
            scratch.ss_buf(input.buf)
        } else {
            0
        };
        let (xo, xo_g, ss_out) = out.map_or((0, 0, 0), |o| {
            let ss = if o.deferred { scratch.ss_buf(o.buf) } else { 0 };
            (scratch.split_buf(o.buf), o.norm.0, ss)
        });
        args.extend([
            Arg::P(ss_in),
            Arg::F(input.norm.1),
            Arg::P(xo),
            Arg::P(xo_g),
            Arg::P(ss_out),
        ]);
    }
    let grid = (splits as u32, (l.n / TILE_N) as u32, 1);
    let smem = tile_entry_smem(mt, wg) as u32;
    if splits == 1 {
        gpu.launch_with(name, grid, 256, smem, &args)?;
    } else {
        gpu.launch_cluster(name, grid, 256, smem, splits as u32, &args)?;
    }
    scratch.split_ready.set(out);
    Ok(())
}

/// The split rows a `tile_wg.cu` call over `c` writes for `next`, if any: only when
/// `chain_tile` is on and `next` reads them on the tile path too (the same rows, as
/// [`super::linear_then`] will route it), into the split-row buffer this call does not
/// read; with a norm, only from a layer that stores whole rows of 128-output tiles
/// (no SwiGLU pairs), whose Σ y² partials then fit the scratch.
fn chain_to(
    gpu: &Gpu,
    l: &Linear,
    c: &RowCall,
    scratch: &GemmScratch,
    input: SplitRows,
    next: Option<NextLinear>,
) -> Option<SplitRows> {
    let nx = next.filter(|_| scratch.paths.chain_tile)?;
    let m = c.x.count;
    let swiglu = c.act == Act::SwigluPairs;
    let out_k = if swiglu { l.n / 2 } else { l.n };
    let out = Rows {
        ptr: c.y,
        ld: c.ldy,
        count: m,
    };
    let normed = nx.norm.is_some();
    let reads_tile = staged_mma_call(gpu, out, nx.n, out_k, normed).is_none()
        && path_for(&scratch.paths, out, nx.n, out_k) == LinearPath::Tile;
    let fits = 2 * m * out_k <= scratch.xb.len
        && (!normed || (!swiglu && (l.n / TILE_N) * m <= scratch.ss[0].len));
    (reads_tile && fits).then(|| SplitRows {
        buf: 1 - input.buf,
        deferred: normed,
        ..SplitRows::new(out, out_k, nx.norm.unwrap_or((0, 0.0)))
    })
}

#[cfg(test)]
mod tests {
    use super::{tile_pipeline, tile_wg_smem, tile_wg_stages, TILE_MAX_SPLITS, TILE_N};

    /// `tile_wg.cu`'s index arithmetic, mirrored: for every row count a kernel takes and
    /// every cluster size, each row has exactly one finishing rank and local row, the
    /// finishing rank walks exactly its rows, and the inbox (senders × local rows of 129
    /// floats) fits after the pipeline in the shared memory the host asks for; the kernel
    /// for up to 24 rows still fits two blocks on an H200 multiprocessor (228 KiB, 1 KiB
    /// reserved per block), every kernel one (227 KiB at most).
    #[test]
    fn tile_wg_inbox_fits_and_every_row_has_one_finisher() {
        for mt in [2usize, 3, 4, 8] {
            let pipeline = tile_pipeline(tile_wg_stages(mt), mt);
            assert!(tile_wg_smem(mt) <= 227 << 10, "mt {mt}");
            for splits in [1usize, 2, 4, 8] {
                assert!(splits <= TILE_MAX_SPLITS);
                for rows in 1..=8 * mt {
                    let pairs = rows.div_ceil(2);
                    let local_rows = 2 * pairs.div_ceil(splits);
                    let inbox = splits * local_rows * (TILE_N + 1) * 4;
                    assert!(
                        pipeline + 1023 + inbox <= tile_wg_smem(mt),
                        "mt {mt}, {splits} splits, {rows} rows"
                    );
                    // where the senders put row m
                    let mut slots = std::collections::HashSet::new();
                    for m in 0..rows {
                        let (owner, r) = ((m / 2) % splits, 2 * (m / 2 / splits) + m % 2);
                        assert!(r < local_rows, "row {m}");
                        assert!(slots.insert((owner, r)), "row {m} shares its slot");
                        // and what the owner reads back at local row r
                        assert_eq!(2 * (owner + splits * (r / 2)) + r % 2, m);
                    }
                    // each rank walks its local rows (those past `rows` are skipped)
                    let walked: usize = (0..splits)
                        .map(|s| {
                            let mine = if s < pairs {
                                2 * (pairs - s).div_ceil(splits)
                            } else {
                                0
                            };
                            (0..mine)
                                .filter(|&r| 2 * (s + splits * (r / 2)) + r % 2 < rows)
                                .count()
                        })
                        .sum();
                    assert_eq!(walked, rows, "mt {mt}, {splits} splits, {rows} rows");
                }
            }
        }
        // four stages still fit two blocks a multiprocessor, up to 24 rows
        for mt in [2, 3] {
            assert!(2 * (tile_wg_smem(mt) + 1024) <= 228 << 10, "mt {mt}");
        }
    }
}
