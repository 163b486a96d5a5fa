//! Audible TTFA over a rate's whole run, in slices of arrival time, warm-up included: the
//! window's percentiles fold a transient (a cold server's start-up backlog, a stall) into
//! one number; the slices show when it happened and how long it lasted.

use std::fmt::Write as _;

use serde::Serialize;

use crate::record::RequestRecord;
use crate::report::{fmt_ms, fmt_rate, RateReport};
use crate::stats::Percentiles;

/// Seconds of arrival time per slice.
pub const SLICE_S: f64 = 10.0;

/// The requests that arrived in one slice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slice {
    /// Start and end of the slice, in seconds from the start of the rate's run.
    pub start_s: f64,
    pub end_s: f64,
    /// Whether the slice lies in the warm-up (slices never straddle the window's start).
    pub warmup: bool,
    /// Requests sent (arrivals not skipped by `--max-in-flight`).
    pub sent: usize,
    /// Of those, the ones that did not end `ok`.
    pub failed: usize,
    pub underruns: u64,
    /// Over the `ok` ones with an audible onset.
    pub ttfa_ms: Option<Percentiles>,
}

/// The run's records in slices of `slice_s` seconds of arrival (scheduled) time, from 0 to
/// the last arrival, laid from the window's start (`warmup_s`) both ways, so a slice is all
/// warm-up or all window (the first one may be shorter).
pub fn slices(records: &[RequestRecord], slice_s: f64, warmup_s: f64) -> Vec<Slice> {
    let slice_of = |t: f64| ((t - warmup_s) / slice_s).floor() as i64;
    let Some(last) = records.iter().map(|r| slice_of(r.scheduled_s)).max() else {
        return Vec::new();
    };
    let first = slice_of(0.0);
    // one pass over the records: each sent one into its slice
    let mut by_slice: Vec<Vec<&RequestRecord>> = vec![Vec::new(); (last - first + 1) as usize];
    for r in records.iter().filter(|r| r.outcome.label() != "skipped") {
        by_slice[(slice_of(r.scheduled_s) - first) as usize].push(r);
    }
    (first..)
        .zip(by_slice)
        .map(|(k, inside)| {
            let ok = inside.iter().filter(|r| r.outcome.is_ok());
            Slice {
                start_s: (warmup_s + k as f64 * slice_s).max(0.0),
                end_s: warmup_s + (k + 1) as f64 * slice_s,
                warmup: k < 0,
                sent: inside.len(),
                failed: inside.iter().filter(|r| !r.outcome.is_ok()).count(),
                underruns: ok.clone().map(|r| u64::from(r.underruns)).sum(),
                ttfa_ms: Percentiles::of(ok.filter_map(|r| r.ttfa_ms)),
            }
        })
        .collect()
}

/// One stdout line per rate: TTFA p95 of each slice, `|` where the measured window starts.
pub fn summary_line(r: &RateReport) -> String {
    let mut s = format!(
        "rate {}/s: TTFA p95 per {SLICE_S:.0} s of arrivals:",
        fmt_rate(r.rate)
    );
    let mut in_warmup = true;
    for slice in &r.timeline {
        if in_warmup && !slice.warmup {
            s.push_str(" |");
            in_warmup = false;
        }
        match slice.ttfa_ms {
            Some(p) => {
                let _ = write!(s, " {:.1}", p.p95);
            }
            None => s.push_str(" -"),
        }
    }
    s
}

/// The `bench.md` section: a row per rate and slice.
pub fn markdown(rates: &[RateReport]) -> String {
    let mut s = format!(
        "\n## Audible TTFA over the run ({SLICE_S:.0} s slices of arrival time, warm-up included)\n\n"
    );
    s.push_str(
        "| rate (req/s) | slice (s) | part | sent | not ok | underruns | TTFA p50 (ms) | TTFA p95 (ms) | TTFA max (ms) |\n",
    );
    s.push_str(&format!("|{}\n", "---:|".repeat(9)));
    for r in rates {
        for slice in &r.timeline {
            let a = slice.ttfa_ms;
            let _ = writeln!(
                s,
                "| {} | {:.0}-{:.0} | {} | {} | {} | {} | {} | {} | {} |",
                fmt_rate(r.rate),
                slice.start_s,
                slice.end_s,
                if slice.warmup { "warm-up" } else { "window" },
                slice.sent,
                slice.failed,
                slice.underruns,
                fmt_ms(a.map(|p| p.p50)),
                fmt_ms(a.map(|p| p.p95)),
                fmt_ms(a.map(|p| p.max)),
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Outcome;

    fn arrival(at: f64, outcome: Outcome, ttfa: Option<f64>, underruns: u32) -> RequestRecord {
        RequestRecord {
            index: 0,
            prompt: 0,
            chars: 60,
            measured: at >= 20.0,
            scheduled_s: at,
            sent_s: at,
            outcome,
            error: None,
            retry_after: None,
            request_id: None,
            connect_ms: None,
            ttfb_ms: ttfa,
            ttfa_ms: ttfa,
            e2e_ms: None,
            done_s: None,
            audio_s: 0.0,
            bytes: 0,
            underruns,
            underrun_ms: 0.0,
            tolerated_gaps: 0,
            tolerated_gap_ms: 0.0,
            tightest_ms: None,
            first_underrun_ms: None,
        }
    }

    #[test]
    fn slices_follow_arrival_time_and_mark_the_warm_up() {
        // 20 s warm-up; a backlog in the first slice, nothing in the second, then calm.
        let records = vec![
            arrival(1.0, Outcome::Ok, Some(700.0), 1),
            arrival(2.0, Outcome::Ok, Some(900.0), 0),
            arrival(9.9, Outcome::Http { status: 429 }, None, 0),
            arrival(21.0, Outcome::Ok, Some(30.0), 0),
            arrival(25.0, Outcome::Ok, Some(40.0), 0),
            arrival(29.0, Outcome::Skipped, None, 0),
            arrival(31.0, Outcome::Ok, None, 2), // no audible onset
        ];
        let s = slices(&records, 10.0, 20.0);
        assert_eq!(s.len(), 4);
        assert_eq!(
            s.iter().map(|x| (x.start_s, x.warmup)).collect::<Vec<_>>(),
            vec![(0.0, true), (10.0, true), (20.0, false), (30.0, false)]
        );
        let first = &s[0];
        assert_eq!((first.sent, first.failed, first.underruns), (3, 1, 1));
        let a = first.ttfa_ms.unwrap();
        assert_eq!((a.n, a.p50, a.max), (2, 700.0, 900.0));
        assert_eq!((s[1].sent, s[1].ttfa_ms), (0, None));
        // the skipped arrival is not sent
        assert_eq!(s[2].sent, 2);
        assert_eq!(s[2].ttfa_ms.unwrap().p95, 40.0);
        assert_eq!((s[3].sent, s[3].underruns, s[3].ttfa_ms), (1, 2, None));
        assert!(slices(&[], 10.0, 20.0).is_empty());
        // a 5 s warm-up: one short warm-up slice, then whole ones from the window's start
        let s = slices(&records, 10.0, 5.0);
        assert_eq!(
            s.iter()
                .map(|x| (x.start_s, x.end_s, x.warmup, x.sent))
                .collect::<Vec<_>>(),
            vec![
                (0.0, 5.0, true, 2),
                (5.0, 15.0, false, 1),
                (15.0, 25.0, false, 1),
                (25.0, 35.0, false, 2)
            ]
        );
    }

    #[test]
    fn the_summary_line_and_table_show_every_slice() {
        let records = vec![
            arrival(1.0, Outcome::Ok, Some(700.0), 0),
            arrival(21.0, Outcome::Ok, Some(30.0), 0),
        ];
        let r = RateReport::from_records(125.0, 20.0, 10.0, 4.29, &records, false);
        assert_eq!(
            summary_line(&r),
            "rate 125/s: TTFA p95 per 10 s of arrivals: 700.0 - | 30.0"
        );
        let md = markdown(&[r]);
        assert!(md.contains("| 125 | 0-10 | warm-up | 1 | 0 | 0 | 700.0 | 700.0 | 700.0 |"));
        assert!(md.contains("| 125 | 10-20 | warm-up | 0 | 0 | 0 | - | - | - |"));
        assert!(md.contains("| 125 | 20-30 | window | 1 | 0 | 0 | 30.0 | 30.0 | 30.0 |"));
    }
}
