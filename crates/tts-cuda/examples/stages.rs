//! Stage benchmark without the server binary (handy while iterating on kernels):
//! `cargo run --release -p tts-cuda --example stages -- [model] [batches] [iters]`,
//! e.g. `random:1.7b 1,8,32 20`. The `qwen3-tts bench-stages` subcommand does the same
//! and writes JSON.

use tts_cuda::{CudaBackend, CudaOptions};
use tts_model::{LoadOptions, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let spec = args.get(1).map_or("random:1.7b", String::as_str);
    let batches: Vec<usize> = args
        .get(2)
        .map_or("1,8,32", String::as_str)
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let iters: usize = args.get(3).map_or(Ok(20), |s| s.parse())?;
    let model = Model::load(spec, LoadOptions::default())?;
    let max_batch = batches
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .next_power_of_two();
    let mut opts = CudaOptions::default();
    opts.limits.max_slots = max_batch;
    opts.limits.max_batch = max_batch;
    opts.limits.max_positions = 512;
    let mut b = CudaBackend::new(&model, opts)?;
    let rows = tts_cuda::bench::bench_stages(&mut b, &model, &batches, iters, 2, 8)?;
    print!("{}", tts_cuda::bench::stage_table(&rows));
    Ok(())
}
