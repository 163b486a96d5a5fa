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
// The bodies below take CG = true when the persistent kernels (persistent.cu) run them:
// then the qkv rows and caches, written by other blocks of the same launch, are read
// through L2 (`ld_cg_if`).
__device__ __forceinline__ float kv_load(const bf16* p) { return bf2f(*p); }
__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ void kv_store(bf16* p, float v) { *p = f2bf(v); }
__device__ __forceinline__ void kv_store(float* p, float v) { *p = v; }
// The value a cache of type KV hands back for v.
__device__ __forceinline__ float kv_round(float v, const bf16*) { return bf2f(f2bf(v)); }
__device__ __forceinline__ float kv_round(float v, const float*) { return v; }

// A lane's RMSNorm gains for norm_rope (hd <= 128): w[i] and w[i + hd/2] for i = lane,
// lane + 32. They are weights: kernels read them before their PDL wait, where the
// streaming weights of a stage have long pushed them out of L2.
struct RopeGains {
    float lo[2], hi[2];
};
__device__ __forceinline__ RopeGains rope_gains(const float* __restrict__ w, int hd, int lane) {
    RopeGains g;
    const int half = hd / 2;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int i = lane + 32 * j;
        const bool in = i < half;
        g.lo[j] = in ? w[i] : 0.f;
        g.hi[j] = in ? w[i + half] : 0.f;
    }
    return g;
}

// One warp: RMS-normalises the head vector x (hd <= 128, gains gw) and rotates it for
// position pos, handing each result to emit(index, value). Each lane reads its values of x
// (x[lane + 32 j]) all at once, before it emits anything, so x may be overwritten in place;
// the sums and products are those of one pass over i = lane, lane + 32, ... `cs`, when
// given, holds the angles' cosines at [e] and sines at [64 + e] (rope_angles), else they
// are computed here.
template <bool CG, typename Emit>
__device__ __forceinline__ void norm_rope(const float* x, const RopeGains& gw, float eps,
                                          const float* __restrict__ inv_freq, int pos, int hd,
                                          int lane, Emit emit, const float* cs = nullptr) {
    const int half = hd / 2;
    float xv[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int i = lane + 32 * j;
        xv[j] = i < hd ? ld_cg_if<CG>(x + i) : 0.f;
    }
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (lane + 32 * j < hd) s += xv[j] * xv[j];
    s = warp_sum(s);
    const float inv = 1.0f / sqrtf(div_by_count(s, hd) + eps);
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int i = lane + 32 * j;
        if (i >= half) break;
        // x[i + half]: this lane's own value when half is 32 or 64, else read again (only
        // this lane writes it)
        const float xb = half == 64 ? xv[j + 2] : half == 32 ? xv[j + 1] : ld_cg_if<CG>(x + i + half);
        const float a = gw.lo[j] * (xv[j] * inv);
        const float b = gw.hi[j] * (xb * inv);
        float c, sn;
        if (cs) {
            c = cs[i];
            sn = cs[64 + i];
        } else {
            float ang = (float)pos * inv_freq[i];
            c = cosf(ang);
            sn = sinf(ang);
        }
        emit(i, a * c - b * sn);
        emit(i + half, b * c + a * sn);
    }
}

// norm_rope with the gains read here (hd <= 128).
template <bool CG, typename Emit>
__device__ __forceinline__ void norm_rope(const float* x, const float* __restrict__ w, float eps,
                                          const float* __restrict__ inv_freq, int pos, int hd,
                                          int lane, Emit emit, const float* cs = nullptr) {
    norm_rope<CG>(x, rope_gains(w, hd, lane), eps, inv_freq, pos, hd, lane, emit, cs);
}

// The RoPE cosines and sines of position pos (cs[e], cs[64 + e], e < hd/2), by the block's
// threads from `from` on in steps of `step`; the same values norm_rope computes.
__device__ __forceinline__ void rope_angles(float* cs, const float* __restrict__ inv_freq, int pos,
                                            int hd, int from, int step) {
    for (int e = from; e < hd / 2; e += step) {
        float ang = (float)pos * inv_freq[e];
        cs[e] = cosf(ang);
        cs[64 + e] = sinf(ang);
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
            norm_rope<false>(x, q_norm, eps, inv_freq, pos, hd, lane,
                             [&](int i, float v) { x[i] = v; });
        } else {
            KV* dst = k_cache + off + (size_t)(h - heads) * hd;
            norm_rope<false>(row + heads * hd + (h - heads) * hd, k_norm, eps, inv_freq, pos, hd, lane,
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

// Four cache (or f32 shared-memory) values from p[0..4), widened to f32 (p 4-aligned).
template <bool CG>
__device__ __forceinline__ float4 kv_load4(const bf16* p) {
    uint2 u = ld_cg_if<CG>((const uint2*)p);
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
template <bool CG>
__device__ __forceinline__ float4 kv_load4(const float* p) { return ld_cg_if<CG>((const float4*)p); }

__device__ __forceinline__ float dot4(const float* q, float4 k) {
    return q[0] * k.x + q[1] * k.y + q[2] * k.z + q[3] * k.w;
}

// Attention of one query (q: hd floats, global or shared) over positions lo..pos, by the
// block's warps (128 threads in the attention kernels, 256 in the persistent kernels; at
// most AT_WARPS); needs hd % 4 == 0 and hd <= 128. Positions below pos_new
// are read from the cache rows kbase/vbase (stride kvd); positions from pos_new on from
// s_k/s_v[p - pos_new][0..hd). Positions go in tiles of AT_TILE: every thread scores whole
// positions (one query-key dot each, so the loads of many positions are in flight at
// once), the block takes the tile's max and exp-sum (online softmax across tiles), then
// warp w accumulates the values of every nw-th position of the tile, lane l owning head dims
// 4l..4l+3; the warps' sums meet in shared memory and warp 0 writes dst[0..hd).
// Ends with a block barrier, so the caller may reuse shared memory afterwards.
#define AT_TILE 256
#define AT_WARPS 8
template <typename KV, bool CG>
__device__ __forceinline__ void attend(const float* q, int lo, int pos, int pos_new,
                                       const KV* __restrict__ kbase,
                                       const KV* __restrict__ vbase, int kvd,
                                       const float (*s_k)[128], const float (*s_v)[128], int hd,
                                       float* dst) {
    __shared__ __align__(16) float s_qa[128];
    __shared__ float s_w[AT_TILE];
    __shared__ float s_red[33];
    __shared__ __align__(16) float s_acc[AT_WARPS][128];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    for (int d = tid; d < hd; d += blockDim.x) s_qa[d] = q[d];
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)hd);
    const bool owner = 4 * lane < hd;
    float m = NEG_INF, l = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int t0 = lo; t0 <= pos; t0 += AT_TILE) {
        int n = min(AT_TILE, pos + 1 - t0);
        int cached = max(0, min(n, pos_new - t0));  // tile entries read from the cache
        for (int j = tid; j < n; j += blockDim.x) {
            int p = t0 + j;
            float sc = 0.f;
            if (j < cached) {
                const KV* kr = kbase + (size_t)p * kvd;
#pragma unroll 8
                for (int d = 0; d < hd; d += 4) sc += dot4(s_qa + d, kv_load4<CG>(kr + d));
            } else {
                const float* kr = s_k[p - pos_new];
                for (int d = 0; d < hd; d++) sc += s_qa[d] * kr[d];
            }
            s_w[j] = sc * scale;
        }
        __syncthreads();
        float mx = NEG_INF;
        for (int j = tid; j < n; j += blockDim.x) mx = fmaxf(mx, s_w[j]);
        mx = block_max(mx, s_red);
        float nm = fmaxf(m, mx), corr = expf(m - nm), sum = 0.f;
        for (int j = tid; j < n; j += blockDim.x) {
            float w = expf(s_w[j] - nm);
            s_w[j] = w;
            sum += w;
        }
        sum = block_sum(sum, s_red);  // its barriers also publish s_w
        l = l * corr + sum;
        m = nm;
        acc.x *= corr; acc.y *= corr; acc.z *= corr; acc.w *= corr;
        if (owner) {
            const KV* vr = vbase + 4 * lane;
#pragma unroll 4
            for (int j = warp; j < cached; j += nw) {
                float w = s_w[j];
                float4 v = kv_load4<CG>(vr + (size_t)(t0 + j) * kvd);
                acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
            }
            for (int j = cached + warp; j < n; j += nw) {
                float w = s_w[j];
                const float* vs = s_v[t0 + j - pos_new] + 4 * lane;
                acc.x += w * vs[0]; acc.y += w * vs[1]; acc.z += w * vs[2]; acc.w += w * vs[3];
            }
        }
        __syncthreads();  // s_w is rewritten by the next tile
    }
    if (owner) *(float4*)&s_acc[warp][4 * lane] = acc;
    __syncthreads();
    if (warp == 0 && owner) {
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w2 = 0; w2 < nw; w2++) {
            float4 a = *(const float4*)&s_acc[w2][4 * lane];
            o.x += a.x; o.y += a.y; o.z += a.z; o.w += a.w;
        }
        float inv = 1.0f / l;
        dst[4 * lane] = o.x * inv;
        dst[4 * lane + 1] = o.y * inv;
        dst[4 * lane + 2] = o.z * inv;
        dst[4 * lane + 3] = o.w * inv;
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
    int kvd = kvh * hd, g = h / (heads / kvh);
    const float* q = qkv + (size_t)t * ldq + h * hd;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    const KV* kbase = k_cache + (size_t)slot * max_pos * kvd + (size_t)g * hd;
    const KV* vbase = v_cache + (size_t)slot * max_pos * kvd + (size_t)g * hd;
    attend<KV, false>(q, lo, pos, pos + 1, kbase, vbase, kvd, nullptr, nullptr, hd,
               out + (size_t)t * ldo + h * hd);
}

// With `xb`, each block also writes its output as split bf16 rows (split_row, no norm)
// for the O projection, which then needs no to_bf16_rows launch (linear.rs,
// `chain_attention`): head h at column h*hd of row t, the lo parts T rows further.
#define DA_ENTRY(NAME, KV)                                                                      \
    extern "C" __global__ void NAME(const float* __restrict__ qkv, int ldq, int T,              \
                                    const int* __restrict__ slots,                              \
                                    const int* __restrict__ positions,                          \
                                    const KV* __restrict__ k_cache,                             \
                                    const KV* __restrict__ v_cache, int max_pos, int heads,     \
                                    int kvh, int hd, int window, float* out, int ldo,           \
                                    bf16* xb, int ldxb) {                                       \
        pdl_wait();                                                                             \
        pdl_trigger();                                                                          \
        decode_attention_body<KV>(qkv, ldq, T, slots, positions, k_cache, v_cache, max_pos,     \
                                  heads, kvh, hd, window, out, ldo);                            \
        const int h = blockIdx.x, t = blockIdx.y;                                               \
        if (xb && t < T)                                                                        \
            split_row(out + (size_t)t * ldo + h * hd, hd, nullptr, 0.f, xb + h * hd, ldxb, T,   \
                      t);                                                                       \
    }
DA_ENTRY(decode_attention, bf16)
DA_ENTRY(decode_attention_f32, float)

// Fused attention for rows of `tpr` (1..FA_MAXT) new tokens at consecutive positions whose
// earlier positions are already cached: decoding (1 token per request, any context) and
// the code predictor (2 tokens in its first step, then 1). Grid (heads, rows), 128
// threads (the persistent code-predictor loop calls the body for its tasks with 256).
// `fused_attention_short` holds up to SPOS = FA_SPOS cached positions in shared memory
// (caches of at most FA_SPOS positions: the code predictor's); `fused_attention` (SPOS 0)
// reads every cached position from the cache, with the small shared-memory footprint the
// talker's step wants (the larger one measured ~1 us slower per talker layer).
// Task (h, r) handles q head h of row r (GROUP: every q head of h's group, see FA_ENTRY),
// whose tokens are qkv rows r*tpr + i at positions[r*tpr + i], cache row slots[r*tpr]
// (rows with a negative slot are skipped):
//   0. before the qkv rows are needed (the launch path waits for the previous kernel only
//      after this): the RoPE angles of the new positions, and the cached K/V rows of
//      group g = h / (heads / kvh) into shared memory when there are at most SPOS of
//      them (the code predictor: no cache read after the wait; asking L2 for longer
//      talker contexts here measured 2 % slower). What is read here was written at least
//      two launches earlier (graph inputs, earlier steps), which every kernel of the
//      stream has finished by then, since each waits for its predecessor before it lets
//      its successor start;
//   1. QK-norm + RoPE of q head h and of k head g for every new token, and v head g, into
//      shared memory; k and v rounded as the cache rounds them, and stored in the cache by
//      the block of the group's first q head;
//   2. attention of each new token over positions 0..pos: with the cached rows held, all
//      from shared memory (attend_held), else the cached ones from the cache, the new ones
//      from shared memory (no block waits on another's writes).
// out: f32 [rows*tpr][ldo], head h at column h*hd.
#define FA_MAXT 4
#define FA_SPOS 16

// Attention of query q over positions 0..n-1 (n <= 32) whose K/V rows are all in shared
// memory (k[p], v[p]), by the block's warps, the same sums for any warp count: warp w
// scores positions w, w + nw, ... (lanes split the head dims), every warp then takes the
// softmax over all n scores itself, lane l of warp 0 sums dims 4l..4l+3 over the positions
// in order and writes dst. Needs hd % 4 == 0, hd <= 128. Ends with a block barrier.
__device__ __forceinline__ void attend_held(const float* q, int n, const float (*k)[128],
                                            const float (*v)[128], int hd, float* dst) {
    __shared__ float s_sc[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const bool owner = 4 * lane < hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float4 qv = owner ? *(const float4*)&q[4 * lane] : make_float4(0.f, 0.f, 0.f, 0.f);
    for (int p = warp; p < n; p += nw) {
        float sc = owner ? dot4(&qv.x, *(const float4*)&k[p][4 * lane]) : 0.f;
        sc = warp_sum(sc);
        if (lane == 0) s_sc[p] = sc * scale;
    }
    __syncthreads();
    if (warp == 0) {
        float sc = lane < n ? s_sc[lane] : NEG_INF;
        float m = warp_max(sc);
        float w = lane < n ? expf(sc - m) : 0.f;
        float inv = 1.0f / warp_sum(w);
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int p = 0; p < n; p++) {
            float wp = __shfl_sync(0xffffffffu, w, p) * inv;
            if (owner) {
                float4 vv = *(const float4*)&v[p][4 * lane];
                o.x += wp * vv.x; o.y += wp * vv.y; o.z += wp * vv.z; o.w += wp * vv.w;
            }
        }
        if (owner) *(float4*)&dst[4 * lane] = o;
    }
    __syncthreads();
}

template <typename KV, bool CG, int SPOS, bool HELD_ONLY = false, bool GROUP = false>
__device__ __forceinline__ void fused_attention_body(
    int h, int r, const float* __restrict__ qkv, int ldq, int rows, int tpr,
    const int* __restrict__ slots, const int* __restrict__ positions,
    const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,
    const float* __restrict__ inv_freq, int heads, int kvh, int hd, KV* k_cache, KV* v_cache,
    int max_pos, float* out, int ldo) {
    if (r >= rows || tpr < 1 || tpr > FA_MAXT) return;
    int slot = slots[r * tpr];
    if (slot < 0) return;
    __shared__ __align__(16) float s_q[FA_MAXT][128];
    __shared__ __align__(16) float s_k[SPOS + FA_MAXT][128], s_v[SPOS + FA_MAXT][128];
    __shared__ float s_cs[FA_MAXT][128];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int rep = heads / kvh, g = h / rep, kvd = kvh * hd;
    bool writer = h % rep == 0;
    // GROUP: h is the group's first q head, and the block takes every q head of the group
    // in turn (the cached rows loaded, k and v normed and stored once)
    const int nh = GROUP ? rep : 1;
    int pos0 = positions[r * tpr];
    size_t base = (size_t)slot * max_pos * kvd + (size_t)g * hd;
    // 0. what earlier launches wrote
    const bool held = SPOS > 0 && pos0 <= SPOS;
    // HELD_ONLY kernels run only on caches of at most SPOS positions (stack.rs: the code
    // predictor's), where the new tokens start at pos0 < SPOS: always held
    if (HELD_ONLY && !held) __trap();
    const int first_new = held ? pos0 : 0;  // s_k / s_v row of new token 0
    for (int i = 0; i < tpr; i++)
        rope_angles(s_cs[i], inv_freq, positions[r * tpr + i], hd, threadIdx.x, blockDim.x);
    if (held) {
        const int q4 = hd / 4;
        for (int idx = threadIdx.x; idx < pos0 * q4; idx += blockDim.x) {
            int p = idx / q4, d = 4 * (idx % q4);
            *(float4*)&s_k[p][d] = kv_load4<CG>(k_cache + base + (size_t)p * kvd + d);
            *(float4*)&s_v[p][d] = kv_load4<CG>(v_cache + base + (size_t)p * kvd + d);
        }
    }
    const RopeGains gq = rope_gains(q_norm, hd, lane), gk = rope_gains(k_norm, hd, lane);
    if (!CG) {
        pdl_wait();
        pdl_trigger();
    }
    __syncthreads();
    for (int j = 0; j < nh; j++) {
        const int hq = h + j;
        // 1. task 2i: q of token i, task 2i+1: k of token i (one warp each); then v
        for (int task = warp; task < 2 * tpr; task += nw) {
            int i = task >> 1, t = r * tpr + i, pos = positions[t];
            const float* row = qkv + (size_t)t * ldq;
            if ((task & 1) == 0) {
                norm_rope<CG>(row + hq * hd, gq, eps, inv_freq, pos, hd, lane,
                              [&](int e, float v) { s_q[i][e] = v; }, s_cs[i]);
            } else if (j == 0) {
                KV* dst = k_cache + base + (size_t)pos * kvd;
                norm_rope<CG>(row + heads * hd + g * hd, gk, eps, inv_freq, pos, hd, lane,
                              [&](int e, float v) {
                                  s_k[first_new + i][e] = kv_round(v, dst);
                                  if (writer) kv_store(dst + e, v);
                              }, s_cs[i]);
            }
        }
        for (int idx = threadIdx.x; j == 0 && idx < tpr * hd; idx += blockDim.x) {
            int i = idx / hd, e = idx % hd, t = r * tpr + i;
            KV* dst = v_cache + base + (size_t)positions[t] * kvd;
            float v = ld_cg_if<CG>(qkv + (size_t)t * ldq + (heads + kvh) * hd + g * hd + e);
            s_v[first_new + i][e] = kv_round(v, dst);
            if (writer) kv_store(dst + e, v);
        }
        __syncthreads();
        // 2. attention, token by token (attend and attend_held end with a barrier)
        for (int i = 0; i < tpr; i++) {
            int t = r * tpr + i;
            float* dst = out + (size_t)t * ldo + hq * hd;
            if (HELD_ONLY || held)
                attend_held(s_q[i], pos0 + i + 1, s_k, s_v, hd, dst);
            else if constexpr (!HELD_ONLY)
                attend<KV, CG>(s_q[i], 0, pos0 + i, pos0, k_cache + base, v_cache + base, kvd, s_k,
                               s_v, hd, dst);
        }
    }
}

// With `xb`, as DA_ENTRY: the block's outputs also as split bf16 rows for the O projection
// (rows * tpr of them). GROUP kernels: grid (kv heads, rows), the block of group g takes
// its q heads g * rep .. (g + 1) * rep - 1 in turn, the same sums for each as a block of
// its own would do.
#define FA_ENTRY(NAME, KV, SPOS, HO, GROUP)                                                     \
    extern "C" __global__ void __launch_bounds__(128) NAME(                                     \
        const float* __restrict__ qkv, int ldq, int rows, int tpr,                              \
        const int* __restrict__ slots, const int* __restrict__ positions,                       \
        const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,          \
        const float* __restrict__ inv_freq, int heads, int kvh, int hd, KV* k_cache,            \
        KV* v_cache, int max_pos, float* out, int ldo, bf16* xb, int ldxb) {                    \
        const int nh = GROUP ? heads / kvh : 1, h0 = blockIdx.x * nh, r = blockIdx.y;          \
        fused_attention_body<KV, false, SPOS, HO, GROUP>(h0, r, qkv, ldq, rows, tpr, slots,     \
                                                         positions, q_norm, k_norm, eps,        \
                                                         inv_freq, heads, kvh, hd, k_cache,     \
                                                         v_cache, max_pos, out, ldo);           \
        if (xb && r < rows && tpr >= 1 && tpr <= FA_MAXT)                                       \
            for (int h = h0; h < h0 + nh; h++)                                                  \
                for (int i = 0; i < tpr; i++)                                                   \
                    split_row(out + (size_t)(r * tpr + i) * ldo + h * hd, hd, nullptr, 0.f,     \
                              xb + h * hd, ldxb, rows * tpr, r * tpr + i);                      \
    }
FA_ENTRY(fused_attention, bf16, 0, false, false)
FA_ENTRY(fused_attention_f32, float, 0, false, false)
// The code predictor's caches (at most FA_SPOS positions) are always held: the bf16 kernel
// has no long-cache path (55 registers instead of 72; H200, code predictor of one row
// 1.701 -> 1.605 ms with the sampling copy of the same commit). The f32 one (parity runs)
// keeps it.
FA_ENTRY(fused_attention_short, bf16, FA_SPOS, true, false)
FA_ENTRY(fused_attention_short_f32, float, FA_SPOS, false, false)
// ... and by kv-head group (stack.rs: where one block per q head would be more than one
// wave): half the blocks for 1.7B's code predictor (16 q heads, 8 kv heads), each loading
// its cached rows and norming its k once for both q heads
FA_ENTRY(fused_attention_short_group, bf16, FA_SPOS, true, true)
FA_ENTRY(fused_attention_short_group_f32, float, FA_SPOS, false, true)
