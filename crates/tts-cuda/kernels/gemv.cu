// gemv.cu — small-batch matrix-vector products, the bandwidth-bound heart of decoding.
//
//   y[m][n] = epilogue( sum_k xin[m][k] * W[n][k] ),   m < M (batch rows), n < N
//
// Layout: W bf16 row-major [N][K] (K % 8 == 0); x f32 [M][ldx]; y f32 [M][ldy].
// Prologue (optional): xin = g ⊙ x / sqrt(mean(x²) + eps) per row (RMSNorm fused; g f32 [K]).
// Epilogue: v = acc (+ bias[n]); act 1: v = silu(v); act 2: rows (2i, 2i+1) are a
//   (gate, up) pair and y[m][i] = silu(gate) * up; then y = (res ? res[m][n] : 0) + v
//   (`res` may alias `y`: each element is read and written by the same thread).
// Grid: 256-thread blocks of 8 warps. A warp owns R = 2 output rows and a K slice: with
// `ksplit` S (1, 2 or 4) the 8 warps form 8/S groups of S warps, group g taking rows
// 2(blk·8/S + g) .. +1 and warp w%S the S-th part of K — so layers with few rows still
// fill the GPU. Lanes stream 16-byte weight chunks, up to 4 in flight per row. Partial
// sums meet in shared memory in a fixed order: a row's result never depends on M.
// Rows m >= rows_valid write nothing. Blocks: ceil(N / (16 / S)).

#define GEMV_R 2
#define GEMV_U 4
#define GEMV_WARPS 8

template <int M>
__device__ __forceinline__ void gemv_body(const bf16* __restrict__ W, int N, int K,
                                          const float* __restrict__ X, int ldx,
                                          const float* __restrict__ norm_w, float eps,
                                          const float* __restrict__ bias, int act,
                                          const float* res, int ldr, float* Y, int ldy,
                                          int rows_valid, int ksplit) {
    __shared__ float s_inv[M];
    __shared__ float s_part[GEMV_WARPS][GEMV_R * M];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int groups = GEMV_WARPS / ksplit;
    const int g = warp / ksplit, part = warp % ksplit;
    const int n0 = (blockIdx.x * groups + g) * GEMV_R;
    // this warp's K slice, in whole 256-element steps
    const int steps = (K + 255) / 256;
    const int per = (steps + ksplit - 1) / ksplit;
    const int k_begin = part * per * 256, k_end = min(K, (part + 1) * per * 256);
    // The weights do not depend on earlier kernels: start fetching the first pass of this
    // lane's chunks while the previous kernel may still be running, then wait for it.
    if (n0 < N) {
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            int idx = k_begin + lane * 8 + u * 256;
#pragma unroll
            for (int r = 0; r < GEMV_R; r++)
                if (idx < k_end) prefetch_l2(W + (size_t)min(n0 + r, N - 1) * K + idx);
        }
    }
    pdl_wait();
    pdl_trigger();
    if (norm_w) {
        for (int m = warp; m < M; m += GEMV_WARPS) {
            float s = 0.f;
            for (int k = lane; k < K; k += 32) { float v = X[(size_t)m * ldx + k]; s += v * v; }
            s = warp_sum(s);
            if (lane == 0) s_inv[m] = 1.0f / sqrtf(s / (float)K + eps);
        }
        __syncthreads();
    }
    float acc[GEMV_R][M];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int m = 0; m < M; m++) acc[r][m] = 0.f;

    if (n0 < N) {
        const bf16* wrow[GEMV_R];
#pragma unroll
        for (int r = 0; r < GEMV_R; r++) wrow[r] = W + (size_t)min(n0 + r, N - 1) * K;
        for (int kb = k_begin + lane * 8; kb < k_end; kb += 256 * GEMV_U) {
            uint4 w[GEMV_U][GEMV_R];
#pragma unroll
            for (int u = 0; u < GEMV_U; u++) {
                int idx = kb + u * 256;
#pragma unroll
                for (int r = 0; r < GEMV_R; r++)
                    w[u][r] = idx < k_end ? __ldg((const uint4*)(wrow[r] + idx)) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < GEMV_U; u++) {
                int idx = kb + u * 256;
                if (idx >= k_end) break;
                float wf[GEMV_R][8];
#pragma unroll
                for (int r = 0; r < GEMV_R; r++) unpack8(w[u][r], wf[r]);
                float gv[8];
                if (norm_w) {
                    const float4* gp = (const float4*)(norm_w + idx);
                    float4 ga = gp[0], gb = gp[1];
                    gv[0] = ga.x; gv[1] = ga.y; gv[2] = ga.z; gv[3] = ga.w;
                    gv[4] = gb.x; gv[5] = gb.y; gv[6] = gb.z; gv[7] = gb.w;
                }
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const float4* xp = (const float4*)(X + (size_t)m * ldx + idx);
                    float4 a = xp[0], b = xp[1];
                    float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                    if (norm_w) {
                        float inv = s_inv[m];
#pragma unroll
                        for (int i = 0; i < 8; i++) xv[i] = gv[i] * (xv[i] * inv);
                    }
#pragma unroll
                    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
                        for (int i = 0; i < 8; i++) acc[r][m] = fmaf(xv[i], wf[r][i], acc[r][m]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int m = 0; m < M; m++) {
            float v = warp_sum(acc[r][m]);
            if (lane == 0) s_part[warp][r * M + m] = v;
        }
    __syncthreads();
    // the group's first warp combines its S partials; lane l writes output (l / M, l % M)
    if (part != 0 || n0 >= N || lane >= GEMV_R * M) return;
    const int r = lane / M, m = lane % M;
    float a = 0.f;
    for (int p = 0; p < ksplit; p++) a += s_part[warp + p][lane];
    const int n = n0 + r;
    if (m >= rows_valid || n >= N) return;
    float up = 0.f;
    if (act == 2) {
        if (r != 0) return;
        for (int p = 0; p < ksplit; p++) up += s_part[warp + p][M + m];
    }
    linear_store(a, up, n, m, act, bias, res, ldr, Y, ldy);
}

#define GEMV_ENTRY(MM)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) gemv_m##MM(                              \
        const bf16* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,         \
        const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,    \
        const float* res, int ldr, float* Y, int ldy, int rows_valid, int ksplit) {              \
        gemv_body<MM>(W, N, K, X, ldx, norm_w, eps, bias, act, res, ldr, Y, ldy, rows_valid,    \
                      ksplit);                                                                   \
    }

GEMV_ENTRY(1)
GEMV_ENTRY(2)
GEMV_ENTRY(4)
GEMV_ENTRY(8)
