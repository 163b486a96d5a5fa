//! Every buffer the talker and code predictor use, allocated once at start-up, so graph
//! capture sees fixed addresses and the hot path never allocates.

use tts_model::config::{ModelConfig, NUM_CODE_GROUPS};

use crate::device::{DBuf, Gpu};
use crate::error::CudaError;
use crate::kernels;
use crate::linear::GemmScratch;

/// Sizes the backend was built for.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Concurrent requests (slots).
    pub max_slots: usize,
    /// Talker positions per slot (prompt + frames).
    pub max_positions: usize,
    /// Largest batch of one stage call (graph buckets go up to it).
    pub max_batch: usize,
    /// Most prompt tokens in one prefill call.
    pub max_prefill_tokens: usize,
    /// Keep the KV caches in f32 instead of bf16 (twice the memory; for parity checks).
    pub f32_kv: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_slots: 64,
            max_positions: 2048,
            max_batch: 64,
            max_prefill_tokens: 1024,
            f32_kv: false,
        }
    }
}

/// Per-launch integer inputs, packed so one host-to-device copy sets them all.
/// Offsets (in i32) into `Workspace::inputs`, each region `max_batch` long unless noted.
pub struct InputLayout {
    pub row_slots: usize,
    pub step_pos: usize,
    pub text_ids: usize,
    pub cp_rows1: usize,
    /// `2 * max_batch` long.
    pub cp_rows2: usize,
    pub total: usize,
}

impl InputLayout {
    fn new(b: usize) -> Self {
        Self {
            row_slots: 0,
            step_pos: b,
            text_ids: 2 * b,
            cp_rows1: 3 * b,
            cp_rows2: 4 * b,
            total: 6 * b,
        }
    }
}

/// Activations, per-slot state and the KV caches.
pub struct Workspace {
    pub limits: Limits,
    // activations, f32 row-major
    pub x: DBuf<f32>,
    pub qkv: DBuf<f32>,
    pub attn: DBuf<f32>,
    pub gu: DBuf<f32>,
    pub text_in: DBuf<f32>,
    pub text_h: DBuf<f32>,
    pub last: DBuf<f32>,
    pub hidden: DBuf<f32>,
    pub logits: DBuf<f32>,
    pub cp_x: DBuf<f32>,
    pub cp_h: DBuf<f32>,
    pub scratch: GemmScratch,
    // integers
    pub inputs: DBuf<i32>,
    pub layout: InputLayout,
    pub prefill_ints: DBuf<i32>,
    pub codes: DBuf<i32>,
    pub frames: DBuf<i32>,
    /// Constant code-predictor positions: `[2B]` of (0, 1) pairs, then 15 rows of `[B]`
    /// holding step+1.
    pub cp_pos: DBuf<i32>,
    // per-slot state
    pub slot_hidden: DBuf<f32>,
    pub slot_frames: DBuf<i32>,
    pub params: DBuf<u32>,
    pub seen: DBuf<u32>,
    pub seen_words: usize,
    // KV caches, bf16 or f32 (`limits.f32_kv`): [layer][slot or row][position][kv_dim]
    pub k_cache: DBuf<u8>,
    pub v_cache: DBuf<u8>,
    pub cp_k_cache: DBuf<u8>,
    pub cp_v_cache: DBuf<u8>,
    /// Bytes per cached value.
    pub kv_elem: usize,
}

/// Where the per-slot state lives: the workspace that owns it, also for work enqueued on
/// another stream with a workspace of its own (`lane`).
#[derive(Debug, Clone, Copy)]
pub struct SlotBuffers {
    /// `[slot][talker hidden]` last hidden state.
    pub hidden: u64,
    /// `[slot][16]` the current frame's codes.
    pub frames: u64,
    /// `[slot][16]` sampler parameter words.
    pub params: u64,
}

impl Workspace {
    /// This workspace's per-slot state.
    pub fn slot_buffers(&self) -> SlotBuffers {
        SlotBuffers {
            hidden: self.slot_hidden.ptr,
            frames: self.slot_frames.ptr,
            params: self.params.ptr,
        }
    }

    /// `frames[r] = slot_frames[slots[r]]` for the `b` rows of a bucket (`slots`: device
    /// row-to-slot map, -1 for padding; `slot_frames` from [`SlotBuffers::frames`]).
    pub fn load_frames(
        &self,
        gpu: &Gpu,
        slot_frames: u64,
        slots: u64,
        b: usize,
    ) -> Result<(), CudaError> {
        let n = NUM_CODE_GROUPS;
        kernels::gather_u32(gpu, slot_frames, n, n, slots, b, self.frames.ptr, n)
    }

    /// `slot_frames[slots[r]] = frames[r]` for the `b` rows of a bucket.
    pub fn store_frames(
        &self,
        gpu: &Gpu,
        slot_frames: u64,
        slots: u64,
        b: usize,
    ) -> Result<(), CudaError> {
        let n = NUM_CODE_GROUPS;
        kernels::scatter_u32(gpu, self.frames.ptr, n, n, slots, b, slot_frames, n)
    }

    pub fn new(gpu: &Gpu, cfg: &ModelConfig, limits: Limits) -> Result<Self, CudaError> {
        let t = cfg.talker.dims();
        let c = cfg.talker.code_predictor.dims();
        let b = limits.max_batch;
        let p = limits.max_prefill_tokens.max(2 * b);
        let h = t.hidden.max(c.hidden);
        let q = t.q_dim().max(c.q_dim());
        let qkv = (t.q_dim() + 2 * t.kv_dim()).max(c.q_dim() + 2 * c.kv_dim());
        let inter = t.intermediate.max(c.intermediate);
        let th = cfg.talker.text_hidden_size;
        let vocab = cfg
            .talker
            .vocab_size
            .max(cfg.talker.code_predictor.vocab_size);
        let max_k = h.max(q).max(inter).max(th).max(t.hidden);
        let max_n = (2 * inter).max(qkv).max(vocab).max(th);
        let layout = InputLayout::new(b);
        let mut cp_pos = vec![0i32; 2 * b + 15 * b];
        for r in 0..b {
            cp_pos[2 * r + 1] = 1;
        }
        for s in 0..15 {
            for r in 0..b {
                cp_pos[2 * b + s * b + r] = s as i32 + 2;
            }
        }
        let seen_words = cfg.talker.vocab_size.div_ceil(32);
        let kv_elem = if limits.f32_kv { 4 } else { 2 };
        let kv_talker = t.layers * limits.max_slots * limits.max_positions * t.kv_dim() * kv_elem;
        let kv_cp = c.layers * b * NUM_CODE_GROUPS * c.kv_dim() * kv_elem;
        Ok(Self {
            limits,
            x: gpu.zeros(p * h)?,
            qkv: gpu.zeros(p * qkv)?,
            attn: gpu.zeros(p * q)?,
            gu: gpu.zeros(p * inter)?,
            text_in: gpu.zeros(p * th)?,
            text_h: gpu.zeros(p * th)?,
            last: gpu.zeros(b * t.hidden)?,
            hidden: gpu.zeros(b * t.hidden)?,
            logits: gpu.zeros(b * vocab)?,
            cp_x: gpu.zeros(2 * b * c.hidden)?,
            cp_h: gpu.zeros(b * t.hidden)?,
            scratch: GemmScratch::new(gpu, 2 * p, max_k, max_n)?,
            inputs: gpu.zeros(layout.total)?,
            layout,
            prefill_ints: gpu.zeros(5 * p)?,
            codes: gpu.zeros(b)?,
            frames: gpu.zeros(b * NUM_CODE_GROUPS)?,
            cp_pos: gpu.upload(&cp_pos)?,
            slot_hidden: gpu.zeros(limits.max_slots * t.hidden)?,
            slot_frames: gpu.zeros(limits.max_slots * NUM_CODE_GROUPS)?,
            params: gpu.zeros(limits.max_slots * 16)?,
            seen: gpu.zeros(limits.max_slots * seen_words)?,
            seen_words,
            k_cache: gpu.zeros(kv_talker)?,
            v_cache: gpu.zeros(kv_talker)?,
            cp_k_cache: gpu.zeros(kv_cp)?,
            cp_v_cache: gpu.zeros(kv_cp)?,
            kv_elem,
        })
    }

    /// Bytes of device memory held.
    pub fn bytes(&self) -> usize {
        let f = |n: usize| n * 4;
        f(self.x.len
            + self.qkv.len
            + self.attn.len
            + self.gu.len
            + self.text_in.len
            + self.text_h.len)
            + (self.k_cache.len + self.v_cache.len + self.cp_k_cache.len + self.cp_v_cache.len)
            + self.scratch.xb.len * 2
            + f(self.scratch.acc.len)
    }
}
