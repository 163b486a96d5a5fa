//! Linear layers on the GPU: a bf16 weight `[N][K]` applied to f32 rows, with the fused
//! RMSNorm prologue and bias / SiLU / SwiGLU-pair / residual epilogue of `gemv.cu`.
//! Up to 8 rows run as one GEMV launch; more rows go through cuBLAS (rows converted to
//! bf16, f32 accumulation) and an epilogue kernel.

use crate::device::{Arg, DBuf, GemmType, Gpu};
use crate::error::CudaError;

/// A device linear layer: bf16 weight `[n][k]`, optional f32 bias `[n]`.
pub struct Linear {
    pub w: DBuf<u16>,
    pub n: usize,
    pub k: usize,
    pub bias: Option<DBuf<f32>>,
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
        })
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

/// Most rows one GEMV launch takes; more go through cuBLAS.
pub const GEMV_MAX_ROWS: usize = 8;

/// Scratch buffers of the cuBLAS path, sized for the largest call.
pub struct GemmScratch {
    pub xb: DBuf<u16>,
    pub acc: DBuf<f32>,
    /// Per-row inverse RMS for the tensor-core path's RMSNorm prologue.
    pub inv: DBuf<f32>,
    /// Use the tensor-core kernel (`mma.cu`) instead of cuBLAS for more than 8 rows.
    /// Off by default: it is exact and batch-independent but not yet software-pipelined,
    /// and measured 3-9x slower than the cuBLAS path on the H200 (bench/results).
    pub tensor_cores: bool,
}

impl GemmScratch {
    pub fn new(gpu: &Gpu, max_rows: usize, max_k: usize, max_n: usize) -> Result<Self, CudaError> {
        Ok(Self {
            xb: gpu.zeros(max_rows * max_k)?,
            acc: gpu.zeros(max_rows * max_n)?,
            inv: gpu.zeros(max_rows)?,
            tensor_cores: false,
        })
    }
}

/// Where the input rows come from and how to read them.
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    pub ptr: u64,
    pub ld: usize,
    pub count: usize,
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
    let m = x.count;
    if m == 0 {
        return Ok(());
    }
    let bias = l.bias.as_ref().map_or(0, |b| b.ptr);
    let (res_p, ldr) = res.unwrap_or((0, 0));
    let (norm_p, eps) = norm.unwrap_or((0, 0.0));
    if m <= GEMV_MAX_ROWS {
        let name = match m {
            1 => "gemv_m1",
            2 => "gemv_m2",
            3 | 4 => "gemv_m4",
            _ => "gemv_m8",
        };
        // Split K over more warps when the layer has few rows, so it still fills the GPU.
        let ksplit = match l.n {
            n if n >= 4096 => 1,
            n if n >= 2048 => 2,
            _ => 4,
        };
        let blocks = l.n.div_ceil(16 / ksplit) as u32;
        return gpu.launch(
            name,
            (blocks, 1, 1),
            256,
            &[
                Arg::P(l.w.ptr),
                Arg::I(l.n as i32),
                Arg::I(l.k as i32),
                Arg::P(x.ptr),
                Arg::I(x.ld as i32),
                Arg::P(norm_p),
                Arg::F(eps),
                Arg::P(bias),
                Arg::I(act as i32),
                Arg::P(res_p),
                Arg::I(ldr as i32),
                Arg::P(y),
                Arg::I(ldy as i32),
                Arg::I(m as i32),
                Arg::I(ksplit as i32),
            ],
        );
    }
    if scratch.tensor_cores
        && l.n.is_multiple_of(16)
        && l.k.is_multiple_of(64)
        && m <= scratch.inv.len
    {
        return mma_linear(gpu, l, x, norm, act, (bias, res_p, ldr), y, ldy, scratch);
    }
    // Each row is split into bf16 hi + lo parts (rows m..2m hold lo), multiplied in one
    // GEMM and summed in the epilogue: f32-level accuracy from bf16 tensor cores.
    if 2 * m * l.k > scratch.xb.len || 2 * m * l.n > scratch.acc.len {
        return Err(CudaError::Shape(format!(
            "{m} rows exceed the GEMM scratch"
        )));
    }
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
    // Column-major view: acc (n × 2m) = Wᵀ-as-stored (n × k, op T of k × n) · x (k × 2m).
    gpu.gemm(
        true,
        false,
        l.n,
        2 * m,
        l.k,
        l.w.ptr,
        l.k,
        scratch.xb.ptr,
        l.k,
        0.0,
        scratch.acc.ptr,
        l.n,
        GemmType::Bf16,
    )?;
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
        ],
    )
}

/// The tensor-core path (`mma.cu`): RMSNorm statistics first when a norm is fused, then
/// one launch over all rows (64 per block row).
#[allow(clippy::too_many_arguments)]
fn mma_linear(
    gpu: &Gpu,
    l: &Linear,
    x: Rows,
    norm: Option<(u64, f32)>,
    act: Act,
    (bias, res_p, ldr): (u64, u64, usize),
    y: u64,
    ldy: usize,
    scratch: &GemmScratch,
) -> Result<(), CudaError> {
    let m = x.count;
    let norm_p = match norm {
        Some((g, eps)) => {
            gpu.launch(
                "rms_inv_rows",
                (m as u32, 1, 1),
                256,
                &[
                    Arg::P(x.ptr),
                    Arg::I(x.ld as i32),
                    Arg::I(l.k as i32),
                    Arg::F(eps),
                    Arg::P(scratch.inv.ptr),
                    Arg::I(m as i32),
                ],
            )?;
            g
        }
        None => 0,
    };
    let name = match m {
        0..=16 => "mma_linear_t2",
        17..=32 => "mma_linear_t4",
        _ => "mma_linear_t8",
    };
    // More warps per block share the x tile on wide layers; fewer keep narrow ones spread.
    let warps = match l.n {
        n if n >= 4096 => 8,
        n if n >= 2048 => 4,
        _ => 2,
    };
    let grid = (l.n.div_ceil(16 * warps) as u32, m.div_ceil(64) as u32, 1);
    gpu.launch(
        name,
        grid,
        32 * warps as u32,
        &[
            Arg::P(l.w.ptr),
            Arg::I(l.n as i32),
            Arg::I(l.k as i32),
            Arg::P(x.ptr),
            Arg::I(x.ld as i32),
            Arg::I(m as i32),
            Arg::P(norm_p),
            Arg::P(scratch.inv.ptr),
            Arg::P(bias),
            Arg::I(act as i32),
            Arg::P(res_p),
            Arg::I(ldr as i32),
            Arg::P(y),
            Arg::I(ldy as i32),
        ],
    )
}
