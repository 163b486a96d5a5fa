// probe.cu — what one dependent step of a batch-1 stage costs on this GPU with no weights
// to read (`qwen3-tts bench-stages --chain-costs N`): the floor under a stage that is a
// chain of short launches, and what a grid barrier costs in its place.
//
// chain_link: one launch of a graph-captured chain of N PDL launches (one 256-thread block
// per multiprocessor, as gemv_staged.cu). Every block waits for the launch before it,
// reads the value that launch left in v[i] through L2, sums it over its warp as a GEMV's
// reduction does, and block 0 leaves v[i] + 1 in v[i + 1]: a dependent L2 round trip, a
// reduction and a store per link, nothing else.
// chain_phases: the same N links in one launch, its blocks meeting at persistent.cu's grid
// barrier after each link (launched without PDL, all blocks resident, as the persistent
// kernels are).
// Either way v[N] ends as v[0] + N, which the host checks.

extern "C" __global__ void __launch_bounds__(256) chain_link(float* v, int i) {
    pdl_wait();
    pdl_trigger();
    const float x = warp_sum(__ldcg(v + i)) * (1.0f / 32.0f);
    if (blockIdx.x == 0 && threadIdx.x == 0) v[i + 1] = x + 1.0f;
}

// chain_row: chain_link with a one-row GEMV's data pattern and still no weights: every warp
// of every block reads the whole row of K values the launch before left in row i (through
// L2), the block sums its warps through shared memory, and each block writes its share
// (K / gridDim.x values) of row i + 1. All values of a row are equal, so row i + 1 holds
// row i's value + 1 and row N ends as row 0 + N. K must be a multiple of 128 and of the
// block count.
extern "C" __global__ void __launch_bounds__(256) chain_row(float* v, int K, int i) {
    __shared__ float part[8];
    pdl_wait();
    pdl_trigger();
    const float* x = v + (size_t)i * K;
    float s = 0.f;
    for (int k = (threadIdx.x & 31) * 4; k < K; k += 128) {
        const float4 a = __ldcg((const float4*)(x + k));
        s += (a.x + a.y) + (a.z + a.w);
    }
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    const int per = K / (int)gridDim.x;
    if ((int)threadIdx.x < per) {
        float t = 0.f;
        for (int w = 0; w < 8; w++) t += part[w];
        v[(size_t)(i + 1) * K + blockIdx.x * per + threadIdx.x] = t * (1.0f / (8.0f * (float)K)) + 1.0f;
    }
}

extern "C" __global__ void __launch_bounds__(256) chain_phases(float* v, int n,
                                                               unsigned int* state) {
    GridBarrier bar;
    bar.init(state, nullptr, 0);
    for (int i = 0; i < n; i++) {
        const float x = warp_sum(__ldcg(v + i)) * (1.0f / 32.0f);
        if (blockIdx.x == 0 && threadIdx.x == 0) v[i + 1] = x + 1.0f;
        bar.sync();
    }
    bar.finish();
}
