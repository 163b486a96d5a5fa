//! Per-kernel tables of the last code-predictor call, talker step and codec pass in Nsight
//! Compute CSV files written by `bench/ncu-stages.sh` (one per batch size).
//! `cargo run -p tts-bench --example ncu_stages -- ncu_b32.csv ncu_b1.csv`

use tts_bench::ncu::{
    last_code_predictor_call, last_codec_pass, last_talker_step, parse, KernelTable,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        return Err("usage: ncu_stages FILE.csv [...] (ncu --csv over bench-stages)".into());
    }
    for path in &files {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let kernels = parse(&text).map_err(|e| format!("{path}: {e}"))?;
        println!("{path}: {} kernel launches", kernels.len());
        match last_code_predictor_call(&kernels) {
            Some(call) => print!("code predictor (last call): {}", KernelTable::of(call)),
            None => println!("code predictor: no complete call"),
        }
        match last_talker_step(&kernels) {
            Some(step) => print!("talker step (last): {}", KernelTable::of(step)),
            None => println!("talker step: none"),
        }
        match last_codec_pass(&kernels) {
            Some(pass) => print!("codec pass (last): {}", KernelTable::of(pass)),
            None => println!("codec pass: none"),
        }
        println!();
    }
    Ok(())
}
