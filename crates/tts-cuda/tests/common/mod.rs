//! Shared by the GPU test binaries.

use std::io::Write;

/// Says that a test skipped, and why, on the real stderr: libtest captures `eprintln!` of
/// passing tests, and a skip must be visible in the CI log.
pub fn report_skip(msg: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {msg}");
}

/// Seeded uniform values in [lo, hi) (an LCG: the tests' inputs, not statistics).
#[allow(dead_code)] // kernels_compile draws no inputs
pub fn uniform(mut seed: u64, lo: f32, hi: f32) -> impl FnMut() -> f32 {
    move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (hi - lo) * ((seed >> 40) as f32 / (1u64 << 24) as f32)
    }
}

/// The GPU for a kernel-level test, or None (saying why) when there is none.
#[allow(dead_code)] // kernels_compile opens no GPU
pub fn open_gpu(test: &str) -> Option<tts_cuda::device::Gpu> {
    match tts_cuda::device::Gpu::open(0) {
        Ok(g) => Some(g),
        Err(tts_cuda::CudaError::Unavailable(why)) => {
            report_skip(&format!("{test}: no CUDA device ({why})"));
            None
        }
        Err(e) => panic!("{test}: opening the GPU: {e}"),
    }
}
