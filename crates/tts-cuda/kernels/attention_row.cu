// attention_row.cu — decode attention for one new token per row (the talker step), the
// cached K/V rows requested before the PDL wait.
//
// Why: fused_attention (attention.cu) scores whole positions per thread, one cache round
// trip after another, and takes the softmax with block-wide reductions, all after the
// wait. Inside the H200's one-row talker step that was 7.8 us a layer at ~40 positions
// and 10.6 us at ~130 (the step without the kernel: 1.271 -> 1.054 ms and 1.355 ->
// 1.058 ms; bench/results/2026-12-04-h200-row-attention). Here a block requests the first
// chunk of its cached rows into registers while the QKV projection before it still runs
// (those rows were written by earlier steps, which every kernel of the stream has
// finished by then: see fused_attention's step 0), so after the wait it reads only the
// new token's qkv row; the softmax needs one block barrier.
//
// Grid (heads, rows), AR_THREADS threads. Row r's new token is at positions[r] in cache
// row slots[r] (a negative slot: the row is skipped); `tpr` must be 1. Needs hd = 8 L with
// L a power of two, L <= 16 (stack.rs checks): a group of L lanes takes one position at a
// time, lane j holding dims 8j .. 8j+7 of its K and V rows. Group c of the G = AR_THREADS
// / L groups takes the cached positions c, c + G, c + 2G, ... in chunks of AR_FR each
// (the registers of a chunk), keeping its own running maximum, sum of weights and 8
// weighted dims per lane (online softmax); group 0 then adds the new token (its k and v
// from shared memory). The groups' partial results meet in shared memory and thread d <
// hd combines dim d over the groups in order: a row's result depends on nothing but its
// own positions. The same maths as fused_attention (QK-norm, RoPE, k and v stored in the
// cache as it rounds them, softmax(q · k / sqrt(hd)) · v), summed in another order.
// out: f32 [rows][ldo], head h at column h * hd; with `xb`, also the O projection's split
// rows (as FA_ENTRY).
//
// SPLIT (`row_attention_split`, prefill's split attention in place of decode_attention):
// every token's K and V, its own included, are already in the cache (qk_norm_rope_kv, the
// launch just before, wrote them and normed and rotated q in place), so nothing is read
// before the wait and there is no new token: token r attends to positions lo .. pos of
// its slot, lo = window > 0 ? max(0, pos + 1 - window) : 0, all in chunks from the cache.

#define AR_THREADS 128
#define AR_FR 8

// Eight consecutive dims of a cache row, as the cache stores them.
template <typename KV>
struct Kv8;
template <>
struct Kv8<bf16> {
    uint4 u = make_uint4(0, 0, 0, 0);
    __device__ __forceinline__ void load(const bf16* p) { u = *(const uint4*)p; }
    __device__ __forceinline__ void get(float* f) const { unpack8(u, f); }
};
template <>
struct Kv8<float> {
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = make_float4(0.f, 0.f, 0.f, 0.f);
    __device__ __forceinline__ void load(const float* p) {
        a = ((const float4*)p)[0];
        b = ((const float4*)p)[1];
    }
    __device__ __forceinline__ void get(float* f) const {
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
        f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    }
};

// The dot product of a lane's 8 dims, summed over its group of L lanes (every lane of the
// warp takes part; each gets its group's sum).
__device__ __forceinline__ float group_dot8(const float* q, const float* k, int L) {
    float d = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) d = fmaf(q[i], k[i], d);
    for (int o = L / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    return d;
}

// Folds scores sc[0..n) (NEG_INF: no position) with their value rows into a group's
// running maximum m, weight sum l and weighted dims acc.
template <int N, typename VAL>
__device__ __forceinline__ void online_fold(const float (&sc)[N], VAL vals, float& m, float& l,
                                            float (&acc)[8]) {
    float mc = NEG_INF;
#pragma unroll
    for (int f = 0; f < N; f++) mc = fmaxf(mc, sc[f]);
    const float mn = fmaxf(m, mc);
    if (mn == NEG_INF) return;  // nothing yet
    const float corr = expf(m - mn);  // 0 while m is NEG_INF
    l *= corr;
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] *= corr;
#pragma unroll
    for (int f = 0; f < N; f++) {
        if (sc[f] == NEG_INF) continue;
        const float w = expf(sc[f] - mn);
        float v[8];
        vals(f, v);
        l += w;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] = fmaf(w, v[i], acc[i]);
    }
    m = mn;
}

template <typename KV, bool SPLIT>
__device__ __forceinline__ void row_attention_body(
    const float* __restrict__ qkv, int ldq, const int* __restrict__ slots,
    const int* __restrict__ positions, const float* __restrict__ q_norm,
    const float* __restrict__ k_norm, float eps, const float* __restrict__ inv_freq, int heads,
    int kvh, int hd, KV* k_cache, KV* v_cache, int max_pos, int window, float* out, int ldo) {
    __shared__ __align__(16) float s_q[128];
    __shared__ __align__(16) float s_k[128];
    __shared__ __align__(16) float s_v[128];
    __shared__ float s_cs[128];
    __shared__ __align__(16) float s_acc[8 * AR_THREADS];  // [group][hd]
    __shared__ float s_m[AR_THREADS], s_l[AR_THREADS];
    // (SPLIT: the entry has waited; the token's K/V come from the launch before)
    const int h = blockIdx.x, r = blockIdx.y;
    const int slot = slots[r];
    const int pos = positions[r];
    // SPLIT: positions lo .. pos from the cache; else 0 .. pos - 1, then the new token
    const int lo = SPLIT && window > 0 ? max(0, pos + 1 - window) : 0;
    const int end = SPLIT ? pos + 1 : pos;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int L = hd / 8, G = AR_THREADS / L, grp = tid / L, j = tid % L;
    const int rep = heads / kvh, g = h / rep, kvd = kvh * hd;
    const bool writer = h % rep == 0;
    const size_t row_base = (size_t)slot * max_pos * kvd + (size_t)g * hd;
    const KV* kb = k_cache + row_base + 8 * j;
    const KV* vb = v_cache + row_base + 8 * j;
    // a chunk of cached rows: the first one before the wait (not SPLIT: written by earlier
    // steps), with the RoPE angles
    Kv8<KV> kr[AR_FR], vr[AR_FR];
    auto load_chunk = [&](int c0) {
#pragma unroll
        for (int f = 0; f < AR_FR; f++) {
            const int p = c0 + f * G + grp;
            if (p < end) {
                kr[f].load(kb + (size_t)p * kvd);
                vr[f].load(vb + (size_t)p * kvd);
            }
        }
    };
    float q[8];
    if constexpr (SPLIT) {
        pdl_trigger();
        const float* qp = qkv + (size_t)r * ldq + h * hd + 8 * j;
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = qp[i];
    } else {
        load_chunk(0);
        rope_angles(s_cs, inv_freq, pos, hd, tid, blockDim.x);
        const RopeGains gw = rope_gains(warp == 0 ? q_norm : k_norm, hd, lane);
        pdl_wait();
        pdl_trigger();
        __syncthreads();  // the angles, written by warps 0 and 1, are read by both
        // 1. q of head h (warp 0), k of group g (warp 1) normed and rotated, v: into shared
        //    memory, k and v rounded as the cache rounds them and stored by the group's first
        //    q head's block
        const float* row = qkv + (size_t)r * ldq;
        KV* kdst = k_cache + row_base + (size_t)pos * kvd;
        KV* vdst = v_cache + row_base + (size_t)pos * kvd;
        if (warp == 0) {
            norm_rope<false>(row + h * hd, gw, eps, inv_freq, pos, hd, lane,
                             [&](int e, float v) { s_q[e] = v; }, s_cs);
        } else if (warp == 1) {
            norm_rope<false>(row + (heads + g) * hd, gw, eps, inv_freq, pos, hd, lane,
                             [&](int e, float v) {
                                 s_k[e] = kv_round(v, kdst);
                                 if (writer) kv_store(kdst + e, v);
                             }, s_cs);
        }
        for (int e = tid; e < hd; e += blockDim.x) {
            const float v = row[(heads + kvh + g) * hd + e];
            s_v[e] = kv_round(v, vdst);
            if (writer) kv_store(vdst + e, v);
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = s_q[8 * j + i];
    }
    // 2. the cached positions chunk by chunk, then (not SPLIT) the new token (group 0)
    const float scale = 1.0f / sqrtf((float)hd);
    float m = NEG_INF, l = 0.f, acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int c0 = lo; c0 < end; c0 += G * AR_FR) {
        if (SPLIT || c0 > 0) load_chunk(c0);
        float sc[AR_FR];
#pragma unroll
        for (int f = 0; f < AR_FR; f++) {
            float kf[8];
            kr[f].get(kf);
            const float d = group_dot8(q, kf, L);
            sc[f] = c0 + f * G + grp < end ? d * scale : NEG_INF;
        }
        online_fold(sc, [&](int f, float* v) { vr[f].get(v); }, m, l, acc);
    }
    if constexpr (!SPLIT) {
        const float d = group_dot8(q, &s_k[8 * j], L);
        const float sc[1] = {grp == 0 ? d * scale : NEG_INF};
        online_fold(sc, [&](int, float* v) {
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = s_v[8 * j + i];
        }, m, l, acc);
    }
    // 3. the groups' partial results, combined per dim in group order
#pragma unroll
    for (int i = 0; i < 8; i++) s_acc[8 * tid + i] = acc[i];  // = [grp][8 j + i]
    if (j == 0) {
        s_m[grp] = m;
        s_l[grp] = l;
    }
    __syncthreads();
    if (tid < hd) {
        float mt = NEG_INF;
        for (int c = 0; c < G; c++) mt = fmaxf(mt, s_m[c]);
        float o = 0.f, lt = 0.f;
        for (int c = 0; c < G; c++) {
            const float e = s_m[c] == NEG_INF ? 0.f : expf(s_m[c] - mt);
            o = fmaf(e, s_acc[c * hd + tid], o);
            lt = fmaf(e, s_l[c], lt);
        }
        out[(size_t)r * ldo + h * hd + tid] = o / lt;
    }
}

// With `xb`, the block's output (head blockIdx.x of row r, just stored) also as the O
// projection's split rows (as FA_ENTRY).
__device__ __forceinline__ void row_attention_split_rows(const float* out, int ldo, int hd,
                                                         bf16* xb, int ldxb, int rows, int r) {
    if (!xb) return;
    __syncthreads();
    split_row(out + (size_t)r * ldo + blockIdx.x * hd, hd, nullptr, 0.f, xb + blockIdx.x * hd,
              ldxb, rows, r);
}

#define AR_ENTRY(NAME, KV)                                                                      \
    extern "C" __global__ void __launch_bounds__(AR_THREADS) NAME(                              \
        const float* __restrict__ qkv, int ldq, int rows, int tpr,                              \
        const int* __restrict__ slots, const int* __restrict__ positions,                       \
        const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,          \
        const float* __restrict__ inv_freq, int heads, int kvh, int hd, KV* k_cache,            \
        KV* v_cache, int max_pos, float* out, int ldo, bf16* xb, int ldxb) {                    \
        const int r = blockIdx.y;                                                               \
        if (r >= rows || tpr != 1 || slots[r] < 0) return;                                      \
        row_attention_body<KV, false>(qkv, ldq, slots, positions, q_norm, k_norm, eps,          \
                                      inv_freq, heads, kvh, hd, k_cache, v_cache, max_pos, 0,   \
                                      out, ldo);                                                \
        row_attention_split_rows(out, ldo, hd, xb, ldxb, rows, r);                              \
    }
AR_ENTRY(row_attention, bf16)
AR_ENTRY(row_attention_f32, float)

// decode_attention's arguments (attention.cu: grid (heads, T), q normed and rotated in place
// and every token's K/V in the cache, written by qk_norm_rope_kv just before).
#define ARS_ENTRY(NAME, KV)                                                                     \
    extern "C" __global__ void __launch_bounds__(AR_THREADS) NAME(                              \
        const float* __restrict__ qkv, int ldq, int T, const int* __restrict__ slots,           \
        const int* __restrict__ positions, const KV* __restrict__ k_cache,                      \
        const KV* __restrict__ v_cache, int max_pos, int heads, int kvh, int hd, int window,    \
        float* out, int ldo, bf16* xb, int ldxb) {                                              \
        pdl_wait();                                                                             \
        const int r = blockIdx.y;                                                               \
        if (r >= T || slots[r] < 0) {                                                           \
            pdl_trigger();                                                                      \
            return;                                                                             \
        }                                                                                       \
        row_attention_body<KV, true>(qkv, ldq, slots, positions, nullptr, nullptr, 0.f,         \
                                     nullptr, heads, kvh, hd, (KV*)k_cache, (KV*)v_cache,       \
                                     max_pos, window, out, ldo);                                \
        row_attention_split_rows(out, ldo, hd, xb, ldxb, T, r);                                 \
    }
ARS_ENTRY(row_attention_split, bf16)
ARS_ENTRY(row_attention_split_f32, float)
