//! The CUDA backend of qwen3-tts-server.
