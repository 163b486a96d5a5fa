//! Per-kernel tables of one code-predictor call and one talker step from Nsight Compute's
//! CSV over `qwen3-tts bench-stages` (`bench/ncu-stages.sh`): every graph node timed alone
//! (`gpu__time_duration.sum`), so a table says which kernels a stage spends its time in,
//! not the stage's time inside its graph (no overlap between launches there).
//!
//! A code-predictor call is found as the last `cp_first_input` launch and the launches up
//! to its 15th `sample_cp`; a talker step as the last `sample_talker` launch and the
//! launches back to the `frame_embedding` before it; a codec pass as the last `codec_rvq`
//! launch followed by a `codec_final`, and the launches between them.

use std::collections::HashMap;
use std::fmt;

/// Codebooks the code predictor samples per call (1..=15).
const CP_STEPS: usize = 15;

#[derive(Debug, thiserror::Error)]
pub enum NcuError {
    #[error("reading the CSV: {0}")]
    Csv(#[from] csv::Error),
    #[error("the CSV has no `{0}` column (is it `ncu --csv --print-units base`?)")]
    MissingColumn(&'static str),
    #[error("row {row}: metric value `{value}` is not a number")]
    BadValue { row: usize, value: String },
    #[error("row {row}: unit `{unit}` is not a time unit")]
    BadUnit { row: usize, unit: String },
}

/// One kernel launch: its name (up to the argument list), grid and time.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    pub name: String,
    pub grid: String,
    pub micros: f64,
}

/// The launches of `gpu__time_duration.sum` in `text`, in launch order. Lines that are not
/// CSV records (ncu's `==PROF==` notes, the program's own output) are skipped.
pub fn parse(text: &str) -> Result<Vec<KernelTime>, NcuError> {
    let records: String = text
        .lines()
        .filter(|l| l.starts_with('"'))
        .flat_map(|l| [l, "\n"])
        .collect();
    let mut reader = csv::Reader::from_reader(records.as_bytes());
    let headers = reader.headers()?.clone();
    let column = |name: &'static str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or(NcuError::MissingColumn(name))
    };
    let (kernel, grid, metric, unit, value) = (
        column("Kernel Name")?,
        column("Grid Size")?,
        column("Metric Name")?,
        column("Metric Unit")?,
        column("Metric Value")?,
    );
    let mut out = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let r = record?;
        if r.get(metric) != Some("gpu__time_duration.sum") {
            continue;
        }
        let row = i + 2;
        let raw = r.get(value).unwrap_or_default();
        let v: f64 = raw
            .replace(',', "")
            .parse()
            .map_err(|_| NcuError::BadValue {
                row,
                value: raw.to_string(),
            })?;
        let u = r.get(unit).unwrap_or_default();
        let scale = match u {
            "ns" | "nsecond" => 1e-3,
            "us" | "usecond" => 1.0,
            "ms" | "msecond" => 1e3,
            _ => {
                return Err(NcuError::BadUnit {
                    row,
                    unit: u.to_string(),
                })
            }
        };
        let name = r.get(kernel).unwrap_or_default();
        out.push(KernelTime {
            name: name.split('(').next().unwrap_or(name).trim().to_string(),
            grid: r.get(grid).unwrap_or_default().to_string(),
            micros: v * scale,
        });
    }
    Ok(out)
}

/// The launches of the last complete code-predictor call (a run cut short may end in
/// part of one).
pub fn last_code_predictor_call(k: &[KernelTime]) -> Option<&[KernelTime]> {
    let starts = k
        .iter()
        .enumerate()
        .filter(|(_, t)| t.name == "cp_first_input");
    starts.map(|(i, _)| i).rev().find_map(|start| {
        let end = k[start..]
            .iter()
            .enumerate()
            .filter(|(_, t)| t.name == "sample_cp")
            .nth(CP_STEPS - 1)
            .map(|(i, _)| start + i)?;
        Some(&k[start..=end])
    })
}

/// The launches of the last talker step.
pub fn last_talker_step(k: &[KernelTime]) -> Option<&[KernelTime]> {
    let end = k.iter().rposition(|t| t.name == "sample_talker")?;
    let start = k[..end].iter().rposition(|t| t.name == "frame_embedding")?;
    Some(&k[start..=end])
}

/// The launches of the last complete codec pass: a `codec_rvq` launch (the codes' lookup)
/// through the `codec_final` after it (the last convolution), cuBLAS launches between
/// them included.
pub fn last_codec_pass(k: &[KernelTime]) -> Option<&[KernelTime]> {
    let starts = k.iter().enumerate().filter(|(_, t)| t.name == "codec_rvq");
    starts.map(|(i, _)| i).rev().find_map(|start| {
        let end = start + k[start..].iter().position(|t| t.name == "codec_final")?;
        Some(&k[start..=end])
    })
}

/// Launches summed by (kernel, grid), largest total first.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTable {
    pub launches: usize,
    pub micros: f64,
    /// (name, grid, launches, total µs)
    pub rows: Vec<(String, String, usize, f64)>,
}

impl KernelTable {
    pub fn of(call: &[KernelTime]) -> Self {
        let mut by: HashMap<(&str, &str), (usize, f64)> = HashMap::new();
        for t in call {
            let e = by.entry((&t.name, &t.grid)).or_default();
            e.0 += 1;
            e.1 += t.micros;
        }
        let mut rows: Vec<_> = by
            .into_iter()
            .map(|((n, g), (c, us))| (n.to_string(), g.to_string(), c, us))
            .collect();
        rows.sort_by(|a, b| b.3.total_cmp(&a.3).then_with(|| a.0.cmp(&b.0)));
        Self {
            launches: call.len(),
            micros: call.iter().map(|t| t.micros).sum(),
            rows,
        }
    }
}

impl fmt::Display for KernelTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} launches, {:.1} µs in all",
            self.launches, self.micros
        )?;
        writeln!(f, "  µs total  launches  µs each  kernel grid")?;
        for (name, grid, n, us) in &self.rows {
            writeln!(
                f,
                "  {us:8.1}  {n:8}  {:7.2}  {name} {grid}",
                us / *n as f64
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"";

    fn line(id: usize, name: &str, grid: &str, ns: &str) -> String {
        format!(
            "\"{id}\",\"1\",\"qwen3-tts\",\"h\",\"{name}(float*, int)\",\"1\",\"7\",\"(256, 1, 1)\",\"{grid}\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"ns\",\"{ns}\""
        )
    }

    fn csv_of(kernels: &[(&str, &str, &str)]) -> String {
        let mut s = String::from("==PROF== Connected to process 1\nstage batch gpu ms\n");
        s += HEAD;
        s.push('\n');
        for (i, (n, g, ns)) in kernels.iter().enumerate() {
            s += &line(i, n, g, ns);
            s.push('\n');
        }
        s + "==PROF== Disconnected from process 1\n"
    }

    #[test]
    fn parses_times_with_thousands_separators_and_skips_other_lines() {
        let k = parse(&csv_of(&[
            ("gemv_m1", "(256, 1, 1)", "5,580"),
            ("x", "(1, 1, 1)", "900"),
        ]))
        .unwrap();
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].name, "gemv_m1");
        assert_eq!(k[0].grid, "(256, 1, 1)");
        assert!((k[0].micros - 5.58).abs() < 1e-9);
        assert!((k[1].micros - 0.9).abs() < 1e-9);
        let bad = csv_of(&[("x", "(1, 1, 1)", "fast")]);
        assert!(matches!(parse(&bad), Err(NcuError::BadValue { .. })));
        assert!(matches!(
            parse("\"ID\",\"Kernel Name\"\n"),
            Err(NcuError::MissingColumn(_))
        ));
    }

    #[test]
    fn finds_the_last_code_predictor_call_and_talker_step() {
        let mut ks = vec![("cp_first_input", "(1, 1, 1)", "1000")];
        for _ in 0..CP_STEPS {
            ks.push(("gemv", "(8, 1, 1)", "2000"));
            ks.push(("sample_cp", "(1, 1, 1)", "3000"));
        }
        // a second, complete call, then the talker step
        let call = ks.clone();
        ks.extend(call);
        ks.push(("frame_embedding", "(1, 1, 1)", "500"));
        ks.push(("gemv", "(8, 1, 1)", "2000"));
        ks.push(("sample_talker", "(1, 1, 1)", "1500"));
        let k = parse(&csv_of(&ks)).unwrap();
        let cp = last_code_predictor_call(&k).unwrap();
        assert_eq!(cp.len(), 1 + 2 * CP_STEPS);
        assert_eq!(cp[0].name, "cp_first_input");
        assert_eq!(cp.last().unwrap().name, "sample_cp");
        let t = KernelTable::of(cp);
        assert_eq!(t.launches, 31);
        assert!((t.micros - (1.0 + 15.0 * 5.0)).abs() < 1e-9);
        assert_eq!(
            t.rows[0],
            ("sample_cp".into(), "(1, 1, 1)".into(), 15, 45.0)
        );
        let step = last_talker_step(&k).unwrap();
        assert_eq!(step.len(), 3);
        assert!((KernelTable::of(step).micros - 4.0).abs() < 1e-9);
        // an unfinished call is not one: the one before it is taken
        let cut = &k[..k.len() - 8];
        assert_eq!(last_code_predictor_call(cut).unwrap().as_ptr(), k.as_ptr());
        assert!(last_code_predictor_call(&k[..20]).is_none());
    }

    #[test]
    fn finds_the_last_complete_codec_pass() {
        let pass = [
            ("codec_rvq", "(2, 1, 1)", "2000"),
            ("codec_gemv", "(64, 1, 1)", "3000"),
            ("nvjet_sm90_tss", "(4, 8, 1)", "6000"),
            ("codec_final", "(1, 1, 1)", "4000"),
        ];
        let mut ks = pass.to_vec();
        ks.push(("sample_cp", "(1, 1, 1)", "3000"));
        ks.extend_from_slice(&pass[..3]);
        let k = parse(&csv_of(&ks)).unwrap();
        // the second pass has no `codec_final`: the first one is taken
        let got = last_codec_pass(&k).unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got.as_ptr(), k.as_ptr());
        let t = KernelTable::of(got);
        assert!((t.micros - 15.0).abs() < 1e-9);
        assert_eq!(t.rows[0].0, "nvjet_sm90_tss");
        assert!(last_codec_pass(&k[..3]).is_none());
    }
}
