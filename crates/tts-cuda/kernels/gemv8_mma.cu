// gemv8_mma.cu — gemv.cu's FP8 GEMV (`gemv8_*`: the same arguments, epilogue, fused norm
// and norm chain) on tensor cores, for one or two rows:
//   y[m][n] = epilogue( inv_m · scales[n] · Σ_k xin[m][k] · e4m3(W[n][k]) )
// Here a code becomes an f16 (value / 256) with two integer ops per pair and the products
// run on mma.m16n8k16 with f32 accumulation. Where it pays (H100 kernel table,
// bench/results/2026-12-05-h100-fp8-gemv; routing::fp8_gemv): with a fused norm (talker
// gate/up 16.1 µs against 20.4 on gemv8_m1, 20.3 on the bf16 GEMV) and at two rows (16.7
// against 20.5 and 24.6); at one row without a norm it was slower than gemv8_m1 (15.2
// against 13.4). Its prologue, once two passes over x and three barriers, is now one pass
// and two barriers: 4-9 % faster with a norm at one row, -6 % to +2 % at two rows (talker
// gate/up 15.3 and 17.0 µs; bench/results/2026-12-05-h100-fp8-prologue).
//
// Operands: A = 16 weight rows × 16 k (f16, exact: every E4M3 value / 256 is an f16,
// subnormals included); B = the rows of x, each split into f16 hi = f16(x·s) and lo =
// f16(x·s - hi) as columns (2m, 2m+1), s a power of two per row putting max|xin| in
// [2^13, 2^14) (no overflow, ~22 bits of each value kept); D = f32. Columns 2M..7 are zero.
// Inside a 64-wide chunk lane group t (lane % 4) holds physical k = 16t .. 16t+15 of its
// rows (one 16-byte load); MMA j (0..3) of the chunk takes the word of codes 4j..4j+3,
// whose codes (0, 2) form the fragment's k pair (2t, 2t+1) and codes (1, 3) the pair
// (2t+8, 2t+9). x is laid out in shared memory in the same order (g8t_fill), so each
// lane's B fragments of a chunk are two 16-byte shared loads.
//
// Grid: ceil(N / 16) blocks of 256 threads; block b owns rows 16b .. 16b+15, its 8 warps
// take the K chunks w, w+8, ... (G8T_U chunks in flight, the first pass loaded before the
// PDL wait) and meet in shared memory in a fixed order. Dynamic shared memory: 4·K·M
// bytes. Needs K % 64 == 0, K·M <= 10240 (the prologue's loop bound) and 16-byte aligned
// code rows (the host checks). Rows m >= rows_valid write nothing; a row's result does not
// depend on M. `ksplit` is unused.

#define G8T_WARPS 8
#define G8T_U 4

// The E4M3 codes in bytes 0 and 2 (resp. 1 and 3) of `v` as an f16 pair (the lower byte in
// the low half) of value / 256: the code's sign to bit 15, its exponent and mantissa bits
// under the half's (bias 15 against 7: the factor 2^8).
__device__ __forceinline__ unsigned e4m3_pair02(unsigned v) {
    return ((v << 8) & 0x80008000u) | ((v << 7) & 0x3f803f80u);
}
__device__ __forceinline__ unsigned e4m3_pair13(unsigned v) {
    return (v & 0x80008000u) | ((v >> 1) & 0x3f803f80u);
}

// xin of row m at k .. k+3 (x times the norm's weights, when fused).
__device__ __forceinline__ float4 g8t_xin(const float* __restrict__ X, int ldx, int m, int k,
                                          const float* __restrict__ norm_w) {
    const float4 xv = *(const float4*)(X + (size_t)m * ldx + k);
    if (!norm_w) return xv;
    const float4 gv = *(const float4*)(norm_w + k);
    return make_float4(xv.x * gv.x, xv.y * gv.y, xv.z * gv.z, xv.w * gv.w);
}

// Row m's xin·s (s = scale[m]) in B-fragment order: word ((c·4 + t)·2M + col)·8 + 2j + h
// of `sx` holds the f16 pair of column col (2m: hi, 2m+1: lo of row m) at physical k = 64c
// + 16t + 4j + (h ? {1, 3} : {0, 2}). This thread's values are at k = 4·(threadIdx.x +
// q·blockDim.x), q < XS; the first XR of them per row are held in `xg`, the others read again
// (L1: the statistics pass read them just before).
template <int M, int XS, int XR>
__device__ __forceinline__ void g8t_fill(unsigned* sx, const float4 (&xg)[M][XR],
                                         const float* __restrict__ X, int ldx, int K,
                                         const float* __restrict__ norm_w, const float* scale) {
#pragma unroll
    for (int q = 0; q < XS; q++) {
        const int k = 4 * (threadIdx.x + q * blockDim.x);
        if (k >= K) break;
        const int c = k >> 6, t = (k >> 4) & 3, j = (k >> 2) & 3;
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float4 x = q < XR ? xg[m][q < XR ? q : 0] : g8t_xin(X, ldx, m, k, norm_w);
            const float v[4] = {x.x * scale[m], x.y * scale[m], x.z * scale[m], x.w * scale[m]};
            unsigned hi[4], lo[4];
#pragma unroll
            for (int e = 0; e < 4; e++) f2h_split(v[e], hi[e], lo[e]);
            unsigned* p = sx + ((c * 4 + t) * 2 * M + 2 * m) * 8 + 2 * j;
            *(uint2*)p = make_uint2(hi[0] | hi[2] << 16, hi[1] | hi[3] << 16);
            *(uint2*)(p + 8) = make_uint2(lo[0] | lo[2] << 16, lo[1] | lo[3] << 16);
        }
    }
}

template <int M>
__device__ __forceinline__ void gemv8_mma_body(
    const unsigned char* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,
    const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,
    const float* res, int ldr, float* Y, int ldy, int rows_valid,
    const float* __restrict__ scales, const float* __restrict__ ss_in, int ss_n, float* xo,
    const float* __restrict__ xo_g, float* ss_out) {
    extern __shared__ __align__(16) unsigned g8t_sx[];
    __shared__ float s_red[G8T_WARPS][4][32];
    // per warp: each row's max |xin| and Σ x² (norm) or its share of the chain's partials
    __shared__ float s_row[G8T_WARPS][2 * M];
    __shared__ float s_scale[M], s_inv[M];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16, chunks = K >> 6;
    const unsigned char* w0 = W + (size_t)min(n0 + g, N - 1) * K + t * 16;
    const unsigned char* w8 = W + (size_t)min(n0 + g + 8, N - 1) * K + t * 16;
    // The weights do not depend on earlier kernels: the first pass into registers while
    // the previous kernel may still be running.
    uint4 a[G8T_U][2];
    auto load_pass = [&](int c0) {
#pragma unroll
        for (int u = 0; u < G8T_U; u++) {
            const int c = c0 + u * G8T_WARPS;
            a[u][0] = c < chunks ? __ldg((const uint4*)(w0 + (size_t)c * 64)) : make_uint4(0, 0, 0, 0);
            a[u][1] = c < chunks ? __ldg((const uint4*)(w8 + (size_t)c * 64)) : make_uint4(0, 0, 0, 0);
        }
    };
    load_pass(warp);
    pdl_wait();
    pdl_trigger();

    // One pass over x for the row statistics (max |xin| for s, Σ x² for a fused norm);
    // each thread keeps its first XR float4 of each row in registers for the split (K <=
    // 2048 held whole), the others are read again (L1). XS float4 per thread and row cover
    // K·M <= 10240 (gemv8_mma_fits). Holding all of them took 96 registers at one row, and
    // the talker's gate/up (768 blocks) 16.7 µs against 16.1 before; with XR = 2, 15.3
    // (H100, bench/results/2026-12-05-h100-fp8-prologue).
    constexpr int XS = 10 / M, XR = 2;
    float4 xg[M][XR];
    float mx[M], sq[M];
#pragma unroll
    for (int m = 0; m < M; m++) mx[m] = sq[m] = 0.f;
#pragma unroll
    for (int q = 0; q < XS; q++) {
        const int k = 4 * (threadIdx.x + q * blockDim.x);
        if (k >= K) break;
        float4 gv = make_float4(1.f, 1.f, 1.f, 1.f);
        if (norm_w) gv = *(const float4*)(norm_w + k);
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float4 xv = *(const float4*)(X + (size_t)m * ldx + k);
            const float4 x = make_float4(xv.x * gv.x, xv.y * gv.y, xv.z * gv.z, xv.w * gv.w);
            if (q < XR) xg[m][q < XR ? q : 0] = x;
            mx[m] = fmaxf(mx[m],
                          fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w))));
            sq[m] += xv.x * xv.x + xv.y * xv.y + xv.z * xv.z + xv.w * xv.w;
        }
    }
    // Or the chain's Σ partials in place of Σ x².
    float ss = 0.f;
    if (ss_in)
        for (int i = threadIdx.x; i < ss_n; i += blockDim.x) ss += ss_in[i];
#pragma unroll
    for (int m = 0; m < M; m++) {
        const float wm = warp_max(mx[m]);
        const float ws = warp_sum(ss_in ? (m == 0 ? ss : 0.f) : sq[m]);
        if (lane == 0) {
            s_row[warp][2 * m] = wm;
            s_row[warp][2 * m + 1] = ws;
        }
    }
    __syncthreads();
    // Every thread derives each row's s (the warps' maxima in one order: the same value in
    // every thread); threads m < M also keep s and the norm's factor for the epilogue.
    float scale[M];
#pragma unroll
    for (int m = 0; m < M; m++) {
        float big = 0.f, sum = 0.f;
        for (int w = 0; w < G8T_WARPS; w++) {
            big = fmaxf(big, s_row[w][2 * m]);
            sum += s_row[w][2 * m + 1];
        }
        // s = 2^(13 - e), e the exponent of max |xin|: max · s in [2^13, 2^14)
        const int e = big > 0.f ? (int)((__float_as_uint(big) >> 23) & 0xffu) - 127 : 0;
        scale[m] = __uint_as_float((unsigned)(127 + 13 - max(-100, min(100, e))) << 23);
        if (threadIdx.x == m) {
            s_scale[m] = scale[m];
            s_inv[m] = (norm_w || ss_in) ? 1.0f / sqrtf(div_by_count(sum, K) + eps) : 1.f;
        }
    }
    g8t_fill<M, XS, XR>(g8t_sx, xg, X, ldx, K, norm_w, scale);
    __syncthreads();

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const bool has_b = g < 2 * M;
    for (int c0 = warp; c0 < chunks; c0 += G8T_WARPS * G8T_U) {
        if (c0 != warp) load_pass(c0);
#pragma unroll
        for (int u = 0; u < G8T_U; u++) {
            const int c = c0 + u * G8T_WARPS;
            if (c >= chunks) break;
            uint4 b0 = make_uint4(0, 0, 0, 0), b1 = b0;
            if (has_b) {
                const uint4* p = (const uint4*)(g8t_sx + ((c * 4 + t) * 2 * M + g) * 8);
                b0 = p[0];
                b1 = p[1];
            }
            const unsigned r0[4] = {a[u][0].x, a[u][0].y, a[u][0].z, a[u][0].w};
            const unsigned r8[4] = {a[u][1].x, a[u][1].y, a[u][1].z, a[u][1].w};
            const unsigned bw[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int j = 0; j < 4; j++)
                mma_f16(acc, e4m3_pair02(r0[j]), e4m3_pair02(r8[j]), e4m3_pair13(r0[j]),
                        e4m3_pair13(r8[j]), bw[2 * j], bw[2 * j + 1]);
        }
    }
    // lane holds D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]
#pragma unroll
    for (int q = 0; q < 4; q++) s_red[warp][q][lane] = acc[q];
    __syncthreads();
    // Thread (p, m), p < 8: rows 2p, 2p+1 of the block (a SwiGLU pair, or two outputs).
    if (threadIdx.x >= 8 * M) return;
    const int p = threadIdx.x & 7, m = threadIdx.x >> 3;
    if (m >= rows_valid) return;
    float v[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = 2 * p + h, l = (r & 7) * 4 + m, q = r >= 8 ? 2 : 0;
        float sum = 0.f;
        for (int w = 0; w < G8T_WARPS; w++) sum += s_red[w][q][l] + s_red[w][q + 1][l];
        const int n = min(n0 + r, N - 1);
        v[h] = sum * (256.0f * scales[n] / s_scale[m]) * s_inv[m];
    }
    const int n = n0 + 2 * p;
    if (act == 2) {
        if (n + 1 < N) linear_store(v[0], v[1], n, m, act, bias, res, ldr, Y, ldy);
        return;
    }
    float y[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; h++)
        if (n + h < N) y[h] = linear_store(v[h], 0.f, n + h, m, act, bias, res, ldr, Y, ldy);
    if (xo && n + 1 < N) {
        // the norm chain's writer (one row, act 0, N even: linear.rs)
        xo[n] = xo_g[n] * y[0];
        xo[n + 1] = xo_g[n + 1] * y[1];
        ss_out[n / 2] = y[0] * y[0] + y[1] * y[1];
    }
}

// MIN_BLOCKS: the one-row kernel kept at 64 registers (4 blocks of 256 a multiprocessor);
// the two-row one takes 87 (at 64 or 80 it spills).
#define GEMV8_MMA_ENTRY(NAME, MM, MIN_BLOCKS)                                                   \
    extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS) NAME(                         \
        const unsigned char* __restrict__ W, int N, int K, const float* __restrict__ X,         \
        int ldx, const float* __restrict__ norm_w, float eps, const float* __restrict__ bias,   \
        int act, const float* res, int ldr, float* Y, int ldy, int rows_valid, int ksplit,      \
        const float* __restrict__ scales, const float* __restrict__ ss_in, int ss_n, float* xo, \
        const float* __restrict__ xo_g, float* ss_out) {                                        \
        gemv8_mma_body<MM>(W, N, K, X, ldx, norm_w, eps, bias, act, res, ldr, Y, ldy,           \
                           rows_valid, scales, ss_in, ss_n, xo, xo_g, ss_out);                  \
    }

GEMV8_MMA_ENTRY(gemv8_mma_m1, 1, 4)
GEMV8_MMA_ENTRY(gemv8_mma_m2, 2, 1)
