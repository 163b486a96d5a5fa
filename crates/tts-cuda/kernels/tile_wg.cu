// tile_wg.cu — tile.cu's batched linear layers with the products on Hopper's warpgroup
// tensor-core instructions (wgmma, sm_90a only): the same grid, shared-memory tiles and
// pipeline (tile.cu's tile_load and tile_prologue; four stages instead of three up to 24
// rows, and a 24-row entry of its own), the same outputs per rank, summing order and
// epilogue. What differs:
//   the multiply: warpgroup g (threads 128 g .. +127) multiplies the weight rows
//   64 g .. +63 of each k-tile (A: 64 × 64, K-major) by all 16 MT row slots (B: the 8 MT hi
//   then 8 MT lo rows, K-major), four k16 steps, accumulating in f32 registers; at the end
//   each thread adds its hi and lo columns of a row (same registers, no exchange);
//   the reduction: each block pushes those partial sums into the inbox of the block that
//   finishes them (distributed shared memory stores, one cluster barrier), where tile.cu's
//   blocks pull them with remote loads after one barrier and wait at a second before
//   exiting (Nsight Compute: most of tile.cu's time at 32-64 rows).
// So a row's result is a sum of two f32 dot products over the block's K range (hi parts,
// lo parts) instead of tile.cu's interleaved one: the same products, summed in another
// order (within f32 rounding of tile.cu; not bit-identical); it still does not depend on
// the other rows or on M.
//
// The shared-memory tiles (rows of 128 bytes, chunk c of row r at chunk c ^ (r & 7)) are
// exactly wgmma's 128-byte-swizzled K-major layout: 8-row groups 1024 bytes apart, a k16
// step 32 bytes further along the row. That layout needs every tile at a 1024-byte
// boundary, so the pipeline starts at the first such boundary of the dynamic shared memory
// (the host asks for 1024 bytes more than tile.cu, and for the inbox after the pipeline:
// `linear::tile_wg_smem`).
// The copies are cp.async (generic proxy) and wgmma reads through the async proxy: every
// thread fences its completed copies to the async proxy before the barrier that publishes
// a stage.

// Inbox row stride (floats): 128 outputs and one of padding.
#define TILE_WG_LD (TILE_N + 1)
// Pipeline stages by row tiles: 4 for up to 24 rows (two blocks of up to 109 KiB still fit
// a multiprocessor), else tile.cu's 3 (linear::tile_wg_stages).
#define TILE_WG_STAGES(MT) ((MT) <= 3 ? 4 : TILE_STAGES)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes
// apart (stride field), leading offset unused by this layout (1 by convention).
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit_and_wait() {
    asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::
                     : "memory");
}
__device__ __forceinline__ void st_cluster_rank(unsigned a, unsigned rank, float v) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(r), "f"(v) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// d += A · Bᵀ for one k16 step: A = 64 weight rows, B = 16 MT row slots (n = 16 MT).
template <int MT>
__device__ __forceinline__ void wg_mma(float* d, unsigned long long a, unsigned long long b);
template <>
__device__ __forceinline__ void wg_mma<2>(float* d, unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void wg_mma<3>(float* d, unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\nwgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, %24, %25, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
        : "l"(a), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void wg_mma<4>(float* d, unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void wg_mma<8>(float* d, unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(1));
}
#endif

// The chain arguments (linear.rs, `linear_then`): with `ss_in`, the split rows at xb are
// g ⊙ x without the norm's 1 / rms (the layer before wrote them): each output is scaled by
// inv_m = 1 / sqrt(Σ_t ss_in[t][m] / K + eps), t < K / 128, before the epilogue (as
// mma_staged.cu: inv_m · Σ_k x[m][k] g[k] W[n][k]). With `xo`, the stored outputs y are
// also written as the next layer's split rows (`xo_g` ⊙ y, or y; hi rows 0..M, lo rows
// M..2M, width N, or N / 2 with act 2), and with `ss_out` each row's Σ y² over this
// block's 128 outputs goes to ss_out[blockIdx.y][m] (summed in a fixed order), for the
// next layer's inv_m. xo never aliases xb, nor ss_out ss_in.
struct TileChain {
    const float* ss_in;
    float eps;
    bf16* xo;
    const float* xo_g;
    float* ss_out;
};

template <int MT>
__device__ __forceinline__ void tile_wg_body(const bf16* __restrict__ W, int N, int K,
                                             const bf16* __restrict__ xb, int M,
                                             const float* __restrict__ bias, int act,
                                             const float* res, int ldr, float* Y, int ldy,
                                             TileChain ch) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) unsigned char tile_smem[];
    constexpr unsigned STAGE = TILE_N * 128 + 16 * MT * 128;
    constexpr int STAGES = TILE_WG_STAGES(MT);
    static_assert(STAGE % 1024 == 0, "stages on 1024-byte boundaries");
    const unsigned base = (smem_addr(tile_smem) + 1023u) & ~1023u;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = warp >> 2, w = warp & 3;  // warpgroup, warp within it
    const int S = gridDim.x, s = blockIdx.x;  // s is the block's rank in its cluster
    const int n0 = blockIdx.y * TILE_N;
    const int kb = K / S, k0 = s * kb, tiles = kb / TILE_K;

    tile_prologue<MT, STAGES>(base, W, K, n0, k0, tiles, xb, M);

    float d[8 * MT];
#pragma unroll
    for (int i = 0; i < 8 * MT; i++) d[i] = 0.f;

    for (int it = 0; it < tiles; it++) {
        cp_async_wait<STAGES - 2>();
        fence_proxy_async_smem();
        __syncthreads();
        {
            int nt = it + STAGES - 1;
            if (nt < tiles)
                tile_load<MT>(base + (nt % STAGES) * STAGE, W, K, n0, k0 + nt * TILE_K, xb,
                              M, true, true);
            cp_async_commit();
        }
        const unsigned wbuf = base + (it % STAGES) * STAGE + g * 64 * 128;
        const unsigned xbuf = base + (it % STAGES) * STAGE + TILE_N * 128;
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++) wg_mma<MT>(d, wg_desc(wbuf + ks * 32), wg_desc(xbuf + ks * 32));
        wg_commit_and_wait();
    }
    cp_async_wait<0>();
    // Only now may the next kernel's blocks start arriving (as tile.cu).
    pdl_trigger();

    // The partial sums go straight from the registers to the block that finishes them
    // (pushed, not pulled: a remote store does not wait, a remote load does). Register
    // d[4 j + q] holds weight row n = 64 g + 16 w + lane / 4 + 8 (q / 2) and row slot
    // 8 j + 2 (lane % 4) + q % 2; slots j < MT are hi parts, j + MT the lo parts of the same
    // rows, added here. Row m is finished by rank (m / 2) % S, as tile.cu's split of the
    // outputs; there it is local row r = 2 (m / 2 / S) + m % 2 of the inbox, and the inbox
    // holds [sender rank][local row][n] after the pipeline (stride TILE_WG_LD).
    const int rows = M < 8 * MT ? M : 8 * MT;
    const int pairs = (rows + 1) / 2, local_rows = 2 * ((pairs + S - 1) / S);
    const unsigned inbox = base + STAGES * STAGE;
    float* inbox_p = (float*)(tile_smem + (inbox - smem_addr(tile_smem)));
#pragma unroll
    for (int j = 0; j < MT; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int n = 64 * g + 16 * w + (lane >> 2) + 8 * (q >> 1);
            const int m = 8 * j + 2 * (lane & 3) + (q & 1);
            if (m < rows) {
                const int owner = (m >> 1) % S, r = 2 * ((m >> 1) / S) + (m & 1);
                const int i = (s * local_rows + r) * TILE_WG_LD + n;
                const float v = d[4 * j + q] + d[4 * (j + MT) + q];
                if (S > 1)
                    st_cluster_rank(inbox + (unsigned)i * 4, owner, v);
                else
                    inbox_p[i] = v;
            }
        }
    // every partial is in its inbox (release / acquire over the cluster)
    if (S > 1)
        cluster_sync_all();
    else
        __syncthreads();
    // This block's rows: each output summed over the S senders in rank order (as tile.cu),
    // then the epilogue. Local row r is row m = 2 (s + S (r / 2)) + r % 2.
    const int mine_rows = s < pairs ? 2 * ((pairs - s + S - 1) / S) : 0;
    auto row_of = [&](int r) { return 2 * (s + S * (r >> 1)) + (r & 1); };
    __shared__ float s_inv[8 * MT], s_ss[TILE_THREADS / 32];
    if (ch.ss_in) {
        const int parts = K / TILE_N;
        for (int r = threadIdx.x; r < mine_rows; r += TILE_THREADS) {
            const int m = row_of(r);
            float q = 0.f;
            for (int t = 0; t < parts && m < rows; t++) q += ch.ss_in[(size_t)t * M + m];
            s_inv[r] = 1.0f / sqrtf(q / (float)K + ch.eps);
        }
        __syncthreads();
    }
    const int nout = act == 2 ? N / 2 : N;
    // mine_rows is even: every thread takes the same number of passes, the first 128
    // threads a row r, the other 128 row r + 1
    for (int e = threadIdx.x; e < mine_rows * TILE_N; e += TILE_THREADS) {
        const int r = e / TILE_N, n = e - r * TILE_N;
        const int m = row_of(r);
        float o = 0.f;
        // odd n with act 2: the up row of a pair
        if (m < rows && !(act == 2 && (n & 1))) {
            float v = 0.f, up = 0.f;
            for (int p = 0; p < S; p++) {
                const float* a = inbox_p + (p * local_rows + r) * TILE_WG_LD + n;
                v += a[0];
                if (act == 2) up += a[1];
            }
            if (ch.ss_in) {
                v *= s_inv[r];
                up *= s_inv[r];
            }
            o = linear_store(v, up, n0 + n, m, act, bias, res, ldr, Y, ldy);
            if (ch.xo) {
                const int col = act == 2 ? (n0 + n) / 2 : n0 + n;
                split_store(ch.xo, nout, M, m, col, ch.xo_g ? ch.xo_g[col] * o : o);
            }
        }
        if (ch.ss_out) {
            const float q = warp_sum(o * o);
            if (lane == 0) s_ss[warp] = q;
            __syncthreads();
            if ((threadIdx.x & (TILE_N - 1)) == 0 && m < rows) {
                const float* w4 = s_ss + (threadIdx.x >> 5);
                ch.ss_out[(size_t)blockIdx.y * M + m] = ((w4[0] + w4[1]) + w4[2]) + w4[3];
            }
            __syncthreads();
        }
    }
    // no block reads another's shared memory after the barrier: nothing to wait for
#endif
}

// tile.cu's entry point arguments, then the chain's (TileChain, in its order).
#define TILE_WG_KERNEL(MT)                                                                      \
    extern "C" __global__ void __launch_bounds__(TILE_THREADS) tile_wg_linear_t##MT(            \
        const bf16* __restrict__ W, int N, int K, const bf16* __restrict__ xb, int M,           \
        const float* __restrict__ bias, int act, const float* res, int ldr, float* Y, int ldy, \
        const float* ss_in, float eps, bf16* xo, const float* xo_g, float* ss_out) {            \
        tile_wg_body<MT>(W, N, K, xb, M, bias, act, res, ldr, Y, ldy,                           \
                         TileChain{ss_in, eps, xo, xo_g, ss_out});                              \
    }

TILE_WG_KERNEL(2)
TILE_WG_KERNEL(3)
TILE_WG_KERNEL(4)
TILE_WG_KERNEL(8)
