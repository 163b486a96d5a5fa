// attention.cu — QK-norm + RoPE + KV-cache write, and causal attention over the cache.
//
// A "token" is one query row: (slot, position). Decoding has one token per request; a
// prefill has one token per prompt position (all of one slot); the code predictor's first
// step has two tokens per request. Every token's K/V are written first (qk_norm_rope_kv),
// then each token attends to cache positions 0..pos of its slot (decode_attention), so one
// pair of kernels serves all three cases.
//
// qkv: f32 [T][ldq] with q at column 0 (heads*hd), k at heads*hd (kvh*hd), v after it.
// Cache: bf16, `cache + (slot * max_pos + pos) * kvh*hd` per layer (the caller passes the
// layer's base). inv_freq: f32 [hd/2] (RoPE, rotate-half pairing i <-> i + hd/2).

// KV caches hold bf16 (default) or f32 ("exact" mode, for parity checks); each kernel
// below has an `_f32` twin over f32 caches.
__device__ __forceinline__ float kv_load(const bf16* p) { return bf2f(*p); }
__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ void kv_store(bf16* p, float v) { *p = f2bf(v); }
__device__ __forceinline__ void kv_store(float* p, float v) { *p = v; }

// One block per token, 128 threads. Normalises and rotates q in place; normalises, rotates
// and stores k, stores v, both as bf16 in the slot's cache row `pos`.
template <typename KV>
__device__ __forceinline__ void qk_norm_rope_kv_body(float* qkv, int ldq, int T,
                                           const int* __restrict__ slots,
                                           const int* __restrict__ positions,
                                           const float* __restrict__ q_norm,
                                           const float* __restrict__ k_norm, float eps,
                                           const float* __restrict__ inv_freq, int heads, int kvh,
                                           int hd, KV* k_cache, KV* v_cache, int max_pos) {
    int t = blockIdx.x;
    if (t >= T) return;
    int slot = slots[t];
    if (slot < 0) return;
    int pos = positions[t];
    float* row = qkv + (size_t)t * ldq;
    int half = hd / 2;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    // One warp per head: q heads first, then k heads.
    for (int h = warp; h < heads + kvh; h += nw) {
        bool is_q = h < heads;
        float* x = row + (is_q ? h * hd : heads * hd + (h - heads) * hd);
        const float* w = is_q ? q_norm : k_norm;
        float s = 0.f;
        for (int i = lane; i < hd; i += 32) s += x[i] * x[i];
        s = warp_sum(s);
        float inv = 1.0f / sqrtf(s / (float)hd + eps);
        __syncwarp();
        // rotate pairs (i, i + half); lane handles i = lane, lane + 32, ...
        for (int i = lane; i < half; i += 32) {
            float a = w[i] * (x[i] * inv), b = w[i + half] * (x[i + half] * inv);
            float ang = (float)pos * inv_freq[i];
            float c = cosf(ang), sn = sinf(ang);
            float ra = a * c - b * sn, rb = b * c + a * sn;
            if (is_q) {
                x[i] = ra;
                x[i + half] = rb;
            } else {
                size_t off = ((size_t)slot * max_pos + pos) * (size_t)(kvh * hd) + (size_t)(h - heads) * hd;
                kv_store(k_cache + off + i, ra);
                kv_store(k_cache + off + i + half, rb);
            }
        }
    }
    // v: plain copy to the cache
    const float* v = row + (heads + kvh) * hd;
    size_t voff = ((size_t)slot * max_pos + pos) * (size_t)(kvh * hd);
    for (int i = threadIdx.x; i < kvh * hd; i += blockDim.x) kv_store(v_cache + voff + i, v[i]);
}

#define QK_ENTRY(NAME, KV)                                                                      \
    extern "C" __global__ void NAME(float* qkv, int ldq, int T, const int* __restrict__ slots,  \
                                    const int* __restrict__ positions,                          \
                                    const float* __restrict__ q_norm,                           \
                                    const float* __restrict__ k_norm, float eps,                \
                                    const float* __restrict__ inv_freq, int heads, int kvh,     \
                                    int hd, KV* k_cache, KV* v_cache, int max_pos) {            \
        qk_norm_rope_kv_body<KV>(qkv, ldq, T, slots, positions, q_norm, k_norm, eps, inv_freq,  \
                                 heads, kvh, hd, k_cache, v_cache, max_pos);                    \
    }
QK_ENTRY(qk_norm_rope_kv, bf16)
QK_ENTRY(qk_norm_rope_kv_f32, float)

// Grid (heads, T), 128 threads (4 warps). Token t, head h attends to positions
// lo..pos of its slot, lo = window ? max(0, pos+1-window) : 0. Each warp takes every 4th
// position with an online softmax; warps are merged at the end. out: f32 [T][ldo], head h
// at column h*hd. Lanes hold head dims lane, lane+32, ... (hd <= 128).
#define DA_U 4

template <typename KV>
__device__ __forceinline__ void decode_attention_body(const float* __restrict__ qkv, int ldq, int T,
                                            const int* __restrict__ slots,
                                            const int* __restrict__ positions,
                                            const KV* __restrict__ k_cache,
                                            const KV* __restrict__ v_cache, int max_pos,
                                            int heads, int kvh, int hd, int window, float* out,
                                            int ldo) {
    int h = blockIdx.x, t = blockIdx.y;
    if (t >= T) return;
    int slot = slots[t];
    if (slot < 0) return;
    int pos = positions[t];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int NW = 4, E = 4;  // warps, max elements per lane (hd <= 128)
    int kvd = kvh * hd, g = h / (heads / kvh);
    const float* q = qkv + (size_t)t * ldq + h * hd;
    float qv[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        int i = lane + 32 * e;
        qv[e] = i < hd ? q[i] : 0.f;
        acc[e] = 0.f;
    }
    float scale = 1.0f / sqrtf((float)hd);
    float mx = NEG_INF, l = 0.f;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    const KV* kbase = k_cache + (size_t)slot * max_pos * kvd + (size_t)g * hd;
    const KV* vbase = v_cache + (size_t)slot * max_pos * kvd + (size_t)g * hd;
    // Positions in groups of DA_U per warp, all loads of a group issued before use.
    for (int p0 = lo + warp; p0 <= pos; p0 += NW * DA_U) {
        float sc[DA_U], vv[DA_U][E];
#pragma unroll
        for (int u = 0; u < DA_U; u++) {
            int p = p0 + u * NW;
            const KV* kr = kbase + (size_t)p * kvd;
            const KV* vr = vbase + (size_t)p * kvd;
            float part = 0.f;
#pragma unroll
            for (int e = 0; e < E; e++) {
                int i = lane + 32 * e;
                bool ok = p <= pos && i < hd;
                part += ok ? qv[e] * kv_load(kr + i) : 0.f;
                vv[u][e] = ok ? kv_load(vr + i) : 0.f;
            }
            sc[u] = part;
        }
#pragma unroll
        for (int u = 0; u < DA_U; u++) {
            if (p0 + u * NW > pos) break;
            float s = warp_sum(sc[u]) * scale;
            float nm = fmaxf(mx, s);
            float corr = expf(mx - nm), w = expf(s - nm);
            l = l * corr + w;
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] = acc[e] * corr + w * vv[u][e];
            mx = nm;
        }
    }
    __shared__ float s_m[NW], s_l[NW], s_acc[NW][128];
    if (lane == 0) { s_m[warp] = mx; s_l[warp] = l; }
#pragma unroll
    for (int e = 0; e < E; e++) {
        int i = lane + 32 * e;
        if (i < 128) s_acc[warp][i] = acc[e];
    }
    __syncthreads();
    if (warp == 0) {
        float M = NEG_INF;
        for (int w2 = 0; w2 < NW; w2++) M = fmaxf(M, s_m[w2]);
        float L = 0.f;
        float o[E] = {0.f, 0.f, 0.f, 0.f};
        for (int w2 = 0; w2 < NW; w2++) {
            if (s_m[w2] == NEG_INF) continue;
            float c = expf(s_m[w2] - M);
            L += s_l[w2] * c;
#pragma unroll
            for (int e = 0; e < E; e++) {
                int i = lane + 32 * e;
                if (i < hd) o[e] += s_acc[w2][i] * c;
            }
        }
        float* dst = out + (size_t)t * ldo + h * hd;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int i = lane + 32 * e;
            if (i < hd) dst[i] = o[e] / L;
        }
    }
}

#define DA_ENTRY(NAME, KV)                                                                      \
    extern "C" __global__ void NAME(const float* __restrict__ qkv, int ldq, int T,              \
                                    const int* __restrict__ slots,                              \
                                    const int* __restrict__ positions,                          \
                                    const KV* __restrict__ k_cache,                             \
                                    const KV* __restrict__ v_cache, int max_pos, int heads,     \
                                    int kvh, int hd, int window, float* out, int ldo) {         \
        decode_attention_body<KV>(qkv, ldq, T, slots, positions, k_cache, v_cache, max_pos,     \
                                  heads, kvh, hd, window, out, ldo);                            \
    }
DA_ENTRY(decode_attention, bf16)
DA_ENTRY(decode_attention_f32, float)

// Fused attention for short contexts (the code predictor, <= 16 positions): one block of
// 256 threads per batch row handles that row's `tpr` consecutive tokens in order (1, or
// 2 for the first step; 512 threads, one warp per q head). For each token: QK-norm + RoPE of q and k, k/v stored (bf16) in
// the row's cache at `pos`, then attention of every q head over positions 0..pos, read
// back from the cache (the block's own writes are visible after the barrier). Tokens are
// rows*tpr rows of qkv/out; token i of row r is qkv row r*tpr + i at position
// positions[r*tpr + i]; rows with slots[r*tpr] < 0 are skipped. hd <= 128, positions
// < SHORT_MAXP (16).
#define SHORT_MAXP 16

template <typename KV>
__device__ __forceinline__ void short_attention_body(
    float* qkv, int ldq, int rows, int tpr, const int* __restrict__ slots,
    const int* __restrict__ positions, const float* __restrict__ q_norm,
    const float* __restrict__ k_norm, float eps, const float* __restrict__ inv_freq, int heads,
    int kvh, int hd, KV* k_cache, KV* v_cache, int max_pos, float* out, int ldo) {
    int r = blockIdx.x;
    if (r >= rows) return;
    int slot = slots[r * tpr];
    if (slot < 0) return;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int half = hd / 2, kvd = kvh * hd, rep = heads / kvh;
    for (int i = 0; i < tpr; i++) {
        int t = r * tpr + i;
        int pos = positions[t];
        float* row = qkv + (size_t)t * ldq;
        size_t base = ((size_t)slot * max_pos) * (size_t)kvd;
        // 1. norm + rope (one warp per head), store k and v
        for (int h = warp; h < heads + kvh; h += nw) {
            bool is_q = h < heads;
            float* x = row + (is_q ? h * hd : heads * hd + (h - heads) * hd);
            const float* w = is_q ? q_norm : k_norm;
            float s = 0.f;
            for (int e = lane; e < hd; e += 32) s += x[e] * x[e];
            s = warp_sum(s);
            float inv = 1.0f / sqrtf(s / (float)hd + eps);
            __syncwarp();
            for (int e = lane; e < half; e += 32) {
                float a = w[e] * (x[e] * inv), b = w[e + half] * (x[e + half] * inv);
                float ang = (float)pos * inv_freq[e];
                float c = cosf(ang), sn = sinf(ang);
                float ra = a * c - b * sn, rb = b * c + a * sn;
                if (is_q) {
                    x[e] = ra;
                    x[e + half] = rb;
                } else {
                    size_t off = base + (size_t)pos * kvd + (size_t)(h - heads) * hd;
                    kv_store(k_cache + off + e, ra);
                    kv_store(k_cache + off + e + half, rb);
                }
            }
        }
        const float* v = row + (heads + kvh) * hd;
        for (int e = threadIdx.x; e < kvd; e += blockDim.x) kv_store(v_cache + base + (size_t)pos * kvd + e, v[e]);
        __syncthreads();
        // 2. attention, one warp per q head. Every position's keys and values are loaded
        //    before any is used (positions <= SHORT_MAXP, unrolled), so the warp waits for
        //    memory once, not once per position.
        float scale = 1.0f / sqrtf((float)hd);
        for (int h = warp; h < heads; h += nw) {
            int g = h / rep;
            const float* q = row + h * hd;
            float qv[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = lane + 32 * e;
                qv[e] = i < hd ? q[i] : 0.f;
            }
            const KV* kb = k_cache + base + (size_t)g * hd;
            const KV* vb = v_cache + base + (size_t)g * hd;
            float sc[SHORT_MAXP];
#pragma unroll
            for (int p = 0; p < SHORT_MAXP; p++) {
                float part = 0.f;
                if (p <= pos) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int i = lane + 32 * e;
                        if (i < hd) part += qv[e] * kv_load(kb + (size_t)p * kvd + i);
                    }
                }
                sc[p] = part;
            }
            float mx = NEG_INF;
#pragma unroll
            for (int p = 0; p < SHORT_MAXP; p++) {
                sc[p] = warp_sum(sc[p]) * scale;
                if (p <= pos) mx = fmaxf(mx, sc[p]);
            }
            float l = 0.f;
#pragma unroll
            for (int p = 0; p < SHORT_MAXP; p++) {
                sc[p] = p <= pos ? expf(sc[p] - mx) : 0.f;
                l += sc[p];
            }
            float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int p = 0; p < SHORT_MAXP; p++) {
                if (p <= pos) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int i = lane + 32 * e;
                        if (i < hd) acc[e] += sc[p] * kv_load(vb + (size_t)p * kvd + i);
                    }
                }
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = lane + 32 * e;
                if (i < hd) out[(size_t)t * ldo + h * hd + i] = acc[e] / l;
            }
        }
        __syncthreads();
    }
}

#define SA_ENTRY(NAME, KV)                                                                      \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                    \
        float* qkv, int ldq, int rows, int tpr, const int* __restrict__ slots,                  \
        const int* __restrict__ positions, const float* __restrict__ q_norm,                    \
        const float* __restrict__ k_norm, float eps, const float* __restrict__ inv_freq,        \
        int heads, int kvh, int hd, KV* k_cache, KV* v_cache, int max_pos, float* out,          \
        int ldo) {                                                                               \
        short_attention_body<KV>(qkv, ldq, rows, tpr, slots, positions, q_norm, k_norm, eps,    \
                                 inv_freq, heads, kvh, hd, k_cache, v_cache, max_pos, out, ldo); \
    }
SA_ENTRY(short_attention, bf16)
SA_ENTRY(short_attention_f32, float)
