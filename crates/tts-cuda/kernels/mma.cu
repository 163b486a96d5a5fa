// mma.cu — batched linear layers on tensor cores (batches of 9..64 rows):
//   y[m][n] = epilogue( sum_k x[m][k] * W[n][k] ),   one launch per layer matrix,
// after to_bf16_rows (ops.cu) has written the input rows, normalised when an RMSNorm is
// fused, as bf16 hi + lo parts: xb rows 0..M hold hi = bf16(x), rows M..2M lo =
// bf16(x - hi), so the products keep f32-level accuracy (two mma per k-step).
//
// Same epilogue as gemv.cu (bias / SiLU / SwiGLU pairs / residual; `res` may alias `y`).
// Needs N % 16 == 0 and K % 32 == 0 (the host falls back to cuBLAS otherwise).
//
// Grid (N / 16, ceil(M / (8 MT))), 256 threads. Block (bx, by) owns output rows
// n0 = 16 bx .. +15 and batch rows m0 = 8 MT by .. +8 MT - 1; its 8 warps split K in
// 32-wide chunks (warp w takes chunks w, w+8, ...), each issuing the weight loads of
// U chunks (8 for 9..16 rows, else 4: measured best) before using them, and meet in shared memory in a fixed order — so a
// row's result never depends on M or on the other rows. The weights are the operand A
// (16 rows × 16 k) of mma.m16n8k16 and the batch rows the operand B (8 columns): batch
// sizes below 8 MT waste tensor-core work, not memory traffic.
// Inside each 32-wide chunk the k order is permuted identically for W and x (lane group
// tig holds physical k = tig*8 .. tig*8+7), so every fragment is one 16-byte load.

#define MMA_WARPS 8

__device__ __forceinline__ void mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 32-wide chunk: weight fragments w0 (row g) / w8 (row g+8), x fragment hi / lo.
__device__ __forceinline__ void mma_chunk(float* acc, uint4 w0, uint4 w8, uint4 hi, uint4 lo) {
    // k-step 0: physical k tig*8 + 0..3, k-step 1: tig*8 + 4..7
    mma_bf16(acc, w0.x, w8.x, w0.y, w8.y, hi.x, hi.y);
    mma_bf16(acc, w0.z, w8.z, w0.w, w8.w, hi.z, hi.w);
    mma_bf16(acc, w0.x, w8.x, w0.y, w8.y, lo.x, lo.y);
    mma_bf16(acc, w0.z, w8.z, w0.w, w8.w, lo.z, lo.w);
}

template <int MT, int U>
__device__ __forceinline__ void mma_linear_body(const bf16* __restrict__ W, int N, int K,
                                                const bf16* __restrict__ xb, int M,
                                                const float* __restrict__ bias, int act,
                                                const float* res, int ldr, float* Y,
                                                int ldy) {
    __shared__ float s_red[MMA_WARPS][MT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int n0 = blockIdx.x * 16, m0 = blockIdx.y * MT * 8;
    const int chunks = K / 32;
    const bf16* w0 = W + (size_t)(n0 + g) * K + tig * 8;
    const bf16* w8 = w0 + (size_t)8 * K;
    // The weights do not depend on earlier kernels: start fetching this lane's first pass
    // while the previous kernel may still be running, then wait for it.
#pragma unroll
    for (int u = 0; u < U; u++) {
        int c = warp + u * MMA_WARPS;
        if (c < chunks) {
            prefetch_l2(w0 + c * 32);
            prefetch_l2(w8 + c * 32);
        }
    }
    pdl_wait();
    pdl_trigger();
    // this lane's batch columns (one per n-tile), -1 past M
    const bf16* xh[MT];
    const bf16* xl[MT];
#pragma unroll
    for (int t = 0; t < MT; t++) {
        int m = m0 + t * 8 + g;
        xh[t] = m < M ? xb + (size_t)m * K + tig * 8 : nullptr;
        xl[t] = m < M ? xb + (size_t)(M + m) * K + tig * 8 : nullptr;
    }
    float acc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;

    for (int c0 = warp; c0 < chunks; c0 += MMA_WARPS * U) {
        uint4 a[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int c = c0 + u * MMA_WARPS;
            if (c < chunks) {
                a[u][0] = __ldg((const uint4*)(w0 + c * 32));
                a[u][1] = __ldg((const uint4*)(w8 + c * 32));
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int c = c0 + u * MMA_WARPS;
            if (c >= chunks) break;
#pragma unroll
            for (int t = 0; t < MT; t++) {
                uint4 hi = make_uint4(0, 0, 0, 0), lo = make_uint4(0, 0, 0, 0);
                if (xh[t]) {
                    hi = *(const uint4*)(xh[t] + c * 32);
                    lo = *(const uint4*)(xl[t] + c * 32);
                }
                mma_chunk(acc[t], a[u][0], a[u][1], hi, lo);
            }
        }
    }
    // lane holds D[n0+g][m], D[n0+g][m+1], D[n0+g+8][m], D[n0+g+8][m+1],
    // m = m0 + t*8 + tig*2 (entry q of tile t)
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int q = 0; q < 4; q++) s_red[warp][t * 4 + q][lane] = acc[t][q];
    __syncthreads();
    for (int e = threadIdx.x; e < MT * 4 * 32; e += blockDim.x) {
        int tq = e >> 5, l = e & 31, t = tq >> 2, q = tq & 3;
        int gg = l >> 2, tg = l & 3;
        int n = n0 + gg + (q >= 2 ? 8 : 0);
        int m = m0 + t * 8 + tg * 2 + (q & 1);
        if (m >= M) continue;
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < MMA_WARPS; w++) v += s_red[w][tq][l];
        float up = 0.f;
        if (act == 2) {
            // (gate, up) rows are (n, n+1): the up row is lane l + 4 (g + 1)
            if (gg & 1) continue;
#pragma unroll
            for (int w = 0; w < MMA_WARPS; w++) up += s_red[w][tq][l + 4];
        }
        linear_store(v, up, n, m, act, bias, res, ldr, Y, ldy);
    }
}

#define MMA_ENTRY(MT, U)                                                                        \
    extern "C" __global__ void __launch_bounds__(256) mma_linear_t##MT(                        \
        const bf16* __restrict__ W, int N, int K, const bf16* __restrict__ xb, int M,           \
        const float* __restrict__ bias, int act, const float* res, int ldr, float* Y,           \
        int ldy) {                                                                               \
        mma_linear_body<MT, U>(W, N, K, xb, M, bias, act, res, ldr, Y, ldy);                    \
    }

MMA_ENTRY(1, 4)
MMA_ENTRY(2, 8)
MMA_ENTRY(4, 4)
MMA_ENTRY(8, 4)
