//! Every kernel compiles with NVRTC for Hopper (sm_90). Needs only NVRTC, no GPU: CI gets
//! it from PyPI (`nvidia-cuda-nvrtc`, see `.ci/run`). Skips, saying so, when NVRTC is absent.

mod common;

#[test]
fn kernels_compile_for_sm90() {
    match tts_cuda::compile_kernels("sm_90") {
        Ok(bytes) => assert!(bytes > 10_000, "suspiciously small CUBIN ({bytes} bytes)"),
        Err(tts_cuda::CudaError::Unavailable(why)) => {
            common::report_skip(&format!("kernels_compile_for_sm90: {why}"));
        }
        Err(e) => panic!("{e}"),
    }
}
