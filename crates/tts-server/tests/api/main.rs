//! The server as clients use it: a real server on loopback (port 0) with the `demo` model
//! on the CPU. `formats`: every format and SSE, metadata routes, API keys. `faults`: bad
//! input, disconnects, floods, slow clients. `websocket`: the streaming-text session.
//! `replicas`: two engines behind one server. `cloning`: voice cloning with a Base model.

#[path = "../common/mod.rs"]
mod common;

mod cloning;
mod faults;
mod formats;
mod replicas;
mod websocket;
