// attention_o.cu — the attention and O projection of a step of a few rows of one token
// each, in one launch, for caches short enough to sit in shared memory (the code
// predictor's steps):
//
//   x[r] += O · attention(q[r], k, v)
//
// where fused_attention_short then the O projection take two dependent launches. Grid
// (heads, chunks, rows): block (h, c, r) copies the O weights of head h's columns for
// output rows [c·orows, (c+1)·orows) into shared memory before the PDL wait, runs row r's
// head h attention
// (fused_attention_body: QK-norm, RoPE, the new K/V stored by the chunk-0 block of the
// group's first head, attention over the held cache), then adds that head's share of its
// rows in fixed point (common.cuh: the same bits every run); the last block in adds the
// sums to the residual rows (x, ldx apart). Each head's attention is computed by every
// chunk's block (a few KB of cache each): splitting the O projection by head makes that
// the only repeat,
// where computing every head in every O block (tried in 2026-12-03-h200-attention-in-o)
// repeated all of them.
//
// The O tile's rows are hd + 8 bf16 apart in shared memory, so the 16-byte loads of a
// quarter warp (one row each, the same columns) fall in distinct banks.

#define AO_PAD 8

// Starts copying the O tile of head h for rows [n0, n0 + orows) (hd columns from h·hd of
// rows qd wide) to the shared address `dst`, its rows ld bf16 apart, by the block (one
// cp.async group).
__device__ __forceinline__ void copy_o_tile(unsigned dst, const bf16* __restrict__ Wo, int qd,
                                            int n0, int orows, int h, int hd, int ld) {
    const int per_row = hd / 8;
    for (int i = threadIdx.x; i < orows * per_row; i += blockDim.x) {
        const int n = i / per_row, p = i % per_row;
        cp_async16(dst + (n * ld + p * 8) * 2, Wo + (size_t)(n0 + n) * qd + h * hd + p * 8, 16);
    }
    cp_async_commit();
}

// The share of rows [0, orows) of an O tile (s_o: orows rows of hd bf16, ld apart) for one
// head's attention output attn[0..hd): added to sums[n] in fixed point, by the block.
__device__ __forceinline__ void o_tile_share(const bf16* s_o, int ld, int orows, int hd,
                                             const float* attn, unsigned long long* sums) {
    for (int n = threadIdx.x; n < orows; n += blockDim.x) {
        float p = 0.f;
        for (int q = 0; q < hd / 8; q++) {
            const uint4 u = *(const uint4*)(s_o + (size_t)n * ld + q * 8);
            float wf[8];
            unpack8(u, wf);
#pragma unroll
            for (int i = 0; i < 8; i++) p = fmaf(wf[i], attn[q * 8 + i], p);
        }
        fixed_add(sums, n, p);
    }
}

template <typename KV, bool HO>
__device__ __forceinline__ void attention_o_body(
    const float* __restrict__ qkv, int ldq, const int* __restrict__ slots,
    const int* __restrict__ positions, const float* __restrict__ q_norm,
    const float* __restrict__ k_norm, float eps, const float* __restrict__ inv_freq, int heads,
    int kvh, int hd, KV* k_cache, KV* v_cache, int max_pos, const bf16* __restrict__ Wo, int H,
    int orows, int rows, float* x, int ldx, unsigned long long* sums, unsigned int* arrived) {
    extern __shared__ __align__(16) unsigned char s_wo_raw[];
    __shared__ __align__(16) float s_attn[128];
    const bf16* s_wo = (const bf16*)s_wo_raw;  // [orows][hd + AO_PAD]
    const int h = blockIdx.x, c = blockIdx.y, r = blockIdx.z;
    const int n0 = c * orows, ld = hd + AO_PAD;
    // 1. the O tile: rows n0.., columns h·hd..
    copy_o_tile(smem_addr(s_wo_raw), Wo, heads * hd, n0, orows, h, hd, ld);
    // 2. row r's head h attention into s_attn (the body waits for the previous kernel
    //    first; a padding row, slot -1, has none)
    const bool live = r < rows && slots[r] >= 0;
    fused_attention_body<KV, false, FA_SPOS, HO, false>(
        h, r, qkv, ldq, rows, 1, slots, positions, q_norm, k_norm, eps, inv_freq, heads, kvh, hd,
        k_cache, v_cache, max_pos, s_attn, 0, c == 0, h);
    if (!live) {
        pdl_wait();
        pdl_trigger();
    }
    cp_async_wait<0>();
    __syncthreads();
    // 3. this head's share of the block's rows, in fixed point; the last block adds them
    if (live) o_tile_share(s_wo, ld, orows, hd, s_attn, sums + (size_t)r * H + n0);
    fixed_fold_last(sums, arrived, x, H, rows, ldx);
}

#define AO_ENTRY(NAME, KV, HO)                                                                  \
    extern "C" __global__ void __launch_bounds__(128) NAME(                                     \
        const float* __restrict__ qkv, int ldq, const int* __restrict__ slots,                  \
        const int* __restrict__ positions, const float* __restrict__ q_norm,                    \
        const float* __restrict__ k_norm, float eps, const float* __restrict__ inv_freq,        \
        int heads, int kvh, int hd, KV* k_cache, KV* v_cache, int max_pos,                      \
        const bf16* __restrict__ Wo, int H, int orows, int rows, float* x, int ldx,             \
        unsigned long long* sums, unsigned int* arrived) {                                      \
        attention_o_body<KV, HO>(qkv, ldq, slots, positions, q_norm, k_norm, eps, inv_freq,     \
                                 heads, kvh, hd, k_cache, v_cache, max_pos, Wo, H, orows, rows, \
                                 x, ldx, sums, arrived);                                        \
    }
// as fused_attention_short: the bf16 cache kernel without the long-cache path
AO_ENTRY(attention_o_m1, bf16, true)
AO_ENTRY(attention_o_m1_f32, float, false)
