//! Per-rate summaries ([`RateReport`]) and the run's report ([`BenchReport`]): the stdout
//! table, `bench.json`, `bench.md` and (several rates) `latency_vs_rate.svg`.
//!
//! Which requests count where:
//! - latency percentiles, underruns and error counts: requests whose *arrival* fell in the
//!   measured window (warm-up arrivals are sent but never measured); percentiles over the
//!   `ok` ones (TTFA over those with an audible onset);
//! - throughput: `ok` requests that *finished* inside the measured window, whatever their
//!   arrival, divided by the window's length (under overload this is what the server
//!   delivered, not what was offered);
//! - cost per million characters: `$/hour / (chars/s * 3600) * 1e6`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::plot::{latency_svg, LatencyPoint};
use crate::record::RequestRecord;
use crate::run::RateRun;
use crate::spec::{BenchSpec, Protocol};
use crate::stats::{Lows, Percentiles};
use crate::timeline::{self, Slice};

/// Dollars per million characters at `gpu_price` $/hour and `chars_per_s`; `None` when
/// nothing was delivered.
pub fn cost_per_million_chars(gpu_price: f64, chars_per_s: f64) -> Option<f64> {
    (chars_per_s > 0.0).then(|| gpu_price / (chars_per_s * 3600.0) * 1e6)
}

/// Delivered work over the measured window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Throughput {
    /// `ok` requests that finished inside the window.
    pub completed: usize,
    pub requests_per_s: f64,
    pub chars_per_s: f64,
    /// Seconds of audio per second of wall time.
    pub audio_s_per_s: f64,
}

/// One rate's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateReport {
    /// Offered arrival rate (requests/s).
    pub rate: f64,
    pub started_unix_s: f64,
    pub wall_s: f64,
    pub warmup_s: f64,
    pub window_s: f64,
    /// Arrivals in the warm-up (sent, not measured).
    pub warmup_arrivals: usize,
    /// Arrivals in the measured window.
    pub arrivals: usize,
    /// Of those, sent (not skipped by `--max-in-flight`).
    pub sent: usize,
    pub ok: usize,
    /// Measured requests that did not end `ok`, by kind (`http_429`, `transport`,
    /// `timeout`, `skipped`, ...).
    pub errors: BTreeMap<String, usize>,
    /// `ok` streams with no audible onset (silence): no TTFA.
    pub ok_without_onset: usize,
    pub ttfb_ms: Option<Percentiles>,
    pub ttfa_ms: Option<Percentiles>,
    pub e2e_ms: Option<Percentiles>,
    /// WebSocket only: the upgrade.
    pub connect_ms: Option<Percentiles>,
    /// Sending lateness against the schedule (client timer and spawn latency).
    pub send_lag_ms: Option<Percentiles>,
    /// Audio per `ok` request, in seconds.
    pub audio_s: Option<Percentiles>,
    pub mean_chars: f64,
    pub underruns: u64,
    pub streams_with_underruns: usize,
    pub underrun_ms: f64,
    pub tolerated_gaps: u64,
    pub tolerated_gap_ms: f64,
    /// Per `ok` stream, the least audio left in the player when later audio arrived:
    /// the margin the worst streams kept (0 for a stream with a gap).
    pub tightest_buffer_ms: Option<Lows>,
    pub throughput: Throughput,
    pub cost_per_million_chars: Option<f64>,
    /// TTFA over the whole run in slices of arrival time, warm-up included
    /// ([`crate::timeline`]).
    pub timeline: Vec<Slice>,
    /// Every arrival (with `--raw`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<Vec<RequestRecord>>,
}

impl RateReport {
    pub fn from_run(spec: &BenchSpec, run: &RateRun) -> Self {
        Self::from_records(
            run.rate,
            spec.warmup.as_secs_f64(),
            spec.duration.as_secs_f64(),
            spec.gpu_price,
            &run.records,
            spec.raw,
        )
        .with_times(run.started_unix_s, run.wall.as_secs_f64())
    }

    fn with_times(mut self, started_unix_s: f64, wall_s: f64) -> Self {
        self.started_unix_s = started_unix_s;
        self.wall_s = wall_s;
        self
    }

    /// The summary of a rate's records (times as in [`RequestRecord`]).
    pub fn from_records(
        rate: f64,
        warmup_s: f64,
        window_s: f64,
        gpu_price: f64,
        records: &[RequestRecord],
        keep_records: bool,
    ) -> Self {
        let measured: Vec<&RequestRecord> = records.iter().filter(|r| r.measured).collect();
        let ok: Vec<&RequestRecord> = measured
            .iter()
            .copied()
            .filter(|r| r.outcome.is_ok())
            .collect();
        let mut errors = BTreeMap::new();
        for r in measured.iter().filter(|r| !r.outcome.is_ok()) {
            *errors.entry(r.outcome.label()).or_insert(0) += 1;
        }
        let skipped = errors.get("skipped").copied().unwrap_or(0);
        let pick =
            |f: fn(&RequestRecord) -> Option<f64>| Percentiles::of(ok.iter().filter_map(|r| f(r)));

        let window_end = warmup_s + window_s;
        let delivered: Vec<&RequestRecord> = records
            .iter()
            .filter(|r| r.outcome.is_ok())
            .filter(|r| r.done_s.is_some_and(|d| d >= warmup_s && d < window_end))
            .collect();
        let per_s = |x: f64| if window_s > 0.0 { x / window_s } else { 0.0 };
        let chars: usize = delivered.iter().map(|r| r.chars).sum();
        let audio: f64 = delivered.iter().map(|r| r.audio_s).sum();
        let throughput = Throughput {
            completed: delivered.len(),
            requests_per_s: per_s(delivered.len() as f64),
            chars_per_s: per_s(chars as f64),
            audio_s_per_s: per_s(audio),
        };

        Self {
            rate,
            started_unix_s: 0.0,
            wall_s: 0.0,
            warmup_s,
            window_s,
            warmup_arrivals: records.len() - measured.len(),
            arrivals: measured.len(),
            sent: measured.len() - skipped,
            ok: ok.len(),
            errors,
            ok_without_onset: ok.iter().filter(|r| r.ttfa_ms.is_none()).count(),
            ttfb_ms: pick(|r| r.ttfb_ms),
            ttfa_ms: pick(|r| r.ttfa_ms),
            e2e_ms: pick(|r| r.e2e_ms),
            connect_ms: pick(|r| r.connect_ms),
            send_lag_ms: Percentiles::of(
                measured
                    .iter()
                    .filter(|r| r.outcome.label() != "skipped")
                    .map(|r| (r.sent_s - r.scheduled_s) * 1e3),
            ),
            audio_s: pick(|r| Some(r.audio_s)),
            mean_chars: if measured.is_empty() {
                0.0
            } else {
                measured.iter().map(|r| r.chars).sum::<usize>() as f64 / measured.len() as f64
            },
            underruns: ok.iter().map(|r| u64::from(r.underruns)).sum(),
            streams_with_underruns: ok.iter().filter(|r| r.underruns > 0).count(),
            underrun_ms: ok.iter().map(|r| r.underrun_ms).sum(),
            tolerated_gaps: ok.iter().map(|r| u64::from(r.tolerated_gaps)).sum(),
            tolerated_gap_ms: ok.iter().map(|r| r.tolerated_gap_ms).sum(),
            tightest_buffer_ms: Lows::of(ok.iter().filter_map(|r| r.tightest_ms)),
            throughput,
            cost_per_million_chars: cost_per_million_chars(gpu_price, throughput.chars_per_s),
            timeline: timeline::slices(records, timeline::SLICE_S, warmup_s),
            records: keep_records.then(|| records.to_vec()),
        }
    }

    /// Sum of the error counts.
    pub fn error_count(&self) -> usize {
        self.errors.values().sum()
    }
}

/// The prompt set used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptInfo {
    pub source: String,
    pub count: usize,
    pub mean_chars: f64,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    pub tool: String,
    pub label: Option<String>,
    pub command: Option<String>,
    pub date_utc: String,
    pub url: String,
    pub protocol: Protocol,
    pub model: String,
    pub voice: String,
    pub language: String,
    /// `text_mode` and `--extra` fields sent with every request.
    pub extra_fields: Map<String, Value>,
    pub seed: u64,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub drain_timeout_s: f64,
    pub max_in_flight: usize,
    pub gpu_price_per_hour: f64,
    pub gap_tolerance_ms: f64,
    pub prompts: PromptInfo,
    pub rates: Vec<RateReport>,
}

impl BenchReport {
    pub fn new(spec: &BenchSpec, command: Option<String>, rates: Vec<RateReport>) -> Self {
        let chars: usize = spec.prompts.iter().map(|p| p.chars().count()).sum();
        Self {
            tool: format!("qwen3-tts bench {}", env!("CARGO_PKG_VERSION")),
            label: spec.label.clone(),
            command,
            date_utc: utc_now(),
            url: spec.base.clone(),
            protocol: spec.protocol,
            model: spec.model.clone(),
            voice: spec.voice.clone(),
            language: spec.language.clone(),
            extra_fields: spec.extra_fields.clone(),
            seed: spec.seed,
            warmup_s: spec.warmup.as_secs_f64(),
            duration_s: spec.duration.as_secs_f64(),
            drain_timeout_s: spec.drain_timeout.as_secs_f64(),
            max_in_flight: spec.max_in_flight,
            gpu_price_per_hour: spec.gpu_price,
            gap_tolerance_ms: spec.gap_tolerance.as_secs_f64() * 1e3,
            prompts: PromptInfo {
                source: spec.prompts_source.clone(),
                count: spec.prompts.len(),
                mean_chars: chars as f64 / spec.prompts.len().max(1) as f64,
            },
            rates,
        }
    }

    /// The plot's points: rates with at least one audible TTFA.
    pub fn latency_points(&self) -> Vec<LatencyPoint> {
        self.rates
            .iter()
            .filter_map(|r| {
                r.ttfa_ms.map(|p| LatencyPoint {
                    rate: r.rate,
                    p50: p.p50,
                    p95: p.p95,
                    p99: p.p99,
                })
            })
            .collect()
    }

    fn title(&self) -> String {
        match &self.label {
            Some(l) => format!("qwen3-tts bench: {l}"),
            None => "qwen3-tts bench".to_string(),
        }
    }

    /// Writes `bench.json`, `bench.md` and, with several rates, `latency_vs_rate.svg`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut written = Vec::new();
        let mut put = |name: &str, contents: String| -> anyhow::Result<()> {
            let path = dir.join(name);
            std::fs::write(&path, contents)
                .with_context(|| format!("writing {}", path.display()))?;
            written.push(path);
            Ok(())
        };
        put("bench.json", serde_json::to_string_pretty(self)? + "\n")?;
        put("bench.md", self.markdown())?;
        if self.rates.len() > 1 {
            let subtitle = format!(
                "{} {}, {}, {:.0} s measured per rate",
                self.protocol_name(),
                self.url,
                self.voice,
                self.duration_s
            );
            put(
                "latency_vs_rate.svg",
                latency_svg(&self.latency_points(), &self.title(), &subtitle),
            )?;
        }
        Ok(written)
    }

    fn protocol_name(&self) -> &'static str {
        match self.protocol {
            Protocol::Http => "HTTP",
            Protocol::Ws => "WebSocket",
        }
    }

    /// The table printed to stdout.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}  ({} {}, {} s warm-up + {} s measured per rate, gap tolerance {} ms)",
            self.title(),
            self.protocol_name(),
            self.url,
            self.warmup_s,
            self.duration_s,
            self.gap_tolerance_ms
        );
        let _ = writeln!(
            s,
            "{:>7} {:>5} {:>5} {:>4} | {:>15} | {:>31} | {:>15} | {:>14} | {:>7} {:>6} {:>7}",
            "", "", "", "", "TTFB ms", "audible TTFA ms", "E2E ms", "underruns", "", "audio", "$/M"
        );
        let _ = writeln!(
            s,
            "{:>7} {:>5} {:>5} {:>4} | {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} | {:>4} {:>9} | {:>7} {:>6} {:>7}",
            "rate/s", "sent", "ok", "err", "p50", "p95", "p50", "p95", "p99", "max", "p50", "p95",
            "n", "streams", "chars/s", "s/s", "chars"
        );
        for r in &self.rates {
            let f = fmt_ms;
            let (b, a, e) = (r.ttfb_ms, r.ttfa_ms, r.e2e_ms);
            let _ = writeln!(
                s,
                "{:>7} {:>5} {:>5} {:>4} | {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} | {:>4} {:>9} | {:>7.1} {:>6.2} {:>7}",
                fmt_rate(r.rate),
                r.sent,
                r.ok,
                r.error_count(),
                f(b.map(|p| p.p50)),
                f(b.map(|p| p.p95)),
                f(a.map(|p| p.p50)),
                f(a.map(|p| p.p95)),
                f(a.map(|p| p.p99)),
                f(a.map(|p| p.max)),
                f(e.map(|p| p.p50)),
                f(e.map(|p| p.p95)),
                r.underruns,
                format!("{}/{}", r.streams_with_underruns, r.ok),
                r.throughput.chars_per_s,
                r.throughput.audio_s_per_s,
                r.cost_per_million_chars
                    .map_or("-".to_string(), |c| format!("{c:.3}")),
            );
        }
        for r in &self.rates {
            if let Some(t) = r.tightest_buffer_ms {
                let _ = writeln!(
                    s,
                    "rate {}/s: tightest buffer per stream min {:.1} ms, p0.1 {:.1}, p1 {:.1}, p50 {:.1}",
                    fmt_rate(r.rate),
                    t.min,
                    t.p0_1,
                    t.p1,
                    t.p50
                );
            }
        }
        for r in &self.rates {
            let _ = writeln!(s, "{}", timeline::summary_line(r));
        }
        for r in self
            .rates
            .iter()
            .filter(|r| r.error_count() > 0 || r.ok_without_onset > 0)
        {
            let _ = writeln!(s, "rate {}/s: {}", fmt_rate(r.rate), problems(r));
        }
        s
    }

    /// `bench.md`.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# {}\n", self.title());
        let _ = writeln!(s, "- date (UTC): {}", self.date_utc);
        if let Some(c) = &self.command {
            let _ = writeln!(s, "- command: `{c}`");
        }
        let _ = writeln!(
            s,
            "- target: {} {} (model `{}`, voice `{}`, language `{}`)",
            self.protocol_name(),
            self.url,
            self.model,
            self.voice,
            self.language
        );
        if !self.extra_fields.is_empty() {
            let _ = writeln!(
                s,
                "- extra request fields: `{}`",
                Value::Object(self.extra_fields.clone())
            );
        }
        let _ = writeln!(
            s,
            "- load: open-loop Poisson arrivals (seed {}), {} s warm-up + {} s measured per rate, drain timeout {} s",
            self.seed, self.warmup_s, self.duration_s, self.drain_timeout_s
        );
        let _ = writeln!(
            s,
            "- prompts: {} ({} lines, mean {:.1} characters)",
            self.prompts.source, self.prompts.count, self.prompts.mean_chars
        );
        let _ = writeln!(
            s,
            "- audible TTFA: request sent to the first audible sample playing (onset: RMS over 20 ms windows, 10 ms hop, > -45 dBFS for 2 windows; playback from the first sample received); underrun: audio arriving more than {} ms after it was due",
            self.gap_tolerance_ms
        );
        let _ = writeln!(
            s,
            "- cost at ${:.2}/GPU-hour; throughput counts `ok` requests finishing inside the measured window\n",
            self.gpu_price_per_hour
        );

        let ms = fmt_ms;
        let _ = writeln!(s, "## Audible TTFA, underruns, throughput\n");
        let _ = writeln!(
            s,
            "| rate (req/s) | sent | ok | errors | TTFA p50 (ms) | TTFA p95 (ms) | TTFA p99 (ms) | TTFA max (ms) | underruns | streams with underruns | gap total (ms) | chars/s | audio s/s | $ per 1M chars |"
        );
        let _ = writeln!(s, "|{}", "---:|".repeat(14));
        for r in &self.rates {
            let a = r.ttfa_ms;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {} |",
                fmt_rate(r.rate),
                r.sent,
                r.ok,
                r.error_count(),
                ms(a.map(|p| p.p50)),
                ms(a.map(|p| p.p95)),
                ms(a.map(|p| p.p99)),
                ms(a.map(|p| p.max)),
                r.underruns,
                r.streams_with_underruns,
                r.underrun_ms,
                r.throughput.chars_per_s,
                r.throughput.audio_s_per_s,
                r.cost_per_million_chars
                    .map_or("-".to_string(), |c| format!("{c:.3}")),
            );
        }
        let _ = writeln!(s, "\n## Time to first byte and end to end\n");
        let _ = writeln!(
            s,
            "| rate (req/s) | TTFB p50 (ms) | TTFB p95 (ms) | TTFB p99 (ms) | E2E p50 (ms) | E2E p95 (ms) | E2E p99 (ms) | mean audio (s) | send lag p99 (ms) | tightest buffer min / p0.1 / p1 (ms) |"
        );
        let _ = writeln!(s, "|{}", "---:|".repeat(10));
        for r in &self.rates {
            let (b, e) = (r.ttfb_ms, r.e2e_ms);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                fmt_rate(r.rate),
                ms(b.map(|p| p.p50)),
                ms(b.map(|p| p.p95)),
                ms(b.map(|p| p.p99)),
                ms(e.map(|p| p.p50)),
                ms(e.map(|p| p.p95)),
                ms(e.map(|p| p.p99)),
                r.audio_s
                    .map_or("-".to_string(), |p| format!("{:.2}", p.mean)),
                ms(r.send_lag_ms.map(|p| p.p99)),
                r.tightest_buffer_ms.map_or("-".to_string(), |t| format!(
                    "{:.1} / {:.1} / {:.1}",
                    t.min, t.p0_1, t.p1
                )),
            );
        }
        s.push_str(&timeline::markdown(&self.rates));
        let troubled: Vec<&RateReport> = self
            .rates
            .iter()
            .filter(|r| r.error_count() > 0 || r.ok_without_onset > 0)
            .collect();
        if !troubled.is_empty() {
            let _ = writeln!(s, "\n## Errors\n");
            for r in troubled {
                let _ = writeln!(s, "- {} req/s: {}", fmt_rate(r.rate), problems(r));
            }
        }
        s
    }
}

/// `http_429 x3, timeout x1` and silent streams.
fn problems(r: &RateReport) -> String {
    let mut parts: Vec<String> = r.errors.iter().map(|(k, n)| format!("{k} x{n}")).collect();
    if r.ok_without_onset > 0 {
        parts.push(format!("ok without audible onset x{}", r.ok_without_onset));
    }
    parts.join(", ")
}

/// A table cell of milliseconds: one decimal, `-` for none.
pub fn fmt_ms(x: Option<f64>) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.1}"))
}

/// `10` rather than `10.0`; fractions kept.
pub fn fmt_rate(rate: f64) -> String {
    if rate.fract() == 0.0 && rate.abs() < 1e15 {
        format!("{rate:.0}")
    } else {
        format!("{rate}")
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    utc_string(secs)
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, H. Hinnant).
pub fn utc_string(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Outcome;

    fn rec(index: usize, measured: bool, outcome: Outcome) -> RequestRecord {
        RequestRecord {
            index,
            prompt: index,
            chars: 60,
            measured,
            scheduled_s: 0.0,
            sent_s: 0.0,
            outcome,
            error: None,
            retry_after: None,
            request_id: None,
            connect_ms: None,
            ttfb_ms: None,
            ttfa_ms: None,
            e2e_ms: None,
            done_s: None,
            audio_s: 0.0,
            bytes: 0,
            underruns: 0,
            underrun_ms: 0.0,
            tolerated_gaps: 0,
            tolerated_gap_ms: 0.0,
            tightest_ms: None,
            first_underrun_ms: None,
        }
    }

    fn ok(index: usize, measured: bool, done_s: f64, ttfa: f64, underruns: u32) -> RequestRecord {
        RequestRecord {
            ttfb_ms: Some(ttfa - 1.0),
            ttfa_ms: Some(ttfa),
            e2e_ms: Some(100.0),
            done_s: Some(done_s),
            audio_s: 4.0,
            underruns,
            underrun_ms: 5.0 * underruns as f64,
            tightest_ms: Some(if underruns > 0 { 0.0 } else { ttfa }),
            ..rec(index, measured, Outcome::Ok)
        }
    }

    #[test]
    fn cost_per_million_characters() {
        // $4.29/hour at 1,000 chars/s: 3.6 M chars an hour, $1.1917 per million.
        let c = cost_per_million_chars(4.29, 1000.0).unwrap();
        assert!((c - 4.29 / 3.6).abs() < 1e-12);
        // $0.25 per million at $4.29/hour needs 4,767 chars/s.
        let c = cost_per_million_chars(4.29, 4.29 / 0.25 / 3600.0 * 1e6).unwrap();
        assert!((c - 0.25).abs() < 1e-12);
        assert_eq!(cost_per_million_chars(4.29, 0.0), None);
    }

    #[test]
    fn measured_window_errors_and_throughput() {
        // Warm-up 10 s, window 10 s.
        let records = vec![
            ok(0, false, 9.0, 500.0, 0),  // warm-up, finished before the window
            ok(1, false, 10.5, 400.0, 0), // warm-up arrival finishing in the window: throughput only
            ok(2, true, 12.0, 10.0, 0),
            ok(3, true, 13.0, 20.0, 2),
            ok(4, true, 21.0, 30.0, 0), // measured, finished after the window
            rec(5, true, Outcome::Http { status: 429 }),
            rec(6, true, Outcome::Http { status: 429 }),
            rec(7, true, Outcome::Timeout),
            rec(8, true, Outcome::Skipped),
            rec(9, false, Outcome::Transport), // warm-up error: not counted
            RequestRecord {
                ttfa_ms: None,
                ..ok(10, true, 14.0, 0.0, 0)
            },
        ];
        let r = RateReport::from_records(5.0, 10.0, 10.0, 3.6, &records, false);
        assert_eq!(r.warmup_arrivals, 3);
        assert_eq!(r.arrivals, 8);
        assert_eq!(r.sent, 7);
        assert_eq!(r.ok, 4);
        assert_eq!(r.ok_without_onset, 1);
        assert_eq!(
            r.errors,
            BTreeMap::from([
                ("http_429".to_string(), 2),
                ("skipped".to_string(), 1),
                ("timeout".to_string(), 1)
            ])
        );
        assert_eq!(r.error_count(), 4);
        let a = r.ttfa_ms.unwrap();
        assert_eq!((a.n, a.p50, a.max), (3, 20.0, 30.0));
        assert_eq!(r.underruns, 2);
        assert_eq!(r.streams_with_underruns, 1);
        assert_eq!(r.underrun_ms, 10.0);
        // Over the four measured ok streams (2, 3, 4, 10): the one with gaps kept nothing.
        let t = r.tightest_buffer_ms.unwrap();
        assert_eq!((t.n, t.min, t.p50), (4, 0.0, 0.0));
        // Finished in [10, 20): records 1, 2, 3, 10 -> 240 chars, 16 s of audio over 10 s.
        assert_eq!(r.throughput.completed, 4);
        assert!((r.throughput.chars_per_s - 24.0).abs() < 1e-12);
        assert!((r.throughput.audio_s_per_s - 1.6).abs() < 1e-12);
        // $3.60/hour at 24 chars/s (86,400 chars an hour): $41.67 per million.
        let c = r.cost_per_million_chars.unwrap();
        assert!((c - 3.6 / 86_400.0 * 1e6).abs() < 1e-9);
        assert!(r.records.is_none());
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_string(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_string(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_string(1_767_225_599), "2025-12-31T23:59:59Z");
        assert_eq!(fmt_rate(10.0), "10");
        assert_eq!(fmt_rate(2.5), "2.5");
    }
}
