// attention.cu — QK-norm + RoPE + KV-cache write, and causal attention over the cache.
//
// A "token" is one query row: (slot, position). Two ways to run a layer's attention:
//   * split (prefill: many tokens of one slot): qk_norm_rope_kv writes every token's K/V,
//     then decode_attention lets each token attend to positions 0..pos of its slot;
//   * fused (decode, and the code predictor): fused_attention, one block per (q head, row)
//     for rows of 1..FA_MAXT new tokens whose earlier positions are cached.
//
// qkv: f32 [T][ldq] with q at column 0 (heads*hd), k at heads*hd (kvh*hd), v after it.
// Cache: bf16, `cache + (slot * max_pos + pos) * kvh*hd` per layer (the caller passes the
// layer's base). inv_freq: f32 [hd/2] (RoPE, rotate-half pairing i <-> i + hd/2). hd <= 128.

// KV caches hold bf16 (default) or f32 ("exact" mode, for parity checks); each kernel
// below has an `_f32` twin over f32 caches.
__device__ __forceinline__ float kv_load(const bf16* p) { return bf2f(*p); }
__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ void kv_store(bf16* p, float v) { *p = f2bf(v); }
__device__ __forceinline__ void kv_store(float* p, float v) { *p = v; }
// The value a cache of type KV hands back for v.
__device__ __forceinline__ float kv_round(float v, const bf16*) { return bf2f(f2bf(v)); }
__device__ __forceinline__ float kv_round(float v, const float*) { return v; }

// One warp: RMS-normalises the head vector x (weights w) and rotates it for position pos,
// handing each result to emit(index, value). Lanes read x[e], x[e + hd/2] before emitting
// those two indices, so x may be overwritten in place.
template <typename Emit>
__device__ __forceinline__ void norm_rope(const float* x, const float* __restrict__ w, float eps,
                                          const float* __restrict__ inv_freq, int pos, int hd,
                                          int lane, Emit emit) {
    int half = hd / 2;
    float s = 0.f;
    for (int i = lane; i < hd; i += 32) s += x[i] * x[i];
    s = warp_sum(s);
    float inv = 1.0f / sqrtf(s / (float)hd + eps);
    __syncwarp();
    for (int i = lane; i < half; i += 32) {
        float a = w[i] * (x[i] * inv), b = w[i + half] * (x[i + half] * inv);
        float ang = (float)pos * inv_freq[i];
        float c = cosf(ang), sn = sinf(ang);
        emit(i, a * c - b * sn);
        emit(i + half, b * c + a * sn);
    }
}

// One block per token, 128 threads. Normalises and rotates q in place; normalises, rotates
// and stores k, stores v, in the slot's cache row `pos`.
template <typename KV>
__device__ __forceinline__ void qk_norm_rope_kv_body(float* qkv, int ldq, int T,
                                                     const int* __restrict__ slots,
                                                     const int* __restrict__ positions,
                                                     const float* __restrict__ q_norm,
                                                     const float* __restrict__ k_norm, float eps,
                                                     const float* __restrict__ inv_freq,
                                                     int heads, int kvh, int hd, KV* k_cache,
                                                     KV* v_cache, int max_pos) {
    int t = blockIdx.x;
    if (t >= T) return;
    int slot = slots[t];
    if (slot < 0) return;
    int pos = positions[t];
    float* row = qkv + (size_t)t * ldq;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    size_t off = ((size_t)slot * max_pos + pos) * (size_t)(kvh * hd);
    // One warp per head: q heads first, then k heads.
    for (int h = warp; h < heads + kvh; h += nw) {
        if (h < heads) {
            float* x = row + h * hd;
            norm_rope(x, q_norm, eps, inv_freq, pos, hd, lane, [&](int i, float v) { x[i] = v; });
        } else {
            KV* dst = k_cache + off + (size_t)(h - heads) * hd;
            norm_rope(row + heads * hd + (h - heads) * hd, k_norm, eps, inv_freq, pos, hd, lane,
                      [&](int i, float v) { kv_store(dst + i, v); });
        }
    }
    // v: plain copy to the cache
    const float* v = row + (heads + kvh) * hd;
    for (int i = threadIdx.x; i < kvh * hd; i += blockDim.x) kv_store(v_cache + off + i, v[i]);
}

#define QK_ENTRY(NAME, KV)                                                                      \
    extern "C" __global__ void NAME(float* qkv, int ldq, int T, const int* __restrict__ slots,  \
                                    const int* __restrict__ positions,                          \
                                    const float* __restrict__ q_norm,                           \
                                    const float* __restrict__ k_norm, float eps,                \
                                    const float* __restrict__ inv_freq, int heads, int kvh,     \
                                    int hd, KV* k_cache, KV* v_cache, int max_pos) {            \
        pdl_wait();                                                                             \
        pdl_trigger();                                                                          \
        qk_norm_rope_kv_body<KV>(qkv, ldq, T, slots, positions, q_norm, k_norm, eps, inv_freq,  \
                                 heads, kvh, hd, k_cache, v_cache, max_pos);                    \
    }
QK_ENTRY(qk_norm_rope_kv, bf16)
QK_ENTRY(qk_norm_rope_kv_f32, float)

// Attention of one query over positions lo..pos, by the block's 4 warps (128 threads).
// Lanes hold head dims lane, lane+32, ... of the query in qv (already scaled by nothing).
// Positions below pos_new are read from the cache rows kbase/vbase (stride kvd); positions
// from pos_new on from s_k/s_v[p - pos_new][0..hd). Each warp takes every 4th position
// with an online softmax; warps merge in shared memory and warp 0 writes dst[0..hd).
// Ends with a block barrier, so the caller may reuse shared memory afterwards.
#define DA_U 4
#define DA_NW 4
#define DA_E 4
template <typename KV>
__device__ __forceinline__ void attend(const float (&qv)[DA_E], int lo, int pos, int pos_new,
                                       const KV* __restrict__ kbase,
                                       const KV* __restrict__ vbase, int kvd,
                                       const float (*s_k)[128], const float (*s_v)[128], int hd,
                                       float* dst) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc[DA_E];
#pragma unroll
    for (int e = 0; e < DA_E; e++) acc[e] = 0.f;
    float scale = 1.0f / sqrtf((float)hd);
    float mx = NEG_INF, l = 0.f;
    // Positions in groups of DA_U per warp, all loads of a group issued before use.
    for (int p0 = lo + warp; p0 <= pos; p0 += DA_NW * DA_U) {
        float sc[DA_U], vv[DA_U][DA_E];
#pragma unroll
        for (int u = 0; u < DA_U; u++) {
            int p = p0 + u * DA_NW;
            bool cached = p < pos_new;
            const KV* kr = kbase + (size_t)p * kvd;
            const KV* vr = vbase + (size_t)p * kvd;
            float part = 0.f;
#pragma unroll
            for (int e = 0; e < DA_E; e++) {
                int i = lane + 32 * e;
                bool ok = p <= pos && i < hd;
                float kx = 0.f, vx = 0.f;
                if (ok) {
                    kx = cached ? kv_load(kr + i) : s_k[p - pos_new][i];
                    vx = cached ? kv_load(vr + i) : s_v[p - pos_new][i];
                }
                part += qv[e] * kx;
                vv[u][e] = vx;
            }
            sc[u] = part;
        }
#pragma unroll
        for (int u = 0; u < DA_U; u++) {
            if (p0 + u * DA_NW > pos) break;
            float s = warp_sum(sc[u]) * scale;
            float nm = fmaxf(mx, s);
            float corr = expf(mx - nm), w = expf(s - nm);
            l = l * corr + w;
#pragma unroll
            for (int e = 0; e < DA_E; e++) acc[e] = acc[e] * corr + w * vv[u][e];
            mx = nm;
        }
    }
    __shared__ float s_m[DA_NW], s_l[DA_NW], s_acc[DA_NW][128];
    if (lane == 0) { s_m[warp] = mx; s_l[warp] = l; }
#pragma unroll
    for (int e = 0; e < DA_E; e++) {
        int i = lane + 32 * e;
        if (i < 128) s_acc[warp][i] = acc[e];
    }
    __syncthreads();
    if (warp == 0) {
        float M = NEG_INF;
        for (int w2 = 0; w2 < DA_NW; w2++) M = fmaxf(M, s_m[w2]);
        float L = 0.f;
        float o[DA_E] = {0.f, 0.f, 0.f, 0.f};
        for (int w2 = 0; w2 < DA_NW; w2++) {
            if (s_m[w2] == NEG_INF) continue;
            float c = expf(s_m[w2] - M);
            L += s_l[w2] * c;
#pragma unroll
            for (int e = 0; e < DA_E; e++) {
                int i = lane + 32 * e;
                if (i < hd) o[e] += s_acc[w2][i] * c;
            }
        }
#pragma unroll
        for (int e = 0; e < DA_E; e++) {
            int i = lane + 32 * e;
            if (i < hd) dst[i] = o[e] / L;
        }
    }
    __syncthreads();
}

// Grid (heads, T), 128 threads (4 warps). Token t, head h attends to positions
// lo..pos of its slot, lo = window ? max(0, pos+1-window) : 0, all read from the cache.
// out: f32 [T][ldo], head h at column h*hd.
template <typename KV>
__device__ __forceinline__ void decode_attention_body(const float* __restrict__ qkv, int ldq,
                                                      int T, const int* __restrict__ slots,
                                                      const int* __restrict__ positions,
                                                      const KV* __restrict__ k_cache,
                                                      const KV* __restrict__ v_cache,
                                                      int max_pos, int heads, int kvh, int hd,
                                                      int window, float* out, int ldo) {
    int h = blockIdx.x, t = blockIdx.y;
    if (t >= T) return;
    int slot = slots[t];
    if (slot < 0) return;
    int pos = positions[t];
    int lane = threadIdx.x & 31;
    int kvd = kvh * hd, g = h / (heads / kvh);
    const float* q = qkv + (size_t)t * ldq + h * hd;
    float qv[DA_E];
#pragma unroll
    for (int e = 0; e < DA_E; e++) {
        int i = lane + 32 * e;
        qv[e] = i < hd ? q[i] : 0.f;
    }
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    const KV* kbase = k_cache + (size_t)slot * max_pos * kvd + (size_t)g * hd;
    const KV* vbase = v_cache + (size_t)slot * max_pos * kvd + (size_t)g * hd;
    attend<KV>(qv, lo, pos, pos + 1, kbase, vbase, kvd, nullptr, nullptr, hd,
               out + (size_t)t * ldo + h * hd);
}

#define DA_ENTRY(NAME, KV)                                                                      \
    extern "C" __global__ void NAME(const float* __restrict__ qkv, int ldq, int T,              \
                                    const int* __restrict__ slots,                              \
                                    const int* __restrict__ positions,                          \
                                    const KV* __restrict__ k_cache,                             \
                                    const KV* __restrict__ v_cache, int max_pos, int heads,     \
                                    int kvh, int hd, int window, float* out, int ldo) {         \
        pdl_wait();                                                                             \
        pdl_trigger();                                                                          \
        decode_attention_body<KV>(qkv, ldq, T, slots, positions, k_cache, v_cache, max_pos,     \
                                  heads, kvh, hd, window, out, ldo);                            \
    }
DA_ENTRY(decode_attention, bf16)
DA_ENTRY(decode_attention_f32, float)

// Fused attention for rows of `tpr` (1..FA_MAXT) new tokens at consecutive positions whose
// earlier positions are already cached: decoding (1 token per request, any context) and
// the code predictor (2 tokens in its first step, then 1). Grid (heads, rows), 128
// threads. Block (h, r) handles q head h of row r, whose tokens are qkv rows r*tpr + i at
// positions[r*tpr + i], cache row slots[r*tpr] (rows with a negative slot are skipped):
//   1. QK-norm + RoPE of q head h and of k head g = h / (heads / kvh) for every new
//      token, and v head g, into shared memory; k and v rounded as the cache rounds them,
//      and stored in the cache by the block of the group's first q head;
//   2. attention of each new token over positions 0..pos: the cached ones read from the
//      cache, the new ones from shared memory (no block waits on another's writes).
// out: f32 [rows*tpr][ldo], head h at column h*hd.
#define FA_MAXT 4

template <typename KV>
__device__ __forceinline__ void fused_attention_body(
    const float* __restrict__ qkv, int ldq, int rows, int tpr, const int* __restrict__ slots,
    const int* __restrict__ positions, const float* __restrict__ q_norm,
    const float* __restrict__ k_norm, float eps, const float* __restrict__ inv_freq, int heads,
    int kvh, int hd, KV* k_cache, KV* v_cache, int max_pos, float* out, int ldo) {
    int h = blockIdx.x, r = blockIdx.y;
    if (r >= rows || tpr < 1 || tpr > FA_MAXT) return;
    int slot = slots[r * tpr];
    if (slot < 0) return;
    __shared__ float s_q[FA_MAXT][128], s_k[FA_MAXT][128], s_v[FA_MAXT][128];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int rep = heads / kvh, g = h / rep, kvd = kvh * hd;
    bool writer = h % rep == 0;
    int pos0 = positions[r * tpr];
    size_t base = (size_t)slot * max_pos * kvd + (size_t)g * hd;
    // 1. task 2i: q of token i, task 2i+1: k of token i (one warp each); then v
    for (int task = warp; task < 2 * tpr; task += nw) {
        int i = task >> 1, t = r * tpr + i, pos = positions[t];
        const float* row = qkv + (size_t)t * ldq;
        if ((task & 1) == 0) {
            norm_rope(row + h * hd, q_norm, eps, inv_freq, pos, hd, lane,
                      [&](int e, float v) { s_q[i][e] = v; });
        } else {
            KV* dst = k_cache + base + (size_t)pos * kvd;
            norm_rope(row + heads * hd + g * hd, k_norm, eps, inv_freq, pos, hd, lane,
                      [&](int e, float v) {
                          s_k[i][e] = kv_round(v, dst);
                          if (writer) kv_store(dst + e, v);
                      });
        }
    }
    for (int idx = threadIdx.x; idx < tpr * hd; idx += blockDim.x) {
        int i = idx / hd, e = idx % hd, t = r * tpr + i;
        KV* dst = v_cache + base + (size_t)positions[t] * kvd;
        float v = qkv[(size_t)t * ldq + (heads + kvh) * hd + g * hd + e];
        s_v[i][e] = kv_round(v, dst);
        if (writer) kv_store(dst + e, v);
    }
    __syncthreads();
    // 2. attention, token by token (attend ends with a barrier)
    for (int i = 0; i < tpr; i++) {
        float qv[DA_E];
#pragma unroll
        for (int e = 0; e < DA_E; e++) {
            int d = lane + 32 * e;
            qv[e] = d < hd ? s_q[i][d] : 0.f;
        }
        int t = r * tpr + i;
        attend<KV>(qv, 0, pos0 + i, pos0, k_cache + base, v_cache + base, kvd, s_k, s_v, hd,
                   out + (size_t)t * ldo + h * hd);
    }
}

#define FA_ENTRY(NAME, KV)                                                                      \
    extern "C" __global__ void __launch_bounds__(128) NAME(                                    \
        const float* __restrict__ qkv, int ldq, int rows, int tpr,                              \
        const int* __restrict__ slots, const int* __restrict__ positions,                       \
        const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,          \
        const float* __restrict__ inv_freq, int heads, int kvh, int hd, KV* k_cache,            \
        KV* v_cache, int max_pos, float* out, int ldo) {                                        \
        pdl_wait();                                                                             \
        pdl_trigger();                                                                          \
        fused_attention_body<KV>(qkv, ldq, rows, tpr, slots, positions, q_norm, k_norm, eps,    \
                                 inv_freq, heads, kvh, hd, k_cache, v_cache, max_pos, out, ldo); \
    }
FA_ENTRY(fused_attention, bf16)
FA_ENTRY(fused_attention_f32, float)
