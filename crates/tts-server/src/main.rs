//! `qwen3-tts`: the Qwen3-TTS inference server and its command-line tools.

use std::process::ExitCode;

use clap::Parser;
use tts_server::cli;

fn main() -> ExitCode {
    // before any thread or CUDA starts
    let module_loading = tts_cuda::libs::prefer_eager_module_loading();
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    tracing::info!(%module_loading, "CUDA module loading");
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
