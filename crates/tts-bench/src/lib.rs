//! Load generation and measurement for qwen3-tts-server.
