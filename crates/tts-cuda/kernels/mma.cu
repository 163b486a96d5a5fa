// mma.cu — batched linear layers on tensor cores for 9..64 rows per pass (larger batches,
// prefill): y[m][n] = epilogue( sum_k xin[m][k] * W[n][k] ), one launch per layer matrix.
//
// Same contract as gemv.cu (bf16 W [N][K], f32 x [M][ldx], optional RMSNorm prologue with
// precomputed inverse RMS `inv[m]`, bias / SiLU / SwiGLU-pair / residual epilogue), plus:
// N % 16 == 0 and K % 64 == 0 (the host falls back otherwise).
//
// Grid (ceil(N / (16 R)), ceil(M / 64)), R warps per block (R = blockDim.x / 32). Warp w
// owns 16 output rows; the block shares one x tile of up to 64 rows × 64 k in shared
// memory, split into bf16 hi + lo parts (x ≈ hi + lo to ~2^-16), so the products keep
// f32-level accuracy: every k-step issues mma.m16n8k16 for hi and for lo.
// The k order inside each 32-wide chunk is permuted identically for W and x (lane group
// tig holds physical k = tig*8 .. tig*8+7), so every fragment is one 16-byte load.
// Each output is accumulated in a fixed order: a row's result does not depend on M.

#define MMA_MAXM 64
#define MMA_KC 64
#define MMA_LDS (MMA_KC + 8)  // padded smem row (bf16): spreads rows over banks

__device__ __forceinline__ void mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned pack_bf16(bf16 lo, bf16 hi) {
    return (unsigned)lo | ((unsigned)hi << 16);
}

template <int MT>
__device__ __forceinline__ void mma_linear_body(const bf16* __restrict__ W, int N, int K,
                                                const float* __restrict__ X, int ldx, int M,
                                                const float* __restrict__ norm_w,
                                                const float* __restrict__ inv,
                                                const float* __restrict__ bias, int act,
                                                const float* res, int ldr, float* Y, int ldy) {
    __shared__ __align__(16) bf16 s_hi[MMA_MAXM * MMA_LDS];
    __shared__ __align__(16) bf16 s_lo[MMA_MAXM * MMA_LDS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nthreads = blockDim.x;
    const int g = lane >> 2, tig = lane & 3;
    const int R = blockDim.x >> 5;
    const int n0 = (blockIdx.x * R + warp) * 16;
    const int m_base = blockIdx.y * MMA_MAXM;
    const int rows = min(MT * 8, M - m_base);
    const bool live = n0 < N;
    const bf16* w0 = W + (size_t)min(n0 + g, N - 1) * K;
    const bf16* w8 = W + (size_t)min(n0 + g + 8, N - 1) * K;

    float acc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;

    for (int kc = 0; kc < K; kc += MMA_KC) {
        // 1. this warp's weight fragments for the chunk (issued before the x tile work)
        uint4 a[2][2];
        if (live) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int k = kc + h * 32 + tig * 8;
                a[h][0] = __ldg((const uint4*)(w0 + k));
                a[h][1] = __ldg((const uint4*)(w8 + k));
            }
        }
        // 2. the x tile: rows m_base .. m_base + MT*8, normalised, split hi + lo
        for (int e = threadIdx.x; e < MT * 8 * (MMA_KC / 4); e += nthreads) {
            int m = e / (MMA_KC / 4), k4 = (e % (MMA_KC / 4)) * 4;
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            if (m < rows) {
                float4 x4 = *(const float4*)(X + (size_t)(m_base + m) * ldx + kc + k4);
                v[0] = x4.x; v[1] = x4.y; v[2] = x4.z; v[3] = x4.w;
                if (norm_w) {
                    float iv = inv[m_base + m];
#pragma unroll
                    for (int i = 0; i < 4; i++) v[i] = norm_w[kc + k4 + i] * (v[i] * iv);
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                bf16 hi = f2bf(v[i]);
                s_hi[m * MMA_LDS + k4 + i] = hi;
                s_lo[m * MMA_LDS + k4 + i] = f2bf(v[i] - bf2f(hi));
            }
        }
        __syncthreads();
        // 3. tensor-core products: 2 sub-chunks of 32 k, each 2 k-steps, for hi and lo
        if (live) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                unsigned r0[4] = {a[h][0].x, a[h][0].y, a[h][0].z, a[h][0].w};
                unsigned r8[4] = {a[h][1].x, a[h][1].y, a[h][1].z, a[h][1].w};
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    int off = (t * 8 + g) * MMA_LDS + h * 32 + tig * 8;
                    uint4 bh = *(const uint4*)(s_hi + off);
                    uint4 bl = *(const uint4*)(s_lo + off);
                    // step 0: physical j 0..3, step 1: j 4..7
                    mma_bf16(acc[t], r0[0], r8[0], r0[1], r8[1], bh.x, bh.y);
                    mma_bf16(acc[t], r0[2], r8[2], r0[3], r8[3], bh.z, bh.w);
                    mma_bf16(acc[t], r0[0], r8[0], r0[1], r8[1], bl.x, bl.y);
                    mma_bf16(acc[t], r0[2], r8[2], r0[3], r8[3], bl.z, bl.w);
                }
            }
        }
        __syncthreads();
    }
    if (!live) return;
    // 4. epilogue: lane holds D[n0+g][m], D[n0+g][m+1], D[n0+g+8][m], D[n0+g+8][m+1],
    //    m = m_base + t*8 + tig*2
#pragma unroll
    for (int t = 0; t < MT; t++) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int n = n0 + g + (q >= 2 ? 8 : 0);
            int m = m_base + t * 8 + tig * 2 + (q & 1);
            float v = acc[t][q];
            if (act == 2) {
                // (gate, up) rows are (n, n+1): lane g+1 (lane + 4) holds the up row
                float up = __shfl_down_sync(0xffffffffu, v, 4);
                if ((g & 1) || m >= M || n >= N) continue;
                float gt = v;
                if (bias) { gt += bias[n]; up += bias[n + 1]; }
                float o = silu(gt) * up;
                int col = n / 2;
                if (res) o += res[(size_t)m * ldr + col];
                Y[(size_t)m * ldy + col] = o;
            } else {
                if (m >= M || n >= N) continue;
                if (bias) v += bias[n];
                if (act == 1) v = silu(v);
                if (res) v += res[(size_t)m * ldr + n];
                Y[(size_t)m * ldy + n] = v;
            }
        }
    }
}

#define MMA_ENTRY(MT)                                                                           \
    extern "C" __global__ void __launch_bounds__(256) mma_linear_t##MT(                        \
        const bf16* __restrict__ W, int N, int K, const float* __restrict__ X, int ldx, int M,  \
        const float* __restrict__ norm_w, const float* __restrict__ inv,                        \
        const float* __restrict__ bias, int act, const float* res, int ldr, float* Y,           \
        int ldy) {                                                                               \
        mma_linear_body<MT>(W, N, K, X, ldx, M, norm_w, inv, bias, act, res, ldr, Y, ldy);      \
    }

MMA_ENTRY(2)
MMA_ENTRY(4)
MMA_ENTRY(8)

// inv[r] = 1 / sqrt(mean(x[r]²) + eps) for rows r < rows (one block per row).
extern "C" __global__ void rms_inv_rows(const float* __restrict__ x, int ldx, int K, float eps,
                                        float* inv, int rows) {
    int r = blockIdx.x;
    if (r >= rows) return;
    __shared__ float scratch[33];
    const float* xr = x + (size_t)r * ldx;
    float s = 0.f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) s += xr[k] * xr[k];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) inv[r] = 1.0f / sqrtf(s / (float)K + eps);
}
