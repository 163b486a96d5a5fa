//! Choosing and building the backend: the one place where a device name becomes a
//! `Backend` (CPU reference or CUDA).

use anyhow::Context;
use tts_cuda::codec::CodecPrecision;
use tts_cuda::persistent::{OwnRows, Prefetch};
use tts_model::reference::CpuBackend;
use tts_model::{Backend, Fp8Scope, Model};

/// Device selection: `cpu`, `cuda` or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device `{s}` (use cpu, cuda or cuda:N)")),
        }
    }
}

/// Sizes a backend is built for.
#[derive(Debug, Clone, Copy)]
pub struct BackendSize {
    pub max_slots: usize,
    pub max_batch: usize,
    pub max_positions: usize,
    /// A second stream for the code predictor, so it can run beside talker steps (CUDA;
    /// `Policy::side_by_side`).
    pub code_predictor_lane: bool,
    /// Prompts and talker steps of other requests in one talker pass when the engine
    /// pairs them (CUDA; `Policy::prefill_with_step`).
    pub merge_prefill: bool,
}

impl Default for BackendSize {
    fn default() -> Self {
        Self {
            max_slots: 64,
            max_batch: 64,
            max_positions: 2048,
            code_predictor_lane: false,
            merge_prefill: false,
        }
    }
}

/// Builds the backend for `device`.
pub fn create(
    model: &Model,
    device: Device,
    size: BackendSize,
) -> anyhow::Result<Box<dyn Backend>> {
    Ok(match device {
        Device::Cpu => Box::new(CpuBackend::with_fp8(model, size.max_slots, fp8_knob()?)?),
        Device::Cuda(n) => Box::new(create_cuda(model, n, size)?),
    })
}

/// Whether CUDA backends run talker steps and code-predictor loops of 17 to 24 rows in a
/// 24-row graph bucket (`QWEN3_TTS_BATCH_24=1`; the engine's policy then has that bucket
/// too, so its top-ups fill it).
pub fn batch_bucket_24() -> bool {
    std::env::var("QWEN3_TTS_BATCH_24").is_ok_and(|v| v == "1")
}

/// Builds the CUDA backend (graphs captured lazily; see `warm_up`).
pub fn create_cuda(
    model: &Model,
    device: usize,
    size: BackendSize,
) -> anyhow::Result<tts_cuda::CudaBackend> {
    let opts = tts_cuda::CudaOptions {
        device,
        limits: tts_cuda::workspace::Limits {
            max_slots: size.max_slots,
            max_positions: size.max_positions,
            max_batch: size.max_batch,
            ..Default::default()
        },
        graphs: on_unless_zero("QWEN3_TTS_CUDA_GRAPHS"),
        gpu_codec: std::env::var("QWEN3_TTS_CPU_CODEC").is_err(),
        // Measurement knobs (bench/results): programmatic dependent launch off, cuBLASLt
        // tuned at start-up (=1), start-up routing of the batched linear layers by timing
        // them (=1), the batched linear layers
        // off the cluster kernel, tile.cu or wide.cu, the codec's few-step GEMMs on cuBLAS.
        pdl: on_unless_zero("QWEN3_TTS_PDL"),
        lt_linear: std::env::var("QWEN3_TTS_LT_LINEAR").is_ok_and(|v| v == "1"),
        autotune: std::env::var("QWEN3_TTS_AUTOTUNE").is_ok_and(|v| v == "1"),
        cluster_linear: on_unless_zero("QWEN3_TTS_CLUSTER_LINEAR"),
        tile_linear: on_unless_zero("QWEN3_TTS_TILE_LINEAR"),
        // tile.cu's path with warpgroup MMA (tile_wg.cu; 0: tile.cu's warp MMA)
        tile_wgmma: on_unless_zero("QWEN3_TTS_TILE_WGMMA"),
        // prefill passes of 17 to 24 tokens padded to 24 (0: to 32)
        prefill_bucket_24: on_unless_zero("QWEN3_TTS_PREFILL_24"),
        batch_bucket_24: batch_bucket_24(),
        // wide.cu for 17..=64 rows (=1; off by default: slower on the H200)
        wide_linear: std::env::var("QWEN3_TTS_WIDE_LINEAR").is_ok_and(|v| v == "1"),
        // a cuBLAS epilogue writes the next layer's split input rows (0: each converts its own)
        chain_split: on_unless_zero("QWEN3_TTS_CHAIN_SPLIT"),
        // the attention kernels write the O projection's split input rows (0: it converts its own)
        chain_attention: on_unless_zero("QWEN3_TTS_CHAIN_ATTENTION"),
        // a tile_wg.cu layer writes the next one's split input rows (0: each converts its own)
        chain_tile: on_unless_zero("QWEN3_TTS_CHAIN_TILE"),
        // a one-row GEMV writes the next normed one's input rows (0: each norms its own)
        chain_gemv: on_unless_zero("QWEN3_TTS_CHAIN_GEMV"),
        // FP8 codes on tensor cores where the rule takes them (0: never)
        fp8_mma: on_unless_zero("QWEN3_TTS_FP8_MMA"),
        // FP8 layers' GEMVs on their codes: 1 always, 0 never, unset: the routing rule
        fp8_codes: match std::env::var("QWEN3_TTS_FP8_CODES").as_deref() {
            Ok("1") => Some(true),
            Ok("0") => Some(false),
            Ok(v) => anyhow::bail!("QWEN3_TTS_FP8_CODES={v}: expected 1 or 0 (unset: the rule)"),
            Err(_) => None,
        },
        // prompt heads kept for prefill (0: off)
        prefix_cache: count_knob(
            "QWEN3_TTS_PREFIX_CACHE",
            tts_cuda::CudaOptions::default().prefix_cache,
            "prompt heads",
        )?,
        // the code predictor's attention by kv-head group: 1 always, 0 never, unset: when
        // one block per q head would be more than the device holds at once
        group_attention: match std::env::var("QWEN3_TTS_GROUP_ATTENTION").as_deref() {
            Ok("1") => Some(true),
            Ok("0") => Some(false),
            Ok(v) => anyhow::bail!("QWEN3_TTS_GROUP_ATTENTION={v}: expected 1 or 0 (unset: auto)"),
            Err(_) => None,
        },
        // talker steps of at most this many rows attend on attention_row.cu (0: never)
        row_attention_rows: count_knob(
            "QWEN3_TTS_ROW_ATTENTION_ROWS",
            tts_cuda::CudaOptions::default().row_attention_rows,
            "rows",
        )?,
        // the split (prefill) attention on attention_row.cu (0: decode_attention)
        row_attention_split: on_unless_zero("QWEN3_TTS_ROW_ATTENTION_SPLIT"),
        codec_small_gemv: on_unless_zero("QWEN3_TTS_CODEC_GEMV"),
        // few-step GEMVs of at least this many steps on tensor cores (0: never)
        codec_gemv_mma_steps: count_knob(
            "QWEN3_TTS_CODEC_GEMV_MMA",
            tts_cuda::CudaOptions::default().codec_gemv_mma_steps,
            "steps",
        )?,
        // the codec's f16 convolutions as one implicit GEMM: narrow (default), large, all, off
        codec_implicit: parsed_knob(
            "QWEN3_TTS_CODEC_IMPLICIT",
            tts_cuda::CudaOptions::default().codec_implicit,
        )?,
        // those whose frames are whole tiles read a shared-memory window (0: codec_conv_mma)
        codec_conv_window: on_unless_zero("QWEN3_TTS_CODEC_CONV_WINDOW"),
        // ... with a layer's weights resident in shared memory where they fit (0: streamed)
        codec_conv_resident: on_unless_zero("QWEN3_TTS_CODEC_CONV_RESIDENT"),
        codec_precision: codec_precision_knob()?,
        // one codec pass of every frame count at start-up (0: met while serving)
        codec_warm_up: on_unless_zero("QWEN3_TTS_CODEC_WARM_UP"),
        // the largest buckets the persistent kernels take (0: off), and how far ahead
        // they prefetch weights
        persistent_cp_rows: rows_knob(
            "QWEN3_TTS_PERSISTENT_CP",
            tts_cuda::CudaOptions::default().persistent_cp_rows,
        )?,
        persistent_talker_rows: rows_knob(
            "QWEN3_TTS_PERSISTENT_TALKER",
            tts_cuda::CudaOptions::default().persistent_talker_rows,
        )?,
        cp_prefetch: prefetch_knob("QWEN3_TTS_CP_PREFETCH", Prefetch::CODE_PREDICTOR)?,
        talker_prefetch: prefetch_knob("QWEN3_TTS_TALKER_PREFETCH", Prefetch::TALKER)?,
        fp8: fp8_knob()?,
        // the prompts of one prefill call in one pass (on; 0: one pass per prompt)
        batched_prefill: on_unless_zero("QWEN3_TTS_BATCHED_PREFILL"),
        side_by_side: size.code_predictor_lane,
        merge_prefill: size.merge_prefill,
        // timing ablation (bench-stages): kernels never launched, comma-separated prefixes
        without_kernels: std::env::var("QWEN3_TTS_WITHOUT_KERNELS")
            .map(|v| {
                v.split(',')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
        // the code predictor's first-layer QKV of steps 1..14 from a table (0: computed)
        cp_qkv_table: on_unless_zero("QWEN3_TTS_CP_QKV_TABLE"),
        // a share of the code predictor's layer weights kept in L2 (=1; off by default)
        l2_persist_cp: std::env::var("QWEN3_TTS_L2_PERSIST_CP").is_ok_and(|v| v == "1"),
        // talker steps and code-predictor loops of at most N (or TALKER,CP) rows ask for the most L1
        max_l1_rows: parsed_knob(
            "QWEN3_TTS_MAX_L1_ROWS",
            tts_cuda::CudaOptions::default().max_l1_rows,
        )?,
        // which stages' one-row calls read GEMV weights staged in shared memory: 0, cp, talker, 1
        staged_gemv: parsed_knob(
            "QWEN3_TTS_STAGED_GEMV",
            tts_cuda::CudaOptions::default().staged_gemv,
        )?,
        // when a staged one-row GEMV lets the next linear layer launch: early, weights, wait
        staged_trigger: parsed_knob(
            "QWEN3_TTS_STAGED_TRIGGER",
            tts_cuda::CudaOptions::default().staged_trigger,
        )?,
        // K steps per pass of a one-row gemv.cu warp: 4, 8 or 8pre
        gemv_passes: parsed_knob(
            "QWEN3_TTS_GEMV_PASSES",
            tts_cuda::CudaOptions::default().gemv_passes,
        )?,
        // code-predictor calls of at most N rows run their multi-row linear layers from
        // weights staged in shared memory too (0: never)
        staged_mma_rows: rows_knob(
            "QWEN3_TTS_STAGED_MMA_ROWS",
            tts_cuda::CudaOptions::default().staged_mma_rows,
        )?,
        ..Default::default()
    };
    tts_cuda::CudaBackend::new(model, opts).context("starting the CUDA backend")
}

/// Which decoder-layer matrices run as FP8 (`$QWEN3_TTS_FP8`: none, talker-mlp or layers;
/// default none, the stored weights).
fn fp8_knob() -> anyhow::Result<Fp8Scope> {
    let scope = parsed_knob("QWEN3_TTS_FP8", Fp8Scope::None)?;
    if scope != Fp8Scope::None {
        tracing::info!(%scope, "FP8 (E4M3, row-scaled) decoder-layer weights");
    }
    Ok(scope)
}

/// The codec's cuBLAS arithmetic (`$QWEN3_TTS_CODEC_PRECISION`: tf32, f16 or f32;
/// default f16).
fn codec_precision_knob() -> anyhow::Result<CodecPrecision> {
    let default = tts_cuda::CudaOptions::default().codec_precision;
    let p = parsed_knob("QWEN3_TTS_CODEC_PRECISION", default)?;
    if p != default {
        tracing::info!(precision = ?p, "codec GEMM arithmetic");
    }
    Ok(p)
}

/// A switch that is on unless `$name` is `0`.
fn on_unless_zero(name: &str) -> bool {
    std::env::var(name).map_or(true, |v| v != "0")
}

/// `$name` parsed, else `default`; a value that does not parse is an error naming it.
fn parsed_knob<T: std::str::FromStr<Err = String>>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|e: String| anyhow::anyhow!("{name}={v}: {e}")),
        Err(_) => Ok(default),
    }
}

/// A row count from `$name` (a whole number), else `default`.
fn rows_knob(name: &str, default: usize) -> anyhow::Result<usize> {
    count_knob(name, default, "rows")
}

/// A count of `what` from `$name` (a whole number, 0: off), else `default`.
fn count_knob(name: &str, default: usize, what: &str) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .with_context(|| format!("{name}={v}: expected a number of {what} (0: off)")),
        Err(_) => Ok(default),
    }
}

/// A persistent kernel's prefetch from `$name`: `MATRICES[,CAP_BYTES[,start|end[,l2|l1|noown]]]`.
fn prefetch_knob(name: &str, default: Prefetch) -> anyhow::Result<Prefetch> {
    let Ok(v) = std::env::var(name) else {
        return Ok(default);
    };
    let parse = || -> Option<Prefetch> {
        let mut it = v.split(',').map(str::trim);
        let matrices = it.next()?.parse().ok()?;
        let cap_bytes = match it.next() {
            Some(c) => c.parse().ok()?,
            None => default.cap_bytes,
        };
        let at_end = match it.next() {
            Some("start") => false,
            Some("end") => true,
            Some(_) => return None,
            None => default.at_end,
        };
        let own = match it.next() {
            Some("own") | Some("l2") => OwnRows::L2,
            Some("l1") => OwnRows::L1,
            Some("noown") => OwnRows::Off,
            Some(_) => return None,
            None => default.own,
        };
        it.next().is_none().then_some(Prefetch {
            matrices,
            cap_bytes,
            at_end,
            own,
        })
    };
    parse().with_context(|| {
        format!(
            "{name}={v}: expected MATRICES[,CAP_BYTES[,start|end[,l2|l1|noown]]] \
             (e.g. 1,65536,end,l2)"
        )
    })
}

/// Builds the backend for a server: on CUDA the graphs of every batch bucket are captured
/// now (`warm_up`), so that no request pays for a capture.
pub fn create_warm(
    model: &Model,
    device: Device,
    size: BackendSize,
) -> anyhow::Result<Box<dyn Backend>> {
    Ok(match device {
        Device::Cpu => Box::new(CpuBackend::with_fp8(model, size.max_slots, fp8_knob()?)?),
        Device::Cuda(n) => {
            let mut b = create_cuda(model, n, size)?;
            b.warm_up()
                .context("warming up the CUDA backend (graph captures, codec passes)")?;
            Box::new(b)
        }
    })
}

#[cfg(test)]
mod tests {
    /// Every `QWEN3_TTS_*` variable this file reads is listed in `docs/cuda-knobs.md`.
    #[test]
    fn every_knob_read_here_is_documented() {
        let source = include_str!("backend.rs");
        let doc = include_str!("../../../docs/cuda-knobs.md");
        let mut names: Vec<&str> = source
            .match_indices("\"QWEN3_TTS_")
            .map(|(i, _)| {
                let rest = &source[i + 1..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        assert!(names.len() > 30, "found only {names:?}");
        let missing: Vec<_> = names
            .iter()
            .filter(|n| {
                // named in code (a backtick before it), not as the start of a longer name
                !doc.match_indices(&format!("`{n}")).any(|(i, m)| {
                    doc[i + m.len()..]
                        .chars()
                        .next()
                        .is_some_and(|c| !(c.is_ascii_alphanumeric() || c == '_'))
                })
            })
            .collect();
        assert!(missing.is_empty(), "not in docs/cuda-knobs.md: {missing:?}");
    }
}
