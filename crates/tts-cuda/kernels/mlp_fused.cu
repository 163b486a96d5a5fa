// mlp_fused.cu — a decoder layer's whole MLP for one row in one launch:
//
//   x += down( silu(gate(norm(x))) · up(norm(x)) )
//
// where the staged path (gemv_staged.cu) takes two dependent launches, gate/up then down.
// Block b owns the intermediate columns [b·ipb, (b+1)·ipb): it copies their gate/up rows
// and the matching ipb-wide slice of every down row into shared memory before the PDL
// wait, then computes its ipb activations and their share of all H outputs. The shares
// are summed across blocks in 64-bit fixed point (common.cuh's fixed_add: the same bits
// every run), and the last block to arrive adds the sums to the residual row.
//
// Why: at one row a stage is a chain of short dependent launches, each costing a few µs
// beyond its weight traffic (gemv_staged.cu); this removes one of the five per layer.
//
// Shapes (`linear::mlp` checks them): H a multiple of 256, at most 256·MLP_MAX_STEPS; ipb a
// multiple of 8, at most MLP_MAX_IPB, dividing I. Gate/up rows come in pairs (2j, 2j+1) =
// (gate_j, up_j), as `Act::SwigluPairs` reads them. The gate/up sums are formed as
// gemv_staged.cu forms them (x·g products in lane order, then a warp sum, then 1 / rms).

#define MLP_WARPS 8
#define MLP_MAX_STEPS 8
#define MLP_MAX_IPB 64

// A warp's copy of the row x (width H, at most 256·MLP_MAX_STEPS) with the norm's gains
// applied, as lane octets of 256-wide steps (xin[j][i] = x[k]·g[k], k = lane·8 + j·256 +
// i), and the row's 1 / rms: the products and sums gemv_staged.cu forms.
__device__ __forceinline__ float mlp_row_in(const float* x, const float* __restrict__ norm_w,
                                            int H, float eps, int lane,
                                            float (&xin)[MLP_MAX_STEPS][8]) {
    float sq = 0.f;
#pragma unroll
    for (int j = 0; j < MLP_MAX_STEPS; j++) {
        if (j < H / 256) {
            const int idx = lane * 8 + j * 256;
            const float4* xp = (const float4*)(x + idx);
            const float4* gp = (const float4*)(norm_w + idx);
            const float4 a = xp[0], b = xp[1], ga = gp[0], gb = gp[1];
            const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            const float gv[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
#pragma unroll
            for (int i = 0; i < 8; i++) {
                sq = fmaf(xv[i], xv[i], sq);
                xin[j][i] = xv[i] * gv[i];
            }
        }
    }
    return 1.0f / sqrtf(warp_sum(sq) / (float)H + eps);
}

// A warp's partial sum of the weight row w (H bf16, in shared memory) against its copy of
// the normed row (mlp_row_in's xin, `steps` 256-wide steps), before the warp sum: the
// products in gemv_staged.cu's order.
__device__ __forceinline__ float staged_row_partial(const bf16* w,
                                                    const float (&xin)[MLP_MAX_STEPS][8],
                                                    int lane, int steps) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < MLP_MAX_STEPS; j++) {
        if (j >= steps) break;
        const uint4 u = *(const uint4*)(w + lane * 8 + j * 256);
        float wf[8];
        unpack8(u, wf);
#pragma unroll
        for (int i = 0; i < 8; i++) acc = fmaf(xin[j][i], wf[i], acc);
    }
    return acc;
}

// A warp's lane octets of two weight rows (r0, r1: H bf16 in global memory, `steps`
// 256-wide steps) into registers, w[r][j] = row r's k = lane·8 + j·256 ..
template <int STEPS>
__device__ __forceinline__ void load_row_pair(uint4 (&w)[2][STEPS], const bf16* r0,
                                              const bf16* r1, int lane, int steps) {
#pragma unroll
    for (int j = 0; j < STEPS; j++) {
        if (j < steps) {
            w[0][j] = __ldg((const uint4*)(r0 + lane * 8 + j * 256));
            w[1][j] = __ldg((const uint4*)(r1 + lane * 8 + j * 256));
        }
    }
}

// The row x (width H) with the norm's gains applied into s_xg, by the block; returns the
// row's 1 / rms (block_sum's barriers publish s_xg).
__device__ __forceinline__ float normed_row_smem(const float* x, const float* __restrict__ g,
                                                 int H, float eps, float* s_xg,
                                                 float* scratch /* >= 33 floats */) {
    float sq = 0.f;
    for (int k = threadIdx.x; k < H; k += blockDim.x) {
        const float v = x[k];
        sq = fmaf(v, v, sq);
        s_xg[k] = v * g[k];
    }
    return 1.0f / sqrtf(block_sum(sq, scratch) / (float)H + eps);
}

// A warp's partial sums of two weight rows held in registers as lane octets of 256-wide
// steps (w[r][j]: row r's k = lane·8 + j·256 ..) against the row in s_xg: acc[r] before the
// warp sum.
template <int STEPS>
__device__ __forceinline__ void pair_partials(const uint4 (&w)[2][STEPS], const float* s_xg,
                                              int lane, int steps, float (&acc)[2]) {
    acc[0] = acc[1] = 0.f;
#pragma unroll
    for (int j = 0; j < STEPS; j++) {
        if (j >= steps) break;
        const float4* xp = (const float4*)(s_xg + lane * 8 + j * 256);
        const float4 xa = xp[0], xb = xp[1];
        const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float wf[8];
            unpack8(w[r][j], wf);
#pragma unroll
            for (int i = 0; i < 8; i++) acc[r] = fmaf(xv[i], wf[i], acc[r]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) mlp_fused_m1(
    const bf16* __restrict__ Wgu, const bf16* __restrict__ Wd, int H, int I, int ipb,
    const float* __restrict__ norm_w, float eps, float* x, unsigned long long* sums,
    unsigned int* arrived, int early) {
    extern __shared__ __align__(16) unsigned char s_w[];
    __shared__ float s_act[MLP_MAX_IPB];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j0 = blockIdx.x * ipb, steps = H / 256;
    bf16* s_gu = (bf16*)s_w;                  // [2·ipb][H]
    bf16* s_d = s_gu + (size_t)2 * ipb * H;  // [H][ipb]
    // 1. the weights: 2·ipb contiguous gate/up rows, then ipb columns of each down row
    {
        const unsigned gu = smem_addr(s_gu), dn = smem_addr(s_d);
        const bf16* src = Wgu + (size_t)2 * j0 * H;
        const int gu_chunks = 2 * ipb * H / 8;
        for (int c = tid; c < gu_chunks; c += blockDim.x) cp_async16(gu + c * 16, src + (size_t)c * 8, 16);
        const int per_row = ipb / 8, d_chunks = H * per_row;
        for (int c = tid; c < d_chunks; c += blockDim.x) {
            const int n = c / per_row, part = c % per_row;
            cp_async16(dn + c * 16, Wd + (size_t)n * I + j0 + part * 8, 16);
        }
        cp_async_commit();
    }
    if (early) pdl_trigger();
    pdl_wait();
    if (!early) pdl_trigger();

    // 2. the row, its gains applied, in every warp, and its 1 / rms
    float xin[MLP_MAX_STEPS][8];
    const float inv = mlp_row_in(x, norm_w, H, eps, lane, xin);
    cp_async_wait<0>();
    __syncthreads();

    // 3. the activations: warp w takes column pairs w, w + 8, ...
    for (int q = warp; q < ipb; q += MLP_WARPS) {
        const bf16* gate = s_gu + (size_t)2 * q * H;
        const float g = warp_sum(staged_row_partial(gate, xin, lane, steps)) * inv;
        const float u = warp_sum(staged_row_partial(gate + H, xin, lane, steps)) * inv;
        if (lane == 0) s_act[q] = linear_act(g, u, 2, false, 0.f, 0.f);
    }
    __syncthreads();

    // 4. this block's share of every output, added in fixed point; the last block in adds
    //    the sums to the row
    for (int n = tid; n < H; n += blockDim.x) {
        float p = 0.f;
        for (int c = 0; c < ipb; c += 8) {
            const uint4 u = *(const uint4*)(s_d + (size_t)n * ipb + c);
            float wf[8];
            unpack8(u, wf);
#pragma unroll
            for (int i = 0; i < 8; i++) p = fmaf(wf[i], s_act[c + i], p);
        }
        fixed_add(sums, n, p);
    }
    fixed_fold_last(sums, arrived, x, H, 1, H);
}

// mlp_stream_m1_s4 / _s8: the same MLP for rows of at most 256·STEPS (4: 1024, the code
// predictor's; 8: 2048, the 1.7B talker's), for layers whose slices do not fit shared
// memory (the talker's, 2048 wide with 6144 columns) or that should leave shared memory to
// the next launch (the code predictor's beside qkv_attention_o.cu): the same grid and
// products, but the gate/up rows stream from memory into registers, a column pair at a
// time per warp (the first pair loaded before the PDL wait), and the block's down slices,
// with `prefetch` its other gate/up rows too, are asked into L2 at the start so the later
// phases read them from there (the host asks for the gate/up rows where the whole layer's
// fit in L2 beside the rest). The normed row sits in dynamic shared memory (H floats; its
// Σ x² summed by the block), so a block takes ~100 registers a thread and one of
// qkv_attention_o*.cu's fits beside it on a multiprocessor.
template <int STEPS>
__device__ __forceinline__ void mlp_stream_body(
    const bf16* __restrict__ Wgu, const bf16* __restrict__ Wd, int H, int I, int ipb,
    const float* __restrict__ norm_w, float eps, float* x, unsigned long long* sums,
    unsigned int* arrived, int early, int prefetch) {
    __shared__ float s_act[MLP_MAX_IPB];
    // the row with the norm's gains applied (in shared memory, not in every warp's
    // registers: those hold the streamed weights); dynamic (H floats), so the launch asks
    // for shared memory and no multiprocessor is set to its smallest share for it
    extern __shared__ __align__(16) unsigned char s_stream[];
    float* s_xg = (float*)s_stream;
    __shared__ float s_red[33];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j0 = blockIdx.x * ipb, steps = H / 256;
    // 1. the down slices into L2 (ipb bf16 of each row: at most two 128-byte lines), and
    //    with `prefetch` the gate/up rows of the pairs after each warp's first
    for (int n = tid; n < H; n += blockDim.x) {
        const bf16* row = Wd + (size_t)n * I + j0;
        prefetch_l2(row);
        prefetch_l2(row + ipb - 1);
    }
    if (prefetch) {
        const int lines = H / 64;  // 128-byte lines of a gate/up row
        for (int i = tid; i < (2 * ipb - 2 * MLP_WARPS) * lines; i += blockDim.x) {
            const int r = 2 * MLP_WARPS + i / lines;
            if (r < 2 * ipb) prefetch_l2(Wgu + (size_t)(2 * j0 + r) * H + (i % lines) * 64);
        }
    }
    // ... and this warp's first column pair into registers
    uint4 w[2][STEPS];
    auto load_pair = [&](int q) {
        const bf16* gate = Wgu + (size_t)2 * (j0 + q) * H;
        load_row_pair<STEPS>(w, gate, gate + H, lane, steps);
    };
    if (warp < ipb) load_pair(warp);
    if (early) pdl_trigger();
    pdl_wait();
    if (!early) pdl_trigger();

    // 2. the row, its gains applied, and its 1 / rms
    const float inv = normed_row_smem(x, norm_w, H, eps, s_xg, s_red);

    // 3. the activations: warp w takes column pairs w, w + 8, ..., the next pair's loads
    //    issued before this one's sums
    for (int q = warp; q < ipb; q += MLP_WARPS) {
        float acc[2];
        pair_partials<STEPS>(w, s_xg, lane, steps, acc);
        if (q + MLP_WARPS < ipb) load_pair(q + MLP_WARPS);
        const float g = warp_sum(acc[0]) * inv, u = warp_sum(acc[1]) * inv;
        if (lane == 0) s_act[q] = linear_act(g, u, 2, false, 0.f, 0.f);
    }
    __syncthreads();

    // 4. this block's share of every output from the slices in L2, then the fold
    for (int n = tid; n < H; n += blockDim.x) {
        const bf16* row = Wd + (size_t)n * I + j0;
        float p = 0.f;
        for (int c = 0; c < ipb; c += 8) {
            float wf[8];
            unpack8(__ldg((const uint4*)(row + c)), wf);
#pragma unroll
            for (int i = 0; i < 8; i++) p = fmaf(wf[i], s_act[c + i], p);
        }
        fixed_add(sums, n, p);
    }
    fixed_fold_last(sums, arrived, x, H, 1, H);
}

#define MLP_STREAM_ENTRY(NAME, STEPS)                                                          \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                     \
        const bf16* __restrict__ Wgu, const bf16* __restrict__ Wd, int H, int I, int ipb,       \
        const float* __restrict__ norm_w, float eps, float* x, unsigned long long* sums,        \
        unsigned int* arrived, int early, int prefetch) {                                       \
        mlp_stream_body<STEPS>(Wgu, Wd, H, I, ipb, norm_w, eps, x, sums, arrived, early,        \
                               prefetch);                                                       \
    }
MLP_STREAM_ENTRY(mlp_stream_m1_s4, 4)
MLP_STREAM_ENTRY(mlp_stream_m1_s8, 8)
