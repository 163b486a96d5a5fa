//! Times voice cloning's CPU work at the released geometry (`random:1.7b-base`, or the
//! model given as the first argument): the speaker encoder (mel + ECAPA-TDNN) and the
//! codec encoder (Mimi) on recordings of 3, 10 and 30 s, median of 3 runs each. This is
//! what the first request with a new reference recording waits for before admission.
//!
//!     cargo run --release -p tts-model --example clone_timing [-- random:0.6b-base]

use std::time::Instant;

use tts_model::reference::codec_encoder::CodecEncoder;
use tts_model::reference::speaker::SpeakerEncoder;
use tts_model::{LoadOptions, Model};

fn recording(seconds: f32) -> Vec<f32> {
    (0..(24_000.0 * seconds) as usize)
        .map(|i| {
            let t = i as f32 / 24_000.0;
            let f0 = 130.0 + 10.0 * (2.0 * std::f32::consts::PI * 4.0 * t).sin();
            (1..8)
                .map(|h| (2.0 * std::f32::consts::PI * f0 * h as f32 * t).sin() / h as f32)
                .sum::<f32>()
                * 0.25
        })
        .collect()
}

fn median_ms(mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..3)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[1]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "random:1.7b-base".into());
    let model = Model::load(&spec, LoadOptions::default())?;
    let cfg = model
        .config
        .speaker_encoder
        .clone()
        .ok_or("not a Base model")?;
    let t = Instant::now();
    let speaker = SpeakerEncoder::load(&cfg, &model.weights)?;
    let codec = CodecEncoder::from_model(&model)?;
    println!(
        "{spec}: encoders loaded in {:.1} s; {} threads",
        t.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    println!("| recording | speaker encoder (ms) | codec encoder (ms) | frames |");
    println!("| ---: | ---: | ---: | ---: |");
    for seconds in [3.0f32, 10.0, 30.0] {
        let audio = recording(seconds);
        let spk = median_ms(|| {
            speaker.embed(&audio).expect("speaker embedding");
        });
        let mut frames = 0;
        let enc = median_ms(|| {
            frames = codec.encode(&audio).expect("codes").len();
        });
        println!("| {seconds} s | {spk:.0} | {enc:.0} | {frames} |");
    }
    Ok(())
}
