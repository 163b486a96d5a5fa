//! Command-line interface: subcommands and their options.

mod bench_engine;
mod bench_stages;
mod serve;
mod synth;

use clap::{Parser, Subcommand};

/// Qwen3-TTS inference: synthesize speech, serve it, benchmark it.
#[derive(Debug, Parser)]
#[command(name = "qwen3-tts", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Synthesize one utterance to a WAV file (and optionally its codes to JSON).
    Synth(synth::SynthArgs),
    /// Serve the HTTP/WebSocket API and the playground.
    Serve(serve::ServeArgs),
    /// Per-stage GPU latency and weight bandwidth for each batch size (CUDA only).
    BenchStages(bench_stages::BenchStagesArgs),
    /// In-process engine load test (Poisson arrivals) on any device.
    BenchEngine(bench_engine::BenchEngineArgs),
    /// Open-loop load generator against a running server
    Bench(tts_bench::BenchArgs),
}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Synth(args) => synth::run(args),
        Command::Serve(args) => serve::run(args),
        Command::BenchStages(args) => bench_stages::run(args),
        Command::BenchEngine(args) => bench_engine::run(args),
        Command::Bench(args) => tts_bench::cli_main(args),
    }
}
