// codec_gemv.cu — the codec's GEMMs of few rows (at most 8 steps in a pass), as one
// f32 matrix-vector launch instead of a cuBLAS GEMM (and its split-K reduction kernel):
//
//   C[s][n] = sum_{k < K} X[s][k] * W[n][k]  (+ C[s][n] when beta != 0),   s < steps
//
// Same contract as the codec's `Op::Gemm` (codec.cu's header: a bias rides in W as an extra
// column against a constant ones column of X). W f32 [N][ldw] (`codec_gemv_m*`) or its f16
// copy (`codec_gemv_h*`, the arena of f16 convolutions: half the bytes), X f32 [steps][ldx],
// C f32 [steps][ldc]; K, ldw and ldx are multiples of 4 and W, X 16-byte aligned.
// Prologue `pro` (the op before the GEMM folded in, so it needs no launch of its own):
//   0: x as stored; 1: codec_rms_norm, x = gain ⊙ (x / sqrt(mean(x[0..K)²) + eps));
//   2: codec_swiglu, x[k] = silu(X[k]) · X[K + k] (X holds gate | up, ldx >= 2K).
// The products are exact f32 (no TF32 rounding) of the weights as stored, summed in a
// fixed order per output, so a step's result does not depend on how many steps the pass has.
//
// Grid: 256-thread blocks of 8 warps; a warp owns R output rows (CgShape: 2, or 8 at 8
// steps) and, with `ksplit` S (1, 2, 4 or 8), the S-th part of K: the 8 warps form 8/S
// groups of S warps. Lanes stream 16-byte chunks (4 floats; 8 bytes of f16), U per output
// row in flight. Blocks: ceil(N / (8·R / S)).
// Steps past `steps` (the template's M is rounded up) read the last step and write nothing.
// Launched with programmatic dependent launch (device.rs, `codec::PDL_KERNELS`): a lane's
// first pass of weights (which no kernel writes) is loaded before the wait for the previous
// kernel, X and C only after it; then the next kernel may launch.

// Output rows per warp and 16-byte chunks in flight per row and lane: 2 and 8, but 8 and 2
// at 8 steps, where each X load (one float4 per step) then feeds 8 rows, not 2 (with 2,
// the X loads from L1 were 16x the weight bytes: the H200 read the decoder's 22-38 MB
// upsampling matrices at 0.5-0.7 TB/s). A lane's sum over K keeps its order either way.
template <int M> struct CgShape {
    static constexpr int R = M == 8 ? 8 : 2, U = M == 8 ? 2 : 8;
};
#define CG_WARPS 8

// Four consecutive weights as f32: one 16-byte load of f32, or one 8-byte load of f16.
__device__ __forceinline__ float4 cg_load4(const float* p) { return __ldg((const float4*)p); }
__device__ __forceinline__ float4 cg_load4(const unsigned short* p) {
    const uint2 u = __ldg((const uint2*)p);
    return make_float4(half_bits_to_f32(u.x & 0xffffu), half_bits_to_f32(u.x >> 16),
                       half_bits_to_f32(u.y & 0xffffu), half_bits_to_f32(u.y >> 16));
}

template <int M, typename WT>
__device__ __forceinline__ void codec_gemv_body(const WT* __restrict__ W, int ldw, int N,
                                                int K, const float* __restrict__ X, int ldx,
                                                float* C, int ldc, int steps, float beta,
                                                int ksplit, int pro,
                                                const float* __restrict__ gain, float eps) {
    constexpr int CG_R = CgShape<M>::R, CG_U = CgShape<M>::U;
    __shared__ float s_part[CG_WARPS][CG_R * M];
    __shared__ float s_inv[M];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int groups = CG_WARPS / ksplit;
    const int g = warp / ksplit, part = warp % ksplit;
    const int n0 = (blockIdx.x * groups + g) * CG_R;
    // this warp's K slice, in whole 128-float passes of the warp
    const int passes = (K + 127) / 128;
    const int per = (passes + ksplit - 1) / ksplit;
    const int k_begin = part * per * 128, k_end = min(K, (part + 1) * per * 128);
    const int kb0 = k_begin + lane * 4;
    const WT* wrow[CG_R];
#pragma unroll
    for (int r = 0; r < CG_R; r++) wrow[r] = W + (size_t)min(n0 + r, N - 1) * ldw;
    float4 w[CG_U][CG_R];
    auto load_pass = [&](int kb) {
#pragma unroll
        for (int u = 0; u < CG_U; u++) {
            int idx = kb + u * 128;
#pragma unroll
            for (int r = 0; r < CG_R; r++)
                w[u][r] = idx < k_end ? cg_load4(wrow[r] + idx) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    if (n0 < N) load_pass(kb0);
    pdl_wait();
    pdl_trigger();
    if (pro == 1) {
        for (int m = warp; m < M; m += CG_WARPS) {
            const float* xr = X + (size_t)min(m, steps - 1) * ldx;
            float q = 0.f;
            for (int k = lane; k < K; k += 32) q += xr[k] * xr[k];
            q = warp_sum(q);
            if (lane == 0) s_inv[m] = 1.0f / sqrtf(div_by_count(q, K) + eps);
        }
        __syncthreads();
    }
    float acc[CG_R][M];
#pragma unroll
    for (int r = 0; r < CG_R; r++)
#pragma unroll
        for (int m = 0; m < M; m++) acc[r][m] = 0.f;
    const float* xrow[M];
#pragma unroll
    for (int m = 0; m < M; m++) xrow[m] = X + (size_t)min(m, steps - 1) * ldx;

    if (n0 < N) {
        for (int kb = kb0; kb < k_end; kb += 128 * CG_U) {
            if (kb != kb0) load_pass(kb);
#pragma unroll
            for (int u = 0; u < CG_U; u++) {
                int idx = kb + u * 128;
                if (idx >= k_end) break;
                float4 gv = make_float4(1.f, 1.f, 1.f, 1.f);
                if (pro == 1) gv = *(const float4*)(gain + idx);
#pragma unroll
                for (int m = 0; m < M; m++) {
                    float4 x = *(const float4*)(xrow[m] + idx);
                    if (pro == 1) {
                        const float iv = s_inv[m];
                        x.x = gv.x * (x.x * iv);
                        x.y = gv.y * (x.y * iv);
                        x.z = gv.z * (x.z * iv);
                        x.w = gv.w * (x.w * iv);
                    } else if (pro == 2) {
                        const float4 u = *(const float4*)(xrow[m] + K + idx);
                        x.x = silu(x.x) * u.x;
                        x.y = silu(x.y) * u.y;
                        x.z = silu(x.z) * u.z;
                        x.w = silu(x.w) * u.w;
                    }
#pragma unroll
                    for (int r = 0; r < CG_R; r++) {
                        float a = acc[r][m];
                        a = fmaf(x.x, w[u][r].x, a);
                        a = fmaf(x.y, w[u][r].y, a);
                        a = fmaf(x.z, w[u][r].z, a);
                        a = fmaf(x.w, w[u][r].w, a);
                        acc[r][m] = a;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < CG_R; r++)
#pragma unroll
        for (int m = 0; m < M; m++) {
            float v = warp_sum(acc[r][m]);
            if (lane == 0) s_part[warp][r * M + m] = v;
        }
    __syncthreads();
    // the group's first warp combines its S partials; lane l writes outputs (o / M, o % M)
    // for o = l, l + 32, ...
    if (part != 0 || n0 >= N) return;
    for (int o = lane; o < CG_R * M; o += 32) {
        const int r = o / M, m = o % M;
        const int n = n0 + r;
        if (m >= steps || n >= N) continue;
        float v = 0.f;
        for (int p = 0; p < ksplit; p++) v += s_part[warp + p][o];
        float* c = C + (size_t)m * ldc + n;
        *c = beta != 0.f ? v + beta * *c : v;
    }
}

#define CODEC_GEMV_ENTRY(NAME, MM, WT)                                                          \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                     \
        const WT* __restrict__ W, int ldw, int N, int K, const float* __restrict__ X, int ldx,  \
        float* C, int ldc, int steps, float beta, int ksplit, int pro,                           \
        const float* __restrict__ g, float eps) {                                                \
        codec_gemv_body<MM, WT>(W, ldw, N, K, X, ldx, C, ldc, steps, beta, ksplit, pro, g, eps); \
    }

CODEC_GEMV_ENTRY(codec_gemv_m1, 1, float)
CODEC_GEMV_ENTRY(codec_gemv_m2, 2, float)
CODEC_GEMV_ENTRY(codec_gemv_m4, 4, float)
CODEC_GEMV_ENTRY(codec_gemv_m8, 8, float)
// f16 weights (IEEE half bit patterns)
CODEC_GEMV_ENTRY(codec_gemv_h1, 1, unsigned short)
CODEC_GEMV_ENTRY(codec_gemv_h2, 2, unsigned short)
CODEC_GEMV_ENTRY(codec_gemv_h4, 4, unsigned short)
CODEC_GEMV_ENTRY(codec_gemv_h8, 8, unsigned short)
