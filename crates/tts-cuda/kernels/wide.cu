// wide.cu — batched linear layers of up to 64 rows on tensor cores in one launch, the
// RMSNorm and the epilogue fused, each row's result independent of the batch:
//   y[m][n] = epilogue( inv[m] · Σ_k (g ⊙ x)[m][k] · W[n][k] ),  inv[m] = 1/rms(x[m]) or 1
// Meant for the batches a loaded server runs (17..64 rows), where mma.cu re-reads the
// input rows from L2 for every 16 outputs and cuBLAS takes 2-3 launches a layer.
//
// Grid (S, N / NB), 256 threads, NB = 128 RG, clusters of S blocks along x (S = 1: no
// cluster): block (s, by) owns the outputs by NB .. +NB - 1 (warp w: by NB + 16 RG w ..
// +16 RG - 1, RG groups of 16 rows of W) and the K slice [s Kb, (s+1) Kb), Kb = K / S (a
// multiple of 32). S depends on the shape only (`routing::wide_split`); the built entries
// take RG = 1.
// * Weights: each lane streams 16-byte pieces of its rows straight into mma.m16n8k16 A
//   fragments, WIDE_U 32-wide chunks ahead (in a chunk, lane group tig holds physical
//   k = tig*8 .. +7, for W and x alike, as mma.cu); the first chunks are loaded before the
//   PDL wait (weights do not depend on earlier kernels).
// * Rows: the block copies its slice of the rows (padded to 8 MT) into shared memory with
//   cp.async, `cps` chunks at a time (the next piece's copies in flight while the warps
//   multiply the current one), and each thread turns its own entries into bf16 hi + lo
//   parts of g ⊙ x in fragment order (both multiplied: f32-level products, as mma.cu):
//   every warp reads them from there, conflict-free, and no warp re-reads them from L2.
// * Norm: Σ x² of each row per 32-wide chunk (each lane's 8 squares in order, then the
//   row's 4 lanes in a fixed order), the chunks added in order: the same for any batch.
// * Sums: each output runs over its slice's chunks in order. S = 1: the warps store through
//   linear_store. S > 1: each block puts its partial tile (and Σ x² partials) in shared
//   memory, and after a cluster barrier block s finishes every S-th share of the tile's
//   outputs, adding the S blocks' partials (distributed shared memory) in rank order.
// No sum mixes rows and none depends on M, so a row's result is the same in any batch.
// On the H200 it is slower than cuBLAS at 17..64 rows (the cluster sum dominates), so the
// backend runs it only when asked (bench/results/2026-12-02-h200-wide).

#define WIDE_WARPS 8
#define WIDE_U 4
#define WIDE_MAX_SPLITS 8  // blocks per cluster (routing::wide_split)

// Where entry q of a warp's mma fragment (row group r, row tile t) lies: its output row
// within the warp's 16 RG, and its batch row.
__device__ __forceinline__ int wide_frag_n(int r, int q, int g) {
    return 16 * r + g + (q >= 2 ? 8 : 0);
}
__device__ __forceinline__ int wide_frag_m(int t, int q, int tig) {
    return t * 8 + tig * 2 + (q & 1);
}

// acc[r][t] += the k-step `half` (0: k = tig*8 + 0..3, 1: + 4..7) of weights w[r] times
// rows x[t], issued across the accumulators so neighbouring MMAs are independent.
template <int MT, int RG>
__device__ __forceinline__ void wide_mma_step(float (&acc)[RG][MT][4], const uint4 (&w)[RG][2],
                                              const uint4 (&x)[MT], int half) {
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int r = 0; r < RG; r++) {
            if (half == 0)
                mma_bf16(acc[r][t], w[r][0].x, w[r][1].x, w[r][0].y, w[r][1].y, x[t].x, x[t].y);
            else
                mma_bf16(acc[r][t], w[r][0].z, w[r][1].z, w[r][0].w, w[r][1].w, x[t].z, x[t].w);
        }
}

template <int MT, int RG>
__device__ __forceinline__ void wide_linear_body(
    const bf16* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,
    const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,
    const float* res, int ldr, float* Y, int ldy, int M, int cps) {
    // Dynamic shared memory, for pieces of cps chunks (`piece` entries of 8 columns of one
    // row): hl [2][piece] uint4 (hi, lo parts in fragment order), raw [piece][8] f32 (the
    // next piece's rows as copied), gains [2][cps·32] f32, sqc [8 MT][cps] f32 (Σ x² per
    // row and chunk).
    extern __shared__ __align__(16) unsigned char wide_smem[];
    __shared__ float s_sq[MT * 8];
    __shared__ float s_inv[MT * 8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int S = gridDim.x, s = blockIdx.x;  // s is the block's rank in its cluster
    const int Kb = K / S, k0 = s * Kb, chunks = Kb / 32;
    const int nb = blockIdx.y * 128 * RG + warp * 16 * RG;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const int piece = MT * cps * 32;
    uint4* hl = (uint4*)wide_smem;
    float4* raw = (float4*)(wide_smem + (size_t)piece * 32);
    float* gbuf = (float*)(wide_smem + (size_t)piece * 64);
    float* sqc = gbuf + 2 * cps * 32;

    const bf16* wp[RG][2];
#pragma unroll
    for (int r = 0; r < RG; r++) {
        wp[r][0] = W + (size_t)(nb + 16 * r + g) * K + k0 + tig * 8;
        wp[r][1] = wp[r][0] + (size_t)8 * K;
    }
    uint4 wa[WIDE_U][RG][2];
#pragma unroll
    for (int u = 0; u < WIDE_U; u++)
#pragma unroll
        for (int r = 0; r < RG; r++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                wa[u][r][h] = u < chunks ? __ldg((const uint4*)(wp[r][h] + u * 32)) : zero;
    if (threadIdx.x < MT * 8) s_sq[threadIdx.x] = 0.f;
    pdl_wait();

    // Entry e of a piece: row tile t, chunk c of the piece, lane L (row 8 t + L / 4,
    // columns (L % 4)·8 .. +7 of the chunk).
    // The copies of the piece starting at chunk c0 (rows past M and chunks past the
    // slice: zeros) into raw, its gains into gains[buf].
    auto issue = [&](int c0, int buf) {
        for (int e = threadIdx.x; e < piece; e += blockDim.x) {
            const int t = e / (cps * 32), rem = e - t * cps * 32, c = rem >> 5, L = rem & 31;
            const int m = t * 8 + (L >> 2), k = k0 + (c0 + c) * 32 + (L & 3) * 8;
            const bool ok = m < M && c0 + c < chunks;
            const float* src = ok ? X + (size_t)m * ldx + k : X;
            cp_async16(smem_addr(raw + 2 * e), src, ok ? 16 : 0);
            cp_async16(smem_addr(raw + 2 * e + 1), src + 4, ok ? 16 : 0);
        }
        if (norm_w) {
            for (int q = threadIdx.x; q < cps * 8; q += blockDim.x) {
                const bool ok = (c0 * 32 + q * 4) < Kb;
                const float* src = ok ? norm_w + k0 + c0 * 32 + q * 4 : norm_w;
                cp_async16(smem_addr(gbuf + buf * cps * 32 + q * 4), src, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };
    // raw (this thread's own entries) -> hl as hi + lo parts of g ⊙ x, and each (row,
    // chunk)'s Σ x²: the lane's 8 squares in order, then the 4 lanes of the row in a
    // fixed order (none of it depends on the piece size or M).
    auto convert = [&](int buf) {
        for (int e = threadIdx.x; e < piece; e += blockDim.x) {
            const int t = e / (cps * 32), rem = e - t * cps * 32, c = rem >> 5, L = rem & 31;
            const float4 a = raw[2 * e], b = raw[2 * e + 1];
            float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            if (norm_w) {
                float q = 0.f;
#pragma unroll
                for (int i = 0; i < 8; i++) q = fmaf(v[i], v[i], q);
                q += __shfl_xor_sync(0xffffffffu, q, 1);
                q += __shfl_xor_sync(0xffffffffu, q, 2);
                if ((L & 3) == 0) sqc[(t * 8 + (L >> 2)) * cps + c] = q;
                const float4* gp = (const float4*)(gbuf + buf * cps * 32 + c * 32 + (L & 3) * 8);
                const float4 ga = gp[0], gb = gp[1];
                const float gv[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] *= gv[i];
            }
            unsigned int hw[4], lw[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const bf16 h0 = f2bf(v[2 * i]), h1 = f2bf(v[2 * i + 1]);
                const bf16 l0 = f2bf(v[2 * i] - bf2f(h0)), l1 = f2bf(v[2 * i + 1] - bf2f(h1));
                hw[i] = (unsigned int)h0 | ((unsigned int)h1 << 16);
                lw[i] = (unsigned int)l0 | ((unsigned int)l1 << 16);
            }
            hl[e] = make_uint4(hw[0], hw[1], hw[2], hw[3]);
            hl[piece + e] = make_uint4(lw[0], lw[1], lw[2], lw[3]);
        }
    };
    // Adds the chunks of the piece at c0 to each row's Σ x², in chunk order.
    auto add_sq = [&](int c0) {
        if (norm_w && threadIdx.x < M) {
            const int np = min(cps, chunks - c0);
            float a = s_sq[threadIdx.x];
            for (int c = 0; c < np; c++) a += sqc[threadIdx.x * cps + c];
            s_sq[threadIdx.x] = a;
        }
    };
    issue(0, 0);
    cp_async_wait<0>();
    __syncthreads();  // every copy of the piece, the gains included, has landed
    convert(0);
    if (cps < chunks) issue(cps, 1);  // the next piece's copies run under this one's work
    __syncthreads();
    add_sq(0);

    float acc[RG][MT][4];
#pragma unroll
    for (int r = 0; r < RG; r++)
#pragma unroll
        for (int t = 0; t < MT; t++) acc[r][t][0] = acc[r][t][1] = acc[r][t][2] = acc[r][t][3] = 0.f;

    for (int c0 = 0; c0 < chunks; c0 += WIDE_U) {
#pragma unroll
        for (int u = 0; u < WIDE_U; u++) {
            const int c = c0 + u;
            if (c >= chunks) break;  // uniform over the block
            const int cl = c % cps;
            if (cl == 0 && c > 0) {
                const int p = c / cps;
                __syncthreads();  // every warp is done with the previous piece
                cp_async_wait<0>();
                __syncthreads();  // this piece's copies (gains too) have landed
                convert(p & 1);
                if (c + cps < chunks) issue(c + cps, (p + 1) & 1);
                __syncthreads();
                add_sq(c);
            }
            uint4 xh[MT], xl[MT];
#pragma unroll
            for (int t = 0; t < MT; t++) {
                xh[t] = hl[t * cps * 32 + cl * 32 + lane];
                xl[t] = hl[piece + t * cps * 32 + cl * 32 + lane];
            }
            // per accumulator: hi k-step 0, hi k-step 1, lo k-step 0, lo k-step 1 (as
            // mma_chunk)
            wide_mma_step<MT, RG>(acc, wa[u], xh, 0);
            wide_mma_step<MT, RG>(acc, wa[u], xh, 1);
            wide_mma_step<MT, RG>(acc, wa[u], xl, 0);
            wide_mma_step<MT, RG>(acc, wa[u], xl, 1);
            // this register slot takes chunk c + WIDE_U
            const int cn = c + WIDE_U;
#pragma unroll
            for (int r = 0; r < RG; r++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    wa[u][r][h] = cn < chunks ? __ldg((const uint4*)(wp[r][h] + cn * 32)) : zero;
        }
    }
    // The next kernel may start arriving once the weights are streamed.
    pdl_trigger();
    __syncthreads();  // s_sq is complete

    // lane holds D[n][m] for n = nb + wide_frag_n(r, q, g), m = wide_frag_m(t, q, tig).
    // S > 1: each block's partial tile, pt[n - by NB][m] (stride 8 MT + 1), over the staging
    // space (every warp is past its last read of it: the barrier above).
    constexpr int LD = MT * 8 + 1;
    float* pt = (float*)wide_smem;
#if __CUDA_ARCH__ >= 900
    if (S > 1) {
#pragma unroll
        for (int r = 0; r < RG; r++)
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    pt[(warp * 16 * RG + wide_frag_n(r, q, g)) * LD + wide_frag_m(t, q, tig)] =
                        acc[r][t][q];
        cluster_sync_all();  // every block's partials (and Σ x²) are in place
    }
#endif
    // each row's 1/rms, from the Σ x² of its slices in rank order
    if (norm_w && threadIdx.x < M) {
        float t = s_sq[threadIdx.x];
#if __CUDA_ARCH__ >= 900
        if (S > 1) {
            const unsigned a = smem_addr(s_sq + threadIdx.x);
            float v[WIDE_MAX_SPLITS];
#pragma unroll
            for (int p = 0; p < WIDE_MAX_SPLITS; p++)
                if (p < S) v[p] = ld_cluster_rank(a, p);
            t = 0.f;
#pragma unroll
            for (int p = 0; p < WIDE_MAX_SPLITS; p++)
                if (p < S) t += v[p];
        }
#endif
        s_inv[threadIdx.x] = 1.0f / sqrtf(div_by_count(t, K) + eps);
    }
    __syncthreads();
    if (S == 1) {
#pragma unroll
        for (int r = 0; r < RG; r++)
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const float v = acc[r][t][q];
                    // the up row of a SwiGLU pair (n, n+1) is held by lane + 4
                    const float up = __shfl_down_sync(0xffffffffu, v, 4);
                    const int n = nb + wide_frag_n(r, q, g), m = wide_frag_m(t, q, tig);
                    if (m >= M || (act == 2 && (g & 1))) continue;
                    const float inv = norm_w ? s_inv[m] : 1.f;
                    linear_store(v * inv, up * inv, n, m, act, bias, res, ldr, Y, ldy);
                }
        return;
    }
#if __CUDA_ARCH__ >= 900
    const unsigned pbase = smem_addr(pt);
    const int NB = 128 * RG, n0 = blockIdx.y * NB;
    const int per = act == 2 ? NB / 2 : NB;
    for (int e = s * blockDim.x + threadIdx.x; e < per * M; e += S * blockDim.x) {
        const int m = e / per, j = e - m * per;
        const int nl = act == 2 ? 2 * j : j;
        const unsigned a = pbase + (unsigned)(nl * LD + m) * 4;
        // every rank's value first (the loads overlap), then the sum in rank order
        float pv[WIDE_MAX_SPLITS], pu[WIDE_MAX_SPLITS];
#pragma unroll
        for (int p = 0; p < WIDE_MAX_SPLITS; p++) {
            if (p < S) {
                pv[p] = ld_cluster_rank(a, p);
                pu[p] = act == 2 ? ld_cluster_rank(a + LD * 4, p) : 0.f;
            }
        }
        float v = 0.f, up = 0.f;
#pragma unroll
        for (int p = 0; p < WIDE_MAX_SPLITS; p++) {
            if (p < S) {
                v += pv[p];
                up += pu[p];
            }
        }
        const float inv = norm_w ? s_inv[m] : 1.f;
        linear_store(v * inv, up * inv, n0 + nl, m, act, bias, res, ldr, Y, ldy);
    }
    cluster_sync_all();  // every block's partials stay until the whole cluster has read them
#endif
}

#define WIDE_ENTRY(MT, RG)                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 2) wide_linear_t##MT##_r##RG(               \
        const bf16* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,         \
        const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,  \
        const float* res, int ldr, float* Y, int ldy, int M, int cps) {                         \
        wide_linear_body<MT, RG>(W, N, K, X, ldx, norm_w, eps, bias, act, res, ldr, Y, ldy, M, \
                                 cps);                                                          \
    }

// two blocks per multiprocessor (at most 128 registers): 8 warps alone leave every
// scheduler idle most cycles (Nsight Compute: 0.18 issued per cycle)
WIDE_ENTRY(2, 1)
WIDE_ENTRY(4, 1)
WIDE_ENTRY(8, 1)
