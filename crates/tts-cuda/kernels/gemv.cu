// gemv.cu — small-batch matrix-vector products, the bandwidth-bound heart of decoding.
//
//   y[m][n] = epilogue( sum_k xin[m][k] * W[n][k] ),   m < M (batch rows), n < N
//
// Layout: W bf16 row-major [N][K] (K % 8 == 0), or for the `gemv8_*` entries E4M3 codes
// row-major [N][K] (K % 16 == 0) with one f32 scale per row (`scales[n]`, applied to the
// row's sum: W[n][k] = e4m3(code) · scales[n], see tts_model::fp8); x f32 [M][ldx]; y f32 [M][ldy].
// RMSNorm (optional, fused; g f32 [K]): xin = g ⊙ x / sqrt(mean(x²) + eps) per row. No
//   prologue: the product runs on g ⊙ x while the warps gather Σ x² from the same loads,
//   and the row's 1/rms scales the finished sum (nothing waits for the row's norm).
// Epilogue: v = acc (+ bias[n]); act 1: v = silu(v); act 2: rows (2i, 2i+1) are a
//   (gate, up) pair and y[m][i] = silu(gate) * up; then y = (res ? res[m][n] : 0) + v
//   (`res` may alias `y`: each element is read and written by the same thread).
// Grid: 256-thread blocks of 8 warps. A warp owns R = 2 output rows and a K slice: with
// `ksplit` S (1, 2 or 4) the 8 warps form 8/S groups of S warps, group g taking rows
// 2(blk·8/S + g) .. +1 and warp w%S the S-th part of K — so layers with few rows still
// fill the GPU. Lanes stream 16-byte weight chunks (8 bf16 or 16 E4M3 weights), up to 4
// in flight per row. Partial sums meet in shared memory in a fixed order: a row's result
// never depends on M. Rows m >= rows_valid write nothing. Blocks: ceil(N / (16 / S)).
// `gemv_m1_pre` is `gemv_m1` issuing each pass's X loads together (see `PRE` below).
// Norm chain (one row, `linear.rs`: a talker step's O and down projections and the normed
// layer after each): the writer, a layer without activation whose N is even, also writes
// xo[n] = xo_g[n] · y[n] (the next norm's gain applied) and, per row pair, y[n]² +
// y[n+1]² into ss_out[n / 2]; the reader then takes X = xo without a norm of its own
// (`norm_w` null) and scales its sums by 1 / sqrt(Σ ss_in / K + eps), the ss_n partials
// summed by the block's threads in a fixed order, loaded right after its wait. The same
// maths as the fused norm, summed in another order.

#define GEMV_R 2
#define GEMV_U 4
#define GEMV_WARPS 8

// The four E4M3 codes of `u` (byte 0 first) as f32, exactly.
__device__ __forceinline__ void e4m3x4_to_f32(unsigned int u, float* f) {
#if __CUDA_ARCH__ >= 890
    unsigned int lo, hi;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"((unsigned short)(u & 0xffffu)));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"((unsigned short)(u >> 16)));
    const float k = 1.0f;
#else
    // E4M3's exponent and mantissa bits placed in a half's: the half is the value / 256
    // (bias 15 vs 7), subnormals included.
    unsigned int b0 = u & 0xffu, b1 = (u >> 8) & 0xffu, b2 = (u >> 16) & 0xffu, b3 = u >> 24;
    auto h = [](unsigned int b) { return ((b & 0x80u) << 8) | ((b & 0x7fu) << 7); };
    unsigned int lo = h(b0) | (h(b1) << 16), hi = h(b2) | (h(b3) << 16);
    const float k = 256.0f;
#endif
    f[0] = half_bits_to_f32(lo & 0xffffu) * k;
    f[1] = half_bits_to_f32(lo >> 16) * k;
    f[2] = half_bits_to_f32(hi & 0xffffu) * k;
    f[3] = half_bits_to_f32(hi >> 16) * k;
}

// A thread's octet of K (8 consecutive k) of every X row, and of the norm's gains, as loaded.
template <int M>
struct GemvOctet {
    float4 x[M][2];
    float4 g[2];
};

// Loads the octet at `idx`, or zeros where it lies past the warp's K slice (`ok` false).
template <int M>
__device__ __forceinline__ void gemv_load_octet(GemvOctet<M>& o, int idx, bool ok,
                                                const float* __restrict__ X, int ldx,
                                                const float* __restrict__ norm_w) {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int m = 0; m < M; m++) {
        const float4* xp = (const float4*)(X + (size_t)m * ldx + idx);
        o.x[m][0] = ok ? xp[0] : z;
        o.x[m][1] = ok ? xp[1] : z;
    }
    const bool gains = ok && norm_w;
    o.g[0] = gains ? ((const float4*)(norm_w + idx))[0] : z;
    o.g[1] = gains ? ((const float4*)(norm_w + idx))[1] : z;
}

// acc[r][m] += Σ_i xin[i] · wf[r][i] for one row m's octet x; with the norm (gains g),
// xin = g ⊙ x (the row's 1/rms scales the finished sum) and sq gathers Σ x².
template <int M>
__device__ __forceinline__ void gemv_fma8(float (&acc)[GEMV_R][M], float& sq,
                                          const float (&wf)[GEMV_R][8], float4 a, float4 b,
                                          const float* gv, int m) {
    float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    if (gv) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            sq = fmaf(xv[i], xv[i], sq);
            xv[i] *= gv[i];
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int i = 0; i < 8; i++) acc[r][m] = fmaf(xv[i], wf[r][i], acc[r][m]);
}

// One octet of K at `idx` for every row, its X (and gains) loaded here, right before use.
// (Not gemv_load_octet + gemv_octet_loaded: written that way the compiler holds more, and
// gemv_m2 / gemv_m8 went from 84 / 128 to 102 / 192 registers.)
template <int M>
__device__ __forceinline__ void gemv_octet(float (&acc)[GEMV_R][M], float (&sq)[M],
                                           const float (&wf)[GEMV_R][8], int idx,
                                           const float* __restrict__ X, int ldx,
                                           const float* __restrict__ norm_w) {
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
        gemv_fma8<M>(acc, sq[m], wf, xp[0], xp[1], norm_w ? gv : nullptr, m);
    }
}

// The same over an octet loaded ahead (`gemv_load_octet`).
template <int M>
__device__ __forceinline__ void gemv_octet_loaded(float (&acc)[GEMV_R][M], float (&sq)[M],
                                                  const float (&wf)[GEMV_R][8],
                                                  const GemvOctet<M>& o, bool norm) {
    const float gv[8] = {o.g[0].x, o.g[0].y, o.g[0].z, o.g[0].w,
                         o.g[1].x, o.g[1].y, o.g[1].z, o.g[1].w};
#pragma unroll
    for (int m = 0; m < M; m++) gemv_fma8<M>(acc, sq[m], wf, o.x[m][0], o.x[m][1], norm ? gv : nullptr, m);
}

// F8: W holds E4M3 codes and `scales` one factor per row; else W is bf16. PRE (bf16, for
// warps with several passes over K): each pass issues all its X loads before the first
// product (one wait on L2 per pass instead of one per octet), at the cost of the registers
// that hold them — a resident block per multiprocessor, which layers of one pass miss more.
template <int M, bool F8, bool PRE, int U>
__device__ __forceinline__ void gemv_body(const void* __restrict__ Wv, int N, int K,
                                          const float* __restrict__ X, int ldx,
                                          const float* __restrict__ norm_w, float eps,
                                          const float* __restrict__ bias, int act,
                                          const float* res, int ldr, float* Y, int ldy,
                                          int rows_valid, int ksplit,
                                          const float* __restrict__ scales,
                                          const float* __restrict__ ss_in, int ss_n, float* xo,
                                          const float* __restrict__ xo_g, float* ss_out) {
    static_assert(!(PRE && F8), "PRE is for bf16 weights");
    // elements per 16-byte chunk, a warp's K step, bytes per element
    constexpr int EPL = F8 ? 16 : 8, STEP = 32 * EPL, EB = F8 ? 1 : 2;
    const unsigned char* W = (const unsigned char*)Wv;
    // per warp: its partial sums (GEMV_R·M), then with the norm its rows' Σ x² (M)
    __shared__ float s_part[GEMV_WARPS][(GEMV_R + 1) * M];
    __shared__ float s_ss[GEMV_WARPS];  // the norm chain's partials, by warp
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int groups = GEMV_WARPS / ksplit;
    const int g = warp / ksplit, part = warp % ksplit;
    const int n0 = (blockIdx.x * groups + g) * GEMV_R;
    // this warp's K slice, in whole steps
    const int steps = (K + STEP - 1) / STEP;
    const int per = (steps + ksplit - 1) / ksplit;
    const int k_begin = part * per * STEP, k_end = min(K, (part + 1) * per * STEP);
    const unsigned char* wrow[GEMV_R];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++) wrow[r] = W + (size_t)min(n0 + r, N - 1) * K * EB;
    // One pass: U 16-byte chunks of each of the warp's rows per lane.
    uint4 w[U][GEMV_R];
    auto load_pass = [&](int kb) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            int idx = kb + u * STEP;
#pragma unroll
            for (int r = 0; r < GEMV_R; r++)
                w[u][r] = idx < k_end ? __ldg((const uint4*)(wrow[r] + (size_t)idx * EB))
                                      : make_uint4(0, 0, 0, 0);
        }
    };
    // The weights do not depend on earlier kernels: load this lane's first pass into
    // registers (and ask L2 for the second) while the previous kernel may still be
    // running, then wait for it.
    const int kb0 = k_begin + lane * EPL;
    if (n0 < N) {
        load_pass(kb0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            int idx = kb0 + (U + u) * STEP;
#pragma unroll
            for (int r = 0; r < GEMV_R; r++)
                if (idx < k_end) prefetch_l2(wrow[r] + (size_t)idx * EB);
        }
    }
    // The lane that stores output (r, m) (see the end): with one row (EARLY_EPI), its bias
    // and FP8 scale values now (immutable) and its residual value right after the wait, in
    // flight during the products, so the epilogue waits on no memory (the H200: one-row
    // stages 2-3 % faster; the talker's four-row step measured ~20 % slower with it).
    constexpr bool EARLY_EPI = M == 1;
    const int sr = lane / M, sn = n0 + sr;
    const bool stores = EARLY_EPI && part == 0 && lane < GEMV_R * M && lane % M < rows_valid &&
                        sn < N && !(act == 2 && sr != 0);
    float pre_b[2] = {0.f, 0.f}, pre_s[2] = {1.f, 1.f}, pre_res = 0.f, pre_g = 0.f;
    if (stores) {
        if (xo) pre_g = xo_g[sn];
        if (bias) {
            pre_b[0] = bias[sn];
            if (act == 2) pre_b[1] = bias[sn + 1];
        }
        if constexpr (F8) {
            pre_s[0] = scales[sn];
            if (act == 2) pre_s[1] = scales[sn + 1];
        }
    }
    pdl_wait();
    pdl_trigger();
    if (stores && res) pre_res = res[act == 2 ? sn / 2 : sn];
    // the norm chain's Σ y² partials of this row, in flight during the products
    float ss = 0.f;
    if (ss_in) {
#pragma unroll 4
        for (int i = threadIdx.x; i < ss_n; i += blockDim.x) ss += ss_in[i];
    }
    float acc[GEMV_R][M], sq[M];
#pragma unroll
    for (int m = 0; m < M; m++) {
        sq[m] = 0.f;
#pragma unroll
        for (int r = 0; r < GEMV_R; r++) acc[r][m] = 0.f;
    }

    const bool norm = norm_w != nullptr;
    if (n0 < N) {
        for (int kb = kb0; kb < k_end; kb += STEP * U) {
            if (kb != kb0) load_pass(kb);
            if constexpr (PRE) {
                // every X and gain load of the pass in flight before the first product
                GemvOctet<M> o[U];
#pragma unroll
                for (int u = 0; u < U; u++)
                    gemv_load_octet<M>(o[u], kb + u * STEP, kb + u * STEP < k_end, X, ldx, norm_w);
#pragma unroll
                for (int u = 0; u < U; u++) {
                    float wf[GEMV_R][8];
#pragma unroll
                    for (int r = 0; r < GEMV_R; r++) unpack8(w[u][r], wf[r]);
                    gemv_octet_loaded<M>(acc, sq, wf, o[u], norm);
                }
                continue;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                int idx = kb + u * STEP;
                if (idx >= k_end) break;
                float wf[GEMV_R][8];
                if constexpr (F8) {
#pragma unroll
                    for (int r = 0; r < GEMV_R; r++) {
                        e4m3x4_to_f32(w[u][r].x, wf[r]);
                        e4m3x4_to_f32(w[u][r].y, wf[r] + 4);
                    }
                    gemv_octet<M>(acc, sq, wf, idx, X, ldx, norm_w);
#pragma unroll
                    for (int r = 0; r < GEMV_R; r++) {
                        e4m3x4_to_f32(w[u][r].z, wf[r]);
                        e4m3x4_to_f32(w[u][r].w, wf[r] + 4);
                    }
                    gemv_octet<M>(acc, sq, wf, idx + 8, X, ldx, norm_w);
                } else {
#pragma unroll
                    for (int r = 0; r < GEMV_R; r++) unpack8(w[u][r], wf[r]);
                    gemv_octet<M>(acc, sq, wf, idx, X, ldx, norm_w);
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
    if (norm) {
#pragma unroll
        for (int m = 0; m < M; m++) {
            float v = warp_sum(sq[m]);
            if (lane == 0) s_part[warp][GEMV_R * M + m] = v;
        }
    }
    if (ss_in) {
        const float v = warp_sum(ss);
        if (lane == 0) s_ss[warp] = v;
    }
    __syncthreads();
    // the group's first warp combines its S partials; lane l writes output (l / M, l % M)
    if (part != 0 || n0 >= N || lane >= GEMV_R * M) return;
    const int r = lane / M, m = lane % M;
    float a = 0.f;
    for (int p = 0; p < ksplit; p++) a += s_part[warp + p][lane];
    const int n = n0 + r;
    if (m >= rows_valid || n >= N) return;
    if constexpr (F8) a *= EARLY_EPI ? pre_s[0] : scales[n];
    float inv = 1.f;
    if (norm) {
        // the group's warps cover K once between them: their Σ x² meet in the same order
        float t = 0.f;
        for (int p = 0; p < ksplit; p++) t += s_part[warp + p][GEMV_R * M + m];
        inv = 1.0f / sqrtf(div_by_count(t, K) + eps);
    } else if (ss_in) {
        float t = 0.f;
        for (int w = 0; w < GEMV_WARPS; w++) t += s_ss[w];
        inv = 1.0f / sqrtf(div_by_count(t, K) + eps);
    }
    a *= inv;
    float up = 0.f;
    if (act == 2) {
        if (r != 0) return;
        for (int p = 0; p < ksplit; p++) up += s_part[warp + p][M + m];
        if constexpr (F8) up *= EARLY_EPI ? pre_s[1] : scales[n + 1];
        up *= inv;
    }
    if constexpr (EARLY_EPI) {
        const float o = linear_act(a, up, act, bias != nullptr, pre_b[0], pre_b[1]);
        const float y = res ? o + pre_res : o;
        Y[act == 2 ? n / 2 : n] = y;
        if (xo) {
            // act 0 and N even (linear.rs): lanes 0 and 1 hold rows n0 and n0 + 1
            xo[n] = pre_g * y;
            const float q = y * y, q1 = __shfl_down_sync(0x3u, q, 1);
            if (lane == 0) ss_out[n0 / 2] = q + q1;
        }
    } else {
        linear_store(a, up, n, m, act, bias, res, ldr, Y, ldy);
    }
}

// BOUNDS: the kernel's __launch_bounds__. gemv_m2 compiled to 84 registers fits two blocks
// a multiprocessor; held to three blocks (80 registers) the H200 ran two-row stages 6-12 %
// faster (`bench/results/2026-12-03-h200-staged-gemv`). The others keep the plain bound: a
// minimum of one block lets the compiler take more registers (gemv_m8: 128 -> 190).
#define GEMV_THREE_BLOCKS __launch_bounds__(256, 3)
#define GEMV_BOUNDS __launch_bounds__(256)
#define GEMV_ENTRY(NAME, MM, F8, WT, PRE, BOUNDS) GEMV_ENTRY_U(NAME, MM, F8, WT, PRE, BOUNDS, GEMV_U)
#define GEMV_ENTRY_U(NAME, MM, F8, WT, PRE, BOUNDS, UU)                                        \
    extern "C" __global__ void BOUNDS NAME(                                                    \
        const WT* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,           \
        const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,    \
        const float* res, int ldr, float* Y, int ldy, int rows_valid, int ksplit,                \
        const float* __restrict__ scales, const float* __restrict__ ss_in, int ss_n, float* xo,  \
        const float* __restrict__ xo_g, float* ss_out) {                                         \
        gemv_body<MM, F8, PRE, UU>(W, N, K, X, ldx, norm_w, eps, bias, act, res, ldr, Y, ldy,        \
                               rows_valid, ksplit, scales, ss_in, ss_n, xo, xo_g, ss_out);       \
    }

// bf16 weights (`scales` unused)
GEMV_ENTRY(gemv_m1, 1, false, bf16, false, GEMV_BOUNDS)
GEMV_ENTRY(gemv_m2, 2, false, bf16, false, GEMV_THREE_BLOCKS)
GEMV_ENTRY(gemv_m4, 4, false, bf16, false, GEMV_BOUNDS)
GEMV_ENTRY(gemv_m8, 8, false, bf16, false, GEMV_BOUNDS)
// one row, warps with two or more passes over K (`linear.rs` routes)
GEMV_ENTRY(gemv_m1_pre, 1, false, bf16, true, GEMV_BOUNDS)
// one row, passes of 8 chunks instead of 4 (`linear::GemvPasses`; the same sums in the
// same order, so the same bits as gemv_m1 / gemv_m1_pre): a warp of the talker's QKV or
// gate/up holds its whole K slice in one pass, loaded before the PDL wait
GEMV_ENTRY_U(gemv_m1_u8, 1, false, bf16, false, GEMV_BOUNDS, 8)
GEMV_ENTRY_U(gemv_m1_u8_pre, 1, false, bf16, true, GEMV_BOUNDS, 8)
// E4M3 weights with per-row scales (one or two rows: `routing::fp8_gemv`)
GEMV_ENTRY(gemv8_m1, 1, true, unsigned char, false, GEMV_BOUNDS)
GEMV_ENTRY(gemv8_m2, 2, true, unsigned char, false, GEMV_BOUNDS)
