//! What a device-to-host read costs the host, measured the way `Gpu::read` reads a
//! stage's results (a copy on the stream, then a stream synchronisation), after a small
//! operation on the stream stands in for the stage's last kernel. For each size it times:
//! the synchronisation alone (the floor), the copy into a fresh pageable `Vec` (what
//! `Gpu::read` does), and the copy into a reused page-locked buffer (default flags, and
//! write-combined as `alloc_pinned` gives) then into a fresh `Vec`.
//! `cargo run --release -p tts-cuda --example read_latency -- [iterations]`

use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DriverError, PinnedHostSlice};
use tts_engine::stats::Summary;

/// Bytes read: a row's code, 16 rows' codes, a frame of 16 codes for 8 rows, 2 frames of
/// PCM (1 row), 2 frames for 8 rows, 4 frames for 16 rows, 8 frames for 20 rows.
const SIZES: [usize; 7] = [4, 64, 512, 15_360, 122_880, 491_520, 1_228_800];

#[derive(Clone, Copy)]
enum Mode {
    SyncOnly,
    Pageable,
    Pinned,
    WriteCombined,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::SyncOnly => "sync only",
            Mode::Pageable => "pageable Vec (now)",
            Mode::Pinned => "page-locked + copy-out",
            Mode::WriteCombined => "write-combined + copy",
        }
    }
}

struct Bench {
    stream: std::sync::Arc<CudaStream>,
    src: CudaSlice<f32>,
    flag: CudaSlice<u32>,
    pinned: PinnedHostSlice<f32>,
    wc: PinnedHostSlice<f32>,
}

impl Bench {
    /// One read of `n` floats in `mode`: host time from the call to the data being in a
    /// fresh `Vec`.
    fn once(&mut self, mode: Mode, n: usize) -> Result<Duration, DriverError> {
        self.stream.memset_zeros(&mut self.flag)?;
        let t = Instant::now();
        let first = match mode {
            Mode::SyncOnly => {
                self.stream.synchronize()?;
                0.0
            }
            Mode::Pageable => {
                let mut out = vec![0f32; n];
                self.stream.memcpy_dtoh(&self.src.slice(0..n), &mut out)?;
                self.stream.synchronize()?;
                out[0]
            }
            Mode::Pinned | Mode::WriteCombined => {
                let host = match mode {
                    Mode::Pinned => &mut self.pinned,
                    _ => &mut self.wc,
                };
                self.stream.memcpy_dtoh(&self.src.slice(0..n), host)?;
                self.stream.synchronize()?;
                let out = host.as_slice()?[..n].to_vec();
                out[0]
            }
        };
        std::hint::black_box(first);
        Ok(t.elapsed())
    }
}

fn main() -> Result<(), DriverError> {
    let iters = match std::env::args().nth(1).map(|s| s.parse::<usize>()) {
        None => 3000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("read_latency: the argument is the reads per row, a positive integer");
            std::process::exit(2);
        }
    };
    tts_cuda::libs::preload();
    if !tts_cuda::libs::present().0 {
        eprintln!(
            "read_latency: no CUDA driver here (libcuda.so.1 not found); run it on a GPU machine"
        );
        std::process::exit(2);
    }
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let max = SIZES[SIZES.len() - 1] / 4;
    let src = stream.clone_htod(&vec![1f32; max])?;
    let flag = stream.alloc_zeros::<u32>(1)?;
    // SAFETY: both buffers are written by a device copy before any host read of them.
    let pinned = unsafe { ctx.alloc_pinned_with_flags::<f32>(max, 0)? };
    // SAFETY: as above.
    let wc =
        unsafe { ctx.alloc_pinned_with_flags::<f32>(max, sys::CU_MEMHOSTALLOC_WRITECOMBINED)? };
    let mut bench = Bench {
        stream,
        src,
        flag,
        pinned,
        wc,
    };
    println!("device: {}, {iters} reads per row", ctx.name()?);
    println!(
        "{:>9} {:<24} {:>8} {:>8} {:>8}",
        "bytes", "read", "p50 µs", "p95 µs", "mean µs"
    );
    for bytes in SIZES {
        for mode in [
            Mode::SyncOnly,
            Mode::Pageable,
            Mode::Pinned,
            Mode::WriteCombined,
        ] {
            let mut t = Vec::with_capacity(iters);
            for i in 0..iters + 100 {
                let us = bench.once(mode, bytes / 4)?;
                if i >= 100 {
                    t.push(us);
                }
            }
            // (iters > 0, so there is a summary)
            let Some(s) = Summary::of(&t) else { continue };
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            println!(
                "{bytes:>9} {:<24} {:>8.2} {:>8.2} {:>8.2}",
                mode.name(),
                us(s.p50),
                us(s.p95),
                us(s.mean)
            );
        }
    }
    Ok(())
}
