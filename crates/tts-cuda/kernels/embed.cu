// embed.cu — embedding gathers and sums, f32 out.
//
// Tables are bf16 row-major [rows][D] unless named f32. Ids < 0 mean "no row" (adds
// nothing). One block per output row, threads stride over D.

// out[r][:] = (accumulate ? out[r][:] : 0) + table[ids[r]][:]
extern "C" __global__ void gather_rows(const bf16* __restrict__ table, int D,
                                       const int* __restrict__ ids, int rows, float* out,
                                       int ldo, int accumulate) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    int id = ids[r];
    float* o = out + (size_t)r * ldo;
    const bf16* t = table + (size_t)(id < 0 ? 0 : id) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = id < 0 ? 0.f : bf2f(t[i]);
        o[i] = accumulate ? o[i] + v : v;
    }
}

// The same from an f32 table.
extern "C" __global__ void gather_rows_f32(const float* __restrict__ table, int D,
                                           const int* __restrict__ ids, int rows, float* out,
                                           int ldo, int accumulate) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    int id = ids[r];
    float* o = out + (size_t)r * ldo;
    const float* t = table + (size_t)(id < 0 ? 0 : id) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = id < 0 ? 0.f : t[i];
        o[i] = accumulate ? o[i] + v : v;
    }
}

// Talker input of a generation step, per row r with frame codes f = frames[r][0..16]:
//   out[r] = C(f0) + sum_j E_j(f_{j+1}) + text[r]
// codec: [vocab][H]; cp_emb: 15 tables [2048][H] back to back. Summed in that order.
extern "C" __global__ void frame_embedding(const bf16* __restrict__ codec,
                                           const bf16* __restrict__ cp_emb, int H,
                                           const int* __restrict__ frames,
                                           const float* __restrict__ text, int ldt, float* out,
                                           int ldo, int rows, int cp_vocab) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    const int* f = frames + r * 16;
    __shared__ int codes[16];
    if (threadIdx.x < 16) codes[threadIdx.x] = f[threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = bf2f(codec[(size_t)codes[0] * H + i]);
        for (int j = 0; j < 15; j++)
            v += bf2f(cp_emb[((size_t)j * cp_vocab + codes[j + 1]) * H + i]);
        out[(size_t)r * ldo + i] = v + text[(size_t)r * ldt + i];
    }
}

// Copies rows: dst[r*ldd + i] = src[r*lds + i] for i < D (strided row copy).
extern "C" __global__ void copy_rows(const float* __restrict__ src, int lds, float* dst, int ldd,
                                     int D, int rows) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    for (int i = threadIdx.x; i < D; i += blockDim.x) dst[(size_t)r * ldd + i] = src[(size_t)r * lds + i];
}

// out[r*ldo + i] = table[ids[r]*ldt + i] for i < D (32-bit words: f32 or int); rows with
// ids[r] < 0 are left untouched.
extern "C" __global__ void gather_u32(const unsigned int* __restrict__ table, int ldt, int D,
                                      const int* __restrict__ ids, int rows,
                                      unsigned int* out, int ldo) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows || ids[r] < 0) return;
    const unsigned int* t = table + (size_t)ids[r] * ldt;
    for (int i = threadIdx.x; i < D; i += blockDim.x) out[(size_t)r * ldo + i] = t[i];
}

// table[ids[r]*ldt + i] = src[r*lds + i] for i < D; rows with ids[r] < 0 write nothing.
extern "C" __global__ void scatter_u32(const unsigned int* __restrict__ src, int lds, int D,
                                       const int* __restrict__ ids, int rows,
                                       unsigned int* table, int ldt) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows || ids[r] < 0) return;
    unsigned int* t = table + (size_t)ids[r] * ldt;
    for (int i = threadIdx.x; i < D; i += blockDim.x) t[i] = src[(size_t)r * lds + i];
}

// Code-predictor first step, second token of each row: the code-0 embedding, from the
// folded f32 table [2048][D] (1.7B: projection applied) or the talker's bf16 codec table.
// Writes out[(2r+1)*D .. ] (the rows are interleaved [hidden_r, code0_r]).
extern "C" __global__ void cp_first_input(const float* __restrict__ folded,
                                          const bf16* __restrict__ raw, int D,
                                          const int* __restrict__ frames, int rows, float* out) {
    pdl_wait();
    pdl_trigger();
    int r = blockIdx.x;
    if (r >= rows) return;
    int code = frames[r * 16];
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        out[(size_t)(2 * r + 1) * D + i] = folded ? folded[(size_t)code * D + i] : bf2f(raw[(size_t)code * D + i]);
}
