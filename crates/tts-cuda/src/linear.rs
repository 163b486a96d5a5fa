//! Linear layers on the GPU: a bf16 weight `[N][K]` applied to f32 rows, with the fused
//! RMSNorm prologue and bias / SiLU / SwiGLU-pair / residual epilogue of `gemv.cu`.
//! An FP8 layer ([`Linear::new_fp8`]) also keeps its E4M3 codes and row scales: the GEMV
//! streams those (half the bytes; on `gemv.cu`'s `gemv8_*` or `gemv8_mma.cu`'s tensor
//! cores) where `routing::fp8_gemv` measured it faster, every other call the bf16 copy of
//! the same (dequantized, bf16-exact) weights.
//! Four paths (`routing` picks one per call): a GEMV launch (up to 8 rows); one launch of
//! `mma_cluster.cu` (up to 64 rows on tensor cores, norm and epilogue fused, sm_90); or the
//! rows converted to bf16 hi + lo parts (`to_bf16_rows`, which also applies the norm) and
//! multiplied on tensor cores by `mma.cu` (one launch, epilogue fused), `tile.cu` /
//! `tile_wg.cu` (`tile`), or by cuBLAS followed by an epilogue kernel. The cuBLAS
//! epilogue and `tile_wg.cu` can also write the next layer's split rows ([`linear_then`]:
//! one `to_bf16_rows` launch fewer).

mod norm_chain;
mod staged;
mod tile;

use std::cell::Cell;

use tts_model::fp8::Fp8Rows;

use crate::device::{Arg, DBuf, Gpu};
use crate::error::CudaError;
pub use crate::routing::{
    cluster_split, tile_split, wide_split, Fp8Gemv, LinearPath, LinearPaths, CLUSTER_MAX_SLICE,
    GEMV_MAX_ROWS, MMA_MAX_ROWS, TILE_K, TILE_N, WIDE_N,
};
use norm_chain::{NormChain, NormRows};
use staged::{staged_gemv_plan, staged_mma, staged_mma_call};
pub use staged::{
    staged_mma_kernel, staged_mma_plan, staged_mma_smem, staged_plan, StagedPlan, StagedTrigger,
    STAGED_MAX_SMEM, STAGED_MMA_KERNELS, STAGED_MMA_MAX_SMEM,
};
pub use tile::{
    tile_entry_smem, tile_kernel, tile_pipeline, tile_smem, tile_wg_smem, tile_wg_stages,
    TILE_KERNELS, TILE_WG_KERNELS,
};

/// A device linear layer: bf16 weight `[n][k]`, optional f32 bias `[n]`, and for an FP8
/// layer the same weights as E4M3 codes with row scales.
pub struct Linear {
    pub w: DBuf<u16>,
    pub n: usize,
    pub k: usize,
    pub bias: Option<DBuf<f32>>,
    pub fp8: Option<Fp8Weight>,
}

/// E4M3 codes `[n][k]` and one f32 scale per row (`tts_model::fp8`).
pub struct Fp8Weight {
    pub codes: DBuf<u8>,
    pub scales: DBuf<f32>,
}

impl Linear {
    /// Uploads a bf16 weight (row-major `[n][k]`) and optional f32 bias.
    pub fn new(
        gpu: &Gpu,
        w: &[u16],
        n: usize,
        k: usize,
        bias: Option<&[f32]>,
    ) -> Result<Self, CudaError> {
        if !k.is_multiple_of(8) {
            return Err(CudaError::Shape(format!(
                "linear input width {k} is not a multiple of 8"
            )));
        }
        if w.len() != n * k {
            return Err(CudaError::Shape(format!(
                "weight has {} values, expected {n}x{k}",
                w.len()
            )));
        }
        Ok(Self {
            w: gpu.upload(w)?,
            n,
            k,
            bias: bias.map(|b| gpu.upload(b)).transpose()?,
            fp8: None,
        })
    }

    /// Bytes of its bf16 weight matrix.
    pub fn bf16_bytes(&self) -> usize {
        2 * self.n * self.k
    }

    /// Uploads an FP8 weight: its codes and scales for the GEMV, and the dequantized
    /// matrix (exact in bf16) for the other paths.
    pub fn new_fp8(gpu: &Gpu, q: &Fp8Rows, bias: Option<&[f32]>) -> Result<Self, CudaError> {
        if !q.cols.is_multiple_of(16) {
            return Err(CudaError::Shape(format!(
                "FP8 linear input width {} is not a multiple of 16",
                q.cols
            )));
        }
        let bf16: Vec<u16> = q
            .dequantize()
            .iter()
            .map(|&v| half::bf16::from_f32(v).to_bits())
            .collect();
        let mut l = Self::new(gpu, &bf16, q.rows, q.cols, bias)?;
        l.fp8 = Some(Fp8Weight {
            codes: gpu.upload(&q.codes)?,
            scales: gpu.upload(&q.scales)?,
        });
        Ok(l)
    }
}

/// Activation applied in the epilogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    None = 0,
    Silu = 1,
    /// Rows (2i, 2i+1) of the weight are (gate_i, up_i); the output is silu(gate)·up and
    /// has n/2 columns.
    SwigluPairs = 2,
}

/// Scratch buffers of the multi-row paths, sized for the largest call.
pub struct GemmScratch {
    /// Input rows as bf16 hi (rows 0..m) and lo (rows m..2m) parts.
    pub xb: DBuf<u16>,
    /// A second buffer of split rows, the size of `xb`: a `tile_wg.cu` call writing the next
    /// layer's rows ([`tile`]'s chain) writes the buffer it does not read.
    xb_alt: DBuf<u16>,
    /// Per buffer of split rows, the rows' Σ x² by 128-column tile (`[tile][row]`) when the
    /// rows wait for their norm's 1 / rms (the chain's deferred norm).
    ss: [DBuf<f32>; 2],
    /// cuBLAS output before the epilogue.
    pub acc: DBuf<f32>,
    pub paths: LinearPaths,
    /// The rows `xb` holds for the next [`linear`] call on this scratch, when the call
    /// before wrote them in its epilogue ([`linear_then`]); taken by every call.
    split_ready: Cell<Option<SplitRows>>,
    /// The one-row norm chain (`norm_chain`): a row with the next norm's gains applied,
    /// its Σ x² partials by row pair, and which rows they are for the next call (taken by
    /// every call).
    chain_x: DBuf<f32>,
    chain_ss: DBuf<f32>,
    norm_ready: Cell<Option<NormRows>>,
}

/// Which rows split bf16 rows were made from: (pointer, ld, count, width, norm gain, eps),
/// in which buffer (0: `xb`, 1: `xb_alt`), and whether the norm's 1 / rms is still to be
/// applied (`deferred`: the rows are g ⊙ x, their Σ x² partials in that buffer's `ss`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct SplitRows {
    x: (u64, usize, usize),
    k: usize,
    norm: (u64, f32),
    buf: usize,
    deferred: bool,
}

impl SplitRows {
    /// Rows in `xb`, norm applied.
    fn new(x: Rows, k: usize, norm: (u64, f32)) -> Self {
        Self {
            x: (x.ptr, x.ld, x.count),
            k,
            norm,
            buf: 0,
            deferred: false,
        }
    }

    /// Whether these are `want`'s rows, width and norm (wherever they are).
    fn same_rows(&self, want: &SplitRows) -> bool {
        (self.x, self.k, self.norm) == (want.x, want.k, want.norm)
    }

    /// What a call over `want`'s rows may read of the rows `ready` describes: any of them
    /// (either buffer, norm deferred or not) on `tile_wg.cu`, which takes both; on the
    /// other paths only rows in `xb` with their norm applied. None: it converts its own.
    fn usable(ready: Option<SplitRows>, want: SplitRows, tile_wg: bool) -> Option<SplitRows> {
        ready.filter(|r| r.same_rows(&want) && (tile_wg || (r.buf == 0 && !r.deferred)))
    }
}

/// The linear layer that reads a call's output rows next (same rows, same count), for
/// [`linear_then`]: its output width and its fused norm (gain pointer, eps).
#[derive(Debug, Clone, Copy)]
pub struct NextLinear {
    pub n: usize,
    pub norm: Option<(u64, f32)>,
}

impl GemmScratch {
    pub fn new(gpu: &Gpu, max_rows: usize, max_k: usize, max_n: usize) -> Result<Self, CudaError> {
        let ss_len = max_rows * max_n.div_ceil(TILE_N);
        Ok(Self {
            xb: gpu.zeros(max_rows * max_k)?,
            xb_alt: gpu.zeros(max_rows * max_k)?,
            ss: [gpu.zeros(ss_len)?, gpu.zeros(ss_len)?],
            acc: gpu.zeros(max_rows * max_n)?,
            paths: LinearPaths {
                cluster: gpu.clusters,
                tile: gpu.tiles,
                tile_wg: gpu.tile_wg,
                wide: gpu.wides,
                chain_split: true,
                chain_attention: true,
                chain_tile: true,
                chain_gemv: true,
                fp8_mma: true,
                ..Default::default()
            },
            split_ready: Cell::new(None),
            chain_x: gpu.zeros(max_n)?,
            chain_ss: gpu.zeros(max_n.div_ceil(2))?,
            norm_ready: Cell::new(None),
        })
    }

    /// Split-row buffer `buf` (0: `xb`, 1: `xb_alt`).
    fn split_buf(&self, buf: usize) -> u64 {
        if buf == 0 {
            self.xb.ptr
        } else {
            self.xb_alt.ptr
        }
    }

    /// The Σ x² partials of split-row buffer `buf`.
    fn ss_buf(&self, buf: usize) -> u64 {
        self.ss[buf].ptr
    }

    /// Where the attention kernels should write the O projection's input `rows` (width `k`,
    /// for a layer of `n` outputs) as split bf16 rows: `xb`, when `chain_attention` is on
    /// and that layer reads split rows. After enqueuing that writer, call
    /// [`GemmScratch::split_written`] with the same rows.
    pub(crate) fn split_target(&self, gpu: &Gpu, rows: Rows, n: usize, k: usize) -> Option<u64> {
        // (the O projection, its reader, has no norm)
        let reads_split =
            staged_mma_call(gpu, rows, n, k, false).is_none() && self.split_fits(rows, n, k);
        (self.paths.chain_attention && reads_split).then_some(self.xb.ptr)
    }

    /// Records that the kernel just enqueued wrote `rows` (width `k`, no norm) as split
    /// rows into `xb`, for the next [`linear`] call only.
    pub(crate) fn split_written(&self, rows: Rows, k: usize) {
        self.split_ready
            .set(Some(SplitRows::new(rows, k, (0, 0.0))));
    }

    /// Whether a layer of `n` outputs over `rows` (width `k`) reads split bf16 rows and
    /// they fit `xb`: then the kernel before it can write them.
    fn split_fits(&self, rows: Rows, n: usize, k: usize) -> bool {
        rows.count > 0
            && reads_split_rows(path_for(&self.paths, rows, n, k))
            && 2 * rows.count * k <= self.xb.len
    }
}

/// Where the input rows come from and how to read them.
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    pub ptr: u64,
    pub ld: usize,
    pub count: usize,
}

impl Rows {
    /// Whether every row starts on 16 bytes (f32 rows read by 16-byte loads).
    fn quad_aligned(&self) -> bool {
        self.ptr.is_multiple_of(16) && self.ld.is_multiple_of(4)
    }
}

/// `y = epilogue(norm?(x) · Wᵀ)` for `x.count` rows; `res` (ptr, ld) is added last and may
/// be `y` itself.
#[allow(clippy::too_many_arguments)]
pub fn linear(
    gpu: &Gpu,
    l: &Linear,
    x: Rows,
    norm: Option<(u64, f32)>,
    act: Act,
    res: Option<(u64, usize)>,
    y: u64,
    ldy: usize,
    scratch: &GemmScratch,
) -> Result<(), CudaError> {
    linear_then(gpu, l, x, norm, act, res, y, ldy, scratch, None)
}

/// The path `linear` runs `x.count` rows of an `n × k` weight on.
fn path_for(paths: &LinearPaths, x: Rows, n: usize, k: usize) -> LinearPath {
    let path = paths.choose(x.count, n, k);
    let cluster_or_wide = matches!(path, LinearPath::Cluster | LinearPath::Wide);
    if cluster_or_wide && !x.quad_aligned() {
        // their row loads move 16-byte pieces
        return LinearPath::Cublas;
    }
    path
}

/// Whether a path multiplies split bf16 rows (`to_bf16_rows` first).
fn reads_split_rows(path: LinearPath) -> bool {
    matches!(
        path,
        LinearPath::TensorCores | LinearPath::Cublas | LinearPath::Tile
    )
}

/// [`linear`], told which layer reads `y` next (`next`: the very next `linear` call on
/// this scratch, over the rows `y`, `ldy`, `x.count`, in the same enqueued sequence, with
/// nothing else writing those rows in between). When both run on split bf16 rows
/// and this one ends in `linear_epilogue` (cuBLAS), the epilogue also writes the next
/// layer's split rows, norm applied, and that call skips its `to_bf16_rows` launch: the
/// same values from one launch fewer. When both run on `tile_wg.cu`, its epilogue writes
/// them (`tile`'s chain: the norm applied to the next layer's sums, so the same values
/// to f32 rounding). With `next`, a staged one-row GEMV also lets the
/// next launch start before its own PDL wait: every linear path's first launch reads
/// nothing but weights before its wait (`gemv_staged.cu`).
#[allow(clippy::too_many_arguments)]
pub fn linear_then(
    gpu: &Gpu,
    l: &Linear,
    x: Rows,
    norm: Option<(u64, f32)>,
    act: Act,
    res: Option<(u64, usize)>,
    y: u64,
    ldy: usize,
    scratch: &GemmScratch,
    next: Option<NextLinear>,
) -> Result<(), CudaError> {
    // what the previous call left in xb (or the norm chain's buffers) is for this call only
    let ready = scratch.split_ready.take();
    let norm_ready = scratch.norm_ready.take();
    let m = x.count;
    if m == 0 {
        return Ok(());
    }
    let bias = l.bias.as_ref().map_or(0, |b| b.ptr);
    let (res_p, ldr) = res.unwrap_or((0, 0));
    let (norm_p, eps) = norm.unwrap_or((0, 0.0));
    let call = RowCall {
        x,
        norm: (norm_p, eps),
        act,
        epilogue: (bias, res_p, ldr),
        y,
        ldy,
    };
    // the GEMV kernel over an FP8 layer's values (a norm-chain reader, one row on the
    // GEMV's body, norms nothing itself: its codes cost no norm)
    let norms = norm_p != 0 && !NormChain::reads(scratch, norm_ready, &call, l.k);
    let codes = match l.fp8 {
        Some(_) => scratch.paths.fp8_kernel(m, l.n, l.k, norms),
        None => Fp8Gemv::Bf16,
    };
    // two rows of an FP8 layer whose codes pay stream them on the GEMV path rather than
    // the batched paths' bf16 copy. H100, talker step at 2 rows with the FP8 MLP: 1.610 ms
    // on the bf16 copy, 1.553 with gate/up on `gemv8_mma.cu` and down on `gemv8_m2`; 1.674
    // with only down on the codes, 1.649 with only gate/up (down then converts its own
    // input rows: no `tile_wg.cu` layer before it writes them).
    let fp8_rows = m == 2 && codes != Fp8Gemv::Bf16;
    if let Some(plan) = staged_mma_call(gpu, x, l.n, l.k, norm_p != 0).filter(|_| !fp8_rows) {
        return staged_mma(gpu, l, &call, plan);
    }
    let path = if fp8_rows {
        LinearPath::Gemv
    } else {
        path_for(&scratch.paths, x, l.n, l.k)
    };
    if path == LinearPath::Gemv {
        let body = m != 1 || staged_gemv_plan(gpu, l.n, l.k, codes != Fp8Gemv::Bf16).is_none();
        let chain = NormChain::plan(gpu, scratch, l, &call, body, norm_ready, next);
        gemv(gpu, l, &call, codes, next.is_some(), chain)?;
        scratch.norm_ready.set(chain.record);
        return Ok(());
    }
    if path == LinearPath::Cluster {
        return cluster(gpu, l, &call);
    }
    if path == LinearPath::Wide {
        return wide(gpu, l, &call);
    }
    // Each row is split into bf16 hi + lo parts (rows m..2m hold lo), both multiplied and
    // summed: f32-level accuracy from bf16 tensor cores.
    if 2 * m * l.k > scratch.xb.len {
        return Err(CudaError::Shape(format!(
            "{m} rows of width {} exceed the GEMM scratch",
            l.k
        )));
    }
    let want = SplitRows::new(x, l.k, (norm_p, eps));
    let tile_wg = path == LinearPath::Tile && scratch.paths.tile_wg;
    let usable = SplitRows::usable(ready, want, tile_wg);
    if usable.is_none() {
        gpu.launch(
            "to_bf16_rows",
            (m as u32, 1, 1),
            256,
            &[
                Arg::P(x.ptr),
                Arg::I(x.ld as i32),
                Arg::I(l.k as i32),
                Arg::P(norm_p),
                Arg::F(eps),
                Arg::P(scratch.xb.ptr),
                Arg::I(l.k as i32),
                Arg::I(m as i32),
            ],
        )?;
    }
    if path == LinearPath::Tile {
        return tile::tile(gpu, l, &call, scratch, usable.unwrap_or(want), next);
    }
    if path == LinearPath::TensorCores {
        let (name, tile) = mma_entry(m);
        return gpu.launch(
            name,
            ((l.n / 16) as u32, m.div_ceil(tile) as u32, 1),
            256,
            &split_rows_args(l, scratch.xb.ptr, &call),
        );
    }
    if 2 * m * l.n > scratch.acc.len {
        return Err(CudaError::Shape(format!(
            "{m} rows of {} outputs exceed the GEMM scratch",
            l.n
        )));
    }
    // Column-major view: acc (n × 2m) = Wᵀ-as-stored (n × k, op T of k × n) · x (k × 2m).
    crate::lt::weight_gemm(
        gpu,
        l.n,
        l.k,
        2 * m,
        l.w.ptr,
        scratch.xb.ptr,
        scratch.acc.ptr,
    )?;
    // the next layer's split rows, when it reads them (and they fit the scratch)
    let out_k = if act == Act::SwigluPairs {
        l.n / 2
    } else {
        l.n
    };
    let out = Rows {
        ptr: y,
        ld: ldy,
        count: m,
    };
    let split_next = next
        .filter(|nx| scratch.paths.chain_split && scratch.split_fits(out, nx.n, out_k))
        .map(|nx| SplitRows::new(out, out_k, nx.norm.unwrap_or((0, 0.0))));
    let (next_g, next_eps, xb) =
        split_next.map_or((0, 0.0, 0), |s| (s.norm.0, s.norm.1, scratch.xb.ptr));
    gpu.launch(
        "linear_epilogue",
        (m as u32, 1, 1),
        256,
        &[
            Arg::P(scratch.acc.ptr),
            Arg::I(l.n as i32),
            Arg::P(bias),
            Arg::I(act as i32),
            Arg::P(res_p),
            Arg::I(ldr as i32),
            Arg::P(y),
            Arg::I(ldy as i32),
            Arg::I(m as i32),
            Arg::P(next_g),
            Arg::F(next_eps),
            Arg::P(xb),
            Arg::I(out_k as i32),
        ],
    )?;
    scratch.split_ready.set(split_next);
    Ok(())
}

/// `wide.cu`'s entry points: (name, row tiles of 8); each warp owns one group of 16
/// outputs (`_r1`).
pub const WIDE_KERNELS: [(&str, usize); 3] = [
    ("wide_linear_t2_r1", 2),
    ("wide_linear_t4_r1", 4),
    ("wide_linear_t8_r1", 8),
];

/// Most dynamic shared memory a `wide.cu` block stages its rows in (two blocks fit a
/// multiprocessor).
pub const WIDE_SMEM: usize = 100 << 10;

/// Bytes of `wide.cu`'s dynamic shared memory per staged chunk of 32 columns, for `mt`
/// row tiles of 8: hi + lo parts and the copied rows (64 bytes per 8 columns of a row),
/// two buffers of gains (256), Σ x² per row (32 per tile).
pub const fn wide_chunk_smem(mt: usize) -> usize {
    2080 * mt + 256
}

/// One launch of `wide.cu` ([`wide_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WidePlan {
    pub kernel: &'static str,
    /// Row tiles of 8 the entry holds.
    pub row_tiles: usize,
    /// Blocks per cluster, each taking a K slice (1: no cluster).
    pub splits: usize,
    /// Chunks of 32 columns staged at a time.
    pub chunks: usize,
    /// Dynamic shared memory bytes.
    pub smem: usize,
}

/// `wide.cu`'s launch for `m` (up to 64) rows of an `n × k` weight: clusters of
/// `wide_split` blocks per output tile, the whole K slice staged at once or what fits
/// [`WIDE_SMEM`] (the same space later holds the block's partial tile when S > 1).
pub fn wide_plan(n: usize, k: usize, m: usize) -> Result<WidePlan, CudaError> {
    let splits = wide_split(n, k)
        .ok_or_else(|| CudaError::Shape(format!("wide linear cannot take {n}x{k}")))?;
    let mt = match m {
        0..=16 => 2,
        17..=32 => 4,
        _ => 8,
    };
    let kernel = WIDE_KERNELS
        .iter()
        .find(|&&(_, t)| t == mt)
        .filter(|_| m <= MMA_MAX_ROWS)
        .map(|&(name, _)| name)
        .ok_or_else(|| CudaError::Shape(format!("no wide linear kernel for {m} rows")))?;
    let chunks = (k / splits / 32).min(WIDE_SMEM / wide_chunk_smem(mt));
    let smem = (chunks * wide_chunk_smem(mt)).max(WIDE_N * (8 * mt + 1) * 4);
    Ok(WidePlan {
        kernel,
        row_tiles: mt,
        splits,
        chunks,
        smem,
    })
}

/// One launch of `wide.cu` for up to 64 rows.
fn wide(gpu: &Gpu, l: &Linear, c: &RowCall) -> Result<(), CudaError> {
    let p = wide_plan(l.n, l.k, c.x.count)?;
    let mut args = row_kernel_args(l, c).to_vec();
    args.push(Arg::I(p.chunks as i32));
    let grid = (p.splits as u32, (l.n / WIDE_N) as u32, 1);
    if p.splits == 1 {
        gpu.launch_with(p.kernel, grid, 256, p.smem as u32, &args)
    } else {
        gpu.launch_cluster(p.kernel, grid, 256, p.smem as u32, p.splits as u32, &args)
    }
}

/// Bytes of dynamic shared memory a cluster linear block takes for rows padded to `tile`
/// and a K slice of `slice`: the staged rows (64 bytes of padding each), whose space later
/// holds the partial sums (128 outputs × `tile`).
pub const fn cluster_smem(tile: usize, slice: usize) -> usize {
    let row = slice * 4 + 64;
    tile * if row > 128 * 4 { row } else { 128 * 4 }
}

/// The most a cluster linear block asks for: 64 rows of the widest slice.
pub const CLUSTER_MAX_SMEM: usize = cluster_smem(MMA_MAX_ROWS, CLUSTER_MAX_SLICE);

/// `mma_cluster.cu`'s entry for `m` rows and the rows it pads them to.
pub fn cluster_entry(m: usize) -> (&'static str, usize) {
    match m {
        0..=8 => ("mma_cluster_t1", 8),
        9..=16 => ("mma_cluster_t2", 16),
        17..=32 => ("mma_cluster_t4", 32),
        _ => ("mma_cluster_t8", 64),
    }
}

/// `mma.cu`'s entry for `m` rows and the rows one of its blocks covers.
pub fn mma_entry(m: usize) -> (&'static str, usize) {
    match m {
        0..=8 => ("mma_linear_t1", 8),
        9..=16 => ("mma_linear_t2", 16),
        17..=32 => ("mma_linear_t4", 32),
        _ => ("mma_linear_t8", 64),
    }
}

/// One launch of `mma_cluster.cu` for up to 64 rows.
fn cluster(gpu: &Gpu, l: &Linear, c: &RowCall) -> Result<(), CudaError> {
    let m = c.x.count;
    let cs = cluster_split(l.n, l.k)
        .ok_or_else(|| CudaError::Shape(format!("cluster linear cannot take {}x{}", l.n, l.k)))?;
    let (name, tile) = cluster_entry(m);
    let smem = cluster_smem(tile, l.k / cs);
    gpu.launch_reading(
        (l.w.ptr, l.bf16_bytes()),
        name,
        (cs as u32, (l.n / 128) as u32, 1),
        256,
        smem as u32,
        Some(cs as u32),
        &row_kernel_args(l, c),
    )
}

/// One call of a row kernel (`gemv.cu`, `mma_cluster.cu`, `wide.cu`): input rows, the
/// fused norm (gain pointer or 0, eps), activation, epilogue (bias or 0, residual or 0, its
/// ld) and the output.
struct RowCall {
    x: Rows,
    norm: (u64, f32),
    act: Act,
    epilogue: (u64, u64, usize),
    y: u64,
    ldy: usize,
}

/// The arguments `gemv.cu`, `mma_cluster.cu` and `wide.cu` share, in their order: weight
/// and shape, input rows, norm, bias and activation, residual, output, row count.
fn row_kernel_args(l: &Linear, c: &RowCall) -> [Arg; 14] {
    let (bias, res, ldr) = c.epilogue;
    [
        Arg::P(l.w.ptr),
        Arg::I(l.n as i32),
        Arg::I(l.k as i32),
        Arg::P(c.x.ptr),
        Arg::I(c.x.ld as i32),
        Arg::P(c.norm.0),
        Arg::F(c.norm.1),
        Arg::P(bias),
        Arg::I(c.act as i32),
        Arg::P(res),
        Arg::I(ldr as i32),
        Arg::P(c.y),
        Arg::I(c.ldy as i32),
        Arg::I(c.x.count as i32),
    ]
}

/// The arguments `mma.cu` and `tile.cu` share, in their order: weight and shape, the
/// rows' bf16 hi + lo parts at `xb` and their count, bias and activation, residual, output.
fn split_rows_args(l: &Linear, xb: u64, c: &RowCall) -> [Arg; 11] {
    let (bias, res, ldr) = c.epilogue;
    [
        Arg::P(l.w.ptr),
        Arg::I(l.n as i32),
        Arg::I(l.k as i32),
        Arg::P(xb),
        Arg::I(c.x.count as i32),
        Arg::P(bias),
        Arg::I(c.act as i32),
        Arg::P(res),
        Arg::I(ldr as i32),
        Arg::P(c.y),
        Arg::I(c.ldy as i32),
    ]
}

/// `y = norm?(x) · Wᵀ (+ bias)` for 1..=8 rows on the bf16 GEMV, the kernel one row runs
/// on: every row's result has the bits it has in a one-row call (a GEMV row never depends
/// on the others). For tables computed ahead (`weights::qkv_table`).
pub fn gemv_rows(
    gpu: &Gpu,
    l: &Linear,
    x: Rows,
    norm: Option<(u64, f32)>,
    y: u64,
    ldy: usize,
) -> Result<(), CudaError> {
    if !(1..=8).contains(&x.count) {
        return Err(CudaError::Shape(format!(
            "gemv_rows takes 1..=8 rows, not {}",
            x.count
        )));
    }
    let call = RowCall {
        x,
        norm: norm.unwrap_or((0, 0.0)),
        act: Act::None,
        epilogue: (l.bias.as_ref().map_or(0, |b| b.ptr), 0, 0),
        y,
        ldy,
    };
    gemv(gpu, l, &call, Fp8Gemv::Bf16, false, NormChain::default())
}

/// Whether `gemv8_mma.cu` takes `rows` rows of width `k`: 64-wide K chunks, at most two
/// rows, and its split rows (4·k·rows bytes) with its ~4.3 KiB of static shared memory
/// within the 48 KiB a launch gets without asking (which also keeps k·rows within the
/// 10240 values its prologue's loop covers).
pub fn gemv8_mma_fits(k: usize, rows: usize) -> bool {
    k.is_multiple_of(64) && (1..=2).contains(&rows) && gemv8_mma_smem(k, rows) <= 40 << 10
}

/// The dynamic shared memory of a `gemv8_mma.cu` launch over `rows` rows of width `k`:
/// each row's f16 hi and lo parts.
fn gemv8_mma_smem(k: usize, rows: usize) -> usize {
    4 * k * rows
}

/// How many warps of a GEMV (`gemv.cu`, `gemv_staged.cu`) share one output row's K: more
/// when the layer has few rows, so it still fills the GPU.
pub fn gemv_ksplit(n: usize) -> usize {
    match n {
        n if n >= 4096 => 1,
        n if n >= 2048 => 2,
        _ => 4,
    }
}

/// Which of a GEMV's four row templates (1, 2, 4, 8 rows: index 0..=3) takes `rows`
/// (1..=8) rows: `gemv.cu`'s and `codec_gemv.cu`'s entry points alike.
pub(crate) fn gemv_bucket(rows: usize) -> usize {
    match rows {
        0 | 1 => 0,
        2 => 1,
        3 | 4 => 2,
        _ => 3,
    }
}

/// One GEMV launch for up to 8 rows (`gemv.cu`): with `codes`, over the E4M3 codes of an
/// FP8 layer, else over the bf16 weights.
/// `early`: the very next launch is another linear layer's kernel (`linear_then`'s
/// `next`), which reads nothing but weights before its wait (see `gemv_staged.cu`).
/// `chain`: the launch's part of the norm chain (`NormChain::plan`; never on the staged
/// GEMV).
fn gemv(
    gpu: &Gpu,
    l: &Linear,
    c: &RowCall,
    codes: Fp8Gemv,
    early: bool,
    chain: NormChain,
) -> Result<(), CudaError> {
    let m = c.x.count;
    let bucket = gemv_bucket(m);
    let ksplit = gemv_ksplit(l.n);
    let mut args = row_kernel_args(l, c).to_vec();
    args.push(Arg::I(ksplit as i32));
    if bucket == 0 {
        if let Some(p) = staged_gemv_plan(gpu, l.n, l.k, codes != Fp8Gemv::Bf16) {
            let trigger = if early { gpu.staged_trigger.code() } else { 0 };
            args.extend([Arg::I(p.rows_per_block as i32), Arg::I(trigger)]);
            return gpu.launch_reading(
                (l.w.ptr, l.bf16_bytes()),
                "gemv_staged_m1",
                (p.blocks as u32, 1, 1),
                256,
                p.smem as u32,
                None,
                &args,
            );
        }
    }
    let (bf16_kernel, mut blocks) = gemv_choice_with(l.n, l.k, m, gpu.gemv_passes);
    // `codes` comes from `LinearPaths::fp8_kernel`: at most FP8_GEMV_MAX_ROWS rows
    // the weights it streams: bf16, or one byte per E4M3 code
    let mut weights = (l.w.ptr, l.bf16_bytes());
    let mut smem = 0;
    let name = match l.fp8.as_ref().filter(|_| codes != Fp8Gemv::Bf16) {
        Some(f) => {
            args[0] = Arg::P(f.codes.ptr);
            args.push(Arg::P(f.scales.ptr));
            weights = (f.codes.ptr, l.n * l.k);
            if codes == Fp8Gemv::Mma {
                // 16 outputs a block, the rows split into f16 hi / lo in shared memory
                blocks = l.n.div_ceil(16);
                smem = gemv8_mma_smem(l.k, m); // m is the kernel's M (gemv8_mma_fits)
                ["gemv8_mma_m1", "gemv8_mma_m2"][bucket]
            } else {
                ["gemv8_m1", "gemv8_m2"][bucket]
            }
        }
        None => {
            args.push(Arg::P(0));
            bf16_kernel
        }
    };
    chain.apply(l.k, &mut args);
    gpu.launch_reading(
        weights,
        name,
        (blocks as u32, 1, 1),
        256,
        smem as u32,
        None,
        &args,
    )
}

/// The bf16 `gemv.cu` entry point for `rows` rows (1..=8) over an `n × k` layer and its
/// block count (each block covers 16 / [`gemv_ksplit`] rows). One row whose warps take two
/// or more passes over K (a warp step is 256 weights, a pass GEMV_U = 4 steps) goes to
/// `gemv_m1_pre`: it gains more from issuing each pass's X loads together than it loses in
/// resident blocks.
pub fn gemv_choice(n: usize, k: usize, rows: usize) -> (&'static str, usize) {
    gemv_choice_with(n, k, rows, GemvPasses::Four)
}

/// [`gemv_choice`] with one-row passes of `passes` steps: where passes of 8 steps
/// leave a warp fewer passes over its K slice than passes of 4, one row goes to
/// `gemv_m1_u8` (`GemvPasses::Eight`) or `gemv_m1_u8_pre` (`EightPre`).
pub fn gemv_choice_with(
    n: usize,
    k: usize,
    rows: usize,
    passes: GemvPasses,
) -> (&'static str, usize) {
    let ksplit = gemv_ksplit(n);
    let bucket = gemv_bucket(rows);
    let steps = k.div_ceil(256).div_ceil(ksplit);
    let (four, eight) = (steps.div_ceil(4), steps.div_ceil(8));
    let name = match (bucket, passes) {
        (0, GemvPasses::Eight) if eight < four => "gemv_m1_u8",
        (0, GemvPasses::EightPre) if eight < four => "gemv_m1_u8_pre",
        (0, _) if four >= 2 => "gemv_m1_pre",
        _ => ["gemv_m1", "gemv_m2", "gemv_m4", "gemv_m8"][bucket],
    };
    (name, n.div_ceil(16 / ksplit))
}

/// How many 256-wide K steps a one-row `gemv.cu` warp loads per pass
/// (`CudaOptions::gemv_passes`): 4 (the default), or 8 with each pass's X loaded per
/// step (`gemv_m1_u8`) or all together (`gemv_m1_u8_pre`). The sums are the same either
/// way; only how many weight bytes a warp has in flight changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GemvPasses {
    #[default]
    Four,
    Eight,
    EightPre,
}

impl std::str::FromStr for GemvPasses {
    type Err = String;

    /// `4`, `8` or `8pre`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "4" => Ok(Self::Four),
            "8" => Ok(Self::Eight),
            "8pre" => Ok(Self::EightPre),
            _ => Err(format!("expected 4, 8 or 8pre, got `{s}`")),
        }
    }
}

#[cfg(test)]
mod tests;
