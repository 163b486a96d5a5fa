//! The CUDA backend against the CPU reference on the same weights: greedy codes identical,
//! logits within bf16 tolerances, sampling seeded and batch-independent, and exact codes
//! on the official fixtures (cloned voices included). Skips (and says so) when no CUDA
//! device is present.
//!
//! Both sides use the same bf16 weights; the GPU keeps f32 activations with f32
//! accumulation (GEMV, and split hi/lo bf16 GEMMs on cuBLAS). Tolerances: in "exact"
//! mode (f32 KV cache) greedy codes are identical to the CPU reference and to the
//! official fixtures; in the production mode (bf16 KV cache) talker logits after a
//! prefill are within 2e-2 relative error (max |Δ| / max |ref|) and greedy codes are
//! identical for the first frames compared.

#[path = "../common/mod.rs"]
mod common;

mod cloning;
mod codes;
mod kernel_choices;
mod linear;
mod lock_step;
mod stage_paths;
mod staged;

use std::path::Path;

use tts_cuda::bench::pad_steps;
use tts_cuda::codec::CodecPrecision;
use tts_cuda::{CudaBackend, CudaError, CudaOptions};
use tts_model::generate::synthesize;
use tts_model::reference::{CpuBackend, CpuModel};
use tts_model::{
    Backend, Fp8Scope, LoadOptions, Model, PrefillRow, SpeechRequest, StepRow, TextMode,
};

/// `fixtures/` of the repository (`$QWEN3_TTS_FIXTURES` when the binary runs elsewhere).
fn fixtures() -> std::path::PathBuf {
    std::env::var("QWEN3_TTS_FIXTURES")
        .map(Into::into)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"))
}

/// The GPU backend for `model`, or None (printing why) when there is no GPU. `exact`
/// keeps the KV caches in f32 (the production default is bf16).
fn gpu_backend_with(model: &Model, test: &str, exact: bool) -> Option<CudaBackend> {
    open_backend(model, test, options(exact))
}

/// The tests' backend options; `exact` as in [`gpu_backend_with`].
fn options(exact: bool) -> CudaOptions {
    CudaOptions {
        limits: tts_cuda::workspace::Limits {
            max_slots: 8,
            max_positions: 1024,
            max_batch: 16,
            max_prefill_tokens: 512,
            f32_kv: exact,
        },
        codec_precision: if exact {
            CodecPrecision::F32
        } else {
            CodecPrecision::Tf32
        },
        ..CudaOptions::default()
    }
}

/// The GPU backend for `model` with `opts`, or None (printing why) when there is no GPU.
fn open_backend(model: &Model, test: &str, opts: CudaOptions) -> Option<CudaBackend> {
    match CudaBackend::new(model, opts) {
        Ok(b) => Some(b),
        Err(CudaError::Unavailable(why)) => {
            common::report_skip(&format!("{test}: no CUDA device ({why})"));
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// (frame, codebook) of the first differing code, if any.
fn first_mismatch(a: &[[u32; 16]], b: &[[u32; 16]]) -> Option<(usize, usize)> {
    for (f, (x, y)) in a.iter().zip(b).enumerate() {
        if let Some(c) = (0..16).find(|&c| x[c] != y[c]) {
            return Some((f, c));
        }
    }
    (a.len() != b.len()).then(|| (a.len().min(b.len()), 0))
}

/// The production configuration (bf16 KV cache).
fn gpu_backend(model: &Model, test: &str) -> Option<CudaBackend> {
    gpu_backend_with(model, test, false)
}

fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn request(text: &str, voice: Option<&str>, mode: TextMode) -> SpeechRequest {
    SpeechRequest {
        text: text.into(),
        voice: voice.map(Into::into),
        language: "english".into(),
        text_mode: mode,
        ..Default::default()
    }
}

/// The demo model, and the full-size 1.7B geometry unless `QWEN3_TTS_SKIP_FULL_SIZE` is set.
fn models_to_check() -> Vec<&'static str> {
    let mut models = vec!["demo"];
    if std::env::var("QWEN3_TTS_SKIP_FULL_SIZE").is_err() {
        models.push("random:1.7b");
    }
    models
}
