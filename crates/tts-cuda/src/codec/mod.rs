//! The codec decoder on the GPU: codes in, 24 kHz PCM out, incremental per stream (slot)
//! and batched over streams, exactly the maths of `tts_model::reference::codec`.
//!
//! Every slot keeps its stream state on the device (conv histories, transposed-conv
//! previous inputs, per-layer KV rings of the sliding-window transformer); the host keeps
//! each slot's position and history parity. A `decode` call appends frames to each row's
//! stream: it is split into passes (at most `frames_cap` frames, each slot once), and a
//! pass is one input copy, 142 ops (kernels of `kernels/codec.cu`; GEMMs on cuBLAS with f32
//! data, TF32 tensor cores by default, or, at most 8 steps, one GEMV launch of
//! `kernels/codec_gemv.cu` with exact f32 products, or from 3 steps without a folded norm
//! or SwiGLU of `kernels/codec_gemv_mma.cu` on tensor cores, the input split into f16 hi +
//! lo parts; with f16 convolutions, the narrow ones of large passes as an
//! implicit GEMM of `kernels/codec_conv.cu` instead of im2col + cuBLAS), and one copy of
//! the PCM back. The few-step GEMVs and the attention are launched with programmatic
//! dependent launch ([`PDL_KERNELS`]: their weights and cached rows load while the kernel
//! before them finishes). All buffers are
//! allocated in [`DevCodec::new`], so a pass's launches can be captured in a CUDA graph.
//!
//! Files: `layers` (weight re-layout), `plan` (the op list's types), `build` (weights and
//! op list from the checkpoint), `state` (slot bookkeeping and pass inputs), `exec`
//! (launches), `conv` (the implicit-GEMM convolution), `emulate` (a plain-Rust run of the
//! op list, tests only).

mod build;
mod conv;
mod exec;
pub mod layers;
mod plan;
pub mod state;

#[cfg(test)]
mod emulate;

use std::collections::HashMap;
use std::time::Instant;

use tts_model::checkpoint::HostTensor;
use tts_model::config::CodecConfig;
use tts_model::weights::CodecW;
use tts_model::Frame;

use crate::device::{GemmType, Gpu, Graph};
use crate::error::CudaError;
pub use conv::{
    launch as launch_implicit_conv, plan as conv_plan, ConvLaunch, ConvPlan, ImplicitConv,
};
pub use exec::{final_tile, gemv_choice, gemv_mma_choice, GEMV_MMA_STEPS};
use exec::{DevBufs, GemmMode};
use plan::{Buf, Program};
use state::{InputLayout, Piece, SlotBook};

/// Kernels of `kernels/codec.cu` that the codec launches (loaded at start-up).
pub const KERNELS: &[&str] = &[
    "codec_rvq",
    "codec_im2col",
    "codec_im2col_h",
    "codec_im2col8",
    "codec_im2col8_h",
    "codec_to_f16",
    "codec_act_pad",
    "codec_rms_norm",
    "codec_swiglu",
    "codec_dw_ln",
    "codec_final",
    "codec_zero",
    "codec_act_h",
    "codec_conv_mma64",
    "codec_conv_mma32",
    "codec_conv_win96",
    "codec_conv_win96r",
    "codec_conv_win64",
    "codec_conv_win32",
];

/// Kernels of the codec launched with programmatic dependent launch (`Gpu::pdl`): each
/// reads only weights and data of earlier passes before its `pdl_wait()` (the few-step
/// GEMVs their first pass of weights, the attention its cached keys and values), so it
/// starts while the kernel before it finishes.
pub const PDL_KERNELS: &[&str] = &[
    "codec_attention",
    "codec_gemv_m1",
    "codec_gemv_m2",
    "codec_gemv_m4",
    "codec_gemv_m8",
    "codec_gemv_h1",
    "codec_gemv_h2",
    "codec_gemv_h4",
    "codec_gemv_h8",
    "codec_gemv_mma4",
    "codec_gemv_mma8",
    "codec_gemv_mma4_v8",
];

/// Most frames one pass decodes (all rows together); larger calls run as several passes.
/// Bounds the scratch memory: about 7.3 MB per frame at the release geometry (the im2col
/// of the last decoder block alone is 5.2 MB per frame).
pub const MAX_FRAMES_PER_PASS: usize = 128;

/// GEMM arithmetic of the codec (activations and weights stay f32 either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecPrecision {
    /// TF32 tensor cores (10-bit mantissa inputs, f32 accumulation).
    Tf32,
    /// Full f32 GEMMs (slower; for parity checks).
    F32,
    /// The convolutions' GEMMs (those over an im2col) on f16 operands: the im2col written
    /// as f16, the weights read from an f16 copy, f32 accumulation and output. f16 keeps
    /// TF32's 10-bit mantissa (the CPU emulation gives the same error as TF32 on the
    /// fixture, `emulate::Rounding::F16Conv`) at half the column bytes; values beyond
    /// ±65504 saturate. The other GEMMs stay TF32. The default: on the H200 a loaded
    /// pass is 11-12 % faster than TF32 (`bench/results/2026-12-01-h200-tiles-f16`).
    F16,
}

impl std::str::FromStr for CodecPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "tf32" => Ok(Self::Tf32),
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            _ => Err(format!(
                "unknown codec precision `{s}` (use tf32, f16 or f32)"
            )),
        }
    }
}

/// The codec decoder on the device, with per-slot stream state.
pub struct DevCodec {
    /// Captured passes by (frames, rows); see [`DevCodec::set_graphs`].
    graphs: HashMap<(usize, usize), Graph>,
    graphs_on: bool,
    /// Passes decoded so far, by shape (see [`CAPTURE_AFTER_USES`]).
    uses: HashMap<(usize, usize), u32>,
    prog: Program,
    bufs: DevBufs,
    layout: InputLayout,
    book: SlotBook,
    max_slots: usize,
    frames_cap: usize,
    piece_cap: usize,
    gemm: GemmMode,
    /// Shape (frames, rows) of the last pass launched.
    last_pass: Option<(usize, usize)>,
}

/// Most pass shapes (frames, rows) kept as captured graphs.
pub const MAX_CODEC_GRAPHS: usize = 256;

/// A pass shape's decodes that run eagerly before its graph is captured (at the next). A
/// capture is host work while the GPU waits for the engine, and a fresh server meets
/// hundreds of shapes (on the H200 at 120-125 req/s its first 90 s had 150-215 codec calls
/// of over 10 ms, a warm server's ~1; at 125 req/s its queue never drained, with this rule
/// it did), while an eager pass costs ~0.4 ms more than a replay at 32 rows: shapes seen a
/// few times only are not worth a capture.
pub const CAPTURE_AFTER_USES: u32 = 8;

fn input_err(msg: String) -> CudaError {
    CudaError::Shape(format!("codec input: {msg}"))
}

impl DevCodec {
    /// Uploads the weights (re-laid out, f32) and allocates the state of `max_slots`
    /// streams and the scratch of one pass. A row may carry any number of frames per
    /// call; `max_frames_per_call` is how many of them one pass takes (it sizes the KV
    /// rings: `window - 1 + max_frames_per_call` positions per layer).
    pub fn new(
        gpu: &Gpu,
        cfg: &CodecConfig,
        w: CodecW<HostTensor>,
        max_slots: usize,
        max_frames_per_call: usize,
    ) -> Result<Self, CudaError> {
        if max_slots == 0 || max_frames_per_call == 0 {
            return Err(CudaError::Shape(
                "codec: max_slots and max_frames_per_call must be positive".into(),
            ));
        }
        let frames_cap = (max_slots * max_frames_per_call).min(MAX_FRAMES_PER_PASS);
        let piece_cap = max_frames_per_call.min(frames_cap);
        let ring = cfg.decoder.sliding_window.saturating_sub(1) + piece_cap;
        let mut prog = build::build(cfg, w, ring)?;
        let fits = |n: usize| n < i32::MAX as usize;
        let steps = frames_cap * prog.samples_per_frame;
        let sizes: Vec<usize> = prog.per_frame.iter().map(|n| n * frames_cap).collect();
        if !fits(prog.state_stride)
            || !fits(steps)
            || !sizes.iter().all(|&n| fits(n))
            || !fits(prog.arena.data.len())
        {
            return Err(CudaError::Shape(
                "codec: a buffer exceeds 2^31 elements".into(),
            ));
        }
        let layout = InputLayout {
            rows: max_slots,
            frames: frames_cap,
            nq: prog.num_quantizers,
        };
        let weights = gpu.upload(&prog.arena.data)?;
        prog.arena.data = Vec::new();
        let scratch = sizes
            .iter()
            .map(|&n| gpu.zeros::<f32>(n))
            .collect::<Result<Vec<_>, _>>()?;
        let bufs = DevBufs {
            weights,
            weights_f16: None,
            state: gpu.zeros(max_slots * prog.state_stride)?,
            inputs: gpu.zeros(layout.total())?,
            scratch,
        };
        exec::init_pads(gpu, &prog, &bufs, frames_cap)?;
        gpu.sync()?;
        tracing::info!(
            max_slots,
            frames_cap,
            ring,
            state_mb = (max_slots * prog.state_stride * 4) as f64 / 1e6,
            scratch_mb = sizes.iter().sum::<usize>() as f64 * 4.0 / 1e6,
            "GPU codec ready"
        );
        Ok(Self {
            graphs: HashMap::new(),
            graphs_on: true,
            uses: HashMap::new(),
            prog,
            bufs,
            layout,
            book: SlotBook::new(max_slots),
            max_slots,
            frames_cap,
            piece_cap,
            gemm: GemmMode {
                blas: GemmType::F32Tf32,
                small_gemv: true,
                gemv_mma_steps: GEMV_MMA_STEPS,
                conv_f16: false,
                implicit: ImplicitConv::default(),
                conv_window: true,
                conv_resident: true,
                wide_copies: true,
            },
            last_pass: None,
        })
    }

    /// Chooses the cuBLAS GEMM arithmetic (TF32 by default). [`CodecPrecision::F16`]
    /// makes the f16 copy of the weights the first time it is asked for.
    pub fn set_precision(&mut self, gpu: &Gpu, p: CodecPrecision) -> Result<(), CudaError> {
        if p == CodecPrecision::F16 && self.bufs.weights_f16.is_none() {
            self.bufs.weights_f16 = Some(exec::to_f16(gpu, &self.bufs.weights)?);
        }
        self.gemm.blas = match p {
            CodecPrecision::Tf32 | CodecPrecision::F16 => GemmType::F32Tf32,
            CodecPrecision::F32 => GemmType::F32,
        };
        self.gemm.conv_f16 = p == CodecPrecision::F16;
        self.graphs.clear();
        Ok(())
    }

    /// Runs the GEMMs of few steps (at most 8 per pass: the transformer and the first
    /// upsampling layers of a pass of 1-2 frames) as one GEMV launch each with f32 products
    /// (on by default; those on tensor cores, [`Self::set_gemv_mma_steps`], keep ~22 bits
    /// of each input) instead of a cuBLAS GEMM; off: every GEMM on cuBLAS, for comparisons.
    pub fn set_small_gemv(&mut self, on: bool) {
        self.gemm.small_gemv = on;
        self.graphs.clear();
    }

    /// The few-step GEMVs of at least `steps` steps over the f16 weights, without a folded
    /// norm or SwiGLU, on tensor cores (`kernels/codec_gemv_mma.cu`; 0: never).
    pub fn set_gemv_mma_steps(&mut self, steps: usize) {
        self.gemm.gemv_mma_steps = steps;
        self.graphs.clear();
    }

    /// Which f16 convolutions run as one implicit GEMM (`kernels/codec_conv.cu`) instead
    /// of im2col + cuBLAS (default [`ImplicitConv::Narrow`]; only with
    /// [`CodecPrecision::F16`]).
    pub fn set_implicit_conv(&mut self, mode: ImplicitConv) {
        self.gemm.implicit = mode;
        self.graphs.clear();
    }

    /// Whether the implicit convolutions whose frames are whole tiles take the window
    /// kernel (`codec_conv_win*`: each input value copied once per tile, not once per tap;
    /// on by default) or `codec_conv_mma*`, for comparisons.
    pub fn set_conv_window(&mut self, on: bool) {
        self.gemm.conv_window = on;
        self.graphs.clear();
    }

    /// Whether the window kernel keeps a layer's weights in shared memory where they fit
    /// (`codec_conv_win96r`: one block per multiprocessor, the weights copied once; on by
    /// default) or streams them per tile (`codec_conv_win96`), for comparisons.
    pub fn set_conv_resident(&mut self, on: bool) {
        self.gemm.conv_resident = on;
        self.graphs.clear();
    }

    /// Whether the im2col and the final convolution move their input 8 / 4 values per
    /// thread where the layout allows, and the attention stages its cached keys and
    /// values in shared memory with all copies in flight at once (on by default), or
    /// move them one value at a time, for comparisons: the same values either way.
    pub fn set_wide_copies(&mut self, on: bool) {
        self.gemm.wide_copies = on;
        self.graphs.clear();
    }

    /// Replays each pass shape (frames, rows) from a CUDA graph, captured once the shape
    /// has run eagerly [`CAPTURE_AFTER_USES`] times (on by default; at most
    /// [`MAX_CODEC_GRAPHS`] shapes, later ones run eagerly).
    pub fn set_graphs(&mut self, on: bool) {
        self.graphs_on = on;
        self.graphs.clear();
    }

    pub fn samples_per_frame(&self) -> usize {
        self.prog.samples_per_frame
    }

    pub fn max_slots(&self) -> usize {
        self.max_slots
    }

    /// Frames decoded so far in `slot`'s stream.
    pub fn position(&self, slot: usize) -> Option<usize> {
        self.book.frames.get(slot).copied()
    }

    /// Starts a fresh stream in `slot` (silent history, position 0).
    pub fn reset_slot(&mut self, gpu: &Gpu, slot: usize) -> Result<(), CudaError> {
        gpu.bind()?;
        if slot >= self.max_slots {
            return Err(input_err(format!(
                "slot {slot} out of range (max {})",
                self.max_slots
            )));
        }
        let stride = self.prog.state_stride;
        exec::zero(gpu, self.bufs.state.at(slot * stride), stride)?;
        self.book.reset(slot);
        Ok(())
    }

    fn validate(&self, rows: &[(usize, &[Frame])]) -> Result<(), CudaError> {
        let mut seen = vec![false; self.max_slots];
        let bins = self.prog.codebook_size as u32;
        for (slot, frames) in rows {
            let s = *slot;
            if s >= self.max_slots {
                return Err(input_err(format!(
                    "slot {s} out of range (max {})",
                    self.max_slots
                )));
            }
            if std::mem::replace(&mut seen[s], true) {
                return Err(input_err(format!("slot {s} appears twice in one call")));
            }
            if let Some(bad) = frames.iter().flatten().find(|&&c| c >= bins) {
                return Err(input_err(format!(
                    "code {bad} is outside the codebook (size {bins})"
                )));
            }
        }
        Ok(())
    }

    /// Decodes `frames` for each `(slot, frames)` row, continuing each slot's stream;
    /// returns `frames.len() * samples_per_frame` samples in [-1, 1] per row.
    pub fn decode(
        &mut self,
        gpu: &Gpu,
        rows: &[(usize, &[Frame])],
    ) -> Result<Vec<Vec<f32>>, CudaError> {
        self.validate(rows)?;
        gpu.bind()?;
        let spf = self.prog.samples_per_frame;
        let mut out: Vec<Vec<f32>> = rows
            .iter()
            .map(|(_, f)| Vec::with_capacity(f.len() * spf))
            .collect();
        let counts: Vec<(usize, usize)> = rows.iter().map(|(s, f)| (*s, f.len())).collect();
        for pass in state::plan_passes(&counts, self.frames_cap, self.piece_cap) {
            let frames = self.enqueue_pass(gpu, rows, &pass)?;
            let pcm = gpu.read(&self.bufs.scratch[Buf::Pcm.index()], frames * spf)?;
            let mut at = 0;
            for p in &pass {
                out[p.row].extend_from_slice(&pcm[at..at + p.frames * spf]);
                at += p.frames * spf;
            }
        }
        Ok(out)
    }

    /// Decodes one pass of every frame count up to the pass limit, eagerly, on slots reset
    /// afterwards (start-up). On the H200 a fresh codec's first pass of a frame count took
    /// 10-50 ms more than the next, whatever its rows, lazy or eager module loading alike
    /// (`examples/codec_first_calls.rs`; the GEMMs' shapes follow the frame count, so most
    /// likely cuBLAS setting up each new shape), and a fresh server paid that while
    /// serving: at 125 req/s a backlog that took ~20 s to drain. Leaves no stream state,
    /// graphs or use counts behind; returns the frame counts decoded.
    pub fn warm_up(&mut self, gpu: &Gpu) -> Result<usize, CudaError> {
        let graphs_on = std::mem::replace(&mut self.graphs_on, false);
        let done = self.warm_up_passes(gpu);
        self.graphs_on = graphs_on;
        self.uses.clear();
        self.last_pass = None;
        done
    }

    fn warm_up_passes(&mut self, gpu: &Gpu) -> Result<usize, CudaError> {
        let codes = vec![[0u32; 16]; self.piece_cap];
        // frames_cap <= max_slots * piece_cap: every call fits the slots
        let mut used = 0;
        for frames in 1..=self.frames_cap {
            let per_row = state::rows_of_one_pass(frames, self.piece_cap);
            used = used.max(per_row.len());
            let rows: Vec<(usize, &[Frame])> = per_row
                .iter()
                .enumerate()
                .map(|(slot, &n)| (slot, &codes[..n]))
                .collect();
            self.decode(gpu, &rows)?;
        }
        for slot in 0..used {
            self.reset_slot(gpu, slot)?;
        }
        Ok(self.frames_cap)
    }

    /// Writes a pass's inputs, enqueues its launches and advances the slots; returns the
    /// pass's frame count (the PCM is in the `Pcm` buffer once the stream gets there).
    fn enqueue_pass(
        &mut self,
        gpu: &Gpu,
        rows: &[(usize, &[Frame])],
        pass: &[Piece],
    ) -> Result<usize, CudaError> {
        let v = state::pass_inputs(&self.layout, pass, &self.book, |p| {
            &rows[p.row].1[p.start..p.start + p.frames]
        });
        gpu.write(&mut self.bufs.inputs, &v)?;
        let frames = pass.iter().map(|p| p.frames).sum();
        self.launch_pass(gpu, frames, pass.len(), CAPTURE_AFTER_USES)?;
        state::advance(&mut self.book, pass);
        Ok(frames)
    }

    /// The launches of one pass over the inputs already on the device: a graph replay
    /// when graphs are on (captured once the shape has run eagerly `eager_uses` times),
    /// else eager.
    fn launch_pass(
        &mut self,
        gpu: &Gpu,
        frames: usize,
        rows: usize,
        eager_uses: u32,
    ) -> Result<(), CudaError> {
        let key = (frames, rows);
        self.last_pass = Some(key);
        let uses = self.uses.entry(key).or_insert(0);
        *uses = uses.saturating_add(1);
        if self.graphs_on
            && *uses > eager_uses
            && !self.graphs.contains_key(&key)
            && self.graphs.len() < MAX_CODEC_GRAPHS
        {
            let t0 = Instant::now();
            let g = Graph::capture(gpu, |gpu| self.enqueue_launches(gpu, frames, rows))?;
            self.graphs.insert(key, g);
            // host time the GPU may wait through: a fresh server under load meets many
            // shapes (at most MAX_CODEC_GRAPHS lines in a server's life)
            tracing::info!(
                frames,
                rows,
                ms = t0.elapsed().as_secs_f64() * 1e3,
                graphs = self.graphs.len(),
                "codec pass captured"
            );
        }
        match self.graphs.get(&key) {
            Some(g) if self.graphs_on => g.launch(),
            _ => self.enqueue_launches(gpu, frames, rows),
        }
    }

    /// Pass shapes captured as graphs so far.
    pub fn captured_graphs(&self) -> usize {
        self.graphs.len()
    }

    /// Shape (frames, rows) of the last pass launched.
    pub fn last_pass(&self) -> Option<(usize, usize)> {
        self.last_pass
    }

    /// Launches the last pass again on the inputs still on the device (benchmarks: it
    /// decodes the same frames from the same stream state, rewriting the same history
    /// and KV values; the host's stream positions do not move).
    pub fn replay_last_pass(&mut self, gpu: &Gpu) -> Result<(), CudaError> {
        match self.last_pass {
            // benchmarks time replays: the graph is captured at once
            Some((frames, rows)) => self.launch_pass(gpu, frames, rows, 0),
            None => Ok(()),
        }
    }

    /// Enqueues the launches of one pass (no host work: capturable).
    fn enqueue_launches(&self, gpu: &Gpu, frames: usize, rows: usize) -> Result<(), CudaError> {
        exec::run(
            gpu,
            &self.prog,
            &self.bufs,
            &self.layout,
            frames,
            rows,
            self.gemm,
        )
    }
}

/// Deterministic pseudo-random codes for benchmarks.
fn bench_codes(n: usize, bins: usize, seed: u64) -> Vec<Frame> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            let mut f = [0u32; 16];
            for c in f.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *c = (x % bins as u64) as u32;
            }
            f
        })
        .collect()
}

/// Mean wall time (ms) of `codec.decode` (each pass shape replayed from its graph unless
/// graphs are off) for `streams` streams (slots 0..streams) of `frames` frames each, after
/// one warm-up call; includes the input copy and the PCM read
/// back (the call synchronises). Streams keep advancing between calls.
pub fn bench_decode(
    gpu: &Gpu,
    codec: &mut DevCodec,
    streams: usize,
    frames: usize,
    iters: usize,
) -> Result<f64, CudaError> {
    let codes: Vec<Vec<Frame>> = (0..streams)
        .map(|s| bench_codes(frames, codec.prog.codebook_size, s as u64 + 1))
        .collect();
    for s in 0..streams {
        codec.reset_slot(gpu, s)?;
    }
    let rows: Vec<(usize, &[Frame])> = codes
        .iter()
        .enumerate()
        .map(|(s, c)| (s, c.as_slice()))
        .collect();
    // past the eager uses, so that with graphs on the timed calls replay the graph
    for _ in 0..=CAPTURE_AFTER_USES {
        codec.decode(gpu, &rows)?;
    }
    let t = Instant::now();
    for _ in 0..iters.max(1) {
        codec.decode(gpu, &rows)?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e3 / iters.max(1) as f64)
}
