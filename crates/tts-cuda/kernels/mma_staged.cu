// mma_staged.cu — linear layers of 2..many rows on tensor cores, with each block's weight
// tile staged in shared memory before the PDL wait (gemv_staged.cu's idea for more rows):
//   y[m][n] = epilogue( inv_m · sum_k x[m][k] · g[k] · W[n][k] ),   inv_m = 1 (no norm) or
//   1 / sqrt(mean_k x[m][k]² + eps) (the fused RMSNorm; gemv.cu's prologue, epilogue).
//
// Why: inside a code-predictor call of 2-128 rows every layer is a short dependent launch
// (~8-14 µs on cuBLAS, mma.cu, wide.cu or the cluster kernel against ~2-3 µs of weight
// streaming). Here a launch is at most one block per multiprocessor holding its whole
// weight tile (≤ 96 KiB), copied with cp.async while the kernel before still runs, so two
// consecutive launches fit side by side and, after the wait, only the input rows are read
// from memory (L2).
//
// Block b owns weight rows [b·rpb, b·rpb + rpb), rpb a multiple of 16 (RT = rpb / 16
// m16 tiles, at most MS_MAX_RT; rows past N are zeros and store nothing). The rows go in
// groups of 8·MT: for each group, warp w takes the 32-wide K chunks w, w+8, ... (each input
// value is read once per block), converts its rows to bf16 hi + lo parts on the fly (f32-level
// accuracy, as mma.cu's split rows), and multiplies them by every m16 tile of the block
// (mma.cu's fragments and k permutation: lane group tig holds k = tig·8 .. tig·8+7 of a
// chunk, one 16-byte load). The warps' partial sums meet in shared memory and are added in
// warp order, one m16 tile at a time; then gemv.cu's epilogue. A row's result depends on
// that row only (never on M or the other rows).
//
// Tile layout: weight row r's 16-byte chunk j sits at r·(K/8) + (j ^ ((r & 1) << 2)), so
// the two rows a quarter warp reads (g, g+1) fall in different halves of the 128-byte bank
// window (K % 64 == 0).
//
// The trigger follows the wait (gemv_staged.cu's early trigger measured 3-4 % slower
// here). Taken by code-predictor calls of up to CudaOptions::staged_mma_rows rows
// (bench/results/2026-12-03-h200-staged-mma).

#define MS_WARPS 8
#define MS_MAX_RT 3
#define MS_RH 2  // row tiles of 8 whose partial sums meet in shared memory at a time

// mma.cu's mma_bf16 without `volatile`, so the compiler may interleave the independent
// products of several tiles (their order per accumulator is the program's either way).
__device__ __forceinline__ void ms_mma(float* c, unsigned a0, unsigned a1, unsigned a2,
                                       unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// bf16x2 of (lo half: a, hi half: b), rounded to nearest even (f2bf's values).
__device__ __forceinline__ unsigned ms_pack(float a, float b) {
    unsigned d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));
    return d;
}

template <int MT, int U>
__device__ __forceinline__ void mma_staged_body(const bf16* __restrict__ W, int N, int K,
                                                const float* __restrict__ X, int ldx,
                                                const float* __restrict__ norm_w, float eps,
                                                const float* __restrict__ bias, int act,
                                                const float* res, int ldr, float* Y, int ldy,
                                                int M, int rpb) {
    extern __shared__ __align__(16) unsigned char s_tile[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int row0 = blockIdx.x * rpb;
    const int RT = rpb / 16;
    const int cpr = K / 8;  // 16-byte chunks per weight row
    // after the tile: the norm gains [K] (with a norm), the warps' partial sums of up to
    // MS_RH row tiles [MS_WARPS][MS_RH·4][32] (also Σ x² scratch), each group row's norm
    // factor [8·MT]
    constexpr int RH = MT < MS_RH ? MT : MS_RH;
    float* s_gain = (float*)(s_tile + (size_t)rpb * K * 2);
    float* s_red = s_gain + (norm_w ? K : 0);
    float* s_inv = s_red + MS_WARPS * RH * 4 * 32;
    // 1. the tile and the gains, before the wait (weights never depend on earlier kernels)
    {
        const int total = rpb * cpr;
        const unsigned base = smem_addr(s_tile);
        for (int c = tid; c < total; c += blockDim.x) {
            const int r = c / cpr, j = c - r * cpr;
            const bool in = row0 + r < N;
            const int dst = r * cpr + (j ^ ((r & 1) << 2));
            cp_async16(base + dst * 16, in ? (const void*)(W + (size_t)(row0 + r) * K + j * 8) : (const void*)W,
                       in ? 16 : 0);
        }
        if (norm_w)
            for (int c = tid; c < K / 4; c += blockDim.x) cp_async16(smem_addr(s_gain + 4 * c), norm_w + 4 * c, 16);
        cp_async_commit();
    }
    pdl_wait();
    pdl_trigger();
    cp_async_wait<0>();
    __syncthreads();

    const int G = 8 * MT, chunks = K / 32;
    for (int m0 = 0; m0 < M; m0 += G) {
        float acc[MS_MAX_RT][MT][4];
        float sq[MT];
#pragma unroll
        for (int rt = 0; rt < MS_MAX_RT; rt++)
#pragma unroll
            for (int t = 0; t < MT; t++) acc[rt][t][0] = acc[rt][t][1] = acc[rt][t][2] = acc[rt][t][3] = 0.f;
#pragma unroll
        for (int t = 0; t < MT; t++) sq[t] = 0.f;
        // 2. this warp's chunks, U at a time: every input load of the U chunks first, then
        //    per chunk the rows to hi + lo and the products with every m16 tile of the block
        for (int q0 = warp; q0 < chunks; q0 += MS_WARPS * U) {
            float4 xr[U][MT][2];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int k = (q0 + u * MS_WARPS) * 32 + tig * 8;
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    const int m = m0 + t * 8 + g;
                    if (m < M && q0 + u * MS_WARPS < chunks) {
                        const float4* xp = (const float4*)(X + (size_t)m * ldx + k);
                        xr[u][t][0] = xp[0];
                        xr[u][t][1] = xp[1];
                    } else {
                        xr[u][t][0] = xr[u][t][1] = make_float4(0.f, 0.f, 0.f, 0.f);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int q = q0 + u * MS_WARPS;
                if (q >= chunks) break;
                const int k = q * 32 + tig * 8;
                uint4 hi[MT], lo[MT];
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    float xv[8] = {xr[u][t][0].x, xr[u][t][0].y, xr[u][t][0].z, xr[u][t][0].w,
                                   xr[u][t][1].x, xr[u][t][1].y, xr[u][t][1].z, xr[u][t][1].w};
                    if (norm_w) {
                        const float4 ga = *(const float4*)(s_gain + k), gb = *(const float4*)(s_gain + k + 4);
                        const float gv[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
#pragma unroll
                        for (int i = 0; i < 8; i++) {
                            sq[t] = fmaf(xv[i], xv[i], sq[t]);
                            xv[i] *= gv[i];
                        }
                    }
                    unsigned h[4], l[4];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        h[i] = ms_pack(xv[2 * i], xv[2 * i + 1]);
                        const float r0 = xv[2 * i] - __uint_as_float(h[i] << 16);
                        const float r1 = xv[2 * i + 1] - __uint_as_float(h[i] & 0xffff0000u);
                        l[i] = ms_pack(r0, r1);
                    }
                    hi[t] = make_uint4(h[0], h[1], h[2], h[3]);
                    lo[t] = make_uint4(l[0], l[1], l[2], l[3]);
                }
                // the tiles' weight fragments, then the four products of mma.cu's
                // mma_chunk (k-step 0 hi, k-step 1 hi, k-step 0 lo, k-step 1 lo) each over
                // every (tile, row tile) before the next, so those in flight are independent
                const int j = q * 4 + tig, sw = j ^ ((g & 1) << 2);
                uint4 w0[MS_MAX_RT], w8[MS_MAX_RT];
#pragma unroll
                for (int rt = 0; rt < MS_MAX_RT; rt++) {
                    if (rt >= RT) break;
                    w0[rt] = *(const uint4*)(s_tile + ((size_t)(rt * 16 + g) * cpr + sw) * 16);
                    w8[rt] = *(const uint4*)(s_tile + ((size_t)(rt * 16 + g + 8) * cpr + sw) * 16);
                }
#pragma unroll
                for (int p = 0; p < 4; p++) {
#pragma unroll
                    for (int rt = 0; rt < MS_MAX_RT; rt++) {
                        if (rt >= RT) break;
                        const uint4 a = w0[rt], b = w8[rt];
#pragma unroll
                        for (int t = 0; t < MT; t++) {
                            if (m0 + t * 8 >= M) break;
                            const uint4 x = p < 2 ? hi[t] : lo[t];
                            if (p % 2 == 0) ms_mma(acc[rt][t], a.x, b.x, a.y, b.y, x.x, x.y);
                            else ms_mma(acc[rt][t], a.z, b.z, a.w, b.w, x.z, x.w);
                        }
                    }
                }
            }
        }
        // 3. each group row's norm factor: Σ x² over the lanes of a row (tig), then the warps
        if (norm_w) {
#pragma unroll
            for (int t = 0; t < MT; t++) {
                float s = sq[t];
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                if (tig == 0) s_red[warp * G + t * 8 + g] = s;
            }
            __syncthreads();
            if (tid < G) {
                float s = 0.f;
                for (int w = 0; w < MS_WARPS; w++) s += s_red[w * G + tid];
                s_inv[tid] = 1.0f / sqrtf(div_by_count(s, K) + eps);
            }
        } else if (tid < G) {
            s_inv[tid] = 1.f;
        }
        __syncthreads();
        // 4. RH row tiles of one m16 tile at a time: the warps' sums in warp order, then the
        // epilogue (lane l of a tile's entry q4 holds D[g + 8·(q4 >= 2)][tig·2 + (q4 & 1)],
        // as in mma.cu)
#pragma unroll
        for (int rt = 0; rt < MS_MAX_RT; rt++) {
            if (rt >= RT) break;
#pragma unroll
            for (int t0 = 0; t0 < MT; t0 += RH) {
#pragma unroll
                for (int t = 0; t < RH; t++)
#pragma unroll
                    for (int q4 = 0; q4 < 4; q4++)
                        s_red[((warp * RH + t) * 4 + q4) * 32 + lane] = acc[rt][t0 + t][q4];
                __syncthreads();
                for (int e = tid; e < RH * 4 * 32; e += blockDim.x) {
                    const int tq = e >> 5, l = e & 31, t = tq >> 2, q4 = tq & 3;
                    const int gg = l >> 2, tg = l & 3;
                    const int n = row0 + rt * 16 + gg + (q4 >= 2 ? 8 : 0);
                    const int m = m0 + (t0 + t) * 8 + tg * 2 + (q4 & 1);
                    if (m >= M || n >= N) continue;
                    // act 2: (gate, up) rows are (n, n+1); the up row is lane l + 4 (gg + 1)
                    if (act == 2 && (gg & 1)) continue;
                    float v = 0.f, up = 0.f;
#pragma unroll
                    for (int w = 0; w < MS_WARPS; w++) v += s_red[(w * RH * 4 + tq) * 32 + l];
                    if (act == 2) {
#pragma unroll
                        for (int w = 0; w < MS_WARPS; w++) up += s_red[(w * RH * 4 + tq) * 32 + l + 4];
                    }
                    const float inv = s_inv[m - m0];
                    linear_store(v * inv, up * inv, n, m, act, bias, res, ldr, Y, ldy);
                }
                __syncthreads();
            }
        }
    }
}

#define MS_ENTRY(MT, U)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2) mma_staged_t##MT(                      \
        const bf16* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,         \
        const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,   \
        const float* res, int ldr, float* Y, int ldy, int M, int rpb) {                         \
        mma_staged_body<MT, U>(W, N, K, X, ldx, norm_w, eps, bias, act, res, ldr, Y, ldy, M,    \
                               rpb);                                                             \
    }

MS_ENTRY(1, 4)
MS_ENTRY(2, 2)
MS_ENTRY(4, 1)
