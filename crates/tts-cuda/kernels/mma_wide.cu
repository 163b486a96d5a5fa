// mma_wide.cu — batched linear layers on tensor cores for 17..64 rows, where mma.cu's
// 16-row blocks would read the input rows from L2 once per 16 outputs. Same contract as
// mma.cu (input rows as bf16 hi + lo parts from to_bf16_rows, N % 128 == 0,
// K % (32 · ksplit) == 0, mma.cu's epilogue), same fragment layout (mma_chunk).
//
// Grid (N / 128, ksplit), 256 threads. Block (bx, s) owns output rows n0 = 128 bx .. +127
// (warp w: rows n0 + 16 w .. +15) and the s-th of `ksplit` equal K slices; all 8 warps walk
// the same 32-wide chunks of the slice, so each input fragment is fetched from L2 once per
// block and served to the other warps from L1. Each block writes its partial sums to
// part[s][m][n]; the last block of a row tile to finish (a counter per tile, reset by that
// block for the next launch) adds the ksplit partials in order s = 0, 1, ... and applies
// the epilogue — so a row's result never depends on M or on timing.

#define MW_U 4

template <int MT>
__device__ __forceinline__ void mma_wide_body(const bf16* __restrict__ W, int N, int K,
                                              const bf16* __restrict__ xb, int M,
                                              const float* __restrict__ bias, int act,
                                              const float* res, int ldr, float* Y, int ldy,
                                              float* part, unsigned int* counters) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int n0 = blockIdx.x * 128, rows0 = n0 + warp * 16;
    const int ksplit = gridDim.y, s = blockIdx.y;
    const int chunks = K / 32 / ksplit, c_begin = s * chunks;
    const bf16* w0 = W + (size_t)(rows0 + g) * K + tig * 8;
    const bf16* w8 = w0 + (size_t)8 * K;
    // The weights do not depend on earlier kernels: start fetching this lane's first pass
    // while the previous kernel may still be running, then wait for it.
#pragma unroll
    for (int u = 0; u < MW_U; u++) {
        if (u < chunks) {
            prefetch_l2(w0 + (c_begin + u) * 32);
            prefetch_l2(w8 + (c_begin + u) * 32);
        }
    }
    pdl_wait();
    pdl_trigger();

    const bf16* xh[MT];
    const bf16* xl[MT];
#pragma unroll
    for (int t = 0; t < MT; t++) {
        int m = t * 8 + g;
        xh[t] = m < M ? xb + (size_t)m * K + tig * 8 : nullptr;
        xl[t] = m < M ? xb + (size_t)(M + m) * K + tig * 8 : nullptr;
    }
    float acc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;

    for (int c0 = 0; c0 < chunks; c0 += MW_U) {
        uint4 a[MW_U][2];
#pragma unroll
        for (int u = 0; u < MW_U; u++) {
            int c = c_begin + c0 + u;
            if (c0 + u < chunks) {
                a[u][0] = __ldg((const uint4*)(w0 + c * 32));
                a[u][1] = __ldg((const uint4*)(w8 + c * 32));
            }
        }
#pragma unroll
        for (int u = 0; u < MW_U; u++) {
            if (c0 + u >= chunks) break;
            int c = c_begin + c0 + u;
#pragma unroll
            for (int t = 0; t < MT; t++) {
                uint4 hi = make_uint4(0, 0, 0, 0), lo = make_uint4(0, 0, 0, 0);
                if (xh[t]) {
                    hi = __ldg((const uint4*)(xh[t] + c * 32));
                    lo = __ldg((const uint4*)(xl[t] + c * 32));
                }
                mma_chunk(acc[t], a[u][0], a[u][1], hi, lo);
            }
        }
    }
    // partial sums: lane holds D[rows0+g][m], D[rows0+g][m+1], D[rows0+g+8][m],
    // D[rows0+g+8][m+1] with m = t*8 + tig*2
    float* ps = part + (size_t)s * M * N;
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int n = rows0 + g + (q >= 2 ? 8 : 0);
            int m = t * 8 + tig * 2 + (q & 1);
            if (m < M) ps[(size_t)m * N + n] = acc[t][q];
        }
    // the last block of this row tile adds the partials and writes the outputs
    __shared__ unsigned int s_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int done = atomicAdd(&counters[blockIdx.x], 1u);
        s_last = done + 1 == (unsigned int)ksplit;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int e = threadIdx.x; e < 128 * M; e += blockDim.x) {
        int m = e / 128, n = n0 + e % 128;
        if (act == 2 && (n & 1)) continue;
        float v = 0.f, up = 0.f;
        for (int j = 0; j < ksplit; j++) {
            const float* pj = part + (size_t)j * M * N + (size_t)m * N;
            v += __ldcg(pj + n);
            if (act == 2) up += __ldcg(pj + n + 1);
        }
        if (act == 2) {
            if (bias) { v += bias[n]; up += bias[n + 1]; }
            float o = silu(v) * up;
            int col = n / 2;
            if (res) o += res[(size_t)m * ldr + col];
            Y[(size_t)m * ldy + col] = o;
        } else {
            if (bias) v += bias[n];
            if (act == 1) v = silu(v);
            if (res) v += res[(size_t)m * ldr + n];
            Y[(size_t)m * ldy + n] = v;
        }
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

#define MW_ENTRY(MT)                                                                            \
    extern "C" __global__ void __launch_bounds__(256) mma_wide_t##MT(                          \
        const bf16* __restrict__ W, int N, int K, const bf16* __restrict__ xb, int M,           \
        const float* __restrict__ bias, int act, const float* res, int ldr, float* Y, int ldy,  \
        float* part, unsigned int* counters) {                                                  \
        mma_wide_body<MT>(W, N, K, xb, M, bias, act, res, ldr, Y, ldy, part, counters);         \
    }

MW_ENTRY(2)
MW_ENTRY(4)
MW_ENTRY(8)
