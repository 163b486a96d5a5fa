// The tensor-core twins (mma_twins.hpp) on small warp kernels, against the PTX ISA's
// layouts written out here independently, before any real kernel relies on them:
//   ldmatrix .x4: lanes 8i..8i+7 give the rows of matrix i; lane l gets, from each
//     matrix, row l/4 at columns 2(l%4), +1 (scattered rows, two warps);
//   mma.m16n8k16 row.col (f16 and bf16): fragments placed by the ISA's tables, values whose
//     sums are exact in f32 (so the result must be exact), then random values;
//   ldmatrix then mma as the codec's convolutions chain them (A row-major, B as rows of
//     outputs): a 16 x 16 x 16 product against a direct one;
//   cvt.rn.bf16x2.f32 (ms_pack): halves and ties to even; cp.async's zero fill.

#include "codec_ref.hpp"

namespace {

// Matrix i's element (row, col) in the ldmatrix test: every element distinct.
uint16_t ldsm_value(int warp, int i, int row, int col) { return (uint16_t)(warp << 14 | i << 10 | row << 4 | col); }
// Where row `row` of matrix i of warp `warp` sits (16-byte units): scattered, not in order.
int ldsm_slot(int warp, int i, int row) { return (warp * 32 + ((i * 8 + row) * 13) % 32) * 2 + 1; }

void ldmatrix_pattern() {
    constexpr int WARPS = 2;
    std::vector<unsigned> got(WARPS * 32 * 4);
    emu::launch(dim3(1), dim3(32 * WARPS), WARPS * 64 * 16, 1, [&] {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        unsigned char* sm = emu::dynamic_smem();
        // every lane writes one row of its warp's matrices, then the warp loads them
        const int i = lane >> 3, row = lane & 7;
        uint16_t* dst = (uint16_t*)(sm + 16 * ldsm_slot(warp, i, row));
        for (int c = 0; c < 8; c++) dst[c] = ldsm_value(warp, i, row, c);
        __syncwarp();
        unsigned r[4];
        conv_ldsm4(conv_smem(dst), r);
        for (int q = 0; q < 4; q++) got[(warp * 32 + lane) * 4 + q] = r[q];
    });
    bool ok = true;
    for (int w = 0; w < WARPS; w++)
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) {
                const int row = l / 4, col = 2 * (l % 4);
                const unsigned want = ldsm_value(w, i, row, col) | (unsigned)ldsm_value(w, i, row, col + 1) << 16;
                ok &= got[(w * 32 + l) * 4 + i] == want;
            }
    check::expect(ok, "ldmatrix.x4: each lane's four registers hold row lane/4, columns 2(lane%4), +1 of each matrix");
    // tile.cu's form of the same instruction
    std::vector<unsigned> got2(32 * 4);
    emu::launch(dim3(1), dim3(32), 64 * 16, 1, [&] {
        const int lane = threadIdx.x;
        uint16_t* dst = (uint16_t*)(emu::dynamic_smem() + 16 * ldsm_slot(0, lane >> 3, lane & 7));
        for (int c = 0; c < 8; c++) dst[c] = ldsm_value(0, lane >> 3, lane & 7, c);
        __syncwarp();
        unsigned* o = &got2[lane * 4];
        ldmatrix_x4(conv_smem(dst), o[0], o[1], o[2], o[3]);
    });
    check::expect(std::memcmp(got.data(), got2.data(), got2.size() * 4) == 0,
                  "tile.cu's ldmatrix_x4 loads as conv_ldsm4");
}

// f16 or bf16 bits of v (exact for the values used here), and back.
uint16_t to16(double v, bool bf16) { return bf16 ? check::to_bf16((float)v) : codec::to_f16(v); }
double from16(uint16_t h, bool bf16) { return bf16 ? check::from_bf16(h) : codec::from_f16(h); }

enum class Mma { F16, BF16, BF16_MMA_CU };

// One m16n8k16 on A (16 x 16), B (16 x 8, k x n), C (16 x 8), with the fragments placed by
// the PTX ISA's tables (groupID g = lane / 4, t = lane % 4; lower k in the low half):
//   a0 (g, 2t), a1 (g+8, 2t), a2 (g, 2t+8), a3 (g+8, 2t+8); b0 (k 2t, col g), b1 (k 2t+8, col g);
//   c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).
std::vector<float> mma_by_table(Mma kind, const std::vector<uint16_t>& A, const std::vector<uint16_t>& B,
                                const std::vector<float>& C) {
    std::vector<float> D(16 * 8);
    emu::launch(dim3(1), dim3(32), 0, 1, [&] {
        const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
        auto pa = [&](int row, int k) { return (unsigned)A[row * 16 + k] | (unsigned)A[row * 16 + k + 1] << 16; };
        auto pb = [&](int k, int col) { return (unsigned)B[k * 8 + col] | (unsigned)B[(k + 1) * 8 + col] << 16; };
        const unsigned a[4] = {pa(g, 2 * t), pa(g + 8, 2 * t), pa(g, 2 * t + 8), pa(g + 8, 2 * t + 8)};
        const unsigned b0 = pb(2 * t, g), b1 = pb(2 * t + 8, g);
        float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
        if (kind == Mma::F16) conv_mma(c, a, b0, b1);
        else if (kind == Mma::BF16) ms_mma(c, a[0], a[1], a[2], a[3], b0, b1);
        else mma_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
        D[g * 8 + 2 * t] = c[0], D[g * 8 + 2 * t + 1] = c[1];
        D[(g + 8) * 8 + 2 * t] = c[2], D[(g + 8) * 8 + 2 * t + 1] = c[3];
    });
    return D;
}

void mma_fragments() {
    check::Rng rng(7);
    for (Mma kind : {Mma::F16, Mma::BF16, Mma::BF16_MMA_CU}) {
        const bool bf16 = kind != Mma::F16;
        const char* name = kind == Mma::F16 ? "conv_mma (f16)" : kind == Mma::BF16 ? "ms_mma (bf16)" : "mma_bf16 (bf16)";
        for (int exact = 1; exact >= 0; exact--) {
            // exact: small integers (every product and sum exact in f32, so any order gives the
            // same bits), all distinct enough that a misplaced element shows; else random values
            // (f16: some subnormal)
            std::vector<uint16_t> A(256), B(128);
            std::vector<float> C(128);
            for (int i = 0; i < 256; i++) {
                const double v = exact ? (double)((i * 37) % 29 - 14) : rng.sym(2.0f) * (i % 17 == 0 ? 1e-6 : 1.0);
                A[i] = to16(v, bf16);
            }
            for (int i = 0; i < 128; i++) {
                B[i] = to16(exact ? (double)((i * 11) % 23 - 11) * 0.25 : rng.sym(2.0f), bf16);
                C[i] = exact ? (float)(i * 3 - 100) : rng.sym(10.0f);
            }
            const std::vector<float> D = mma_by_table(kind, A, B, C);
            std::vector<double> want(128);
            double bound = 0;  // f32 rounding of 17 additions, any order
            for (int r = 0; r < 16; r++)
                for (int n = 0; n < 8; n++) {
                    double s = C[r * 8 + n], mag = std::fabs(s);
                    for (int k = 0; k < 16; k++) {
                        const double p = from16(A[r * 16 + k], bf16) * from16(B[k * 8 + n], bf16);
                        s += p;
                        mag += std::fabs(p);
                    }
                    want[r * 8 + n] = s;
                    bound = std::fmax(bound, 17 * std::ldexp(mag, -24));
                }
            if (exact) {
                bool same = true;
                for (int i = 0; i < 128; i++) same &= (double)D[i] == want[i];
                check::expect(same, std::string(name) + ": D = A·B + C exactly on the ISA's fragment layout");
            } else {
                double scale = 1;
                for (double w : want) scale = std::fmax(scale, std::fabs(w));
                check::close(std::string(name) + ": random values", D, want, bound / scale);
            }
        }
    }
}

// The codec's convolution chain (codec_conv.cu's conv_chunk_mma, one k16 step of one warp
// and one 16 x 16 output tile): A (16 steps x 16 k) row-major and B (16 outputs x 16 k)
// rows in shared memory at a row stride of 40 halves; ldmatrix x4 of A gives a0..a3 (rows
// 0-7 / 8-15 x k 0-7 / 8-15), of B the b0, b1 of two n8 tiles; D = A · Bᵀ.
void ldmatrix_then_mma() {
    constexpr int LDS = 40;
    check::Rng rng(11);
    std::vector<uint16_t> A(256), B(256);
    for (auto& v : A) v = codec::to_f16(rng.sym(1.0f));
    for (auto& v : B) v = codec::to_f16(rng.sym(1.0f));
    std::vector<float> D(256);
    emu::launch(dim3(1), dim3(32), 32 * LDS * 2, 1, [&] {
        const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
        uint16_t* sm = (uint16_t*)emu::dynamic_smem();
        for (int e = lane; e < 256; e += 32) {
            sm[(e / 16) * LDS + e % 16] = A[e];
            sm[(16 + e / 16) * LDS + e % 16] = B[e];
        }
        __syncwarp();
        const int lrow = lane & 7, lmat = lane >> 3;
        const unsigned base = conv_smem(sm);
        unsigned a[4], b[4];
        conv_ldsm4(base + 2 * (((lmat & 1) * 8 + lrow) * LDS + (lmat >> 1) * 8), a);
        conv_ldsm4(base + 2 * ((16 + (lmat >> 1) * 8 + lrow) * LDS + (lmat & 1) * 8), b);
        for (int ni = 0; ni < 2; ni++) {
            float c[4] = {0, 0, 0, 0};
            conv_mma(c, a, b[2 * ni], b[2 * ni + 1]);
            D[g * 16 + ni * 8 + 2 * t] = c[0], D[g * 16 + ni * 8 + 2 * t + 1] = c[1];
            D[(g + 8) * 16 + ni * 8 + 2 * t] = c[2], D[(g + 8) * 16 + ni * 8 + 2 * t + 1] = c[3];
        }
    });
    std::vector<double> want(256);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            double s = 0;
            for (int k = 0; k < 16; k++) s += codec::from_f16(A[m * 16 + k]) * codec::from_f16(B[n * 16 + k]);
            want[m * 16 + n] = s;
        }
    check::close("ldmatrix then mma (the convolutions' chain): D = A · Bᵀ", D, want, 1e-6);
}

void pack_and_copy() {
    auto u = [](unsigned bits) { return __uint_as_float(bits); };
    struct Case {
        float a, b;
        unsigned want;
    } cases[] = {
        {1.0f, -2.0f, 0xc0003f80u},            // a in the low half, b in the high
        {u(0x3f808000u), 0.f, 0x00003f80u},    // a tie: to the even 0x3f80
        {u(0x3f818000u), 0.f, 0x00003f82u},    // a tie: to the even 0x3f82
        {u(0x3f808001u), -0.f, 0x80003f81u},   // above the tie: up; -0 kept
        {u(0x7f7fffffu), u(0x7fc00001u), 0x7fff7f80u},  // overflow to infinity; NaN canonical
        {u(0x00000001u), u(0xbf7fffffu), 0xbf800000u},  // a subnormal to 0; -0.99999994 to -1
    };
    bool ok = true;
    for (const Case& c : cases) ok &= ms_pack(c.a, c.b) == c.want;
    check::expect(ok, "ms_pack (cvt.rn.bf16x2.f32): halves, ties to even, overflow, NaN");

    alignas(16) unsigned char src[16];
    for (int i = 0; i < 16; i++) src[i] = (unsigned char)(i + 1);
    std::vector<unsigned char> got(48);
    emu::launch(dim3(1), dim3(1), 48, 1, [&] {
        const unsigned base = conv_smem(emu::dynamic_smem());
        conv_cp16(base, src, 16);
        conv_cp16(base + 16, src, 8);
        conv_cp16(base + 32, src, 0);
        std::memcpy(got.data(), emu::dynamic_smem(), 48);
    });
    bool copy = true;
    for (int i = 0; i < 48; i++) copy &= got[i] == (i < 16 ? i + 1 : i < 24 ? i - 15 : 0);
    check::expect(copy, "conv_cp16: src-size bytes copied, the rest of the 16 zero-filled");
}

}  // namespace

int main() {
    ldmatrix_pattern();
    mma_fragments();
    ldmatrix_then_mma();
    pack_and_copy();
    return check::failures() ? 1 : 0;
}
