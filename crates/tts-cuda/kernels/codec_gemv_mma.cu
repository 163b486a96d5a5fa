// codec_gemv_mma.cu — codec_gemv.cu's few-step GEMM over the f16 weights, without a
// prologue, on tensor cores:
//
//   C[s][n] = sum_{k < K} X[s][k] * W[n][k]  (+ beta · C[s][n]),   s < steps <= 8
//
// Why: codec_gemv_h8 gives each warp 8 output rows and, for long rows, one K part of
// them, so every block reads all 8 steps of its K range of X for 8 rows of weights (X
// twice the weight bytes, its loads in the inner loop) and holds 202 registers (one block
// per multiprocessor): the 8-step layers of a one-row pass (decoder_in, block 0's
// transposed convolution, the second ConvNeXt: ~76 MB of f16) streamed at ~0.75 TB/s on
// an H100 (bench/results/2026-12-06-norm-after-barrier).
//
// Here, as mma.cu: the weights are the operand A of mma.m16n8k16 (16 rows × 16 k) and the
// steps the 8 columns of B. X stays f32 in memory; each lane splits its values into f16
// hi = f16(x) and lo = f16(x - hi) (saturated at ±65504, as the f16 convolutions' columns),
// two MMAs per k-step, so a product keeps ~22 bits of x (f16 weights times f16 parts are
// exact; the sums are f32). Inside each 32-wide chunk lane group t (lane % 4) holds the
// physical k = 8t .. 8t+7 of its rows, the same permutation for W and X, so a lane's
// fragments of a chunk are one 16-byte weight piece per row (two 8-byte ones when the
// rows are not 16-byte aligned, `V16` off) and two float4 of X.
//
// Grid: ceil(N / 16) blocks of 256 threads; block b owns rows 16b .. 16b+15, its 8 warps
// take the chunks w, w+8, ... (U chunks in flight, the first pass loaded before the PDL
// wait) and meet in shared memory in a fixed order, so a step's result does not depend
// on how many steps the pass has. Needs K, ldw and W's offset in halves multiples of 4
// (of 8 with V16), ldx and X's offset multiples of 4 (16-byte float4 loads); K may end
// inside a chunk (pieces past it are zeros). Steps past `steps` read the last step and
// write nothing; rows past N read row N - 1 and write nothing.

#define CGM_WARPS 8

// Halves k .. k+7 of a weight row (zeros past K): one 16-byte load, or two of 8 bytes.
template <bool V16>
__device__ __forceinline__ uint4 cgm_piece(const unsigned short* p, int k, int K) {
    if (V16) return k < K ? __ldg((const uint4*)p) : make_uint4(0u, 0u, 0u, 0u);
    const uint2 a = k < K ? __ldg((const uint2*)p) : make_uint2(0u, 0u);
    const uint2 b = k + 4 < K ? __ldg((const uint2*)(p + 4)) : make_uint2(0u, 0u);
    return make_uint4(a.x, a.y, b.x, b.y);
}

// (x0, x1) as an f16 pair of hi parts (x0 in the low half) and of lo parts.
__device__ __forceinline__ void cgm_split2(float x0, float x1, unsigned& hi, unsigned& lo) {
    unsigned h0, l0, h1, l1;
    f2h_split(x0, h0, l0);
    f2h_split(x1, h1, l1);
    hi = h0 | (h1 << 16);
    lo = l0 | (l1 << 16);
}

template <int U, bool V16>
__device__ __forceinline__ void codec_gemv_mma_body(const unsigned short* __restrict__ W, int ldw,
                                                    int N, int K, const float* __restrict__ X,
                                                    int ldx, float* C, int ldc, int steps,
                                                    float beta) {
    __shared__ float s_red[CGM_WARPS][4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16;
    const int chunks = (K + 31) / 32;
    const unsigned short* w0 = W + (size_t)min(n0 + g, N - 1) * ldw;
    const unsigned short* w8 = W + (size_t)min(n0 + g + 8, N - 1) * ldw;
    uint4 a[U][2];
    auto load_pass = [&](int c0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = (c0 + u * CGM_WARPS) * 32 + t * 8;
            a[u][0] = cgm_piece<V16>(w0 + k, k, K);
            a[u][1] = cgm_piece<V16>(w8 + k, k, K);
        }
    };
    // the weights do not depend on earlier kernels: fetch the first pass, then wait
    load_pass(warp);
    pdl_wait();
    pdl_trigger();
    const float* xr = X + (size_t)min(g, steps - 1) * ldx;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int c0 = warp; c0 < chunks; c0 += CGM_WARPS * U) {
        if (c0 != warp) load_pass(c0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * CGM_WARPS;
            if (c >= chunks) break;
            const int k = c * 32 + t * 8;
            const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
            const float4 x0 = k < K ? *(const float4*)(xr + k) : zero;
            const float4 x1 = k + 4 < K ? *(const float4*)(xr + k + 4) : zero;
            uint4 hi, lo;
            cgm_split2(x0.x, x0.y, hi.x, lo.x);
            cgm_split2(x0.z, x0.w, hi.y, lo.y);
            cgm_split2(x1.x, x1.y, hi.z, lo.z);
            cgm_split2(x1.z, x1.w, hi.w, lo.w);
            const uint4 p0 = a[u][0], p8 = a[u][1];
            // k-step 0: physical k 8t + 0..3, k-step 1: 8t + 4..7
            mma_f16(acc, p0.x, p8.x, p0.y, p8.y, hi.x, hi.y);
            mma_f16(acc, p0.z, p8.z, p0.w, p8.w, hi.z, hi.w);
            mma_f16(acc, p0.x, p8.x, p0.y, p8.y, lo.x, lo.y);
            mma_f16(acc, p0.z, p8.z, p0.w, p8.w, lo.z, lo.w);
        }
    }
    // lane holds D[n0+g][2t], D[n0+g][2t+1], D[n0+g+8][2t], D[n0+g+8][2t+1]
#pragma unroll
    for (int q = 0; q < 4; q++) s_red[warp][q][lane] = acc[q];
    __syncthreads();
    if (threadIdx.x >= 4 * 32) return;
    const int q = threadIdx.x >> 5, l = threadIdx.x & 31;
    const int n = n0 + (l >> 2) + (q >= 2 ? 8 : 0);
    const int s = (l & 3) * 2 + (q & 1);
    if (n >= N || s >= steps) return;
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < CGM_WARPS; w++) v += s_red[w][q][l];
    float* c = C + (size_t)s * ldc + n;
    *c = beta != 0.f ? v + beta * *c : v;
}

#define CODEC_GEMV_MMA_ENTRY(NAME, U, V16)                                                     \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                    \
        const unsigned short* __restrict__ W, int ldw, int N, int K,                           \
        const float* __restrict__ X, int ldx, float* C, int ldc, int steps, float beta) {      \
        codec_gemv_mma_body<U, V16>(W, ldw, N, K, X, ldx, C, ldc, steps, beta);               \
    }

// 16-byte weight pieces (convolutions: rows of a multiple of 8 halves), 4 or 8 chunks in
// flight per warp (8 for long rows); 8-byte pieces (linear layers: rows of 4n halves)
CODEC_GEMV_MMA_ENTRY(codec_gemv_mma4, 4, true)
CODEC_GEMV_MMA_ENTRY(codec_gemv_mma8, 8, true)
CODEC_GEMV_MMA_ENTRY(codec_gemv_mma4_v8, 4, false)
