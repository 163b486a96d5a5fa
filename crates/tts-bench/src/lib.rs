//! `qwen3-tts bench`: an open-loop load generator against a running qwen3-tts server, and
//! its measurements (DESIGN.md, "Measurement"; definitions in `docs/bench.md`).
//!
//! Layout: `spec` (options) -> `run` (per rate: `arrivals` schedule, one task per request
//! through `client_http` or `client_ws`) -> each stream followed by `stream` (s16le
//! decoding, onset rule from `tts_engine`, simulated `playback`) into a `record` ->
//! `report` (per-rate summaries with `stats` and the `timeline` of each run; stdout table,
//! JSON, Markdown, and the `plot`).

pub mod arrivals;
pub mod client;
pub mod client_http;
pub mod client_ws;
pub mod ncu;
pub mod playback;
pub mod plot;
pub mod record;
pub mod report;
pub mod run;
pub mod spec;
pub mod stage_work;
pub mod stats;
pub mod stream;
pub mod timeline;

pub use record::{Outcome, RequestRecord};
pub use report::{BenchReport, RateReport};
pub use spec::{parse_args, BenchArgs, BenchSpec, Protocol};

/// The `bench` subcommand: runs the sweep, prints the table, writes the reports to `--out`.
pub fn cli_main(args: BenchArgs) -> anyhow::Result<()> {
    let spec = BenchSpec::from_args(args)?;
    let out = spec.out.clone();
    let command = command_line(std::env::args());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(run::run(spec, Some(command)))?;
    print!("{}", report.table());
    if let Some(dir) = out {
        for path in report.write(&dir)? {
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// The command line as a shell would take it back, with the API key hidden.
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    let mut out = Vec::new();
    let mut hide_next = false;
    for a in args {
        if hide_next {
            hide_next = false;
            out.push("***".to_string());
        } else if a.starts_with("--api-key=") {
            out.push("--api-key=***".to_string());
        } else {
            hide_next = a == "--api-key";
            out.push(shell_quote(&a));
        }
    }
    out.join(" ")
}

fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_hide_the_key_and_quote() {
        let argv = [
            "qwen3-tts",
            "bench",
            "--api-key",
            "sekret",
            "--api-key=s2",
            "--label",
            "it's a run",
            "--rates",
            "1,5",
        ];
        assert_eq!(
            command_line(argv.iter().map(|s| s.to_string())),
            r"qwen3-tts bench --api-key *** --api-key=*** --label 'it'\''s a run' --rates 1,5"
        );
    }
}
