// common.cuh — shared helpers, prepended to every kernel module (NVRTC has no CUDA headers
// here, so bf16 is handled as raw 16-bit patterns).
//
// Conventions of every kernel in this crate:
//   * weights are bf16 row-major (PyTorch layout), activations are f32 row-major [rows][cols];
//   * batched kernels take `rows_valid`: rows at or past it are padding and write nothing;
//   * per-request state is addressed through a slot index array (`slots[row]`, -1 = none).
typedef unsigned short bf16;

#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float bf2f(bf16 v) { return __uint_as_float(((unsigned int)v) << 16); }

// f32 of an IEEE half bit pattern (the low 16 bits of h).
__device__ __forceinline__ float half_bits_to_f32(unsigned int h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
}

// f32 -> f16 bits, round to nearest even, saturated to the finite range (codec.cu's f16
// columns, gemv8_mma.cu's split rows).
__device__ __forceinline__ unsigned short f2h_sat(float f) {
    unsigned short h;
    f = fminf(fmaxf(f, -65504.0f), 65504.0f);
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// D += A·B on tensor cores, mma.m16n8k16 over f16 operands with f32 accumulation:
// A = 16 rows × 16 k (a0: row g, k 2t..2t+1; a1: row g+8; a2, a3: the same at k + 8),
// B = 16 k × 8 columns (b0: column g, k 2t..2t+1; b1: k + 8), D's entries (row g, columns
// 2t, 2t+1) then (row g+8, ...), for lane = 4g + t (gemv8_mma.cu, codec_gemv_mma.cu).
__device__ __forceinline__ void mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2,
                                        unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// x as f16 bits hi = f16(x) and lo = f16(x - hi), both saturated: ~22 bits of x in two
// halves (gemv8_mma.cu's split rows, codec_gemv_mma.cu's inputs).
__device__ __forceinline__ void f2h_split(float x, unsigned& hi, unsigned& lo) {
    hi = f2h_sat(x);
    lo = f2h_sat(x - half_bits_to_f32(hi));
}

// Round-to-nearest-even f32 -> bf16 (NaN kept quiet).
__device__ __forceinline__ bf16 f2bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}

// The 8 bf16 values packed in a uint4, widened to f32.
__device__ __forceinline__ void unpack8(uint4 u, float* f) {
    f[0] = __uint_as_float(u.x << 16); f[1] = __uint_as_float(u.x & 0xffff0000u);
    f[2] = __uint_as_float(u.y << 16); f[3] = __uint_as_float(u.y & 0xffff0000u);
    f[4] = __uint_as_float(u.z << 16); f[5] = __uint_as_float(u.z & 0xffff0000u);
    f[6] = __uint_as_float(u.w << 16); f[7] = __uint_as_float(u.w & 0xffff0000u);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// warp_sum of three values at once: each the bits warp_sum gives it, the three chains of
// shuffles interleaved (one chain's latency instead of three).
__device__ __forceinline__ void warp_sum3(float& a, float& b, float& c) {
    for (int o = 16; o > 0; o >>= 1) {
        const float sa = __shfl_xor_sync(0xffffffffu, a, o);
        const float sb = __shfl_xor_sync(0xffffffffu, b, o);
        const float sc = __shfl_xor_sync(0xffffffffu, c, o);
        a += sa;
        b += sb;
        c += sc;
    }
}

// t / n (n > 0) with the bits of the IEEE division: one multiply where n is a power of two
// (scaling by 2^-e is exact, or rounds as the division does), the division otherwise.
__device__ __forceinline__ float div_by_count(float t, int n) {
    if ((n & (n - 1)) == 0 && n < (1 << 24)) return t * __int_as_float((127 - (__ffs(n) - 1)) << 23);
    return t / (float)n;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// The linear kernels' output value for output n before the residual, given the bias
// values (b0 = bias[n], b1 = bias[n + 1]; `has_bias` false: none): with act 2, `v` and
// `up` are the sums of the (gate, up) weight rows (n, n+1) and the value is silu(gate)·up;
// otherwise act(v) (act 1: SiLU). The bias comes first.
__device__ __forceinline__ float linear_act(float v, float up, int act, bool has_bias, float b0,
                                            float b1) {
    if (act == 2) {
        if (has_bias) { v += b0; up += b1; }
        return silu(v) * up;
    }
    if (has_bias) v += b0;
    if (act == 1) v = silu(v);
    return v;
}

// The linear kernels' epilogue (gemv.cu, mma.cu, mma_cluster.cu) for output n of row m:
// linear_act, then the residual `res` (which may alias y) added last; act 2 writes
// y[m][n/2]. Returns the value stored.
__device__ __forceinline__ float linear_store(float v, float up, int n, int m, int act,
                                             const float* __restrict__ bias, const float* res,
                                             int ldr, float* Y, int ldy) {
    const bool hb = bias != nullptr;
    float o = linear_act(v, up, act, hb, hb ? bias[n] : 0.f, hb && act == 2 ? bias[n + 1] : 0.f);
    const int col = act == 2 ? n / 2 : n;
    if (res) o += res[(size_t)m * ldr + col];
    Y[(size_t)m * ldy + col] = o;
    return o;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ float block_sum(float v, float* scratch /* >= 33 floats */) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float s = lane < nw ? scratch[lane] : 0.f;
        s = warp_sum(s);
        if (lane == 0) scratch[32] = s;
    }
    __syncthreads();
    return scratch[32];
}

// Max over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ float block_max(float v, float* scratch /* >= 33 floats */) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float s = lane < nw ? scratch[lane] : NEG_INF;
        s = warp_max(s);
        if (lane == 0) scratch[32] = s;
    }
    __syncthreads();
    return scratch[32];
}

// 1 / sqrt(mean(x[0..n)²) + eps) for one row, by the whole block (every thread gets it).
__device__ float row_inv_rms(const float* __restrict__ x, int n, float eps,
                             float* scratch /* >= 33 floats */) {
    float s = 0.f;
    for (int k = threadIdx.x; k < n; k += blockDim.x) s += x[k] * x[k];
    s = block_sum(s, scratch);
    return 1.0f / sqrtf(div_by_count(s, n) + eps);
}

// Value v of column k of row r of the split rows: v = hi + lo, hi = bf16(v) in out row r,
// lo = bf16(v - hi) in out row rows + r.
__device__ __forceinline__ void split_store(bf16* out, int ldo, int rows, int r, int k, float v) {
    const bf16 hi = f2bf(v);
    out[(size_t)r * ldo + k] = hi;
    out[(size_t)(rows + r) * ldo + k] = f2bf(v - bf2f(hi));
}

// Row r of the split rows, by the whole block: v = g ⊙ x / sqrt(mean(x²) + eps), or plain
// x when g is null, split as v = hi + lo with hi = bf16(v) in out row r and lo = bf16(v - hi)
// in out row rows + r (the GEMM then multiplies both and the epilogue adds them). Plain
// loads of x (so not row_inv_rms, whose x is __restrict__ and may be read through the
// non-coherent cache): linear_epilogue (ops.cu) and the attention kernels pass a row their
// own threads have just written.
__device__ void split_row(const float* x, int K, const float* __restrict__ g, float eps,
                          bf16* out, int ldo, int rows, int r) {
    __shared__ float scratch[33];
    float inv = 1.f;
    if (g) {
        float s = 0.f;
        for (int k = threadIdx.x; k < K; k += blockDim.x) s += x[k] * x[k];
        s = block_sum(s, scratch);
        inv = 1.0f / sqrtf(div_by_count(s, K) + eps);
    }
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        split_store(out, ldo, rows, r, k, g ? g[k] * (x[k] * inv) : x[k]);
    }
}

// Programmatic dependent launch (sm_90). The backend launches the kernels of gemv.cu,
// mma.cu, attention.cu, sampling.cu, embed.cu and ops.cu with the PDL attribute, so one may
// start while the previous kernel is still finishing. Each of them calls pdl_wait() before
// it reads anything an earlier kernel or copy wrote, or writes anything (only immutable
// weights may be touched before it), then pdl_trigger() to let the next kernel launch.
// One exception: gemv_staged.cu triggers before its wait when the host says the next
// launch is a linear layer's (which reads only weights before its own wait); never when
// the next is an attention or sampling kernel, which read before their wait what launches
// two or more back wrote and so need their predecessor to have waited.
// Without the attribute both are no-ops.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Asynchronous copies global -> shared (sm_80; tile.cu, wide.cu): the shared-memory address
// of a generic pointer into shared memory; a 16-byte copy (src_bytes 0 fills the
// destination with zeros); closing a group of copies; waiting until at most N groups are
// in flight.
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif
// Thread-block clusters (sm_90): a barrier over every thread of the cluster, with release /
// acquire order for shared memory; and the f32 at shared address `a` (this block's view)
// in block `rank` of the cluster (tile.cu, wide.cu).
#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float ld_cluster_rank(unsigned a, unsigned rank) {
    unsigned r;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(r));
    return v;
}
#endif
// *p, or with CG through L2 only (ld.global.cg): for data other blocks of the same launch
// may have written before a grid barrier (the persistent kernels), which a cached or
// non-coherent load could miss.
template <bool CG, typename T>
__device__ __forceinline__ T ld_cg_if(const T* p) {
    if constexpr (CG) return __ldcg(p);
    else return *p;
}

// Asks for the cache line holding `p` to be brought into L2 (no register is bound).
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
// The same into this multiprocessor's L1 (immutable data only: L1 is not coherent).
__device__ __forceinline__ void prefetch_l1(const void* p) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}
