// qkv_attention_o.cu — a code-predictor step's whole attention half for one row in one
// launch:
//
//   x += O · attention(QKV(norm x))
//
// where attention_o.cu takes two dependent launches (the QKV GEMV, then attention + O) and
// the staged path three. One thread-block cluster of QAO_CS blocks per q head h (grid
// (QAO_CS, heads), clusters along x): the head's 3·hd QKV rows (q of head h, k and v of its
// kv group g) are split across the cluster, S = 3·hd / QAO_CS contiguous rows a block,
// copied into shared memory before the PDL wait together with the block's O tile (O rows
// [c·H/QAO_CS, (c+1)·H/QAO_CS), head h's hd columns) and group g's held cache rows. After
// the wait:
//   1. the input row normed (mlp_fused.cu's mlp_row_in: every warp holds it) and the block's
//      S QKV sums, warp w taking rows w, w + 8, ...;
//   2. the slices exchanged through distributed shared memory: every block of the cluster
//      then holds the head's q, k and v (a second cluster barrier keeps every block alive
//      until all have read its slice);
//   3. attention_o.cu's attention, redone by each block of the cluster (a few KB): QK-norm
//      and RoPE of q and k, the new k and v stored in the cache by rank 0 of the cluster of
//      the group's first q head, attention over the held rows and the new one (attend_held);
//   4. the head's share of the block's O rows, added in fixed point (common.cuh: the same
//      bits every run); the last block in adds the sums to x.
// A padding row (slot -1) computes nothing and changes nothing (every block still meets
// the cluster barriers and the fold).
//
// Why: at one row a step is a chain of dependent launches, each costing a few µs beyond
// its weights; this takes a layer's attention half from two launches to one (with
// mlp_fused.cu, a layer is two launches).
//
// Shapes (`stack::qkv_attention_o_plan` checks them): H a multiple of 256 and of QAO_CS,
// at most 256·MLP_MAX_STEPS; hd a multiple of 8, at most 128, 3·hd a multiple of QAO_CS;
// caches of at most FA_SPOS positions. `early`: the next launch reads nothing but weights
// before its wait (see gemv_staged.cu); this kernel reads cache rows before its own wait,
// so its predecessor must not trigger early.

#define QAO_CS 8
// Clusters and distributed shared memory need sm_90 (the emulated tests, tests/emu, have
// their own); elsewhere the kernels exist but trap, and the host never takes them.
#if __CUDA_ARCH__ >= 900 || defined(EMU_CUDA)
#define QAO_CLUSTERS 1
#endif
#if __CUDA_ARCH__ >= 900
#define QAO_CLUSTER_DIMS __cluster_dims__(QAO_CS, 1, 1)
#else
#define QAO_CLUSTER_DIMS
#endif

// The weight row of QKV row j of q head h (group g): q of head h, then k and v of group g.
__device__ __forceinline__ int qao_row(int j, int h, int g, int hd, int qd, int kvd) {
    return j < hd ? h * hd + j : j < 2 * hd ? qd + g * hd + (j - hd) : qd + kvd + g * hd + (j - 2 * hd);
}

#ifdef QAO_CLUSTERS
// The head's 3·hd QKV values from the cluster's slices (block r's S values at s_part) into
// s_qkv, between two cluster barriers: the first publishes every slice, the second keeps
// every block (and its slice) alive until all have read.
__device__ __forceinline__ void qao_gather(float* s_qkv, const float* s_part, int S, int hd,
                                           bool live) {
    cluster_sync_all();
    if (live) {
        const unsigned part = smem_addr(s_part);
        for (int j = threadIdx.x; j < 3 * hd; j += blockDim.x)
            s_qkv[j] = ld_cluster_rank(part + (unsigned)(j % S) * 4u, (unsigned)(j / S));
    }
    cluster_sync_all();
}
#endif

// The new token's q (QK-norm + RoPE, warp 0: into q), k (the same, warp 1) and v (every
// thread) from the head's gathered values `raw` (q, k, v), k and v rounded as the cache
// rounds them into k / v (which may alias raw's k and v) and, with `writer`, stored in the
// cache rows kdst / vdst. Ends with a block barrier.
template <typename KV>
__device__ __forceinline__ void qao_new_qkv(const float* raw, float* q, float* k, float* v,
                                            const float* __restrict__ q_norm,
                                            const float* __restrict__ k_norm, float eps,
                                            const float* __restrict__ inv_freq, int pos, int hd,
                                            const float* cs, bool writer, KV* kdst, KV* vdst) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp == 0) {
        norm_rope<false>(raw, q_norm, eps, inv_freq, pos, hd, lane,
                         [&](int e, float val) { q[e] = val; }, cs);
    } else if (warp == 1) {
        norm_rope<false>(raw + hd, k_norm, eps, inv_freq, pos, hd, lane,
                         [&](int e, float val) {
                             k[e] = kv_round(val, kdst);
                             if (writer) kv_store(kdst + e, val);
                         }, cs);
    }
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        const float val = raw[2 * hd + e];
        v[e] = kv_round(val, vdst);
        if (writer) kv_store(vdst + e, val);
    }
    __syncthreads();
}

template <typename KV>
__device__ __forceinline__ void qkv_attention_o_body(
    const bf16* __restrict__ Wqkv, const float* __restrict__ in_norm,
    const int* __restrict__ slots, const int* __restrict__ positions,
    const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,
    const float* __restrict__ inv_freq, int heads, int kvh, int hd, KV* k_cache, KV* v_cache,
    int max_pos, const bf16* __restrict__ Wo, int H, float* x, unsigned long long* sums,
    unsigned int* arrived, int early) {
#ifndef QAO_CLUSTERS
    __trap();
#else
    extern __shared__ __align__(16) unsigned char s_qao[];
    __shared__ __align__(16) float s_q[128], s_qkv[3 * 128], s_attn[128], s_cs[128];
    __shared__ __align__(16) float s_k[FA_SPOS][128], s_v[FA_SPOS][128];
    const int c = blockIdx.x, h = blockIdx.y;  // c: the rank in the cluster (grid x = QAO_CS)
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const int rep = heads / kvh, g = h / rep, kvd = kvh * hd, qd = heads * hd;
    const int S = 3 * hd / QAO_CS, orows = H / QAO_CS, n0 = c * orows, ld = hd + AO_PAD;
    bf16* s_w = (bf16*)s_qao;                              // [S][H]
    const bf16* s_o = s_w + (size_t)S * H;                 // [orows][ld]
    float* s_part = (float*)(s_o + (size_t)orows * ld);    // [S]
    // 0. the weights: the block's S QKV rows and its O tile
    {
        const unsigned base = smem_addr(s_qao);
        const int per_row = H / 8;
        for (int i = tid; i < S * per_row; i += blockDim.x) {
            const int r = i / per_row, p = i % per_row;
            const int row = qao_row(c * S + r, h, g, hd, qd, kvd);
            cp_async16(base + (r * H + p * 8) * 2, Wqkv + (size_t)row * H + p * 8, 16);
        }
        copy_o_tile(base + S * H * 2, Wo, qd, n0, orows, h, hd, ld);
    }
    // ... the RoPE angles and the held rows of group g (written at least two launches
    // earlier: see fused_attention_body's step 0)
    const int slot = slots[0], pos0 = positions[0];
    const bool live = slot >= 0;
    const size_t base = (size_t)(live ? slot : 0) * max_pos * kvd + (size_t)g * hd;
    if (live) {
        if (pos0 >= FA_SPOS) __trap();  // the host takes this kernel for short caches only
        rope_angles(s_cs, inv_freq, pos0, hd, tid, blockDim.x);
        const int q4 = hd / 4;
        for (int idx = tid; idx < pos0 * q4; idx += blockDim.x) {
            const int p = idx / q4, d = 4 * (idx % q4);
            *(float4*)&s_k[p][d] = kv_load4<false>(k_cache + base + (size_t)p * kvd + d);
            *(float4*)&s_v[p][d] = kv_load4<false>(v_cache + base + (size_t)p * kvd + d);
        }
    }
    if (early) pdl_trigger();
    pdl_wait();
    if (!early) pdl_trigger();

    // 1. the normed row and this block's S QKV sums
    float xin[MLP_MAX_STEPS][8];
    const float inv = mlp_row_in(x, in_norm, H, eps, lane, xin);
    cp_async_wait<0>();
    __syncthreads();
    const int steps = H / 256;
    for (int i = warp; live && i < S; i += nw) {
        const float acc = staged_row_partial(s_w + (size_t)i * H, xin, lane, steps);
        const float sum = warp_sum(acc) * inv;
        if (lane == 0) s_part[i] = sum;
    }

    // 2. the head's q, k and v from the cluster's slices
    qao_gather(s_qkv, s_part, S, hd, live);

    if (live) {
        // 3. the new q, k and v (stored by rank 0 of the group's first head); attention
        const bool writer = c == 0 && h % rep == 0;
        KV* kdst = k_cache + base + (size_t)pos0 * kvd;
        KV* vdst = v_cache + base + (size_t)pos0 * kvd;
        qao_new_qkv<KV>(s_qkv, s_q, s_k[pos0], s_v[pos0], q_norm, k_norm, eps, inv_freq, pos0,
                        hd, s_cs, writer, kdst, vdst);
        attend_held(s_q, pos0 + 1, s_k, s_v, hd, s_attn);

        // 4. this head's share of the block's O rows
        o_tile_share(s_o, ld, orows, hd, s_attn, sums + n0);
    }
    fixed_fold_last(sums, arrived, x, H, 1, H);
#endif
}

#define QAO_ENTRY(NAME, KV)                                                                     \
    extern "C" __global__ void QAO_CLUSTER_DIMS __launch_bounds__(256) NAME(                  \
        const bf16* __restrict__ Wqkv, const float* __restrict__ in_norm,                       \
        const int* __restrict__ slots, const int* __restrict__ positions,                       \
        const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,          \
        const float* __restrict__ inv_freq, int heads, int kvh, int hd, KV* k_cache,            \
        KV* v_cache, int max_pos, const bf16* __restrict__ Wo, int H, float* x,                 \
        unsigned long long* sums, unsigned int* arrived, int early) {                           \
        qkv_attention_o_body<KV>(Wqkv, in_norm, slots, positions, q_norm, k_norm, eps,          \
                                 inv_freq, heads, kvh, hd, k_cache, v_cache, max_pos, Wo, H, x, \
                                 sums, arrived, early);                                         \
    }
QAO_ENTRY(qkv_attention_o_m1, bf16)
QAO_ENTRY(qkv_attention_o_m1_f32, float)
