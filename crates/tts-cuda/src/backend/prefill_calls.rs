//! Prefill calls of [`CudaBackend`]: each row checked and its cached prompt head restored,
//! the passes run, the new heads stored.

use tts_model::backend::PrefillRow;
use tts_model::prompt::{CodecInput, PromptPosition};
use tts_model::BackendError;

use super::{CudaBackend, GraphKind, Stage};
use crate::clone_inputs::ExtraRows;
use crate::error::CudaError;
use crate::prefill_plan::{pass_plan, repeated_slot, token_bucket, PrefillJob};
use crate::talker::{prefill, prefill_with_extra, write_prefill_inputs};

/// A prompt head a prefill stores in the prefix cache after its pass (one not cached yet).
type HeadToStore<'a> = Option<&'a [PromptPosition]>;

impl CudaBackend {
    /// Checks one prefill row and restores its cached prompt head (when there is one):
    /// the tokens it still needs, and the head to store after its pass (a head not cached
    /// yet).
    pub(super) fn prefill_job<'a>(
        &mut self,
        r: &PrefillRow<'a>,
    ) -> Result<(PrefillJob, HeadToStore<'a>), BackendError> {
        let max_tokens = self.opts.limits.max_prefill_tokens;
        let cap = self.info.max_positions;
        let text_vocab = self.text_vocab;
        let n = r.prompt.positions.len();
        if n == 0 {
            return Err(BackendError::SlotState {
                slot: r.slot.0,
                message: "an empty prompt has nothing to prefill".into(),
            });
        }
        let st = self.slot(r.slot)?;
        if st.stage != Stage::Fresh {
            return Err(BackendError::SlotState {
                slot: r.slot.0,
                message: "already prefilled".into(),
            });
        }
        if n > max_tokens || st.len + n > cap {
            return Err(BackendError::ContextFull {
                slot: r.slot.0,
                capacity: max_tokens.min(cap),
            });
        }
        let start = st.len;
        // A fresh slot whose prompt head was prefilled before gets that head's cache
        // rows and prefills only the rest (at least the last position, whose output
        // samples code 0).
        let head = r.prompt.head_len.min(n - 1);
        let heads = &r.prompt.positions[..head];
        let mut text = Vec::with_capacity(n);
        let mut codec = Vec::with_capacity(n);
        let mut extra = Vec::new();
        let slot_error = |message: String| BackendError::SlotState {
            slot: r.slot.0,
            message,
        };
        for (i, p) in r.prompt.positions.iter().enumerate() {
            let t =
                p.text
                    .filter(|&t| (t as usize) < text_vocab)
                    .ok_or(BackendError::SlotState {
                        slot: r.slot.0,
                        message: "every prompt position needs an in-range text token".into(),
                    })?;
            text.push(t as i32);
            codec.push(match p.codec {
                None => -1,
                Some(CodecInput::Id(c)) => c as i32,
                Some(input) => {
                    let inputs = self.clone_inputs.as_ref().ok_or_else(|| {
                        slot_error("a cloned-voice prompt, and this is not a Base model".into())
                    })?;
                    if let Some(v) = inputs.vector(r.prompt, input).map_err(slot_error)? {
                        extra.push((i, v));
                    }
                    -1
                }
            });
        }
        let cached = start == 0
            && head > 0
            && self.prefix.enabled()
            && self.prefix.restore(&self.gpu, heads, r.slot.0 as usize)?;
        let skip = if cached { head } else { 0 };
        let store = (start == 0 && head > 0 && !cached).then_some(heads);
        let job = PrefillJob {
            slot: r.slot.0 as i32,
            start: start + skip,
            text: text.split_off(skip),
            codec: codec.split_off(skip),
            // (a cached head's extras are in its cache rows)
            extra: extra
                .into_iter()
                .filter(|(i, _)| *i >= skip)
                .map(|(i, v)| (i - skip, v))
                .collect(),
        };
        Ok((job, store))
    }

    /// Every row of a prefill call checked (and its cached head restored) before any pass
    /// runs: each row's job, and the head to store after its pass.
    pub(super) fn prefill_jobs<'a>(
        &mut self,
        rows: &[PrefillRow<'a>],
    ) -> Result<(Vec<PrefillJob>, Vec<HeadToStore<'a>>), BackendError> {
        let slots: Vec<u32> = rows.iter().map(|r| r.slot.0).collect();
        if let Some(slot) = repeated_slot(&slots) {
            return Err(BackendError::SlotState {
                slot,
                message: "the same slot twice in one prefill call".into(),
            });
        }
        let mut jobs = Vec::with_capacity(rows.len());
        let mut stores = Vec::with_capacity(rows.len());
        for r in rows {
            let (job, store) = self.prefill_job(r)?;
            jobs.push(job);
            stores.push(store);
        }
        Ok((jobs, stores))
    }

    /// A prefilled row's slot after its pass: its new prompt head stored in the prefix
    /// cache, its length and its code 0.
    pub(super) fn finish_prefill(
        &mut self,
        r: &PrefillRow<'_>,
        store: HeadToStore<'_>,
        code: u32,
    ) -> Result<(), BackendError> {
        if let Some(head) = store {
            self.prefix.store(&self.gpu, head, r.slot.0 as usize)?;
        }
        let st = self.slot(r.slot)?;
        st.len += r.prompt.positions.len();
        st.stage = Stage::Code0(code);
        Ok(())
    }

    /// One prefill pass over `jobs` (their tokens in one launch sequence, replayed from the
    /// graph of its token and row buckets when graphs are on): each row's code 0.
    pub(super) fn prefill_pass(&mut self, jobs: &[PrefillJob]) -> Result<Vec<u32>, CudaError> {
        let limits = self.opts.limits;
        let n: usize = jobs.iter().map(PrefillJob::tokens).sum();
        // `passes` keeps a pass within the largest batch, so its row bucket holds it
        let tokens = token_bucket(n, self.opts.prefill_bucket_24);
        let rows = self.prefill_rows_bucket(jobs.len());
        debug_assert!(rows >= jobs.len());
        // (only cloned-voice prompts have extra rows: the other passes build no table)
        let extra = jobs
            .iter()
            .any(|j| !j.extra.is_empty())
            .then(|| ExtraRows::for_pass(jobs.iter().map(|j| (j.tokens(), &j.extra[..]))));
        // a pass with extra rows runs eagerly (the graphs' inputs are ids only)
        let padded = self.opts.graphs && tokens <= limits.max_prefill_tokens && extra.is_none();
        let pad = self.info.tts_pad_token_id as i32;
        let plan = pass_plan(jobs, pad, padded.then_some((tokens, rows)));
        let kind = GraphKind::Prefill { rows };
        if padded {
            self.graph(kind, tokens)?;
        }
        write_prefill_inputs(&self.gpu, &mut self.ws, &plan)?;
        // (kept alive until the codes are read: the pass reads them)
        let mut extra_bufs = None;
        if padded {
            self.run(kind, tokens)?;
        } else if let Some(extra) = extra {
            let bufs = (self.gpu.upload(&extra.table)?, self.gpu.upload(&extra.ids)?);
            let ptrs = (bufs.0.ptr, bufs.1.ptr);
            extra_bufs = Some(bufs);
            prefill_with_extra(
                &self.gpu,
                &self.talker,
                &self.ws,
                (n, jobs.len()),
                ptrs,
                self.rules,
            )?;
        } else {
            prefill(&self.gpu, &self.talker, &self.ws, n, jobs.len(), self.rules)?;
        }
        let codes = self.gpu.read(&self.ws.codes, jobs.len())?;
        drop(extra_bufs);
        Ok(codes.into_iter().map(|c| c as u32).collect())
    }
}
