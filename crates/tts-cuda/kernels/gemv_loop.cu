// gemv_loop.cu — gemv.cu's one-row GEMV (`gemv_m1` on bf16 weights, `gemv8_m1` on E4M3
// codes: the same arguments, fused norm, norm chain and epilogue) on a grid the GPU holds
// at once, each warp looping over its row pairs with the next pass's weights in flight
// while it multiplies the current one.
//
// Why: gemv.cu gives each row pair (all of K, at ksplit 1) one warp of its own, in blocks
// the GPU runs in waves (the talker's gate/up: 768 blocks, two waves of `gemv8_m1` at 80
// registers, three of `gemv_m1_pre` at 124), and a block asks for its weights only when it
// starts: between waves the memory waits while blocks reduce, store and leave. Here warp w
// of the grid's W takes pairs w, w + W, ..., as a sequence of passes (GEMV_U chunks of 16
// bytes per lane and row, gemv.cu's), and loads pass t + 1 into a second set of registers
// before it multiplies pass t.
//
// Sums: a lane takes its chunks in gemv.cu's order and a warp adds its lanes with
// warp_sum, the fused norm's Σ x² alike (gathered over the warp's first pair; the row is
// the same for every pair), and the norm chain's Σ y² partials are added in gemv.cu's
// order (its 8 warps' strides, then the warps in order): for layers that gemv.cu runs at
// ksplit 1 (`gemv_ksplit`: N >= 4096) the results have its bits; narrower layers, where
// gemv.cu splits K over 2 or 4 warps, differ within f32 rounding.
//
// Grid: any number of 256-thread blocks (the host gives what the multiprocessors hold at
// once, `linear::gemv_loop_blocks`). `ldx`, `ldr`, `ldy` and `ksplit` are unused (one
// row, the whole of K a warp).

template <bool F8>
__device__ __forceinline__ void gemv_loop_body(
    const void* __restrict__ Wv, int N, int K, const float* __restrict__ X,
    const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,
    const float* res, float* Y, int rows_valid, const float* __restrict__ scales,
    const float* __restrict__ ss_in, int ss_n, float* xo, const float* __restrict__ xo_g,
    float* ss_out) {
    // elements per 16-byte chunk, a warp's K step, a pass, bytes per element
    constexpr int EPL = F8 ? 16 : 8, STEP = 32 * EPL, PASS = STEP * GEMV_U, EB = F8 ? 1 : 2;
    const unsigned char* W = (const unsigned char*)Wv;
    const int lane = threadIdx.x & 31;
    const int gw = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int nw = gridDim.x * (blockDim.x >> 5);
    const int pairs = (N + 1) / 2, passes = (K + PASS - 1) / PASS;
    const int items = gw < pairs ? ((pairs - 1 - gw) / nw + 1) * passes : 0;
    // item t: pass t % passes of pair gw + (t / passes) · nw
    auto load = [&](uint4 (&w)[GEMV_U][GEMV_R], int t) {
        const int n0 = 2 * (gw + (t / passes) * nw);
        const int kb = (t % passes) * PASS + lane * EPL;
        const unsigned char* r0 = W + (size_t)n0 * K * EB;
        const unsigned char* r1 = W + (size_t)min(n0 + 1, N - 1) * K * EB;
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            const int idx = kb + u * STEP;
            const bool in = idx < K;
            w[u][0] = in ? __ldg((const uint4*)(r0 + (size_t)idx * EB)) : make_uint4(0, 0, 0, 0);
            w[u][1] = in ? __ldg((const uint4*)(r1 + (size_t)idx * EB)) : make_uint4(0, 0, 0, 0);
        }
    };
    // The weights do not depend on earlier kernels: the first two passes before the wait.
    uint4 wa[GEMV_U][GEMV_R], wb[GEMV_U][GEMV_R];
    if (items > 0) load(wa, 0);
    if (items > 1) load(wb, 1);
    pdl_wait();
    pdl_trigger();
    // the norm chain's 1/rms from the writer's Σ y² partials, added as gemv.cu's block adds
    // them: thread i of 256 takes i, i + 256, ...; each warp's lanes warp_sum; warps in order
    float inv_chain = 1.f;
    if (ss_in && items > 0) {
        float t = 0.f;
        for (int v = 0; v < GEMV_WARPS; v++) {
            float s = 0.f;
            for (int i = v * 32 + lane; i < ss_n; i += 32 * GEMV_WARPS) s += ss_in[i];
            t += warp_sum(s);
        }
        inv_chain = 1.0f / sqrtf(t / (float)K + eps);
    }
    const bool norm = norm_w != nullptr;
    float acc[GEMV_R][1] = {{0.f}, {0.f}}, sq[1] = {0.f}, inv = 1.f;
    // what lane r < 2 stores for row n0 + r of its pair, requested at the pair's first pass
    float pre_s[2] = {1.f, 1.f}, pre_b[2] = {0.f, 0.f}, pre_res = 0.f, pre_g = 0.f;
    auto step = [&](const uint4 (&w)[GEMV_U][GEMV_R], int t) {
        const int i = t / passes, j = t % passes;
        const int n0 = 2 * (gw + i * nw), sn = n0 + lane;
        const bool stores = lane < GEMV_R && rows_valid >= 1 && sn < N && !(act == 2 && lane != 0);
        if (j == 0 && stores) {
            if constexpr (F8) {
                pre_s[0] = scales[sn];
                if (act == 2) pre_s[1] = scales[sn + 1];
            }
            if (bias) {
                pre_b[0] = bias[sn];
                if (act == 2) pre_b[1] = bias[sn + 1];
            }
            if (res) pre_res = res[act == 2 ? sn / 2 : sn];
            if (xo) pre_g = xo_g[sn];
        }
        const int kb = j * PASS + lane * EPL;
#pragma unroll
        for (int u = 0; u < GEMV_U; u++) {
            const int idx = kb + u * STEP;
            if (idx >= K) break;
            gemv_chunk<1, F8>(acc, sq, w[u], idx, X, 0, norm_w);
        }
        if (j != passes - 1) return;
        // the pair's sums (every lane gets both rows'), then lanes 0 and 1 store
        const float a0 = warp_sum(acc[0][0]), a1 = warp_sum(acc[1][0]);
        acc[0][0] = acc[1][0] = 0.f;
        if (norm && i == 0) inv = 1.0f / sqrtf(warp_sum(sq[0]) / (float)K + eps);
        else if (!norm && ss_in) inv = inv_chain;
        float y = 0.f;
        if (stores) {
            float a = (lane == 0 ? a0 : a1) * (F8 ? pre_s[0] : 1.f);
            a *= inv;
            float up = 0.f;
            if (act == 2) up = a1 * (F8 ? pre_s[1] : 1.f) * inv;
            const float o = linear_act(a, up, act, bias != nullptr, pre_b[0], pre_b[1]);
            y = res ? o + pre_res : o;
            Y[act == 2 ? sn / 2 : sn] = y;
            if (xo) xo[sn] = pre_g * y;
        }
        if (xo) {
            // act 0 and N even (linear.rs): lanes 0 and 1 hold rows n0 and n0 + 1
            const float q = y * y, q1 = __shfl_down_sync(0xffffffffu, q, 1);
            if (lane == 0 && stores) ss_out[n0 / 2] = q + q1;
        }
    };
    // a: even passes, b: odd ones; a set is loaded again as soon as its pass is multiplied
    for (int t = 0; t < items; t += 2) {
        step(wa, t);
        if (t + 2 < items) load(wa, t + 2);
        if (t + 1 >= items) break;
        step(wb, t + 1);
        if (t + 3 < items) load(wb, t + 3);
    }
}

// Two blocks a multiprocessor (two sets of weight registers a lane: up to 128 registers).
#define GEMV_LOOP_ENTRY(NAME, F8, WT)                                                           \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(                                  \
        const WT* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,           \
        const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,    \
        const float* res, int ldr, float* Y, int ldy, int rows_valid, int ksplit,                \
        const float* __restrict__ scales, const float* __restrict__ ss_in, int ss_n, float* xo,  \
        const float* __restrict__ xo_g, float* ss_out) {                                         \
        (void)ldx, (void)ldr, (void)ldy, (void)ksplit; /* one row, the whole of K a warp */      \
        gemv_loop_body<F8>(W, N, K, X, norm_w, eps, bias, act, res, Y, rows_valid, scales,       \
                           ss_in, ss_n, xo, xo_g, ss_out);                                       \
    }
GEMV_LOOP_ENTRY(gemv_loop_m1, false, bf16)
GEMV_LOOP_ENTRY(gemv8_loop_m1, true, unsigned char)
