//! The codec decoder on the GPU (in progress).

/// Kernels of `kernels/codec.cu` that the codec launches (loaded at start-up).
pub const KERNELS: &[&str] = &[];
