//! Finding and pre-loading the CUDA libraries.
//!
//! cudarc (with `dynamic-loading`) opens `libcuda.so`, `libcublas.so.13`, `libnvrtc.so.13`,
//! ... by bare name, so only the loader's search path counts. We search the usual places
//! ourselves and `dlopen` each library by absolute path with `RTLD_GLOBAL`; glibc then
//! resolves cudarc's later bare-name `dlopen` to the object already loaded (same soname).
//!
//! Search order: `$QWEN3_TTS_CUDA_LIB_DIRS` (colon-separated), `$LD_LIBRARY_PATH`,
//! `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`, `/usr/local/cuda/targets/x86_64-linux/lib`,
//! `/usr/local/nvidia/lib64`, `/usr/lib/x86_64-linux-gnu`. The driver (`libcuda.so.1`) is
//! first tried through the normal loader search.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// Which libraries were found, and where.
#[derive(Debug, Clone, Default)]
pub struct LibReport {
    pub driver: Option<String>,
    pub cublas: Option<String>,
    pub cublaslt: Option<String>,
    pub nvrtc: Option<String>,
    pub notes: Vec<String>,
}

fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut push = |p: PathBuf| {
        if p.is_dir() && !dirs.contains(&p) {
            dirs.push(p);
        }
    };
    for var in ["QWEN3_TTS_CUDA_LIB_DIRS", "LD_LIBRARY_PATH"] {
        if let Ok(s) = std::env::var(var) {
            for p in s.split(':').filter(|p| !p.is_empty()) {
                push(PathBuf::from(p));
            }
        }
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(s) = std::env::var(var) {
            push(Path::new(&s).join("lib64"));
            push(Path::new(&s).join("lib"));
        }
    }
    for p in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/nvidia/lib64",
        "/usr/local/nvidia/lib",
        "/usr/lib/x86_64-linux-gnu",
    ] {
        push(PathBuf::from(p));
    }
    dirs
}

/// Candidate files `<stem>` or `<stem>.<digits>...` in `dirs`, preferring major version
/// `major`, then earlier directories.
fn candidates(dirs: &[PathBuf], stem: &str, major: &str) -> Vec<PathBuf> {
    let mut found: Vec<(bool, usize, PathBuf)> = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        if d.to_string_lossy().contains("stubs") {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(stem) else {
                continue;
            };
            let versioned = rest.is_empty()
                || rest
                    .strip_prefix('.')
                    .is_some_and(|v| v.split('.').all(|p| p.parse::<u32>().is_ok()));
            if versioned {
                let want = rest.trim_start_matches('.').split('.').next() == Some(major);
                found.push((want, i, e.path()));
            }
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    found.into_iter().map(|f| f.2).collect()
}

fn dlopen_global(path: &str) -> Result<(), String> {
    let c = CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: `c` is a valid NUL-terminated path; dlopen has no other preconditions.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let err = unsafe { libc::dlerror() };
        let msg = if err.is_null() {
            "unknown dlopen error".to_string()
        } else {
            // SAFETY: non-null dlerror results are valid C strings.
            unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(msg);
    }
    Ok(())
}

fn load_one(dirs: &[PathBuf], stem: &str, major: &str, notes: &mut Vec<String>) -> Option<String> {
    for p in candidates(dirs, stem, major) {
        let s = p.to_string_lossy().into_owned();
        match dlopen_global(&s) {
            Ok(()) => return Some(s),
            Err(e) => notes.push(format!("dlopen {s}: {e}")),
        }
    }
    None
}

/// Pre-loads the driver, cuBLAS(Lt) and NVRTC. Call before any cudarc use; safe to call
/// more than once.
pub fn preload() -> LibReport {
    let dirs = search_dirs();
    let mut r = LibReport::default();
    r.driver = match dlopen_global("libcuda.so.1") {
        Ok(()) => Some("libcuda.so.1 (loader search)".into()),
        Err(e) => {
            r.notes.push(format!("libcuda.so.1: {e}"));
            load_one(&dirs, "libcuda.so", "1", &mut r.notes)
        }
    };
    r.cublaslt = load_one(&dirs, "libcublasLt.so", "13", &mut r.notes);
    r.cublas = load_one(&dirs, "libcublas.so", "13", &mut r.notes);
    // The builtins library must come from the same directory as libnvrtc.
    if let Some(nvrtc_dir) = candidates(&dirs, "libnvrtc.so", "13")
        .first()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        let _ = load_one(&[nvrtc_dir], "libnvrtc-builtins.so", "13", &mut r.notes);
    }
    r.nvrtc = load_one(&dirs, "libnvrtc.so", "13", &mut r.notes);
    r
}

/// Whether cudarc can reach each library now.
pub fn present() -> (bool, bool, bool) {
    // SAFETY: these only try to open the libraries (by bare name) and report success.
    unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present() && cudarc::cublaslt::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
        )
    }
}

/// The module loading a process gets: `CUDA_MODULE_LOADING` when the user set it, else
/// `EAGER` (set here): every kernel of a module (ours, cuBLAS's) loads with the module,
/// not at its first launch. CUDA's default, lazy loading, put that cost on a fresh
/// server's first requests: on the H200 at 125 req/s its first 10 s had TTFA p95 677 ms
/// against 220 ms eager (one fresh server each, `bench/results/2026-12-04-h200-startup`);
/// eager opens the device ~1.4 s later. `CUDA_MODULE_LOADING=LAZY` restores the default.
/// Call first thing in `main`,
/// before any thread starts (it sets an environment variable) and before CUDA starts.
pub fn prefer_eager_module_loading() -> String {
    const VAR: &str = "CUDA_MODULE_LOADING";
    match std::env::var(VAR) {
        Ok(v) if !v.is_empty() => v,
        _ => {
            std::env::set_var(VAR, "EAGER");
            "EAGER".into()
        }
    }
}
