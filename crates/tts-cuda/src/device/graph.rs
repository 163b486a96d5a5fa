//! CUDA graphs of the device's stream: captured once, replayed per call.

use cudarc::driver::sys as dsys;
use cudarc::driver::CudaGraph;

use super::Gpu;
use crate::error::CudaError;

/// An instantiated CUDA graph of work on the device's stream, which may move between
/// threads with its owner.
pub struct Graph(CudaGraph);

// SAFETY: CUDA requires graph objects to be used by one thread at a time; every owner keeps
// its graphs behind `&mut self` (the backend, the codec), so each use is serialised, and
// `launch` binds the context to whichever thread calls it.
unsafe impl Send for Graph {}

impl Graph {
    /// Records what `enqueue` puts on `gpu`'s stream (without running it) as a graph.
    pub fn capture(
        gpu: &Gpu,
        enqueue: impl FnOnce(&Gpu) -> Result<(), CudaError>,
    ) -> Result<Self, CudaError> {
        gpu.stream
            .begin_capture(dsys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let enq = enqueue(gpu);
        let g = gpu.stream.end_capture(dsys::CUgraphInstantiate_flags(0))?;
        enq?;
        let g = g.ok_or_else(|| CudaError::Driver("graph capture produced no graph".into()))?;
        g.upload()?;
        Ok(Self(g))
    }

    /// Replays the graph on the stream it was captured from.
    pub fn launch(&self) -> Result<(), CudaError> {
        self.0.launch()?;
        Ok(())
    }
}
