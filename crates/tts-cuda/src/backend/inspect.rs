//! What benchmarks and tests read from a [`CudaBackend`] (tuning, weight bytes, logits)
//! and the stage replays they time.

use super::{Codec, CudaBackend, GraphKind};
use crate::codec::DevCodec;
use crate::device::Gpu;
use crate::error::CudaError;
use crate::linear::Linear;
use crate::routing::TunedShape;

impl CudaBackend {
    /// Prefix cache (hits, misses, heads held) since start-up.
    pub fn prefix_stats(&self) -> (u64, u64, usize) {
        (self.prefix.hits, self.prefix.misses, self.prefix.len())
    }

    /// What start-up tuning measured and chose for each batched layer shape.
    pub fn tuning(&self) -> &[TunedShape] {
        &self.tuning
    }

    /// What the start-up cuBLASLt tuning measured and kept.
    pub fn lt_tuning(&self) -> &[crate::lt::LtTuned] {
        &self.lt_tuning
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// One traced launch of the persistent talker layers (`talker`) or code-predictor loop
    /// for `n` rows, on the inputs last written (benchmarks); None when that stage runs
    /// launch by launch.
    pub fn trace_persistent(
        &mut self,
        talker: bool,
        n: usize,
    ) -> Result<Option<Vec<crate::persistent::PhaseStat>>, CudaError> {
        let b = self.bucket(n);
        let khz =
            f64::from(self.gpu.ctx.attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
            )?);
        let p = if talker {
            self.talker_layers.as_mut()
        } else {
            self.cp_loop.as_mut()
        };
        match p {
            Some(p) if b <= p.max_rows() => p.trace(&self.gpu, b, khz).map(Some),
            _ => Ok(None),
        }
    }

    /// The device and the GPU codec (none when audio is decoded on the CPU).
    pub(crate) fn gpu_codec_mut(&mut self) -> Option<(&Gpu, &mut DevCodec)> {
        match &mut self.codec {
            Codec::Gpu(c) => Some((&self.gpu, c)),
            Codec::Cpu(..) => None,
        }
    }

    /// Whether audio is decoded on the GPU.
    pub fn gpu_codec(&self) -> bool {
        !matches!(self.codec, Codec::Cpu(..))
    }

    /// Bytes of weights one talker step and one code-predictor loop read (once each).
    pub fn weight_bytes(&self) -> (u64, u64) {
        let lin = |l: &Linear| l.bf16_bytes() as u64;
        let stack = |s: &crate::weights::DevStack| s.layer_bytes() as u64;
        let t = stack(&self.talker.stack)
            + lin(&self.talker.codec_head)
            + lin(&self.talker.fc1)
            + lin(&self.talker.fc2);
        let per_step = stack(&self.cp.stack);
        let heads: u64 = self.cp.lm_heads.iter().map(lin).sum();
        let proj = self.cp.projection.as_ref().map_or(0, lin);
        (t, 15 * per_step + heads + proj)
    }

    /// Replays (or enqueues) the talker-step or code-predictor work of bucket `b` with the
    /// inputs as last written; no host sync. For benchmarks.
    pub fn replay(&mut self, talker: bool, b: usize) -> Result<(), CudaError> {
        let kind = if talker {
            GraphKind::TalkerStep
        } else {
            GraphKind::CodePredictor
        };
        self.run(kind, b)
    }

    /// The first `rows` rows of the last logits computed (talker: `[rows][3072]` after a
    /// prefill or step; code predictor: its last head). For parity tests.
    pub fn debug_logits(&self, rows: usize, width: usize) -> Result<Vec<f32>, CudaError> {
        self.gpu.read(&self.ws.logits, rows * width)
    }
}
