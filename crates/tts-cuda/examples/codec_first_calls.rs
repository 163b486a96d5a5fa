//! A fresh codec's first decode of each pass shape against its second, eagerly (no
//! graphs): `cargo run --release -p tts-cuda --example codec_first_calls -- [model]
//! [warm]`. Shows what a fresh server pays the first time it meets a shape (module
//! loading, library set-up) before any capture; run under `CUDA_MODULE_LOADING=LAZY` and
//! `EAGER` to compare, and with `warm` to run the server's start-up warm-up
//! (`DevCodec::warm_up`) first.

use std::time::Instant;

use tts_cuda::codec::{CodecPrecision, DevCodec};
use tts_cuda::device::Gpu;
use tts_cuda::weights::HostLoader;
use tts_model::weights::CodecW;
use tts_model::{Frame, LoadOptions, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let spec = args.get(1).map_or("random:1.7b", String::as_str);
    let warm = match args.get(2).map(String::as_str) {
        None => false,
        Some("warm") => true,
        Some(other) => {
            return Err(format!("`{other}`: the second argument is `warm` or none").into())
        }
    };
    let model = Model::load(spec, LoadOptions::default())?;
    let t = Instant::now();
    let gpu = Gpu::open(0)?;
    println!("gpu open {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let w = CodecW::load(&model.codec, &mut HostLoader(&model.codec_weights))?;
    let t = Instant::now();
    let mut codec = DevCodec::new(&gpu, &model.codec, w, 192, 16)?;
    codec.set_precision(&gpu, CodecPrecision::F16)?;
    codec.set_graphs(false);
    println!("codec ready {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    if warm {
        let t = Instant::now();
        let n = codec.warm_up(&gpu)?;
        println!(
            "warm-up of {n} frame counts {:.1} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let code: Frame = [7; 16];
    // (rows, frames per row), in the order a fresh server under load meets them
    let shapes = [
        (1, 2),
        (1, 1),
        (1, 4),
        (1, 8),
        (2, 1),
        (2, 4),
        (4, 2),
        (8, 1),
        (8, 4),
        (6, 12),
        (16, 2),
        (17, 7),
        (32, 4),
        (20, 6),
        (64, 2),
        (128, 1),
    ];
    for (rows, frames) in shapes {
        let codes = vec![code; frames];
        let call: Vec<(usize, &[Frame])> = (0..rows).map(|s| (s, codes.as_slice())).collect();
        let mut ms = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            codec.decode(&gpu, &call)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "{rows:>3} rows x {frames:>2} frames: first {:>7.2} ms, then {:>6.2} / {:>6.2}",
            ms[0], ms[1], ms[2]
        );
    }
    Ok(())
}
