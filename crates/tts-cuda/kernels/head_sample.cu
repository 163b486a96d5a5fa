// head_sample.cu — the end of a one-row code-predictor step in one launch: the codebook's
// head over the normed row, then the sampler,
//
//   logits = head(norm x);  code = sample(logits)   (+ the next step's input rows)
//
// where the staged path takes two dependent launches (the head's GEMV, then sample_cp).
// Block b (SAMPLE_THREADS threads, as sample_cp's one-row launch: the sampler's sums then
// run in the same order) computes logits [b·rpb, (b+1)·rpb): its head rows are copied into
// shared memory before the PDL wait, each warp takes rows w, w + 16, ... (the row normed
// as mlp_fused.cu's mlp_row_in forms it) and writes their logits. The last block to
// arrive (a counter, as common.cuh's fixed_fold_last) reads every logit through L2 and
// runs sampling.cu's sample_cp_row (the same choice, frames entry and next-step rows as
// sample_cp), then resets the counter for the next launch.
//
// Shapes (`head_sample::head_sample_plan` checks them): H a multiple of 256, at most
// 256·MLP_MAX_STEPS; V at most SAMPLE_MAXV; rpb · H bf16 of shared memory a block.

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) head_sample_cp_m1(
    const bf16* __restrict__ W, int V, int H, int rpb, const float* __restrict__ norm_w, float eps,
    const float* x, float* logits, unsigned int* arrived, const int* __restrict__ slots,
    const unsigned int* __restrict__ params, int step, int* frames,
    const float* __restrict__ folded, const bf16* __restrict__ raw, int D, float* next_x, int ldx,
    const float* __restrict__ qkv0, int Q, float* qkv, int ldq) {
    extern __shared__ __align__(16) unsigned char s_head[];
    __shared__ SampleShared sh;
    __shared__ int s_last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const int row0 = blockIdx.x * rpb, rows = min(rpb, V - row0), steps = H / 256;
    const bf16* s_w = (const bf16*)s_head;  // [rows][H]
    // 1. the block's head rows
    {
        const unsigned base = smem_addr(s_head);
        const int chunks = max(rows, 0) * H / 8;
        for (int c = tid; c < chunks; c += blockDim.x)
            cp_async16(base + c * 16, W + (size_t)row0 * H + (size_t)c * 8, 16);
        cp_async_commit();
    }
    // (the next kernel reads what this one's sampler writes: no early trigger)
    pdl_wait();
    pdl_trigger();

    // 2. the normed row in every warp, then the block's logits
    float xin[MLP_MAX_STEPS][8];
    const float inv = mlp_row_in(x, norm_w, H, eps, lane, xin);
    cp_async_wait<0>();
    __syncthreads();
    for (int i = warp; i < rows; i += nw) {
        const float acc = staged_row_partial(s_w + (size_t)i * H, xin, lane, steps);
        const float logit = warp_sum(acc) * inv;
        if (lane == 0) logits[row0 + i] = logit;
    }

    // 3. the last block in samples from every block's logits
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(arrived, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    sample_cp_row<true>(0, logits, V, 1, slots, params, step, frames, folded, raw, D, next_x, ldx,
                        qkv0, Q, qkv, ldq, sh);
    if (tid == 0) *arrived = 0u;
}
