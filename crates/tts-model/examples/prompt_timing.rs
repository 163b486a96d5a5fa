//! Times building a request's prompt (`Model::prompt`: the text tokenizer and the prompt
//! layout), which `Engine::submit` does on the HTTP handler's thread before the engine's
//! clock starts: so it is in a client's time to first audio and not in the server's
//! `tts_time_to_first_audio_seconds`. Each line of a prompt set once, first with warm CPU
//! caches, then with 64 MiB written between two prompts (as a server's other work leaves
//! them); mean, p50 and p95 in µs.
//!
//!     cargo run --release -p tts-model --example prompt_timing [-- PROMPTS.txt [MODEL]]
//!
//! (default: `crates/tts-bench/prompts/en.txt` and `random:1.7b`, whose tokenizer and
//! config are the released ones; its weights are not needed for a prompt and stay unread).

use std::time::Instant;

use tts_model::{SpeechRequest, TextMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "crates/tts-bench/prompts/en.txt".into());
    let spec = args.next().unwrap_or_else(|| "random:1.7b".into());
    let model = tts_model::builtin::load(&spec)?.ok_or("not a built-in model")?;
    let voice = model.voices().into_iter().next();
    let texts: Vec<String> = std::fs::read_to_string(&path)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if texts.is_empty() {
        return Err(format!("{path} holds no prompt").into());
    }
    println!("{} prompts from {path}, model {spec}", texts.len());
    let mut scratch = vec![0u8; 64 << 20];
    for (label, flush) in [("warm caches", false), ("64 MiB between", true)] {
        for mode in [TextMode::Prefill, TextMode::Stream] {
            let mut us = Vec::with_capacity(texts.len());
            for (i, text) in texts.iter().enumerate() {
                if flush {
                    for b in scratch.iter_mut().step_by(64) {
                        *b = b.wrapping_add(i as u8 | 1);
                    }
                }
                let req = SpeechRequest {
                    text: text.clone(),
                    voice: voice.clone(),
                    language: "english".into(),
                    instructions: None,
                    text_mode: mode,
                    clone: None,
                };
                let t = Instant::now();
                let prompt = model.prompt(&req)?;
                us.push(t.elapsed().as_secs_f64() * 1e6);
                std::hint::black_box(prompt);
            }
            us.sort_by(f64::total_cmp);
            let mean = us.iter().sum::<f64>() / us.len() as f64;
            println!(
                "{label:>15}, {mode:?} text: mean {mean:.1} us, p50 {:.1}, p95 {:.1}",
                us[us.len() / 2],
                us[us.len() * 95 / 100]
            );
        }
    }
    std::hint::black_box(&scratch);
    Ok(())
}
