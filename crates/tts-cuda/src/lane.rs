//! A second stream for the code predictor: its own device handle (stream, cuBLAS),
//! workspace and graphs, over the backend's weights and per-slot state. A code-predictor
//! call on the lane runs side by side with a talker step of other slots on the main
//! stream (`CudaBackend::predict_and_step`): each alone leaves most of the GPU idle
//! (latency-bound kernels of a few blocks), together they fill more of it
//! (`bench/results/2026-12-02-h200-side-by-side`).

use std::collections::HashMap;

use tts_model::config::ModelConfig;

use crate::code_predictor::predict;
use crate::device::{Gpu, Graph, SmallCall};
use crate::error::CudaError;
use crate::routing::LinearPaths;
use crate::weights::{DevCodePredictor, DevTalker};
use crate::workspace::{Limits, SlotBuffers, Workspace};

pub struct CpLane {
    pub gpu: Gpu,
    pub ws: Workspace,
    graphs: HashMap<usize, Graph>,
    use_graphs: bool,
    /// Loops of at most this many rows ask for the most L1 (`CudaOptions::max_l1_rows`),
    /// whether one-row loops take the staged GEMV (`CudaOptions::staged_gemv`) and up to
    /// how many rows the staged MMA (`CudaOptions::staged_mma_rows`).
    small: (usize, (bool, usize)),
}

impl CpLane {
    /// Opens device `ordinal` again (same context, a new stream) with a workspace for
    /// batches of up to `limits.max_batch` rows; its linear layers take `paths`, as the
    /// main workspace's do.
    pub fn new(
        ordinal: usize,
        (pdl, max_l1_rows, staged): (bool, usize, (bool, usize)),
        cfg: &ModelConfig,
        limits: Limits,
        paths: &LinearPaths,
        use_graphs: bool,
    ) -> Result<Self, CudaError> {
        let mut gpu = Gpu::open(ordinal)?;
        gpu.pdl &= pdl;
        // its GEMMs on cublasGemmEx: cuBLASLt's tuning belongs to the main handle
        if let Some(lt) = &gpu.lt {
            lt.set_enabled(false);
        }
        // no talker cache or per-slot state of its own: those of the main workspace serve
        let own = Limits {
            max_slots: 1,
            max_positions: 1,
            ..limits
        };
        let mut ws = Workspace::new(&gpu, cfg, own)?;
        ws.scratch.paths = paths.clone();
        Ok(Self {
            gpu,
            ws,
            graphs: HashMap::new(),
            use_graphs,
            small: (max_l1_rows, staged),
        })
    }

    fn mode(&self, b: usize) -> SmallCall {
        self.gpu.small_call_for(b, self.small.0, self.small.1)
    }

    /// Captures the loop's graph for bucket `b` (when graphs are on).
    pub fn prepare(
        &mut self,
        t: &DevTalker,
        cp: &DevCodePredictor,
        state: SlotBuffers,
        b: usize,
    ) -> Result<(), CudaError> {
        if self.use_graphs && !self.graphs.contains_key(&b) {
            let (ws, mode) = (&self.ws, self.mode(b));
            let g = Graph::capture(&self.gpu, |gpu| {
                gpu.with_small_call(mode, || predict(gpu, t, cp, ws, state, b, None))
            })?;
            self.graphs.insert(b, g);
        }
        Ok(())
    }

    /// Enqueues the loop for bucket `b` on the lane's stream (inputs written to
    /// `ws.inputs` before); no host sync.
    pub fn launch(
        &mut self,
        t: &DevTalker,
        cp: &DevCodePredictor,
        state: SlotBuffers,
        b: usize,
    ) -> Result<(), CudaError> {
        self.prepare(t, cp, state, b)?;
        match self.graphs.get(&b) {
            Some(g) => g.launch(),
            None => self.gpu.with_small_call(self.mode(b), || {
                predict(&self.gpu, t, cp, &self.ws, state, b, None)
            }),
        }
    }
}
