//! What every handler shares: the configuration, the catalog of names, the engine (set
//! once it is started), metrics, and the shutdown signal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tts_engine::EnginePool;
use tts_model::Model;

use super::catalog::Catalog;
use super::cloning::{Cloning, REFERENCE_BODY_BYTES};
use super::config::ServerConfig;
use super::metrics::ServerMetrics;
use super::params::Limits;
use super::tracker::{Tracked, Tracker};

/// Shared state; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    config: ServerConfig,
    model: Arc<Model>,
    catalog: Catalog,
    engine: OnceLock<EnginePool>,
    metrics: ServerMetrics,
    shutting_down: AtomicBool,
    shutdown_tx: watch::Sender<bool>,
    /// Open WebSocket sessions (shutdown waits for them).
    sessions: Tracker,
    /// Base models: the voice cloner.
    cloning: Option<Arc<Cloning>>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("model", &self.inner.catalog.model)
            .finish()
    }
}

impl AppState {
    /// `cloning`: the voice cloner of a Base model (`None` for the other kinds).
    pub fn new(
        config: ServerConfig,
        model: Arc<Model>,
        catalog: Catalog,
        metrics: ServerMetrics,
        cloning: Option<Cloning>,
    ) -> Self {
        let (shutdown_tx, _) = watch::channel(false);
        Self {
            inner: Arc::new(Inner {
                config,
                model,
                catalog,
                engine: OnceLock::new(),
                metrics,
                shutting_down: AtomicBool::new(false),
                shutdown_tx,
                sessions: Tracker::default(),
                cloning: cloning.map(Arc::new),
            }),
        }
    }

    /// The voice cloner, for a Base model.
    pub fn cloning(&self) -> Option<&Arc<Cloning>> {
        self.inner.cloning.as_ref()
    }

    /// Bytes a request may add for a reference recording: none unless the model clones.
    pub fn reference_bytes(&self) -> usize {
        match self.cloning() {
            Some(_) => REFERENCE_BODY_BYTES,
            None => 0,
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.inner.model
    }

    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    pub fn metrics(&self) -> &ServerMetrics {
        &self.inner.metrics
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_input_chars: self.inner.config.max_input_chars,
        }
    }

    /// The engines, once started (they may still be warming up).
    pub fn engine(&self) -> Option<&EnginePool> {
        self.inner.engine.get()
    }

    /// Sets the engines (once; later calls are ignored and return false).
    pub fn set_engine(&self, engine: impl Into<EnginePool>) -> bool {
        self.inner.engine.set(engine.into()).is_ok()
    }

    /// Warmed up, not shutting down.
    pub fn is_ready(&self) -> bool {
        !self.is_shutting_down() && self.engine().is_some_and(EnginePool::is_ready)
    }

    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::Acquire)
    }

    /// Marks the server as shutting down and tells everyone who listens.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        self.inner.shutdown_tx.send_replace(true);
    }

    /// Resolves when shutdown begins.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.inner.shutdown_tx.subscribe()
    }

    /// The `Retry-After` hint for 429 and 503.
    pub fn retry_after(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// Counts a WebSocket session until the guard drops.
    pub fn session_opened(&self) -> Tracked {
        self.inner.sessions.track()
    }

    pub fn sessions(&self) -> &Tracker {
        &self.inner.sessions
    }
}
