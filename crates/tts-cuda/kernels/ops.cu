// ops.cu — row-wise helpers of the batched linear paths (linear.rs) and final norms.
//
// Tensor cores multiply bf16 by bf16, so linear layers over more than a GEMV's rows run as
//   to_bf16_rows (optionally RMSNorm-ing each row)  ->  mma.cu (epilogue fused), or
//   to_bf16_rows  ->  cublasGemmEx (f32 out)  ->  linear_epilogue, which may also write the
//   next layer's split rows (then that layer has no to_bf16_rows launch).
// The epilogue has the same semantics as gemv.cu's.

// One block per row: split_row of x[r] into out.
extern "C" __global__ void to_bf16_rows(const float* __restrict__ x, int ldx, int K,
                                        const float* __restrict__ g, float eps, bf16* out,
                                        int ldo, int rows) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    split_row(x + (size_t)r * ldx, K, g, eps, out, ldo, rows, r);
}

// acc: f32 [2·rows][N] (GEMM output of the hi rows, then the lo rows). Writes y as
// gemv.cu's epilogue would (act 2 halves N). With `xb`, the linear layer that reads y
// next goes through split rows too: the block then also writes them (split_row of its y
// row with that layer's norm gain `next_g`, or none), which saves that layer's
// to_bf16_rows launch.
extern "C" __global__ void linear_epilogue(const float* __restrict__ acc, int N,
                                           const float* __restrict__ bias, int act,
                                           const float* res, int ldr, float* y, int ldy,
                                           int rows, const float* __restrict__ next_g,
                                           float eps, bf16* xb, int ldxb) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* a = acc + (size_t)r * N;
    const float* b = acc + (size_t)(rows + r) * N;
    if (act == 2) {
        for (int i = threadIdx.x; i < N / 2; i += blockDim.x) {
            float g = a[2 * i] + b[2 * i], u = a[2 * i + 1] + b[2 * i + 1];
            if (bias) { g += bias[2 * i]; u += bias[2 * i + 1]; }
            float v = silu(g) * u;
            if (res) v += res[(size_t)r * ldr + i];
            y[(size_t)r * ldy + i] = v;
        }
    } else {
        for (int n = threadIdx.x; n < N; n += blockDim.x) {
            float v = a[n] + b[n];
            if (bias) v += bias[n];
            if (act == 1) v = silu(v);
            if (res) v += res[(size_t)r * ldr + n];
            y[(size_t)r * ldy + n] = v;
        }
    }
    if (!xb) return;
    __syncthreads();  // the row's outputs, written by every thread of the block
    split_row(y + (size_t)r * ldy, act == 2 ? N / 2 : N, next_g, eps, xb, ldxb, rows, r);
}

// out[r] = g ⊙ x[r] / sqrt(mean(x[r]²) + eps), f32 (one block per row).
extern "C" __global__ void rms_norm_rows(const float* __restrict__ x, int ldx, int K,
                                         const float* __restrict__ g, float eps, float* out,
                                         int ldo, int rows) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    __shared__ float scratch[33];
    const float* xr = x + (size_t)r * ldx;
    float inv = row_inv_rms(xr, K, eps, scratch);
    for (int k = threadIdx.x; k < K; k += blockDim.x) out[(size_t)r * ldo + k] = g[k] * (xr[k] * inv);
}

// t[r][n] += b[n] for rows r < rows (one block per row).
extern "C" __global__ void add_bias_rows(float* t, int N, const float* __restrict__ b, int rows) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    for (int n = threadIdx.x; n < N; n += blockDim.x) t[(size_t)r * N + n] += b[n];
}

// Copies `runs` runs of n16 16-byte pieces for two buffer pairs at once (blockIdx.z: 0 the
// first pair, 1 the second): dst + r·dst_stride <- src + r·src_stride, strides in 16-byte
// units. The talker's prefix KV cache moves a prompt head's K and V rows of every layer
// between its store and a slot's cache with one launch.
extern "C" __global__ void copy_runs2(const uint4* __restrict__ src_a, const uint4* __restrict__ src_b,
                                      uint4* dst_a, uint4* dst_b, int src_stride, int dst_stride,
                                      int n16) {
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.y;
    const uint4* s = (blockIdx.z ? src_b : src_a) + (size_t)r * src_stride;
    uint4* d = (blockIdx.z ? dst_b : dst_a) + (size_t)r * dst_stride;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += gridDim.x * blockDim.x)
        d[i] = s[i];
}
