//! A prefill and a talker step of other slots as one talker pass
//! (`CudaOptions::merge_prefill`): the prompts' tokens and one token per step row through
//! the layers together (`talker::prefill_with_step`), so the talker's weights are read
//! once for both and the new requests come out ready for the same code-predictor call as
//! the stepped ones. When either part would fail its checks, or the two do not fit one
//! pass, they run one after the other instead, each with its own result.

use tts_model::backend::{PrefillRow, StepRow};
use tts_model::{Backend, BackendError};

use super::CudaBackend;
use crate::prefill_plan::{merged_plan, PrefillJob, StepToken};
use crate::talker::{prefill_with_step, write_prefill_inputs};

/// The two parts' results.
type Parts = (
    Result<Vec<u32>, BackendError>,
    Result<Vec<u32>, BackendError>,
);

impl CudaBackend {
    /// `Backend::prefill_and_step`: merged when on, both parts check out and they fit one
    /// pass; else one after the other.
    pub(super) fn merged_or_apart(
        &mut self,
        prompts: &[PrefillRow<'_>],
        step: &[StepRow],
    ) -> Parts {
        if !self.opts.merge_prefill || prompts.is_empty() || step.is_empty() {
            return (self.prefill(prompts), self.talker_step(step));
        }
        match self.merged(prompts, step) {
            Ok(Some(parts)) => parts,
            Ok(None) => (self.prefill(prompts), self.talker_step(step)),
            // a failure of the pass itself: both parts' rows are in doubt
            Err(e) => (Err(e.clone()), Err(e)),
        }
    }

    /// The merged pass, or `None` (nothing run) when a part fails its checks or the two
    /// do not fit one pass of the workspace.
    fn merged(
        &mut self,
        prompts: &[PrefillRow<'_>],
        step: &[StepRow],
    ) -> Result<Option<Parts>, BackendError> {
        self.gpu.bind().map_err(BackendError::from)?;
        let Ok(packed) = self.check_step(step) else {
            return Ok(None);
        };
        let Ok((jobs, stores)) = self.prefill_jobs(prompts) else {
            return Ok(None);
        };
        // (the merged pass takes ids only: cloned-voice prompts prefill apart)
        if jobs.iter().any(|j| !j.extra.is_empty()) {
            return Ok(None);
        }
        let limits = self.opts.limits;
        let n = jobs.iter().map(PrefillJob::tokens).sum::<usize>() + step.len();
        let rows = prompts.len() + step.len();
        if n > limits.max_prefill_tokens || rows > limits.max_batch {
            return Ok(None);
        }
        let tokens: Vec<StepToken> = packed
            .iter()
            .map(|&(slot, position, text)| (slot.0 as i32, position, text))
            .collect();
        let plan = merged_plan(&jobs, &tokens);
        write_prefill_inputs(&self.gpu, &mut self.ws, &plan)?;
        prefill_with_step(
            &self.gpu,
            &self.talker,
            &self.cp,
            &self.ws,
            (n, step.len(), rows),
            self.rules,
        )?;
        let codes = self.gpu.read(&self.ws.codes, rows)?;
        let (prefilled, stepped) = codes.split_at(prompts.len());
        let mut out = Vec::with_capacity(prompts.len());
        for ((r, store), &code) in prompts.iter().zip(&stores).zip(prefilled) {
            self.finish_prefill(r, *store, code as u32)?;
            out.push(code as u32);
        }
        let stepped = self.finish_step(step, stepped);
        Ok(Some((Ok(out), stepped)))
    }
}
