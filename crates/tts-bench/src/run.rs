//! Orchestration: wait for `/ready`, then for each rate send requests at their Poisson
//! arrival times (each in its own task, never waiting for earlier ones), and collect what
//! each showed. A rate's run is bounded: arrivals stop at the end of the measured window,
//! and requests still running a drain timeout later are cut (`timeout`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tokio::task::JoinSet;

use crate::arrivals::{poisson_arrivals, prompt_order, rate_seed};
use crate::client::{wait_ready, CallError, Target};
use crate::record::{CallInfo, Outcome, RequestMeta, RequestRecord};
use crate::report::{BenchReport, RateReport};
use crate::spec::{BenchSpec, DEFAULT_SAMPLE_RATE};
use crate::stream::StreamTrace;

/// What one rate's run produced.
#[derive(Debug, Clone)]
pub struct RateRun {
    pub rate: f64,
    /// Wall-clock start (seconds since the Unix epoch).
    pub started_unix_s: f64,
    /// From the start of the run to the last request's end.
    pub wall: Duration,
    /// Every arrival, in arrival order.
    pub records: Vec<RequestRecord>,
}

/// Runs the whole sweep and summarises it. `command` is recorded in the report.
pub async fn run(spec: BenchSpec, command: Option<String>) -> anyhow::Result<BenchReport> {
    let spec = Arc::new(spec);
    wait_ready(&spec, spec.ready_timeout).await?;
    let target = Target::new(&spec)?;
    let order = Arc::new(prompt_order(spec.prompts.len(), spec.seed));
    let mut rates = Vec::with_capacity(spec.rates.len());
    for (i, &rate) in spec.rates.iter().enumerate() {
        let run = run_rate(&spec, &target, &order, i, rate).await?;
        let report = RateReport::from_run(&spec, &run);
        tracing::info!(
            "rate {rate}/s done: {} sent, {} ok, TTFA p95 {}",
            report.sent,
            report.ok,
            report
                .ttfa_ms
                .map(|p| format!("{:.1} ms", p.p95))
                .unwrap_or_else(|| "-".into())
        );
        rates.push(report);
    }
    Ok(BenchReport::new(&spec, command, rates))
}

/// Decrements the in-flight count when a request's task ends, however it ends.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One rate: warm-up and measured window of Poisson arrivals, then the drain.
pub async fn run_rate(
    spec: &Arc<BenchSpec>,
    target: &Target,
    order: &Arc<Vec<usize>>,
    rate_index: usize,
    rate: f64,
) -> anyhow::Result<RateRun> {
    let window_end = spec.warmup + spec.duration;
    let schedule = poisson_arrivals(rate, window_end, rate_seed(spec.seed, rate_index));
    tracing::info!(
        "rate {rate}/s: {} arrivals over {:.0} s warm-up + {:.0} s measured",
        schedule.len(),
        spec.warmup.as_secs_f64(),
        spec.duration.as_secs_f64()
    );
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let start = Instant::now();
    let deadline = start + window_end + spec.drain_timeout;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    let mut records = Vec::with_capacity(schedule.len());
    let mut announced_window = spec.warmup.is_zero();

    for (index, &at) in schedule.iter().enumerate() {
        tokio::time::sleep_until((start + at).into()).await;
        if !announced_window && at >= spec.warmup {
            announced_window = true;
            tracing::info!("rate {rate}/s: warm-up over, measuring");
        }
        let prompt = order[index % order.len()];
        let meta = RequestMeta {
            index,
            prompt,
            chars: spec.prompts[prompt].chars().count(),
            measured: at >= spec.warmup,
            scheduled: at,
            sent: start.elapsed(),
        };
        if in_flight.load(Ordering::Relaxed) >= spec.max_in_flight {
            records.push(RequestRecord::skipped(&meta));
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let guard = InFlight(in_flight.clone());
        let (spec, target) = (spec.clone(), target.clone());
        let request_id = format!("bench-{rate_index}-{index}");
        tasks.spawn(async move {
            let _guard = guard;
            one_request(&spec, &target, meta, &request_id, start, deadline).await
        });
        // Collect finished requests as we go, so the task set stays small.
        while let Some(done) = tasks.try_join_next() {
            records.push(done.context("a request task failed")?);
        }
    }
    tracing::info!(
        "rate {rate}/s: arrivals over, draining {} in flight (at most {:.0} s)",
        in_flight.load(Ordering::Relaxed),
        spec.drain_timeout.as_secs_f64()
    );
    while let Some(done) = tasks.join_next().await {
        records.push(done.context("a request task failed")?);
    }
    records.sort_by_key(|r| r.index);
    Ok(RateRun {
        rate,
        started_unix_s,
        wall: start.elapsed(),
        records,
    })
}

/// Sends one request now and follows its stream until it ends or `deadline` passes.
async fn one_request(
    spec: &BenchSpec,
    target: &Target,
    mut meta: RequestMeta,
    request_id: &str,
    run_start: Instant,
    deadline: Instant,
) -> RequestRecord {
    let text = &spec.prompts[meta.prompt];
    let sent = Instant::now();
    meta.sent = sent - run_start;
    let mut trace = StreamTrace::new(DEFAULT_SAMPLE_RATE, spec.gap_tolerance);
    let mut info = CallInfo::default();
    let call = target.speak(spec, text, request_id, sent, &mut trace, &mut info);
    let result = tokio::time::timeout_at(deadline.into(), call).await;
    let elapsed = sent.elapsed();
    let (outcome, elapsed) = match result {
        Ok(Ok(())) => (Outcome::Ok, Some(elapsed)),
        Ok(Err(e)) => {
            if let CallError::Http { retry_after, .. } = &e {
                info.retry_after.clone_from(retry_after);
            }
            info.error = Some(e.to_string());
            (e.outcome(), Some(elapsed))
        }
        Err(_) => {
            info.error = Some(format!(
                "still running {:.1} s after the request was sent; cut at the drain timeout",
                elapsed.as_secs_f64()
            ));
            (Outcome::Timeout, None)
        }
    };
    RequestRecord::new(&meta, outcome, info, &trace.summary(), elapsed)
}
