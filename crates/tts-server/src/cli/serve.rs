//! `qwen3-tts serve`: the HTTP/WebSocket server (see `server`).

use anyhow::Context;

pub use crate::server::ServeArgs;

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.resolve()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("qwen3-tts-http")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(crate::server::serve(config))
}
