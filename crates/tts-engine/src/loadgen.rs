//! Open-loop load: Poisson arrivals of requests with texts of varied length, each stream
//! played back "immediately" by a simulated client. Drives a real engine on any backend
//! ([`run_engine`]) or the simulator ([`run_sim`]) and reports time to first audio (server
//! side, first chunk, first audible sample), end-to-end time, underruns and throughput.
//! A program, not a test: `examples/engine_load.rs` is its command line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tts_model::generate::random_model_frames;
use tts_model::sampling::draw_uniform;
use tts_model::{Backend, Model, SpeechRequest, TextMode};

use crate::config::EngineConfig;
use crate::error::{ConfigError, SubmitError};
use crate::handle::EngineHandle;
use crate::request::SynthesisRequest;
use crate::sim::{simulate, SimConfig, SimRequest, FAKE_SAMPLE_RATE};
use crate::stats::{ClientTrace, LoadReport, RequestRecord, StageUse};

/// Sentences of varied length (about 20 to 200 characters).
pub const DEFAULT_TEXTS: &[&str] = &[
    "Hello there.",
    "Your order has shipped and should arrive on Thursday.",
    "Turn left at the next intersection, then continue straight for about two miles.",
    "I'm sorry, I didn't catch that. Could you say it again?",
    "The meeting has been moved to three o'clock in the afternoon, in the small conference room on the second floor.",
    "Sure!",
    "Here is a summary of today's weather: sunny in the morning, with clouds building after noon and a chance of light rain in the evening. Temperatures will stay mild.",
    "Thanks for calling. All of our agents are busy right now; please stay on the line and the next available agent will be with you shortly.",
];

/// What load to apply.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Mean arrivals per second.
    pub rate: f64,
    /// Arrivals happen during this window.
    pub duration: Duration,
    /// Seed of the arrival times, text choice and request seeds.
    pub seed: u64,
    pub texts: Vec<String>,
    pub voice: Option<String>,
    pub language: String,
    pub text_mode: TextMode,
    /// How long to wait for requests to finish after the last arrival.
    pub drain: Duration,
}

impl Default for LoadSpec {
    fn default() -> Self {
        Self {
            rate: 2.0,
            duration: Duration::from_secs(10),
            seed: 1,
            texts: DEFAULT_TEXTS.iter().map(|s| s.to_string()).collect(),
            voice: None,
            language: "auto".into(),
            text_mode: TextMode::Prefill,
            drain: Duration::from_secs(60),
        }
    }
}

/// One planned arrival.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    pub at: Duration,
    pub text: String,
    pub seed: u64,
}

/// Poisson arrivals (exponential gaps, counter-based random numbers) within the window.
pub fn arrivals(spec: &LoadSpec) -> Vec<Arrival> {
    let mut out = Vec::new();
    if spec.rate <= 0.0 || spec.texts.is_empty() {
        return out;
    }
    let mut t = 0.0f64;
    for i in 0u32.. {
        let u = draw_uniform(spec.seed, i, 0) as f64;
        t += -(1.0 - u).ln() / spec.rate;
        if t >= spec.duration.as_secs_f64() {
            break;
        }
        let pick = (draw_uniform(spec.seed, i, 1) as f64 * spec.texts.len() as f64) as usize;
        out.push(Arrival {
            at: Duration::from_secs_f64(t),
            text: spec.texts[pick.min(spec.texts.len() - 1)].clone(),
            seed: spec.seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
        });
    }
    out
}

/// Why a load run could not run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the engine did not become ready: {0}")]
    NotReady(String),
    #[error("cannot start the client runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Drives a real engine on `backend` with `spec`'s arrivals; clients read as fast as
/// audio comes and play it immediately.
pub fn run_engine(
    model: Arc<Model>,
    backend: Box<dyn Backend>,
    config: EngineConfig,
    spec: &LoadSpec,
) -> Result<LoadReport, LoadError> {
    let engine = EngineHandle::start(model.clone(), backend, config)?;
    match engine.wait_ready(Duration::from_secs(600)) {
        Ok(true) => {}
        Ok(false) => return Err(LoadError::NotReady("timed out".into())),
        Err(e) => return Err(LoadError::NotReady(e)),
    }
    let title = format!(
        "engine load: model {} on {}, profile {}, {:.2} req/s for {:.0} s, text mode {:?}",
        engine.info().model,
        engine.info().device,
        engine.info().profile,
        spec.rate,
        spec.duration.as_secs_f64(),
        spec.text_mode
    );
    let plan = arrivals(spec);
    let sample_rate = engine.info().sample_rate;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let start = Instant::now();
    let records: Vec<RequestRecord> = rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, a) in plan.into_iter().enumerate() {
            tokio::time::sleep_until((start + a.at).into()).await;
            let req = SynthesisRequest {
                speech: SpeechRequest {
                    text: a.text.clone(),
                    voice: spec.voice.clone(),
                    language: spec.language.clone(),
                    instructions: None,
                    text_mode: spec.text_mode,
                    clone: None,
                },
                sampling: model.default_sampling(a.seed),
                max_frames: None,
            };
            let chars = a.text.chars().count();
            let submitted = start.elapsed();
            match engine.submit(req) {
                Ok(mut handle) => {
                    tasks.spawn(async move {
                        let mut trace = ClientTrace::new(submitted, sample_rate, chars);
                        while let Some(event) = handle.recv().await {
                            trace.on_event(start.elapsed(), &event);
                        }
                        (i, trace.finish())
                    });
                }
                Err(SubmitError::QueueFull { .. }) => {
                    tasks.spawn(async move { (i, ClientTrace::rejected(chars)) });
                }
                Err(e) => {
                    tracing::error!(error = %e, "submission failed");
                    tasks.spawn(async move { (i, ClientTrace::rejected(chars)) });
                }
            }
        }
        let mut records = Vec::new();
        let drain = tokio::time::sleep(spec.drain);
        tokio::pin!(drain);
        loop {
            tokio::select! {
                next = tasks.join_next() => match next {
                    Some(Ok(r)) => records.push(r),
                    Some(Err(e)) => tracing::error!(error = %e, "client task failed"),
                    None => break,
                },
                _ = &mut drain => {
                    tracing::warn!(left = tasks.len(), "drain timeout: requests unfinished");
                    break;
                }
            }
        }
        records.sort_by_key(|(i, _)| *i);
        records.into_iter().map(|(_, r)| r).collect()
    });
    let wall = start.elapsed();
    engine.shutdown(Duration::ZERO);
    engine.join();
    Ok(LoadReport {
        title,
        wall,
        records,
        stages: Vec::new(),
    })
}

/// The same load on the simulator: frames from the text length (as random-weight models),
/// prompt length from a rough token count.
pub fn run_sim(sim: &SimConfig, spec: &LoadSpec) -> LoadReport {
    let plan = arrivals(spec);
    let requests: Vec<SimRequest> = plan
        .iter()
        .map(|a| SimRequest {
            arrival: a.at,
            frames: random_model_frames(&a.text),
            seed: a.seed,
            prompt_len: 16 + a.text.len() / 4,
            cancel_at: None,
        })
        .collect();
    let out = simulate(sim, &requests);
    let records = out
        .requests
        .iter()
        .zip(&plan)
        .map(|(r, a)| {
            let mut trace =
                ClientTrace::new(r.spec.arrival, FAKE_SAMPLE_RATE, a.text.chars().count());
            for (t, e) in &r.events {
                trace.on_event(*t, e);
            }
            trace.finish()
        })
        .collect();
    let first = plan.first().map_or(Duration::ZERO, |a| a.at);
    LoadReport {
        title: format!(
            "simulated load: profile {}, {} slots, {:.2} req/s for {:.0} s",
            sim.profile.name,
            sim.max_slots,
            spec.rate,
            spec.duration.as_secs_f64()
        ),
        wall: out.end.saturating_sub(first),
        records,
        stages: StageUse::of(&out.steps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_seeded_and_near_the_rate() {
        let spec = LoadSpec {
            rate: 20.0,
            duration: Duration::from_secs(50),
            ..LoadSpec::default()
        };
        let a = arrivals(&spec);
        assert_eq!(a, arrivals(&spec));
        assert!((900..1100).contains(&a.len()), "{} arrivals", a.len());
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(a.iter().all(|x| x.at < spec.duration));
    }
}
