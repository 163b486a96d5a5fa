// codec_conv.cu — a causal convolution (or polyphase transposed convolution) of the codec as
// an implicit GEMM on f16 tensor cores, replacing codec_im2col_h + the cuBLAS f16 GEMM:
//   C[s][n] = beta·C[s][n] + Σ_{j,i} W[n][j·cin + i] · h(act(x[s - (taps-1-j)·dil][i]))
//             + W[n][taps·cin]
// with h = f16 rounding (saturated, as codec_im2col_h), W the f16 weight arena (rows ldw
// wide: taps·cin weights, the bias, zeros) and f32 accumulation: the same operands as the
// two-kernel path, summed in another order. Steps before a row's first step come from the
// slot's history (codec_src), activated on the fly.
//
// Two launches:
//  1. codec_act_h writes the activated input once per value (the im2col computed it once
//     per tap) as f16 rows of width cin in an extended layout: row r's ctx history steps
//     (from the slot's history copy `parity`) right before its new steps, so global step s
//     of row r sits at xe row s + (r+1)·ctx and its history at first_r·rate + r·ctx + p.
//     Its blocks past those values update the layer's history, as codec_im2col's do.
//  2. codec_conv_mma{64,32}: block tile 128 steps × BN outputs (warps of 32 × 32), K in
//     chunks of 32 inside one tap (cin % 32 == 0): tap j of step s is xe row
//     s + (r+1)·ctx - (taps-1-j)·dil, with no branch for the history. Chunks stream into a
//     CONV_STAGES-deep ring of shared buffers with cp.async (zero-filled past the pass and
//     for padding frames) while the warps multiply (ldmatrix + mma.m16n8k16). The
//     codec_act_pad that follows a residual unit's conv (SnakeBeta on its output, the ones
//     column for the next GEMM's bias) can run in its epilogue (`post`).
//     codec_conv_win{96,64,32} take the layers whose frames are whole tiles: the block's
//     input window in shared memory once, every tap read from it (see codec_conv_win_body).
// Needs cin % 32 == 0, ldw % 8 == 0 and 16-byte aligned W rows, x with ldx % 4 == 0 (the
// host checks and otherwise keeps the im2col path).

#define CONV_BK 32
// halves per shared row: 80 bytes, so the 8 rows of an ldmatrix hit distinct banks
#define CONV_LDS 40
#define CONV_BM 128
#define CONV_STAGES 4

// Blocks of 256 threads: eight channels of new input each (two float4 loads, one 16-byte
// store), then eight of history each, then nrows·ctx history-update blocks. (Four per
// thread with 64-bit index division measured ~20-29 µs for the 24 kHz layers at 32 rows.)
extern "C" __global__ void codec_act_h(const float* __restrict__ x, int ldx, int cin, int taps,
                                       int dil, int rate, int act,
                                       const float* __restrict__ alpha,
                                       const float* __restrict__ inv_beta, float* state,
                                       int slot_stride, int hist_off,
                                       const int* __restrict__ meta_p, int R, int steps,
                                       int nrows, unsigned short* __restrict__ xe) {
    CodecMeta meta{meta_p, R};
    const int ctx = (taps - 1) * dil, octs = cin / 8;
    const int n_new = steps * octs, n_hist = nrows * ctx * octs;
    const int b_new = (n_new + 255) / 256, b_hist = (n_hist + 255) / 256;
    const int b = blockIdx.x;
    if (b >= b_new + b_hist) {
        codec_hist_update(b - b_new - b_hist, x, ldx, cin, ctx, rate, state, slot_stride,
                          hist_off, meta, nrows);
        return;
    }
    float v[8];
    size_t dst;
    int i;
    if (b < b_new) {
        const int e = b * 256 + threadIdx.x;
        if (e >= n_new) return;
        const int s = e / octs;
        i = (e - s * octs) * 8;
        int row = meta.frame_row(s / rate);
        if (row < 0) return;
        const float4* xp = reinterpret_cast<const float4*>(x + (size_t)s * ldx + i);
        const float4 f = xp[0], g = xp[1];
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
        v[4] = g.x, v[5] = g.y, v[6] = g.z, v[7] = g.w;
        dst = ((size_t)s + (size_t)(row + 1) * ctx) * cin + i;
    } else {
        const int e = (b - b_new) * 256 + threadIdx.x;
        if (e >= n_hist) return;
        const int rp = e / octs;
        i = (e - rp * octs) * 8;
        int row = rp / ctx, p = rp - row * ctx;
        int slot = meta.slot(row);
        if (slot < 0) return;
        const float* h = state + (size_t)slot * slot_stride + hist_off +
                         ((size_t)meta.parity(row) * ctx + p) * cin + i;
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = h[u];
        dst = ((size_t)meta.first(row) * rate + (size_t)row * ctx + p) * cin + i;
    }
    unsigned int o[4];
#pragma unroll
    for (int u = 0; u < 4; u++)
        o[u] = f2h_sat(codec_act(v[2 * u], act, alpha, inv_beta, i + 2 * u)) |
               ((unsigned int)f2h_sat(codec_act(v[2 * u + 1], act, alpha, inv_beta, i + 2 * u + 1)) << 16);
    *reinterpret_cast<uint4*>(xe + dst) = make_uint4(o[0], o[1], o[2], o[3]);
}

__device__ __forceinline__ unsigned conv_smem(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned)a;
}

// 16 bytes global -> shared, zero-filled when `bytes` is 0
__device__ __forceinline__ void conv_cp16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void conv_ldsm4(unsigned addr, unsigned* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void conv_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// With post >= 0 (codec_act_pad fused into the epilogue), by the blocks of a layer's last
// output tile: the ones/zero columns n_out..ldc of the tile's steps (the next GEMM's bias).
template <int THREADS>
__device__ __forceinline__ void conv_pad_columns(int s0, bool last_tile, int steps, int n_out,
                                                 float* __restrict__ C, int ldc, int post) {
    if (post < 0 || !last_tile) return;
    const int pads = ldc - n_out;
    for (int e = threadIdx.x; e < CONV_BM * pads; e += THREADS) {
        const int so = s0 + e / pads, col = n_out + e % pads;
        if (so < steps) C[(size_t)so * ldc + col] = col == n_out ? 1.f : 0.f;
    }
}

// The tile's outputs: acc[mi][ni] of warp (wm, wnb) = warp & 3, warp >> 2 holds steps
// s0 + 32 wm + 16 mi + g (+ 8) and outputs n0 + 32 wnb + 8 ni + 2t (+ 1). The bias is W's
// column K. post >= 0: what codec_act_pad(post) would do next, fused: the activation applied
// to each stored output, and the ones/zero columns n_out..ldc written (by the blocks of the
// last output tile).
template <int BN>
__device__ __forceinline__ void conv_epilogue(const float (&acc)[2][4][4], int s0, int n0,
                                              int steps, int K,
                                              const unsigned short* __restrict__ W, int ldw,
                                              int n_out, float* __restrict__ C, int ldc,
                                              float beta, int post,
                                              const float* __restrict__ alpha2,
                                              const float* __restrict__ inv_beta2) {
    constexpr int THREADS = BN * 4;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 3, wnb = warp >> 2;
    const int g = lane >> 2, t = lane & 3;
    conv_pad_columns<THREADS>(s0, n0 + BN >= n_out, steps, n_out, C, ldc, post);
    // the thread's 8 outputs' bias and activation parameters, all loaded before any is used
    // (the stores below may alias them as far as the compiler knows)
    float bias[8], a2[8], ib2[8];
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const int n = n0 + wnb * 32 + (q >> 1) * 8 + 2 * t + (q & 1);
        const bool ok = n < n_out;
        bias[q] = ok ? half_bits_to_f32(W[(size_t)n * ldw + K]) : 0.f;
        a2[q] = ok && post == 1 ? alpha2[n] : 0.f;
        ib2[q] = ok && post == 1 ? inv_beta2[n] : 0.f;
    }
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const int ni = q >> 1, e = q & 1;
        const int n = n0 + wnb * 32 + ni * 8 + 2 * t + e;
        if (n >= n_out) continue;
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int so = s0 + wm * 32 + mi * 16 + g + h * 8;
                if (so >= steps) continue;
                float v = acc[mi][ni][h * 2 + e] + bias[q];
                float* o = C + (size_t)so * ldc + n;
                v = beta != 0.f ? fmaf(beta, *o, v) : v;
                // codec_act(v, post, alpha2, inv_beta2, n) with its parameters in registers
                if (post == 1) {
                    const float sn = snake_sin(v * a2[q]);
                    v = v + ib2[q] * sn * sn;
                } else if (post > 1) {
                    v = codec_act(v, post, alpha2, inv_beta2, n);
                }
                *o = v;
            }
        }
    }
}

// conv_epilogue for the window kernels, with the tile's stores coalesced: the warps leave
// acc + bias in shared memory (`stage`: 64 · (BN + 4) floats nothing else reads now), 64
// steps at a time, and the block writes whole 16-byte runs of each step's outputs (the
// warps' own stores touched 8 rows of 32 bytes, half used, per instruction: Nsight put
// them at about half of the window kernel's time). The same operations on each output in
// the same order as conv_epilogue (bias, then beta · C, then the activation): the same
// bits. Starts and ends with a block barrier.
template <int BN>
__device__ __forceinline__ void conv_epilogue_staged(
    const float (&acc)[2][4][4], int s0, int n0, int steps, int K,
    const unsigned short* __restrict__ W, int ldw, int n_out, float* __restrict__ C, int ldc,
    float beta, int post, const float* __restrict__ alpha2, const float* __restrict__ inv_beta2,
    float* stage) {
    constexpr int THREADS = BN * 4, SLD = BN + 4, QUADS = BN / 4;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 3, wnb = warp >> 2;
    const int g = lane >> 2, t = lane & 3;
    conv_pad_columns<THREADS>(s0, n0 + BN >= n_out, steps, n_out, C, ldc, post);
    float bias[8];
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const int n = n0 + wnb * 32 + (q >> 1) * 8 + 2 * t + (q & 1);
        bias[q] = n < n_out ? half_bits_to_f32(W[(size_t)n * ldw + K]) : 0.f;
    }
    const bool vec = (ldc & 3) == 0 && (((size_t)C) & 15) == 0;
    // THREADS is a multiple of QUADS: a thread's 4 columns are the same on every pass of
    // the copy below, so their activation parameters load once, here
    static_assert(THREADS % QUADS == 0, "a thread's columns are fixed");
    const int qd = tid % QUADS, n = n0 + 4 * qd;
    float a4[4] = {0.f, 0.f, 0.f, 0.f}, ib4[4] = {0.f, 0.f, 0.f, 0.f};
    if (post == 1) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int nu = min(n + u, n_out - 1);
            a4[u] = alpha2[nu];
            ib4[u] = inv_beta2[nu];
        }
    }
    for (int half = 0; half < 2; half++) {
        __syncthreads();
        if ((wm >> 1) == half) {
#pragma unroll
            for (int q = 0; q < 8; q++) {
                const int ni = q >> 1, e = q & 1, col = wnb * 32 + ni * 8 + 2 * t + e;
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        stage[((wm & 1) * 32 + mi * 16 + g + h * 8) * SLD + col] =
                            acc[mi][ni][h * 2 + e] + bias[q];
            }
        }
        __syncthreads();
        for (int r = tid / QUADS; r < 64; r += THREADS / QUADS) {
            const int so = s0 + half * 64 + r;
            if (so >= steps || n >= n_out) continue;
            const float4 sv = *reinterpret_cast<const float4*>(&stage[r * SLD + 4 * qd]);
            float v[4] = {sv.x, sv.y, sv.z, sv.w};
            float* o = C + (size_t)so * ldc + n;
            const bool whole = vec && n + 4 <= n_out;
            if (beta != 0.f) {
                if (whole) {
                    const float4 c4 = *reinterpret_cast<const float4*>(o);
                    v[0] = fmaf(beta, c4.x, v[0]);
                    v[1] = fmaf(beta, c4.y, v[1]);
                    v[2] = fmaf(beta, c4.z, v[2]);
                    v[3] = fmaf(beta, c4.w, v[3]);
                } else {
                    for (int u = 0; u < 4 && n + u < n_out; u++) v[u] = fmaf(beta, o[u], v[u]);
                }
            }
            if (post == 1) {
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const float sn = snake_sin(v[u] * a4[u]);
                    v[u] = v[u] + ib4[u] * sn * sn;
                }
            } else if (post > 1) {
#pragma unroll
                for (int u = 0; u < 4; u++) v[u] = codec_act(v[u], post, alpha2, inv_beta2, min(n + u, n_out - 1));
            }
            if (whole) {
                *reinterpret_cast<float4*>(o) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
                for (int u = 0; u < 4 && n + u < n_out; u++) o[u] = v[u];
            }
        }
    }
    __syncthreads();
}

// The warp's products of one k16 step: its 2 x 4 tiles of m16n8 (A fragments a[mi], B
// fragments of two n16 halves b[np], as conv_ldsm4 loads them).
__device__ __forceinline__ void conv_warp_mma(float (&acc)[2][4][4], const unsigned (&a)[2][4],
                                              const unsigned (&b)[2][4]) {
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
            conv_mma(acc[mi][ni], a[mi], b[ni >> 1][(ni & 1) * 2], b[ni >> 1][(ni & 1) * 2 + 1]);
}

// The warps' products of one 32-wide K chunk: A rows at a_addr (+16 rows per mi, row stride
// a_ld halves), B rows at b_addr (+16 per np, stride CONV_LDS), both as ldmatrix addresses.
__device__ __forceinline__ void conv_chunk_mma(float (&acc)[2][4][4], unsigned a_addr, int a_ld,
                                               unsigned b_addr) {
#pragma unroll
    for (int kk = 0; kk < CONV_BK; kk += 16) {
        unsigned a[2][4], b[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) conv_ldsm4(a_addr + 2 * (mi * 16 * a_ld + kk), a[mi]);
#pragma unroll
        for (int np = 0; np < 2; np++) conv_ldsm4(b_addr + 2 * (np * 16 * CONV_LDS + kk), b[np]);
        conv_warp_mma(acc, a, b);
    }
}

// The tile's accumulators, zeroed.
__device__ __forceinline__ void conv_zero(float (&acc)[2][4][4]) {
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
            acc[mi][ni][0] = acc[mi][ni][1] = acc[mi][ni][2] = acc[mi][ni][3] = 0.f;
}

// The K loop of a tile: chunk kc's operands are copied into ring stage kc % STAGES by
// issue(kc) (cp.async; one commit group per chunk, the window variant's window in the
// first), STAGES - 1 chunks ahead of mma(kc), which multiplies that stage.
template <int STAGES, typename Issue, typename Mma>
__device__ __forceinline__ void conv_pipeline(int chunks, Issue issue, Mma mma) {
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < chunks) issue(st);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int kc = 0; kc < chunks; kc++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
        __syncthreads();
        if (kc + STAGES - 1 < chunks) issue(kc + STAGES - 1);
        asm volatile("cp.async.commit_group;" ::: "memory");
        mma(kc);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
}

// Dynamic shared memory: CONV_STAGES * (CONV_BM + BN) * CONV_LDS halves.
template <int BN>
__device__ __forceinline__ void codec_conv_body(
    const unsigned short* __restrict__ xe, int cin, int taps, int dil, int rate,
    const int* __restrict__ meta_p, int R, int steps, const unsigned short* __restrict__ W,
    int ldw, int n_out, float* __restrict__ C, int ldc, float beta, int post,
    const float* __restrict__ alpha2, const float* __restrict__ inv_beta2) {
    constexpr int THREADS = BN * 4;               // 64 -> 8 warps (4 x 2), 32 -> 4 (4 x 1)
    constexpr int A_PER = CONV_BM * 4 / THREADS;  // 16-byte pieces of the steps per thread
    constexpr int STAGE = (CONV_BM + BN) * CONV_LDS;
    extern __shared__ __align__(16) unsigned short conv_sm[];
    CodecMeta meta{meta_p, R};
    const int ctx = (taps - 1) * dil;
    const int tiles_n = (n_out + BN - 1) / BN;
    const int n0 = (blockIdx.x % tiles_n) * BN;
    const int s0 = (blockIdx.x / tiles_n) * CONV_BM;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int chunks = taps * cin / CONV_BK;

    // this thread's pieces: step rows tid/4 + q·THREADS/4, columns (tid%4)·8 .. +7 of each
    // chunk; the xe row of each step (-1: past the pass or a padding frame)
    const int part = (tid & 3) * 8;
    long long arow[A_PER];
#pragma unroll
    for (int q = 0; q < A_PER; q++) {
        int s = s0 + (tid >> 2) + q * (THREADS / 4);
        arow[q] = -1;
        if (s < steps) {
            int row = meta.frame_row(s / rate);
            if (row >= 0) arow[q] = (long long)s + (long long)(row + 1) * ctx;
        }
    }
    const int wn = tid >> 2;
    const bool wvalid = n0 + wn < n_out;
    const unsigned short* wrow = W + (size_t)(wvalid ? n0 + wn : 0) * ldw + part;
    const unsigned sm0 = conv_smem(conv_sm);

    auto issue = [&](int kc) {
        const int k = kc * CONV_BK;
        const int j = k / cin;
        const int c = k - j * cin + part;
        const long long back = (long long)(taps - 1 - j) * dil;
        const unsigned st = sm0 + 2 * (kc % CONV_STAGES) * STAGE;
#pragma unroll
        for (int q = 0; q < A_PER; q++) {
            const bool ok = arow[q] >= 0;
            const unsigned short* src = ok ? xe + (size_t)(arow[q] - back) * cin + c : xe;
            conv_cp16(st + 2 * (((tid >> 2) + q * (THREADS / 4)) * CONV_LDS + part), src,
                      ok ? 16 : 0);
        }
        conv_cp16(st + 2 * ((CONV_BM + wn) * CONV_LDS + part), wvalid ? wrow + k : W,
                  wvalid ? 16 : 0);
    };

    // ldmatrix row addresses (in halves inside one stage). A (steps × k): matrices
    // (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = fragments a0..a3.
    // B (outputs × k): (n 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) = b0, b1 of
    // two n8 tiles.
    const int wm = warp & 3, wnb = warp >> 2;
    const int lrow = lane & 7, lmat = lane >> 3;
    const int a_off = (wm * 32 + (lmat & 1) * 8 + lrow) * CONV_LDS + (lmat >> 1) * 8;
    const int b_off = (CONV_BM + wnb * 32 + (lmat >> 1) * 8 + lrow) * CONV_LDS + (lmat & 1) * 8;
    float acc[2][4][4];
    conv_zero(acc);
    conv_pipeline<CONV_STAGES>(chunks, issue, [&](int kc) {
        const unsigned st = sm0 + 2 * (kc % CONV_STAGES) * STAGE;
        conv_chunk_mma(acc, st + 2 * a_off, CONV_LDS, st + 2 * b_off);
    });

    conv_epilogue<BN>(acc, s0, n0, steps, taps * cin, W, ldw, n_out, C, ldc, beta, post,
                      alpha2, inv_beta2);
}

// The window of the tile at step s0 into shared memory at `buf` (cp.async, by the block's
// THREADS threads): row w is step s0 - ctx + w of the tile's row, at xe row
// s0 + row·ctx + w (each row's history sits right before its steps), rows of cin halves
// at stride wld; zeros past the pass and for a padding frame.
template <int THREADS>
__device__ __forceinline__ void conv_fill_window(unsigned buf, const unsigned short* __restrict__ xe,
                                                 int cin, int ctx, int wld, int s0, int rate,
                                                 int steps, const CodecMeta& meta) {
    const int row = meta.frame_row(s0 / rate);
    const long long base = row >= 0 ? (long long)s0 + (long long)row * ctx : -1;
    const int pieces = cin / 8, wrows = CONV_BM + ctx;
    for (int e = threadIdx.x; e < wrows * pieces; e += THREADS) {
        const int w = e / pieces, p = e - w * pieces;
        const bool ok = base >= 0 && s0 - ctx + w < steps;
        conv_cp16(buf + 2 * (w * wld + p * 8), ok ? xe + (size_t)(base + w) * cin + p * 8 : xe,
                  ok ? 16 : 0);
    }
}

// The window variant, for layers whose frames are whole tiles (rate % CONV_BM == 0, so a
// block's steps lie in one frame and one row): the block copies the activated input its
// steps read, rows s0 - ctx .. s0 + 127 (ctx + 128 rows of cin, row stride cin + 8 halves
// so that 8 consecutive rows hit distinct banks), into shared memory once; tap j of the
// tile is then the window from row j·dil, and only the weight chunks stream through the
// ring. The same products as codec_conv_body (each a step's f16 input times an f16
// weight), summed in the same order: K in steps of 16, tap-major. codec_conv_body loads
// each input value once per tap and per output tile (21 times for 7 taps and 96 outputs in
// tiles of 32).
// The ring holds CONV_WIN_STAGES chunks of CONV_WIN_BK weights per output (one barrier per
// 64 of K; a chunk may span two taps), each output's 128-byte row with its 16-byte pieces
// at piece ^ (output & 7), so the 8 rows of an ldmatrix hit distinct banks with no padding
// (two 192-channel blocks then fit a multiprocessor). The tap and channel of each k16 step
// advance by addition (a division per chunk was a fifth of the kernel's issue slots).
// Dynamic shared memory: (CONV_BM + ctx) · (cin + 8) + CONV_WIN_STAGES · BN · CONV_WIN_BK halves.
#define CONV_WIN_BK 64
#define CONV_WIN_STAGES 3
template <int BN>
__device__ __forceinline__ void codec_conv_win_body(
    const unsigned short* __restrict__ xe, int cin, int taps, int dil, int rate,
    const int* __restrict__ meta_p, int R, int steps, const unsigned short* __restrict__ W,
    int ldw, int n_out, float* __restrict__ C, int ldc, float beta, int post,
    const float* __restrict__ alpha2, const float* __restrict__ inv_beta2) {
    constexpr int THREADS = BN * 4;
    constexpr int STAGE = BN * CONV_WIN_BK;  // halves per ring stage
    extern __shared__ __align__(16) unsigned short conv_sm[];
    CodecMeta meta{meta_p, R};
    const int ctx = (taps - 1) * dil, wld = cin + 8, wrows = CONV_BM + ctx;
    const int tiles_n = (n_out + BN - 1) / BN;
    const int n0 = (blockIdx.x % tiles_n) * BN;
    const int s0 = (blockIdx.x / tiles_n) * CONV_BM;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int K = taps * cin;
    const int chunks = (K + CONV_WIN_BK - 1) / CONV_WIN_BK;
    const unsigned win = conv_smem(conv_sm);
    const unsigned ring = win + 2 * wrows * wld;

    conv_fill_window<THREADS>(win, xe, cin, ctx, wld, s0, rate, steps, meta);
    // weights: thread tid copies pieces 2(tid & 3) and 2(tid & 3) + 1 of output wn's chunk
    const int wn = tid >> 2, q0 = (tid & 3) * 2;
    const bool wvalid = n0 + wn < n_out;
    const unsigned short* wrow = W + (size_t)(wvalid ? n0 + wn : 0) * ldw + q0 * 8;
    const unsigned wdst = ring + 2 * wn * CONV_WIN_BK;
    auto issue = [&](int kc) {
        const unsigned st = wdst + 2 * (kc % CONV_WIN_STAGES) * STAGE;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int k = kc * CONV_WIN_BK + (q0 + u) * 8;
            const bool ok = wvalid && k < K;
            conv_cp16(st + 16 * ((q0 + u) ^ (wn & 7)), ok ? wrow + kc * CONV_WIN_BK + u * 8 : W,
                      ok ? 16 : 0);
        }
    };

    const int wm = warp & 3, wnb = warp >> 2;
    const int lrow = lane & 7, lmat = lane >> 3;
    const int a_off = (wm * 32 + (lmat & 1) * 8 + lrow) * wld + (lmat >> 1) * 8;
    // B rows (outputs) of this lane's ldmatrix for the two n16 halves of the warp's 32
    const int b_row = wnb * 32 + (lmat >> 1) * 8 + lrow;
    const unsigned b_base = ring + 2 * b_row * CONV_WIN_BK;
    float acc[2][4][4];
    conv_zero(acc);
    int j = 0, c = 0;  // tap and channel of the next k16 step
    // the window travels in the first chunk's commit group
    conv_pipeline<CONV_WIN_STAGES>(chunks, issue, [&](int kc) {
        const unsigned st = b_base + 2 * (kc % CONV_WIN_STAGES) * STAGE;
#pragma unroll
        for (int s = 0; s < CONV_WIN_BK / 16; s++) {
            if (kc * CONV_WIN_BK + s * 16 >= K) break;
            unsigned a[2][4], b[2][4];
            const unsigned a_addr = win + 2 * (a_off + j * dil * wld + c);
#pragma unroll
            for (int mi = 0; mi < 2; mi++) conv_ldsm4(a_addr + 2 * mi * 16 * wld, a[mi]);
            const unsigned piece = 16 * ((2 * s + (lmat & 1)) ^ lrow);
#pragma unroll
            for (int np = 0; np < 2; np++)
                conv_ldsm4(st + 2 * np * 16 * CONV_WIN_BK + piece, b[np]);
            conv_warp_mma(acc, a, b);
            c += 16;
            if (c == cin) {
                c = 0;
                j++;
            }
        }
    });
    conv_epilogue_staged<BN>(acc, s0, n0, steps, K, W, ldw, n_out, C, ldc, beta, post, alpha2,
                             inv_beta2, reinterpret_cast<float*>(conv_sm));
}

// The window kernel with the weights resident (codec_conv_win96r: layers of 96 outputs,
// whose K = taps·cin weights per output fit shared memory beside two windows): one block
// per multiprocessor copies all the weights once (rows of K + 8 halves), then takes tiles
// blockIdx.x, + gridDim.x, ...; the next tile's window loads while this one multiplies,
// and the K loop reads only shared memory, with no barrier, each k16 step's fragments
// loaded one step ahead. Per tile the same products in the same order as
// codec_conv_win_body (and so codec_conv_body): the same bits.
// Dynamic shared memory: 96 · (K + 8) + 2 · (CONV_BM + ctx) · (cin + 8) halves.
__device__ __forceinline__ void conv_win_tile_mma(float (&acc)[2][4][4], unsigned a0, int a_ld,
                                                  unsigned b0, int b_ld, int K, int cin,
                                                  int dil) {
    unsigned a[2][2][4], b[2][2][4];
    auto load = [&](int buf, int j, int c, int k) {
        const unsigned aa = a0 + 2 * (j * dil * a_ld + c);
#pragma unroll
        for (int mi = 0; mi < 2; mi++) conv_ldsm4(aa + 2 * mi * 16 * a_ld, a[buf][mi]);
#pragma unroll
        for (int np = 0; np < 2; np++) conv_ldsm4(b0 + 2 * (np * 16 * b_ld + k), b[buf][np]);
    };
    auto mma = [&](int buf) { conv_warp_mma(acc, a[buf], b[buf]); };
    // (j, c): tap and channel of step k; K is a multiple of 32, so steps come in pairs
    int j = 0, c = 0;
    load(0, 0, 0, 0);
    for (int k = 0; k < K; k += 32) {
        c += 16;
        if (c == cin) c = 0, j++;
        load(1, j, c, k + 16);
        mma(0);
        c += 16;
        if (c == cin) c = 0, j++;
        if (k + 32 < K) load(0, j, c, k + 32);
        mma(1);
    }
}

extern "C" __global__ void __launch_bounds__(384, 1) codec_conv_win96r(
    const unsigned short* __restrict__ xe, int cin, int taps, int dil, int rate,
    const int* __restrict__ meta_p, int R, int steps, const unsigned short* __restrict__ W,
    int ldw, int n_out, float* __restrict__ C, int ldc, float beta, int post,
    const float* __restrict__ alpha2, const float* __restrict__ inv_beta2) {
    constexpr int BN = 96, THREADS = BN * 4;
    extern __shared__ __align__(16) unsigned short conv_sm[];
    CodecMeta meta{meta_p, R};
    const int ctx = (taps - 1) * dil, wld = cin + 8, wrows = CONV_BM + ctx;
    const int K = taps * cin, kld = K + 8;
    const int tiles = (steps + CONV_BM - 1) / CONV_BM;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned wsm = conv_smem(conv_sm);
    const unsigned win0 = wsm + 2 * BN * kld;
    const unsigned win_bytes = 2 * wrows * wld;
    const int kpieces = K / 8;
    // all the weights (rows past n_out zero), in the first commit group with tile 0's window
    for (int e = tid; e < BN * kpieces; e += THREADS) {
        const int n = e / kpieces, p = e - n * kpieces;
        const bool ok = n < n_out;
        conv_cp16(wsm + 2 * (n * kld + p * 8), ok ? W + (size_t)n * ldw + p * 8 : W, ok ? 16 : 0);
    }
    auto fill = [&](int t, unsigned buf) {
        conv_fill_window<THREADS>(buf, xe, cin, ctx, wld, t * CONV_BM, rate, steps, meta);
    };
    const int wm = warp & 3, wnb = warp >> 2;
    const int lrow = lane & 7, lmat = lane >> 3;
    const int a_off = (wm * 32 + (lmat & 1) * 8 + lrow) * wld + (lmat >> 1) * 8;
    const unsigned b0 = wsm + 2 * ((wnb * 32 + (lmat >> 1) * 8 + lrow) * kld + (lmat & 1) * 8);
    int i = 0;
    if ((int)blockIdx.x < tiles) fill(blockIdx.x, win0);
    asm volatile("cp.async.commit_group;" ::: "memory");
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, i++) {
        const unsigned cur = win0 + (i & 1) * win_bytes;
        if (t + (int)gridDim.x < tiles) fill(t + gridDim.x, win0 + ((i + 1) & 1) * win_bytes);
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads();
        float acc[2][4][4];
        conv_zero(acc);
        conv_win_tile_mma(acc, cur + 2 * a_off, wld, b0, kld, K, cin, dil);
        // the tile's window is done with: it stages the outputs (the epilogue's barriers
        // also keep the next iteration's fill from rewriting it early)
        conv_epilogue_staged<BN>(acc, t * CONV_BM, 0, steps, K, W, ldw, n_out, C, ldc, beta,
                                 post, alpha2, inv_beta2,
                                 reinterpret_cast<float*>(conv_sm) + (cur - wsm) / 4);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
}

#define CODEC_CONV_ENTRY(NAME, BODY, BN)                                                      \
    extern "C" __global__ void __launch_bounds__(BN * 4) NAME(                                 \
        const unsigned short* __restrict__ xe, int cin, int taps, int dil, int rate,          \
        const int* __restrict__ meta_p, int R, int steps, const unsigned short* __restrict__ W, \
        int ldw, int n_out, float* __restrict__ C, int ldc, float beta, int post,              \
        const float* __restrict__ alpha2, const float* __restrict__ inv_beta2) {               \
        BODY<BN>(xe, cin, taps, dil, rate, meta_p, R, steps, W, ldw, n_out, C, ldc, beta, post, \
                 alpha2, inv_beta2);                                                           \
    }

// 128 steps × 64 outputs per block (8 warps); × 32 (4 warps) for layers whose width is not
// a multiple of 64 (the 24 kHz residual units' 96 channels, the last transposed conv's 288)
CODEC_CONV_ENTRY(codec_conv_mma64, codec_conv_body, 64)
CODEC_CONV_ENTRY(codec_conv_mma32, codec_conv_body, 32)
// the window variant: 96 outputs per block (12 warps) for layers of a multiple of 96 (the
// 24 kHz residual units: one tile; the 192-channel ones: two), else 64 or 32
CODEC_CONV_ENTRY(codec_conv_win96, codec_conv_win_body, 96)
CODEC_CONV_ENTRY(codec_conv_win64, codec_conv_win_body, 64)
CODEC_CONV_ENTRY(codec_conv_win32, codec_conv_win_body, 32)
