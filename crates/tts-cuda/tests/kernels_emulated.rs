//! Kernels run on the CPU (`tests/emu/emu.hpp`: each CUDA thread a fiber, each block an OS
//! thread) and checked against f64 references, so a kernel's indexing, barriers and
//! cross-block sums are tested on a machine without a GPU, on the launch plans the backend
//! computes, with misaligned vector accesses and fixed-array overruns trapped (UBSan).
//! This checks logic, not speed or memory ordering: `gpu_parity` checks the same kernels
//! on the device. Needs a C++17 compiler (`$CXX`, else `c++`); skips, saying so,
//! without one.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use tts_cuda::compile::SOURCES;

/// The H200's multiprocessors: the plans the backend makes there.
const H200_SMS: usize = 132;

fn emu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emu")
}

/// A kernel source as C++: the `asm` statements of PDL and prefetches become no-ops, every
/// other one a call that stops the run if it is reached (common.cuh's PTX helpers that
/// matter have emulated twins in emu.hpp), and each `extern __shared__` array becomes a
/// pointer to the launch's dynamic shared memory.
fn as_cpp(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let harmless = line.contains("griddepcontrol.") || line.contains("prefetch.global");
        let asm = if harmless { "EMU_ASM_NOP(" } else { "EMU_ASM(" };
        let line = line.replace("asm volatile(", asm).replace("asm(", asm);
        match line.find("extern __shared__") {
            Some(at) => out.push_str(&dynamic_shared(&line, at)),
            None => out.push_str(&line),
        }
        out.push('\n');
    }
    out
}

/// `extern __shared__ [__align__(n)] T name[];` as `T* name = (T*)emu::dynamic_smem();`.
fn dynamic_shared(line: &str, at: usize) -> String {
    let decl = line[at + "extern __shared__".len()..].trim();
    let decl = decl
        .strip_suffix("[];")
        .unwrap_or_else(|| panic!("unexpected dynamic shared declaration: {line}"));
    let decl = match decl.strip_prefix("__align__(") {
        Some(rest) => rest.split_once(')').expect("__align__(n)").1.trim(),
        None => decl,
    };
    let (ty, name) = decl.rsplit_once(' ').expect("a type and a name");
    format!("{}{ty}* {name} = ({ty}*)emu::dynamic_smem();", &line[..at])
}

fn compiler() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let found = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    found.then_some(cxx)
}

/// Builds `driver` (in tests/emu) with the kernel files `files` (common.cuh first, in the
/// module's order), runs it with `args` and asserts that every check passed. Skips without
/// a compiler.
fn run_emulated(test: &str, driver: &str, files: &[&str], args: &[String]) {
    let Some(cxx) = compiler() else {
        common::report_skip(&format!("{test}: no C++ compiler (set CXX or install g++)"));
        return;
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("emu");
    std::fs::create_dir_all(&dir).expect("target dir");
    let emu = emu_dir();
    let mut unit = format!(
        "#include \"{}\"\n#include \"{}\"\n",
        emu.join("emu.hpp").display(),
        emu.join("check.hpp").display()
    );
    for (name, src) in SOURCES {
        if *name == "common.cuh" || files.contains(name) {
            unit.push_str(&format!("// ---- {name}\n{}", as_cpp(src)));
        }
    }
    for f in files {
        assert!(
            SOURCES.iter().any(|(n, _)| n == f),
            "{f} is not a kernel source"
        );
    }
    unit.push_str(&format!("#include \"{}\"\n", emu.join(driver).display()));
    let stem = driver.trim_end_matches(".cpp");
    let cpp = dir.join(format!("{stem}.cpp"));
    let exe = dir.join(stem);
    std::fs::write(&cpp, unit).expect("write the unit");
    let built = Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-pthread", "-w"])
        // misaligned vector loads and stores, and indexes past a fixed array's end, stop
        // the run (as a misaligned access faults on the GPU)
        .args([
            "-fsanitize=alignment,bounds",
            "-fno-sanitize-recover=all",
            "-o",
        ])
        .arg(&exe)
        .arg(&cpp)
        .output()
        .expect("run the compiler");
    assert!(
        built.status.success(),
        "{test}: {cxx} failed on {}:\n{}",
        cpp.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe)
        .args(args)
        .output()
        .expect("run the driver");
    let stdout = String::from_utf8_lossy(&run.stdout);
    println!("{stdout}");
    assert!(
        run.status.success() && stdout.contains("ok  ") && !stdout.contains("FAIL"),
        "{test}: the emulated kernels failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
}

/// `mlp_fused_m1` and the stream kernels on the plans of the code predictor's MLP (1024 ×
/// 3072, also the 0.6B talker's: staged, or streamed with its gate/up rows asked into L2)
/// and the 1.7B talker's (2048 × 6144, streamed), and on a smaller machine's plan (fewer,
/// wider slices).
#[test]
fn fused_mlp_kernels_match_the_reference() {
    let mut args = Vec::new();
    let mut case = |hidden: usize, inter: usize, sms: usize, staged: bool| {
        let plan = tts_cuda::linear::fused_mlp_plan(hidden, inter, sms, staged)
            .unwrap_or_else(|| panic!("{hidden}x{inter} on {sms} SMs fits"));
        let (kernel, prefetch) = plan.kernel(hidden);
        args.extend([
            kernel.to_string(),
            hidden.to_string(),
            inter.to_string(),
            plan.cols_per_block.to_string(),
            plan.smem.to_string(),
            u8::from(prefetch).to_string(),
        ]);
    };
    case(1024, 3072, H200_SMS, true);
    case(1024, 3072, H200_SMS, false);
    case(2048, 6144, H200_SMS, false);
    case(512, 1536, 32, true);
    run_emulated(
        "fused_mlp_kernels_match_the_reference",
        "mlp_fused.cpp",
        &["mlp_fused.cu"],
        &args,
    );
}

/// `attention_o_m1` (bf16 cache) and `attention_o_m1_f32` on the plan of the 1.7B code
/// predictor (16 heads of 128 over 8 kv heads, 1024 wide: 8 chunks of 128 O rows) at 1 and
/// 3 rows (the second padding), and on a small stack's (4 heads of 32 over 2, 256 wide).
#[test]
fn attention_o_kernels_match_the_reference() {
    let mut args = Vec::new();
    let mut case =
        |kv: &str, (heads, kvh, hd, hidden): (usize, usize, usize, usize), rows: usize| {
            let plan = tts_cuda::stack::attention_o_plan(hidden, heads, hd, H200_SMS)
                .unwrap_or_else(|| panic!("{heads}x{hd} -> {hidden} fits"));
            args.extend([
                kv.to_string(),
                heads.to_string(),
                kvh.to_string(),
                hd.to_string(),
                hidden.to_string(),
                plan.chunks.to_string(),
                plan.rows.to_string(),
                plan.smem.to_string(),
                rows.to_string(),
            ]);
        };
    case("bf16", (16, 8, 128, 1024), 1);
    case("bf16", (16, 8, 128, 1024), 3);
    case("f32", (16, 8, 128, 1024), 3);
    case("bf16", (4, 2, 32, 256), 4);
    run_emulated(
        "attention_o_kernels_match_the_reference",
        "attention_o.cpp",
        &["attention.cu", "attention_o.cu"],
        &args,
    );
}

/// The one-row attention halves on the backend's plans: `qkv_attention_o_m1` (bf16 cache)
/// and `_f32` for the 1.7B code predictor (16 heads of 128 over 8 kv heads, 1024 wide:
/// clusters of 8 blocks of 48 QKV rows) at the first and the last held position and for a
/// padding row, and for a small stack (4 heads of 32 over 2, 256 wide);
/// `qkv_attention_o_long_m1` and `_f32` for the 1.7B talker (2048 wide) over a 300-position
/// cache: at the first position (one block's share), past the cluster's first tile of
/// shares, at the last, and for a padding row; and for a 512-wide stack.
#[test]
fn qkv_attention_o_kernels_match_the_reference() {
    use tts_cuda::stack::HalfKind;
    let mut args = Vec::new();
    let mut case = |kind: HalfKind,
                    kv: &str,
                    (heads, kvh, hd, hidden): (usize, usize, usize, usize),
                    (slot, pos, max_pos): (i32, usize, usize)| {
        let plan = tts_cuda::stack::qkv_attention_o_plan(kind, hidden, (heads, kvh, hd))
            .unwrap_or_else(|| panic!("{kind:?} {heads}x{hd} -> {hidden} fits"));
        let kind = if kind == HalfKind::Long {
            "long"
        } else {
            "short"
        };
        args.extend([
            kind.to_string(),
            kv.to_string(),
            heads.to_string(),
            kvh.to_string(),
            hd.to_string(),
            hidden.to_string(),
            plan.smem.to_string(),
            slot.to_string(),
            pos.to_string(),
            max_pos.to_string(),
        ]);
    };
    let (cp, talker) = ((16, 8, 128, 1024), (16, 8, 128, 2048));
    case(HalfKind::Short, "bf16", cp, (2, 6, 16));
    case(HalfKind::Short, "bf16", cp, (0, 15, 16));
    case(HalfKind::Short, "f32", cp, (1, 0, 16));
    case(HalfKind::Short, "bf16", cp, (-1, 3, 16));
    case(HalfKind::Short, "bf16", (4, 2, 32, 256), (1, 9, 16));
    case(HalfKind::Long, "bf16", talker, (1, 0, 300));
    case(HalfKind::Long, "bf16", talker, (2, 137, 300));
    case(HalfKind::Long, "f32", talker, (0, 299, 300));
    case(HalfKind::Long, "bf16", talker, (-1, 40, 300));
    case(HalfKind::Long, "bf16", (4, 2, 128, 512), (1, 21, 64));
    run_emulated(
        "qkv_attention_o_kernels_match_the_reference",
        "qkv_attention_o.cpp",
        &[
            "mlp_fused.cu",
            "attention.cu",
            "attention_o.cu",
            "qkv_attention_o.cu",
            "qkv_attention_o_long.cu",
        ],
        &args,
    );
}

/// `head_sample_cp_m1` on the plan of the 1.7B code predictor's heads (2048 × 1024: 128
/// blocks of 16 rows) and of an odd shape (300 × 256: 100 blocks of 3), greedy and
/// sampled, at a middle step (the next step's rows written) and the last, and for a
/// padding row: its logits against an f64 reference, its choice and writes against
/// `sample_cp` on the same logits.
#[test]
fn head_sample_kernel_matches_the_separate_sampler() {
    let mut args = Vec::new();
    let mut case = |(vocab, hidden): (usize, usize), step: usize, sample: bool, slot: i32| {
        let plan = tts_cuda::head_sample::head_sample_plan(vocab, hidden, H200_SMS)
            .unwrap_or_else(|| panic!("{vocab}x{hidden} fits"));
        args.extend([
            vocab.to_string(),
            hidden.to_string(),
            plan.rows_per_block.to_string(),
            plan.smem.to_string(),
            step.to_string(),
            u8::from(sample).to_string(),
            slot.to_string(),
        ]);
    };
    let cp = (2048, 1024);
    case(cp, 3, false, 1);
    case(cp, 3, true, 1);
    case(cp, 15, true, 0);
    case(cp, 7, true, -1);
    case((300, 256), 2, true, 1);
    run_emulated(
        "head_sample_kernel_matches_the_separate_sampler",
        "head_sample.cpp",
        &["mlp_fused.cu", "sampling.cu", "head_sample.cu"],
        &args,
    );
}

/// The emulator itself: barriers with reductions, early exits, warp exchanges, clusters.
#[test]
fn the_emulator_runs_known_kernels() {
    run_emulated("the_emulator_runs_known_kernels", "selftest.cpp", &[], &[]);
}

/// The rewriting of kernel sources into C++.
#[test]
fn sources_become_cpp() {
    assert_eq!(
        as_cpp("    extern __shared__ __align__(16) unsigned char s_w[];"),
        "    unsigned char* s_w = (unsigned char*)emu::dynamic_smem();\n"
    );
    assert_eq!(
        as_cpp("extern __shared__ float fin_sm[];"),
        "float* fin_sm = (float*)emu::dynamic_smem();\n"
    );
    assert_eq!(
        as_cpp("asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");"),
        "EMU_ASM_NOP(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    );
    assert_eq!(
        as_cpp("    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));"),
        "    EMU_ASM(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
    );
}
