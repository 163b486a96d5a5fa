//! The engine core: admitted requests, the backend and a clock, driven one step at a time.
//! A step asks the scheduler for a plan and runs it (`exec`); between steps `poll` takes
//! in cancellations and streamed text and delivers held audio. The engine thread and the
//! simulator drive the same core; only their clocks, backends and clients differ.

use std::time::Duration;

use tts_model::{Backend, BackendInfo};

use crate::client::Client;
use crate::clock::Clock;
use crate::error::RequestFailure;
use crate::metrics;
use crate::profile::Profile;
use crate::request::{Event, RequestId, Started};
use crate::scheduler::{self, Reason, RequestView, Stage};
use crate::state::{Job, Phase, RequestState, StreamSettings};
use crate::trim::TrimConfig;

/// What the core needs to know besides the backend.
#[derive(Debug, Clone)]
pub struct CoreSettings {
    pub profile: Profile,
    pub trim: TrimConfig,
    /// Most requests holding a slot at once.
    pub max_active: usize,
    /// The text id that ends streamed text (`tts_eos_token_id`).
    pub tts_eos: u32,
}

/// One step the core ran (the simulator's log, tests).
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub stage: Stage,
    pub rows: Vec<RequestId>,
    /// The other stage run with this one in the same call (code predictor with talker step
    /// side by side, or prefill merged with talker step), and its rows.
    pub partner_stage: Option<Stage>,
    pub partner_rows: Vec<RequestId>,
    pub reason: Reason,
    pub started: Duration,
    pub ended: Duration,
    /// Requests this step failed.
    pub failed: Vec<RequestId>,
}

pub struct Core<C: Client> {
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) clock: Box<dyn Clock>,
    pub(crate) settings: CoreSettings,
    pub(crate) info: BackendInfo,
    pub(crate) requests: Vec<RequestState<C>>,
    next_order: u64,
    pub(crate) step_no: u64,
    active_gauge: metrics::GaugeShare,
}

impl<C: Client> Core<C> {
    pub fn new(
        backend: Box<dyn Backend>,
        clock: Box<dyn Clock>,
        mut settings: CoreSettings,
    ) -> Self {
        let info = backend.info().clone();
        settings.max_active = settings.max_active.clamp(1, info.max_slots.max(1));
        Self {
            backend,
            clock,
            settings,
            info,
            requests: Vec::new(),
            next_order: 0,
            step_no: 0,
            active_gauge: metrics::GaugeShare::default(),
        }
    }

    pub fn now(&self) -> Duration {
        self.clock.now()
    }

    pub fn info(&self) -> &BackendInfo {
        &self.info
    }

    /// Requests holding a slot.
    pub fn active(&self) -> usize {
        self.requests.iter().filter(|r| r.slot.is_some()).count()
    }

    /// Requests still in the core (holding a slot, or with events not yet delivered).
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Whether another request can be admitted.
    pub fn has_room(&self) -> bool {
        self.active() < self.settings.max_active
    }

    /// Admits a job: allocates its slot and sends `Started`. A job whose client is gone is
    /// dropped; one whose slot cannot be allocated fails.
    pub fn admit(&mut self, mut job: Job<C>) {
        if job.client.is_cancelled() {
            metrics::cancelled();
            return;
        }
        let now = self.now();
        let slot = match self.backend.alloc_slot(&job.sampling) {
            Ok(slot) => slot,
            Err(e) => {
                tracing::error!(request = %job.id, error = %e, "slot allocation failed");
                metrics::failed();
                let _ = job.client.try_send(Event::Failed(RequestFailure::Backend));
                return;
            }
        };
        let settings = StreamSettings {
            trim: self.settings.trim,
            sample_rate: self.info.sample_rate,
            samples_per_frame: self.info.samples_per_frame,
            max_positions: self.info.max_positions,
        };
        self.next_order += 1;
        let mut r = RequestState::new(job, self.next_order, slot, now, settings);
        r.span
            .in_scope(|| tracing::debug!(slot = slot.0, queue_wait = ?r.queue_wait(), "admitted"));
        metrics::admitted(r.queue_wait());
        r.queue_event(Event::Started(Started {
            id: r.id,
            seed: r.seed(),
            sample_rate: self.info.sample_rate,
            queue_wait: r.queue_wait(),
        }));
        self.requests.push(r);
        self.poll_one(self.requests.len() - 1, now);
        let n = self.active();
        self.active_gauge.active(n);
    }

    /// Takes in cancellations and streamed text, delivers held events, and retires
    /// requests that are over. Frees the slot of a cancelled request at once.
    pub fn poll(&mut self) {
        let now = self.now();
        for i in 0..self.requests.len() {
            self.poll_one(i, now);
        }
        self.retire();
    }

    fn poll_one(&mut self, i: usize, now: Duration) {
        let eos = self.settings.tts_eos;
        let r = &mut self.requests[i];
        if r.phase == Phase::Cancelled {
            return;
        }
        if r.client.is_cancelled() {
            if !r.phase.is_terminal() {
                r.span.in_scope(|| tracing::debug!("cancelled"));
                metrics::cancelled();
            }
            r.cancel();
            self.release(i);
            return;
        }
        if !r.phase.is_terminal() {
            if let Some(update) = r.client.poll_text() {
                if let Err(failure) = r.apply_text(update, eos) {
                    self.fail(i, failure);
                }
            }
        }
        self.deliver(i, now);
    }

    /// Delivers request `i`'s held events and records what that did.
    pub(crate) fn deliver(&mut self, i: usize, now: Duration) {
        let r = &mut self.requests[i];
        let d = r.deliver(now);
        if let Some(ttfa) = d.first_audio {
            r.span
                .in_scope(|| tracing::debug!(ttfa = ?ttfa, "first audio"));
            metrics::first_audio(ttfa);
        }
        for gap in d.gaps {
            metrics::underrun(gap);
        }
        if d.closed && !r.phase.is_terminal() {
            r.cancel();
            metrics::cancelled();
            self.release(i);
        }
    }

    /// Frees request `i`'s slot, if it holds one.
    pub(crate) fn release(&mut self, i: usize) {
        if let Some(slot) = self.requests[i].slot.take() {
            self.backend.free_slot(slot);
        }
    }

    /// Fails request `i`: frees its slot and queues `Failed`.
    pub(crate) fn fail(&mut self, i: usize, failure: RequestFailure) {
        let r = &mut self.requests[i];
        if r.phase.is_terminal() {
            return;
        }
        r.span
            .in_scope(|| tracing::warn!(error = %failure, "request failed"));
        metrics::failed();
        r.fail(failure);
        self.release(i);
    }

    /// Completes request `i` if its generation ended and all its audio is decoded, or
    /// starts its text's next segment on a fresh slot.
    pub(crate) fn complete_if_done(&mut self, i: usize) {
        if !self.requests[i].is_complete() {
            return;
        }
        if self.requests[i].has_next_segment() {
            return self.next_segment(i);
        }
        let r = &mut self.requests[i];
        r.complete();
        r.span
            .in_scope(|| tracing::debug!(frames = r.frames_generated(), "done"));
        metrics::completed();
        self.release(i);
    }

    /// Gives request `i`'s slot back and takes a fresh one for its next segment (the
    /// slot just freed is free, so only a failing backend refuses); the segment's prompt
    /// then waits for prefill like a new request's.
    fn next_segment(&mut self, i: usize) {
        self.release(i);
        let params = self.requests[i].next_sampling();
        match self.backend.alloc_slot(&params) {
            Ok(slot) => {
                let r = &mut self.requests[i];
                r.span.in_scope(|| {
                    tracing::debug!(
                        slot = slot.0,
                        frames = r.frames_generated(),
                        "next segment of the text"
                    )
                });
                r.start_next_segment(slot);
            }
            Err(e) => {
                self.requests[i].span.in_scope(
                    || tracing::error!(error = %e, "slot allocation for the next segment failed"),
                );
                self.fail(i, RequestFailure::Backend);
            }
        }
    }

    /// Drops requests that are over and have nothing left to deliver.
    fn retire(&mut self) {
        let before = self.requests.len();
        self.requests.retain(|r| {
            !(r.phase == Phase::Cancelled || (r.phase.is_terminal() && !r.has_outbox()))
        });
        if self.requests.len() != before {
            let n = self.active();
            self.active_gauge.active(n);
        }
    }

    /// Fails every request (shutdown past its deadline).
    pub fn fail_all(&mut self, failure: RequestFailure) {
        for i in 0..self.requests.len() {
            self.fail(i, failure.clone());
        }
        let now = self.now();
        for i in 0..self.requests.len() {
            self.deliver(i, now);
        }
        self.requests.clear();
        self.active_gauge.active(0);
    }

    /// The scheduler's view of every request.
    pub fn views(&self) -> Vec<RequestView> {
        let pad = self.info.tts_pad_token_id;
        self.requests
            .iter()
            .map(|r| r.view(&self.settings.profile.chunks, pad))
            .collect()
    }

    /// Plans and runs one stage (with a backend that runs them side by side, a
    /// code-predictor call and a talker step of other requests together; with one that
    /// merges them, a prefill and a talker step); `None` when nothing can run.
    pub fn step(&mut self) -> Option<StepRecord> {
        let started = self.now();
        let policy = &self.settings.profile.policy;
        let views = self.views();
        let plan = scheduler::plan(&views, started, policy)?;
        let merge = policy.prefill_with_step && self.backend.merges_prefill_with_step();
        let side = policy.side_by_side && self.backend.runs_side_by_side();
        let partner = merge
            .then(|| scheduler::merge_partner(&plan, &views, policy))
            .flatten()
            .or_else(|| {
                side.then(|| scheduler::partner(&plan, &views, policy))
                    .flatten()
            });
        self.step_no += 1;
        let failed = match &partner {
            Some(p) => self.execute_pair(&plan, p),
            None => self.execute(&plan),
        };
        let ended = self.now();
        let partner_stage = partner.as_ref().map(|p| p.stage);
        let partner_rows = partner.map(|p| p.rows).unwrap_or_default();
        for i in 0..self.requests.len() {
            let id = self.requests[i].id;
            if plan.rows.contains(&id) || partner_rows.contains(&id) {
                self.requests[i].last_served = self.step_no;
                self.complete_if_done(i);
                self.deliver(i, ended);
            }
        }
        self.retire();
        Some(StepRecord {
            stage: plan.stage,
            rows: plan.rows,
            partner_stage,
            partner_rows,
            reason: plan.reason,
            started,
            ended,
            failed,
        })
    }
}
