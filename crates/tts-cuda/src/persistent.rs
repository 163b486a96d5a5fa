//! Persistent decoder-stack kernels (`kernels/persistent.cu`), one block per
//! multiprocessor and grid barriers between phases:
//! * the code-predictor loop: 15 steps of the stack, their lm heads and sampling in one
//!   launch, for buckets of up to [`CP_MAX_ROWS`] rows;
//! * the talker step's decoder layers in one launch, for up to [`TALKER_MAX_ROWS`] rows.
//!
//! Each is built once at start-up when asked for (`CudaOptions::persistent_*_rows`) and
//! the model's shapes fit the kernel; otherwise (and for larger buckets) the stages run
//! launch by launch. On the H200 both measured slower than launch by launch (the barriers
//! are cheap, ~0.9 µs, but each phase is a chain of dependent memory round trips at 8
//! warps per multiprocessor): they are off by default, kept for measurement
//! (`qwen3-tts bench-stages --trace`) and as the base for fusing phases.

use tts_model::config::NUM_CODE_GROUPS;

use crate::device::{Arg, DBuf, Gpu};
use crate::error::CudaError;
use crate::linear::Linear;
use crate::weights::{DevCodePredictor, DevStack, DevTalker};
use crate::workspace::Workspace;

/// Most rows of one code-predictor launch (`CPL_MAX_ROWS`: step 0 runs two tokens a row).
pub const CP_MAX_ROWS: usize = 4;
/// Most rows of one talker launch (`CPL_MAXT` tokens).
pub const TALKER_MAX_ROWS: usize = 8;
/// Layers the argument table may describe.
const MAX_LAYERS: usize = 32;
const THREADS: u32 = 256;
/// `CPL_SMEM`: 16384 staged f32 values.
const SMEM: usize = 16384 * 4;
/// `CPL_MAX_TASKS`: the most (pair, K part) tasks one block takes in a linear phase.
const MAX_TASKS: usize = 64;
/// `SAMPLE_MAXV` of `sampling.cu`.
const MAX_VOCAB: usize = 4096;

/// How far ahead the kernels ask L2 for weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefetch {
    /// Weight matrices ahead (0: none).
    pub matrices: u32,
    /// Most bytes of a block's slice of one matrix (0: all of it).
    pub cap_bytes: u64,
    /// Ask after a phase's work, before its barrier (else at the phase's start).
    pub at_end: bool,
    /// Where each linear phase first asks for its block's own weight rows.
    pub own: OwnRows,
}

/// Where a linear phase prefetches its own weight rows at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnRows {
    Off = 0,
    L2 = 1,
    /// The multiprocessor's L1 (weights are immutable, so its incoherence is harmless).
    L1 = 2,
}

impl Prefetch {
    /// What the H200 measured least slow (bench/results/2026-12-01-h200-persistent.md):
    /// no prefetching at all; every variant that asked L2 or L1 for weights ahead delayed
    /// the barriers or the phases more than it saved.
    pub const CODE_PREDICTOR: Self = Self {
        matrices: 0,
        cap_bytes: 0,
        at_end: true,
        own: OwnRows::Off,
    };
    /// The talker's gate/up matrix alone is 50 MB: when later matrices are prefetched,
    /// only the start of each block's slice, to cover the phase's ramp-up.
    pub const TALKER: Self = Self {
        matrices: 0,
        cap_bytes: 64 << 10,
        at_end: true,
        own: OwnRows::Off,
    };
}

// Cells of the argument table (`CPA_*` in persistent.cu).
const CELL_TRACE: usize = 31;
const CELLS_FIXED: usize = 35;
const CELL_LAYER_W: usize = CELLS_FIXED + 15;
const PER_LAYER: usize = 8;

/// Which stack a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    CodePredictor,
    Talker,
}

/// A persistent kernel ready to launch: its argument table and grid-barrier state.
pub struct Persistent {
    args: DBuf<u64>,
    _barrier: DBuf<u32>,
    kernel: &'static str,
    grid: u32,
    max_rows: usize,
    /// What each barrier of one launch ends, in order.
    phases: Vec<&'static str>,
}

/// One phase kind of a traced launch, averaged over its occurrences.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseStat {
    pub phase: &'static str,
    pub count: usize,
    /// From the previous barrier's release to the slowest block's arrival (µs).
    pub work_us: f64,
    /// From the slowest block's arrival to the first release (µs): the barrier itself.
    pub barrier_us: f64,
}

impl Persistent {
    /// The code-predictor loop over `ws`'s buffers, or why it cannot run this model.
    pub fn code_predictor(
        gpu: &Gpu,
        cp: &DevCodePredictor,
        ws: &Workspace,
        prefetch: Prefetch,
    ) -> Result<Result<Self, String>, CudaError> {
        if cp.lm_heads.len() != NUM_CODE_GROUPS - 1 {
            return Ok(Err(format!("{} lm heads", cp.lm_heads.len())));
        }
        if cp.vocab > MAX_VOCAB {
            return Ok(Err(format!(
                "vocabulary {} (at most {MAX_VOCAB})",
                cp.vocab
            )));
        }
        let lay = &ws.layout;
        let opt = |b: &Option<DBuf<f32>>| b.as_ref().map_or(0, |b| b.ptr);
        let fixed = Fixed {
            vocab: cp.vocab,
            kv: (ws.cp_k_cache.ptr, ws.cp_v_cache.ptr),
            kv_rows: ws.limits.max_batch,
            kv_pos: NUM_CODE_GROUPS,
            x: ws.cp_x.ptr,
            rows1: ws.inputs.at(lay.cp_rows1),
            rows2: ws.inputs.at(lay.cp_rows2),
            pos: ws.cp_pos.ptr,
            folded: opt(&cp.folded),
            raw: cp.embeddings.ptr,
        };
        Self::build(
            gpu,
            Kind::CodePredictor,
            &cp.stack,
            &cp.lm_heads,
            ws,
            fixed,
            prefetch,
        )
    }

    /// The talker step's layers over `ws`'s buffers, or why they cannot run this model.
    pub fn talker(
        gpu: &Gpu,
        t: &DevTalker,
        ws: &Workspace,
        prefetch: Prefetch,
    ) -> Result<Result<Self, String>, CudaError> {
        let lay = &ws.layout;
        let fixed = Fixed {
            vocab: 0,
            kv: (ws.k_cache.ptr, ws.v_cache.ptr),
            kv_rows: ws.limits.max_slots,
            kv_pos: ws.limits.max_positions,
            x: ws.x.ptr,
            rows1: ws.inputs.at(lay.row_slots),
            rows2: 0,
            pos: ws.inputs.at(lay.step_pos),
            folded: 0,
            raw: 0,
        };
        Self::build(gpu, Kind::Talker, &t.stack, &[], ws, fixed, prefetch)
    }

    fn build(
        gpu: &Gpu,
        kind: Kind,
        s: &DevStack,
        heads: &[Linear],
        ws: &Workspace,
        f: Fixed,
        prefetch: Prefetch,
    ) -> Result<Result<Self, String>, CudaError> {
        let exact = ws.kv_elem == 4;
        let (kernel, max_rows) = match (kind, exact) {
            (Kind::CodePredictor, false) => ("cp_loop", CP_MAX_ROWS),
            (Kind::CodePredictor, true) => ("cp_loop_f32", CP_MAX_ROWS),
            (Kind::Talker, false) => ("talker_layers", TALKER_MAX_ROWS),
            (Kind::Talker, true) => ("talker_layers_f32", TALKER_MAX_ROWS),
        };
        let grid = gpu.sm_count;
        if let Err(why) = fits(s, heads, grid as usize) {
            return Ok(Err(why));
        }
        gpu.allow_dynamic_smem(kernel, SMEM)?;
        if gpu.blocks_per_sm(kernel, THREADS, SMEM)? < 1 {
            return Ok(Err("a block does not fit on a multiprocessor".into()));
        }
        let barrier: DBuf<u32> = gpu.zeros(2)?;
        let d = &s.dims;
        let lay = &ws.layout;
        let mut cells = vec![
            d.layers as u64,
            d.hidden as u64,
            d.heads as u64,
            d.kv_heads as u64,
            d.head_dim as u64,
            d.intermediate as u64,
            f.vocab as u64,
            u64::from(d.rms_eps.to_bits()),
            u64::from(prefetch.matrices),
            prefetch.cap_bytes,
            f.kv_rows as u64,
            f.kv_pos as u64,
            ws.limits.max_batch as u64,
            s.norm.ptr,
            s.inv_freq.ptr,
            f.x,
            ws.qkv.ptr,
            ws.attn.ptr,
            ws.gu.ptr,
            ws.logits.ptr,
            f.kv.0,
            f.kv.1,
            ws.inputs.at(lay.row_slots),
            f.rows1,
            f.rows2,
            f.pos,
            ws.params.ptr,
            ws.frames.ptr,
            f.folded,
            f.raw,
            barrier.ptr,
            0, // trace: set by `trace`
            0,
            u64::from(prefetch.at_end),
            prefetch.own as u64,
        ];
        debug_assert_eq!(cells.len(), CELLS_FIXED);
        cells.extend(heads.iter().map(|h| h.w.ptr));
        cells.resize(CELL_LAYER_W, 0);
        for l in &s.layers {
            cells.extend([
                l.qkv.w.ptr,
                l.o.w.ptr,
                l.gate_up.w.ptr,
                l.down.w.ptr,
                l.input_norm.ptr,
                l.q_norm.ptr,
                l.k_norm.ptr,
                l.post_norm.ptr,
            ]);
        }
        debug_assert_eq!(cells.len(), CELL_LAYER_W + PER_LAYER * d.layers);
        Ok(Ok(Self {
            args: gpu.upload(&cells)?,
            _barrier: barrier,
            kernel,
            grid,
            max_rows,
            phases: phase_names(kind, d.layers),
        }))
    }

    /// The same kernel, used for at most `rows` rows (larger buckets go launch by launch).
    pub fn up_to(mut self, rows: usize) -> Self {
        self.max_rows = self.max_rows.min(rows.max(1));
        self
    }

    /// Most rows of one launch.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Enqueues the kernel for `b` rows (`1..=max_rows()`). Code predictor: step 0's
    /// inputs in `ws.cp_x`, the rows' code 0 in `ws.frames`. Talker: the step's input rows
    /// in `ws.x`, row slots and positions in `ws.inputs`.
    pub fn launch(&self, gpu: &Gpu, b: usize) -> Result<(), CudaError> {
        if b == 0 || b > self.max_rows {
            return Err(CudaError::Shape(format!(
                "{}: {b} rows, 1..={} supported",
                self.kernel, self.max_rows
            )));
        }
        gpu.launch_with(
            self.kernel,
            (self.grid, 1, 1),
            THREADS,
            SMEM as u32,
            &[Arg::P(self.args.ptr), Arg::I(b as i32)],
        )
    }
}

impl Persistent {
    /// Runs the kernel once for `b` rows on whatever its buffers hold, recording every
    /// block's clock at each barrier, and returns the time per phase kind (SM clock
    /// `clock_khz`). For benchmarks: synchronises, and the rows' state moves on.
    pub fn trace(
        &mut self,
        gpu: &Gpu,
        b: usize,
        clock_khz: f64,
    ) -> Result<Vec<PhaseStat>, CudaError> {
        let g = self.grid as usize;
        let events = self.phases.len();
        let buf: DBuf<u64> = gpu.zeros(g + 2 * events * g)?;
        gpu.write_at(&mut self.args, CELL_TRACE, &[buf.ptr, events as u64])?;
        let run = self.launch(gpu, b);
        let read = gpu.read(&buf, buf.len);
        gpu.write_at(&mut self.args, CELL_TRACE, &[0, 0])?;
        run?;
        let t = read?;
        let us = |cycles: u64| cycles as f64 / clock_khz * 1e3;
        let mut stats: Vec<PhaseStat> = Vec::new();
        let mut prev: Vec<u64> = t[..g].to_vec();
        for (e, &phase) in self.phases.iter().enumerate() {
            let at = |blk: usize, i: usize| t[g + 2 * (e * g + blk) + i];
            // clocks are per multiprocessor: differences within a block only
            let work = (0..g).map(|k| at(k, 0).saturating_sub(prev[k])).max();
            let slowest = (0..g).max_by_key(|&k| at(k, 0).saturating_sub(prev[k]));
            let barrier = slowest.map_or(0, |k| at(k, 1).saturating_sub(at(k, 0)));
            let s = match stats.iter_mut().find(|s| s.phase == phase) {
                Some(s) => s,
                None => {
                    stats.push(PhaseStat {
                        phase,
                        count: 0,
                        work_us: 0.0,
                        barrier_us: 0.0,
                    });
                    stats.last_mut().expect("just pushed")
                }
            };
            s.count += 1;
            s.work_us += us(work.unwrap_or(0));
            s.barrier_us += us(barrier);
            prev = (0..g).map(|k| at(k, 1)).collect();
        }
        for s in &mut stats {
            s.work_us /= s.count as f64;
            s.barrier_us /= s.count as f64;
        }
        Ok(stats)
    }
}

/// The phase each barrier of one launch ends (`persistent.cu`'s order).
fn phase_names(kind: Kind, layers: usize) -> Vec<&'static str> {
    const LAYER: [&str; 5] = ["qkv", "attention", "o", "gate_up", "down"];
    let layer_phases = || (0..layers).flat_map(|_| LAYER);
    match kind {
        Kind::Talker => layer_phases().collect(),
        Kind::CodePredictor => (0..NUM_CODE_GROUPS - 1)
            .flat_map(|j| {
                let tail: &[&'static str] = if j + 2 < NUM_CODE_GROUPS {
                    &["head", "sample"]
                } else {
                    &["head"]
                };
                layer_phases().chain(tail.iter().copied())
            })
            .collect(),
    }
}

/// The cells that differ between the two kernels.
struct Fixed {
    vocab: usize,
    kv: (u64, u64),
    kv_rows: usize,
    kv_pos: usize,
    x: u64,
    rows1: u64,
    rows2: u64,
    pos: u64,
    folded: u64,
    raw: u64,
}

/// Whether the kernels' limits hold for stack `s` (and `heads`) on `grid` blocks.
fn fits(s: &DevStack, heads: &[Linear], grid: usize) -> Result<(), String> {
    let d = &s.dims;
    if d.layers == 0 || d.layers > MAX_LAYERS {
        return Err(format!("{} layers (at most {MAX_LAYERS})", d.layers));
    }
    if !d.hidden.is_multiple_of(8) {
        return Err(format!("hidden size {} is not a multiple of 8", d.hidden));
    }
    let mut mats: Vec<&Linear> = heads.iter().collect();
    for l in &s.layers {
        mats.extend([&l.qkv, &l.o, &l.gate_up, &l.down]);
    }
    for m in mats {
        if m.bias.is_some() {
            return Err("a linear layer has a bias".into());
        }
        if !m.n.is_multiple_of(2) {
            return Err(format!("a linear layer has {} outputs (odd)", m.n));
        }
        // A block's pairs, each one task at least (K is split only when they are few).
        let pairs = (m.n / 2).div_ceil(grid);
        if pairs > MAX_TASKS {
            return Err(format!(
                "{} outputs give {pairs} pairs per block (at most {MAX_TASKS})",
                m.n
            ));
        }
    }
    Ok(())
}
