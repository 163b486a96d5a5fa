// mma_cluster.cu — batched linear layers (up to 64 rows) as ONE launch on tensor cores,
// with the RMSNorm prologue and the epilogue of gemv.cu fused (sm_90: thread-block
// clusters and distributed shared memory):
//
//   y[m][n] = epilogue( inv[m] · sum_k W[n][k] · g[k] x[m][k] ),
//   inv[m] = 1 / sqrt(mean_k x[m][k]² + eps)   (inv = 1, g = 1 without a norm)
//
// The norm's per-row scale comes out of the dot product, so each block only needs its
// own K slice of the rows: no separate normalise-and-convert launch (`to_bf16_rows`).
//
// Grid (CS, N / 128) in clusters of CS blocks (launch attribute; CS = 4, 8 or 16, chosen
// by the host so the grid fills the GPU about once). A cluster owns 128 outputs; block
// `rank` of it the K slice [rank·K/CS, (rank+1)·K/CS) (128..=256 wide, a multiple of 32).
// Each block:
//   1. loads its weights (128 outputs × slice, all into registers) and norm gains BEFORE
//      pdl_wait: they do not depend on earlier kernels, so their fetch overlaps the
//      previous launch;
//   2. copies its slice of the M input rows into shared memory (cp.async), then each warp
//      takes whole rows: the slice's sum of squares, g ⊙ x, split as bf16 hi + lo in
//      place (the products keep f32-level accuracy, as in mma.cu);
//   3. warp w owns outputs 16w..16w+15 over the whole slice: mma.m16n8k16 per 32-wide
//      chunk (mma.cu's fragment layout and `mma_chunk`);
//   4. partial sums to shared memory, cluster barrier, then block `rank` finishes outputs
//      [rank·128/CS, (rank+1)·128/CS) for every row: it adds the CS blocks' partials (and
//      their sums of squares) through distributed shared memory in rank order, applies
//      the scale and the epilogue, and writes y; a second barrier keeps every block's
//      shared memory alive until the others have read it.
// The order of every sum is fixed and none depends on M: a row's result never depends on
// the other rows. Rows m >= M write nothing. Needs N % 128 == 0 and K = CS · slice.

#define MC_WARPS 8
#define MC_NT 128
#define MC_MAX_CHUNKS 8  // per warp: slice / 32 <= 8
// padding after each staged row (bytes): 16-byte fragment loads of 8 rows hit distinct banks
#define MC_ROW_PAD 64

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned mc_rank() {
    unsigned r;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void mc_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ unsigned mc_smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned)a;
}

// The shared-memory address `a` of this block, in block `rank` of the cluster.
__device__ __forceinline__ unsigned mc_map(unsigned a, unsigned rank) {
    unsigned r;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}

__device__ __forceinline__ float mc_ld_cluster(unsigned a) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a));
    return v;
}

__device__ __forceinline__ void mc_cp_async16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

template <int MT>
__device__ __forceinline__ void mma_cluster_body(const bf16* __restrict__ W, int N, int K,
                                                 const float* __restrict__ X, int ldx,
                                                 const float* __restrict__ norm_w, float eps,
                                                 const float* __restrict__ bias, int act,
                                                 const float* res, int ldr, float* Y,
                                                 int ldy, int M) {
    constexpr int R = MT * 8;  // staged rows (rows >= M are zero)
    extern __shared__ __align__(16) unsigned char mc_smem[];
    __shared__ float s_ssq[R];
    __shared__ float s_inv[R];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const unsigned rank = mc_rank();
    const int cs = gridDim.x;
    const int slice = K / cs, k0 = (int)rank * slice;
    const int chunks = slice / 32;
    const int n0 = blockIdx.y * MC_NT;
    const int stride = slice * 4 + MC_ROW_PAD;  // bytes per staged row

    // 1. this warp's weight fragments, fetched ahead of the wait
    const bf16* w0 = W + (size_t)(n0 + warp * 16 + g) * K + k0 + tig * 8;
    const bf16* w8 = w0 + (size_t)8 * K;
    uint4 wa[MC_MAX_CHUNKS][2];
#pragma unroll
    for (int i = 0; i < MC_MAX_CHUNKS; i++) {
        if (i < chunks) {
            wa[i][0] = __ldg((const uint4*)(w0 + i * 32));
            wa[i][1] = __ldg((const uint4*)(w8 + i * 32));
        }
    }
    // the norm gains of this lane's slice elements (lane + 32 j), also immutable
    float gv[MC_MAX_CHUNKS];
#pragma unroll
    for (int j = 0; j < MC_MAX_CHUNKS; j++)
        gv[j] = (norm_w && j < chunks) ? __ldg(norm_w + k0 + lane + j * 32) : 1.f;
    pdl_wait();
    pdl_trigger();

    // 2. stage the rows' slice (f32), then normalise-scale and split each row in place
    const unsigned base = mc_smem_addr(mc_smem);
    const int q16 = slice / 4;  // 16-byte pieces per row
    for (int e = threadIdx.x; e < R * q16; e += blockDim.x) {
        int r = e / q16, q = e - r * q16;
        if (r < M) {
            mc_cp_async16(base + r * stride + q * 16, X + (size_t)r * ldx + k0 + q * 4);
        } else {
            *(uint4*)(mc_smem + r * stride + q * 16) = make_uint4(0, 0, 0, 0);
        }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
#pragma unroll
    for (int i = 0; i < MT; i++) {
        const int r = warp + i * MC_WARPS;
        float* xf = (float*)(mc_smem + r * stride);
        bf16* hb = (bf16*)(mc_smem + r * stride);
        float v[MC_MAX_CHUNKS];  // slice / 32 values per lane
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < MC_MAX_CHUNKS; j++) {
            if (j < chunks) {
                v[j] = xf[lane + j * 32];
                ss = fmaf(v[j], v[j], ss);
            }
        }
        ss = warp_sum(ss);
        if (lane == 0) s_ssq[r] = ss;
        __syncwarp();
#pragma unroll
        for (int j = 0; j < MC_MAX_CHUNKS; j++) {
            if (j < chunks) {
                int kk = lane + j * 32;
                float x = norm_w ? gv[j] * v[j] : v[j];
                bf16 hi = f2bf(x);
                hb[kk] = hi;
                hb[slice + kk] = f2bf(x - bf2f(hi));
            }
        }
    }
    __syncthreads();

    // 3. tensor cores over the slice
    float acc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
#pragma unroll
    for (int i = 0; i < MC_MAX_CHUNKS; i++) {
        if (i < chunks) {
            const int kc = i * 32 + tig * 8;  // element within the slice
#pragma unroll
            for (int t = 0; t < MT; t++) {
                const unsigned char* row = mc_smem + (t * 8 + g) * stride;
                uint4 hi = *(const uint4*)(row + kc * 2);
                uint4 lo = *(const uint4*)(row + (slice + kc) * 2);
                mma_chunk(acc[t], wa[i][0], wa[i][1], hi, lo);
            }
        }
    }
    __syncthreads();  // the staged rows are dead: their space holds the partial sums

    // 4. partials [128 outputs][R rows], then the cluster's ordered sum
    float* part = (float*)mc_smem;
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int nl = warp * 16 + g + (q >= 2 ? 8 : 0);
            int m = t * 8 + tig * 2 + (q & 1);
            part[nl * R + m] = acc[t][q];
        }
    mc_cluster_sync();
    const unsigned pbase = mc_smem_addr(part);
    if (threadIdx.x < R) {
        float inv = 1.f;
        if (norm_w) {
            const unsigned sb = mc_smem_addr(s_ssq) + threadIdx.x * 4;
            float ss = 0.f;
            for (int b = 0; b < cs; b++) ss += mc_ld_cluster(mc_map(sb, b));
            inv = 1.0f / sqrtf(div_by_count(ss, K) + eps);
        }
        s_inv[threadIdx.x] = inv;
    }
    __syncthreads();
    const int per = MC_NT / cs;  // outputs this block finishes
    const int pairs = act == 2 ? per / 2 : per;
    for (int e = threadIdx.x; e < pairs * R; e += blockDim.x) {
        const int m = e % R;
        const int nl = (int)rank * per + (act == 2 ? 2 * (e / R) : e / R);
        if (m >= M) continue;
        const unsigned pa = pbase + (nl * R + m) * 4, pu = pa + R * 4;
        float a = 0.f, u = 0.f;
#pragma unroll 4
        for (int b = 0; b < cs; b++) {
            a += mc_ld_cluster(mc_map(pa, b));
            if (act == 2) u += mc_ld_cluster(mc_map(pu, b));
        }
        const float inv = s_inv[m];
        linear_store(a * inv, u * inv, n0 + nl, m, act, bias, res, ldr, Y, ldy);
    }
    mc_cluster_sync();
}
#else
// Older architectures have no clusters: the host never launches these there.
template <int MT>
__device__ __forceinline__ void mma_cluster_body(const bf16*, int, int, const float*, int,
                                                 const float*, float, const float*, int,
                                                 const float*, int, float*, int, int) {
    __trap();
}
#endif

#define MMA_CLUSTER_ENTRY(MT)                                                                   \
    extern "C" __global__ void __launch_bounds__(256) mma_cluster_t##MT(                       \
        const bf16* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,         \
        const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,    \
        const float* res, int ldr, float* Y, int ldy, int M) {                                   \
        mma_cluster_body<MT>(W, N, K, X, ldx, norm_w, eps, bias, act, res, ldr, Y, ldy, M);     \
    }

MMA_CLUSTER_ENTRY(1)
MMA_CLUSTER_ENTRY(2)
MMA_CLUSTER_ENTRY(4)
MMA_CLUSTER_ENTRY(8)
