// attention.cu — QK-norm + RoPE + KV-cache write, and causal attention over the cache.
//
// A "token" is one query row: (slot, position). Decoding has one token per request; a
// prefill has one token per prompt position (all of one slot); the code predictor's first
// step has two tokens per request. Every token's K/V are written first (qk_norm_rope_kv),
// then each token attends to cache positions 0..pos of its slot (decode_attention), so one
// pair of kernels serves all three cases.
//
// qkv: f32 [T][ldq] with q at column 0 (heads*hd), k at heads*hd (kvh*hd), v after it.
// Cache: bf16, `cache + (slot * max_pos + pos) * kvh*hd` per layer (the caller passes the
// layer's base). inv_freq: f32 [hd/2] (RoPE, rotate-half pairing i <-> i + hd/2).

// One block per token, 128 threads. Normalises and rotates q in place; normalises, rotates
// and stores k, stores v, both as bf16 in the slot's cache row `pos`.
extern "C" __global__ void qk_norm_rope_kv(float* qkv, int ldq, int T,
                                           const int* __restrict__ slots,
                                           const int* __restrict__ positions,
                                           const float* __restrict__ q_norm,
                                           const float* __restrict__ k_norm, float eps,
                                           const float* __restrict__ inv_freq, int heads, int kvh,
                                           int hd, bf16* k_cache, bf16* v_cache, int max_pos) {
    int t = blockIdx.x;
    if (t >= T) return;
    int slot = slots[t];
    if (slot < 0) return;
    int pos = positions[t];
    float* row = qkv + (size_t)t * ldq;
    int half = hd / 2;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    // One warp per head: q heads first, then k heads.
    for (int h = warp; h < heads + kvh; h += nw) {
        bool is_q = h < heads;
        float* x = row + (is_q ? h * hd : heads * hd + (h - heads) * hd);
        const float* w = is_q ? q_norm : k_norm;
        float s = 0.f;
        for (int i = lane; i < hd; i += 32) s += x[i] * x[i];
        s = warp_sum(s);
        float inv = 1.0f / sqrtf(s / (float)hd + eps);
        __syncwarp();
        // rotate pairs (i, i + half); lane handles i = lane, lane + 32, ...
        for (int i = lane; i < half; i += 32) {
            float a = w[i] * (x[i] * inv), b = w[i + half] * (x[i + half] * inv);
            float ang = (float)pos * inv_freq[i];
            float c = cosf(ang), sn = sinf(ang);
            float ra = a * c - b * sn, rb = b * c + a * sn;
            if (is_q) {
                x[i] = ra;
                x[i + half] = rb;
            } else {
                size_t off = ((size_t)slot * max_pos + pos) * (size_t)(kvh * hd) + (size_t)(h - heads) * hd;
                k_cache[off + i] = f2bf(ra);
                k_cache[off + i + half] = f2bf(rb);
            }
        }
    }
    // v: plain copy to the cache
    const float* v = row + (heads + kvh) * hd;
    size_t voff = ((size_t)slot * max_pos + pos) * (size_t)(kvh * hd);
    for (int i = threadIdx.x; i < kvh * hd; i += blockDim.x) v_cache[voff + i] = f2bf(v[i]);
}

// Grid (heads, T), 128 threads (4 warps). Token t, head h attends to positions
// lo..pos of its slot, lo = window ? max(0, pos+1-window) : 0. Each warp takes every 4th
// position with an online softmax; warps are merged at the end. out: f32 [T][ldo], head h
// at column h*hd. Lanes hold head dims lane, lane+32, ... (hd <= 128).
extern "C" __global__ void decode_attention(const float* __restrict__ qkv, int ldq, int T,
                                            const int* __restrict__ slots,
                                            const int* __restrict__ positions,
                                            const bf16* __restrict__ k_cache,
                                            const bf16* __restrict__ v_cache, int max_pos,
                                            int heads, int kvh, int hd, int window, float* out,
                                            int ldo) {
    int h = blockIdx.x, t = blockIdx.y;
    if (t >= T) return;
    int slot = slots[t];
    if (slot < 0) return;
    int pos = positions[t];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int NW = 4, E = 4;  // warps, max elements per lane (hd <= 128)
    int kvd = kvh * hd, g = h / (heads / kvh);
    const float* q = qkv + (size_t)t * ldq + h * hd;
    float qv[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        int i = lane + 32 * e;
        qv[e] = i < hd ? q[i] : 0.f;
        acc[e] = 0.f;
    }
    float scale = 1.0f / sqrtf((float)hd);
    float mx = NEG_INF, l = 0.f;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    const bf16* kbase = k_cache + (size_t)slot * max_pos * kvd + (size_t)g * hd;
    const bf16* vbase = v_cache + (size_t)slot * max_pos * kvd + (size_t)g * hd;
    for (int p = lo + warp; p <= pos; p += NW) {
        const bf16* kr = kbase + (size_t)p * kvd;
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int i = lane + 32 * e;
            if (i < hd) s += qv[e] * bf2f(kr[i]);
        }
        s = warp_sum(s) * scale;
        float nm = fmaxf(mx, s);
        float corr = expf(mx - nm), w = expf(s - nm);
        l = l * corr + w;
        const bf16* vr = vbase + (size_t)p * kvd;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int i = lane + 32 * e;
            acc[e] = acc[e] * corr + (i < hd ? w * bf2f(vr[i]) : 0.f);
        }
        mx = nm;
    }
    __shared__ float s_m[NW], s_l[NW], s_acc[NW][128];
    if (lane == 0) { s_m[warp] = mx; s_l[warp] = l; }
#pragma unroll
    for (int e = 0; e < E; e++) {
        int i = lane + 32 * e;
        if (i < 128) s_acc[warp][i] = acc[e];
    }
    __syncthreads();
    if (warp == 0) {
        float M = NEG_INF;
        for (int w2 = 0; w2 < NW; w2++) M = fmaxf(M, s_m[w2]);
        float L = 0.f;
        float o[E] = {0.f, 0.f, 0.f, 0.f};
        for (int w2 = 0; w2 < NW; w2++) {
            if (s_m[w2] == NEG_INF) continue;
            float c = expf(s_m[w2] - M);
            L += s_l[w2] * c;
#pragma unroll
            for (int e = 0; e < E; e++) {
                int i = lane + 32 * e;
                if (i < hd) o[e] += s_acc[w2][i] * c;
            }
        }
        float* dst = out + (size_t)t * ldo + h * hd;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int i = lane + 32 * e;
            if (i < hd) dst[i] = o[e] / L;
        }
    }
}
