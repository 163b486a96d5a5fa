//! Which kernel a linear layer runs on: a static rule from the H200 kernel table, or,
//! when asked (`CudaOptions::autotune`), measured at start-up by [`autotune`], which times
//! every path that can take each of the model's layer shapes at 4, 8, 16, 32 and 64 rows
//! on the device at hand (and checks its result against cuBLAS before trusting it).

use std::collections::HashMap;

use crate::device::{Gpu, Graph};
use crate::error::CudaError;
use crate::linear::{linear, Act, GemmScratch, Linear, Rows};

/// Most rows one GEMV launch can take (`gemv_m8`).
pub const GEMV_MAX_ROWS: usize = 8;

/// Most rows the tensor-core kernels take per call (more: cuBLAS).
pub const MMA_MAX_ROWS: usize = 64;

/// Graph replays per timed path in [`autotune`].
const REPLAYS: usize = 3;

/// The kernels a linear layer can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinearPath {
    /// `gemv.cu`: one launch, up to [`GEMV_MAX_ROWS`] rows.
    Gemv,
    /// `to_bf16_rows` + `mma.cu`: N % 16 == 0, K % 32 == 0.
    TensorCores,
    /// `to_bf16_rows` + cuBLAS + `linear_epilogue`: any shape.
    Cublas,
    /// `mma_cluster.cu`: one launch (norm and epilogue fused), up to [`MMA_MAX_ROWS`]
    /// rows, shapes [`cluster_split`] takes; sm_90 only.
    Cluster,
    /// `to_bf16_rows` + `tile.cu` (weights through a shared-memory pipeline, K split over
    /// the blocks of a cluster): up to [`MMA_MAX_ROWS`] rows, shapes [`tile_split`] takes;
    /// sm_90 only.
    Tile,
    /// `wide.cu`: one launch (norm and epilogue fused, rows staged once per block), up to
    /// [`MMA_MAX_ROWS`] rows, shapes [`wide_split`] takes; a row's result does not depend
    /// on the batch.
    Wide,
}

/// Which kernel runs the GEMV of an FP8 layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Gemv {
    /// The bf16 copy of the layer's values, on the bf16 GEMV.
    Bf16,
    /// The E4M3 codes on `gemv.cu`'s `gemv8_*` (each code widened to f32).
    Simt,
    /// The E4M3 codes on `gemv8_mma.cu` (each code an f16, on tensor cores).
    Mma,
}

/// The kernel for a GEMV of `m` rows over an FP8 layer of `n` × `k` (`norm`: the kernel
/// norms its own input; `mma`: `gemv8_mma.cu` is on and takes the shape). The codes pay on
/// matrices with both sides >= 2048 (every talker matrix of the 1.7B) at one and two rows.
/// From the H100 kernel table (`bench/results/2026-12-05-h100-fp8-gemv`, µs, talker gate/up
/// 12288 × 2048): at one row without a norm on `gemv8_*` (13.4 against the bf16 GEMV's
/// 18.2), with a norm and at two rows on tensor cores (16.1 normed against 20.3 bf16 and
/// 20.4 on `gemv8_*`; 16.7 at two rows against 24.6 and 20.5), whose split rows cost a
/// fixed prologue but no per-code conversions. On the talker step with every decoder
/// matrix in FP8 (`bench/results/2026-12-05-h100-fp8-prologue`, codes forced, so the O
/// projection's 4 Mi weights too, which the earlier bound of 8 Mi kept on the bf16 copy):
/// 1.123 / 1.379 ms at one / two rows against 1.356 / 1.594 in bf16; at two rows the whole
/// step then stays on the GEMV path, with no `tile_wg.cu` layer converting its input rows.
/// The code predictor's matrices (one side 1024) keep the bf16 copy: forced onto their codes
/// its call took 1.871 / 2.438 ms against 1.688 / 1.831, off the staged GEMV.
pub fn fp8_gemv(m: usize, n: usize, k: usize, norm: bool, mma: bool) -> Fp8Gemv {
    if m > FP8_GEMV_MAX_ROWS || n.min(k) < FP8_CODES_MIN_SIDE {
        Fp8Gemv::Bf16
    } else {
        fp8_codes_kernel(m, norm, mma).unwrap_or(Fp8Gemv::Bf16)
    }
}

/// The shorter side of the smallest FP8 matrix whose codes [`fp8_gemv`] streams.
pub const FP8_CODES_MIN_SIDE: usize = 2048;

/// The codes' kernel for `m` rows (`fp8_gemv`'s `norm`, `mma`): tensor cores with a norm or
/// at two rows, else `gemv8_*`; None where neither pays (a norm without tensor cores).
fn fp8_codes_kernel(m: usize, norm: bool, mma: bool) -> Option<Fp8Gemv> {
    if mma && (norm || m == 2) {
        Some(Fp8Gemv::Mma)
    } else if norm {
        None
    } else {
        Some(Fp8Gemv::Simt)
    }
}

/// Most rows an FP8 GEMV launch takes (`gemv8_m1`, `gemv8_m2`).
pub const FP8_GEMV_MAX_ROWS: usize = 2;

/// Widest K slice one block of `mma_cluster.cu` takes (its weights live in registers).
pub const CLUSTER_MAX_SLICE: usize = 256;

/// Blocks per cluster of `mma_cluster.cu` for an `n × k` weight: each block takes a K
/// slice of 128..=[`CLUSTER_MAX_SLICE`] (a multiple of 32), and the grid of (n / 128) clusters should reach
/// about one block per multiprocessor (128): the fewest blocks per cluster that do (on
/// the H200, aiming at two per multiprocessor with thinner slices measured 10-40 % slower).
/// `None`: the kernel cannot take the shape.
pub fn cluster_split(n: usize, k: usize) -> Option<usize> {
    if !n.is_multiple_of(128) {
        return None;
    }
    let valid: Vec<usize> = [4usize, 8, 16]
        .into_iter()
        .filter(|&cs| k.is_multiple_of(cs * 32) && (128..=CLUSTER_MAX_SLICE).contains(&(k / cs)))
        .collect();
    valid
        .iter()
        .copied()
        .find(|&cs| n / 128 * cs >= 128)
        .or(valid.last().copied())
}

/// Outputs one block of `tile.cu` owns, and the width of its K tiles.
pub const TILE_N: usize = 128;
pub const TILE_K: usize = 64;

/// Blocks of `tile.cu` to aim at: about one per multiprocessor of the H200.
const TILE_BLOCKS: usize = 128;

/// K splits of `tile.cu` (blocks per cluster) for an `n × k` weight: the fewest of 1, 2,
/// 4, 8 that give at least `TILE_BLOCKS` blocks of [`TILE_N`] outputs with whole
/// [`TILE_K`] tiles, else the most that keep whole tiles. Depends on the shape only, so a
/// row's sums never depend on the batch. `None`: the kernel cannot take the shape.
pub fn tile_split(n: usize, k: usize) -> Option<usize> {
    if n == 0 || !n.is_multiple_of(TILE_N) {
        return None;
    }
    let valid: Vec<usize> = [1usize, 2, 4, 8]
        .into_iter()
        .filter(|&s| k.is_multiple_of(s * TILE_K))
        .collect();
    valid
        .iter()
        .copied()
        .find(|&s| n / TILE_N * s >= TILE_BLOCKS)
        .or(valid.last().copied())
}

/// Outputs of one `wide.cu` block (8 warps of 16 each).
pub const WIDE_N: usize = 128;

/// Blocks of `wide.cu` to aim at: two per multiprocessor of the H200 (132), one wave.
const WIDE_BLOCKS: usize = 192;

/// `wide.cu`'s K slices S for an `n × k` weight. A block owns [`WIDE_N`] outputs and a K
/// slice of `k / S` (the S blocks of an output tile form a cluster): the fewest of 1, 2, 4,
/// 8 slices that give `WIDE_BLOCKS` blocks with slices of at least 128 (a multiple of
/// 32), else the most that keep 128. Depends on the shape only, so a row's sums never
/// depend on the batch. `None`: the kernel cannot take the shape.
pub fn wide_split(n: usize, k: usize) -> Option<usize> {
    if n == 0 || !n.is_multiple_of(WIDE_N) || !k.is_multiple_of(32) {
        return None;
    }
    let tiles = n / WIDE_N;
    let valid: Vec<usize> = [1usize, 2, 4, 8]
        .into_iter()
        .filter(|&s| s == 1 || (k.is_multiple_of(32 * s) && k / s >= 128))
        .collect();
    valid
        .iter()
        .copied()
        .find(|&s| tiles * s >= WIDE_BLOCKS)
        .or(valid.last().copied())
}

/// The rows bucket a measured choice covers (3..=4, 5..=8, 9..=16, 17..=32, 33..=64 rows).
fn rows_bucket(m: usize) -> Option<usize> {
    match m {
        3..=4 => Some(4),
        5..=8 => Some(8),
        9..=16 => Some(16),
        17..=32 => Some(32),
        33..=MMA_MAX_ROWS => Some(64),
        _ => None,
    }
}

/// Which path each linear layer takes: one forced (benchmarks, parity tests), else a
/// measured choice for the shape and rows bucket, else the static rule. A path that
/// cannot take the shape is never returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinearPaths {
    pub force: Option<LinearPath>,
    /// The device runs the cluster kernels ([`LinearPath::Cluster`]), and they are wanted.
    pub cluster: bool,
    /// The device runs `tile.cu` ([`LinearPath::Tile`]), and it is wanted.
    pub tile: bool,
    /// [`LinearPath::Tile`] multiplies with warpgroup MMA (`tile_wg.cu`, sm_90a) instead of
    /// `tile.cu`'s warp MMA: the device has it, and it is wanted.
    pub tile_wg: bool,
    /// The device runs `wide.cu` ([`LinearPath::Wide`]), and it is wanted.
    pub wide: bool,
    /// A cuBLAS epilogue writes the split input rows of the layer that reads its output
    /// next, when that layer reads split rows (`linear::linear_then`).
    pub chain_split: bool,
    /// The attention kernels write the O projection's split input rows when it reads
    /// split rows (`GemmScratch::split_target`).
    pub chain_attention: bool,
    /// A `tile_wg.cu` call writes the split input rows of the layer that reads its output
    /// next, when that layer runs on `tile_wg.cu` too (a norm deferred to its sums).
    pub chain_tile: bool,
    /// A one-row GEMV writes the next one-row GEMV's input with that layer's norm gains
    /// applied and the row's Σ x² partials (`linear::norm_chain`).
    pub chain_gemv: bool,
    /// Whether the code predictor's short-cache attention takes one block per kv-head
    /// group instead of one per q head: always / never (parity tests, benchmarks), else
    /// when the per-head grid exceeds one wave (`stack::short_attention_by_group`).
    pub group_attention: Option<bool>,
    /// Talker steps of at most this many rows attend on `attention_row.cu`
    /// (`CudaOptions::row_attention_rows`; 0: never).
    pub row_attention_rows: usize,
    /// The split attention runs on `attention_row.cu` (`CudaOptions::row_attention_split`).
    pub row_attention_split: bool,
    /// By (n, k, rows bucket), from [`autotune`].
    pub tuned: HashMap<(usize, usize, usize), LinearPath>,
    /// Whether an FP8 layer's GEMV streams its codes: always / never (parity tests,
    /// benchmarks, `CudaOptions::fp8_codes`), else [`fp8_gemv`].
    pub fp8_codes: Option<bool>,
    /// Whether those GEMVs run on tensor cores (`gemv8_mma.cu`) where it takes the shape
    /// (`CudaOptions::fp8_mma`), else on `gemv.cu`'s `gemv8_*`.
    pub fp8_mma: bool,
}

impl LinearPaths {
    /// Every layer on `path` where it fits (benchmarks, parity tests); `cluster`, `tile`:
    /// the device runs the cluster kernels, `tile.cu`.
    pub fn forced(path: LinearPath, cluster: bool, tile: bool) -> Self {
        Self {
            force: Some(path),
            cluster,
            tile,
            ..Default::default()
        }
    }

    /// The same, with `wide.cu` there (`Gpu::wides`) or not.
    pub fn with_wide(self, wide: bool) -> Self {
        Self { wide, ..self }
    }

    /// The kernel for the GEMV of `m` rows over an FP8 `n × k` layer (`norm`: the kernel
    /// norms its own input): [`fp8_gemv`], or the codes always / never (`fp8_codes`).
    pub fn fp8_kernel(&self, m: usize, n: usize, k: usize, norm: bool) -> Fp8Gemv {
        let mma = self.fp8_mma && crate::linear::gemv8_mma_fits(k, m);
        match self.fp8_codes {
            _ if m > FP8_GEMV_MAX_ROWS => Fp8Gemv::Bf16,
            None => fp8_gemv(m, n, k, norm, mma),
            Some(false) => Fp8Gemv::Bf16,
            Some(true) => fp8_codes_kernel(m, norm, mma).unwrap_or(Fp8Gemv::Simt),
        }
    }

    /// Whether `path` can run `m` rows of an `n × k` weight here.
    pub fn fits(&self, path: LinearPath, m: usize, n: usize, k: usize) -> bool {
        match path {
            LinearPath::Gemv => m <= GEMV_MAX_ROWS,
            LinearPath::TensorCores => {
                n.is_multiple_of(16) && k.is_multiple_of(32) && m <= MMA_MAX_ROWS
            }
            LinearPath::Cublas => true,
            LinearPath::Cluster => {
                self.cluster && cluster_split(n, k).is_some() && m <= MMA_MAX_ROWS
            }
            LinearPath::Tile => self.tile && tile_split(n, k).is_some() && m <= MMA_MAX_ROWS,
            LinearPath::Wide => self.wide && wide_split(n, k).is_some() && m <= MMA_MAX_ROWS,
        }
    }

    /// The path for `m` rows of an `n × k` weight. The static rule follows the H200 kernel
    /// table of `bench/results/2026-12-01-h200-cluster/README.md`: the GEMV up to 2 rows;
    /// the cluster kernel where it is there and measured fastest, on the code predictor's
    /// layers (a side of at most 1024): 3..4 rows on the widest (n >= 6144), 5..8 rows on
    /// those of at least 4 Mi weights, 9..16 rows on all but the qkv projection (n = 4096,
    /// where `mma.cu` wins); otherwise the GEMV up to 8 rows, `mma.cu` at 5..16 as before,
    /// cuBLAS beyond.
    pub fn choose(&self, m: usize, n: usize, k: usize) -> LinearPath {
        if let Some(p) = self.force.filter(|&p| self.fits(p, m, n, k)) {
            return p;
        }
        let tuned = rows_bucket(m).and_then(|b| self.tuned.get(&(n, k, b)).copied());
        if let Some(p) = tuned.filter(|&p| self.fits(p, m, n, k)) {
            return p;
        }
        // wide.cu from 17 rows, where it is there
        if (17..=MMA_MAX_ROWS).contains(&m) && self.fits(LinearPath::Wide, m, n, k) {
            return LinearPath::Wide;
        }
        // tile_wg.cu where the H200's start-up timings have it fastest: every shape it takes
        // at 9..=32 rows (e.g. 16 rows of 2048 x 2048: 7.3 µs against the cluster kernel's
        // 8.4; 32 rows of 2048 x 6144: 16.9 against cuBLAS's 17.2), and from 5 rows on the
        // matrices of at least 8 Mi weights (8 rows of 4096 x 2048: 8.2 against mma.cu's
        // 9.9); at 33..=64 rows cuBLAS stays ahead (`bench/results/2026-12-04-h200-tile-wg`;
        // with the chain too: talker step of 64 rows 2.516 -> 3.985 ms). Since its epilogue
        // writes the next layer's split rows (`linear::tile`), also every talker matrix
        // (both sides >= 2048) from 2 rows: the talker step of 2 / 4 / 8 rows measured
        // 1.681 / 1.669 / 1.644 -> 1.471 / 1.468 / 1.502 ms (H200, `bench/results/
        // 2026-12-04-h200-tile-chain`). The code predictor's matrices keep their paths at
        // 2..=8 rows (it runs `mma_staged.cu` there, faster than tile_wg.cu in the stage).
        let tile_wg = match m {
            2..=8 => n.min(k) >= 2048 || n * k >= 8 << 20,
            9..=32 => true,
            _ => false,
        };
        if tile_wg && self.tile_wg && self.fits(LinearPath::Tile, m, n, k) {
            return LinearPath::Tile;
        }
        // In the talker step (every side >= 2048) the cluster kernel measured slower inside
        // the stage than alone (batch 4: +9 %, batch 16: +12 %): code-predictor shapes only.
        let cluster = n.min(k) <= 1024
            && match m {
                3..=4 => n >= 6144,
                5..=8 => n * k >= 4 << 20,
                9..=16 => n != 4096,
                _ => false,
            };
        if cluster && self.fits(LinearPath::Cluster, m, n, k) {
            return LinearPath::Cluster;
        }
        // tile.cu where the H200 kernel table has it fastest: the talker's gate_up (at
        // least 16 Mi weights) at 3..=16 rows (start-up timings on the H200: 18.5 µs
        // against the GEMV's 22.8 at 4 rows, 19.3 against mma.cu's 30.1 at 8, 21.0 against
        // cuBLAS's 30.0 at 16; `bench/results/2026-12-03-h200-talker-tile`); at more rows,
        // and on every smaller matrix, cuBLAS or the cluster kernel stay ahead
        if (3..=16).contains(&m) && n * k >= 16 << 20 && self.fits(LinearPath::Tile, m, n, k) {
            return LinearPath::Tile;
        }
        let tc_ok = self.fits(LinearPath::TensorCores, m, n, k);
        match m {
            0..=4 => LinearPath::Gemv,
            5..=8 if tc_ok && n >= 3072 => LinearPath::TensorCores,
            5..=8 => LinearPath::Gemv,
            9..=16 if tc_ok && n * k <= 8 << 20 => LinearPath::TensorCores,
            _ => LinearPath::Cublas,
        }
    }
}

/// One measured choice of [`autotune`].
#[derive(Debug, Clone, PartialEq)]
pub struct TunedShape {
    pub n: usize,
    pub k: usize,
    pub rows: usize,
    /// Device µs per call of each path that ran and agreed with cuBLAS.
    pub timings: Vec<(LinearPath, f64)>,
    pub chosen: LinearPath,
}

/// Deterministic inputs in [-1, 1).
fn test_rows(len: usize) -> Vec<f32> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Times each path that can take each layer's shape at 4, 8, 16, 32 and 64 rows (a CUDA
/// graph of `iters` calls, replayed and timed with events) and stores the fastest in
/// `scratch.paths.tuned`. A path whose result differs from cuBLAS by more than 1e-3
/// (relative to the largest output) is not used.
pub fn autotune(
    gpu: &Gpu,
    layers: &[&Linear],
    scratch: &mut GemmScratch,
    iters: usize,
) -> Result<Vec<TunedShape>, CudaError> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    let saved = scratch.paths.force.take();
    for l in layers {
        if seen.contains(&(l.n, l.k)) {
            continue;
        }
        seen.push((l.n, l.k));
        for rows in [4usize, 8, 16, 32, 64] {
            if 2 * rows * l.k > scratch.xb.len || 2 * rows * l.n > scratch.acc.len {
                continue;
            }
            let x = gpu.upload(&test_rows(rows * l.k))?;
            let y = gpu.zeros::<f32>(rows * l.n)?;
            let input = Rows {
                ptr: x.ptr,
                ld: l.k,
                count: rows,
            };
            let run = |scratch: &GemmScratch| {
                linear(gpu, l, input, None, Act::None, None, y.ptr, l.n, scratch)
            };
            scratch.paths.force = Some(LinearPath::Cublas);
            run(scratch)?;
            let reference = gpu.read(&y, rows * l.n)?;
            let scale = reference
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()))
                .max(1e-20);
            let mut timings = Vec::new();
            for path in [
                LinearPath::Cublas,
                LinearPath::TensorCores,
                LinearPath::Cluster,
                LinearPath::Tile,
                LinearPath::Wide,
                LinearPath::Gemv,
            ] {
                if !scratch.paths.fits(path, rows, l.n, l.k) {
                    continue;
                }
                scratch.paths.force = Some(path);
                run(scratch)?;
                let got = gpu.read(&y, rows * l.n)?;
                let err = got
                    .iter()
                    .zip(&reference)
                    .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
                    / scale;
                if err.is_nan() || err > 1e-3 {
                    tracing::warn!(
                        ?path,
                        n = l.n,
                        k = l.k,
                        rows,
                        err,
                        "path disagrees with cuBLAS; not used"
                    );
                    continue;
                }
                // Timed as the backend runs it: inside a CUDA graph (eager timing would
                // charge the CPU's launch time to the paths with more launches).
                let graph =
                    Graph::capture(gpu, |_| (0..iters.max(1)).try_for_each(|_| run(scratch)))?;
                graph.launch()?;
                let ms = gpu.time_ms(|| (0..REPLAYS).try_for_each(|_| graph.launch()))?;
                let us = ms * 1e3 / (REPLAYS * iters.max(1)) as f64;
                timings.push((path, us));
            }
            let chosen = timings
                .iter()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(LinearPath::Cublas, |t| t.0);
            scratch.paths.tuned.insert((l.n, l.k, rows), chosen);
            out.push(TunedShape {
                n: l.n,
                k: l.k,
                rows,
                timings,
                chosen,
            });
        }
    }
    scratch.paths.force = saved;
    Ok(out)
}

#[cfg(test)]
mod tests;
