//! `tts-server`: the `qwen3-tts` binary's library: the HTTP/WebSocket server
//! ([`server`]), its audio encoders ([`audio`]), backend selection ([`backend`]) and the
//! command line ([`cli`]).

pub mod audio;
pub mod backend;
pub mod cli;
pub mod server;
