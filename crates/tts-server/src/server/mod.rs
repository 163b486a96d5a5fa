//! The HTTP/WebSocket server (`qwen3-tts serve`): OpenAI-compatible speech, a WebSocket
//! for text that arrives in pieces, voices and models, health, readiness, metrics and the
//! playground. See `docs/protocol.md` and the README's API reference.
//!
//! Layout: `config` (flags, env, TOML) -> [`Server::start`] (model, catalog, listener, then
//! the engine in the background) -> `app` (routes, middleware) -> `routes/*` (one file per
//! route). A speech request: `params` (strict fields) -> `admission` (readiness, the
//! engine's bounded queue) -> `body` (events -> encoder -> chunks or `sse` events). The
//! WebSocket session is `ws_session`. `listener` owns connections and timeouts; `error`
//! maps typed errors to statuses and OpenAI's envelope.

pub mod admission;
pub mod app;
pub mod auth;
pub mod body;
pub mod catalog;
pub mod cloning;
pub mod config;
pub mod error;
pub mod ids;
pub mod listener;
pub mod metrics;
pub mod middleware;
pub mod params;
pub mod routes;
pub mod sse;
pub mod state;
pub mod tracker;
pub mod usage;
pub mod ws_session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tts_engine::{EngineConfig, EngineHandle, EnginePool};
use tts_model::config::UnknownKeys;
use tts_model::{LoadOptions, Model};

pub use app::app;
pub use config::{ServeArgs, ServerConfig};
pub use metrics::ServerMetrics;
pub use state::AppState;

use crate::backend::{self, BackendSize};
use catalog::Catalog;
use cloning::Cloning;
use tts_model::clone::VoiceCloner;

/// A running server.
pub struct Server {
    state: AppState,
    addr: SocketAddr,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Loads the model, binds the listener and starts serving; the engine starts (and
    /// warms up) in the background: `/ready` says when it can take requests.
    pub async fn start(config: ServerConfig, metrics: ServerMetrics) -> anyhow::Result<Server> {
        config.validate()?;
        let (model, catalog, cloning) = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || load_model(&config)).await??
        };
        let state = AppState::new(config.clone(), model, catalog, metrics, cloning);
        let listener = TcpListener::bind((config.host.as_str(), config.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", config.host, config.port))?;
        let addr = listener.local_addr()?;
        tracing::info!(
            "listening on http://{addr} (model {}, device {:?}, profile {})",
            state.catalog().model,
            config.device,
            config.profile.name
        );
        let task = tokio::spawn(run(state.clone(), listener));
        Ok(Server { state, addr, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Begins a graceful shutdown: no new connections or requests; streams in flight get
    /// up to the configured grace to finish.
    pub fn shutdown(&self) {
        self.state.begin_shutdown();
    }

    /// Waits until the server has stopped (after [`shutdown`](Self::shutdown), or a
    /// start-up failure of the engine).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the server task panicked")?
    }
}

/// The model, its catalog of names, and (Base models) its voice cloner.
type Loaded = (Arc<Model>, Catalog, Option<Cloning>);

fn load_model(config: &ServerConfig) -> anyhow::Result<Loaded> {
    let opts = LoadOptions {
        unknown_config_keys: if config.lenient_config {
            UnknownKeys::Warn
        } else {
            UnknownKeys::Reject
        },
    };
    let model = Model::load(&config.model, opts)
        .with_context(|| format!("loading model `{}`", config.model))?;
    if model.is_random() {
        tracing::warn!(
            "!!! model `{}` has RANDOM weights: its audio is NOISE (a pipeline demo, not a voice) !!!",
            model.name
        );
    }
    let catalog = Catalog::new(&model, &config.voice_aliases, &config.model_aliases)
        .map_err(anyhow::Error::msg)?;
    let cloning = VoiceCloner::load(&model)
        .context("loading the voice-cloning encoders")?
        .map(Cloning::new);
    Ok((Arc::new(model), catalog, cloning))
}

/// Builds the backends and starts the engines (`replicas`, each with an equal share of
/// the slots, queue and active limit); blocks until they are warmed up.
fn start_engine(state: &AppState) -> anyhow::Result<()> {
    let config = state.config();
    let model = state.model().clone();
    let n = config.replicas.max(1);
    let share = |total: usize| total.div_ceil(n);
    let slots = share(config.max_slots);
    let size = BackendSize {
        max_slots: slots,
        max_batch: slots
            .next_power_of_two()
            .min(config.profile.policy.max_rows()),
        code_predictor_lane: config.profile.policy.side_by_side,
        merge_prefill: config.profile.policy.prefill_with_step,
        ..BackendSize::default()
    };
    // every backend first: a device that cannot hold them all fails before any engine runs
    let backends = (0..n)
        .map(|replica| {
            backend::create_warm(&model, config.device, size)
                .with_context(|| format!("backend {} of {n}", replica + 1))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut engines = Vec::with_capacity(n);
    // the backend's extra graph bucket is one the engine's top-ups can fill
    let mut profile = config.profile.clone();
    if matches!(config.device, backend::Device::Cuda(_)) && backend::batch_bucket_24() {
        profile.policy.add_bucket(tts_cuda::buckets::BUCKET_24);
    }
    for backend in backends {
        let engine_config = EngineConfig {
            profile: profile.clone(),
            queue_capacity: share(config.max_queue),
            max_active: config.max_active.map(share),
            max_text_chars: config.max_input_chars,
            warmup: config.warmup,
            idle_spin: config.idle_spin,
            ..EngineConfig::default()
        };
        engines.push(EngineHandle::start(model.clone(), backend, engine_config)?);
    }
    let engine = EnginePool::new(engines)?;
    let info = engine.info().clone();
    state.set_engine(engine.clone());
    loop {
        if state.is_shutting_down() {
            return Ok(());
        }
        match engine.wait_ready(Duration::from_millis(200)) {
            Ok(true) => break,
            Ok(false) => continue,
            Err(e) => anyhow::bail!("the engine's warm-up failed: {e}"),
        }
    }
    tracing::info!(
        device = %info.device,
        slots = info.max_active,
        queue = info.queue_capacity,
        engines = n,
        "ready"
    );
    Ok(())
}

/// The server's life: engine start-up beside the accept loop, then the orderly stop.
async fn run(state: AppState, listener: TcpListener) -> anyhow::Result<()> {
    let starter = {
        let state = state.clone();
        tokio::task::spawn_blocking(move || {
            let r = start_engine(&state);
            if let Err(e) = &r {
                tracing::error!("{e:#}");
                state.begin_shutdown();
            }
            r
        })
    };
    let app = app(state.clone());
    let connections = listener::serve(
        listener,
        app,
        state.config().timeouts,
        state.shutdown_signal(),
    )
    .await;
    let grace = state.config().shutdown_grace;
    tracing::info!(
        grace_s = grace.as_secs_f64(),
        connections = connections.count(),
        sessions = state.sessions().count(),
        "shutting down: no new requests; draining streams in flight"
    );
    if let Some(engine) = state.engine() {
        engine.shutdown(grace);
    }
    // The engine fails what is left at the deadline; connections and sessions then end.
    let drained = async {
        connections.idle().await;
        state.sessions().idle().await;
    };
    if tokio::time::timeout(grace + Duration::from_secs(2), drained)
        .await
        .is_err()
    {
        tracing::warn!(
            connections = connections.count(),
            sessions = state.sessions().count(),
            "grace period over: closing what is left"
        );
    }
    let started = starter.await.context("the engine start-up task panicked")?;
    if let Some(engine) = state.engine().cloned() {
        tokio::task::spawn_blocking(move || engine.join()).await?;
    }
    tracing::info!("stopped");
    started
}

/// `qwen3-tts serve`: the server until SIGTERM or SIGINT, with the global metrics recorder.
pub async fn serve(config: ServerConfig) -> anyhow::Result<()> {
    let metrics = ServerMetrics::new().context("building the metrics recorder")?;
    if metrics.install_global().is_err() {
        tracing::warn!("a global metrics recorder is already installed: engine metrics go there");
    }
    let server = Server::start(config, metrics).await?;
    let state = server.state().clone();
    tokio::spawn(async move {
        let mut stopped = state.shutdown_signal();
        tokio::select! {
            sig = shutdown_signal() => {
                tracing::info!("{sig}: shutting down");
                state.begin_shutdown();
            }
            _ = listener::until_true(&mut stopped) => {}
        }
    });
    server.wait().await
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C), naming it.
async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            },
            _ => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}
