//! The HTTP routes, one file each.

pub mod health;
pub mod metrics;
pub mod models;
pub mod playground;
pub mod speech;
pub mod stream_ws;
pub mod voices;
