// persistent.cu — decoder stacks run as one persistent kernel each:
//   * cp_loop: the whole code-predictor loop: 15 steps of the stack, each step's lm head
//     and sampling, for up to CPL_MAX_ROWS rows;
//   * talker_layers: the talker step's decoder layers for up to CPL_MAXT rows (its input
//     embedding, head and sampling stay separate launches).
//
// Why: launched kernel by kernel a stack costs ~6 launches per layer, each paying a fixed
// ramp-up and tail larger than its few megabytes of weights take to stream. Here one block
// per multiprocessor runs every phase and phases meet at a grid barrier (all blocks are
// resident: the grid is the multiprocessor count and a block needs a whole one); a block
// may ask L2 for (the start of) its slice of later weight matrices ahead (CPA_PREFETCH*).
// Measured on the H200 (bench/results/2026-12-01-h200-persistent): the barrier costs
// ~0.9 µs, but a phase is a chain of dependent memory round trips of 5-11 µs at batch 1,
// so these kernels are slower than launch by launch and the backend leaves them off.
//
// Phases of one layer over T tokens (2 per row in the code predictor's step 0, else 1):
//   QKV (RMSNorm folded) | attention (fused_attention_body per (head, row)) |
//   O (+residual) | gate/up (RMSNorm folded, SwiGLU pairs) | down (+residual)
// and in the code predictor, per step: lm head (final norm folded) | sampling
// (sample_cp_row per row, which also writes the next step's input row).
// Linear phases split the output rows over blocks in pairs (a SwiGLU pair stays in one
// block); a block stages its T input rows in shared memory in K chunks (16384 / T columns,
// rounded to the compiled token count; scaled by the norm gain when there is one: the
// row's 1/rms multiplies the sums at the end, the same product reassociated), and its
// warps take (pair, K part) tasks. Partial sums meet in shared memory in a fixed order:
// results do not depend on the batch.
//
// Arguments: a u64 table (`CPA_*` cells, written by the host once: buffers are fixed) and
// the row count b. Grid: gridDim.x blocks, all resident; 256 threads; dynamic shared
// memory CPL_SMEM bytes. Weights bf16 without bias; activations f32.

#define CPL_STAGE 16384  // f32 values staged per chunk (all tokens)
#define CPL_MAXT 8
#define CPL_MAX_ROWS 4
#define CPL_MAX_TASKS 64
#define CPL_SMEM (CPL_STAGE * 4)

// Cells of the argument table (u64 each; ints and the f32 eps stored as their bits).
// Shared by both kernels; cells a kernel does not use are 0.
#define CPA_LAYERS 0
#define CPA_HIDDEN 1
#define CPA_HEADS 2
#define CPA_KVH 3
#define CPA_HD 4
#define CPA_INTER 5
#define CPA_VOCAB 6        // code predictor: its vocabulary
#define CPA_EPS 7
#define CPA_PREFETCH 8     // how many weight matrices ahead to prefetch (0: none)
#define CPA_PREFETCH_CAP 9 // most bytes of a block's slice to prefetch (0: all of it)
#define CPA_KV_ROWS 10     // cache rows per layer (batch rows or slots)
#define CPA_KV_POS 11      // cache positions per row
#define CPA_MAX_ROWS 12    // code predictor: rows of its position table
#define CPA_FINAL_NORM 13
#define CPA_INV_FREQ 14
#define CPA_X 15
#define CPA_QKV 16
#define CPA_ATTN 17
#define CPA_GU 18
#define CPA_LOGITS 19
#define CPA_K_CACHE 20
#define CPA_V_CACHE 21
#define CPA_SLOTS 22       // row -> request slot (sampling parameters)
#define CPA_ROWS1 23       // token -> cache row, one token per row
#define CPA_ROWS2 24       // code predictor: token -> cache row, two tokens per row
#define CPA_POS 25         // token positions (code predictor: its table)
#define CPA_PARAMS 26
#define CPA_FRAMES 27
#define CPA_FOLDED 28
#define CPA_RAW 29
#define CPA_BARRIER 30
#define CPA_TRACE 31       // phase trace (GridBarrier), or 0
#define CPA_TRACE_EVENTS 32
#define CPA_PREFETCH_AT 33 // 0: at a phase's start, 1: after its work, before the barrier
#define CPA_PREFETCH_OWN 34 // each linear phase first asks L2 (1) or L1 (2) for its own rows
#define CPA_HEAD_W 35      // code predictor: 15 lm heads
#define CPA_LAYER_W (CPA_HEAD_W + 15)
// per layer: qkv, o, gate_up, down weights; input, q, k, post-attention norms
#define CPA_PER_LAYER 8

__device__ __forceinline__ unsigned int ld_acquire_u32(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The pair range [u0, u1) of an n-row matrix that block `blk` of `g` owns.
__device__ __forceinline__ void cpl_units(int n, int blk, int g, int& u0, int& u1) {
    int units = n / 2;
    u0 = (int)((long long)units * blk / g);
    u1 = (int)((long long)units * (blk + 1) / g);
}

// Asks L2 for this block's rows of W [n][k] (bf16), at most `cap` bytes of them (0: all);
// 16-byte multiples, one piece per thread.
__device__ void cpl_prefetch(const bf16* w, int n, int k, size_t cap) {
    if (!w) return;
    int u0, u1;
    cpl_units(n, blockIdx.x, gridDim.x, u0, u1);
    const char* p = (const char*)(w + (size_t)2 * u0 * k);
    size_t bytes = (size_t)2 * (u1 - u0) * k * sizeof(bf16);
    if (cap) bytes = min(bytes, cap & ~(size_t)15);
    const size_t piece = 32768;
    for (size_t off = (size_t)threadIdx.x * piece; off < bytes; off += (size_t)blockDim.x * piece) {
        unsigned int sz = (unsigned int)min(piece, bytes - off);
#if __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(sz) : "memory");
#else
        for (unsigned int o = 0; o < sz; o += 128) prefetch_l2(p + off + o);
#endif
    }
}

// Sums V values (a power of two <= 32) across the warp's lanes at once: afterwards every
// lane holds in v[0] the total of value index lane >> (5 - log2 V). V - 1 + (5 - log2 V)
// shuffles instead of 5 V.
template <int V>
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[V], int lane) {
#pragma unroll
    for (int c = V, o = 16; c > 1; c >>= 1, o >>= 1) {
        bool upper = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < c / 2; i++) {
            float send = upper ? v[i] : v[i + c / 2];
            float keep = upper ? v[i + c / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    float s = v[0];
#pragma unroll
    for (int o = 16 / V; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// A barrier over every block of the grid, optionally traced. State: an arrival count and
// an exit count (u32 each, zero before the first launch). Barrier e is passed once the
// count reaches (e + 1) · gridDim.x; after its last barrier every block calls finish(),
// and the last block to leave zeroes the state for the next launch (nobody polls by then).
// Trace (when given): per block the clock at the start, then per barrier (arrival,
// release) in SM cycles: trace[blk], then trace[G + 2 (e G + blk) + {0, 1}].
struct GridBarrier {
    unsigned int* count;
    unsigned int* exits;
    unsigned long long* trace;
    int trace_events;
    unsigned int target;  // thread 0
    int e;
    __device__ void init(unsigned int* state, unsigned long long* tr, int tr_events) {
        count = state;
        exits = state + 1;
        trace = tr;
        trace_events = tr_events;
        target = 0;
        e = 0;
        if (trace && threadIdx.x == 0) trace[blockIdx.x] = clock64();
    }
    __device__ void sync() {
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long t0 = clock64();
            __threadfence();
            target += gridDim.x;
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
            while (ld_acquire_u32(count) < target) {
            }
            if (trace && e < trace_events) {
                unsigned long long* t = trace + gridDim.x + 2 * ((size_t)e * gridDim.x + blockIdx.x);
                t[0] = t0;
                t[1] = clock64();
            }
            e++;
        }
        __syncthreads();
    }
    __device__ void finish() {
        if (threadIdx.x == 0) {
            unsigned int left = atomicAdd(exits, 1u);
            if (left == gridDim.x - 1) {
                *count = 0;
                *exits = 0;
                __threadfence();
            }
        }
    }
};

// One linear phase: y = epilogue(norm?(x) · Wᵀ) for this block's output pairs.
struct CplLinear {
    const bf16* w;
    int n, k;
    const float* x;
    int ldx;
    const float* norm;  // RMSNorm gain [k], or null
    float eps;
    int act;        // 0: plain, 2: SwiGLU pairs (y[t][pair] = silu(gate) * up)
    bool residual;  // y += result
    float* y;
    int ldy;
    int prefetch_own;  // ask L2 (1) or L1 (2) for this block's weight rows at the start
};

template <int MT>
__device__ void cpl_linear(const CplLinear& L, int T, float* stage /* dynamic smem */) {
    __shared__ float s_acc[CPL_MAX_TASKS][2 * MT];
    __shared__ float s_inv[MT];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int u0, u1;
    cpl_units(L.n, blockIdx.x, gridDim.x, u0, u1);
    const int nu = u1 - u0;
    if (nu <= 0) return;  // uniform over the block
    int kp = 1;
    while (kp < nw && nu * kp * 2 <= nw) kp *= 2;
    const int ntask = nu * kp;
    // 0. ask L2 for the weight rows of this warp's pairs (the first warp of each pair's
    //    K parts takes the whole rows), so only the first loads wait for memory
    if (L.prefetch_own) {
        for (int task = warp; task < ntask; task += nw) {
            if (task % kp) continue;
            const char* r0 = (const char*)(L.w + (size_t)(2 * (u0 + task / kp)) * L.k);
            const int bytes = 2 * L.k * (int)sizeof(bf16);  // both rows, contiguous
            for (int off = lane * 128; off < bytes; off += 32 * 128) {
                if (L.prefetch_own == 2) prefetch_l1(r0 + off);
                else prefetch_l2(r0 + off);
            }
        }
    }
    // 16-byte weight loads in flight per lane and row (8 measured slower on the talker)
    constexpr int U = 4;
    // Columns staged per chunk: the whole dynamic buffer for MT tokens (16384 at MT = 1).
    constexpr int KC = CPL_STAGE / MT;
    float ss[MT];  // token warp + i·nw's sum of squares (i < MT / nw, rounded up)
#pragma unroll
    for (int i = 0; i < MT; i++) ss[i] = 0.f;

    for (int c0 = 0; c0 < L.k; c0 += KC) {
        const int kc = min(KC, L.k - c0);
        __syncthreads();  // the previous chunk's readers are done
        // 1. stage: warp w takes tokens w, w + nw, ... (raw sums of squares for the norm,
        //    in a fixed order; the staged values scaled by the norm's gain)
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const int m = warp + i * nw;
            if (m < T) {
                const float4* src = (const float4*)(L.x + (size_t)m * L.ldx + c0);
                float4* dst = (float4*)(stage + m * KC);
                const float4* g = L.norm ? (const float4*)(L.norm + c0) : nullptr;
#pragma unroll 4
                for (int q = lane; q < kc / 4; q += 32) {
                    float4 v = __ldcg(src + q);
                    ss[i] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
                    if (g) {
                        const float4 gv = __ldg(g + q);
                        v.x *= gv.x; v.y *= gv.y; v.z *= gv.z; v.w *= gv.w;
                    }
                    dst[q] = v;
                }
            }
        }
        __syncthreads();
        // 2. tasks: (pair, K part); lanes stream 16-byte weight chunks
        const int steps = (kc + 255) / 256, per = (steps + kp - 1) / kp;
        for (int task = warp; task < ntask; task += nw) {
            const int u = u0 + task / kp, part = task % kp;
            const int kb = part * per * 256, ke = min(kc, (part + 1) * per * 256);
            const bf16* w0 = L.w + (size_t)(2 * u) * L.k + c0;
            const bf16* w1 = w0 + L.k;
            float acc[2 * MT];
#pragma unroll
            for (int i = 0; i < 2 * MT; i++) acc[i] = 0.f;
            for (int kk = kb + lane * 8; kk < ke; kk += 256 * U) {
                uint4 wa[U], wb[U];
#pragma unroll
                for (int uu = 0; uu < U; uu++) {
                    int idx = kk + uu * 256;
                    bool in = idx < ke;
                    wa[uu] = in ? __ldg((const uint4*)(w0 + idx)) : make_uint4(0, 0, 0, 0);
                    wb[uu] = in ? __ldg((const uint4*)(w1 + idx)) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int uu = 0; uu < U; uu++) {
                    int idx = kk + uu * 256;
                    if (idx >= ke) break;
                    float fa[8], fb[8];
                    unpack8(wa[uu], fa);
                    unpack8(wb[uu], fb);
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        if (m < T) {
                            const float4* xp = (const float4*)(stage + m * KC + idx);
                            float4 p0 = xp[0], p1 = xp[1];
                            float xv[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
                            for (int e = 0; e < 8; e++) {
                                acc[m] = fmaf(xv[e], fa[e], acc[m]);
                                acc[MT + m] = fmaf(xv[e], fb[e], acc[MT + m]);
                            }
                        }
                    }
                }
            }
            float s = warp_reduce_scatter<2 * MT>(acc, lane);
            if ((lane & (32 / (2 * MT) - 1)) == 0) {
                int idx = lane / (32 / (2 * MT));
                s_acc[task][idx] = c0 == 0 ? s : s_acc[task][idx] + s;
            }
        }
    }
    // 3. each token's 1/rms
    if (L.norm) {
#pragma unroll
        for (int i = 0; i < MT; i++) {
            int m = warp + i * nw;
            if (i * nw >= T) break;  // uniform: no warp has a token left
            float t = warp_sum(ss[i]);
            if (m < T && lane == 0) s_inv[m] = 1.0f / sqrtf(t / (float)L.k + L.eps);
        }
    }
    __syncthreads();
    // 4. epilogue: parts summed in order
    for (int e = threadIdx.x; e < nu * T; e += blockDim.x) {
        const int ul = e / T, m = e % T, u = u0 + ul;
        float a0 = 0.f, a1 = 0.f;
        for (int p = 0; p < kp; p++) {
            a0 += s_acc[ul * kp + p][m];
            a1 += s_acc[ul * kp + p][MT + m];
        }
        if (L.norm) {
            a0 *= s_inv[m];
            a1 *= s_inv[m];
        }
        float* yr = L.y + (size_t)m * L.ldy;
        if (L.act == 2) {
            float v = silu(a0) * a1;
            if (L.residual) v += __ldcg(yr + u);
            yr[u] = v;
        } else {
            if (L.residual) {
                a0 += __ldcg(yr + 2 * u);
                a1 += __ldcg(yr + 2 * u + 1);
            }
            yr[2 * u] = a0;
            yr[2 * u + 1] = a1;
        }
    }
}

__device__ void cpl_linear_any(const CplLinear& L, int T, float* stage) {
    if (T <= 1) cpl_linear<1>(L, T, stage);
    else if (T <= 2) cpl_linear<2>(L, T, stage);
    else if (T <= 4) cpl_linear<4>(L, T, stage);
    else cpl_linear<8>(L, T, stage);
}

// Everything the kernels read from the argument table.
struct CplArgs {
    int layers, hidden, heads, kvh, hd, inter, vocab, prefetch, kv_rows, kv_pos, max_rows;
    int prefetch_at, trace_events, prefetch_own;
    unsigned long long* trace;
    size_t prefetch_cap;
    float eps;
    const float *final_norm, *inv_freq, *folded;
    const bf16* raw;
    float *x, *qkv, *attn, *gu, *logits;
    void *k_cache, *v_cache;
    const int *slots, *rows1, *rows2, *pos;
    const unsigned int* params;
    int* frames;
    unsigned int* barrier;
    const unsigned long long* tab;
    bool heads_in;  // the sequence of weight matrices has the 15 lm heads (code predictor)
    __device__ const bf16* head(int j) const { return (const bf16*)tab[CPA_HEAD_W + j]; }
    __device__ const void* layer(int l, int i) const {
        return (const void*)tab[CPA_LAYER_W + l * CPA_PER_LAYER + i];
    }
    __device__ int qkv_n() const { return (heads + 2 * kvh) * hd; }
    __device__ int per_step() const { return 4 * layers + (heads_in ? 1 : 0); }
    // Weight matrix i of the kernel's sequence (4 per layer, then, in the code predictor,
    // the step's head; the next step follows): pointer, rows, columns; null past the end.
    __device__ const bf16* matrix(int i, int& n, int& k) const {
        const int j = i / per_step(), r = i % per_step();
        if (j >= (heads_in ? 15 : 1)) return nullptr;
        if (r == 4 * layers) {
            n = vocab;
            k = hidden;
            return head(j);
        }
        const int l = r / 4, kind = r % 4;
        n = kind == 0 ? qkv_n() : kind == 2 ? 2 * inter : hidden;
        k = kind == 0 || kind == 2 ? hidden : kind == 1 ? heads * hd : inter;
        return (const bf16*)layer(l, kind);
    }
    __device__ void prefetch_matrix(int i) const {
        int n = 0, k = 0;
        const bf16* w = matrix(i, n, k);
        cpl_prefetch(w, n, k, prefetch_cap);
    }
    // In the phase of matrix i, at its start or (prefetch_at 1) after its work: the matrix
    // `prefetch` ahead (the ones between were asked for by earlier phases, or at the
    // kernel's start).
    __device__ void prefetch_start(int i) const {
        if (prefetch && prefetch_at == 0) prefetch_matrix(i + prefetch);
    }
    __device__ void prefetch_end(int i) const {
        if (prefetch && prefetch_at == 1) prefetch_matrix(i + prefetch);
    }
};

__device__ CplArgs cpl_read_args(const unsigned long long* __restrict__ a, bool heads_in) {
    CplArgs c;
    c.layers = (int)a[CPA_LAYERS];
    c.hidden = (int)a[CPA_HIDDEN];
    c.heads = (int)a[CPA_HEADS];
    c.kvh = (int)a[CPA_KVH];
    c.hd = (int)a[CPA_HD];
    c.inter = (int)a[CPA_INTER];
    c.vocab = (int)a[CPA_VOCAB];
    c.eps = __uint_as_float((unsigned int)a[CPA_EPS]);
    c.prefetch = (int)a[CPA_PREFETCH];
    c.prefetch_cap = (size_t)a[CPA_PREFETCH_CAP];
    c.kv_rows = (int)a[CPA_KV_ROWS];
    c.kv_pos = (int)a[CPA_KV_POS];
    c.max_rows = (int)a[CPA_MAX_ROWS];
    c.final_norm = (const float*)a[CPA_FINAL_NORM];
    c.inv_freq = (const float*)a[CPA_INV_FREQ];
    c.x = (float*)a[CPA_X];
    c.qkv = (float*)a[CPA_QKV];
    c.attn = (float*)a[CPA_ATTN];
    c.gu = (float*)a[CPA_GU];
    c.logits = (float*)a[CPA_LOGITS];
    c.k_cache = (void*)a[CPA_K_CACHE];
    c.v_cache = (void*)a[CPA_V_CACHE];
    c.slots = (const int*)a[CPA_SLOTS];
    c.rows1 = (const int*)a[CPA_ROWS1];
    c.rows2 = (const int*)a[CPA_ROWS2];
    c.pos = (const int*)a[CPA_POS];
    c.params = (const unsigned int*)a[CPA_PARAMS];
    c.frames = (int*)a[CPA_FRAMES];
    c.folded = (const float*)a[CPA_FOLDED];
    c.raw = (const bf16*)a[CPA_RAW];
    c.barrier = (unsigned int*)a[CPA_BARRIER];
    c.trace = (unsigned long long*)a[CPA_TRACE];
    c.trace_events = (int)a[CPA_TRACE_EVENTS];
    c.prefetch_at = (int)a[CPA_PREFETCH_AT];
    c.prefetch_own = (int)a[CPA_PREFETCH_OWN];
    c.tab = a;
    c.heads_in = heads_in;
    for (int i = 0; i < c.prefetch; i++) c.prefetch_matrix(i);
    return c;
}

// One linear phase of matrix m (index in the prefetch sequence): the prefetches it is due,
// the product, then the grid barrier.
__device__ __forceinline__ void cpl_phase(const CplArgs& c, GridBarrier& bar, int m,
                                          const CplLinear& L, int T, float* stage) {
    c.prefetch_start(m);
    cpl_linear_any(L, T, stage);
    c.prefetch_end(m);
    bar.sync();
}

// Layer l over T tokens in `rows` rows of `tpr` consecutive tokens (x [T][hidden] updated
// in place); `m0` is the index of its QKV matrix in the prefetch sequence. Ends with a
// grid barrier.
template <typename KV>
__device__ void cpl_layer(const CplArgs& c, GridBarrier& bar, int l, int m0, int T, int rows,
                          int tpr, const int* rowmap, const int* positions, float* stage) {
    const int H = c.hidden, qd = c.heads * c.hd, ldq = c.qkv_n(), kvd = c.kvh * c.hd;
    const size_t layer_kv = (size_t)c.kv_rows * c.kv_pos * kvd;
    // QKV
    const CplLinear q = {(const bf16*)c.layer(l, 0), ldq, H, c.x, H, (const float*)c.layer(l, 4),
                         c.eps, 0, false, c.qkv, ldq, c.prefetch_own};
    cpl_phase(c, bar, m0, q, T, stage);
    // attention, one (head, row) task at a time
    KV* kc = (KV*)c.k_cache + l * layer_kv;
    KV* vc = (KV*)c.v_cache + l * layer_kv;
    for (int task = blockIdx.x; task < c.heads * rows; task += gridDim.x) {
        fused_attention_body<KV, true, FA_SPOS>(task % c.heads, task / c.heads, c.qkv, ldq, rows, tpr,
                                       rowmap, positions, (const float*)c.layer(l, 5),
                                       (const float*)c.layer(l, 6), c.eps, c.inv_freq, c.heads,
                                       c.kvh, c.hd, kc, vc, c.kv_pos, c.attn, qd);
    }
    bar.sync();
    // O (+residual)
    const CplLinear o = {(const bf16*)c.layer(l, 1), H, qd, c.attn, qd, nullptr, 0.f, 0, true,
                         c.x, H, c.prefetch_own};
    cpl_phase(c, bar, m0 + 1, o, T, stage);
    // gate/up (SwiGLU pairs)
    const CplLinear gu = {(const bf16*)c.layer(l, 2), 2 * c.inter, H, c.x, H,
                          (const float*)c.layer(l, 7), c.eps, 2, false, c.gu, c.inter,
                          c.prefetch_own};
    cpl_phase(c, bar, m0 + 2, gu, T, stage);
    // down (+residual)
    const CplLinear dn = {(const bf16*)c.layer(l, 3), H, c.inter, c.gu, c.inter, nullptr, 0.f,
                          0, true, c.x, H, c.prefetch_own};
    cpl_phase(c, bar, m0 + 3, dn, T, stage);
}

// The code-predictor loop for b rows (<= CPL_MAX_ROWS). Step 0's inputs are in x
// ([2b][hidden], rows (hidden_r, code0_r)); codes land in frames[r][1..16).
template <typename KV>
__device__ void cp_loop_body(const unsigned long long* __restrict__ a, int b) {
    extern __shared__ __align__(16) float cpl_dyn[];
    const CplArgs c = cpl_read_args(a, true);
    GridBarrier bar;
    bar.init(c.barrier, c.trace, c.trace_events);
    const int H = c.hidden;
    for (int j = 0; j < 15; j++) {
        const int T = j == 0 ? 2 * b : b, tpr = j == 0 ? 2 : 1;
        const int* positions = j == 0 ? c.pos : c.pos + 2 * c.max_rows + (j - 1) * c.max_rows;
        const int* rowmap = j == 0 ? c.rows2 : c.rows1;
        for (int l = 0; l < c.layers; l++)
            cpl_layer<KV>(c, bar, l, j * c.per_step() + 4 * l, T, b, tpr, rowmap, positions,
                          cpl_dyn);
        // the step's head over each row's last token (the second one in step 0)
        const CplLinear hd = {c.head(j), c.vocab, H, j == 0 ? c.x + H : c.x,
                              j == 0 ? 2 * H : H, c.final_norm, c.eps, 0, false, c.logits,
                              c.vocab, c.prefetch_own};
        cpl_phase(c, bar, j * c.per_step() + 4 * c.layers, hd, b, cpl_dyn);
        for (int r = blockIdx.x; r < b; r += gridDim.x)
            sample_cp_row<true>(r, c.logits, c.vocab, b, c.slots, c.params, j + 1, c.frames,
                                c.folded, c.raw, H, c.x, H, nullptr, 0, nullptr, 0,
                                *(SampleShared*)cpl_dyn);
        if (j < 14) bar.sync();
    }
    bar.finish();
}

// The talker step's layers for b rows (<= CPL_MAXT), one token each: x [b][hidden] in
// place, cache row = the row's slot, position from the position table.
template <typename KV>
__device__ void talker_layers_body(const unsigned long long* __restrict__ a, int b) {
    extern __shared__ __align__(16) float cpl_dyn[];
    const CplArgs c = cpl_read_args(a, false);
    GridBarrier bar;
    bar.init(c.barrier, c.trace, c.trace_events);
    for (int l = 0; l < c.layers; l++)
        cpl_layer<KV>(c, bar, l, 4 * l, b, b, 1, c.rows1, c.pos, cpl_dyn);
    bar.finish();
}

#define CPL_ENTRY(NAME, BODY, KV)                                                               \
    extern "C" __global__ void __launch_bounds__(256, 1)                                       \
        NAME(const unsigned long long* __restrict__ args, int b) {                              \
        BODY<KV>(args, b);                                                                      \
    }
CPL_ENTRY(cp_loop, cp_loop_body, bf16)
CPL_ENTRY(cp_loop_f32, cp_loop_body, float)
CPL_ENTRY(talker_layers, talker_layers_body, bf16)
CPL_ENTRY(talker_layers_f32, talker_layers_body, float)
