// tile.cu — batched linear layers of up to 64 rows on tensor cores, the weights streamed
// through a shared-memory pipeline and K split over the blocks of a thread-block cluster:
//   y[m][n] = epilogue( sum_k x[m][k] * W[n][k] )
// after to_bf16_rows (ops.cu) has written the input rows as bf16 hi + lo parts (rows 0..M
// hi, rows M..2M lo; both multiplied, so the products keep f32-level accuracy, as mma.cu).
// Same epilogue as gemv.cu (linear_store). Needs N % 128 == 0 and (K / S) % 64 == 0.
//
// Grid (S, N / 128), 256 threads, clusters of S blocks along x (S = 1: no cluster). Block
// (s, by) owns outputs n0 = 128 by .. +127 and the K range [s K/S, (s+1) K/S), walked in
// 64-wide tiles: each tile's weights (128 × 64) and rows (8 MT hi + 8 MT lo, 64 wide) are
// copied into shared memory by cp.async, TILE_STAGES - 1 tiles ahead (the weight copies of
// the first tiles are issued before the PDL wait: they do not depend on earlier kernels;
// the next kernel may launch once the main loop is done).
// Warp w multiplies outputs 32 (w & 3) .. +31 over the 16-wide k steps 2 (w >> 2) and +1
// of every tile; the two K halves meet in shared memory. Then each block of the cluster
// sums a share of the 128 × M outputs over the S blocks' partial tiles (distributed shared
// memory), in the order s = 0, 1, ..., and runs the epilogue. S depends on the shape only
// and no sum mixes rows, so a row's result never depends on M or on the other rows.
//
// Shared-memory rows are 64 bf16 (128 bytes, 8 chunks of 16 bytes); chunk c of row r is
// stored at chunk c ^ (r & 7), so the 8 rows an ldmatrix reads hit 8 different banks.

#define TILE_N 128
#define TILE_K 64
#define TILE_STAGES 3
#define TILE_THREADS 256
#define TILE_MAX_SPLITS 8  // blocks per cluster (routing::tile_split)

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned& r0, unsigned& r1,
                                            unsigned& r2, unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// Byte offset of chunk c of row r in a swizzled tile.
__device__ __forceinline__ unsigned tile_off(int r, int c) {
    return (unsigned)(r * 128 + ((c ^ (r & 7)) << 4));
}

// Issues the copies of the k-tile at `kt` into stage buffer `buf`: the weights (`w`) and
// the rows (`x`: 16 MT slots after the weights, hi parts then lo parts).
template <int MT>
__device__ __forceinline__ void tile_load(unsigned buf, const bf16* W, int K, int n0, int kt,
                                          const bf16* xb, int M, bool w, bool x) {
    const int tid = threadIdx.x;
    if (w) {
#pragma unroll
        for (int i = 0; i < TILE_N * 8 / TILE_THREADS; i++) {
            int q = tid + i * TILE_THREADS, r = q >> 3, c = q & 7;
            cp_async16(buf + tile_off(r, c), W + (size_t)(n0 + r) * K + kt + c * 8, 16);
        }
    }
    if (x) {
        const unsigned xs = buf + TILE_N * 128;
        // 16 MT rows of 8 chunks: whole passes of the block, and half of one more for
        // an odd MT (tile_wg.cu's 24 rows)
        constexpr int CHUNKS = 16 * MT * 8;
#pragma unroll
        for (int i = 0; i < (CHUNKS + TILE_THREADS - 1) / TILE_THREADS; i++) {
            int q = tid + i * TILE_THREADS, r = q >> 3, c = q & 7;
            if (CHUNKS % TILE_THREADS != 0 && q >= CHUNKS) break;
            int m = r < 8 * MT ? r : r - 8 * MT;
            bool ok = m < M;
            int src = ok ? (r < 8 * MT ? m : M + m) : 0;
            cp_async16(xs + tile_off(r, c), xb + (size_t)src * K + kt + c * 8, ok ? 16 : 0);
        }
    }
}
#endif

#if __CUDA_ARCH__ >= 900
// The first STAGES - 1 stages of a block's pipeline: their weights before the PDL wait,
// their rows after it (one commit group per stage after the weights' group). Shared by
// tile.cu and tile_wg.cu.
template <int MT, int STAGES>
__device__ __forceinline__ void tile_prologue(unsigned base, const bf16* W, int K, int n0,
                                              int k0, int tiles, const bf16* xb, int M) {
    constexpr unsigned STAGE = TILE_N * 128 + 16 * MT * 128;
#pragma unroll
    for (int t = 0; t < STAGES - 1; t++)
        if (t < tiles)
            tile_load<MT>(base + t * STAGE, W, K, n0, k0 + t * TILE_K, xb, M, true, false);
    cp_async_commit();
    pdl_wait();
#pragma unroll
    for (int t = 0; t < STAGES - 1; t++) {
        if (t < tiles)
            tile_load<MT>(base + t * STAGE, W, K, n0, k0 + t * TILE_K, xb, M, false, true);
        cp_async_commit();
    }
}

// The block's partial tile is in shared memory (out[n][m], stride 8 MT + 1, at the start of
// the dynamic shared memory): block s of the cluster finishes the outputs e = m · 128 + n
// with e / 256 ≡ s (mod S), each summed over the S partial tiles in rank order, and runs
// the epilogue.
template <int MT>
__device__ __forceinline__ void tile_reduce_store(int s, int S, int M, int n0, int act,
                                                  const float* __restrict__ bias,
                                                  const float* res, int ldr, float* Y, int ldy) {
    extern __shared__ __align__(128) unsigned char tile_smem[];
    float* out = (float*)tile_smem;
    constexpr int LD = 8 * MT + 1;
    if (S > 1) cluster_sync_all();
    const int rows = M < 8 * MT ? M : 8 * MT;
    const unsigned obase = smem_addr(out);
    for (int e0 = s * TILE_THREADS; e0 < TILE_N * rows; e0 += S * TILE_THREADS) {
        const int e = e0 + threadIdx.x;
        const int m = e / TILE_N, n = e - m * TILE_N;
        const bool mine = m < rows && !(act == 2 && (n & 1));  // odd n: the up row of a pair
        if (mine) {
            // every rank's value loaded first (the loads overlap), then summed in rank order
            float pv[TILE_MAX_SPLITS], pu[TILE_MAX_SPLITS];
            const unsigned a = obase + (unsigned)(n * LD + m) * 4;
#pragma unroll
            for (int p = 0; p < TILE_MAX_SPLITS; p++) {
                if (p < S) {
                    pv[p] = S > 1 ? ld_cluster_rank(a, p) : out[n * LD + m];
                    pu[p] = act != 2 ? 0.f : S > 1 ? ld_cluster_rank(a + LD * 4, p) : out[(n + 1) * LD + m];
                }
            }
            float v = 0.f, up = 0.f;
#pragma unroll
            for (int p = 0; p < TILE_MAX_SPLITS; p++) {
                if (p < S) {
                    v += pv[p];
                    up += pu[p];
                }
            }
            linear_store(v, up, n0 + n, m, act, bias, res, ldr, Y, ldy);
        }
    }
    // every block's partial tile stays until the whole cluster has read it
    if (S > 1) cluster_sync_all();
}
#endif

template <int MT>
__device__ __forceinline__ void tile_linear_body(const bf16* __restrict__ W, int N, int K,
                                                 const bf16* __restrict__ xb, int M,
                                                 const float* __restrict__ bias, int act,
                                                 const float* res, int ldr, float* Y,
                                                 int ldy) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char tile_smem[];
    constexpr unsigned STAGE = TILE_N * 128 + 16 * MT * 128;
    const unsigned base = smem_addr(tile_smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nw = warp & 3, kw = warp >> 2;
    const int S = gridDim.x, s = blockIdx.x;  // s is the block's rank in its cluster
    const int n0 = blockIdx.y * TILE_N;
    const int kb = K / S, k0 = s * kb, tiles = kb / TILE_K;

    tile_prologue<MT, TILE_STAGES>(base, W, K, n0, k0, tiles, xb, M);

    float acc[2][MT][4];
#pragma unroll
    for (int f = 0; f < 2; f++)
#pragma unroll
        for (int t = 0; t < MT; t++) acc[f][t][0] = acc[f][t][1] = acc[f][t][2] = acc[f][t][3] = 0.f;

    // ldmatrix lane roles: matrix j = lane >> 3, its row lane & 7
    const int j = lane >> 3, lr = lane & 7;
    for (int it = 0; it < tiles; it++) {
        cp_async_wait<TILE_STAGES - 2>();
        __syncthreads();
        {
            int nt = it + TILE_STAGES - 1;
            if (nt < tiles)
                tile_load<MT>(base + (nt % TILE_STAGES) * STAGE, W, K, n0, k0 + nt * TILE_K, xb,
                              M, true, true);
            cp_async_commit();
        }
        const unsigned wbuf = base + (it % TILE_STAGES) * STAGE, xbuf = wbuf + TILE_N * 128;
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            const int step = kw * 2 + ks;  // 16-wide k step of the tile: chunks 2 step, +1
            unsigned a[2][4];
#pragma unroll
            for (int f = 0; f < 2; f++) {
                int r = nw * 32 + f * 16 + lr + (j & 1) * 8;
                ldmatrix_x4(wbuf + tile_off(r, 2 * step + (j >> 1)), a[f][0], a[f][1], a[f][2],
                            a[f][3]);
            }
#pragma unroll
            for (int t = 0; t < MT; t++) {
                int r = (j < 2 ? 0 : 8 * MT) + t * 8 + lr;
                unsigned h0, h1, l0, l1;
                ldmatrix_x4(xbuf + tile_off(r, 2 * step + (j & 1)), h0, h1, l0, l1);
#pragma unroll
                for (int f = 0; f < 2; f++) {
                    mma_bf16(acc[f][t], a[f][0], a[f][1], a[f][2], a[f][3], h0, h1);
                    mma_bf16(acc[f][t], a[f][0], a[f][1], a[f][2], a[f][3], l0, l1);
                }
            }
        }
    }
    cp_async_wait<0>();
    // Only now may the next kernel's blocks start arriving: launched earlier, they would
    // hold multiprocessors (and their shared memory) that this grid's clusters still need.
    pdl_trigger();
    __syncthreads();

    // The block's 128 × 8 MT partial sums in shared memory (out[n][m], stride 8 MT + 1):
    // the k half 1 first, then half 0 adds its own.
    float* out = (float*)tile_smem;
    constexpr int LD = 8 * MT + 1;
    const int g = lane >> 2, tig = lane & 3;
    for (int half = 1; half >= 0; half--) {
        if (kw == half) {
#pragma unroll
            for (int f = 0; f < 2; f++)
#pragma unroll
                for (int t = 0; t < MT; t++)
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        int n = nw * 32 + f * 16 + g + (q >= 2 ? 8 : 0);
                        int m = t * 8 + tig * 2 + (q & 1);
                        float v = acc[f][t][q];
                        out[n * LD + m] = half == 1 ? v : out[n * LD + m] + v;
                    }
        }
        __syncthreads();
    }
    tile_reduce_store<MT>(s, S, M, n0, act, bias, res, ldr, Y, ldy);
#endif
}

// A kernel NAME<MT> running BODY<MT> (tile.cu's and tile_wg.cu's entry points).
#define TILE_KERNEL(NAME, BODY, MT)                                                             \
    extern "C" __global__ void __launch_bounds__(TILE_THREADS) NAME##MT(                        \
        const bf16* __restrict__ W, int N, int K, const bf16* __restrict__ xb, int M,           \
        const float* __restrict__ bias, int act, const float* res, int ldr, float* Y, int ldy) { \
        BODY<MT>(W, N, K, xb, M, bias, act, res, ldr, Y, ldy);                                  \
    }

TILE_KERNEL(tile_linear_t, tile_linear_body, 2)
TILE_KERNEL(tile_linear_t, tile_linear_body, 4)
TILE_KERNEL(tile_linear_t, tile_linear_body, 8)
