//! Compiles the kernel module for an architecture into the on-disk kernel cache, without a
//! GPU (only NVRTC), so a GPU machine started fresh need not compile it again:
//! `QWEN3_TTS_KERNEL_CACHE=dir cargo run --release -p tts-cuda --example kernel_cache -- sm_90a`
//! then point the same variable at a copy of `dir` there. The cache key covers the source,
//! the options and NVRTC's version, so a stale or foreign entry is never used.

fn main() -> Result<(), tts_cuda::CudaError> {
    let arch = std::env::args().nth(1).unwrap_or_else(|| "sm_90a".into());
    tts_cuda::libs::preload();
    let t = std::time::Instant::now();
    let cubin = tts_cuda::compile::module_cubin(&arch)?;
    println!(
        "{arch}: {} bytes in the kernel cache ({:.1} s)",
        cubin.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
