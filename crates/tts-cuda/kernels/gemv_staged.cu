// gemv_staged.cu — the one-row GEMV of gemv.cu with its weights staged in shared memory
// before the PDL wait: the same products, summed in the same order (a result has the bits
// `gemv_m1` / `gemv_m1_pre` give it), but each block copies its whole weight tile with
// cp.async while the previous kernel still runs, so after the wait only the X row is read
// from memory.
//
// Why: at one row a stage is a chain of short dependent launches. gemv.cu loads the first
// pass of weights into registers before its wait, but a launch of 256-384 blocks of ~20K
// registers each leaves room on a multiprocessor for only part of the next launch, so the
// rest of that launch's blocks begin their weight loads only after the kernel before them
// has ended. Here a launch is one block per multiprocessor (at most 128) holding at most
// STAGED_MAX_SMEM bytes of weights, so two consecutive launches fit side by side and the
// next one's weights arrive while this one computes. Measured on the H200
// (bench/results/2026-12-03-h200-staged-gemv): the code predictor at one row 2.6 % faster;
// with no weight traffic at all a launch of this chain still costs ~3.2 us, so what is
// left there is the number of dependent launches, not the weights.
//
//   y[n] = epilogue( sum_k xin[k] * W[n][k] ),   one row, n < N   (epilogue: gemv.cu)
//
// Block b owns output rows [b·rpb, min(N, (b+1)·rpb)), rpb even, as rpb/2 row pairs.
// gemv.cu's warp work is a task here: (pair q, K part p), p < ksplit, over the K slice and
// lane octets gemv.cu gives warp part p; warp w takes tasks w, w+8, ... (all of one part:
// ksplit divides 8), so it loads its part of X once. Every task's two partial sums and its
// part's Σ x² go to shared memory; then one thread per output row adds the parts in order,
// as gemv.cu's group leader does. That thread reads its bias value before the wait and its
// residual value right after it, beside the X loads, so the epilogue waits on no memory.
// Each warp reads the norm's gains over its part of X before the wait too: they are
// weights, and a stage's streaming weights push them out of L2 between two reads (code
// predictor at one row on an H100 1.69 -> 1.60 ms, bench/results/2026-12-06-h100-link-costs).
// It squares and scales its X only after the block's barrier, so no warp holds the others
// there while its X loads are in flight, and sums its squares over the warp beside its
// first task's sums; the body is compiled with and without the norm (`NORM`), so a layer
// without one runs none of its code (H100: a normed 1024x1024 link 2.53 -> 2.33 us, an
// unnormed one 1.97 -> 1.90, the code predictor at one row 1.60 -> 1.53 ms,
// bench/results/2026-12-06-norm-after-barrier).
//
// `early` (`linear::StagedTrigger`): the successor is another linear kernel, which reads
// nothing but weights before its own wait, so this block lets it launch right away (its
// weights then stream in while this kernel waits and computes). Otherwise the trigger
// follows the wait, as in every other kernel (attention.cu relies on that for what it reads
// before its wait).

#define STAGED_WARPS 8
#define STAGED_MAX_TASKS 64
#define STAGED_MAX_STEPS 4  // 256-wide K steps per part: a part's X in 32 registers per lane

// The kernel's body, compiled once with the norm (NORM: norm_w is not null) and once
// without, so a layer without a norm runs no code of it.
template <bool NORM>
__device__ __forceinline__ void gemv_staged_body(const bf16* __restrict__ W, int N, int K,
                                                 const float* __restrict__ X,
                                                 const float* __restrict__ norm_w, float eps,
                                                 const float* __restrict__ bias, int act,
                                                 const float* res, float* Y, int rows_valid,
                                                 int ksplit, int rpb, int early,
                                                 unsigned char* s_w, float (*s_part)[3]) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int row0 = blockIdx.x * rpb;
    const int rows = min(rpb, N - row0);
    // 1. the tile: `rows` contiguous weight rows (a missing pair partner reads zeros); the
    //    bias values of the output this thread stores (thread i: row row0 + i)
    {
        const int chunks = rows * K / 8, padded = ((rows + 1) & ~1) * K / 8;
        const unsigned base = smem_addr(s_w);
        const bf16* src = W + (size_t)row0 * K;
        for (int c = tid; c < padded; c += blockDim.x)
            cp_async16(base + c * 16, c < chunks ? (const void*)(src + (size_t)c * 8) : (const void*)W,
                       c < chunks ? 16 : 0);
        cp_async_commit();
    }
    const int n = row0 + tid;
    const bool stores = tid < rows && rows_valid >= 1 && (act != 2 || tid % 2 == 0);
    const float b0 = (stores && bias) ? bias[n] : 0.f;
    const float b1 = (stores && bias && act == 2) ? bias[n + 1] : 0.f;
    // this warp's part of X (as gemv.cu's warp of part p: K slice, lane octets), and the
    // norm's gains over it, which are weights: read before the wait too
    const int part = warp % ksplit;
    const int steps = (K + 255) / 256, per = (steps + ksplit - 1) / ksplit;
    const int k_begin = part * per * 256, k_end = min(K, (part + 1) * per * 256);
    float gin[STAGED_MAX_STEPS][8];
#pragma unroll
    for (int j = 0; j < STAGED_MAX_STEPS; j++) {
        const int idx = k_begin + lane * 8 + j * 256;
        if (NORM && j < per && idx < k_end) {
            const float4* gp = (const float4*)(norm_w + idx);
            const float4 ga = gp[0], gb = gp[1];
            gin[j][0] = ga.x, gin[j][1] = ga.y, gin[j][2] = ga.z, gin[j][3] = ga.w;
            gin[j][4] = gb.x, gin[j][5] = gb.y, gin[j][6] = gb.z, gin[j][7] = gb.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) gin[j][i] = 1.f;
        }
    }
    if (early) pdl_trigger();
    pdl_wait();
    if (!early) pdl_trigger();
    const float rv = (stores && res) ? res[act == 2 ? n / 2 : n] : 0.f;

    // 2. this warp's part of X: loads issued, the barrier passed while they are in flight,
    //    then the norm's squares and gains (a warp that used them before the barrier would
    //    hold every warp there for its loads)
    float xin[STAGED_MAX_STEPS][8];
#pragma unroll
    for (int j = 0; j < STAGED_MAX_STEPS; j++) {
        const int idx = k_begin + lane * 8 + j * 256;
        if (j < per && idx < k_end) {
            const float4* xp = (const float4*)(X + idx);
            const float4 a = xp[0], b = xp[1];
            xin[j][0] = a.x, xin[j][1] = a.y, xin[j][2] = a.z, xin[j][3] = a.w;
            xin[j][4] = b.x, xin[j][5] = b.y, xin[j][6] = b.z, xin[j][7] = b.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) xin[j][i] = 0.f;
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float sq = 0.f;
    if (NORM) {
#pragma unroll
        for (int j = 0; j < STAGED_MAX_STEPS; j++) {
            if (j >= per || k_begin + lane * 8 + j * 256 >= k_end) break;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                sq = fmaf(xin[j][i], xin[j][i], sq);
                xin[j][i] *= gin[j][i];
            }
        }
    }

    // 3. the tasks: both rows of pair q over part p, products in gemv.cu's order; the
    //    part's Σ x² summed over the warp beside the first task's two sums (every task of a
    //    warp has its part)
    const int pairs = (rows + 1) / 2, tasks = pairs * ksplit;
    bool sq_summed = !NORM;
    for (int t = warp; t < tasks; t += STAGED_WARPS) {
        const int q = t / ksplit;
        float acc[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < STAGED_MAX_STEPS; j++) {
            const int idx = k_begin + lane * 8 + j * 256;
            if (j >= per || idx >= k_end) break;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const uint4 u = *(const uint4*)(s_w + ((size_t)(2 * q + r) * K + idx) * 2);
                float wf[8];
                unpack8(u, wf);
#pragma unroll
                for (int i = 0; i < 8; i++) acc[r] = fmaf(xin[j][i], wf[i], acc[r]);
            }
        }
        float a0 = acc[0], a1 = acc[1];
        if (sq_summed) {
            a0 = warp_sum(a0);
            a1 = warp_sum(a1);
        } else {
            warp_sum3(a0, a1, sq);
            sq_summed = true;
        }
        if (lane == 0) {
            s_part[t][0] = a0;
            s_part[t][1] = a1;
            s_part[t][2] = sq;
        }
    }
    __syncthreads();

    // 4. one thread per output row: the parts in order, then gemv.cu's epilogue
    if (!stores) return;
    const int q = tid / 2, r = tid % 2;
    float a = 0.f;
    for (int p = 0; p < ksplit; p++) a += s_part[q * ksplit + p][r];
    float inv = 1.f;
    if (NORM) {
        float t = 0.f;
        for (int p = 0; p < ksplit; p++) t += s_part[q * ksplit + p][2];
        inv = 1.0f / sqrtf(div_by_count(t, K) + eps);
    }
    a *= inv;
    float up = 0.f;
    if (act == 2) {
        for (int p = 0; p < ksplit; p++) up += s_part[q * ksplit + p][1];
        up *= inv;
    }
    const float o = linear_act(a, up, act, bias != nullptr, b0, b1);
    Y[act == 2 ? n / 2 : n] = res ? o + rv : o;
}

extern "C" __global__ void __launch_bounds__(256) gemv_staged_m1(
    const bf16* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx,
    const float* __restrict__ norm_w, float eps, const float* __restrict__ bias, int act,
    const float* res, int ldr, float* Y, int ldy, int rows_valid, int ksplit, int rpb,
    int early) {
    (void)ldx, (void)ldr, (void)ldy;  // one row (the argument list is gemv.cu's)
    extern __shared__ __align__(16) unsigned char s_w[];
    __shared__ float s_part[STAGED_MAX_TASKS][3];  // row n0, row n0+1, Σ x² of the part
    if (norm_w)
        gemv_staged_body<true>(W, N, K, X, norm_w, eps, bias, act, res, Y, rows_valid, ksplit,
                               rpb, early, s_w, s_part);
    else
        gemv_staged_body<false>(W, N, K, X, nullptr, eps, bias, act, res, Y, rows_valid, ksplit,
                                rpb, early, s_w, s_part);
}
