//! Kernel launches on the device's stream: dynamic shared memory, clusters, PDL, the
//! small-call mode (shared-memory carve-out, staged kernels) and L2 persistence of the
//! weights a launch streams.

use std::sync::atomic::Ordering;

use cudarc::driver::sys as dsys;

use super::{set_dynamic_smem, Arg, Gpu, SmallCall};
use crate::error::CudaError;

/// Most arguments a kernel takes.
const MAX_ARGS: usize = 24;

impl Gpu {
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

    pub(super) fn small_call(&self) -> SmallCall {
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

    pub(super) fn launch_ex(
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
}
