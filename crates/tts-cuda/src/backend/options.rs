//! The CUDA backend's options ([`CudaOptions`]) and the small knob types they hold.

use tts_model::Fp8Scope;

use crate::codec::{CodecPrecision, ImplicitConv};
use crate::persistent::Prefetch;
use crate::workspace::Limits;

/// Options of the CUDA backend.
#[derive(Debug, Clone)]
pub struct CudaOptions {
    pub device: usize,
    pub limits: Limits,
    /// Capture and replay CUDA graphs for the talker step and the code-predictor loop.
    pub graphs: bool,
    /// Decode audio on the GPU (else on the CPU reference, for debugging).
    pub gpu_codec: bool,
    /// GEMM arithmetic of the GPU codec (f16 convolutions by default; F32 for parity
    /// checks).
    pub codec_precision: CodecPrecision,
    /// Most frames one codec pass takes per row (sizes the codec's KV rings).
    pub codec_frames_per_call: usize,
    /// The codec's GEMMs of at most 8 steps as GEMV launches with f32 products (on by
    /// default; off: all on cuBLAS, for comparisons).
    pub codec_small_gemv: bool,
    /// Those of at least this many steps, over f16 weights and without a folded norm or
    /// SwiGLU, on tensor cores (`kernels/codec_gemv_mma.cu`; 0: never).
    pub codec_gemv_mma_steps: usize,
    /// Which of the codec's f16 convolutions run as one implicit GEMM (im2col folded into
    /// tensor-core tiles, `kernels/codec_conv.cu`) instead of im2col + cuBLAS.
    pub codec_implicit: ImplicitConv,
    /// The implicit convolutions whose frames are whole tiles of 128 steps read their input
    /// from a window copied once into shared memory (`codec_conv_win*`); off:
    /// `codec_conv_mma*`, which copies it once per tap and output tile.
    pub codec_conv_window: bool,
    /// ... and keep a layer's weights in shared memory where they fit
    /// (`codec_conv_win96r`, the 96-channel residual units); off: `codec_conv_win96`,
    /// which streams them through a ring per tile.
    pub codec_conv_resident: bool,
    /// At start-up ([`crate::CudaBackend::warm_up`]) decode one codec pass of every frame
    /// count once (`DevCodec::warm_up`: a fresh codec's first pass of a frame count is
    /// 10-50 ms slower than the next on the H200); off: a fresh server meets them serving.
    pub codec_warm_up: bool,
    /// Time the linear-layer kernels on the model's shapes at start-up and route each
    /// batched shape to the fastest (`routing::autotune`); off (the default, and what the
    /// end-to-end results were measured with): the static rule.
    pub autotune: bool,
    /// Launch the decoding kernels with programmatic dependent launch (sm_90 and newer).
    pub pdl: bool,
    /// Time cuBLASLt's candidate algorithms for the batched linear layers' GEMMs at
    /// start-up and run those that beat `cublasGemmEx` (`lt::tune`). Off by default: on
    /// the H200 it kept 44 of 60 (shape, columns) buckets, each within 0-10 % of
    /// `cublasGemmEx` alone, and moved no stage by more than 2 %
    /// (`bench/results/2026-12-01-h200-cublaslt`).
    pub lt_linear: bool,
    /// Let batched linear layers run on the thread-block-cluster kernel (`mma_cluster.cu`,
    /// one launch each; sm_90) where the routing picks it (the static rule: the code
    /// predictor's layers at 3..=16 rows); off: the GEMV, `to_bf16_rows` + `mma.cu` or
    /// cuBLAS, as before.
    pub cluster_linear: bool,
    /// Let batched linear layers run on `tile.cu` (weights through a shared-memory
    /// pipeline, K split over a cluster's blocks; sm_90) where the routing picks it (the
    /// static rule: the talker's gate_up at 3..=16 rows, and with `tile_wgmma` every shape
    /// it takes at 9..=32 rows and the larger matrices from 5); off: as before.
    pub tile_linear: bool,
    /// Let that path multiply with Hopper's warpgroup MMA (`tile_wg.cu`, sm_90a) instead of
    /// `tile.cu`'s warp-level MMA, where the device has it; off: `tile.cu`.
    pub tile_wgmma: bool,
    /// Pad a prefill pass of 17 to 24 tokens to 24 (`tile_wg.cu`'s 24-row entry) instead
    /// of 32 (`prefill_plan::token_bucket`).
    pub prefill_bucket_24: bool,
    /// Run a talker step or code-predictor loop of 17 to 24 rows in a 24-row bucket
    /// (`tile_wg.cu`'s 24-row entry on the batched layers) instead of padding it to 32
    /// (`batch_bucket`); needs a largest batch of at least 32.
    pub batch_bucket_24: bool,
    /// Let batched linear layers run on `wide.cu` (one launch, norm and epilogue fused,
    /// each row's result independent of the batch) where the routing picks it (the static
    /// rule: 17..=64 rows). Off by default: on the H200 it is slower than cuBLAS there (its
    /// K-slice sum over the cluster dominates, `bench/results/2026-12-02-h200-wide`).
    pub wide_linear: bool,
    /// Let a batched linear layer's cuBLAS epilogue write the next layer's split bf16
    /// input rows (norm applied), saving that layer's `to_bf16_rows` launch; off: every
    /// split-row layer converts its own input.
    pub chain_split: bool,
    /// Let the attention kernels also write their output as the O projection's split bf16
    /// rows when that projection reads split rows (above 16 rows), saving its
    /// `to_bf16_rows` launch (on by default: code predictor -4.5 % and talker step -3 % at
    /// 32 rows on the H200, same codes); off: the O projection converts its own input.
    pub chain_attention: bool,
    /// Let a `tile_wg.cu` linear layer (9..=32 rows, the talker's matrices from 2) write the
    /// split bf16 input rows of the next layer when that one runs on `tile_wg.cu` too: into
    /// a second buffer, and before a norm as g ⊙ y with each row's Σ y² per 128-column tile,
    /// the next layer scaling its sums by 1 / rms (as `mma_staged.cu`); saves that layer's
    /// `to_bf16_rows` launch (three per decoder layer). Off: each converts its own input.
    pub chain_tile: bool,
    /// Let a one-row GEMV without activation write the input of the normed one-row GEMV
    /// after it with that norm's gains applied and the row's Σ x² in partials by row pair,
    /// that layer then scaling its sums by 1 / rms instead of norming its input in its
    /// product loop (the talker step's O -> gate/up and down -> next QKV;
    /// `linear::norm_chain`). Off: each norms its own input.
    pub chain_gemv: bool,
    /// Let the GEMVs that stream an FP8 layer's E4M3 codes run on tensor cores
    /// (`gemv8_mma.cu`: each code an f16, the rows split into f16 hi + lo) where
    /// `routing::fp8_gemv` measured it faster (a fused norm, two rows) and the shape fits.
    /// Off: `gemv.cu`'s `gemv8_*` (each code widened to f32) or the bf16 copy.
    pub fp8_mma: bool,
    /// Whether an FP8 layer's GEMVs stream its codes: always / never; None, the default:
    /// `routing::fp8_gemv`'s rule.
    pub fp8_codes: Option<bool>,
    /// The code predictor's short-cache attention by kv-head group (one block for all the
    /// q heads of a group) always / never; None, the default: when one block per q head
    /// would be more than the device holds at once (`stack::short_attention_by_group`).
    pub group_attention: Option<bool>,
    /// Talker steps of at most this many rows run their attention on `attention_row.cu`
    /// (the cached K/V rows requested before the PDL wait, one block barrier for the
    /// softmax) instead of `fused_attention` (0: never). Default 32: on the H200
    /// (`bench/results/2026-12-04-h200-row-attention`) the 1.7B's talker step took 6-8 %
    /// less at 1-32 rows (1 row 1.266 -> 1.178 ms; at ~130 positions 1.357 -> 1.244) and
    /// 1 % more at 64.
    pub row_attention_rows: usize,
    /// Run the split attention (prefill, and prefills merged with steps) on
    /// `attention_row.cu`'s cached-rows form (`row_attention_split`) instead of
    /// `decode_attention`: lane groups per position, one block barrier for the softmax.
    pub row_attention_split: bool,
    /// Prompt heads (voice, language, instructions) whose talker KV rows are kept, so a
    /// prefill covers only the text after them (`prefix::PrefixCache`; 0: off).
    pub prefix_cache: usize,
    /// Run the code-predictor loop of buckets of up to this many rows as one persistent
    /// kernel (`persistent.cu`) when the model's shapes fit it (0: never, the default: on
    /// the H200 it measured slower than launch by launch; at most
    /// `persistent::CP_MAX_ROWS`).
    pub persistent_cp_rows: usize,
    /// Likewise the talker step's layers (at most `persistent::TALKER_MAX_ROWS`).
    pub persistent_talker_rows: usize,
    /// How far ahead the persistent kernels ask L2 for weights.
    pub cp_prefetch: Prefetch,
    pub talker_prefetch: Prefetch,
    /// Run the prompts of one prefill call in one pass (as many as fit
    /// `limits.max_prefill_tokens` and the largest batch) instead of one pass each: one
    /// read of the talker's weights for all of them. On by default: with it (and f16
    /// codec convolutions) the H200 held TTFA p95 < 50 ms without underruns at 60 req/s
    /// (50 before); off: one pass per prompt.
    pub batched_prefill: bool,
    /// Run a prefill and a talker step of other slots as one talker pass when the engine
    /// pairs them (`Backend::prefill_and_step`, `Policy::prefill_with_step`): one read of
    /// the talker's weights for both, and no prefill call of its own (`backend/merged.rs`).
    /// Off by default: not yet run on a GPU (the simulator's case for it:
    /// `bench/results/2026-12-03-sim-prefill-with-step`).
    pub merge_prefill: bool,
    /// Decoder-layer matrices stored as E4M3 with row scales (`tts_model::fp8`): the GEMV
    /// reads the 8-bit codes where `routing::fp8_gemv` measured it faster, every other
    /// call a bf16 copy of the same values. None by default: the stored weights.
    pub fp8: Fp8Scope,
    /// A second stream for the code predictor (`lane::CpLane`), so a code-predictor call
    /// and a talker step of other slots run side by side (`predict_and_step`). Off by
    /// default (the engine pairs them only when its policy says so); not with the
    /// persistent code predictor.
    pub side_by_side: bool,
    /// Kernels (name prefixes) never launched: a timing ablation for `bench-stages`, which
    /// then measures what each left-out kernel costs inside the stage graphs. The model's
    /// results are wrong with any; empty by default.
    pub without_kernels: Vec<String>,
    /// Talker steps and code-predictor loops of at most these many rows launch their
    /// GEMV, attention, sampling and other kernels without dynamic shared memory asking
    /// for the most L1 and the least shared memory (`Gpu::with_max_l1`): a
    /// multiprocessor changes its L1 / shared-memory split only when idle, so kernels of
    /// different splits in a row cannot overlap under PDL. Measured on the H200
    /// (`bench/results/2026-12-02-h200-carveout`): faster up to 4 rows (talker) and 8 rows
    /// (code predictor), slower above, where tensor-core kernels that want shared memory
    /// sit between them.
    pub max_l1_rows: MaxL1Rows,
    /// Which stages' one-row calls run their GEMVs from weights staged in shared memory
    /// (`gemv_staged.cu`, `SmallCall::Staged`): each block copies its weight tile before
    /// the PDL wait, so consecutive GEMVs of a batch-1 chain load their weights while the
    /// one before computes.
    pub staged_gemv: StagedGemv,
    /// When a staged one-row GEMV followed by another linear layer lets that layer launch
    /// (`linear::StagedTrigger`): right after issuing its weight copies (the default: the
    /// code predictor at one row 1.779 against 1.827 ms on the H200 at `33a4e53`, the same
    /// on an H100 at `704ae93` plus the gains read before the wait) or after its wait.
    pub staged_trigger: crate::linear::StagedTrigger,
    /// How many 256-wide K steps a warp of a one-row `gemv.cu` GEMV (the talker's layers;
    /// the code predictor's take the staged GEMV) loads per pass: 4 (default) or 8, which
    /// puts a whole K slice of the talker's QKV and gate/up in flight before the PDL wait
    /// (`linear::GemvPasses`; the same bits either way).
    pub gemv_passes: crate::linear::GemvPasses,
    /// Code-predictor calls of at most this many rows (buckets) run their linear layers of
    /// two rows and more on `mma_staged.cu` (`SmallCall::StagedMma`), when the code
    /// predictor takes the staged GEMV (`staged_gemv`): weight tiles copied before the PDL
    /// wait as for one row, tensor cores for the rows. Default 8 (0: never). Measured on
    /// the H200 (`bench/results/2026-12-03-h200-staged-mma`): 6-26 % faster at 2-16 rows,
    /// slower from 32; since `tile_wg.cu` chains its layers (`chain_tile`), the 16-row
    /// bucket is faster there (2.736 -> 2.461 ms, `bench/results/2026-12-04-h200-tile-chain`)
    /// and 2-8 rows still here (1.80-1.93 against 2.15-2.33 ms). Its split bf16 rows are as exact as the other tensor-core paths'
    /// (~1e-5 of a row's size; the GEMV it replaces at 2-4 rows is exact to f32).
    pub staged_mma_rows: usize,
    /// Compute the code predictor's first-layer QKV projection of every input row of
    /// steps 1..14 at load (`DevCodePredictor::qkv0`, 1.7B geometry: 470 MB) so the
    /// sampler writes a row's QKV and those steps skip that projection (on by default).
    pub cp_qkv_table: bool,
    /// Reserve the device's most persisting L2 and keep that many bytes of the code
    /// predictor's layer weights (read 15 times a frame) there: the GEMV and cluster
    /// launches of its layers mark that share of their weight lines persisting
    /// (`Gpu::reserve_l2_for`). Off by default (a measurement knob).
    pub l2_persist_cp: bool,
}

/// Largest batches whose launches ask for the most L1 (`CudaOptions::max_l1_rows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxL1Rows {
    pub talker: usize,
    pub code_predictor: usize,
}

/// Which stages' one-row calls take the staged GEMV (`CudaOptions::staged_gemv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagedGemv {
    pub talker: bool,
    pub code_predictor: bool,
}

impl Default for StagedGemv {
    fn default() -> Self {
        Self {
            talker: false,
            code_predictor: true,
        }
    }
}

impl std::str::FromStr for StagedGemv {
    type Err = String;

    /// `0` (neither), `cp`, `talker` or `1` (both).
    fn from_str(s: &str) -> Result<Self, String> {
        let (talker, code_predictor) = match s.trim() {
            "0" | "off" | "none" => (false, false),
            "cp" | "code_predictor" => (false, true),
            "talker" => (true, false),
            "1" | "on" | "both" => (true, true),
            _ => return Err(format!("expected 0, cp, talker or 1, got `{s}`")),
        };
        Ok(Self {
            talker,
            code_predictor,
        })
    }
}

impl Default for MaxL1Rows {
    fn default() -> Self {
        Self {
            talker: 4,
            code_predictor: 8,
        }
    }
}

impl std::str::FromStr for MaxL1Rows {
    type Err = String;

    /// `N` (both stages) or `TALKER,CODE_PREDICTOR` (row counts; 0: never).
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |v: &str| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("expected N or TALKER,CODE_PREDICTOR (rows), got `{s}`"))
        };
        match s.split_once(',') {
            Some((t, c)) => Ok(Self {
                talker: num(t)?,
                code_predictor: num(c)?,
            }),
            None => {
                let n = num(s)?;
                Ok(Self {
                    talker: n,
                    code_predictor: n,
                })
            }
        }
    }
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            device: 0,
            limits: Limits::default(),
            graphs: true,
            gpu_codec: true,
            codec_precision: CodecPrecision::F16,
            codec_frames_per_call: 16,
            codec_small_gemv: true,
            codec_gemv_mma_steps: crate::codec::GEMV_MMA_STEPS,
            codec_implicit: ImplicitConv::default(),
            codec_conv_window: true,
            codec_conv_resident: true,
            codec_warm_up: true,
            autotune: false,
            pdl: true,
            lt_linear: false,
            cluster_linear: true,
            tile_linear: true,
            tile_wgmma: true,
            prefill_bucket_24: true,
            batch_bucket_24: false,
            wide_linear: false,
            chain_split: true,
            chain_attention: true,
            chain_tile: true,
            chain_gemv: true,
            fp8_mma: true,
            fp8_codes: None,
            group_attention: None,
            row_attention_rows: 32,
            row_attention_split: true,
            prefix_cache: 64,
            persistent_cp_rows: 0,
            persistent_talker_rows: 0,
            cp_prefetch: Prefetch::CODE_PREDICTOR,
            talker_prefetch: Prefetch::TALKER,
            fp8: Fp8Scope::None,
            batched_prefill: true,
            merge_prefill: false,
            side_by_side: false,
            without_kernels: Vec::new(),
            max_l1_rows: MaxL1Rows::default(),
            staged_gemv: StagedGemv::default(),
            staged_trigger: crate::linear::StagedTrigger::default(),
            gemv_passes: crate::linear::GemvPasses::default(),
            staged_mma_rows: 8,
            cp_qkv_table: true,
            l2_persist_cp: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MaxL1Rows, StagedGemv};

    #[test]
    fn max_l1_rows_parse_one_number_or_a_pair() {
        let both: MaxL1Rows = "6".parse().expect("one number");
        assert_eq!((both.talker, both.code_predictor), (6, 6));
        let pair: MaxL1Rows = " 2, 16".parse().expect("a pair");
        assert_eq!((pair.talker, pair.code_predictor), (2, 16));
        assert!("four".parse::<MaxL1Rows>().is_err());
        assert!("1,x".parse::<MaxL1Rows>().is_err());
    }

    #[test]
    fn staged_gemv_parses_each_choice() {
        let pick = |s: &str| {
            let v: StagedGemv = s.parse().expect(s);
            (v.talker, v.code_predictor)
        };
        assert_eq!(pick("0"), (false, false));
        assert_eq!(pick("cp"), (false, true));
        assert_eq!(pick(" talker "), (true, false));
        assert_eq!(pick("1"), (true, true));
        assert!("yes".parse::<StagedGemv>().is_err());
    }
}
