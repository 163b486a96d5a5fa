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

/// `gemv_staged_m1`, the code predictor's one-row linear layers on the GPU's default path,
/// on the plans `linear::staged_plan` gives the 1.7B's shapes on the H200: QKV and the head
/// with the fused RMSNorm, O and down adding the residual, gate/up with the norm and
/// SwiGLU pairs; an odd shape on a smaller machine (a block whose last pair lacks its
/// partner, K not a multiple of 256, bias, SiLU); and a padding call (nothing written).
#[test]
fn staged_gemv_matches_the_reference() {
    let mut args = Vec::new();
    let mut case = |(n, k): (usize, usize), sms: usize, act: usize, flags: [bool; 3], valid| {
        let plan = tts_cuda::linear::staged_plan(n, k, sms)
            .unwrap_or_else(|| panic!("{n}x{k} on {sms} SMs fits"));
        let [norm, bias, res] = flags.map(usize::from);
        let fields = [
            n,
            k,
            plan.rows_per_block,
            plan.blocks,
            plan.smem,
            tts_cuda::linear::gemv_ksplit(n),
            act,
            norm,
            bias,
            res,
            valid,
        ];
        args.extend(fields.map(|v| v.to_string()));
    };
    let (norm, plain, residual) = ([true, false, false], [false; 3], [false, false, true]);
    case((4096, 1024), H200_SMS, 0, norm, 1);
    case((1024, 2048), H200_SMS, 0, residual, 1);
    case((6144, 1024), H200_SMS, 2, norm, 1);
    case((1024, 3072), H200_SMS, 0, residual, 1);
    case((2048, 1024), H200_SMS, 0, norm, 1);
    case((301, 264), 32, 1, [true, true, true], 1);
    case((1024, 2048), H200_SMS, 0, plain, 0);
    run_emulated(
        "staged_gemv_matches_the_reference",
        "gemv_staged.cpp",
        &["gemv_staged.cu"],
        &args,
    );
}

/// `fused_attention_short` (bf16 cache), `fused_attention_short_f32` and their `_group`
/// twins, the code predictor's attention (QK-norm + RoPE of the new tokens, their K and V
/// stored in the cache, attention over positions 0..pos), on the launches stack.rs makes
/// (grid (q heads, rows), or (kv heads, rows) by group, 128 threads, production row
/// strides) over the code predictor's cache of one position per code group: for the 1.7B's
/// code predictor (16 heads of 128 over 8 kv heads) one row of 1 token at a middle and at
/// the last position, step 0's rows of 2 tokens at positions 0-1, and several rows of
/// different slots and positions with a padding row (nothing written), some also writing
/// the O projection's split bf16 rows (`xb`); for a small stack (4 heads of 32 over 2,
/// padded row strides) and the demo's code predictor (2 heads of 16 over 1).
#[test]
fn short_attention_matches_the_reference() {
    use tts_model::config::{StackDims, NUM_CODE_GROUPS};
    let dims = |spec: &str| {
        let model = tts_model::builtin::load(spec)
            .unwrap_or_else(|e| panic!("{spec}: {e}"))
            .unwrap_or_else(|| panic!("{spec} is a built-in model"));
        model.config.talker.code_predictor.dims()
    };
    let (cp, demo) = (dims("random:1.7b"), dims("demo"));
    // The code predictor's cache: one position per code group (code_predictor.rs), which
    // stack.rs hands to the short kernels as it is at most SHORT_CACHE_POSITIONS (private
    // there; attention.cu's FA_SPOS) = 16.
    let max_pos = NUM_CODE_GROUPS;
    assert!(
        max_pos <= 16,
        "the code predictor's cache takes the short kernels"
    );
    // cache rows (the workspace's max_batch; rows index it directly)
    const CACHE_ROWS: usize = 4;
    // stack.rs launches every attention kernel with 128 threads (FA_ENTRY's launch bounds)
    const THREADS: usize = 128;
    let mut args = Vec::new();
    // `rows`: "slot:pos0,..." (slot -1: padding); `pad`: added to stack.rs's row strides
    let mut case = |d: &StackDims, kernel: &str, tpr: usize, rows: &str, xb: bool, pad: usize| {
        let grid_x = if kernel.contains("_group") {
            d.kv_heads
        } else {
            d.heads
        };
        let (qd, kvd) = (d.q_dim(), d.kv_dim());
        let fields = [
            grid_x,
            rows.split(',').count(),
            THREADS,
            d.heads,
            d.kv_heads,
            d.head_dim,
            qd + 2 * kvd + pad,
            qd + pad,
            max_pos,
            CACHE_ROWS,
            tpr,
        ];
        args.push(kernel.to_string());
        args.extend(fields.map(|v| v.to_string()));
        args.extend([
            d.rms_eps.to_string(),
            d.rope_theta.to_string(),
            usize::from(xb).to_string(),
            rows.to_string(),
        ]);
    };
    let (short, short_f32) = ("fused_attention_short", "fused_attention_short_f32");
    let (group, group_f32) = (
        "fused_attention_short_group",
        "fused_attention_short_group_f32",
    );
    case(&cp, short, 1, "1:7", false, 0);
    case(&cp, short, 1, "2:15", false, 0);
    case(&cp, short, 2, "0:0", false, 0);
    case(&cp, short, 2, "2:0,-1:0,0:0,3:0", true, 0);
    case(&cp, short, 1, "3:4,-1:4,1:15,0:9", true, 0);
    case(&cp, short_f32, 2, "2:0,-1:0,0:0", true, 0);
    case(&cp, short_f32, 1, "1:15,-1:15,2:7", false, 0);
    case(&cp, group, 2, "1:0,-1:0,3:0", true, 0);
    case(&cp, group, 1, "0:15,-1:15,2:6", false, 0);
    case(&cp, group_f32, 2, "3:0,-1:0", false, 0);
    case(&cp, group_f32, 1, "2:15,-1:15,0:3", true, 0);
    let small = StackDims {
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
        ..cp
    };
    case(&small, short, 2, "1:0,-1:0,2:0", true, 8);
    case(&small, short_f32, 1, "0:15,-1:15,3:10", false, 8);
    case(&small, group, 1, "2:15,-1:15,1:5", true, 8);
    case(&demo, short, 2, "0:0,-1:0", false, 0);
    case(&demo, group_f32, 1, "1:15,3:8,-1:8", true, 0);
    run_emulated(
        "short_attention_matches_the_reference",
        "attention_short.cpp",
        &["attention.cu"],
        &args,
    );
}

/// `row_attention` (bf16 cache) and `row_attention_f32`, the talker's decode attention for
/// small steps (one new token per row: QK-norm + RoPE, its K and V stored in the cache,
/// attention over positions 0..pos), and `row_attention_split` / `_f32`, the split attention
/// of prefills and merged steps (q already normed and rotated, every token's K and V already
/// cached: attention over positions lo..pos), on the launches stack.rs makes (grid (q heads,
/// tokens), 128 threads, production row strides, window 0) over the talker's cache of
/// `Limits::default().max_positions`: for the 1.7B's talker (16 heads of 128 over 8 kv heads,
/// so groups of 16 lanes, 8 positions at a time, chunks of 64) rows at the first position (no
/// cached one), at one cached position, at the end and one past the end of a chunk, at
/// middle and large positions and at the cache's last position, several rows of different
/// slots with a padding row (nothing written, nor cached); the split form's prefills (tokens
/// at consecutive positions of one slot, from 0 and across a chunk's end) merged with steps
/// and a padding row, and a sliding window (lo > 0, not a chunk's start; stack.rs passes 0);
/// some also writing the O projection's split bf16 rows (`xb`); for the demo's talker (4
/// heads of 16 over 2: groups of 2 lanes, chunks of 512, padded row strides) rows across its
/// chunk's end.
#[test]
fn row_attention_matches_the_reference() {
    use tts_model::config::StackDims;
    let dims = |spec: &str| {
        let model = tts_model::builtin::load(spec)
            .unwrap_or_else(|e| panic!("{spec}: {e}"))
            .unwrap_or_else(|| panic!("{spec} is a built-in model"));
        model.config.talker.dims()
    };
    let (talker, demo) = (dims("random:1.7b"), dims("demo"));
    // the talker's cache positions per slot (talker.rs: `ws.limits.max_positions`)
    let max_pos = tts_cuda::workspace::Limits::default().max_positions;
    // stack.rs takes row_attention for steps of at most this many rows
    let max_rows = tts_cuda::CudaOptions::default().row_attention_rows;
    // cache rows (slots)
    const CACHE_ROWS: usize = 4;
    // stack.rs launches the attention kernels with 128 threads (AR_THREADS)
    const THREADS: usize = 128;
    let mut args = Vec::new();
    // `tokens`: "slot:pos" per token, "slot:p0-p1" for positions p0..=p1 of one slot, slot
    // -1: padding; `pad`: added to stack.rs's row strides
    let mut case = |d: &StackDims, kernel: &str, tokens: &str, window: usize, xb: bool, pad| {
        let count: usize = tokens
            .split(',')
            .map(|t| {
                let pos = t.split_once(':').expect("slot:pos").1;
                match pos.split_once('-') {
                    Some((a, b)) => b.parse::<usize>().unwrap() + 1 - a.parse::<usize>().unwrap(),
                    None => 1,
                }
            })
            .sum();
        assert!(
            kernel.contains("_split") || count <= max_rows,
            "{kernel}: a step of {count} rows takes fused_attention"
        );
        let (qd, kvd) = (d.q_dim(), d.kv_dim());
        let fields = [
            d.heads,
            count,
            THREADS,
            d.heads,
            d.kv_heads,
            d.head_dim,
            qd + 2 * kvd + pad,
            qd + pad,
            max_pos,
            CACHE_ROWS,
            window,
        ];
        args.push(kernel.to_string());
        args.extend(fields.map(|v| v.to_string()));
        args.extend([
            d.rms_eps.to_string(),
            d.rope_theta.to_string(),
            usize::from(xb).to_string(),
            tokens.to_string(),
        ]);
    };
    let (row, row_f32) = ("row_attention", "row_attention_f32");
    let (split, split_f32) = ("row_attention_split", "row_attention_split_f32");
    case(&talker, row, "0:0", 0, false, 0);
    case(&talker, row, "1:64", 0, false, 0);
    case(&talker, row, "2:65,-1:65,0:137,3:1000", 0, true, 0);
    case(&talker, row_f32, "3:2047,0:1,-1:0,1:128", 0, true, 0);
    case(&talker, split, "2:60-67", 0, false, 0);
    case(&talker, split, "0:0-3,-1:0,3:1000,1:137", 0, true, 0);
    case(&talker, split_f32, "1:2045-2047,-1:9,2:64", 0, true, 0);
    case(&talker, split_f32, "0:98-101,3:300", 100, false, 0);
    case(&demo, row, "1:512,0:513,-1:0,2:3", 0, true, 8);
    case(&demo, split_f32, "3:509-514,-1:0", 0, true, 8);
    run_emulated(
        "row_attention_matches_the_reference",
        "attention_row.cpp",
        &["attention.cu", "attention_row.cu"],
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

/// `gemv.cu`'s bf16 entries as the backend picks them (`linear::gemv_choice`): the 1.7B
/// talker's one-row layers (QKV with the fused norm on `gemv_m1_pre`; O adding the residual
/// and writing the next layer's normed input and Σ y² partials, the norm chain's writer;
/// gate/up reading them, the chain's reader, SwiGLU pairs; down adding the residual), the
/// code predictor's O (ksplit 4), calls of 2, 3 (on `gemv_m4`, one padding row) and 7 rows
/// (on `gemv_m8`), and an odd shape with bias and SiLU.
#[test]
fn gemv_matches_the_reference() {
    let mut args = Vec::new();
    // (act, norm: 0 none, 1 fused, 2 chain reader, bias, res, chain writer)
    let mut case = |(n, k): (usize, usize), rows: usize, (act, norm, bias, res, writer)| {
        let (kernel, blocks) = tts_cuda::linear::gemv_choice(n, k, rows);
        let template = match kernel {
            "gemv_m2" => 2,
            "gemv_m4" => 4,
            "gemv_m8" => 8,
            _ => 1,
        };
        args.push(kernel.to_string());
        let fields = [
            template,
            n,
            k,
            blocks,
            tts_cuda::linear::gemv_ksplit(n),
            act,
            norm,
            bias,
            res,
            writer,
            rows,
        ];
        args.extend(fields.map(|v| v.to_string()));
    };
    let talker = (4096, 2048, 2048, 6144);
    case((talker.0, talker.1), 1, (0, 1, 0, 0, 0));
    case((talker.2, talker.1), 1, (0, 0, 0, 1, 1));
    case((2 * talker.3, talker.1), 1, (2, 2, 0, 0, 0));
    case((talker.2, talker.3), 1, (0, 0, 0, 1, 0));
    case((1024, 2048), 1, (0, 0, 0, 1, 0));
    case((1024, 1024), 2, (2, 1, 0, 0, 0));
    case((2048, 1024), 3, (0, 1, 0, 1, 0));
    case((512, 1024), 7, (0, 1, 0, 1, 0));
    case((301, 264), 1, (1, 1, 1, 1, 0));
    run_emulated(
        "gemv_matches_the_reference",
        "gemv.cpp",
        &["gemv.cu"],
        &args,
    );
}
