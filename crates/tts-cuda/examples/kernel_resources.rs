//! Prints what each kernel of the module takes of a multiprocessor (registers per thread,
//! static shared memory, stack, spills), from ptxas' report, without a GPU (only NVRTC):
//! `cargo run --release -p tts-cuda --example kernel_resources -- sm_90a [name-prefix]`.
//! With 65,536 registers per H200 multiprocessor, a block of 256 threads at R registers
//! leaves room for 65536 / (256 * R) blocks; dynamic shared memory comes on top of the
//! static figure here (see `linear.rs` for each kernel's).

fn main() -> Result<(), tts_cuda::CudaError> {
    let mut args = std::env::args().skip(1);
    let arch = args.next().unwrap_or_else(|| "sm_90a".into());
    let prefix = args.next().unwrap_or_default();
    tts_cuda::libs::preload();
    let src = tts_cuda::compile::module_source();
    let report = tts_cuda::compile::ptxas_report(&src, &arch)?;
    let mut rows = tts_cuda::resources::parse_ptxas_report(&report);
    rows.retain(|r| r.name.starts_with(&prefix));
    rows.sort_by(|a, b| (!a.entry, &a.name).cmp(&(!b.entry, &b.name)));
    println!(
        "{:<40} {:>5} {:>8} {:>6} {:>7} {:>7}",
        "function", "regs", "smem B", "stack", "spill>", "spill<"
    );
    for r in &rows {
        let name = if r.entry {
            r.name.clone()
        } else {
            format!("{} (device)", r.name)
        };
        println!(
            "{name:<40} {:>5} {:>8} {:>6} {:>7} {:>7}",
            r.registers, r.smem, r.stack, r.spill_stores, r.spill_loads
        );
    }
    let spilling = rows.iter().filter(|r| r.spill_stores > 0).count();
    println!("{} functions, {spilling} with spills", rows.len());
    // ptxas' performance warnings (e.g. serialized warpgroup MMA), whatever the prefix
    for line in report.lines().filter(|l| l.contains("Performance")) {
        println!("{line}");
    }
    Ok(())
}
