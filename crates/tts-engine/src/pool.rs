//! Several engines behind one front: each owns its own backend (on a GPU: its own stream,
//! workspace, slots and graphs), and a request goes to the least loaded one that takes it.
//!
//! Why on one device: the stage kernels are latency-bound (a few blocks each, chains of
//! dependent memory round trips), so one engine's calls leave most of the GPU idle; the
//! calls of a second engine on its own stream run in those gaps (`qwen3-tts bench-stages
//! --overlap`). A request stays on its engine for its whole life.

use std::time::{Duration, Instant};

use crate::error::{ConfigError, SubmitError};
use crate::handle::{EngineHandle, EngineInfo, Load};
use crate::request::SynthesisRequest;
use crate::text_input::TextSender;
use crate::RequestHandle;

/// Engines sharing the work; cheap to clone.
#[derive(Clone, Debug)]
pub struct EnginePool {
    engines: std::sync::Arc<[EngineHandle]>,
    info: EngineInfo,
}

impl EnginePool {
    /// A pool of `engines` (at least one; all serving the same model).
    pub fn new(engines: Vec<EngineHandle>) -> Result<Self, ConfigError> {
        let first = engines
            .first()
            .ok_or_else(|| ConfigError::Invalid("a pool needs at least one engine".into()))?;
        let mut info = first.info().clone();
        if let Some(other) = engines.iter().find(|e| e.info().model != info.model) {
            return Err(ConfigError::Invalid(format!(
                "a pool's engines serve different models ({} and {})",
                info.model,
                other.info().model
            )));
        }
        info.max_active = engines.iter().map(|e| e.info().max_active).sum();
        info.queue_capacity = engines.iter().map(|e| e.info().queue_capacity).sum();
        if engines.len() > 1 {
            info.device = format!("{} x{}", info.device, engines.len());
        }
        Ok(Self {
            engines: engines.into(),
            info,
        })
    }

    /// The pool's facts: those of its first engine, with slots and queue added up.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    pub fn engines(&self) -> &[EngineHandle] {
        &self.engines
    }

    /// Some engine warmed up and accepting work (requests go to ready engines first, so
    /// one that stopped or still warms up does not hold the others back).
    pub fn is_ready(&self) -> bool {
        self.engines.iter().any(EngineHandle::is_ready)
    }

    /// How many engines are warmed up and accepting work.
    pub fn ready_count(&self) -> usize {
        self.engines.iter().filter(|e| e.is_ready()).count()
    }

    /// Blocks until every engine has warmed up (or `timeout`); `Err` carries the first
    /// warm-up failure.
    pub fn wait_ready(&self, timeout: Duration) -> Result<bool, String> {
        let deadline = Instant::now() + timeout;
        for e in self.engines.iter() {
            let left = deadline.saturating_duration_since(Instant::now());
            if !e.wait_ready(left)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Load summed over the engines.
    pub fn load(&self) -> Load {
        self.engines.iter().map(EngineHandle::load).fold(
            Load {
                queued: 0,
                active: 0,
            },
            |a, l| Load {
                queued: a.queued + l.queued,
                active: a.active + l.active,
            },
        )
    }

    /// Every engine thread has stopped.
    pub fn is_stopped(&self) -> bool {
        self.engines.iter().all(EngineHandle::is_stopped)
    }

    /// Ready engines before the others, each group from the least loaded (requests queued
    /// + active, per slot it has) to the most; ties keep their order.
    fn by_load(&self) -> Vec<&EngineHandle> {
        let mut v: Vec<(bool, f64, &EngineHandle)> = self
            .engines
            .iter()
            .map(|e| {
                let l = e.load();
                let busy = (l.queued + l.active) as f64 / e.info().max_active.max(1) as f64;
                (!e.is_ready(), busy, e)
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        v.into_iter().map(|(_, _, e)| e).collect()
    }

    /// Submits to the least loaded engine that takes the request: a full queue or a
    /// stopping engine passes it on to the next; any other refusal is the answer.
    pub fn submit(&self, req: SynthesisRequest) -> Result<RequestHandle, SubmitError> {
        self.first_taker(|e| e.submit(req.clone()))
    }

    /// As [`submit`](Self::submit), for text that arrives in pieces
    /// ([`EngineHandle::submit_streaming_text`]).
    pub fn submit_streaming_text(
        &self,
        req: SynthesisRequest,
    ) -> Result<(RequestHandle, TextSender), SubmitError> {
        self.first_taker(|e| e.submit_streaming_text(req.clone()))
    }

    fn first_taker<T>(
        &self,
        mut submit: impl FnMut(&EngineHandle) -> Result<T, SubmitError>,
    ) -> Result<T, SubmitError> {
        let mut refusal = SubmitError::ShuttingDown;
        for e in self.by_load() {
            match submit(e) {
                Ok(t) => return Ok(t),
                Err(e @ (SubmitError::QueueFull { .. } | SubmitError::ShuttingDown)) => {
                    // a full queue says more than a stopping engine
                    if matches!(e, SubmitError::QueueFull { .. })
                        || matches!(refusal, SubmitError::ShuttingDown)
                    {
                        refusal = e;
                    }
                }
                Err(other) => return Err(other),
            }
        }
        Err(match refusal {
            // every queue is full: say how many wait in all
            SubmitError::QueueFull { retry_after, .. } => SubmitError::QueueFull {
                capacity: self.info.queue_capacity,
                retry_after,
            },
            other => other,
        })
    }

    /// Shuts every engine down (see [`EngineHandle::shutdown`]).
    pub fn shutdown(&self, grace: Duration) {
        for e in self.engines.iter() {
            e.shutdown(grace);
        }
    }

    /// Blocks until every engine thread has stopped.
    pub fn join(&self) {
        for e in self.engines.iter() {
            e.join();
        }
    }
}

impl From<EngineHandle> for EnginePool {
    fn from(e: EngineHandle) -> Self {
        let info = e.info().clone();
        Self {
            engines: vec![e].into(),
            info,
        }
    }
}
