//! The device: context, the one stream everything runs on, cuBLAS with a fixed workspace,
//! the kernel module, device buffers and typed launch/GEMM helpers.
//!
//! Everything is ordered on one stream, so cudarc's per-buffer event tracking is disabled
//! (it would also break graph capture). Kernels take raw device pointers (`u64`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8};
use std::sync::Arc;

use cudarc::cublas::sys as bsys;
use cudarc::cublas::CudaBlas;
use cudarc::driver::sys as dsys;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use crate::compile;
use crate::error::CudaError;
use crate::libs;
use crate::lt::Lt;

mod graph;
mod launch;

pub use graph::Graph;

/// Most threads of a `sample_talker` / `sample_cp` block (`SAMPLE_THREADS` of
/// `sampling.cu`, its launch bound).
pub const SAMPLER_THREADS: u32 = 512;

/// Threads per block of a sampler launch over `rows` rows (one block each): a row's choice
/// is a chain of dependent steps per warp, shorter with more warps (on the H200 the
/// talker's sampler took 10.5 us at 512 threads, 12.2 at 256; the code predictor's 8.8 at
/// either), but a 512-thread block fills a multiprocessor's registers, so beyond one row
/// per multiprocessor the 256-thread blocks (two to a multiprocessor) finish in one wave.
pub fn sampler_threads(rows: usize, sm_count: u32) -> u32 {
    if rows <= sm_count as usize {
        SAMPLER_THREADS
    } else {
        SAMPLER_THREADS / 2
    }
}

/// Names of the decoding kernels (checked at start-up). Each calls `pdl_wait()` before it
/// touches data of earlier work (`common.cuh`), so they are launched with programmatic
/// dependent launch when it is on (`Gpu::pdl`).
pub const KERNELS: &[&str] = &[
    "gemv_m1",
    "gemv_m2",
    "gemv_m4",
    "gemv_m8",
    "gemv_m1_pre",
    "gemv_m1_u8",
    "gemv_m1_u8_pre",
    "gemv_staged_m1",
    "gemv8_m1",
    "gemv8_m2",
    "gemv8_mma_m1",
    "gemv8_mma_m2",
    "mma_linear_t1",
    "mma_linear_t2",
    "mma_linear_t4",
    "mma_linear_t8",
    "mma_staged_t1",
    "mma_staged_t2",
    "mma_staged_t4",
    "qk_norm_rope_kv",
    "qk_norm_rope_kv_f32",
    "decode_attention",
    "decode_attention_f32",
    "fused_attention",
    "fused_attention_f32",
    "fused_attention_short",
    "fused_attention_short_f32",
    "fused_attention_short_group",
    "fused_attention_short_group_f32",
    "row_attention",
    "row_attention_f32",
    "row_attention_split",
    "row_attention_split_f32",
    "gather_rows",
    "gather_rows_f32",
    "frame_embedding",
    "copy_rows",
    "gather_u32",
    "scatter_u32",
    "cp_first_input",
    "to_bf16_rows",
    "linear_epilogue",
    "add_bias_rows",
    "rms_norm_rows",
    "copy_runs2",
    "sample_talker",
    "sample_cp",
    "chain_link",
    "chain_row",
];

/// The one-row kernels that stage weights in more shared memory than a launch gets
/// without asking (48 KiB with their static memory), each with the most dynamic shared
/// memory it may take; `Gpu::open` asks for them (with `linear::STAGED_MMA_KERNELS`).
pub const STAGED_SMEM: &[(&str, usize)] = &[("gemv_staged_m1", crate::linear::STAGED_MAX_SMEM)];

/// The thread-block-cluster linear kernels (`mma_cluster.cu`, sm_90 and newer); PDL-ready
/// like `KERNELS`.
pub const CLUSTER_KERNELS: &[&str] = &[
    "mma_cluster_t1",
    "mma_cluster_t2",
    "mma_cluster_t4",
    "mma_cluster_t8",
];

/// Persistent kernels (`persistent.cu`): one block per multiprocessor, grid barriers inside,
/// so never launched with PDL (every block must find its multiprocessor free).
pub const PERSISTENT_KERNELS: &[&str] = &[
    "cp_loop",
    "cp_loop_f32",
    "talker_layers",
    "talker_layers_f32",
    "chain_phases",
];

/// Lets kernel `f` take up to `bytes` of dynamic shared memory per block (above 48 KiB this
/// must be asked for before the launch).
fn set_dynamic_smem(f: &CudaFunction, bytes: usize) -> Result<(), CudaError> {
    f.set_attribute(
        dsys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        bytes as i32,
    )?;
    Ok(())
}

/// Every kernel [`Gpu::open`] looks up in the module, and whether it launches with
/// programmatic dependent launch (the codec's other kernels and the persistent ones do not).
pub fn looked_up_kernels() -> Vec<(&'static str, bool)> {
    let tables = [
        &crate::linear::TILE_KERNELS[..],
        &crate::linear::TILE_WG_KERNELS,
        &crate::linear::WIDE_KERNELS,
    ];
    let pdl = KERNELS
        .iter()
        .chain(CLUSTER_KERNELS)
        .copied()
        .chain(tables.into_iter().flatten().map(|&(k, _)| k))
        .chain(crate::codec::PDL_KERNELS.iter().copied())
        .map(|k| (k, true));
    let plain = crate::codec::KERNELS
        .iter()
        .chain(PERSISTENT_KERNELS)
        .map(|&k| (k, false));
    pdl.chain(plain).collect()
}

/// Lets each kernel of `sizes` take that many bytes of dynamic shared memory.
fn allow_smem(
    funcs: &HashMap<&'static str, (CudaFunction, bool)>,
    sizes: impl IntoIterator<Item = (&'static str, usize)>,
) -> Result<(), CudaError> {
    for (k, bytes) in sizes {
        let f = funcs
            .get(k)
            .ok_or_else(|| CudaError::Unavailable(format!("kernel {k} not in the module")))?;
        set_dynamic_smem(&f.0, bytes)?;
    }
    Ok(())
}

/// Whether kernels whose set-up gave `setup` can be used (a failure is logged, not fatal:
/// the routing keeps them off).
fn usable(what: &str, setup: Result<(), CudaError>) -> bool {
    match setup {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "{what} unavailable");
            false
        }
    }
}

/// A device buffer and its raw address.
pub struct DBuf<T> {
    slice: CudaSlice<T>,
    pub ptr: u64,
    pub len: usize,
}

impl<T> DBuf<T> {
    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        debug_assert!(i <= self.len);
        self.ptr + (i * std::mem::size_of::<T>()) as u64
    }

    pub fn slice(&self) -> &CudaSlice<T> {
        &self.slice
    }

    pub fn slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

/// Workspace given to cuBLAS once, so it never allocates during graph capture.
const BLAS_WORKSPACE: usize = 64 << 20;

/// The GPU and everything bound to it.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub blas: CudaBlas,
    /// cuBLASLt with the algorithms tuned for the linear layers (`lt::tune`).
    pub lt: Option<Lt>,
    _module: Arc<CudaModule>,
    /// Each kernel and whether it may be launched with PDL.
    funcs: HashMap<&'static str, (CudaFunction, bool)>,
    /// Launch the PDL-ready kernels with programmatic stream serialization, so a kernel's
    /// launch and weight prefetch overlap the end of the previous one (sm_90 and newer).
    pub pdl: bool,
    _workspace: CudaSlice<u8>,
    pub name: String,
    pub arch: String,
    /// Streaming multiprocessors (the grid of a persistent kernel).
    pub sm_count: u32,
    /// Thread-block clusters of up to 16 blocks with `linear::CLUSTER_MAX_SMEM` bytes each are
    /// available to the cluster linear kernels (sm_90 and newer).
    pub clusters: bool,
    /// `tile.cu`'s linear kernels run here, with their shared memory (sm_90 and newer).
    pub tiles: bool,
    /// `tile_wg.cu`'s warpgroup-MMA variants of them run here (an sm_90a module).
    pub tile_wg: bool,
    /// `wide.cu`'s linear kernels run here, with their shared memory and clusters (sm_90
    /// and newer).
    pub wides: bool,
    /// Name prefixes of kernels left out (`CudaOptions::without_kernels`, a timing ablation).
    pub without: Vec<String>,
    /// `gemv_staged.cu` runs here, with its shared memory (sm_90 and newer).
    pub staged: bool,
    /// When a staged one-row GEMV lets the next linear layer launch
    /// (`CudaOptions::staged_trigger`).
    pub staged_trigger: crate::linear::StagedTrigger,
    /// How many K steps a one-row `gemv.cu` warp loads per pass
    /// (`CudaOptions::gemv_passes`).
    pub gemv_passes: crate::linear::GemvPasses,
    /// The [`SmallCall`] mode launches are enqueued in now (`with_small_call`), as u8.
    small_call: AtomicU8,
    /// Share of a `launch_reading` window's lines marked persisting in L2 (0: never;
    /// `reserve_l2_for`), while `l2_persist_on` (`with_l2_persist`).
    pub l2_persist_ratio: f32,
    l2_window_max: usize,
    l2_persist_on: AtomicBool,
}

/// How the launches of a stage call of few rows ask for L1 and shared memory
/// ([`Gpu::with_small_call`]). A multiprocessor changes its L1 / shared-memory split only
/// when idle, so kernels of different splits in a row cannot overlap under PDL: a call's
/// launches should agree on one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum SmallCall {
    /// Each kernel's own preference.
    #[default]
    Default = 0,
    /// Kernels without dynamic shared memory or clusters ask for the most L1 (carveout 0;
    /// one that needs shared memory still gets it). See `CudaOptions::max_l1_rows`.
    MaxL1 = 1,
    /// One-row GEMVs read weights staged in shared memory (`gemv_staged.cu`, where the
    /// shape fits) and every launch without clusters asks for the most shared memory
    /// (carveout 100), so the tiles of consecutive GEMVs fit side by side. See
    /// `CudaOptions::staged_gemv`.
    Staged = 2,
    /// `Staged`, and linear layers of two rows and more take `mma_staged.cu` (where the
    /// shape fits): their weight tiles too are copied before the PDL wait. See
    /// `CudaOptions::staged_mma_rows`.
    StagedMma = 3,
}

impl SmallCall {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::MaxL1,
            2 => Self::Staged,
            3 => Self::StagedMma,
            _ => Self::Default,
        }
    }
}

impl Gpu {
    /// Opens device `ordinal`: loads the libraries, creates the context and stream,
    /// compiles (or loads from cache) the kernels and prepares cuBLAS.
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        let report = libs::preload();
        let (driver, blas, nvrtc) = libs::present();
        if !(driver && blas && nvrtc) {
            return Err(CudaError::Unavailable(format!(
                "CUDA libraries not found (driver {driver}, cuBLAS {blas}, NVRTC {nvrtc}); \
                 set QWEN3_TTS_CUDA_LIB_DIRS or LD_LIBRARY_PATH. {}",
                report.notes.join("; ")
            )));
        }
        let count =
            CudaContext::device_count().map_err(|e| CudaError::Unavailable(format!("{e:?}")))?;
        if count as usize <= ordinal {
            return Err(CudaError::Unavailable(format!(
                "{count} CUDA device(s), asked for #{ordinal}"
            )));
        }
        let ctx = CudaContext::new(ordinal)?;
        // SAFETY: all work goes through one stream; no buffer is shared across streams.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let (maj, min) = ctx.compute_capability()?;
        let arch = compile::arch_name(maj, min);
        let name = ctx.name()?;
        let cubin = compile::module_cubin(&arch)?;
        let module = ctx.load_module(Ptx::from_binary(cubin))?;
        let mut funcs = HashMap::new();
        for (k, pdl) in looked_up_kernels() {
            funcs.insert(k, (module.load_function(k)?, pdl));
        }
        let wide_names = crate::linear::WIDE_KERNELS.map(|(k, _)| k);
        let sm_count = ctx
            .attribute(dsys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            .max(1) as u32;
        let blas = CudaBlas::new(stream.clone())?;
        let workspace: CudaSlice<u8> = stream.alloc_zeros(BLAS_WORKSPACE)?;
        let workspace_ptr = {
            let (p, _g) = workspace.device_ptr(&stream);
            // SAFETY: the workspace outlives the handle (both owned by this struct).
            unsafe { bsys::cublasSetWorkspace_v2(*blas.handle(), p as *mut _, BLAS_WORKSPACE) }
                .result()?;
            p
        };
        // cuBLASLt shares the workspace: both run on the one stream, in its order.
        let lt = match Lt::new(workspace_ptr, BLAS_WORKSPACE) {
            Ok(lt) => Some(lt),
            Err(e) => {
                tracing::warn!(error = %e, "cuBLASLt unavailable: batched GEMMs on cublasGemmEx");
                None
            }
        };
        let pdl = maj >= 9;
        let clusters = maj >= 9 && {
            let setup = |k: &'static str| -> Result<(), CudaError> {
                let f = &funcs[k].0;
                set_dynamic_smem(f, crate::linear::CLUSTER_MAX_SMEM)?;
                f.set_attribute(
                    dsys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                    1,
                )?;
                Ok(())
            };
            usable(
                "cluster linear kernels",
                CLUSTER_KERNELS.iter().copied().try_for_each(setup),
            )
        };
        // tile.cu's pipelines take more than the default 48 KiB of shared memory, and its
        // blocks meet in clusters (sm_90)
        let tiles = maj >= 9 && {
            let sizes =
                crate::linear::TILE_KERNELS.map(|(k, mt)| (k, crate::linear::tile_smem(mt)));
            usable("tile linear kernels", allow_smem(&funcs, sizes))
        };
        // tile_wg.cu: its pipeline, alignment and inbox; warpgroup MMA only in an sm_90a module
        let tile_wg = tiles && arch == "sm_90a" && {
            let sizes =
                crate::linear::TILE_WG_KERNELS.map(|(k, mt)| (k, crate::linear::tile_wg_smem(mt)));
            usable("warpgroup tile linear kernels", allow_smem(&funcs, sizes))
        };
        // wide.cu stages its rows in up to WIDE_SMEM bytes of shared memory
        let wides = maj >= 9 && {
            let sizes = wide_names.map(|k| (k, crate::linear::WIDE_SMEM));
            usable("wide linear kernels", allow_smem(&funcs, sizes))
        };
        // gemv_staged.cu holds up to STAGED_MAX_SMEM bytes of weights per block,
        // mma_staged.cu up to STAGED_MMA_MAX_SMEM with its sums
        let staged = maj >= 9 && {
            let mma = crate::linear::STAGED_MMA_KERNELS
                .iter()
                .map(|&(k, _)| (k, crate::linear::STAGED_MMA_MAX_SMEM));
            let sizes = STAGED_SMEM.iter().copied().chain(mma);
            usable("staged GEMV and MMA", allow_smem(&funcs, sizes))
        };
        tracing::info!(%name, %arch, clusters, tiles, tile_wg, wides, staged, "CUDA device ready");
        Ok(Self {
            ctx,
            stream,
            blas,
            lt,
            _module: module,
            funcs,
            pdl,
            _workspace: workspace,
            name,
            arch,
            sm_count,
            clusters,
            tiles,
            tile_wg,
            wides,
            without: Vec::new(),
            staged,
            staged_trigger: crate::linear::StagedTrigger::default(),
            gemv_passes: crate::linear::GemvPasses::default(),
            small_call: AtomicU8::new(SmallCall::Default as u8),
            l2_persist_ratio: 0.0,
            l2_window_max: 0,
            l2_persist_on: AtomicBool::new(false),
        })
    }

    pub fn func(&self, name: &'static str) -> Result<&CudaFunction, CudaError> {
        self.funcs
            .get(name)
            .map(|(f, _)| f)
            .ok_or(CudaError::MissingKernel(name))
    }

    /// A zeroed buffer of `n` elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<DBuf<T>, CudaError> {
        let slice: CudaSlice<T> = self.stream.alloc_zeros(n.max(1))?;
        let ptr = slice.device_ptr(&self.stream).0;
        Ok(DBuf { slice, ptr, len: n })
    }

    /// A buffer holding a copy of `host`.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<DBuf<T>, CudaError> {
        let slice = self.stream.clone_htod(host)?;
        let ptr = slice.device_ptr(&self.stream).0;
        Ok(DBuf {
            slice,
            ptr,
            len: host.len(),
        })
    }

    /// Copies `host` into the start of `dst`.
    pub fn write<T: DeviceRepr>(&self, dst: &mut DBuf<T>, host: &[T]) -> Result<(), CudaError> {
        if host.is_empty() {
            return Ok(());
        }
        let mut view = dst.slice.slice_mut(0..host.len());
        self.stream.memcpy_htod(host, &mut view)?;
        Ok(())
    }

    /// Copies `host` into `dst` starting at element `offset`.
    pub fn write_at<T: DeviceRepr>(
        &self,
        dst: &mut DBuf<T>,
        offset: usize,
        host: &[T],
    ) -> Result<(), CudaError> {
        if host.is_empty() {
            return Ok(());
        }
        let mut view = dst.slice.slice_mut(offset..offset + host.len());
        self.stream.memcpy_htod(host, &mut view)?;
        Ok(())
    }

    /// Copies the first `n` elements of `src` to the host (synchronises the stream).
    pub fn read<T: DeviceRepr + Default + Clone>(
        &self,
        src: &DBuf<T>,
        n: usize,
    ) -> Result<Vec<T>, CudaError> {
        let mut out = vec![T::default(); n];
        if n > 0 {
            let view = src.slice.slice(0..n);
            self.stream.memcpy_dtoh(&view, &mut out)?;
        }
        self.stream.synchronize()?;
        Ok(out)
    }

    /// Makes this device's context current on the calling thread (cuBLAS needs it).
    pub fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread()?;
        Ok(())
    }

    pub fn sync(&self) -> Result<(), CudaError> {
        self.stream.synchronize()?;
        Ok(())
    }

    /// Device time (ms) of the work `enqueue` puts on the stream, between two CUDA events
    /// (synchronises).
    pub fn time_ms(
        &self,
        enqueue: impl FnOnce() -> Result<(), CudaError>,
    ) -> Result<f64, CudaError> {
        let e0 = self
            .ctx
            .new_event(Some(dsys::CUevent_flags::CU_EVENT_DEFAULT))?;
        let e1 = self
            .ctx
            .new_event(Some(dsys::CUevent_flags::CU_EVENT_DEFAULT))?;
        e0.record(&self.stream)?;
        enqueue()?;
        e1.record(&self.stream)?;
        self.sync()?;
        Ok(f64::from(e0.elapsed_ms(&e1)?))
    }

    /// `C[m×n] = alpha · op(A) · op(B) + beta · C` in cuBLAS's column-major terms, with A/B
    /// of type `ab` (bf16, f16 or f32), C f32, f32 accumulation (TF32 for `F32Tf32`).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        ta: bool,
        tb: bool,
        m: usize,
        n: usize,
        k: usize,
        a: u64,
        lda: usize,
        b: u64,
        ldb: usize,
        beta: f32,
        c: u64,
        ldc: usize,
        ab: GemmType,
    ) -> Result<(), CudaError> {
        let alpha = 1f32;
        let op = |t: bool| {
            if t {
                bsys::cublasOperation_t::CUBLAS_OP_T
            } else {
                bsys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (dt, compute) = match ab {
            GemmType::Bf16 => (
                bsys::cudaDataType_t::CUDA_R_16BF,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            GemmType::F32Tf32 => (
                bsys::cudaDataType_t::CUDA_R_32F,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            ),
            GemmType::F32 => (
                bsys::cudaDataType_t::CUDA_R_32F,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            GemmType::F16 => (
                bsys::cudaDataType_t::CUDA_R_16F,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
        };
        // SAFETY: the handle is bound to our stream; the pointers are device buffers whose
        // sizes the callers derive from the same (m, n, k, ld*) they pass here.
        unsafe {
            bsys::cublasGemmEx(
                *self.blas.handle(),
                op(ta),
                op(tb),
                m as i32,
                n as i32,
                k as i32,
                &alpha as *const f32 as *const _,
                a as *const _,
                dt,
                lda as i32,
                b as *const _,
                dt,
                ldb as i32,
                &beta as *const f32 as *const _,
                c as *mut _,
                bsys::cudaDataType_t::CUDA_R_32F,
                ldc as i32,
                compute,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .result()?;
        Ok(())
    }
}

/// A kernel argument.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    P(u64),
    I(i32),
    F(f32),
}

/// Element type of GEMM inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmType {
    Bf16,
    F32Tf32,
    /// Full-precision f32 (no TF32): for parity checks.
    F32,
    /// f16 matrices, f32 accumulation and output.
    F16,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every entry point a launch table names, and every kernel given more shared memory at
    /// start-up, is looked up when the device opens (a name missing there turns its whole
    /// group of kernels off at start-up, with only a warning).
    #[test]
    fn every_launch_table_entry_is_looked_up() {
        let looked: std::collections::HashSet<&str> =
            looked_up_kernels().into_iter().map(|(k, _)| k).collect();
        let tables = [
            &crate::linear::TILE_KERNELS[..],
            &crate::linear::TILE_WG_KERNELS,
            &crate::linear::WIDE_KERNELS,
            &crate::linear::STAGED_MMA_KERNELS,
        ];
        let names = tables
            .into_iter()
            .flatten()
            .map(|&(k, _)| k)
            .chain(STAGED_SMEM.iter().map(|&(k, _)| k));
        for k in names {
            assert!(looked.contains(k), "{k} is launched but not looked up");
        }
    }

    #[test]
    fn sampler_blocks_halve_past_one_row_per_multiprocessor() {
        assert_eq!(sampler_threads(1, 132), SAMPLER_THREADS);
        assert_eq!(sampler_threads(132, 132), SAMPLER_THREADS);
        assert_eq!(sampler_threads(133, 132), SAMPLER_THREADS / 2);
        assert_eq!(sampler_threads(192, 132), SAMPLER_THREADS / 2);
    }
}
