//! Running a plan: one backend call for the plan's stage and rows, then each row's result
//! into its request's state. A failed call fails the request the error names, if it names
//! one of the rows (the others are left as they were, to run again: backends check their
//! rows before changing any state); otherwise it fails every row of the call. The engine
//! itself goes on either way.

use tts_model::{BackendError, CodecRow, Frame, PrefillRow, SlotId, StepRow};

use crate::client::Client;
use crate::core::Core;
use crate::error::RequestFailure;
use crate::metrics;
use crate::request::RequestId;
use crate::scheduler::{Plan, Stage};
use crate::state::RequestState;

impl<C: Client> Core<C> {
    /// Runs `plan`; returns the requests it failed.
    pub(crate) fn execute(&mut self, plan: &Plan) -> Vec<RequestId> {
        let idx = self.indices(plan);
        let span = tracing::debug_span!("stage", stage = plan.stage.name(), rows = idx.len());
        let _entered = span.enter();
        let t0 = self.now();
        let result = match plan.stage {
            Stage::Prefill => self.run_prefill(&idx),
            Stage::CodePredictor => self.run_code_predictor(&idx),
            Stage::TalkerStep => self.run_talker_step(&idx),
            Stage::Codec => self.run_codec(&idx),
        };
        let took = self.now().saturating_sub(t0);
        metrics::stage(plan.stage, idx.len(), took);
        tracing::trace!(stage = plan.stage.name(), rows = idx.len(), reason = ?plan.reason, took = ?took, "step");
        match result {
            Ok(()) => Vec::new(),
            Err(e) => self.fail_rows(plan.stage, &idx, e),
        }
    }

    fn run_prefill(&mut self, idx: &[usize]) -> Result<(), BackendError> {
        let Core {
            backend, requests, ..
        } = self;
        let out = backend.prefill(&prefill_rows(requests, idx)?)?;
        self.on_prefilled(idx, out)
    }

    fn on_prefilled(&mut self, idx: &[usize], out: Vec<u32>) -> Result<(), BackendError> {
        let eos = self.info.codec_eos;
        check_rows(out.len(), idx.len())?;
        for (&i, code0) in idx.iter().zip(out) {
            self.requests[i].on_prefill(code0, eos);
        }
        Ok(())
    }

    fn run_code_predictor(&mut self, idx: &[usize]) -> Result<(), BackendError> {
        let slots = self.slots(idx)?;
        let out = self.backend.predict_codes(&slots)?;
        self.on_frames(idx, out)
    }

    fn on_frames(&mut self, idx: &[usize], out: Vec<Frame>) -> Result<(), BackendError> {
        check_rows(out.len(), idx.len())?;
        for (&i, frame) in idx.iter().zip(out) {
            self.requests[i].on_frame(frame);
        }
        metrics::frames(idx.len());
        Ok(())
    }

    fn step_rows(&self, idx: &[usize]) -> Result<Vec<StepRow>, BackendError> {
        let pad = self.info.tts_pad_token_id;
        let rows: Vec<StepRow> = idx
            .iter()
            .filter_map(|&i| {
                let r = &self.requests[i];
                Some(StepRow {
                    slot: r.slot?,
                    text_token: r.text_token(pad)?,
                })
            })
            .collect();
        check_rows(rows.len(), idx.len())?;
        Ok(rows)
    }

    fn run_talker_step(&mut self, idx: &[usize]) -> Result<(), BackendError> {
        let rows = self.step_rows(idx)?;
        let out = self.backend.talker_step(&rows)?;
        self.on_codes0(idx, out)
    }

    fn on_codes0(&mut self, idx: &[usize], out: Vec<u32>) -> Result<(), BackendError> {
        let eos = self.info.codec_eos;
        check_rows(out.len(), idx.len())?;
        for (&i, code0) in idx.iter().zip(out) {
            self.requests[i].on_step(code0, eos);
        }
        Ok(())
    }

    /// Runs two plans of other requests as one backend call: a code-predictor plan and a
    /// talker-step plan side by side on the device, or a prefill plan merged into a
    /// talker-step plan; each part's rows fail or advance on their own. Both stages'
    /// duration metrics get the call's wall time, and the shared-call histogram gets it
    /// once. Returns the requests it failed.
    pub(crate) fn execute_pair(&mut self, a: &Plan, b: &Plan) -> Vec<RequestId> {
        let (cp, st) = match (a.stage, b.stage) {
            (Stage::CodePredictor, Stage::TalkerStep) => (a, b),
            (Stage::TalkerStep, Stage::CodePredictor) => (b, a),
            (Stage::Prefill, Stage::TalkerStep) => return self.execute_merged(a, b),
            (Stage::TalkerStep, Stage::Prefill) => return self.execute_merged(b, a),
            _ => {
                let mut failed = self.execute(a);
                failed.extend(self.execute(b));
                return failed;
            }
        };
        let cp_idx = self.indices(cp);
        let st_idx = self.indices(st);
        let span = tracing::debug_span!(
            "stage",
            stage = "code_predictor+talker_step",
            rows = cp_idx.len() + st_idx.len()
        );
        let _entered = span.enter();
        let t0 = self.now();
        let (frames, codes) = match (self.slots(&cp_idx), self.step_rows(&st_idx)) {
            (Ok(slots), Ok(rows)) => self.backend.predict_and_step(&slots, &rows),
            (slots, rows) => (
                slots.and_then(|s| self.backend.predict_codes(&s)),
                rows.and_then(|r| self.backend.talker_step(&r)),
            ),
        };
        let took = self.now().saturating_sub(t0);
        metrics::shared_call(
            (Stage::CodePredictor, cp_idx.len()),
            (Stage::TalkerStep, st_idx.len()),
            took,
        );
        tracing::trace!(cp_rows = cp_idx.len(), step_rows = st_idx.len(), reason = ?a.reason, took = ?took, "side-by-side step");
        let mut failed = Vec::new();
        if let Err(e) = frames.and_then(|f| self.on_frames(&cp_idx, f)) {
            failed.extend(self.fail_rows(Stage::CodePredictor, &cp_idx, e));
        }
        if let Err(e) = codes.and_then(|c| self.on_codes0(&st_idx, c)) {
            failed.extend(self.fail_rows(Stage::TalkerStep, &st_idx, e));
        }
        failed
    }

    /// A prefill plan and a talker-step plan (other requests) as one backend call
    /// (`Backend::prefill_and_step`), each part's rows failing or advancing on their own.
    fn execute_merged(&mut self, pf: &Plan, st: &Plan) -> Vec<RequestId> {
        let pf_idx = self.indices(pf);
        let st_idx = self.indices(st);
        let span = tracing::debug_span!(
            "stage",
            stage = "prefill+talker_step",
            rows = pf_idx.len() + st_idx.len()
        );
        let _entered = span.enter();
        let t0 = self.now();
        let step_rows = self.step_rows(&st_idx);
        let Core {
            backend, requests, ..
        } = self;
        let (codes0, codes) = match (prefill_rows(requests, &pf_idx), step_rows) {
            (Ok(prompts), Ok(rows)) => backend.prefill_and_step(&prompts, &rows),
            (prompts, rows) => (
                prompts.and_then(|p| backend.prefill(&p)),
                rows.and_then(|r| backend.talker_step(&r)),
            ),
        };
        let took = self.now().saturating_sub(t0);
        metrics::shared_call(
            (Stage::Prefill, pf_idx.len()),
            (Stage::TalkerStep, st_idx.len()),
            took,
        );
        tracing::trace!(prompts = pf_idx.len(), step_rows = st_idx.len(), reason = ?pf.reason, took = ?took, "merged step");
        let mut failed = Vec::new();
        let prefilled = codes0.and_then(|out| self.on_prefilled(&pf_idx, out));
        if let Err(e) = prefilled {
            failed.extend(self.fail_rows(Stage::Prefill, &pf_idx, e));
        }
        if let Err(e) = codes.and_then(|c| self.on_codes0(&st_idx, c)) {
            failed.extend(self.fail_rows(Stage::TalkerStep, &st_idx, e));
        }
        failed
    }

    /// Indices of a plan's rows among the requests.
    fn indices(&self, plan: &Plan) -> Vec<usize> {
        plan.rows
            .iter()
            .filter_map(|id| self.requests.iter().position(|r| r.id == *id))
            .collect()
    }

    fn run_codec(&mut self, idx: &[usize]) -> Result<(), BackendError> {
        let spf = self.info.samples_per_frame;
        let cap = self.settings.profile.policy.codec_max_frames;
        let Core {
            backend, requests, ..
        } = self;
        let rows: Vec<CodecRow<'_>> = idx
            .iter()
            .filter_map(|&i| {
                let r = &requests[i];
                let frames = r.undecoded();
                Some(CodecRow {
                    slot: r.slot?,
                    frames: &frames[..frames.len().min(cap)],
                })
            })
            .collect();
        check_rows(rows.len(), idx.len())?;
        let counts: Vec<usize> = rows.iter().map(|r| r.frames.len()).collect();
        let out = backend.codec_decode(&rows)?;
        check_rows(out.len(), idx.len())?;
        drop(rows);
        let mut bad = Vec::new();
        for ((&i, pcm), n) in idx.iter().zip(out).zip(counts) {
            if pcm.len() == n * spf {
                requests[i].on_decoded(n, &pcm);
            } else {
                // Other rows' audio is fine and already advanced their codec streams.
                tracing::error!(request = %requests[i].id, samples = pcm.len(), frames = n,
                    "codec returned the wrong number of samples");
                bad.push(i);
            }
        }
        for i in bad {
            self.fail(i, RequestFailure::Backend);
        }
        Ok(())
    }

    fn slots(&self, idx: &[usize]) -> Result<Vec<SlotId>, BackendError> {
        let slots: Vec<SlotId> = idx.iter().filter_map(|&i| self.requests[i].slot).collect();
        check_rows(slots.len(), idx.len())?;
        Ok(slots)
    }

    /// Fails the request a backend error names, or every row of the call.
    fn fail_rows(&mut self, stage: Stage, idx: &[usize], error: BackendError) -> Vec<RequestId> {
        let culprit = error_slot(&error).and_then(|slot| {
            idx.iter()
                .copied()
                .find(|&i| self.requests[i].slot == Some(slot))
        });
        let targets: Vec<usize> = match culprit {
            Some(i) => vec![i],
            None => idx.to_vec(),
        };
        let ids: Vec<RequestId> = targets.iter().map(|&i| self.requests[i].id).collect();
        tracing::error!(stage = stage.name(), error = %error, failed = ?ids, "backend call failed");
        for i in targets {
            self.fail(i, RequestFailure::Backend);
        }
        ids
    }
}

/// The slot a backend error is about, if it names one.
fn error_slot(error: &BackendError) -> Option<SlotId> {
    match error {
        BackendError::BadSlot(s) => Some(SlotId(*s)),
        BackendError::SlotState { slot, .. } | BackendError::ContextFull { slot, .. } => {
            Some(SlotId(*slot))
        }
        BackendError::NoFreeSlot { .. } | BackendError::Device(_) => None,
    }
}

/// The prefill rows of requests `idx` (each with its slot and prompt).
fn prefill_rows<'a, C: Client>(
    requests: &'a [RequestState<C>],
    idx: &[usize],
) -> Result<Vec<PrefillRow<'a>>, BackendError> {
    let rows: Vec<PrefillRow<'a>> = idx
        .iter()
        .filter_map(|&i| {
            let r = &requests[i];
            Some(PrefillRow {
                slot: r.slot?,
                prompt: r.prompt()?,
            })
        })
        .collect();
    check_rows(rows.len(), idx.len())?;
    Ok(rows)
}

fn check_rows(got: usize, want: usize) -> Result<(), BackendError> {
    if got == want {
        Ok(())
    } else {
        Err(BackendError::Device(format!(
            "{got} rows where {want} were expected"
        )))
    }
}
