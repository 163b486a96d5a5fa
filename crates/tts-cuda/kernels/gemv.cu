// gemv.cu — small-batch matrix-vector products, the bandwidth-bound heart of decoding.
//
//   y[m][n] = epilogue( sum_k xin[m][k] * W[n][k] ),   m < M (batch rows), n < N
//
// Layout: W bf16 row-major [N][K] (K % 8 == 0); x f32 [M][ldx]; y f32 [M][ldy].
// Prologue (optional): xin = g ⊙ x / sqrt(mean(x²) + eps) per row (RMSNorm fused; g f32 [K]).
// Epilogue: v = acc (+ bias[n]); act 1: v = silu(v); act 2: rows (2i, 2i+1) are a
//   (gate, up) pair and y[m][i] = silu(gate) * up; then y = (res ? res[m][n] : 0) + v
//   (`res` may alias `y`: each element is read and written by the same thread).
// Grid: one warp per R=2 output rows, 8 warps per block -> ceil(N / 16) blocks of 256.
// Each lane streams 16-byte weight chunks, 4 chunks in flight per row; M is a template
// parameter so the M·R accumulators stay in registers. Rows m >= rows_valid write nothing.

#define GEMV_R 2
#define GEMV_U 4
#define GEMV_WARPS 8

template <int M>
__device__ __forceinline__ void gemv_body(const bf16* __restrict__ W, int N, int K,
                                          const float* __restrict__ X, int ldx,
                                          const float* __restrict__ norm_w, float eps,
                                          const float* __restrict__ bias, int act,
                                          const float* res, int ldr, float* Y, int ldy,
                                          int rows_valid) {
    __shared__ float s_inv[M > 0 ? M : 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (norm_w) {
        for (int m = warp; m < M; m += GEMV_WARPS) {
            float s = 0.f;
            for (int k = lane; k < K; k += 32) { float v = X[(size_t)m * ldx + k]; s += v * v; }
            s = warp_sum(s);
            if (lane == 0) s_inv[m] = 1.0f / sqrtf(s / (float)K + eps);
        }
        __syncthreads();
    }
    const int n0 = (blockIdx.x * GEMV_WARPS + warp) * GEMV_R;
    if (n0 >= N) return;

    float acc[GEMV_R][M];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int m = 0; m < M; m++) acc[r][m] = 0.f;

    const bf16* wrow[GEMV_R];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++) wrow[r] = W + (size_t)min(n0 + r, N - 1) * K;

    for (int kb = lane * 8; kb < K; kb += 32 * 8 * GEMV_U) {
        uint4 w[GEMV_U][GEMV_R];
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            int idx = kb + u * 256;
#pragma unroll
            for (int r = 0; r < GEMV_R; r++)
                w[u][r] = idx < K ? __ldg((const uint4*)(wrow[r] + idx)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            int idx = kb + u * 256;
            if (idx >= K) break;
            float wf[GEMV_R][8];
#pragma unroll
            for (int r = 0; r < GEMV_R; r++) unpack8(w[u][r], wf[r]);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float4* xp = (const float4*)(X + (size_t)m * ldx + idx);
                float4 a = xp[0], b = xp[1];
                float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                if (norm_w) {
                    const float4* gp = (const float4*)(norm_w + idx);
                    float4 ga = gp[0], gb = gp[1];
                    float g[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
                    float inv = s_inv[m];
#pragma unroll
                    for (int i = 0; i < 8; i++) xv[i] = g[i] * (xv[i] * inv);
                }
#pragma unroll
                for (int r = 0; r < GEMV_R; r++)
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[r][m] = fmaf(xv[i], wf[r][i], acc[r][m]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int m = 0; m < M; m++) acc[r][m] = warp_sum(acc[r][m]);

    // Lane l writes output (r, m) = (l / M, l % M).
#pragma unroll
    for (int r = 0; r < GEMV_R; r++) {
#pragma unroll
        for (int m = 0; m < M; m++) {
            if (lane != r * M + m) continue;
            int n = n0 + r;
            if (m >= rows_valid || n >= N) continue;
            if (act == 2) {
                if (r != 0) continue;
                float g = acc[0][m], u = acc[GEMV_R - 1][m];
                if (bias) { g += bias[n0]; u += bias[n0 + 1]; }
                int o = n0 / 2;
                float v = silu(g) * u;
                if (res) v += res[(size_t)m * ldr + o];
                Y[(size_t)m * ldy + o] = v;
            } else {
                float v = acc[r][m];
                if (bias) v += bias[n];
                if (act == 1) v = silu(v);
                if (res) v += res[(size_t)m * ldr + n];
                Y[(size_t)m * ldy + n] = v;
            }
        }
    }
}

#define GEMV_ENTRY(MM)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) gemv_m##MM(                              \
        const bf16* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,         \
        const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,    \
        const float* res, int ldr, float* Y, int ldy, int rows_valid) {                          \
        gemv_body<MM>(W, N, K, X, ldx, norm_w, eps, bias, act, res, ldr, Y, ldy, rows_valid);   \
    }

GEMV_ENTRY(1)
GEMV_ENTRY(2)
GEMV_ENTRY(4)
GEMV_ENTRY(8)
GEMV_ENTRY(16)
