//! Kernel sources and their compilation with NVRTC, cached on disk.
//!
//! All `.cu` files are compiled as one module (with `common.cuh` prepended) to a CUBIN for
//! the device's architecture. The cache key hashes the source, the options and the NVRTC
//! version; the cache lives in `$QWEN3_TTS_KERNEL_CACHE`, else `$XDG_CACHE_HOME/qwen3-tts`,
//! else `~/.cache/qwen3-tts`, else the system temp dir.

use std::ffi::{c_char, CString};
use std::path::PathBuf;

use cudarc::nvrtc;

use crate::error::CudaError;

/// Every kernel source file, in compilation order.
pub const SOURCES: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../kernels/common.cuh")),
    ("gemv.cu", include_str!("../kernels/gemv.cu")),
    ("gemv8_mma.cu", include_str!("../kernels/gemv8_mma.cu")),
    ("gemv_staged.cu", include_str!("../kernels/gemv_staged.cu")),
    ("mma.cu", include_str!("../kernels/mma.cu")),
    // after mma.cu: its fragments
    ("mma_staged.cu", include_str!("../kernels/mma_staged.cu")),
    ("wide.cu", include_str!("../kernels/wide.cu")),
    ("tile.cu", include_str!("../kernels/tile.cu")),
    // after tile.cu: its loads and pipeline prologue
    ("tile_wg.cu", include_str!("../kernels/tile_wg.cu")),
    ("mma_cluster.cu", include_str!("../kernels/mma_cluster.cu")),
    ("attention.cu", include_str!("../kernels/attention.cu")),
    // after attention.cu: its norm_rope, rope_angles and cache stores
    (
        "attention_row.cu",
        include_str!("../kernels/attention_row.cu"),
    ),
    ("embed.cu", include_str!("../kernels/embed.cu")),
    ("ops.cu", include_str!("../kernels/ops.cu")),
    ("sampling.cu", include_str!("../kernels/sampling.cu")),
    ("codec.cu", include_str!("../kernels/codec.cu")),
    ("codec_gemv.cu", include_str!("../kernels/codec_gemv.cu")),
    (
        "codec_gemv_mma.cu",
        include_str!("../kernels/codec_gemv_mma.cu"),
    ),
    ("codec_conv.cu", include_str!("../kernels/codec_conv.cu")),
    ("persistent.cu", include_str!("../kernels/persistent.cu")),
    // after persistent.cu: its grid barrier
    ("probe.cu", include_str!("../kernels/probe.cu")),
];

/// The whole kernel module as one translation unit.
pub fn module_source() -> String {
    let mut s = String::new();
    for (name, src) in SOURCES {
        s.push_str(&format!("// ---- {name}\n"));
        s.push_str(src);
        s.push('\n');
    }
    s
}

fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "-lineinfo".into(),
    ]
}

/// The NVRTC target for a device of compute capability `maj.min`: `sm_90a` on Hopper (its
/// architecture-specific features, the warpgroup MMA of `tile_wg.cu`, need it; the CUBIN
/// then runs on 9.0 devices only, which is what it is built for), else `sm_{maj}{min}`.
pub fn arch_name(maj: i32, min: i32) -> String {
    if (maj, min) == (9, 0) {
        "sm_90a".into()
    } else {
        format!("sm_{maj}{min}")
    }
}

/// NVRTC's version, e.g. (13, 0).
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut a, mut b) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through valid pointers.
    unsafe { nvrtc::sys::nvrtcVersion(&mut a, &mut b) }
        .result()
        .map_err(|e| CudaError::Compile(format!("{e:?}")))?;
    Ok((a, b))
}

/// A compiled NVRTC program, destroyed when dropped.
struct Program(nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: destroying the program `compile` created, once.
        let _ = unsafe { nvrtc::result::destroy_program(self.0) };
    }
}

impl Program {
    /// NVRTC's log of the compilation (warnings, errors, ptxas' report when asked for).
    fn log(&self) -> String {
        // SAFETY: reading the log of a live program.
        let log = unsafe { nvrtc::result::get_program_log(self.0) }.unwrap_or_default();
        let log: Vec<u8> = log
            .iter()
            .map(|&c| c as u8)
            .take_while(|&c| c != 0)
            .collect();
        String::from_utf8_lossy(&log).into_owned()
    }
}

/// Compiles `src` with `opts`; a failure carries NVRTC's log.
fn compile(src: &str, opts: &[String]) -> Result<Program, CudaError> {
    let csrc = CString::new(src).map_err(|e| CudaError::Compile(e.to_string()))?;
    let prog = Program(
        nvrtc::result::create_program(&csrc, None)
            .map_err(|e| CudaError::Compile(format!("{e:?}")))?,
    );
    // SAFETY: `prog` is a live program; options are valid strings.
    let r = unsafe { nvrtc::result::compile_program(prog.0, opts) };
    match r {
        Ok(()) => Ok(prog),
        Err(err) => Err(CudaError::Compile(format!("{err:?}\n{}", prog.log()))),
    }
}

/// Compiles `src` to a CUBIN for `arch` (e.g. `sm_90`).
pub fn compile_cubin(src: &str, arch: &str) -> Result<Vec<u8>, CudaError> {
    cubin_of(&compile(src, &options(arch))?)
}

/// [`compile_cubin`] with ptxas' resource report (`-v`, see [`crate::resources`]).
pub fn compile_cubin_with_report(src: &str, arch: &str) -> Result<(Vec<u8>, String), CudaError> {
    let mut opts = options(arch);
    opts.push("--ptxas-options=-v".into());
    let prog = compile(src, &opts)?;
    Ok((cubin_of(&prog)?, prog.log()))
}

fn cubin_of(prog: &Program) -> Result<Vec<u8>, CudaError> {
    let mut size = 0usize;
    // SAFETY: querying the CUBIN size of a compiled program.
    unsafe { nvrtc::sys::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(|e| CudaError::Compile(format!("{e:?}")))?;
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` has exactly the size NVRTC reported.
    unsafe { nvrtc::sys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(|e| CudaError::Compile(format!("{e:?}")))?;
    Ok(buf)
}

/// Compiles `src` for `arch` with the module's options and ptxas' resource report
/// (`-v`), and returns that report (see [`crate::resources`]).
pub fn ptxas_report(src: &str, arch: &str) -> Result<String, CudaError> {
    let mut opts = options(arch);
    opts.push("--ptxas-options=-v".into());
    Ok(compile(src, &opts)?.log())
}

fn cache_dir() -> PathBuf {
    if let Ok(d) = std::env::var("QWEN3_TTS_KERNEL_CACHE") {
        return PathBuf::from(d);
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("qwen3-tts");
    }
    if let Ok(h) = std::env::var("HOME") {
        return PathBuf::from(h).join(".cache/qwen3-tts");
    }
    std::env::temp_dir().join("qwen3-tts")
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The kernel module's CUBIN for `arch`, from the disk cache or freshly compiled.
pub fn module_cubin(arch: &str) -> Result<Vec<u8>, CudaError> {
    let src = module_source();
    let (maj, min) = nvrtc_version()?;
    let key = fnv(format!("{src}\n{:?}\n{maj}.{min}", options(arch)).as_bytes());
    let path = cache_dir().join(format!("kernels-{arch}-{key:016x}.cubin"));
    if let Ok(bytes) = std::fs::read(&path) {
        if !bytes.is_empty() {
            return Ok(bytes);
        }
    }
    let t = std::time::Instant::now();
    let cubin = compile_cubin(&src, arch)?;
    tracing::info!(
        arch,
        ms = t.elapsed().as_millis() as u64,
        "compiled CUDA kernels with NVRTC"
    );
    if std::fs::create_dir_all(cache_dir()).is_ok() {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &cubin).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(cubin)
}
