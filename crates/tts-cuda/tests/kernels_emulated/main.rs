//! Kernels run on the CPU (`tests/emu/emu.hpp`: each CUDA thread a fiber, each block an OS
//! thread) and checked against f64 references, so a kernel's indexing, barriers and
//! cross-block sums are tested on a machine without a GPU, on the launch plans the backend
//! computes, with misaligned vector accesses and fixed-array overruns trapped (UBSan).
//! This checks logic, not speed or memory ordering: `gpu_parity` checks the same kernels
//! on the device. Needs a C++17 compiler (`$CXX`, else `c++`); skips, saying so,
//! without one.

#[path = "../common/mod.rs"]
mod common;

mod attention;
mod batched;
mod codec;
mod conv;
mod fp8;
mod linear;
mod mma;
mod prefill;
mod sampling;
mod small;
mod tile;
mod tile_wg;

use std::path::{Path, PathBuf};
use std::process::Command;

use tts_cuda::compile::SOURCES;

/// The H200's multiprocessors: the plans the backend makes there.
const H200_SMS: usize = 132;

fn emu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emu")
}

/// A kernel source as C++: the `asm` statements of PDL and prefetches become no-ops, every
/// other one a call that stops the run if it is reached, unless it only closes or waits for
/// groups of cp.async copies (which complete when issued here); the PTX helpers that matter
/// (f16 conversions, cp.async, ldmatrix and mma.sync, wgmma) have emulated twins in
/// cuda_names.hpp, mma_twins.hpp and wgmma_twins.hpp. Each `extern __shared__` array becomes
/// a pointer to the launch's dynamic shared memory. Architecture sections are left as they
/// are (see [`unit_source`]).
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

/// Kernel sources whose sm_90a sections the emulator compiles (every PTX helper in them has
/// a twin): tile.cu's `#if __CUDA_ARCH__ >= 900` helpers, tile_wg.cu's
/// `#if defined(__CUDA_ARCH_FEAT_SM90_ALL)` wgmma code, wide.cu's K split over a cluster
/// and mma_cluster.cu (cluster_twins.hpp). The unit defines `__CUDA_ARCH__`
/// (900) and `__CUDA_ARCH_FEAT_SM90_ALL` around these files only, so the arch sections of
/// common.cuh (whose helpers cuda_names.hpp replaces) and of the other files stay off.
const SM90A_SOURCES: &[&str] = &["tile.cu", "tile_wg.cu", "wide.cu", "mma_cluster.cu"];

/// Kernel file `name` as the unit's C++: [`as_cpp`], between the sm_90a macros for
/// [`SM90A_SOURCES`].
fn unit_source(name: &str, src: &str) -> String {
    let cpp = as_cpp(src);
    if !SM90A_SOURCES.contains(&name) {
        return cpp;
    }
    format!(
        "#define __CUDA_ARCH__ 900\n#define __CUDA_ARCH_FEAT_SM90_ALL 1\n{cpp}\
         #undef __CUDA_ARCH__\n#undef __CUDA_ARCH_FEAT_SM90_ALL\n"
    )
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

/// The folder of the emulator's builds and the tests' input files (created).
fn work_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("emu");
    std::fs::create_dir_all(&dir).expect("target dir");
    dir
}

/// A test's input file `name` holding `bytes`, beside the emulator's builds.
pub(crate) fn input_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = work_dir().join(name);
    std::fs::write(&path, bytes).expect("write an input file");
    path
}

/// Builds `driver` (in tests/emu) with the kernel files `files` (common.cuh first, in the
/// module's order), runs it with `args` and asserts that every check passed; returns its
/// stdout. Skips (None) without a compiler.
fn run_emulated(test: &str, driver: &str, files: &[&str], args: &[String]) -> Option<String> {
    let Some(cxx) = compiler() else {
        common::report_skip(&format!("{test}: no C++ compiler (set CXX or install g++)"));
        return None;
    };
    let dir = work_dir();
    let emu = emu_dir();
    let mut unit = format!(
        "#include \"{}\"\n#include \"{}\"\n",
        emu.join("emu.hpp").display(),
        emu.join("check.hpp").display()
    );
    for (name, src) in SOURCES {
        if *name == "common.cuh" || files.contains(name) {
            unit.push_str(&format!("// ---- {name}\n{}", unit_source(name, src)));
        }
    }
    for f in files {
        assert!(
            SOURCES.iter().any(|(n, _)| n == f),
            "{f} is not a kernel source"
        );
    }
    unit.push_str(&format!("#include \"{}\"\n", emu.join(driver).display()));
    // named for the test, not the driver: tests sharing a driver run at once, and one must
    // not rewrite the executable another is running ("Text file busy")
    let cpp = dir.join(format!("{test}.cpp"));
    let exe = dir.join(test);
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
    Some(stdout.into_owned())
}

/// The emulator itself: barriers with reductions, early exits, warp exchanges, clusters.
#[test]
fn the_emulator_runs_known_kernels() {
    run_emulated("the_emulator_runs_known_kernels", "selftest.cpp", &[], &[]);
}

/// common.cuh's stand-ins with the same bits as their plainer forms: `warp_sum3` against
/// three `warp_sum`s, `div_by_count` against the division.
#[test]
fn common_helpers_keep_the_bits_of_their_plain_forms() {
    run_emulated(
        "common_helpers_keep_the_bits_of_their_plain_forms",
        "common_helpers.cpp",
        &[],
        &[],
    );
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
    // the sm_90a macros around tile_wg.cu only
    assert_eq!(
        unit_source("tile_wg.cu", "int x;"),
        "#define __CUDA_ARCH__ 900\n#define __CUDA_ARCH_FEAT_SM90_ALL 1\nint x;\n\
         #undef __CUDA_ARCH__\n#undef __CUDA_ARCH_FEAT_SM90_ALL\n"
    );
    assert_eq!(unit_source("gemv.cu", "int x;"), "int x;\n");
}
