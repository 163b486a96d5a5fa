// codec.cu — the 12 Hz codec decoder, incremental and batched over streams (slots).
//
// Everything around the GEMMs: convolutions are an im2col kernel (reading the slot's history
// and the new input, applying the preceding SnakeBeta / GELU on the fly) followed by one
// f32/TF32 cuBLAS GEMM, or, for at most 8 steps, one `codec_gemv` launch (codec_gemv.cu);
// biases ride in the GEMM as an extra "ones" column (see below).
//
// Layouts (all f32, time-major): an activation is [steps][ld] with `ld >= channels`.
//   A GEMM input with a bias has ld = Kp = roundup(K + 1, 4): column K is 1.0 and
//   columns K+1..Kp-1 are 0, matching a weight row [W | b | 0..]. Kernels that produce
//   such inputs write those columns themselves (`codec_im2col`, `codec_act_pad`,
//   `codec_rms_norm`, `codec_dw_ln`).
// A call ("pass") decodes `frames` frames of `nrows` rows (one row = one slot's new
//   frames, contiguous). At a layer running at `rate` steps per frame, global step s
//   belongs to frame s / rate; the row's local step is s - first_frame * rate.
// Pass metadata `meta` (int32, R = row capacity): row_slot[R] (-1 = padding row),
//   row_parity[R], row_first_frame[R], row_frames[R], row_position[R] (absolute position
//   of the row's first frame), then frame_row[frames] (-1 = padding frame: its outputs
//   are zeros or garbage and it touches no state).
// Per-slot state: `state + slot * slot_stride`. A causal layer with context `ctx` steps of
//   `cin` channels owns 2 * ctx * cin floats at `hist_off`: two copies of its history
//   (raw inputs, before any activation). A pass reads copy `parity` and writes the
//   updated history into copy 1 - parity (the host flips the slot's parity after each
//   pass), so reading and updating need no ordering inside one launch. A transformer
//   layer owns a KV ring at `kv_off`: K [ring][kvh*hd] then V [ring][kvh*hd], position p
//   at row p % ring, keys stored after RoPE; ring >= window - 1 + frames of any row.
// Grids: "step" kernels use one block per output step plus, when the layer has history,
//   nrows * ctx more blocks that each write one step of the updated history.
// Limits: attention hd <= 128 (even), window <= 1024; codec_dw_ln channels <= 4096.

struct CodecMeta {
    const int* m;
    int R;
    __device__ __forceinline__ int slot(int r) const { return m[r]; }
    __device__ __forceinline__ int parity(int r) const { return m[R + r]; }
    __device__ __forceinline__ int first(int r) const { return m[2 * R + r]; }
    __device__ __forceinline__ int len(int r) const { return m[3 * R + r]; }
    __device__ __forceinline__ int pos(int r) const { return m[4 * R + r]; }
    __device__ __forceinline__ int frame_row(int f) const { return m[5 * R + f]; }
};

// sin(v) for SnakeBeta: v reduced to [-π, π] in f32 (2π as a two-float sum), then the
// hardware approximation (abs error < 4e-7 on [-π, π]; the reduction adds ~|v|·1e-7).
// The snakes sit in front of TF32 GEMMs, which round their inputs to ~5e-4 relative:
// this costs nothing measurable there, while the accurate sinf made the 24 kHz im2col
// (7 taps, so 7 sines per input) instruction-bound (Nsight Compute: SM 82 %, memory 41 %).
__device__ __forceinline__ float snake_sin(float v) {
    float k = rintf(v * 0.159154943091895336f);
    float r = fmaf(-k, 6.28318548202514648f, v);
    r = fmaf(-k, -1.74845553e-7f, r);
    return __sinf(r);
}

// act 0: identity; 1: SnakeBeta x + inv_beta·sin²(alpha·x) (alpha = exp(α), inv_beta =
// 1/(exp(β)+1e-9) precomputed per channel); 2: exact (erf) GELU.
// codec_act with channel ch's alpha and inv_beta given (al = alpha[ch], ib = inv_beta[ch]).
__device__ __forceinline__ float codec_act_v(float v, int act, float al, float ib) {
    if (act == 1) {
        float s = snake_sin(v * al);
        return v + ib * s * s;
    }
    if (act == 2) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    return v;
}
__device__ __forceinline__ float codec_act(float v, int act, const float* alpha,
                                           const float* inv_beta, int ch) {
    return act == 1 ? codec_act_v(v, 1, alpha[ch], inv_beta[ch]) : codec_act_v(v, act, 0.f, 0.f);
}

// Input row `back` steps before the row's local step `ls`: from the new input `x` (global
// step s - back) or, before the row's first step, from the slot's history copy `hist`.
__device__ __forceinline__ const float* codec_src(const float* x, int ldx, size_t s, int ls,
                                                  int back, const float* hist, int ctx,
                                                  int cin) {
    int src = ls - back;
    return src >= 0 ? x + (s - back) * (size_t)ldx : hist + (size_t)(ctx + src) * cin;
}

// History-update block `hb`: step p of row `row`'s new history = the last ctx raw input
// steps of [old history ; new input], written to the slot's other copy.
__device__ void codec_hist_update(int hb, const float* x, int ldx, int cin, int ctx, int rate,
                                  float* state, int slot_stride, int hist_off, CodecMeta meta,
                                  int nrows) {
    int row = hb / ctx, p = hb % ctx;
    if (row >= nrows) return;
    int slot = meta.slot(row);
    if (slot < 0) return;
    int par = meta.parity(row);
    float* base = state + (size_t)slot * slot_stride + hist_off;
    const float* old = base + (size_t)par * ctx * cin;
    float* neu = base + (size_t)(1 - par) * ctx * cin;
    int src = meta.len(row) * rate - ctx + p;
    const float* s = src >= 0 ? x + ((size_t)meta.first(row) * rate + src) * ldx
                              : old + (size_t)(ctx + src) * cin;
    for (int i = threadIdx.x; i < cin; i += blockDim.x) neu[(size_t)p * cin + i] = s[i];
}

// RVQ lookups, one block per frame: z[f] = (cb_0[c_0], Σ_{q=1..nq-1} cb_q[c_q]) where
// tables = f32 [nq][bins][half] (embedding_sum / max(usage, 1e-5)) and codes int32
// [frames][nq]. The 1x1 output projections follow as one GEMM over z's 2*half columns.
#define RVQ_MAXQ 16
extern "C" __global__ void codec_rvq(const int* __restrict__ codes, const int* __restrict__ meta_p,
                                     int R, const float* __restrict__ tables, int bins, int half,
                                     int nq, float* z, int ld, int frames) {
    int f = blockIdx.x;
    if (f >= frames) return;
    CodecMeta meta{meta_p, R};
    float* out = z + (size_t)f * ld;
    if (meta.frame_row(f) < 0) {
        for (int i = threadIdx.x; i < 2 * half; i += blockDim.x) out[i] = 0.f;
        return;
    }
    // the frame's codes first (at most RVQ_MAXQ; more are read one by one), then every
    // table row's load is issued before the sum, which keeps the order q = 1, 2, ...
    const int* c = codes + (size_t)f * nq;
    int cq[RVQ_MAXQ];
#pragma unroll
    for (int q = 0; q < RVQ_MAXQ; ++q) cq[q] = q < nq ? min(max(c[q], 0), bins - 1) : 0;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float t[RVQ_MAXQ];
#pragma unroll
        for (int q = 0; q < RVQ_MAXQ; ++q)
            if (q < nq) t[q] = tables[((size_t)q * bins + cq[q]) * half + i];
        out[i] = t[0];
        float s = 0.f;
#pragma unroll
        for (int q = 1; q < RVQ_MAXQ; ++q)
            if (q < nq) s += t[q];
        for (int q = RVQ_MAXQ; q < nq; ++q)
            s += tables[((size_t)q * bins + min(max(c[q], 0), bins - 1)) * half + i];
        out[half + i] = s;
    }
}

// f16 columns (common.cuh's f2h_sat) feed cuBLAS f16 GEMMs: the same 10-bit mantissa as
// TF32, `CodecPrecision::F16`.

__device__ __forceinline__ void col_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void col_store(unsigned short* p, float v) { *p = f2h_sat(v); }

// im2col of a causal conv (taps k, dilation d, ctx = (k-1)·d) with the activation of its
// input applied on the fly: col[s][j*cin + i] = act(x[s - (k-1-j)·d][i]), from the history
// before the row's first step; then the ones/zero columns up to ldcol. A causal transposed
// conv (kernel g·r, stride r) is the same with k = g, d = 1. hist_off < 0: no history
// (ctx must be 0). Grid: steps + nrows*ctx blocks (the latter update the history).
#define IM2COL_U 4
template <typename T>
__device__ __forceinline__ void codec_im2col_body(
    const float* __restrict__ x, int ldx, int cin, int taps, int dil, int rate, int act,
    const float* __restrict__ alpha, const float* __restrict__ inv_beta, float* state,
    int slot_stride, int hist_off, const int* __restrict__ meta_p, int R, int steps, int nrows,
    T* __restrict__ col, int ldcol) {
    CodecMeta meta{meta_p, R};
    int ctx = (taps - 1) * dil;
    if ((int)blockIdx.x >= steps) {
        codec_hist_update(blockIdx.x - steps, x, ldx, cin, ctx, rate, state, slot_stride,
                          hist_off, meta, nrows);
        return;
    }
    size_t s = blockIdx.x;
    int K = taps * cin;
    T* out = col + s * ldcol;
    int row = meta.frame_row((int)(s / rate));
    if (row < 0) {
        for (int c = threadIdx.x; c < ldcol; c += blockDim.x) col_store(out + c, 0.f);
        return;
    }
    int ls = (int)(s - (size_t)meta.first(row) * rate);
    const float* hist = nullptr;
    if (ctx > 0) {
        hist = state + (size_t)meta.slot(row) * slot_stride + hist_off +
               (size_t)meta.parity(row) * ctx * cin;
    }
    // IM2COL_U taps at a time, so that many loads are in flight per thread
    for (int j0 = 0; j0 < taps; j0 += IM2COL_U) {
        const float* p[IM2COL_U];
#pragma unroll
        for (int u = 0; u < IM2COL_U; u++)
            p[u] = j0 + u < taps
                       ? codec_src(x, ldx, s, ls, (taps - 1 - j0 - u) * dil, hist, ctx, cin)
                       : nullptr;
        T* o = out + j0 * cin;
        for (int i = threadIdx.x; i < cin; i += blockDim.x) {
            float v[IM2COL_U];
#pragma unroll
            for (int u = 0; u < IM2COL_U; u++)
                if (p[u]) v[u] = p[u][i];
#pragma unroll
            for (int u = 0; u < IM2COL_U; u++)
                if (p[u]) col_store(o + u * cin + i, codec_act(v[u], act, alpha, inv_beta, i));
        }
    }
    for (int c = K + threadIdx.x; c < ldcol; c += blockDim.x) col_store(out + c, c == K ? 1.f : 0.f);
}

// Eight columns at once: as col_store, into 16-byte pieces.
__device__ __forceinline__ void col_store8(float* p, const float (&v)[8]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void col_store8(unsigned short* p, const float (&v)[8]) {
    unsigned int h[4];
#pragma unroll
    for (int u = 0; u < 4; u++) h[u] = f2h_sat(v[2 * u]) | ((unsigned int)f2h_sat(v[2 * u + 1]) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(h[0], h[1], h[2], h[3]);
}

// codec_im2col_body's columns, the same values, eight channels per thread: one thread per
// (step, octet of input channels) takes that octet of every tap, IM2COL8_U taps' input
// loads (two float4 each) in flight before their activations and 16-byte (f16) or 32-byte
// (f32) column stores; the block-per-step form stored one value per thread (2-byte stores,
// ~1 TB/s on the H200). The thread of octet 0 also writes the step's ones/zero octet
// (ldcol = K + 8: K = taps·cin is a multiple of 8). Needs cin % 8 == 0, ldcol == K + 8,
// ldx % 4 == 0, 16-byte aligned x, history and col, steps·cin/8 < 2^31 (exec.rs checks;
// else codec_im2col_body).
// Grid: ceil(steps·cin/8 / 256) blocks of 256, then nrows·ctx history-update blocks; at
// most 64 registers (four blocks per multiprocessor): the 2-tap transposed convolutions
// are latency-bound.
#define IM2COL8_U 2
template <typename T>
__device__ __forceinline__ void codec_im2col8_body(
    const float* __restrict__ x, int ldx, int cin, int taps, int dil, int rate, int act,
    const float* __restrict__ alpha, const float* __restrict__ inv_beta, float* state,
    int slot_stride, int hist_off, const int* __restrict__ meta_p, int R, int steps, int nrows,
    T* __restrict__ col, int ldcol) {
    CodecMeta meta{meta_p, R};
    const int ctx = (taps - 1) * dil, K = taps * cin, octs = cin / 8;
    const int n = steps * octs;
    const int col_blocks = (n + 255) / 256;
    if ((int)blockIdx.x >= col_blocks) {
        codec_hist_update(blockIdx.x - col_blocks, x, ldx, cin, ctx, rate, state, slot_stride,
                          hist_off, meta, nrows);
        return;
    }
    const int e = blockIdx.x * 256 + threadIdx.x;
    if (e >= n) return;
    const int s = e / octs, i = (e - s * octs) * 8;
    const int row = meta.frame_row(s / rate);
    T* out = col + (size_t)s * ldcol;
    float v[8];
    if (row < 0) {
        // a padding frame's row is all zeros (its ones column too)
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = 0.f;
        for (int j = 0; j < taps; j++) col_store8(out + j * cin + i, v);
        if (i == 0) col_store8(out + K, v);
        return;
    }
    const int ls = s - meta.first(row) * rate;
    const float* hist = nullptr;
    if (ctx > 0)
        hist = state + (size_t)meta.slot(row) * slot_stride + hist_off +
               (size_t)meta.parity(row) * ctx * cin;
    float al[8], ib[8];
#pragma unroll
    for (int c = 0; c < 8; c++) {
        al[c] = act == 1 ? alpha[i + c] : 0.f;
        ib[c] = act == 1 ? inv_beta[i + c] : 0.f;
    }
    for (int j0 = 0; j0 < taps; j0 += IM2COL8_U) {
        float4 f[IM2COL8_U][2];
#pragma unroll
        for (int u = 0; u < IM2COL8_U; u++) {
            if (j0 + u >= taps) break;
            const float4* p = reinterpret_cast<const float4*>(
                codec_src(x, ldx, s, ls, (taps - 1 - j0 - u) * dil, hist, ctx, cin) + i);
            f[u][0] = p[0];
            f[u][1] = p[1];
        }
#pragma unroll
        for (int u = 0; u < IM2COL8_U; u++) {
            if (j0 + u >= taps) break;
            v[0] = f[u][0].x, v[1] = f[u][0].y, v[2] = f[u][0].z, v[3] = f[u][0].w;
            v[4] = f[u][1].x, v[5] = f[u][1].y, v[6] = f[u][1].z, v[7] = f[u][1].w;
#pragma unroll
            for (int c = 0; c < 8; c++) v[c] = codec_act_v(v[c], act, al[c], ib[c]);
            col_store8(out + (j0 + u) * cin + i, v);
        }
    }
    if (i == 0) {
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = u == 0 ? 1.f : 0.f;
        col_store8(out + K, v);
    }
}

// The im2col kernels: BODY (codec_im2col_body, block per step; codec_im2col8_body, eight
// channels per thread) over f32 columns or f16 bits.
#define CODEC_IM2COL_ENTRY(NAME, T, BODY, BOUNDS)                                               \
    extern "C" __global__ void BOUNDS NAME(                                                     \
        const float* __restrict__ x, int ldx, int cin, int taps, int dil, int rate, int act,   \
        const float* __restrict__ alpha, const float* __restrict__ inv_beta, float* state,     \
        int slot_stride, int hist_off, const int* __restrict__ meta_p, int R, int steps,       \
        int nrows, T* __restrict__ col, int ldcol) {                                            \
        BODY<T>(x, ldx, cin, taps, dil, rate, act, alpha, inv_beta, state, slot_stride,         \
                hist_off, meta_p, R, steps, nrows, col, ldcol);                                 \
    }

CODEC_IM2COL_ENTRY(codec_im2col, float, codec_im2col_body, __launch_bounds__(128))
CODEC_IM2COL_ENTRY(codec_im2col_h, unsigned short, codec_im2col_body, __launch_bounds__(128))
CODEC_IM2COL_ENTRY(codec_im2col8, float, codec_im2col8_body, __launch_bounds__(256, 4))
CODEC_IM2COL_ENTRY(codec_im2col8_h, unsigned short, codec_im2col8_body, __launch_bounds__(256, 4))

// In place, one block per row: x[r][0..c) = act(x[r][0..c)), x[r][c] = 1, x[r][c+1..ld) = 0
// (when ld > c). With act 0 it only (re)writes the ones/zero columns.
extern "C" __global__ void codec_act_pad(float* x, int ld, int c, int act,
                                         const float* __restrict__ alpha,
                                         const float* __restrict__ inv_beta, int rows) {
    int r = blockIdx.x;
    if (r >= rows) return;
    float* xr = x + (size_t)r * ld;
    if (act != 0)
        for (int i = threadIdx.x; i < c; i += blockDim.x)
            xr[i] = codec_act(xr[i], act, alpha, inv_beta, i);
    for (int i = c + threadIdx.x; i < ld; i += blockDim.x) xr[i] = i == c ? 1.f : 0.f;
}

// RMSNorm, one block per row: out[r] = w ⊙ (x[r] / sqrt(mean(x[r]²) + eps)), then the
// ones/zero columns up to ldo.
extern "C" __global__ void codec_rms_norm(const float* __restrict__ x, int ldx, int c,
                                          const float* __restrict__ w, float eps, float* out,
                                          int ldo, int rows) {
    int r = blockIdx.x;
    if (r >= rows) return;
    __shared__ float scratch[33];
    const float* xr = x + (size_t)r * ldx;
    float inv = row_inv_rms(xr, c, eps, scratch);
    float* o = out + (size_t)r * ldo;
    for (int i = threadIdx.x; i < c; i += blockDim.x) o[i] = w[i] * (xr[i] * inv);
    for (int i = c + threadIdx.x; i < ldo; i += blockDim.x) o[i] = i == c ? 1.f : 0.f;
}

// SwiGLU, one block per row: out[r][i] = silu(gu[r][i]) * gu[r][inter + i] (gate rows of
// the fused weight first, then up rows).
extern "C" __global__ void codec_swiglu(const float* __restrict__ gu, int inter, float* out,
                                        int rows) {
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* g = gu + (size_t)r * 2 * inter;
    for (int i = threadIdx.x; i < inter; i += blockDim.x)
        out[(size_t)r * inter + i] = silu(g[i]) * g[inter + i];
}

// Rotate-half RoPE of element i of one head at `pos` (angle pos · inv_freq[i mod hd/2]).
__device__ __forceinline__ float codec_rope(const float* x, int i, int half, float pos,
                                            const float* __restrict__ inv_freq) {
    int j = i < half ? i : i - half;
    float a = pos * inv_freq[j];
    float c = cosf(a), s = sinf(a);
    return i < half ? x[i] * c - x[i + half] * s : x[i] * c + x[j] * s;
}

// 16 bytes global -> shared with cp.async (through L2), not waited for here.
__device__ __forceinline__ void codec_cp16(void* dst, const void* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

// Most ring floats (keys, and as many values) a codec_attention block stages in shared
// memory: the release geometry's window of 72 positions x head_dim 64.
#define CA_STAGE 4608

// Sliding-window attention with RoPE, one block (128 threads) per (frame, head).
// qkv f32 [frames][ldq]: q (heads*hd) | k (kvh*hd) | v (kvh*hd), un-rotated. A query at
// absolute position p sees keys max(0, p-window+1)..p: positions before the row's first
// frame come from the slot's ring (already rotated), the row's new frames straight from
// qkv (rotated here). The block of the first query head of each kv group also stores its
// frame's rotated key and value in the ring (ring positions of this pass never alias the
// older positions being read, as ring >= window - 1 + row frames). With `wide`, the ring's
// keys and values the block reads (at most CA_STAGE floats each, 16-byte aligned) are copied
// into shared memory with every copy in flight at once, while q is rotated: the scores
// and sums then read the same values in the same order as from the ring, without one
// memory round trip per key (H200, 32 rows x 2 frames: ~20 us a launch before). PDL-ready
// (`codec::PDL_KERNELS`): the ring copies are issued before the wait for the GEMM before.
extern "C" __global__ void codec_attention(const float* __restrict__ qkv, int ldq, float* out,
                                           int ldo, float* state, int slot_stride, int kv_off,
                                           int ring, int heads, int kvh, int hd, int window,
                                           float scale, const float* __restrict__ inv_freq,
                                           const int* __restrict__ meta_p, int R, int wide) {
    __shared__ float qs[128];
    __shared__ float sc[1024];
    __shared__ float scratch[33];
    __shared__ __align__(16) float ks[CA_STAGE], vs[CA_STAGE];
    CodecMeta meta{meta_p, R};
    int f = blockIdx.x, h = blockIdx.y;
    int row = meta.frame_row(f);
    if (row < 0) return;
    int first = meta.first(row), pos0 = meta.pos(row);
    int p = pos0 + (f - first);
    int rep = heads / kvh, g = h / rep, half = hd / 2, kvd = kvh * hd;
    float* kc = state + (size_t)meta.slot(row) * slot_stride + kv_off;
    float* vc = kc + (size_t)ring * kvd;
    // keys lo..p: lo..pos0-1 from the ring (n_old of them), the rest from qkv
    const int lo = max(0, p - window + 1), n = p - lo + 1, n_old = max(0, pos0 - lo);
    const bool staged = wide && n_old * hd <= CA_STAGE && hd % 4 == 0 && kvd % 4 == 0 &&
                        ((size_t)kc & 15) == 0;
    if (staged) {
        const int q4 = hd / 4;
        for (int e = threadIdx.x; e < n_old * q4; e += blockDim.x) {
            const int kk = e / q4, d = 4 * (e - kk * q4);
            const size_t at = (size_t)((lo + kk) % ring) * kvd + g * hd + d;
            codec_cp16(&ks[kk * hd + d], kc + at);
            codec_cp16(&vs[kk * hd + d], vc + at);
        }
    }
    // the ring positions copied above were written by earlier passes, the pass metadata
    // before the pass: both before the previous kernel, which waited for its own (PDL)
    pdl_wait();
    pdl_trigger();
    const float* qrow = qkv + (size_t)f * ldq + h * hd;
    const float* krow = qkv + (size_t)f * ldq + heads * hd + g * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        qs[i] = codec_rope(qrow, i, half, (float)p, inv_freq);
        if (h % rep == 0) {
            size_t at = (size_t)(p % ring) * kvd + g * hd + i;
            kc[at] = codec_rope(krow, i, half, (float)p, inv_freq);
            vc[at] = krow[kvd + i];
        }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int kk = warp; kk < n; kk += nw) {
        int kp = lo + kk;
        float s = 0.f;
        if (kp < pos0) {
            const float* kr = staged ? ks + kk * hd : kc + (size_t)(kp % ring) * kvd + g * hd;
            for (int i = lane; i < hd; i += 32) s += qs[i] * kr[i];
        } else {
            const float* kr = qkv + (size_t)(first + kp - pos0) * ldq + heads * hd + g * hd;
            for (int i = lane; i < hd; i += 32) s += qs[i] * codec_rope(kr, i, half, (float)kp, inv_freq);
        }
        s = warp_sum(s);
        if (lane == 0) sc[kk] = s * scale;
    }
    __syncthreads();
    float m = NEG_INF;
    for (int kk = threadIdx.x; kk < n; kk += blockDim.x) m = fmaxf(m, sc[kk]);
    m = block_max(m, scratch);
    float sum = 0.f;
    for (int kk = threadIdx.x; kk < n; kk += blockDim.x) {
        float e = expf(sc[kk] - m);
        sc[kk] = e;
        sum += e;
    }
    sum = block_sum(sum, scratch);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float acc = 0.f;
        // unrolled so that several value loads are in flight (the sum keeps its order)
#pragma unroll 8
        for (int kk = 0; kk < n; ++kk) {
            int kp = lo + kk;
            float v = kp < pos0 ? (staged ? vs[kk * hd + i] : vc[(size_t)(kp % ring) * kvd + g * hd + i])
                                : qkv[(size_t)(first + kp - pos0) * ldq + heads * hd + kvd + g * hd + i];
            acc += (sc[kk] / sum) * v;
        }
        out[(size_t)f * ldo + h * hd + i] = acc;
    }
}

// ConvNeXt front, one block (256 threads) per step: depthwise causal conv (taps [k][c],
// bias [c]) over history + new input, then LayerNorm (biased variance, eps) with affine
// (ln_w, ln_b); writes out[s][0..c) and the ones/zero columns up to ldo. c <= 4096.
// Grid: steps + nrows*(k-1) blocks (the latter update the history).
#define DW_TAPS 8
extern "C" __global__ void codec_dw_ln(const float* __restrict__ x, int ldx, int c,
                                       const float* __restrict__ taps,
                                       const float* __restrict__ bias, int k,
                                       const float* __restrict__ ln_w,
                                       const float* __restrict__ ln_b, float eps, int rate,
                                       float* state, int slot_stride, int hist_off,
                                       const int* __restrict__ meta_p, int R, int steps,
                                       int nrows, float* out, int ldo) {
    __shared__ float buf[4096];
    __shared__ float scratch[33];
    CodecMeta meta{meta_p, R};
    int ctx = k - 1;
    if ((int)blockIdx.x >= steps) {
        codec_hist_update(blockIdx.x - steps, x, ldx, c, ctx, rate, state, slot_stride,
                          hist_off, meta, nrows);
        return;
    }
    size_t s = blockIdx.x;
    float* o = out + s * ldo;
    int row = meta.frame_row((int)(s / rate));
    if (row < 0) {
        for (int i = threadIdx.x; i < ldo; i += blockDim.x) o[i] = 0.f;
        return;
    }
    int ls = (int)(s - (size_t)meta.first(row) * rate);
    const float* hist = state + (size_t)meta.slot(row) * slot_stride + hist_off +
                        (size_t)meta.parity(row) * ctx * c;
    // the first DW_TAPS taps' loads are all issued before they are used
    float sum = 0.f;
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        float in[DW_TAPS], tw[DW_TAPS];
#pragma unroll
        for (int j = 0; j < DW_TAPS; ++j) {
            if (j < k) {
                in[j] = codec_src(x, ldx, s, ls, k - 1 - j, hist, ctx, c)[ch];
                tw[j] = taps[(size_t)j * c + ch];
            }
        }
        float v = bias[ch];
#pragma unroll
        for (int j = 0; j < DW_TAPS; ++j)
            if (j < k) v += in[j] * tw[j];
        for (int j = DW_TAPS; j < k; ++j)
            v += codec_src(x, ldx, s, ls, k - 1 - j, hist, ctx, c)[ch] * taps[(size_t)j * c + ch];
        buf[ch] = v;
        sum += v;
    }
    float mean = block_sum(sum, scratch) / (float)c;
    float var = 0.f;
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        float d = buf[ch] - mean;
        var += d * d;
    }
    var = block_sum(var, scratch) / (float)c;
    float inv = 1.0f / sqrtf(var + eps);
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x)
        o[ch] = (buf[ch] - mean) * inv * ln_w[ch] + ln_b[ch];
    for (int i = c + threadIdx.x; i < ldo; i += blockDim.x) o[i] = i == c ? 1.f : 0.f;
}

// Final SnakeBeta + causal conv (taps k, c -> 1 channel, weight [k][c], scalar bias) +
// clamp to [-1, 1]. A block of 256 threads takes `tile` consecutive samples of one frame
// (tile divides rate): it activates the k - 1 + tile input steps they read once, into
// shared memory (row stride c + 1) beside the weights, then each warp finishes samples
// warp, warp + 8, ...: lane l sums channels l, l + 32, ... tap by tap and the warp adds its
// lanes (the products and sums of one warp per sample, without redoing each input's
// SnakeBeta for every tap that reads it).
// `wide` (c % 4 == 0, 16-byte aligned input and history rows: exec.rs checks): the
// window is read as float4, FIN_LOADS of them in flight per thread, and with k <= FIN_MAXK
// and c <= 32·FIN_MAXW each lane holds its weights in registers; the same values and sums.
// Grid: steps / tile + nrows·(k - 1) blocks (the latter update the history).
// Dynamic shared memory: ((tile + k - 1)·(c + 1) + k·c) floats.
#define FIN_LOADS 4
#define FIN_MAXK 7
#define FIN_MAXW 4
extern "C" __global__ void codec_final(const float* __restrict__ x, int c, int k,
                                       const float* __restrict__ alpha,
                                       const float* __restrict__ inv_beta,
                                       const float* __restrict__ w, float bias, int rate,
                                       float* state, int slot_stride, int hist_off,
                                       const int* __restrict__ meta_p, int R, int steps,
                                       int nrows, int tile, float* pcm, int wide) {
    extern __shared__ float fin_sm[];
    CodecMeta meta{meta_p, R};
    const int ctx = k - 1, ld = c + 1;
    const int step_blocks = steps / tile;
    if ((int)blockIdx.x >= step_blocks) {
        codec_hist_update(blockIdx.x - step_blocks, x, c, c, ctx, rate, state, slot_stride,
                          hist_off, meta, nrows);
        return;
    }
    const int s0 = blockIdx.x * tile;
    const int row = meta.frame_row(s0 / rate);
    if (row < 0) {
        for (int t = threadIdx.x; t < tile; t += blockDim.x) pcm[s0 + t] = 0.f;
        return;
    }
    // position p of the window: the row's input step ls0 - ctx + p (history before its first)
    const int ls0 = s0 - meta.first(row) * rate;
    const float* hist = state + (size_t)meta.slot(row) * slot_stride + hist_off +
                        (size_t)meta.parity(row) * ctx * c;
    float* a = fin_sm;
    float* ws = fin_sm + (tile + ctx) * ld;
    // input step ls0 - ctx + p of the row, channel i
    auto in = [&](int p, int i) {
        const int src = ls0 - ctx + p;
        return src >= 0 ? x + ((size_t)s0 - ctx + p) * c + i : hist + (size_t)(ctx + src) * c + i;
    };
    if (wide) {
        const int q4 = c / 4, n4 = (tile + ctx) * q4;
        for (int e0 = threadIdx.x; e0 < n4; e0 += FIN_LOADS * blockDim.x) {
            float4 f[FIN_LOADS];
#pragma unroll
            for (int u = 0; u < FIN_LOADS; u++) {
                const int e = e0 + u * blockDim.x, p = e / q4;
                if (e < n4) f[u] = *reinterpret_cast<const float4*>(in(p, 4 * (e - p * q4)));
            }
#pragma unroll
            for (int u = 0; u < FIN_LOADS; u++) {
                const int e = e0 + u * blockDim.x, p = e / q4, i = 4 * (e - p * q4);
                if (e >= n4) continue;
                float* d = a + p * ld + i;
                d[0] = codec_act(f[u].x, 1, alpha, inv_beta, i);
                d[1] = codec_act(f[u].y, 1, alpha, inv_beta, i + 1);
                d[2] = codec_act(f[u].z, 1, alpha, inv_beta, i + 2);
                d[3] = codec_act(f[u].w, 1, alpha, inv_beta, i + 3);
            }
        }
    } else {
        for (int e = threadIdx.x; e < (tile + ctx) * c; e += blockDim.x) {
            const int p = e / c, i = e - p * c;
            a[p * ld + i] = codec_act(*in(p, i), 1, alpha, inv_beta, i);
        }
    }
    for (int e = threadIdx.x; e < k * c; e += blockDim.x) ws[e] = w[e];
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (wide && k <= FIN_MAXK && c <= 32 * FIN_MAXW) {
        // the lane's weights (channels lane, lane + 32, ... of every tap) in registers
        float wr[FIN_MAXK][FIN_MAXW];
#pragma unroll
        for (int j = 0; j < FIN_MAXK; ++j)
#pragma unroll
            for (int m = 0; m < FIN_MAXW; ++m)
                wr[j][m] = j < k && lane + 32 * m < c ? ws[j * c + lane + 32 * m] : 0.f;
        for (int t = warp; t < tile; t += warps) {
            float acc = 0.f;
#pragma unroll
            for (int j = 0; j < FIN_MAXK; ++j) {
                if (j >= k) break;
                const float* ap = a + (t + j) * ld;
#pragma unroll
                for (int m = 0; m < FIN_MAXW; ++m)
                    if (lane + 32 * m < c) acc += wr[j][m] * ap[lane + 32 * m];
            }
            acc = warp_sum(acc);
            if (lane == 0) pcm[s0 + t] = fminf(fmaxf(acc + bias, -1.0f), 1.0f);
        }
        return;
    }
    for (int t = warp; t < tile; t += warps) {
        float acc = 0.f;
        for (int j = 0; j < k; ++j) {
            const float* ap = a + (t + j) * ld;  // tap j of sample t: input step t - (k-1-j)
            for (int i = lane; i < c; i += 32) acc += ws[j * c + i] * ap[i];
        }
        acc = warp_sum(acc);
        if (lane == 0) pcm[s0 + t] = fminf(fmaxf(acc + bias, -1.0f), 1.0f);
    }
}

// dst[i] = f16(src[i]) (saturated) for n values: the f16 copy of the weight arena.
extern "C" __global__ void codec_to_f16(const float* __restrict__ src, unsigned short* dst,
                                        int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = f2h_sat(src[i]);
}

// Zeroes n floats (a slot's state on reset).
extern "C" __global__ void codec_zero(float* p, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = 0.f;
}
