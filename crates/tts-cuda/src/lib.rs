//! The CUDA backend of qwen3-tts-server: the only crate that knows CUDA.
//!
//! cudarc with dynamic loading (nothing CUDA is needed to build), kernels compiled by NVRTC
//! at start-up (cached on disk), cuBLAS for large GEMMs, CUDA graphs for the talker step
//! and the code-predictor loop per batch bucket. [`CudaBackend`] implements
//! `tts_model::Backend` and is checked against the CPU reference (`tests/gpu_parity/`).

pub mod backend;
pub mod bench;
pub mod buckets;
pub mod clone_inputs;
pub mod code_predictor;
pub mod codec;
pub mod compile;
pub mod device;
pub mod error;
pub mod kernels;
pub mod lane;
pub mod libs;
pub mod linear;
pub mod lt;
pub mod overlap;
pub mod persistent;
pub mod prefill_plan;
pub mod prefix;
pub mod resources;
pub mod routing;
pub mod stack;
pub mod talker;
pub mod weights;
pub mod workspace;

pub use backend::{CudaBackend, CudaOptions, MaxL1Rows, StagedGemv};
pub use error::CudaError;

/// Compiles every kernel for `arch` (e.g. `sm_90`) without touching a GPU: needs only
/// NVRTC. Returns the CUBIN.
pub fn compile_kernels(arch: &str) -> Result<Vec<u8>, CudaError> {
    nvrtc_present()?;
    compile::compile_cubin(&compile::module_source(), arch)
}

/// [`compile_kernels`] with ptxas' resource report of every function
/// ([`resources::parse_ptxas_report`] reads it).
pub fn compile_kernels_with_report(arch: &str) -> Result<(Vec<u8>, String), CudaError> {
    nvrtc_present()?;
    compile::compile_cubin_with_report(&compile::module_source(), arch)
}

fn nvrtc_present() -> Result<(), CudaError> {
    libs::preload();
    let (_, _, nvrtc) = libs::present();
    if nvrtc {
        Ok(())
    } else {
        Err(CudaError::Unavailable(
            "NVRTC (libnvrtc.so.13) not found".into(),
        ))
    }
}
