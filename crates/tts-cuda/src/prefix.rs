//! The talker's prefix KV cache: the cache rows of a prompt's text-independent head
//! (instructions, role, codec prefix, `tts_bos`; `Prompt::head_len`), kept per distinct
//! head, so a request whose voice, language and instructions were seen before prefills
//! only its text. Attention is causal, so the head's rows do not depend on what follows
//! it: a hit gives the same values up to rounding (the prefill that stored them may have
//! run other kernels, which the token count picks, as any two batch sizes may), and
//! changes which kernels compute the remaining positions, not the prompt's meaning.
//!
//! Entries hold K and V as `[layer][head_len][kv_dim]`; least recently used goes first.

use std::collections::HashMap;

use tts_model::prompt::PromptPosition;

use crate::device::{Arg, DBuf, Gpu};
use crate::error::CudaError;
use crate::stack::Kv;

/// One cached head.
struct Entry {
    k: DBuf<u8>,
    v: DBuf<u8>,
    last_use: u64,
}

/// Heads' KV rows on the device, at most `capacity` of them.
pub struct PrefixCache {
    capacity: usize,
    /// The talker cache the rows come from and go to.
    kv: Kv,
    shape: CacheShape,
    entries: HashMap<Vec<PromptPosition>, Entry>,
    clock: u64,
    /// Prefills that found their head (counted for logs and tests).
    pub hits: u64,
    pub misses: u64,
}

/// A stack's cache geometry as the copies need it.
#[derive(Debug, Clone, Copy)]
pub struct CacheShape {
    pub layers: usize,
    /// Bytes of one position's K (or V) in one layer.
    pub row_bytes: usize,
}

impl PrefixCache {
    /// A cache of up to `capacity` heads for the talker cache `kv` of geometry `shape`.
    pub fn new(capacity: usize, kv: Kv, shape: CacheShape) -> Self {
        Self {
            capacity,
            kv,
            shape,
            entries: HashMap::new(),
            clock: 0,
            hits: 0,
            misses: 0,
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Copies the cached rows of `head` into positions `0..head.len()` of `slot`'s cache
    /// and returns true, or returns false (nothing enqueued) when `head` is not cached.
    pub fn restore(
        &mut self,
        gpu: &Gpu,
        head: &[PromptPosition],
        slot: usize,
    ) -> Result<bool, CudaError> {
        self.clock += 1;
        let Some(e) = self.entries.get_mut(head) else {
            self.misses += 1;
            return Ok(false);
        };
        e.last_use = self.clock;
        self.hits += 1;
        let rows = (e.k.ptr, e.v.ptr);
        move_rows(gpu, rows, self.kv, self.shape, slot, head.len(), true)?;
        Ok(true)
    }

    /// Stores positions `0..head.len()` of `slot`'s cache as `head`'s rows (evicting the
    /// least recently used head when full). Enqueued on the stream after the prefill that
    /// wrote them.
    pub fn store(
        &mut self,
        gpu: &Gpu,
        head: &[PromptPosition],
        slot: usize,
    ) -> Result<(), CudaError> {
        if !self.enabled() || head.is_empty() || self.entries.contains_key(head) {
            return Ok(());
        }
        if self.entries.len() >= self.capacity {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_use)
                .map(|(key, _)| key.clone());
            if let Some(key) = oldest {
                self.entries.remove(&key);
            }
        }
        let bytes = self.shape.layers * head.len() * self.shape.row_bytes;
        let k = gpu.zeros::<u8>(bytes)?;
        let v = gpu.zeros::<u8>(bytes)?;
        move_rows(
            gpu,
            (k.ptr, v.ptr),
            self.kv,
            self.shape,
            slot,
            head.len(),
            false,
        )?;
        self.clock += 1;
        let last_use = self.clock;
        self.entries.insert(head.to_vec(), Entry { k, v, last_use });
        Ok(())
    }
}

/// Copies positions `0..len` of `slot` in every layer between the caches and an entry's
/// (K, V) store `[layer][len][kv_dim]`: into the slot when `to_slot`, else out of it.
fn move_rows(
    gpu: &Gpu,
    (ek, ev): (u64, u64),
    kv: Kv,
    shape: CacheShape,
    slot: usize,
    len: usize,
    to_slot: bool,
) -> Result<(), CudaError> {
    let run = len * shape.row_bytes;
    let off = (slot * kv.max_pos * shape.row_bytes) as u64;
    let cache = (
        kv.k + off,
        kv.v + off,
        kv.rows * kv.max_pos * shape.row_bytes,
    );
    let entry = (ek, ev, run);
    if to_slot {
        copy_runs(gpu, entry, cache, run, shape)
    } else {
        copy_runs(gpu, cache, entry, run, shape)
    }
}

/// One launch: for each layer, `run` bytes from (src K, src V) + layer · src stride to
/// (dst K, dst V) + layer · dst stride.
fn copy_runs(
    gpu: &Gpu,
    (sk, sv, s_stride): (u64, u64, usize),
    (dk, dv, d_stride): (u64, u64, usize),
    run: usize,
    shape: CacheShape,
) -> Result<(), CudaError> {
    let units = |b: usize| -> Result<i32, CudaError> {
        if !b.is_multiple_of(16) {
            return Err(CudaError::Shape(format!(
                "prefix copy of {b} bytes is not whole 16-byte pieces"
            )));
        }
        i32::try_from(b / 16)
            .map_err(|_| CudaError::Shape(format!("prefix copy stride {b} too large")))
    };
    let n16 = units(run)?;
    let blocks = (n16 as u32).div_ceil(256).clamp(1, 64);
    gpu.launch(
        "copy_runs2",
        (blocks, shape.layers as u32, 2),
        256,
        &[
            Arg::P(sk),
            Arg::P(sv),
            Arg::P(dk),
            Arg::P(dv),
            Arg::I(units(s_stride)?),
            Arg::I(units(d_stride)?),
            Arg::I(n16),
        ],
    )
}
