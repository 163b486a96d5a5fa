//! The device: context, the one stream everything runs on, cuBLAS with a fixed workspace,
//! the kernel module, device buffers and typed launch/GEMM helpers.
//!
//! Everything is ordered on one stream, so cudarc's per-buffer event tracking is disabled
//! (it would also break graph capture). Kernels take raw device pointers (`u64`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use cudarc::cublas::sys as bsys;
use cudarc::cublas::CudaBlas;
use cudarc::driver::sys as dsys;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use crate::compile;
use crate::error::CudaError;
use crate::libs;
use crate::lt::Lt;

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
    "gemv_staged_m1",
    "gemv8_m1",
    "gemv8_m2",
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
];

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

/// Most arguments a kernel takes.
const MAX_ARGS: usize = 24;

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
        let tile_names = crate::linear::TILE_KERNELS.map(|(k, _)| k);
        let tile_wg_names = crate::linear::TILE_WG_KERNELS.map(|(k, _)| k);
        let wide_names = crate::linear::WIDE_KERNELS.map(|(k, _)| k);
        for &k in KERNELS
            .iter()
            .chain(CLUSTER_KERNELS)
            .chain(&tile_names)
            .chain(&tile_wg_names)
            .chain(&wide_names)
            .chain(crate::codec::PDL_KERNELS)
        {
            funcs.insert(k, (module.load_function(k)?, true));
        }
        for &k in crate::codec::KERNELS.iter().chain(PERSISTENT_KERNELS) {
            funcs.insert(k, (module.load_function(k)?, false));
        }
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
            let sizes =
                std::iter::once(("gemv_staged_m1", crate::linear::STAGED_MAX_SMEM)).chain(mma);
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

    /// Launches `name` on a `grid` of `block`-thread blocks with `args` (raw pointers as
    /// `u64`, sizes as `i32`, scalars as `f32`); PDL-ready kernels get programmatic
    /// stream serialization when `self.pdl` is on.
    pub fn launch(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        self.launch_with(name, grid, block, 0, args)
    }

    /// How many `block`-thread blocks of `name`, each with `smem` bytes of dynamic shared
    /// memory, fit on one multiprocessor at once.
    pub fn blocks_per_sm(
        &self,
        name: &'static str,
        block: u32,
        smem: usize,
    ) -> Result<u32, CudaError> {
        Ok(self
            .func(name)?
            .occupancy_max_active_blocks_per_multiprocessor(block, smem, None)?)
    }

    /// Lets `name` take up to `bytes` of dynamic shared memory per block (above 48 KiB
    /// this must be asked for before the launch).
    pub fn allow_dynamic_smem(&self, name: &'static str, bytes: usize) -> Result<(), CudaError> {
        set_dynamic_smem(self.func(name)?, bytes)
    }

    /// Runs `f` (which enqueues work) with its launches in `mode`: their
    /// `CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT` and, for `Staged`, the
    /// one-row GEMV they take. Graph capture records the attribute with each launch.
    pub fn with_small_call<R>(&self, mode: SmallCall, f: impl FnOnce() -> R) -> R {
        let before = self.small_call.swap(mode as u8, Ordering::Relaxed);
        let r = f();
        self.small_call.store(before, Ordering::Relaxed);
        r
    }

    /// The mode of a call of `rows` rows in a stage whose calls of at most `max_l1_rows`
    /// ask for the most L1 and whose one-row calls take the staged GEMV when `staged` (and
    /// this device runs it; else they ask for the most L1 like the others); with `staged`,
    /// calls of at most `staged_mma_rows` rows also take the staged MMA.
    pub fn small_call_for(
        &self,
        rows: usize,
        max_l1_rows: usize,
        (staged, staged_mma_rows): (bool, usize),
    ) -> SmallCall {
        if staged && self.staged && rows <= staged_mma_rows {
            SmallCall::StagedMma
        } else if staged && self.staged && rows == 1 {
            SmallCall::Staged
        } else if rows <= max_l1_rows {
            SmallCall::MaxL1
        } else {
            SmallCall::Default
        }
    }

    /// Whether one-row GEMVs enqueued now take `gemv_staged.cu` (where the shape fits).
    pub fn staged_gemv(&self) -> bool {
        self.staged && matches!(self.small_call(), SmallCall::Staged | SmallCall::StagedMma)
    }

    /// Whether linear layers of two rows and more enqueued now take `mma_staged.cu`
    /// (where the shape fits).
    pub fn staged_mma(&self) -> bool {
        self.staged && self.small_call() == SmallCall::StagedMma
    }

    fn small_call(&self) -> SmallCall {
        SmallCall::from_u8(self.small_call.load(Ordering::Relaxed))
    }

    /// `launch` with `smem` bytes of dynamic shared memory per block.
    pub fn launch_with(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        self.launch_ex(name, grid, block, (smem, None), None, args)
    }

    /// `launch_with` in thread-block clusters of `cluster` blocks along x (sm_90).
    pub fn launch_cluster(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        cluster: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        self.launch_ex(name, grid, block, (smem, Some(cluster)), None, args)
    }

    /// `launch_with` (in clusters of `cluster` blocks when given) of a kernel that streams
    /// the `weights` (address, bytes): inside [`Gpu::with_l2_persist`] a share of those
    /// bytes is kept in L2's persisting set-aside (`l2_persist_ratio`).
    #[allow(clippy::too_many_arguments)]
    pub fn launch_reading(
        &self,
        weights: (u64, usize),
        name: &'static str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        cluster: Option<u32>,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        self.launch_ex(name, grid, block, (smem, cluster), Some(weights), args)
    }

    /// Reserves L2 for persisting accesses (the device's most, `CU_LIMIT_PERSISTING_L2_CACHE_SIZE`)
    /// and sets [`Gpu::l2_persist_ratio`] so that `resident_bytes` of weights read inside
    /// [`Gpu::with_l2_persist`] fill it. Returns the bytes set aside (0: not supported).
    pub fn reserve_l2_for(&mut self, resident_bytes: usize) -> Result<usize, CudaError> {
        let most = self.ctx.attribute(
            dsys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
        )?;
        let window = self.ctx.attribute(
            dsys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE,
        )?;
        if most <= 0 || window <= 0 || resident_bytes == 0 {
            return Ok(0);
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: sets a limit of the context bound to this thread; no pointers involved.
        unsafe {
            dsys::cuCtxSetLimit(
                dsys::CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE,
                most as usize,
            )
        }
        .result()?;
        self.l2_persist_ratio = (most as f32 / resident_bytes as f32).min(1.0);
        self.l2_window_max = window as usize;
        Ok(most as usize)
    }

    /// Runs `f` with the weight reads of its `launch_reading` launches marked persisting in
    /// L2 for a share `l2_persist_ratio` of their lines (the rest streaming), when a share
    /// was reserved (`reserve_l2_for`).
    pub fn with_l2_persist<R>(&self, f: impl FnOnce() -> R) -> R {
        let before = self.l2_persist_on.swap(true, Ordering::Relaxed);
        let r = f();
        self.l2_persist_on.store(before, Ordering::Relaxed);
        r
    }

    fn launch_ex(
        &self,
        name: &'static str,
        grid: (u32, u32, u32),
        block: u32,
        (smem, cluster): (u32, Option<u32>),
        weights: Option<(u64, usize)>,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        let (f, pdl_ready) = self.funcs.get(name).ok_or(CudaError::MissingKernel(name))?;
        if self.without.iter().any(|w| name.starts_with(w.as_str())) {
            return Ok(());
        }
        if args.len() > MAX_ARGS {
            return Err(CudaError::Shape(format!(
                "{name}: {} arguments, at most {MAX_ARGS}",
                args.len()
            )));
        }
        // Every argument is at most 8 bytes, kept in its own 8-byte cell in declaration
        // order; the driver reads each through its pointer, by the kernel's parameter types.
        let mut cells = [0u64; MAX_ARGS];
        for (c, a) in cells.iter_mut().zip(args) {
            *c = match *a {
                Arg::P(p) => p,
                Arg::I(i) => u64::from(i as u32),
                Arg::F(x) => u64::from(x.to_bits()),
            };
        }
        let mut params: [*mut std::ffi::c_void; MAX_ARGS] = [std::ptr::null_mut(); MAX_ARGS];
        for (p, c) in params.iter_mut().zip(cells.iter_mut()) {
            *p = c as *mut u64 as *mut std::ffi::c_void;
        }
        // SAFETY: a plain-old-data C union; zero is a valid bit pattern for it.
        let mut attrs: [dsys::CUlaunchAttribute; 4] = unsafe { std::mem::zeroed() };
        let mut count = 0;
        if self.pdl && *pdl_ready {
            let a = &mut attrs[count];
            a.id = dsys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            a.value.programmaticStreamSerializationAllowed = 1;
            count += 1;
        }
        if let Some(c) = cluster {
            let a = &mut attrs[count];
            a.id = dsys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            a.value.clusterDim.x = c;
            a.value.clusterDim.y = 1;
            a.value.clusterDim.z = 1;
            count += 1;
        }
        // MaxL1: kernels with dynamic shared memory or clusters (the tensor-core linear
        // layers) keep the split they ask for; Staged: all but cluster kernels ask for the
        // most shared memory
        let carveout = match self.small_call() {
            SmallCall::MaxL1 if smem == 0 && cluster.is_none() => Some(0),
            SmallCall::Staged | SmallCall::StagedMma if cluster.is_none() => Some(100),
            _ => None,
        };
        if let Some(carveout) = carveout {
            let a = &mut attrs[count];
            a.id = dsys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
            a.value.sharedMemCarveout = carveout;
            count += 1;
        }
        if let Some((ptr, bytes)) = weights
            .filter(|_| self.l2_persist_ratio > 0.0 && self.l2_persist_on.load(Ordering::Relaxed))
        {
            let a = &mut attrs[count];
            a.id = dsys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
            a.value.accessPolicyWindow = dsys::CUaccessPolicyWindow {
                base_ptr: ptr as *mut std::ffi::c_void,
                num_bytes: bytes.min(self.l2_window_max),
                hitRatio: self.l2_persist_ratio,
                hitProp: dsys::CUaccessProperty::CU_ACCESS_PROPERTY_PERSISTING,
                missProp: dsys::CUaccessProperty::CU_ACCESS_PROPERTY_STREAMING,
            };
            count += 1;
        }
        let cfg = dsys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem,
            hStream: self.stream.cu_stream(),
            attrs: if count > 0 {
                attrs.as_mut_ptr()
            } else {
                std::ptr::null_mut()
            },
            numAttrs: count as u32,
        };
        self.ctx.bind_to_thread()?;
        // SAFETY: every kernel's argument list is matched by its launcher (pointer / int /
        // float in declaration order, each read from its own live 8-byte cell), the
        // pointers are live device allocations sized per the kernel's documented shape
        // contract, and `cfg`, `attrs` and the cells outlive this synchronous call.
        unsafe {
            dsys::cuLaunchKernelEx(
                &cfg,
                f.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()?;
        Ok(())
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

/// An instantiated CUDA graph of work on the device's stream, which may move between
/// threads with its owner.
pub struct Graph(CudaGraph);

// SAFETY: CUDA requires graph objects to be used by one thread at a time; every owner keeps
// its graphs behind `&mut self` (the backend, the codec), so each use is serialised, and
// `launch` binds the context to whichever thread calls it.
unsafe impl Send for Graph {}

impl Graph {
    /// Records what `enqueue` puts on `gpu`'s stream (without running it) as a graph.
    pub fn capture(
        gpu: &Gpu,
        enqueue: impl FnOnce(&Gpu) -> Result<(), CudaError>,
    ) -> Result<Self, CudaError> {
        gpu.stream
            .begin_capture(dsys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let enq = enqueue(gpu);
        let g = gpu.stream.end_capture(dsys::CUgraphInstantiate_flags(0))?;
        enq?;
        let g = g.ok_or_else(|| CudaError::Driver("graph capture produced no graph".into()))?;
        g.upload()?;
        Ok(Self(g))
    }

    /// Replays the graph on the stream it was captured from.
    pub fn launch(&self) -> Result<(), CudaError> {
        self.0.launch()?;
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

    #[test]
    fn sampler_blocks_halve_past_one_row_per_multiprocessor() {
        assert_eq!(sampler_threads(1, 132), SAMPLER_THREADS);
        assert_eq!(sampler_threads(132, 132), SAMPLER_THREADS);
        assert_eq!(sampler_threads(133, 132), SAMPLER_THREADS / 2);
        assert_eq!(sampler_threads(192, 132), SAMPLER_THREADS / 2);
    }
}
