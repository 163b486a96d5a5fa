//! Typed launchers for the small row-moving kernels of `embed.cu`, with their shape
//! contracts. The `_u32` kernels move 32-bit words (f32 values or i32 codes alike).

use crate::device::{Arg, Gpu};
use crate::error::CudaError;

fn block_for(width: usize) -> u32 {
    if width >= 256 {
        256
    } else {
        32
    }
}

/// `out[r*ldo .. +width] = table[ids[r]*ldt .. +width]` for `r < rows`; rows whose id is
/// negative (padding) are left untouched.
#[allow(clippy::too_many_arguments)]
pub fn gather_u32(
    gpu: &Gpu,
    table: u64,
    ldt: usize,
    width: usize,
    ids: u64,
    rows: usize,
    out: u64,
    ldo: usize,
) -> Result<(), CudaError> {
    indexed_u32(
        gpu,
        "gather_u32",
        (table, ldt),
        width,
        ids,
        rows,
        (out, ldo),
    )
}

/// `table[ids[r]*ldt .. +width] = src[r*lds .. +width]` for `r < rows`; rows whose id is
/// negative (padding) write nothing.
#[allow(clippy::too_many_arguments)]
pub fn scatter_u32(
    gpu: &Gpu,
    src: u64,
    lds: usize,
    width: usize,
    ids: u64,
    rows: usize,
    table: u64,
    ldt: usize,
) -> Result<(), CudaError> {
    indexed_u32(
        gpu,
        "scatter_u32",
        (src, lds),
        width,
        ids,
        rows,
        (table, ldt),
    )
}

/// The common launch of `gather_u32` and `scatter_u32`: (source, its stride), width, the
/// row ids, the row count, (destination, its stride).
fn indexed_u32(
    gpu: &Gpu,
    name: &'static str,
    (a, lda): (u64, usize),
    width: usize,
    ids: u64,
    rows: usize,
    (b, ldb): (u64, usize),
) -> Result<(), CudaError> {
    gpu.launch(
        name,
        (rows as u32, 1, 1),
        block_for(width),
        &[
            Arg::P(a),
            Arg::I(lda as i32),
            Arg::I(width as i32),
            Arg::P(ids),
            Arg::I(rows as i32),
            Arg::P(b),
            Arg::I(ldb as i32),
        ],
    )
}

/// `dst[r*ldd .. +width] = src[r*lds .. +width]` (f32) for `r < rows`.
pub fn copy_rows(
    gpu: &Gpu,
    src: u64,
    lds: usize,
    dst: u64,
    ldd: usize,
    width: usize,
    rows: usize,
) -> Result<(), CudaError> {
    gpu.launch(
        "copy_rows",
        (rows as u32, 1, 1),
        256,
        &[
            Arg::P(src),
            Arg::I(lds as i32),
            Arg::P(dst),
            Arg::I(ldd as i32),
            Arg::I(width as i32),
            Arg::I(rows as i32),
        ],
    )
}

/// Embedding lookup from a bf16 table `[*, width]` into f32 rows:
/// `out[r*ldo .. +width] (+)= table[ids[r]]` for `r < rows` (adds when `accumulate`);
/// a negative id reads as a zero vector.
#[allow(clippy::too_many_arguments)]
pub fn gather_rows(
    gpu: &Gpu,
    table: u64,
    width: usize,
    ids: u64,
    rows: usize,
    out: u64,
    ldo: usize,
    accumulate: bool,
) -> Result<(), CudaError> {
    gather(
        gpu,
        "gather_rows",
        (table, width),
        (ids, rows),
        (out, ldo),
        accumulate,
    )
}

/// [`gather_rows`] from an f32 table.
#[allow(clippy::too_many_arguments)]
pub fn gather_rows_f32(
    gpu: &Gpu,
    table: u64,
    width: usize,
    ids: u64,
    rows: usize,
    out: u64,
    ldo: usize,
    accumulate: bool,
) -> Result<(), CudaError> {
    gather(
        gpu,
        "gather_rows_f32",
        (table, width),
        (ids, rows),
        (out, ldo),
        accumulate,
    )
}

fn gather(
    gpu: &Gpu,
    kernel: &'static str,
    (table, width): (u64, usize),
    (ids, rows): (u64, usize),
    (out, ldo): (u64, usize),
    accumulate: bool,
) -> Result<(), CudaError> {
    gpu.launch(
        kernel,
        (rows as u32, 1, 1),
        256,
        &[
            Arg::P(table),
            Arg::I(width as i32),
            Arg::P(ids),
            Arg::I(rows as i32),
            Arg::P(out),
            Arg::I(ldo as i32),
            Arg::I(accumulate as i32),
        ],
    )
}
