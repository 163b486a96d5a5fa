//! The one-row fused MLP (`mlp_fused.cu`): a decoder layer's gate/up and down projections
//! in one launch instead of two, `x += down(silu(gate(norm x)) · up(norm x))`, each block
//! owning a slice of the intermediate columns and adding its share of every output in
//! fixed point (the same bits every run). Two kernels: `mlp_fused_m1`, its slices copied
//! into shared memory before the PDL wait, for one-row calls of the stages that stage their
//! weights (`SmallCall::Staged`: the code predictor's steps by default); `mlp_stream_m1_s4`
//! / `_s8` (rows up to 1024 / 2048 wide), its slices streamed through registers and L2,
//! for the other one-row calls (talker steps), or for the staged ones too where asked
//! (leaving shared memory to the next launch). Each where the shapes fit and
//! `LinearPaths::fused_mlp` asks for it.

use super::{GemmScratch, Linear, Rows};
use crate::device::{Arg, Gpu};
use crate::error::CudaError;

/// Most bytes of weights a `mlp_fused.cu` block holds: with the next layer's staged QKV
/// tile (`STAGED_MAX_SMEM`) beside it, still inside one multiprocessor's 227 KiB.
pub const FUSED_MLP_MAX_SMEM: usize = 144 << 10;

/// `MLP_MAX_STEPS` and `MLP_MAX_IPB` of `mlp_fused.cu`.
const MAX_HIDDEN: usize = 256 * 8;
const MAX_COLS_PER_BLOCK: usize = 64;

/// Which one-row MLPs run as one launch (`CudaOptions::fused_mlp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusedMlp {
    /// Those of staged stage calls (`mlp_fused_m1`, or with `staged_streams` the stream
    /// kernel).
    pub staged: bool,
    /// The others (`mlp_stream_m1_*`).
    pub stream: bool,
    /// Staged calls take the stream kernel too, leaving shared memory to the next launch.
    pub staged_streams: bool,
}

/// Off until measured on the H200 (`docs/cuda-knobs.md`).
impl Default for FusedMlp {
    fn default() -> Self {
        Self {
            staged: false,
            stream: false,
            staged_streams: false,
        }
    }
}

impl std::str::FromStr for FusedMlp {
    type Err = String;

    /// `0` (neither), `staged`, `staged-stream` (staged calls on the stream kernel),
    /// `stream`, `1` (`staged` and `stream`) or `all-stream` (every one-row call on the
    /// stream kernel).
    fn from_str(s: &str) -> Result<Self, String> {
        let (staged, stream, staged_streams) = match s.trim() {
            "0" | "off" | "none" => (false, false, false),
            "staged" => (true, false, false),
            "staged-stream" => (true, false, true),
            "stream" => (false, true, false),
            "1" | "on" | "both" => (true, true, false),
            "all-stream" => (true, true, true),
            other => {
                return Err(format!(
                    "{other:?}: expected 0, staged, staged-stream, stream, 1 or all-stream"
                ))
            }
        };
        Ok(Self {
            staged,
            stream,
            staged_streams,
        })
    }
}

/// Most bytes of gate/up weights a layer may have for `mlp_stream_m1_*` to ask them all
/// into L2 before its wait (the code predictor's 12 MiB; not the 1.7B talker's 48 MiB,
/// which would push out what the next launches read).
const PREFETCH_MAX_BYTES: usize = 16 << 20;

/// How `mlp_fused_m1` (`staged`: `smem` bytes of weights a block) or `mlp_stream_m1_*`
/// (`smem`: the normed row's floats) covers a layer: `blocks` blocks of `cols_per_block`
/// intermediate columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpPlan {
    pub blocks: usize,
    pub cols_per_block: usize,
    pub smem: usize,
    pub staged: bool,
}

impl MlpPlan {
    /// The kernel of the plan for rows `hidden` wide, and whether (a stream kernel) it
    /// asks its gate/up rows into L2 before its wait.
    pub fn kernel(&self, hidden: usize) -> (&'static str, bool) {
        if self.staged {
            ("mlp_fused_m1", false)
        } else {
            let name = if hidden <= 1024 {
                "mlp_stream_m1_s4"
            } else {
                "mlp_stream_m1_s8"
            };
            // gate and up rows: 2 · cols · hidden bf16 per block
            let gate_up = self.blocks * self.cols_per_block * hidden * 4;
            (name, gate_up <= PREFETCH_MAX_BYTES)
        }
    }
}

/// The fused MLP's cover of a layer of width `hidden` and `inter` intermediate columns on
/// `sms` multiprocessors: the fewest columns per block (a multiple of 8 dividing `inter`)
/// that needs at most one block per multiprocessor, or None when the shape does not fit
/// the kernels (width a multiple of 256 up to 2048, at most 64 columns a block; with
/// `staged`, at most [`FUSED_MLP_MAX_SMEM`] bytes of weights a block).
pub fn fused_mlp_plan(hidden: usize, inter: usize, sms: usize, staged: bool) -> Option<MlpPlan> {
    if hidden == 0 || !hidden.is_multiple_of(256) || hidden > MAX_HIDDEN || sms == 0 {
        return None;
    }
    let cols = (8..=MAX_COLS_PER_BLOCK)
        .step_by(8)
        .find(|&c| inter.is_multiple_of(c) && inter / c <= sms)?;
    // gate and up rows (2 · cols · hidden) and the down rows' slices (hidden · cols), bf16;
    // streamed, the normed row (f32)
    let smem = if staged {
        6 * cols * hidden
    } else {
        4 * hidden
    };
    (smem <= FUSED_MLP_MAX_SMEM).then_some(MlpPlan {
        blocks: inter / cols,
        cols_per_block: cols,
        smem,
        staged,
    })
}

/// The plan for one row `x` through `gate_up` (SwiGLU row pairs, its input normed) and
/// `down`, when the call takes a fused MLP: one 16-byte-aligned row, the kernel for the
/// call (staged or not) asked for, bf16 weights (no FP8 codes), no biases, matching shapes
/// that fit.
pub fn fused_mlp_call(
    gpu: &Gpu,
    scratch: &GemmScratch,
    (gate_up, down): (&Linear, &Linear),
    x: Rows,
) -> Option<MlpPlan> {
    let (hidden, inter) = (gate_up.k, down.k);
    let (staged, paths) = (gpu.staged_gemv(), &scratch.paths.fused_mlp);
    let fp8_codes =
        |l: &Linear, norm: bool| l.fp8.is_some() && scratch.paths.fp8_codes(1, l.n, l.k, norm);
    let takes = x.count == 1
        && x.ptr.is_multiple_of(16)
        && if staged { paths.staged } else { paths.stream }
        && gate_up.n == 2 * inter
        && down.n == hidden
        && hidden <= scratch.row_sums_len()
        && gate_up.bias.is_none()
        && down.bias.is_none()
        && !fp8_codes(gate_up, true)
        && !fp8_codes(down, false);
    let in_smem = staged && !paths.staged_streams;
    takes
        .then(|| fused_mlp_plan(hidden, inter, gpu.sm_count as usize, in_smem))
        .flatten()
}

/// `x += down(silu(gate(norm x)) · up(norm x))` for the one row `x` in one launch of
/// the plan's kernel ([`MlpPlan::kernel`]; `plan` from [`fused_mlp_call`]). `early`: the very next launch is a
/// linear layer's kernel, which reads nothing but weights before its wait, so this one
/// lets it launch at once (see `gemv_staged.cu`).
pub fn fused_mlp(
    gpu: &Gpu,
    scratch: &GemmScratch,
    (gate_up, down): (&Linear, &Linear),
    x: Rows,
    (norm, eps): (u64, f32),
    plan: MlpPlan,
    early: bool,
) -> Result<(), CudaError> {
    scratch.forget_ready();
    let (sums, arrived) = scratch.row_sums();
    let (name, prefetch) = plan.kernel(gate_up.k);
    let mut args = vec![
        Arg::P(gate_up.w.ptr),
        Arg::P(down.w.ptr),
        Arg::I(gate_up.k as i32),
        Arg::I(down.k as i32),
        Arg::I(plan.cols_per_block as i32),
        Arg::P(norm),
        Arg::F(eps),
        Arg::P(x.ptr),
        Arg::P(sums),
        Arg::P(arrived),
        Arg::I(i32::from(early)),
    ];
    if !plan.staged {
        args.push(Arg::I(i32::from(prefetch)));
    }
    gpu.launch_reading(
        (gate_up.w.ptr, gate_up.bf16_bytes() + down.bf16_bytes()),
        name,
        (plan.blocks as u32, 1, 1),
        256,
        plan.smem as u32,
        None,
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::{fused_mlp_plan, FusedMlp, MlpPlan, FUSED_MLP_MAX_SMEM};

    /// The code predictor's MLP (and the 0.6B talker's: 1024 wide, 3072 columns) takes 128
    /// blocks of 24 columns on the H200's 132 multiprocessors; the 1.7B talker's (2048 ×
    /// 6144) does not fit a block's shared memory; widths the lanes cannot split do not fit.
    #[test]
    fn plans_cover_the_release_shapes() {
        assert_eq!(
            fused_mlp_plan(1024, 3072, 132, true),
            Some(MlpPlan {
                blocks: 128,
                cols_per_block: 24,
                smem: 147_456,
                staged: true,
            })
        );
        assert!(fused_mlp_plan(2048, 6144, 132, true).is_none());
        // ... which streams its slices: 128 blocks of 48 columns, its normed row in
        // shared memory
        let talker = fused_mlp_plan(2048, 6144, 132, false).expect("streams");
        assert_eq!(
            (
                talker.blocks,
                talker.cols_per_block,
                talker.smem,
                talker.staged
            ),
            (128, 48, 2048 * 4, false)
        );
        // on the 8-step stream kernel, its 48 MiB of gate/up rows not asked into L2; the
        // code predictor's streamed (12 MiB) on the 4-step one, asked into L2
        assert_eq!(talker.kernel(2048), ("mlp_stream_m1_s8", false));
        let cp = fused_mlp_plan(1024, 3072, 132, false).expect("streams");
        assert_eq!(cp.kernel(1024), ("mlp_stream_m1_s4", true));
        assert_eq!(
            fused_mlp_plan(1024, 3072, 132, true).map(|p| p.kernel(1024)),
            Some(("mlp_fused_m1", false))
        );
        for (h, i) in [(64, 128), (1000, 3072), (4096, 3072), (0, 8)] {
            assert!(fused_mlp_plan(h, i, 132, false).is_none(), "{h}x{i}");
        }
        // fewer multiprocessors: wider slices, within the limits
        for (h, i, sms) in [(1024, 3072, 128), (512, 1536, 32), (256, 1000, 132)] {
            let p = fused_mlp_plan(h, i, sms, true).expect("fits");
            assert_eq!(p.blocks * p.cols_per_block, i);
            assert!(p.blocks <= sms && p.cols_per_block.is_multiple_of(8));
            assert!(p.smem <= FUSED_MLP_MAX_SMEM);
        }
    }

    /// Each choice of `QWEN3_TTS_FUSED_MLP` parses; anything else is refused.
    #[test]
    fn fused_mlp_choices_parse() {
        for (s, staged, stream, staged_streams) in [
            ("0", false, false, false),
            ("staged", true, false, false),
            ("staged-stream", true, false, true),
            ("stream", false, true, false),
            ("1", true, true, false),
            ("all-stream", true, true, true),
        ] {
            let v: FusedMlp = s.parse().expect(s);
            assert_eq!(
                (v.staged, v.stream, v.staged_streams),
                (staged, stream, staged_streams),
                "{s}"
            );
        }
        assert!("yes".parse::<FusedMlp>().is_err());
    }
}
