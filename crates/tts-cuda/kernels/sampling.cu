// sampling.cu — code sampling on the GPU, the same rules as tts_model::sampling (the CPU
// reference): talker logits processors (repetition penalty over earlier code-0 ids, EOS
// masked for the first `min_new` samples, ids >= suppress_from except EOS suppressed), then
// argmax, or temperature -> top-k -> top-p -> inverse-CDF draw in index order with
// u = philox4x32-10(seed, [frame, codebook, 0, 0]).
//
// Per-slot parameters, u32 [max_slots][16] (floats stored as bits):
//   0 seed_lo, 1 seed_hi, 2 talker do_sample, 3 talker top_k, 4 talker temperature,
//   5 talker top_p, 6 repetition penalty, 7 cp do_sample, 8 cp top_k, 9 cp temperature,
//   10 cp top_p, 11 code-0 samples so far (updated here).
// seen: u32 [max_slots][seen_words], bit id set once code-0 id was sampled.
// One block of SAMPLE_THREADS threads per row; V <= SAMPLE_MAXV.

#define SAMPLE_THREADS 512
#define SAMPLE_MAXV 4096

__device__ __forceinline__ void philox4x32(unsigned int k0, unsigned int k1, unsigned int* c) {
    for (int r = 0; r < 10; r++) {
        unsigned int hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        unsigned int hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        unsigned int n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
}

__device__ __forceinline__ float draw_uniform(unsigned int seed_lo, unsigned int seed_hi,
                                              unsigned int frame, unsigned int codebook) {
    unsigned int c[4] = {frame, codebook, 0u, 0u};
    philox4x32(seed_lo, seed_hi, c);
    return (float)(c[0] >> 8) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ unsigned int order_key(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(unsigned int k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Values each thread holds (SAMPLE_MAXV / SAMPLE_THREADS): thread t owns the contiguous
// chunk [t*C, t*C + C) of a row, C = ceil(V / blockDim.x).
#define SAMPLE_PER_THREAD 16
// Values the top-k select ranks directly when they share its boundary bin.
#define SAMPLE_BIN_CANDIDATES 32

struct SampleShared {
    float s[SAMPLE_MAXV];
    int idx[SAMPLE_MAXV];
    unsigned int hist4[4][256];
    // the top-k select's bins (bin_of) and the values of its boundary bin
    unsigned int bins[256];
    float cand[SAMPLE_BIN_CANDIDATES];
    unsigned int cand_n;
    float scratch[33];
    float fscratch[SAMPLE_THREADS];
    int iv[4];
};

// Index of the largest value, lowest index on ties.
__device__ int block_argmax(const float* s, int V, SampleShared& sh) {
    float best = NEG_INF;
    int bi = V;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (s[i] > best || (s[i] == best && i < bi)) { best = s[i]; bi = i; }
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ob > best || (ob == best && oi < bi)) { best = ob; bi = oi; }
    }
    __syncthreads();
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) { sh.fscratch[w] = best; sh.idx[w] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = NEG_INF;
        int ii = V;
        for (int k = 0; k < (int)(blockDim.x >> 5); k++)
            if (sh.fscratch[k] > b || (sh.fscratch[k] == b && sh.idx[k] < ii)) { b = sh.fscratch[k]; ii = sh.idx[k]; }
        sh.iv[0] = ii < V ? ii : 0;
    }
    __syncthreads();
    return sh.iv[0];
}

// Top-p as transformers' TopPLogitsWarper: sort ascending, drop tokens whose cumulative
// probability (from the smallest up) is <= 1 - top_p, keeping at least the largest.
__device__ void apply_top_p(float* s, int V, float top_p, SampleShared& sh) {
    int n = 1;
    while (n < V) n <<= 1;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        sh.idx[i] = i < V ? i : -1;
    }
    __syncthreads();
    // bitonic sort of indices by (value ascending, index ascending); padding sorts last
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                int j = i ^ stride;
                if (j > i) {
                    int a = sh.idx[i], b = sh.idx[j];
                    bool a_gt_b;
                    if (a < 0) a_gt_b = true;
                    else if (b < 0) a_gt_b = false;
                    else a_gt_b = s[a] > s[b] || (s[a] == s[b] && a > b);
                    bool up = (i & size) == 0;
                    if (a_gt_b == up) { sh.idx[i] = b; sh.idx[j] = a; }
                }
            }
            __syncthreads();
        }
    }
    if (threadIdx.x == 0) {
        float mx = s[sh.idx[V - 1]];
        float total = 0.f;
        for (int r = 0; r < V; r++) total += expf(s[sh.idx[r]] - mx);
        float cum = 0.f;
        for (int r = 0; r < V; r++) {
            int i = sh.idx[r];
            cum += expf(s[i] - mx) / total;
            if (cum <= 1.0f - top_p && r + 1 < V) s[i] = NEG_INF;
        }
    }
    __syncthreads();
}

// Warp-wide: the highest bucket d of `hist` (256 counts) such that the keys in buckets >= d
// number at least `remaining`; returns d and sets `remaining` to the rank left within it.
// Every lane gets the same answer. Lane l owns buckets 8l..8l+7; a suffix scan over lanes
// finds d.
__device__ __forceinline__ int warp_pick_bucket(const unsigned int* hist, int& remaining) {
    int lane = threadIdx.x & 31;
    int local = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) local += (int)hist[lane * 8 + j];
    int suffix = local;
    for (int o = 1; o < 32; o <<= 1) {
        int v = __shfl_down_sync(0xffffffffu, suffix, o);
        if (lane + o < 32) suffix += v;
    }
    int above = suffix - local;
    unsigned int ballot = __ballot_sync(0xffffffffu, above < remaining && suffix >= remaining);
    int owner = ballot ? 31 - __clz(ballot) : 0;
    int chosen = lane * 8, rest = remaining;
    if (lane == owner) {
        int cum = above;
        for (int j = 7; j >= 0; j--) {
            int c = (int)hist[lane * 8 + j];
            if (cum + c >= remaining) { chosen = lane * 8 + j; break; }
            cum += c;
        }
        rest = remaining - cum;
    }
    remaining = __shfl_sync(0xffffffffu, rest, owner);
    return __shfl_sync(0xffffffffu, chosen, owner);
}

// The top-k select's bin of value v below the row's maximum mx: 255 for v == mx, one bin
// less per 1/16 below, 0 for 255/16 or more below (and for -inf and NaN). Non-decreasing
// in v, so a value in a higher bin is larger than every value in a lower one.
__device__ __forceinline__ int bin_of(float mx, float v) {
    const float d = (mx - v) * 16.0f;
    return d < 255.0f ? 255 - (int)d : 0;
}

// Before the first block barrier of a draw: clears the selects' histograms and the draw's
// result. Bin 0 is never counted; it holds V, every rank the other bins do not.
__device__ __forceinline__ void reset_select(int V, SampleShared& sh) {
    for (int i = threadIdx.x; i < 4 * 256; i += blockDim.x) (&sh.hist4[0][0])[i] = 0;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.bins[i] = i == 0 ? (unsigned int)V : 0u;
    if (threadIdx.x == 0) {
        sh.cand_n = 0;
        sh.iv[0] = V;
    }
}

// The top_k-th largest value from one histogram of bin_of: the bin holding rank top_k,
// then its values (at most SAMPLE_BIN_CANDIDATES) ranked by every warp itself. False
// (thr untouched) when that bin is bin 0 or holds more values: values tied or too close
// together, or fewer than top_k within 255/16 of the maximum. Two block barriers.
__device__ bool binned_kth(const float (&x)[SAMPLE_PER_THREAD], int lo, int C, int V, int top_k,
                           float mx, SampleShared& sh, float& thr) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < SAMPLE_PER_THREAD; j++) {
        if (j >= C) break;
        const int b = bin_of(mx, x[j]);
        if (lo + j < V && b > 0) atomicAdd(&sh.bins[b], 1u);
    }
    __syncthreads();
    int rank = top_k;
    const int b = warp_pick_bucket(sh.bins, rank);
    const int n = (int)sh.bins[b];
    if (b == 0 || n > SAMPLE_BIN_CANDIDATES) return false;  // the same answer in every thread
#pragma unroll
    for (int j = 0; j < SAMPLE_PER_THREAD; j++) {
        if (j >= C) break;
        if (lo + j < V && bin_of(mx, x[j]) == b) sh.cand[atomicAdd(&sh.cand_n, 1u)] = x[j];
    }
    __syncthreads();
    // the value with fewer than `rank` candidates above it and at least `rank` at or above
    const float v = lane < n ? sh.cand[lane] : NEG_INF;
    int above = 0, at_or_above = 0;
    for (int k = 0; k < n; k++) {
        const float o = sh.cand[k];
        above += o > v;
        at_or_above += o >= v;
    }
    const unsigned int hit =
        __ballot_sync(0xffffffffu, lane < n && above < rank && rank <= at_or_above);
    thr = __shfl_sync(0xffffffffu, v, hit ? __ffs(hit) - 1 : 0);
    return true;
}

// The top_k-th largest value by a radix select over order-preserving keys, 8 bits a pass
// (any values). Logits share their high key bits (sign, exponent), so most keys land in a
// few buckets: lanes with the same bucket add once, through their leader. Four block
// barriers; reads hist4 as reset_select left it.
__device__ float radix_kth(const float (&x)[SAMPLE_PER_THREAD], int lo, int C, int V, int top_k,
                           SampleShared& sh) {
    const int lane = threadIdx.x & 31;
    unsigned int prefix = 0, mask = 0;
    int remaining = top_k;
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
#pragma unroll
        for (int j = 0; j < SAMPLE_PER_THREAD; j++) {
            if (j >= C) break;  // C is the same for every lane
            unsigned int key = order_key(x[j]);
            bool in = lo + j < V && (key & mask) == prefix;
            unsigned int active = __ballot_sync(0xffffffffu, in);
            if (in) {
                unsigned int b = (key >> shift) & 255u;
                unsigned int peers = __match_any_sync(active, b);
                if (lane == __ffs(peers) - 1)
                    atomicAdd(&sh.hist4[pass][b], (unsigned int)__popc(peers));
            }
        }
        __syncthreads();
        prefix |= ((unsigned int)warp_pick_bucket(sh.hist4[pass], remaining)) << shift;
        mask |= 255u << shift;
    }
    return key_value(prefix);
}

// This thread's chunk of a row of V values into x (NEG_INF past V): 16-byte loads when
// the chunk allows (CG: coherent loads of values written in the same launch).
template <bool CG>
__device__ __forceinline__ void load_chunk(const float* __restrict__ row, int V,
                                           float (&x)[SAMPLE_PER_THREAD]) {
    const int C = (V + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * C;
    if (!CG && (C & 3) == 0 && lo + C <= V && (reinterpret_cast<size_t>(row + lo) & 15) == 0) {
#pragma unroll
        for (int q = 0; q < SAMPLE_PER_THREAD / 4; q++) {
            float4 v = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            if (4 * q < C) v = *reinterpret_cast<const float4*>(row + lo + 4 * q);
            x[4 * q] = v.x;
            x[4 * q + 1] = v.y;
            x[4 * q + 2] = v.z;
            x[4 * q + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < SAMPLE_PER_THREAD; j++)
            x[j] = j < C && lo + j < V ? ld_cg_if<CG>(row + lo + j) : NEG_INF;
    }
}

// The argmax of a row held in chunks: through s (V values of shared memory).
__device__ int chunk_argmax(const float (&x)[SAMPLE_PER_THREAD], float* s, int V,
                            SampleShared& sh) {
    const int C = (V + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * C;
#pragma unroll
    for (int j = 0; j < SAMPLE_PER_THREAD; j++)
        if (j < C && lo + j < V) s[lo + j] = x[j];
    __syncthreads();
    return block_argmax(s, V, sh);
}

// Picks an id from processed logits held in chunks (x, see load_chunk): argmax, or
// temperature -> top-k -> top-p -> inverse-CDF draw at u in index order. Every block-wide
// decision (the top-k threshold, the maximum, the prefix of the weights) each thread takes
// itself from values the warps left in shared memory: 6 block barriers with the released
// settings (top-k, no top-p) when the top-k boundary falls in a bin of at most
// SAMPLE_BIN_CANDIDATES values, 9 when the radix select decides. Top-p and the fallbacks
// go through s (V values of shared memory).
__device__ int choose(float (&x)[SAMPLE_PER_THREAD], float* s, int V, bool do_sample, float temp,
                      int top_k, float top_p, float u, SampleShared& sh) {
    if (!do_sample) return chunk_argmax(x, s, V, sh);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int C = (V + blockDim.x - 1) / blockDim.x;
    const int lo = threadIdx.x * C;
    if (temp != 1.0f) {
#pragma unroll
        for (int j = 0; j < SAMPLE_PER_THREAD; j++)
            if (j < C) x[j] = x[j] / temp;
    }
    reset_select(V, sh);
    // the maximum, which top-k and top-p keep: every thread combines the warps' maxima
    float mx = NEG_INF;
#pragma unroll
    for (int j = 0; j < SAMPLE_PER_THREAD; j++) mx = fmaxf(mx, x[j]);
    mx = warp_max(mx);
    if (lane == 0) sh.fscratch[w] = mx;
    __syncthreads();
    mx = NEG_INF;
    for (int k = 0; k < nw; k++) mx = fmaxf(mx, sh.fscratch[k]);
    // every value masked: the argmax of the processed values
    if (mx == NEG_INF) return chunk_argmax(x, s, V, sh);
    if (top_k > 0 && top_k < V) {
        float thr;
        if (!binned_kth(x, lo, C, V, top_k, mx, sh, thr)) thr = radix_kth(x, lo, C, V, top_k, sh);
#pragma unroll
        for (int j = 0; j < SAMPLE_PER_THREAD; j++)
            if (x[j] < thr) x[j] = NEG_INF;
    }
    if (top_p < 1.0f) {
        // through shared memory: the sort needs every value
#pragma unroll
        for (int j = 0; j < SAMPLE_PER_THREAD; j++)
            if (j < C && lo + j < V) s[lo + j] = x[j];
        __syncthreads();
        apply_top_p(s, V, top_p, sh);  // ends with a barrier
#pragma unroll
        for (int j = 0; j < SAMPLE_PER_THREAD; j++)
            if (j < C && lo + j < V) x[j] = s[lo + j];
    }
    // weights, this thread's sum and last positive index, in index order
    float local = 0.f;
    int last_pos = -1;
#pragma unroll
    for (int j = 0; j < SAMPLE_PER_THREAD; j++) {
        if (j >= C) break;
        float wt = x[j] == NEG_INF ? 0.f : expf(x[j] - mx);
        x[j] = wt;
        if (wt > 0.f) { local += wt; last_pos = lo + j; }
    }
    // exclusive prefix in thread (= index) order: warp scan, then the warp totals, which
    // every thread adds up in warp order itself
    float incl = local;
    for (int o = 1; o < 32; o <<= 1) {
        float v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    int lp = last_pos;
    for (int o = 16; o > 0; o >>= 1) lp = max(lp, __shfl_xor_sync(0xffffffffu, lp, o));
    if (lane == 31) sh.scratch[w] = incl;
    if (lane == 0) sh.idx[w] = lp;
    __syncthreads();
    float acc = 0.f, before = 0.f;
    int lastp = -1;
    for (int k = 0; k < nw; k++) {
        if (k == w) before = acc;
        acc += sh.scratch[k];
        lastp = max(lastp, sh.idx[k]);
    }
    const float excl = before + (incl - local);
    const float target = u * acc;
    if (excl <= target && excl + local > target) {
        float cl = 0.f;
#pragma unroll
        for (int j = 0; j < SAMPLE_PER_THREAD; j++) {
            if (j < C && x[j] > 0.f) {
                cl += x[j];
                if (excl + cl > target) { atomicMin(&sh.iv[0], lo + j); break; }
            }
        }
    }
    __syncthreads();
    int c = sh.iv[0] < V ? sh.iv[0] : lastp;
    __syncthreads();
    return c < 0 ? 0 : c;
}

// Code 0 for each row from talker logits [rows][V]; writes out[r * out_stride] and updates
// the slot's history (seen bits, sample count).
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_talker(
    const float* __restrict__ logits, int V, int rows, const int* __restrict__ slots,
    unsigned int* params, unsigned int* seen, int seen_words, int eos, int suppress_from,
    int min_new, int* out, int out_stride) {
    // the row's parameters and draw were written by earlier launches (see fused_attention)
    int r = blockIdx.x;
    if (r >= rows) return;
    int slot = slots[r];
    if (slot < 0) return;
    __shared__ SampleShared sh;
    unsigned int* p = params + slot * 16;
    unsigned int* sb = seen + (size_t)slot * seen_words;
    float penalty = __uint_as_float(p[6]);
    int count = (int)p[11];
    float u = draw_uniform(p[0], p[1], (unsigned int)count, 0u);
    // the seen bits of this thread's chunk (two words at most), also from earlier launches
    const int C = (V + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * C;
    unsigned int seen_first = 0, seen_last = 0;
    if (penalty != 1.0f && lo < V) {
        seen_first = sb[lo >> 5];
        seen_last = sb[min(lo + C - 1, V - 1) >> 5];
    }
    pdl_wait();
    pdl_trigger();
    float x[SAMPLE_PER_THREAD];
    load_chunk<false>(logits + (size_t)r * V, V, x);
#pragma unroll
    for (int j = 0; j < SAMPLE_PER_THREAD; j++) {
        const int i = lo + j;
        if (j >= C || i >= V) break;
        float l = x[j];
        const unsigned int word = (i >> 5) == (lo >> 5) ? seen_first : seen_last;
        if (penalty != 1.0f && ((word >> (i & 31)) & 1u)) l = l > 0.f ? l / penalty : l * penalty;
        if (i == eos && count < min_new) l = NEG_INF;
        if (i >= suppress_from && i != eos) l = NEG_INF;
        x[j] = l;
    }
    int c = choose(x, sh.s, V, p[2] != 0, __uint_as_float(p[4]), (int)p[3], __uint_as_float(p[5]), u, sh);
    if (threadIdx.x == 0) {
        out[r * out_stride] = c;
        sb[c >> 5] |= 1u << (c & 31);
        p[11] = (unsigned int)(count + 1);
    }
}

// Values each thread of sample_cp_row copies per round of copy_rows_loads_first: the
// 1.7B's two rows (1024 + 4096 values) in one round at SAMPLE_THREADS threads.
#define COPY_PER_THREAD 20

// dst_a[0..na) = src_a (f32 `fa`, else bf16 `ba` widened) and dst_b[0..nb) = fb (f32; nb
// may be 0), by the block. The sources are table rows picked by a code sampled just now,
// read from HBM: each thread issues every load of a round before its first store, so the
// copy waits about one memory round trip per round, not one per element.
__device__ __forceinline__ void copy_rows_loads_first(float* dst_a, const float* __restrict__ fa,
                                                      const bf16* __restrict__ ba, int na,
                                                      float* dst_b, const float* __restrict__ fb,
                                                      int nb) {
    const int total = na + nb, round = COPY_PER_THREAD * blockDim.x;
    if (fa && ((na | nb) & 3) == 0 &&
        ((reinterpret_cast<size_t>(dst_a) | reinterpret_cast<size_t>(fa) |
          reinterpret_cast<size_t>(dst_b) | reinterpret_cast<size_t>(fb)) & 15) == 0) {
        // f32 rows in 16-byte pieces: a quarter of the instructions
        const int na4 = na / 4, total4 = total / 4, round4 = round / 4;
        const float4* a4 = reinterpret_cast<const float4*>(fa);
        const float4* b4 = reinterpret_cast<const float4*>(fb);
        for (int first = threadIdx.x; first < total4; first += round4) {
            float4 v[COPY_PER_THREAD / 4];
#pragma unroll
            for (int u = 0; u < COPY_PER_THREAD / 4; u++) {
                const int i = first + u * blockDim.x;
                v[u] = i < na4 ? a4[i] : i < total4 ? b4[i - na4] : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < COPY_PER_THREAD / 4; u++) {
                const int i = first + u * blockDim.x;
                if (i < na4) reinterpret_cast<float4*>(dst_a)[i] = v[u];
                else if (i < total4) reinterpret_cast<float4*>(dst_b)[i - na4] = v[u];
            }
        }
        return;
    }
    for (int first = threadIdx.x; first < total; first += round) {
        float v[COPY_PER_THREAD];
#pragma unroll
        for (int u = 0; u < COPY_PER_THREAD; u++) {
            const int i = first + u * blockDim.x;
            v[u] = i < na ? (fa ? fa[i] : bf2f(ba[i])) : i < total ? fb[i - na] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < COPY_PER_THREAD; u++) {
            const int i = first + u * blockDim.x;
            if (i < na) dst_a[i] = v[u];
            else if (i < total) dst_b[i - na] = v[u];
        }
    }
}

// Code `step` (1..15) of each row's frame from code-predictor logits [rows][V]; writes
// frames[r][step]. The frame index for the draw is the slot's code-0 count minus one.
// For step < 15 it also writes the next step's input row: the embedding of this code from
// table step-1 (`folded` f32 [15][V][D] when given, else `raw` bf16) into next_x[r*ldx];
// with `qkv0` (f32 [14][V][Q]: the first layer's QKV projection of every such row,
// `weights.rs`) also that row's QKV into qkv[r*ldq], so the next step skips the first
// layer's projection.
// One row of sample_cp, by a block of SAMPLE_THREADS threads (also called by the
// persistent code-predictor loop, with its shared memory and CG: logits read through L2).
// Returns the code (the same in every thread), or -1 for a row it skipped.
template <bool CG>
__device__ int sample_cp_row(int r, const float* __restrict__ logits, int V, int rows,
                              const int* __restrict__ slots,
                              const unsigned int* __restrict__ params, int step, int* frames,
                              const float* __restrict__ folded, const bf16* __restrict__ raw,
                              int D, float* next_x, int ldx, const float* __restrict__ qkv0,
                              int Q, float* qkv, int ldq, SampleShared& sh) {
    if (r >= rows) return -1;
    int slot = slots[r];
    if (slot < 0) return -1;
    const unsigned int* p = params + slot * 16;
    float u = draw_uniform(p[0], p[1], p[11] - 1u, (unsigned int)step);
    // launched (not CG): the parameters and draw come from earlier launches, the logits
    // from the previous kernel (see fused_attention)
    if (!CG) {
        pdl_wait();
        pdl_trigger();
    }
    // CG: the persistent loop's blocks wrote these logits in the same launch
    float x[SAMPLE_PER_THREAD];
    load_chunk<CG>(logits + (size_t)r * V, V, x);
    int c = choose(x, sh.s, V, p[7] != 0, __uint_as_float(p[9]), (int)p[8], __uint_as_float(p[10]), u, sh);
    if (threadIdx.x == 0) frames[r * 16 + step] = c;
    if (step < 15) {
        const size_t base = ((size_t)(step - 1) * V + c) * D;
        copy_rows_loads_first(next_x + (size_t)r * ldx, folded ? folded + base : nullptr,
                              folded ? nullptr : raw + base, D,
                              qkv0 ? qkv + (size_t)r * ldq : nullptr,
                              qkv0 ? qkv0 + ((size_t)(step - 1) * V + c) * Q : nullptr,
                              qkv0 ? Q : 0);
    }
    return c;
}

// sample_cp_row for row blockIdx.x.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_cp(
    const float* __restrict__ logits, int V, int rows, const int* __restrict__ slots,
    const unsigned int* __restrict__ params, int step, int* frames,
    const float* __restrict__ folded, const bf16* __restrict__ raw, int D, float* next_x,
    int ldx, const float* __restrict__ qkv0, int Q, float* qkv, int ldq) {
    __shared__ SampleShared sh;
    sample_cp_row<false>(blockIdx.x, logits, V, rows, slots, params, step, frames, folded, raw,
                         D, next_x, ldx, qkv0, Q, qkv, ldq, sh);
}
