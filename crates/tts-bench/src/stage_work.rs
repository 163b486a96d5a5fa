//! What a server's stages did between two `/metrics` snapshots (Prometheus text format):
//! per stage the calls, mean rows per call, mean call duration and busy seconds, the calls
//! that served two stages at once (counted under both), and the mean time from submission
//! to first audio. An end-to-end sweep snapshots `/metrics` after
//! each rate (`bench/e2e-sweep.sh`); the difference of consecutive snapshots is that rate's
//! window (warm-up, measured part and drain).

use std::collections::BTreeMap;
use std::fmt;

use tts_engine::metrics::{
    SHARED_CALL_DURATION, STAGE_BATCH_SIZE, STAGE_DURATION, TIME_TO_FIRST_AUDIO,
};
use tts_engine::scheduler::Stage;

/// The stages in the order a frame passes them; stage labels the engine does not name
/// follow by name.
const STAGE_ORDER: [Stage; 4] = [
    Stage::Prefill,
    Stage::TalkerStep,
    Stage::CodePredictor,
    Stage::Codec,
];

#[derive(Debug, thiserror::Error)]
pub enum StageWorkError {
    #[error("line {line}: {why}: {text}")]
    Parse {
        line: usize,
        why: &'static str,
        text: String,
    },
}

/// One snapshot: every sample as (metric name, sorted labels) -> value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    samples: BTreeMap<(String, Vec<(String, String)>), f64>,
}

impl Snapshot {
    /// Reads the text exposition format: `name{label="value",...} value [timestamp]`
    /// lines; comments and blank lines are skipped.
    pub fn parse(text: &str) -> Result<Self, StageWorkError> {
        let mut samples = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |why| StageWorkError::Parse {
                line: i + 1,
                why,
                text: raw.to_string(),
            };
            let (series, rest) = match line.find('{') {
                Some(open) => {
                    let close = line[open..]
                        .find('}')
                        .ok_or_else(|| err("unclosed labels"))?;
                    (&line[..open + close + 1], &line[open + close + 1..])
                }
                None => line
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| err("no value"))?,
            };
            let value = rest
                .split_whitespace()
                .next()
                .ok_or_else(|| err("no value"))?
                .parse::<f64>()
                .map_err(|_| err("value is not a number"))?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, parse_labels(&labels[..labels.len() - 1])),
                None => (series, Vec::new()),
            };
            samples.insert((name.to_string(), labels), value);
        }
        Ok(Self { samples })
    }

    /// The sum over every series of `name` whose labels include `label` (0 if none).
    fn sum(&self, name: &str, label: Option<(&str, &str)>) -> f64 {
        self.samples
            .iter()
            .filter(|((n, labels), _)| {
                n == name
                    && label.is_none_or(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// The values of label `key` on the series of `name`.
    fn label_values(&self, name: &str, key: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .samples
            .keys()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, labels)| labels.iter().filter(|(k, _)| k == key))
            .map(|(_, v)| v.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// `a="x",b="y"` as sorted pairs (values unescaped for `\"` and `\\`).
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((
            key.trim_matches(|c: char| c == ',' || c.is_whitespace())
                .to_string(),
            value,
        ));
        rest = &after[end..];
    }
    out.sort();
    out
}

/// One stage's work in a window.
#[derive(Debug, Clone, PartialEq)]
pub struct StageWork {
    pub stage: String,
    pub calls: f64,
    /// Rows summed over the calls.
    pub rows: f64,
    pub busy_s: f64,
}

impl StageWork {
    pub fn mean_rows(&self) -> f64 {
        self.rows / self.calls.max(1.0)
    }

    pub fn ms_per_call(&self) -> f64 {
        1000.0 * self.busy_s / self.calls.max(1.0)
    }
}

/// Calls that served two stages at once (`tts_shared_call_duration_seconds`), by pair.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedCalls {
    /// `first+second`, e.g. `prefill+talker_step`.
    pub stages: String,
    pub calls: f64,
    pub busy_s: f64,
}

/// What happened between two snapshots.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Requests that reached first audio, and their mean time to it (ms).
    pub first_audio: (f64, f64),
    pub stages: Vec<StageWork>,
    /// Each such call is in both its stages' figures too.
    pub shared: Vec<SharedCalls>,
}

impl Window {
    /// The differences `after - before`, stages in engine order.
    pub fn between(before: &Snapshot, after: &Snapshot) -> Self {
        let diff = |name: &str, label: Option<(&str, &str)>| {
            after.sum(name, label) - before.sum(name, label)
        };
        let n = diff(&format!("{TIME_TO_FIRST_AUDIO}_count"), None);
        let s = diff(&format!("{TIME_TO_FIRST_AUDIO}_sum"), None);
        let mut names = after.label_values(&format!("{STAGE_DURATION}_count"), "stage");
        names.sort_by_key(|n| {
            (
                STAGE_ORDER
                    .iter()
                    .position(|o| o.name() == n)
                    .unwrap_or(usize::MAX),
                n.clone(),
            )
        });
        let stages = names
            .into_iter()
            .map(|stage| {
                let l = Some(("stage", stage.as_str()));
                StageWork {
                    calls: diff(&format!("{STAGE_DURATION}_count"), l),
                    rows: diff(&format!("{STAGE_BATCH_SIZE}_sum"), l),
                    busy_s: diff(&format!("{STAGE_DURATION}_sum"), l),
                    stage,
                }
            })
            .collect();
        let shared = after
            .label_values(&format!("{SHARED_CALL_DURATION}_count"), "stages")
            .into_iter()
            .map(|pair| {
                let l = Some(("stages", pair.as_str()));
                SharedCalls {
                    calls: diff(&format!("{SHARED_CALL_DURATION}_count"), l),
                    busy_s: diff(&format!("{SHARED_CALL_DURATION}_sum"), l),
                    stages: pair,
                }
            })
            .filter(|p| p.calls > 0.0)
            .collect();
        Self {
            first_audio: (n, if n > 0.0 { 1000.0 * s / n } else { 0.0 }),
            stages,
            shared,
        }
    }

    /// GPU-busy seconds over every stage, a call that served two stages once.
    pub fn busy_s(&self) -> f64 {
        let stages: f64 = self.stages.iter().map(|s| s.busy_s).sum();
        stages - self.shared.iter().map(|p| p.busy_s).sum::<f64>()
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, mean) = self.first_audio;
        write!(f, "server first PCM mean {mean:.2} ms (n={n:.0})")?;
        for s in &self.stages {
            write!(
                f,
                "; {} {:.0} x {:.1} rows, {:.2} ms, {:.1} s",
                s.stage,
                s.calls,
                s.mean_rows(),
                s.ms_per_call(),
                s.busy_s
            )?;
        }
        for p in &self.shared {
            write!(
                f,
                "; of these, {} {:.0} calls in both, {:.1} s",
                p.stages, p.calls, p.busy_s
            )?;
        }
        write!(f, "; busy {:.1} s", self.busy_s())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# TYPE tts_stage_duration_seconds summary
tts_stage_duration_seconds_sum{stage="prefill"} 1.0
tts_stage_duration_seconds_count{stage="prefill"} 10
tts_stage_duration_seconds_sum{stage="codec"} 2.0
tts_stage_duration_seconds_count{stage="codec"} 20
tts_stage_batch_size_sum{stage="prefill"} 10
tts_stage_batch_size_sum{stage="codec"} 40
tts_time_to_first_audio_seconds_sum 0.1
tts_time_to_first_audio_seconds_count 10
"#;

    const AFTER: &str = r#"tts_stage_duration_seconds_sum{stage="codec"} 6.0
tts_stage_duration_seconds_count{stage="codec"} 60
tts_stage_duration_seconds_sum{stage="prefill"} 1.5
tts_stage_duration_seconds_count{stage="prefill"} 20
tts_stage_duration_seconds_sum{stage="talker_step",model="a b"} 3.0 1700000000
tts_stage_duration_seconds_count{stage="talker_step",model="a b"} 1000
tts_stage_batch_size_sum{stage="prefill"} 22
tts_stage_batch_size_sum{stage="codec"} 200
tts_stage_batch_size_sum{model="a b",stage="talker_step"} 4000
tts_time_to_first_audio_seconds_sum 0.3
tts_time_to_first_audio_seconds_count 20
tts_shared_call_duration_seconds_sum{stages="prefill+talker_step"} 0.25
tts_shared_call_duration_seconds_count{stages="prefill+talker_step"} 5
"#;

    #[test]
    fn a_window_is_the_difference_of_two_snapshots_in_engine_order() {
        let w = Window::between(
            &Snapshot::parse(BEFORE).unwrap(),
            &Snapshot::parse(AFTER).unwrap(),
        );
        let names: Vec<_> = w.stages.iter().map(|s| s.stage.as_str()).collect();
        assert_eq!(names, ["prefill", "talker_step", "codec"]);
        assert_eq!(w.first_audio.0, 10.0);
        assert!((w.first_audio.1 - 20.0).abs() < 1e-9);
        let prefill = &w.stages[0];
        assert_eq!((prefill.calls, prefill.rows), (10.0, 12.0));
        assert!((prefill.ms_per_call() - 50.0).abs() < 1e-9);
        let talker = &w.stages[1];
        assert_eq!((talker.calls, talker.mean_rows()), (1000.0, 4.0));
        let codec = &w.stages[2];
        assert!((codec.busy_s - 4.0).abs() < 1e-9 && (codec.mean_rows() - 4.0).abs() < 1e-9);
        assert_eq!(
            w.shared,
            [SharedCalls {
                stages: "prefill+talker_step".into(),
                calls: 5.0,
                busy_s: 0.25
            }]
        );
        assert!(
            (w.busy_s() - 7.25).abs() < 1e-9,
            "shared calls counted once"
        );
        assert_eq!(
            w.to_string(),
            "server first PCM mean 20.00 ms (n=10); prefill 10 x 1.2 rows, 50.00 ms, 0.5 s; \
             talker_step 1000 x 4.0 rows, 3.00 ms, 3.0 s; codec 40 x 4.0 rows, 100.00 ms, \
             4.0 s; of these, prefill+talker_step 5 calls in both, 0.2 s; busy 7.2 s"
        );
        let plain = Window::between(&Snapshot::parse(BEFORE).unwrap(), &Snapshot::default());
        assert!(plain.shared.is_empty());
    }

    #[test]
    fn labels_are_matched_whatever_their_order_and_escapes() {
        let s = Snapshot::parse("m{b=\"x \\\"y\\\"\",a=\"1\"} 2\nm{a=\"1\"} 3\n").unwrap();
        assert_eq!(s.sum("m", Some(("a", "1"))), 5.0);
        assert_eq!(s.sum("m", Some(("b", "x \"y\""))), 2.0);
        assert_eq!(s.sum("m", None), 5.0);
        assert_eq!(s.sum("other", None), 0.0);
    }

    #[test]
    fn malformed_lines_are_reported_with_their_number() {
        for (text, line) in [("ok 1\nbad\n", 2), ("m{a=\"1\" 3\n", 1), ("m x\n", 1)] {
            match Snapshot::parse(text) {
                Err(StageWorkError::Parse { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
