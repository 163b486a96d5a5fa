//! cuBLASLt for the GEMM of `linear.rs`'s cuBLAS path: bf16 weights (n × k) times the
//! rows' bf16 hi + lo parts (k × cols, cols = 2 · rows), f32 out. For these shapes (18 to
//! 512 columns) `cublasGemmEx`'s default runs few blocks and takes ~10 µs whatever the
//! matrix (the H200 kernel tables); cuBLASLt's heuristic also offers other tiles and K
//! splits. [`tune`] times its candidates for each weight shape and columns bucket inside
//! CUDA graphs, as the backend runs them, against `cublasGemmEx`, and keeps an algorithm
//! only where it is faster; [`weight_gemm`] runs it (checked for the exact columns) and
//! every other call on `cublasGemmEx`.
//!
//! Off by default (`CudaOptions::lt_linear`): on the H200 the best candidate was within
//! 0-10 % of `cublasGemmEx` and no stage moved by more than 2 %. The timing repeats one
//! weight, so it sees the L2 cache warm (matrices of 2-48 MB); the kernel table
//! (`bench::bench_gemv`, rotating weight copies) shows both within 3 % cold.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::cublaslt::result as lres;
use cudarc::cublaslt::sys as lsys;

use crate::device::{GemmType, Gpu, Graph};
use crate::error::CudaError;

/// Candidates asked of the heuristic per shape and bucket.
const CANDIDATES: usize = 8;

/// Graph replays per timed candidate.
const REPLAYS: usize = 3;

/// The columns a tuned algorithm is measured at: a GEMM of `cols` columns runs the one
/// tuned at the next of these (`None`: beyond them, `cublasGemmEx`).
pub const BUCKETS: [usize; 6] = [16, 32, 64, 128, 256, 512];

/// The bucket `cols` columns fall in.
pub fn cols_bucket(cols: usize) -> Option<usize> {
    BUCKETS.iter().copied().find(|&b| cols > 0 && cols <= b)
}

/// The descriptors of one GEMM shape and the algorithm it runs.
#[derive(Clone, Copy)]
struct Plan {
    desc: lsys::cublasLtMatmulDesc_t,
    a: lsys::cublasLtMatrixLayout_t,
    b: lsys::cublasLtMatrixLayout_t,
    c: lsys::cublasLtMatrixLayout_t,
    algo: lsys::cublasLtMatmulAlgo_t,
}

#[derive(Default)]
struct State {
    /// By (n, k, bucket): the algorithm [`tune`] kept, or `None` (`cublasGemmEx` won).
    tuned: HashMap<(usize, usize, usize), Option<lsys::cublasLtMatmulAlgo_t>>,
    /// By exact (n, k, cols): what a call runs (`None`: `cublasGemmEx`).
    plans: HashMap<(usize, usize, usize), Option<Plan>>,
    /// Every descriptor set created, destroyed with the handle.
    owned: Vec<Plan>,
}

/// A cuBLASLt handle bound to the device's cuBLAS workspace, with its tuned algorithms.
pub struct Lt {
    handle: lsys::cublasLtHandle_t,
    workspace: u64,
    workspace_bytes: usize,
    /// Off: every call on `cublasGemmEx` (the kernel table's plain cuBLAS rows).
    enabled: AtomicBool,
    state: Mutex<State>,
}

// SAFETY: the handle and the descriptors are only used with `state` locked (one thread at a
// time), and the handle's work goes to the stream the caller names.
unsafe impl Send for Lt {}
// SAFETY: as above: every use of the raw handles goes through the mutex.
unsafe impl Sync for Lt {}

fn lt_err(e: lres::CublasError) -> CudaError {
    CudaError::Blas(format!("cuBLASLt: {e:?}"))
}

impl Lt {
    /// A handle whose GEMMs use `workspace_bytes` at device address `workspace` (shared
    /// with cuBLAS: both run on the one stream).
    pub fn new(workspace: u64, workspace_bytes: usize) -> Result<Self, CudaError> {
        let handle = lres::create_handle().map_err(lt_err)?;
        Ok(Self {
            handle,
            workspace,
            workspace_bytes,
            enabled: AtomicBool::new(true),
            state: Mutex::new(State::default()),
        })
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Whether GEMMs of this exact shape have run on a tuned cuBLASLt algorithm.
    pub fn runs(&self, n: usize, k: usize, cols: usize) -> bool {
        matches!(self.lock().plans.get(&(n, k, cols)), Some(Some(_)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Descriptors for `n` outputs, `k` inputs and `cols` columns (algorithm left zero).
    fn describe(&self, st: &mut State, n: usize, k: usize, cols: usize) -> Result<Plan, CudaError> {
        let desc = lres::create_matmul_desc(
            lsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            lsys::cudaDataType_t::CUDA_R_32F,
        )
        .map_err(lt_err)?;
        let op_t: i32 = 1; // CUBLAS_OP_T: the weights are stored k-major (n rows of k)
                           // SAFETY: `desc` was just created; the attribute is a 4-byte cublasOperation_t.
        unsafe {
            lres::set_matmul_desc_attribute(
                desc,
                lsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &op_t as *const i32 as *const c_void,
                std::mem::size_of::<i32>(),
            )
        }
        .map_err(lt_err)?;
        let layout = |t, rows: usize, cols: usize, ld: usize| {
            lres::create_matrix_layout(t, rows as u64, cols as u64, ld as i64).map_err(lt_err)
        };
        let plan = Plan {
            desc,
            a: layout(lsys::cudaDataType_t::CUDA_R_16BF, k, n, k)?,
            b: layout(lsys::cudaDataType_t::CUDA_R_16BF, k, cols, k)?,
            c: layout(lsys::cudaDataType_t::CUDA_R_32F, n, cols, n)?,
            // SAFETY: an algorithm is plain data; all zeros is a valid (unused) value.
            algo: unsafe { std::mem::zeroed() },
        };
        st.owned.push(plan);
        Ok(plan)
    }

    /// The heuristic's candidates for `plan`'s shape that fit the workspace.
    fn candidates(&self, plan: &Plan) -> Result<Vec<lsys::cublasLtMatmulAlgo_t>, CudaError> {
        let pref = lres::create_matmul_pref().map_err(lt_err)?;
        let bytes = self.workspace_bytes as u64;
        // SAFETY: `pref` was just created; the attribute is a u64 byte count.
        let set = unsafe {
            lres::set_matmul_pref_attribute(
                pref,
                lsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &bytes as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
        };
        // SAFETY: heuristic results are plain data; zeros are overwritten or ignored.
        let mut results: Vec<lsys::cublasLtMatmulHeuristicResult_t> =
            vec![unsafe { std::mem::zeroed() }; CANDIDATES];
        let mut count = 0i32;
        let found = set.and_then(|_| {
            // SAFETY: every descriptor is live; `results` holds CANDIDATES entries.
            unsafe {
                lsys::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    plan.desc,
                    plan.a,
                    plan.b,
                    plan.c,
                    plan.c,
                    pref,
                    CANDIDATES as i32,
                    results.as_mut_ptr(),
                    &mut count,
                )
            }
            .result()
        });
        // SAFETY: created above and no longer used.
        unsafe { lres::destroy_matmul_pref(pref) }.map_err(lt_err)?;
        found.map_err(lt_err)?;
        Ok(results
            .iter()
            .take(count.max(0) as usize)
            .filter(|r| self.usable(r.state, r))
            .map(|r| r.algo)
            .collect())
    }

    /// Whether `algo` takes `plan`'s exact shape within the workspace.
    fn check(&self, plan: &Plan, algo: &lsys::cublasLtMatmulAlgo_t) -> bool {
        // SAFETY: plain data, written by the call.
        let mut r: lsys::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        // SAFETY: every descriptor is live; `r` is a valid output location.
        let ok = unsafe {
            lsys::cublasLtMatmulAlgoCheck(
                self.handle,
                plan.desc,
                plan.a,
                plan.b,
                plan.c,
                plan.c,
                algo,
                &mut r,
            )
        };
        self.usable(ok, &r)
    }

    /// Whether an algorithm the library reported on with `status` and `r` runs here.
    fn usable(
        &self,
        status: lsys::cublasStatus_t,
        r: &lsys::cublasLtMatmulHeuristicResult_t,
    ) -> bool {
        status == lsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
            && r.workspaceSize <= self.workspace_bytes
    }

    /// Enqueues `acc = Wᵀ · xb` with `plan` on `gpu`'s stream.
    fn run(&self, gpu: &Gpu, plan: &Plan, w: u64, xb: u64, acc: u64) -> Result<(), CudaError> {
        let (alpha, beta) = (1f32, 0f32);
        // SAFETY: the descriptors are live; `w`, `xb`, `acc` are device buffers of the sizes
        // the plan's layouts describe (the caller checked them against its scratch); the
        // workspace is the device's cuBLAS workspace, used by one stream only.
        unsafe {
            lres::matmul(
                self.handle,
                plan.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                w as *const c_void,
                plan.a,
                xb as *const c_void,
                plan.b,
                acc as *const c_void,
                plan.c,
                acc as *mut c_void,
                plan.c,
                &plan.algo,
                self.workspace as *mut c_void,
                self.workspace_bytes,
                gpu.stream.cu_stream() as lsys::cudaStream_t,
            )
        }
        .map_err(lt_err)
    }

    /// Runs `acc (n × cols) = Wᵀ · xb` on a tuned algorithm and says `true`, or enqueues
    /// nothing and says `false` (no algorithm kept for the shape, or none that takes it).
    fn matmul(
        &self,
        gpu: &Gpu,
        (n, k, cols): (usize, usize, usize),
        w: u64,
        xb: u64,
        acc: u64,
    ) -> Result<bool, CudaError> {
        if !self.enabled() {
            return Ok(false);
        }
        let mut st = self.lock();
        let plan = match st.plans.get(&(n, k, cols)) {
            Some(p) => *p,
            None => {
                let algo =
                    cols_bucket(cols).and_then(|b| st.tuned.get(&(n, k, b)).copied().flatten());
                let plan = match algo {
                    Some(algo) => {
                        let mut p = self.describe(&mut st, n, k, cols)?;
                        p.algo = algo;
                        self.check(&p, &algo).then_some(p)
                    }
                    None => None,
                };
                st.plans.insert((n, k, cols), plan);
                plan
            }
        };
        match plan {
            Some(p) => self.run(gpu, &p, w, xb, acc).map(|_| true),
            None => Ok(false),
        }
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for p in st.owned.drain(..) {
            // SAFETY: each was created once by `describe` and is destroyed once, here.
            unsafe {
                let _ = lres::destroy_matmul_desc(p.desc);
                let _ = lres::destroy_matrix_layout(p.a);
                let _ = lres::destroy_matrix_layout(p.b);
                let _ = lres::destroy_matrix_layout(p.c);
            }
        }
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { lres::destroy_handle(self.handle) };
    }
}

/// `acc (n × cols, f32) = Wᵀ · xb`, W bf16 n × k (k-major), xb bf16 k × cols: on the tuned
/// cuBLASLt algorithm where [`tune`] kept one, else `cublasGemmEx`.
pub fn weight_gemm(
    gpu: &Gpu,
    n: usize,
    k: usize,
    cols: usize,
    w: u64,
    xb: u64,
    acc: u64,
) -> Result<(), CudaError> {
    if let Some(lt) = &gpu.lt {
        if lt.matmul(gpu, (n, k, cols), w, xb, acc)? {
            return Ok(());
        }
    }
    gpu.gemm(
        true,
        false,
        n,
        cols,
        k,
        w,
        k,
        xb,
        k,
        0.0,
        acc,
        n,
        GemmType::Bf16,
    )
}

/// One tuned (shape, bucket): device µs per GEMM of `cublasGemmEx` and of the fastest
/// cuBLASLt candidate, and whether that one was kept.
#[derive(Debug, Clone, PartialEq)]
pub struct LtTuned {
    pub n: usize,
    pub k: usize,
    pub cols: usize,
    pub gemm_ex_us: f64,
    pub best_lt_us: Option<f64>,
    pub candidates: usize,
    pub kept: bool,
}

/// A weight to tune for: (n, k, device address of its bf16 n × k values).
pub type TuneShape = (usize, usize, u64);

/// Which candidate [`tune_with`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The fastest, where it beats `cublasGemmEx` (what the backend runs).
    Faster,
    /// The fastest whatever its time (parity tests, to run every bucket on cuBLASLt).
    Fastest,
}

/// For each shape and each bucket whose columns fit `xb` (device address, bf16 elements of
/// the rows' scratch) and `acc` (f32 elements of the output scratch): times `cublasGemmEx`
/// and the heuristic's candidates (a graph of `iters` GEMMs, replayed) and keeps the
/// fastest candidate if it beats `cublasGemmEx`. Buffers' contents do not matter.
pub fn tune(
    gpu: &Gpu,
    shapes: &[TuneShape],
    xb: (u64, usize),
    acc: (u64, usize),
    iters: usize,
) -> Result<Vec<LtTuned>, CudaError> {
    tune_with(gpu, shapes, xb, acc, iters, Keep::Faster)
}

/// [`tune`], keeping candidates as `keep` says.
pub fn tune_with(
    gpu: &Gpu,
    shapes: &[TuneShape],
    xb: (u64, usize),
    acc: (u64, usize),
    iters: usize,
    keep: Keep,
) -> Result<Vec<LtTuned>, CudaError> {
    let Some(lt) = &gpu.lt else {
        return Ok(Vec::new());
    };
    let iters = iters.max(1);
    let time = |enqueue: &dyn Fn(&Gpu) -> Result<(), CudaError>| -> Result<f64, CudaError> {
        let g = Graph::capture(gpu, |g| (0..iters).try_for_each(|_| enqueue(g)))?;
        g.launch()?;
        let ms = gpu.time_ms(|| (0..REPLAYS).try_for_each(|_| g.launch()))?;
        Ok(ms * 1e3 / (REPLAYS * iters) as f64)
    };
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for &(n, k, w) in shapes {
        if seen.contains(&(n, k)) {
            continue;
        }
        seen.push((n, k));
        for cols in BUCKETS {
            if cols * k > xb.1 || cols * n > acc.1 {
                continue;
            }
            let gemm_ex = time(&|g: &Gpu| {
                g.gemm(
                    true,
                    false,
                    n,
                    cols,
                    k,
                    w,
                    k,
                    xb.0,
                    k,
                    0.0,
                    acc.0,
                    n,
                    GemmType::Bf16,
                )
            })?;
            let (plan, algos) = {
                let mut st = lt.lock();
                let plan = lt.describe(&mut st, n, k, cols)?;
                // a heuristic that finds nothing for a shape leaves it on cublasGemmEx
                let algos = lt.candidates(&plan).unwrap_or_else(|e| {
                    tracing::warn!(n, k, cols, error = %e, "cuBLASLt heuristic failed: the bucket stays on cublasGemmEx");
                    Vec::new()
                });
                (plan, algos)
            };
            let mut best: Option<(f64, lsys::cublasLtMatmulAlgo_t)> = None;
            for algo in &algos {
                let p = Plan {
                    algo: *algo,
                    ..plan
                };
                // A candidate that fails to run or capture is skipped, not fatal.
                match time(&|g: &Gpu| lt.run(g, &p, w, xb.0, acc.0)) {
                    Ok(us) if best.is_none_or(|b| us < b.0) => best = Some((us, *algo)),
                    Ok(_) => {}
                    Err(e) => tracing::debug!(n, k, cols, error = %e, "cuBLASLt candidate skipped"),
                }
            }
            let kept = best.filter(|b| keep == Keep::Fastest || b.0 < gemm_ex);
            let mut st = lt.lock();
            st.tuned.insert((n, k, cols), kept.map(|b| b.1));
            // plans of this shape made before this tuning would be stale; the bucket's own
            // column count runs on the descriptors just timed
            st.plans
                .retain(|&(pn, pk, pc), _| !(pn == n && pk == k && cols_bucket(pc) == Some(cols)));
            st.plans
                .insert((n, k, cols), kept.map(|b| Plan { algo: b.1, ..plan }));
            out.push(LtTuned {
                n,
                k,
                cols,
                gemm_ex_us: gemm_ex,
                best_lt_us: best.map(|b| b.0),
                candidates: algos.len(),
                kept: kept.is_some(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fall_in_the_next_bucket_up_to_512() {
        assert_eq!(cols_bucket(0), None);
        assert_eq!(cols_bucket(1), Some(16));
        assert_eq!(cols_bucket(16), Some(16));
        assert_eq!(cols_bucket(17), Some(32));
        assert_eq!(cols_bucket(34), Some(64));
        assert_eq!(cols_bucket(128), Some(128));
        assert_eq!(cols_bucket(300), Some(512));
        assert_eq!(cols_bucket(512), Some(512));
        assert_eq!(cols_bucket(513), None);
    }
}
