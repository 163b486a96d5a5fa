//! Errors of the CUDA backend.

/// Anything that can fail on the GPU side.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no usable CUDA device: {0}")]
    Unavailable(String),
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error("cuBLAS: {0}")]
    Blas(String),
    #[error("NVRTC compile failed: {0}")]
    Compile(String),
    #[error("kernel `{0}` not found")]
    MissingKernel(&'static str),
    #[error("unsupported model shape: {0}")]
    Shape(String),
    #[error(transparent)]
    Model(#[from] tts_model::ModelError),
    #[error(transparent)]
    Backend(#[from] tts_model::BackendError),
}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver(format!("{e:?}"))
    }
}

impl From<cudarc::cublas::result::CublasError> for CudaError {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        CudaError::Blas(format!("{e:?}"))
    }
}

impl From<CudaError> for tts_model::BackendError {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::Backend(b) => b,
            other => tts_model::BackendError::Device(other.to_string()),
        }
    }
}
