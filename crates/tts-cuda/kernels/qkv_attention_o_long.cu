// qkv_attention_o_long.cu — a talker step's whole attention half for one row in one
// launch, over a cache of any length:
//
//   x += O · attention(QKV(norm x))
//
// where the one-row talker step takes three dependent launches (the QKV GEMV, row
// attention, the O GEMV). The grid and cluster are qkv_attention_o.cu's: one cluster of
// QAO_CS blocks per q head h (grid (QAO_CS, heads)), the head's 3·hd QKV rows split across
// the cluster, S = 3·hd / QAO_CS rows a block. What differs:
//   * the QKV rows (S × H bf16, 192 KiB a block for the 1.7B talker) do not fit shared
//     memory beside the rest: they stream into registers a row pair at a time per warp
//     (the first pair loaded before the PDL wait, the block's other rows asked into L2);
//     the O tile is copied into shared memory before the wait, as there;
//   * the cache is long: block c takes a contiguous share [lo, hi) of the positions
//     0..pos0 (its cached rows asked into L2 before the wait), computes its part of the
//     softmax (its largest score m, sum of weights l and weighted values a), and the
//     cluster's blocks combine their parts through distributed shared memory:
//     o = Σ_c a_c e^(m_c - M) / Σ_c l_c e^(m_c - M), M = max_c m_c, in rank order, so
//     every block holds the same o;
//   * the new position's k and v come from shared memory (the block storing them in the
//     cache, rank 0 of the group's first q head, may not have yet).
// Then each block adds the head's share of its O rows in fixed point and the last block in
// adds the sums to x (common.cuh).
//
// Shapes (`stack::qkv_attention_o_plan` with `long` checks them): H a multiple of 256, at most
// 256·MLP_MAX_STEPS and a multiple of QAO_CS; hd = 128 (a lane owns 4 dims); 3·hd a
// multiple of 2·QAO_CS (whole row pairs). `early`: as qkv_attention_o.cu.

#define QAL_WARPS 8

// This block's part of the attention of q (hd = 128 values in shared memory) over
// positions [lo, hi) of the cache rows kbase/vbase (stride kvd), position pos_new taken
// from knew/vnew instead: m (the largest score), l (Σ e^(s - m)) and a[0..hd) (Σ e^(s - m)
// v), l = 0 and m = -inf when the share is empty. Tiles of AT_TILE positions: every thread
// scores whole positions, the block takes the tile's max and sum (online across tiles),
// warp w accumulates every QAL_WARPS-th position of the tile, lane l owning dims 4l..4l+3;
// the warps' sums meet in shared memory. Ends with a block barrier.
template <typename KV>
__device__ __forceinline__ void attend_part(const float* q, int lo, int hi, int pos_new,
                                            const KV* __restrict__ kbase,
                                            const KV* __restrict__ vbase, int kvd,
                                            const float* knew, const float* vnew, float* a,
                                            float* m_out, float* l_out) {
    __shared__ float s_wt[AT_TILE];
    __shared__ float s_red[33];
    __shared__ __align__(16) float s_acc[QAL_WARPS][128];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float scale = 1.0f / sqrtf(128.0f);
    float m = NEG_INF, l = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int t0 = lo; t0 < hi; t0 += AT_TILE) {
        const int n = min(AT_TILE, hi - t0);
        for (int j = tid; j < n; j += blockDim.x) {
            const int p = t0 + j;
            float sc = 0.f;
            if (p == pos_new) {
                for (int d = 0; d < 128; d++) sc += q[d] * knew[d];
            } else {
                const KV* kr = kbase + (size_t)p * kvd;
#pragma unroll 8
                for (int d = 0; d < 128; d += 4) sc += dot4(q + d, kv_load4<false>(kr + d));
            }
            s_wt[j] = sc * scale;
        }
        __syncthreads();
        float mx = NEG_INF;
        for (int j = tid; j < n; j += blockDim.x) mx = fmaxf(mx, s_wt[j]);
        mx = block_max(mx, s_red);
        const float nm = fmaxf(m, mx), corr = expf(m - nm);
        float sum = 0.f;
        for (int j = tid; j < n; j += blockDim.x) {
            const float w = expf(s_wt[j] - nm);
            s_wt[j] = w;
            sum += w;
        }
        sum = block_sum(sum, s_red);  // its barriers also publish s_wt
        l = l * corr + sum;
        m = nm;
        acc.x *= corr; acc.y *= corr; acc.z *= corr; acc.w *= corr;
        for (int j = warp; j < n; j += QAL_WARPS) {
            const int p = t0 + j;
            const float w = s_wt[j];
            const float4 v = p == pos_new ? *(const float4*)&vnew[4 * lane]
                                          : kv_load4<false>(vbase + (size_t)p * kvd + 4 * lane);
            acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
        }
        __syncthreads();  // s_wt is rewritten by the next tile
    }
    *(float4*)&s_acc[warp][4 * lane] = acc;
    __syncthreads();
    if (warp == 0) {
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w2 = 0; w2 < QAL_WARPS; w2++) {
            const float4 s = *(const float4*)&s_acc[w2][4 * lane];
            o.x += s.x; o.y += s.y; o.z += s.z; o.w += s.w;
        }
        *(float4*)&a[4 * lane] = o;
        if (lane == 0) {
            *m_out = m;
            *l_out = l;
        }
    }
    __syncthreads();
}

template <typename KV>
__device__ __forceinline__ void qkv_attention_o_long_body(
    const bf16* __restrict__ Wqkv, const float* __restrict__ in_norm,
    const int* __restrict__ slots, const int* __restrict__ positions,
    const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,
    const float* __restrict__ inv_freq, int heads, int kvh, int hd, KV* k_cache, KV* v_cache,
    int max_pos, const bf16* __restrict__ Wo, int H, float* x, unsigned long long* sums,
    unsigned int* arrived, int early) {
#ifndef QAO_CLUSTERS
    __trap();
#else
    extern __shared__ __align__(16) unsigned char s_qal[];
    __shared__ __align__(16) float s_q[128], s_qkv[3 * 128], s_attn[128], s_cs[128];
    // the row with the norm's gains applied (in shared memory, not in every warp's
    // registers: those hold the streamed weights)
    __shared__ __align__(16) float s_xg[256 * MLP_MAX_STEPS];
    __shared__ float s_red[33];
    const int c = blockIdx.x, h = blockIdx.y;  // c: the rank in the cluster (grid x = QAO_CS)
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rep = heads / kvh, g = h / rep, kvd = kvh * hd, qd = heads * hd;
    const int S = 3 * hd / QAO_CS, orows = H / QAO_CS, n0 = c * orows, ld = hd + AO_PAD;
    const bf16* s_o = (const bf16*)s_qal;                // [orows][ld]
    float* s_part = (float*)(s_o + (size_t)orows * ld);  // [S] the block's QKV sums
    // [hd + 2]: a, m, l of its share (a 16-byte aligned: S rounded up to 4 floats)
    float* s_mla = s_part + ((S + 3) & ~3);
    auto qkv_row = [&](int j) { return qao_row(j, h, g, hd, qd, kvd); };
    const int steps = H / 256, pairs = S / 2;
    // 0. the O tile into shared memory; the block's QKV rows after each warp's first pair
    //    into L2, the first pair into registers
    {
        copy_o_tile(smem_addr(s_qal), Wo, qd, n0, orows, h, hd, ld);
        const int lines = H / 64;  // 128-byte lines of a weight row
        for (int i = tid; i < (S - 2 * QAL_WARPS) * lines; i += blockDim.x) {
            const int r = 2 * QAL_WARPS + i / lines;
            prefetch_l2(Wqkv + (size_t)qkv_row(c * S + r) * H + (i % lines) * 64);
        }
    }
    uint4 w[2][MLP_MAX_STEPS];
    auto load_pair = [&](int pr) {
        const bf16* r0 = Wqkv + (size_t)qkv_row(c * S + 2 * pr) * H;
        const bf16* r1 = Wqkv + (size_t)qkv_row(c * S + 2 * pr + 1) * H;
        load_row_pair<MLP_MAX_STEPS>(w, r0, r1, lane, steps);
    };
    if (warp < pairs) load_pair(warp);
    // ... the RoPE angles, and this block's share of the cached rows into L2 (written by
    // earlier steps: see fused_attention_body's step 0)
    const int slot = slots[0], pos0 = positions[0];
    const bool live = slot >= 0;
    const size_t base = (size_t)(live ? slot : 0) * max_pos * kvd + (size_t)g * hd;
    const int share = (pos0 + 1 + QAO_CS - 1) / QAO_CS;
    const int lo = min(pos0 + 1, c * share), hi = min(pos0 + 1, lo + share);
    if (live) {
        rope_angles(s_cs, inv_freq, pos0, hd, tid, blockDim.x);
        const int lines = hd * (int)sizeof(KV) / 128;  // 128-byte lines of a cache row
        for (int i = tid; i < (hi - lo) * lines; i += blockDim.x) {
            const size_t off = base + (size_t)(lo + i / lines) * kvd + (i % lines) * (128 / sizeof(KV));
            prefetch_l2(k_cache + off);
            prefetch_l2(v_cache + off);
        }
    }
    if (early) pdl_trigger();
    pdl_wait();
    if (!early) pdl_trigger();

    // 1. the row's gains applied and its 1 / rms, then this block's S QKV sums, a row
    //    pair per warp at a time (the next pair's loads issued before this one's sums)
    const float inv = normed_row_smem(x, in_norm, H, eps, s_xg, s_red);
    for (int pr = warp; live && pr < pairs; pr += QAL_WARPS) {
        float acc[2];
        pair_partials<MLP_MAX_STEPS>(w, s_xg, lane, steps, acc);
        if (pr + QAL_WARPS < pairs) load_pair(pr + QAL_WARPS);
        const float s0 = warp_sum(acc[0]) * inv, s1 = warp_sum(acc[1]) * inv;
        if (lane == 0) {
            s_part[2 * pr] = s0;
            s_part[2 * pr + 1] = s1;
        }
    }

    // 2. the head's q, k and v from the cluster's slices
    qao_gather(s_qkv, s_part, S, hd, live);

    if (live) {
        // 3. the new q, k and v (k and v in place; stored by rank 0 of the group's first
        //    head)
        const bool writer = c == 0 && h % rep == 0;
        KV* kdst = k_cache + base + (size_t)pos0 * kvd;
        KV* vdst = v_cache + base + (size_t)pos0 * kvd;
        float* knew = s_qkv + hd;
        float* vnew = s_qkv + 2 * hd;
        qao_new_qkv<KV>(s_qkv, s_q, knew, vnew, q_norm, k_norm, eps, inv_freq, pos0, hd, s_cs,
                        writer, kdst, vdst);
        // 4. this block's share of the positions
        attend_part<KV>(s_q, lo, hi, pos0, k_cache + base, v_cache + base, kvd, knew, vnew,
                        s_mla, s_mla + hd, s_mla + hd + 1);
    }
    // ... and the cluster's shares combined, in rank order
    cluster_sync_all();
    if (live && tid < hd) {
        const unsigned mla = smem_addr(s_mla);
        float M = NEG_INF;
        const unsigned at_m = mla + (unsigned)hd * 4u, at_l = at_m + 4u;
        for (int r = 0; r < QAO_CS; r++) M = fmaxf(M, ld_cluster_rank(at_m, (unsigned)r));
        float L = 0.f, o = 0.f;
        for (int r = 0; r < QAO_CS; r++) {
            const float mr = ld_cluster_rank(at_m, (unsigned)r);
            const float f = mr == NEG_INF ? 0.f : expf(mr - M);
            L += ld_cluster_rank(at_l, (unsigned)r) * f;
            o += ld_cluster_rank(mla + (unsigned)tid * 4u, (unsigned)r) * f;
        }
        s_attn[tid] = o / L;
    }
    cluster_sync_all();
    cp_async_wait<0>();
    __syncthreads();

    // 5. this head's share of the block's O rows
    if (live) o_tile_share(s_o, ld, orows, hd, s_attn, sums + n0);
    fixed_fold_last(sums, arrived, x, H, 1, H);
#endif
}

#define QAL_ENTRY(NAME, KV)                                                                     \
    extern "C" __global__ void QAO_CLUSTER_DIMS __launch_bounds__(256) NAME(                  \
        const bf16* __restrict__ Wqkv, const float* __restrict__ in_norm,                       \
        const int* __restrict__ slots, const int* __restrict__ positions,                       \
        const float* __restrict__ q_norm, const float* __restrict__ k_norm, float eps,          \
        const float* __restrict__ inv_freq, int heads, int kvh, int hd, KV* k_cache,            \
        KV* v_cache, int max_pos, const bf16* __restrict__ Wo, int H, float* x,                 \
        unsigned long long* sums, unsigned int* arrived, int early) {                           \
        qkv_attention_o_long_body<KV>(Wqkv, in_norm, slots, positions, q_norm, k_norm, eps,     \
                                      inv_freq, heads, kvh, hd, k_cache, v_cache, max_pos, Wo,  \
                                      H, x, sums, arrived, early);                              \
    }
QAL_ENTRY(qkv_attention_o_long_m1, bf16)
QAL_ENTRY(qkv_attention_o_long_m1_f32, float)
