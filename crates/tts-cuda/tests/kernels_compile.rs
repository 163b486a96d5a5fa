//! Every kernel compiles with NVRTC for Hopper (sm_90a, what a 9.0 device loads: its
//! architecture-specific warpgroup MMA included). Needs only NVRTC, no GPU: CI gets
//! it from PyPI (`nvidia-cuda-nvrtc`, see `.ci/run`). Skips, saying so, when NVRTC is absent.
//! Also checks that every kernel the backend looks up at start-up is in the module, and
//! that each kernel given more shared memory at start-up (`device::STAGED_SMEM`) can take
//! it beside its static shared memory; and (no NVRTC needed) that the fused kernels'
//! plans for the release shapes stay within what start-up gives them.

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
            // An extern "C" kernel's name sits in the CUBIN's symbol table as a
            // NUL-terminated string.
            let names = tts_cuda::device::KERNELS
                .iter()
                .chain(tts_cuda::device::CLUSTER_KERNELS)
                .chain(tts_cuda::codec::KERNELS)
                .chain(tts_cuda::codec::PDL_KERNELS)
                .chain(tts_cuda::device::PERSISTENT_KERNELS)
                .chain(tts_cuda::linear::TILE_KERNELS.iter().map(|(k, _)| k))
                .chain(tts_cuda::linear::TILE_WG_KERNELS.iter().map(|(k, _)| k));
            for name in names {
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

/// The fused kernels' plans for the release shapes (the 1.7B's code predictor and talker
/// on the H200's 132 multiprocessors) ask for no more dynamic shared memory than start-up
/// lets each kernel take (`device::STAGED_SMEM`).
#[test]
fn fused_plans_fit_their_shared_memory_allowance() {
    use tts_cuda::stack::HalfKind;
    let allowance = |name: &str| {
        tts_cuda::device::STAGED_SMEM
            .iter()
            .find(|(k, _)| *k == name)
            .map(|&(_, bytes)| bytes)
            .unwrap_or_else(|| panic!("{name} is not given shared memory at start-up"))
    };
    let sms = 132;
    let (cp, talker) = ((1024, 16, 8, 128, 3072), (2048, 16, 8, 128, 6144));
    let mlp = tts_cuda::linear::fused_mlp_plan(cp.0, cp.4, sms, true).expect("fits");
    let ao = tts_cuda::stack::attention_o_plan(cp.0, cp.1, cp.3, sms).expect("fits");
    let short = tts_cuda::stack::qkv_attention_o_plan(HalfKind::Short, cp.0, (cp.1, cp.2, cp.3));
    let long = tts_cuda::stack::qkv_attention_o_plan(
        HalfKind::Long,
        talker.0,
        (talker.1, talker.2, talker.3),
    );
    let head = tts_cuda::head_sample::head_sample_plan(2048, cp.0, sms).expect("fits");
    let plans = [
        ("mlp_fused_m1", mlp.smem),
        ("attention_o_m1", ao.smem),
        ("attention_o_m1_f32", ao.smem),
        ("qkv_attention_o_m1", short.expect("fits").smem),
        ("qkv_attention_o_m1_f32", short.expect("fits").smem),
        ("qkv_attention_o_long_m1", long.expect("fits").smem),
        ("qkv_attention_o_long_m1_f32", long.expect("fits").smem),
        ("head_sample_cp_m1", head.smem),
    ];
    for (name, bytes) in plans {
        assert!(
            bytes <= allowance(name),
            "{name}: its plan takes {bytes} B, start-up allows {}",
            allowance(name)
        );
    }
    // the streamed MLP takes its normed row only: within what any launch gets
    let stream = tts_cuda::linear::fused_mlp_plan(talker.0, talker.4, sms, false).expect("fits");
    assert!(!stream.staged && stream.smem == talker.0 * 4 && stream.smem <= 40 << 10);
}
