//! The engine thread: the one owner of the backend. It warms the backend up, then loops:
//! take in cancellations, text and slot-free admissions, run one planned stage; when
//! nothing can run it blocks on its inbox and wake channel (never sleeps; it polls them
//! first for `EngineConfig::idle_spin` after its last work, zero by default).
//! Shutdown stops admissions at the handle, drains what is in flight until the deadline,
//! then fails what is left.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, TryRecvError};
use tts_model::{Prompt, SamplingParams};

use crate::client::ChannelClient;
use crate::core::Core;
use crate::error::RequestFailure;
use crate::metrics;
use crate::request::Event;
use crate::state::Job;

/// State shared by the engine thread and its handles.
#[derive(Debug, Default)]
pub(crate) struct EngineShared {
    pub ready: AtomicBool,
    /// Warm-up outcome, once known (`Err` holds the message).
    pub started: Mutex<Option<Result<(), String>>>,
    pub started_cv: Condvar,
    /// Shutdown requested: drain until this instant.
    pub shutdown: OnceLock<Instant>,
    pub stopped: AtomicBool,
    pub active: AtomicUsize,
}

impl EngineShared {
    fn set_started(&self, outcome: Result<(), String>) {
        self.ready.store(outcome.is_ok(), Ordering::Release);
        if let Ok(mut s) = self.started.lock() {
            *s = Some(outcome);
        }
        self.started_cv.notify_all();
    }
}

/// A short synthesis run before the engine reports ready.
pub(crate) struct Warmup {
    pub prompt: Prompt,
    pub sampling: SamplingParams,
}

/// Why the idle engine woke up.
enum Woken {
    Job(Box<Job<ChannelClient>>),
    Wake,
    InboxClosed,
    WakeClosed,
    Deadline,
}

pub(crate) struct EngineLoop {
    pub core: Core<ChannelClient>,
    pub inbox: Receiver<Job<ChannelClient>>,
    pub wake: Receiver<()>,
    pub shared: Arc<EngineShared>,
    pub warmup: Option<Warmup>,
    pub queue_gauge: metrics::GaugeShare,
    pub idle_spin: Duration,
}

impl EngineLoop {
    pub fn run(mut self) {
        let _span = tracing::info_span!("engine", model = %self.core.info().name).entered();
        if let Some(w) = self.warmup.take() {
            let t0 = Instant::now();
            let out = tts_model::generate::synthesize(
                self.core.backend.as_mut(),
                &w.prompt,
                &w.sampling,
                2,
                true,
            );
            if let Err(e) = out {
                tracing::error!(error = %e, "warm-up failed; the engine stops");
                self.shared.set_started(Err(e.to_string()));
                self.stop();
                return;
            }
            tracing::info!(took = ?t0.elapsed(), "warm-up done");
        }
        self.shared.set_started(Ok(()));
        self.serve();
        self.stop();
    }

    fn serve(&mut self) {
        let mut inbox_open = true;
        let mut last_work = Instant::now();
        loop {
            self.core.poll();
            while inbox_open && self.core.has_room() {
                match self.inbox.try_recv() {
                    Ok(job) => self.admit(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => inbox_open = false,
                }
            }
            self.queue_gauge.queue_depth(self.inbox.len());
            self.shared
                .active
                .store(self.core.active(), Ordering::Relaxed);
            let deadline = self.shared.shutdown.get().copied();
            if deadline.is_some_and(|d| Instant::now() >= d) {
                tracing::warn!(
                    left = self.core.len() + self.inbox.len(),
                    "shutdown deadline"
                );
                return;
            }
            if self.core.step().is_some() {
                last_work = Instant::now();
                continue;
            }
            // Nothing can run: finished, or wait for something to happen.
            let stopping = deadline.is_some() || !inbox_open;
            if stopping && self.core.is_empty() && self.inbox.is_empty() {
                return;
            }
            let inbox = (inbox_open && self.core.has_room()).then_some(&self.inbox);
            // an idle spin too long for an Instant spins without end
            let spin_until = last_work.checked_add(self.idle_spin);
            match wait(inbox, &self.wake, deadline, spin_until) {
                Woken::Job(job) => self.admit(*job),
                Woken::Wake | Woken::Deadline => {}
                Woken::InboxClosed => inbox_open = false,
                // Every handle is gone: nobody can send text, read audio or wake us.
                Woken::WakeClosed => return,
            }
        }
    }

    /// Admits a job and counts it in the load others read (`EngineHandle::load`). It is
    /// counted before admission, since its `Started` event may reach the client, who may
    /// then submit again (to the least loaded engine of a pool), before anything else here
    /// runs.
    fn admit(&mut self, job: Job<ChannelClient>) {
        self.shared.active.fetch_add(1, Ordering::Relaxed);
        self.core.admit(job);
        self.shared
            .active
            .store(self.core.active(), Ordering::Relaxed);
    }

    /// Fails whatever is left and marks the engine stopped.
    fn stop(&mut self) {
        self.core.fail_all(RequestFailure::ShuttingDown);
        while let Ok(mut job) = self.inbox.try_recv() {
            use crate::client::Client;
            let _ = job
                .client
                .try_send(Event::Failed(RequestFailure::ShuttingDown));
        }
        self.shared.ready.store(false, Ordering::Release);
        self.shared.stopped.store(true, Ordering::Release);
        self.shared.active.store(0, Ordering::Relaxed);
        self.queue_gauge.queue_depth(0);
        tracing::info!("engine stopped");
    }
}

/// Blocks until a job arrives (when `inbox` is given), a wake-up, or the deadline; polls
/// for them until `spin_until` first (`None`: no end but the deadline).
fn wait(
    inbox: Option<&Receiver<Job<ChannelClient>>>,
    wake: &Receiver<()>,
    deadline: Option<Instant>,
    spin_until: Option<Instant>,
) -> Woken {
    let poll_until = match (deadline, spin_until) {
        (Some(d), Some(s)) => Some(d.min(s)),
        (d, s) => d.or(s),
    };
    if let Some(woken) = poll(inbox, wake, poll_until) {
        return woken;
    }
    let mut sel = Select::new();
    let wake_op = sel.recv(wake);
    if let Some(inbox) = inbox {
        sel.recv(inbox);
    }
    let op = match deadline {
        Some(d) => match sel.select_deadline(d) {
            Ok(op) => op,
            Err(_) => return Woken::Deadline,
        },
        None => sel.select(),
    };
    if op.index() == wake_op {
        match op.recv(wake) {
            Ok(()) => Woken::Wake,
            Err(_) => Woken::WakeClosed,
        }
    } else {
        match inbox.map(|i| op.recv(i)) {
            Some(Ok(job)) => Woken::Job(Box::new(job)),
            _ => Woken::InboxClosed,
        }
    }
}

/// Polls the wake channel, then `inbox`, until one has something or `until` passes
/// (`None` then, also when `until` has already passed; no `until`: no end).
fn poll(
    inbox: Option<&Receiver<Job<ChannelClient>>>,
    wake: &Receiver<()>,
    until: Option<Instant>,
) -> Option<Woken> {
    while until.is_none_or(|u| Instant::now() < u) {
        match wake.try_recv() {
            Ok(()) => return Some(Woken::Wake),
            Err(TryRecvError::Disconnected) => return Some(Woken::WakeClosed),
            Err(TryRecvError::Empty) => {}
        }
        match inbox.map(Receiver::try_recv) {
            Some(Ok(job)) => return Some(Woken::Job(Box::new(job))),
            Some(Err(TryRecvError::Disconnected)) => return Some(Woken::InboxClosed),
            _ => {}
        }
        std::hint::spin_loop();
    }
    None
}
