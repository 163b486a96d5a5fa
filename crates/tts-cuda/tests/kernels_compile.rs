//! Every kernel compiles with NVRTC for Hopper (sm_90a, what a 9.0 device loads: its
//! architecture-specific warpgroup MMA included). Needs only NVRTC, no GPU: CI gets
//! it from PyPI (`nvidia-cuda-nvrtc`, see `.ci/run`). Skips, saying so, when NVRTC is absent.
//! Also checks that every kernel the backend looks up at start-up is in the module and every
//! entry point of the module is looked up, and
//! that each kernel given more shared memory at start-up (`device::STAGED_SMEM`) can take
//! it beside its static shared memory.

/// Shared memory a block may take on sm_90 (static and dynamic together).
const MAX_BLOCK_SMEM: usize = 227 << 10;

mod common;

#[test]
fn kernels_compile_for_sm90a() {
    match tts_cuda::compile_kernels_with_report(&tts_cuda::compile::arch_name(9, 0)) {
        Ok((cubin, report)) => {
            let resources = tts_cuda::resources::parse_ptxas_report(&report);
            for &(name, limit) in tts_cuda::device::STAGED_SMEM {
                let r = resources
                    .iter()
                    .find(|r| r.entry && r.name == name)
                    .unwrap_or_else(|| panic!("{name} is not in ptxas' report"));
                assert!(
                    r.smem as usize + limit <= MAX_BLOCK_SMEM,
                    "{name}: {} B static + {limit} B dynamic shared memory exceed a block's",
                    r.smem
                );
            }
            assert!(
                cubin.len() > 10_000,
                "suspiciously small CUBIN ({} bytes)",
                cubin.len()
            );
            let looked: Vec<&str> = tts_cuda::device::looked_up_kernels()
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            // every entry point the module has is looked up (one that is not would never
            // launch: its group of kernels would be off at start-up)
            for r in resources.iter().filter(|r| r.entry) {
                assert!(
                    looked.contains(&r.name.as_str()),
                    "kernel {} is in the module but not looked up at start-up",
                    r.name
                );
            }
            // An extern "C" kernel's name sits in the CUBIN's symbol table as a
            // NUL-terminated string.
            for name in looked {
                let needle = [b"\0", name.as_bytes(), b"\0"].concat();
                assert!(
                    cubin.windows(needle.len()).any(|w| w == needle.as_slice()),
                    "kernel {name} is looked up at start-up but not in the module"
                );
            }
        }
        Err(tts_cuda::CudaError::Unavailable(why)) => {
            common::report_skip(&format!("kernels_compile_for_sm90a: {why}"));
        }
        Err(e) => panic!("{e}"),
    }
}
