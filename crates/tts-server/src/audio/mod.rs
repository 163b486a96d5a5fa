//! Audio output: PCM conversion and container encoders.

pub mod wav;
