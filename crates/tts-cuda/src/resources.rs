//! What each compiled kernel takes of a multiprocessor (registers per thread, static shared
//! memory, stack, register spills), read from ptxas' report (`compile::ptxas_report`).
//! Whether two kernels of a chain can sit side by side on a multiprocessor, or whether a
//! change made a kernel spill, is then answered without a GPU:
//! `cargo run --release -p tts-cuda --example kernel_resources -- sm_90a`.

/// One function's resources as ptxas reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// The function's name (a kernel's `extern "C"` name, or a device function's mangled one).
    pub name: String,
    /// Whether it is a kernel (`Compiling entry function`), not a device function.
    pub entry: bool,
    /// Registers per thread (kernels only; 0 for device functions).
    pub registers: u32,
    /// Static shared memory per block, bytes (kernels only).
    pub smem: u32,
    /// Stack frame, bytes.
    pub stack: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// The number right before `phrase` in `line` (392 for "392 bytes spill stores").
fn number_before(line: &str, phrase: &str) -> Option<u32> {
    let at = line.find(phrase)?;
    line[..at]
        .split([' ', ','])
        .rfind(|w| !w.is_empty())?
        .parse()
        .ok()
}

/// The text between the first pair of single quotes, or the last word.
fn function_name(line: &str) -> String {
    let mut quoted = line.split('\'');
    match (quoted.next(), quoted.next()) {
        (Some(_), Some(name)) => name.to_string(),
        _ => line
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_string(),
    }
}

/// Every function of a ptxas `-v` report, in the report's order.
pub fn parse_ptxas_report(report: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    let mut entry_next = false;
    for line in report.lines() {
        if line.contains("Compiling entry function") {
            entry_next = true;
        } else if line.contains("Function properties for") {
            out.push(KernelResources {
                name: function_name(line),
                entry: std::mem::take(&mut entry_next),
                ..Default::default()
            });
        } else if let Some(f) = out.last_mut() {
            if line.contains("bytes stack frame") {
                f.stack = number_before(line, "bytes stack frame").unwrap_or(0);
                f.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
                f.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("registers") {
                f.registers = number_before(line, "registers").unwrap_or(0);
                f.smem = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{parse_ptxas_report, KernelResources};

    /// A report as NVRTC 13.0 writes it (sm_90): a device function that spills, then two
    /// kernels, one with a stack frame.
    #[test]
    fn reads_registers_shared_memory_and_spills() {
        let report = "\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z12cp_loop_bodyIfEvPKyi
ptxas         .     0 bytes stack frame, 392 bytes spill stores, 956 bytes spill loads
ptxas info    : Compiling entry function 'gemv_staged_m1' for 'sm_90'
ptxas info    : Function properties for gemv_staged_m1
ptxas         .     32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 62 registers, used 1 barriers, 32 bytes cumulative stack size, 1280 bytes smem
ptxas info    : Compiling entry function 'gemv_m2' for 'sm_90'
ptxas info    : Function properties for gemv_m2
ptxas         .     16 bytes stack frame, 16 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 80 registers, used 1 barriers, 16 bytes cumulative stack size
";
        let got = parse_ptxas_report(report);
        let want = [
            KernelResources {
                name: "_Z12cp_loop_bodyIfEvPKyi".into(),
                entry: false,
                registers: 0,
                smem: 0,
                stack: 0,
                spill_stores: 392,
                spill_loads: 956,
            },
            KernelResources {
                name: "gemv_staged_m1".into(),
                entry: true,
                registers: 62,
                smem: 1280,
                stack: 32,
                spill_stores: 0,
                spill_loads: 0,
            },
            KernelResources {
                name: "gemv_m2".into(),
                entry: true,
                registers: 80,
                smem: 0,
                stack: 16,
                spill_stores: 16,
                spill_loads: 20,
            },
        ];
        assert_eq!(got, want);
    }
}
