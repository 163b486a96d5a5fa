//! Codec passes alone, for a kernel profiler (`ncu`) or a quick A/B of the codec's
//! convolution paths: `cargo run --release -p tts-cuda --example codec_pass -- [model]
//! [rows] [frames] [iters] [implicit] [weights] [copies]`, e.g. `random:1.7b 32 2 1 narrow`
//! (implicit: off, narrow, large or all; weights of the window convolutions: resident, the
//! default, or streamed; copies of the im2col, final conv and attention: wide, the default,
//! or scalar). Launches eagerly (no graphs), so a profiler sees every kernel; prints the
//! mean wall time of a decode call.

use tts_cuda::codec::{bench_decode, CodecPrecision, DevCodec, ImplicitConv};
use tts_cuda::device::Gpu;
use tts_cuda::weights::HostLoader;
use tts_model::weights::CodecW;
use tts_model::{LoadOptions, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let spec = arg(1, "random:1.7b");
    let rows: usize = arg(2, "32").parse()?;
    let frames: usize = arg(3, "2").parse()?;
    let iters: usize = arg(4, "1").parse()?;
    let implicit: ImplicitConv = arg(5, "narrow").parse()?;
    let resident = match arg(6, "resident").as_str() {
        "resident" => true,
        "streamed" => false,
        other => return Err(format!("weights `{other}`: resident or streamed").into()),
    };
    let wide = match arg(7, "wide").as_str() {
        "wide" => true,
        "scalar" => false,
        other => return Err(format!("copies `{other}`: wide or scalar").into()),
    };
    let model = Model::load(&spec, LoadOptions::default())?;
    let gpu = Gpu::open(0)?;
    let w = CodecW::load(&model.codec, &mut HostLoader(&model.codec_weights))?;
    let mut codec = DevCodec::new(&gpu, &model.codec, w, rows, frames)?;
    codec.set_precision(&gpu, CodecPrecision::F16)?;
    codec.set_implicit_conv(implicit);
    codec.set_conv_resident(resident);
    codec.set_wide_copies(wide);
    codec.set_graphs(false);
    let ms = bench_decode(&gpu, &mut codec, rows, frames, iters)?;
    println!("{spec}: {rows} rows x {frames} frames, implicit {implicit:?}: {ms:.3} ms per call");
    Ok(())
}
