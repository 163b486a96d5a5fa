// mma_twins.hpp — emulated twins (cuda_names.hpp's EmuTwin mechanism) of the kernels' PTX
// helpers for warp-level tensor cores and their operands (included by cuda_names.hpp):
//   ldmatrix.sync.aligned.m8n8.x4.shared.b16           codec_conv.cu conv_ldsm4, tile.cu ldmatrix_x4
//   mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32  codec_conv.cu conv_mma, common.cuh mma_f16
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 mma_staged.cu ms_mma, mma.cu mma_bf16
//   cvt.rn.bf16x2.f32                                   mma_staged.cu ms_pack
//   cvta.to.shared.u64, cp.async.cg (16 bytes, src-size) codec_conv.cu conv_smem, conv_cp16
// Hopper's wgmma (tile_wg.cu) has its twins in wgmma_twins.hpp.
//
// The warp-collective ones (ldmatrix, mma) need the other lanes' registers: every lane of
// the warp publishes its operands in a per-warp slot and meets the others at a warp
// exchange (emu::warp_exchange, a fiber switch point); then each lane computes its own
// results from the published operands, exactly as the PTX ISA's fragment layouts say.
// The instructions are `.aligned`: all 32 lanes must execute the same one together, so a
// twin stops the run when a lane of the warp has exited or the lanes meeting are not all
// at the same instruction.
#pragma once

namespace emu_mma {

enum Op : uint32_t { LDSM_X4 = 1, MMA_F16 = 2, MMA_BF16 = 3 };

// One lane's operands at one exchange: the instruction, the warp's exchange generation
// (which tells this exchange from an older one), up to 6 registers.
struct Slot {
    uint32_t op, gen, w[6];
};
// Generation g's slots stay until every lane has read them: generation g + 2, the next to
// write them, cannot start before those lanes have arrived at g + 1 (as emu::Warp::vals).
struct WarpSlots {
    Slot s[2][32];
};
// per block (each block runs on an OS thread of its own)
inline thread_local std::vector<WarpSlots> tl_slots;

// Publishes this lane's `n` operand words for `op` and waits for the warp's other lanes;
// returns the 32 lanes' slots.
inline const Slot* collective(Op op, const uint32_t* words, int n) {
    emu::Block& b = emu::blk();
    const unsigned t = emu::linear_tid(), lane = t & 31, w = t >> 5;
    if (b.warps[w].live != 0xffffffffu)
        emu::fail("a warp-collective tensor-core instruction (.aligned) without all 32 lanes of the warp");
    if (tl_slots.size() < b.warps.size()) tl_slots.resize(b.warps.size());
    const unsigned g = b.warps[w].gen;
    Slot& mine = tl_slots[w].s[g & 1][lane];
    mine.op = op;
    mine.gen = g;
    for (int i = 0; i < n; i++) mine.w[i] = words[i];
    emu::warp_exchange(0xffffffffu, 0);
    const Slot* all = tl_slots[w].s[g & 1];
    for (unsigned l = 0; l < 32; l++)
        if (all[l].op != op || all[l].gen != g)
            emu::fail("the lanes of a warp at different warp-collective instructions");
    return all;
}

// ldmatrix .x4 (not .trans): lanes 8i .. 8i+7 give the shared addresses of rows 0..7 of
// matrix i (16 bytes each, 16-byte aligned); lane l receives in r[i] the 32 bits of matrix
// i's row l/4 at columns 2(l%4), 2(l%4)+1 (the lower column in the low half).
inline void ldsm_x4(unsigned addr, unsigned* r) {
    const uint32_t a = addr;
    const Slot* all = collective(LDSM_X4, &a, 1);
    const unsigned lane = emu::linear_tid() & 31;
    for (int i = 0; i < 4; i++) {
        const unsigned row = all[8 * i + (lane >> 2)].w[0];
        const unsigned char* p = emu::shared_ptr(row);
        if ((uintptr_t)p & 15u) emu::fail("an ldmatrix row address that is not 16-byte aligned");
        emu::shared_ptr(row + 15);  // the whole row inside the shared memory
        std::memcpy(&r[i], p + 4 * (lane & 3), 4);
    }
}

// f32 of every f16 bit pattern (cuda_names.hpp's exact half_bits_to_f32), built once: a
// lookup is much cheaper than the conversion, and the twins convert 128 values per lane
// and mma.
inline const float* f16_table() {
    static const std::vector<float> t = [] {
        std::vector<float> v(65536);
        for (unsigned h = 0; h < 65536; h++) v[h] = half_bits_to_f32(h);
        return v;
    }();
    return t.data();
}

// Element e (0: low half, 1: high half) of a register of two f16 or bf16 values, exactly.
template <bool BF16>
inline float elem(uint32_t reg, int e) {
    const unsigned h = reg >> (16 * e) & 0xffffu;
    if (BF16) return __uint_as_float(h << 16);
    return f16_table()[h];
}

// mma.m16n8k16 .row.col, f32 accumulators: D = A (16 x 16) · B (16 x 8) + C, in place on c.
// groupID g = lane / 4, threadID_in_group t = lane % 4. Each register holds two elements,
// the lower k index in its low half:
//   A: a0 (row g, k 2t..2t+1), a1 (row g+8, k 2t..), a2 (row g, k 2t+8..), a3 (row g+8, k 2t+8..)
//   B: b0 (k 2t..2t+1, column g), b1 (k 2t+8..2t+9, column g)
//   C, D: c0 (row g, column 2t), c1 (row g, 2t+1), c2 (row g+8, 2t), c3 (row g+8, 2t+1)
// The products of 16-bit floats are exact in f32 (within its range), so adding each to
// the accumulator in f32 is fmaf's single rounding; an output's 16 products are added in
// k order (the hardware's order is unspecified: references allow any).
template <bool BF16>
inline void mma_m16n8k16(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                         uint32_t b1) {
    const uint32_t words[6] = {a0, a1, a2, a3, b0, b1};
    const Slot* all = collective(BF16 ? MMA_BF16 : MMA_F16, words, 6);
    const unsigned lane = emu::linear_tid() & 31, g = lane >> 2, t = lane & 3;
    // this lane's rows g, g+8 of A and columns 2t, 2t+1 of B, over k = 0..15:
    //   A[row][k] in lane (row % 8)·4 + (k % 8)/2, register (row >= 8) + 2 (k >= 8), half k % 2
    //   B[k][col] in lane col·4 + (k % 8)/2, register b0 + (k >= 8), half k % 2
    float A[2][16], B[2][16];
    for (unsigned k = 0; k < 16; k++)
        for (unsigned h = 0; h < 2; h++) {
            A[h][k] = elem<BF16>(all[g * 4 + ((k & 7) >> 1)].w[h + 2 * (k >> 3)], k & 1);
            B[h][k] = elem<BF16>(all[(2 * t + h) * 4 + ((k & 7) >> 1)].w[4 + (k >> 3)], k & 1);
        }
    // c[i]: row g + 8 (i / 2), column 2t + i % 2
    for (unsigned i = 0; i < 4; i++) {
        float acc = c[i];
        for (unsigned k = 0; k < 16; k++) acc += A[i >> 1][k] * B[i & 1][k];
        c[i] = acc;
    }
}

// cvt.rn.bf16.f32: the nearest bf16, ties to even (overflow to infinity); NaN as the
// canonical 0x7fff.
inline uint32_t bf16_rn(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    u += 0x7fffu + (u >> 16 & 1u);
    return u >> 16;
}

}  // namespace emu_mma

// ---- the twins (signatures of the kernel sources' helpers, plus EmuTwin)
// codec_conv.cu
inline unsigned conv_smem(const void* p, EmuTwin) { return emu::shared_addr(p); }
inline void conv_cp16(unsigned dst, const void* src, int bytes, EmuTwin) {
    if (bytes < 0 || bytes > 16) emu::fail("a cp.async src-size outside 0..16");
    cp_async16(dst, src, bytes);  // zero-fills past `bytes`; complete at once
}
inline void conv_ldsm4(unsigned addr, unsigned* r, EmuTwin) { emu_mma::ldsm_x4(addr, r); }
inline void conv_mma(float* c, const unsigned* a, unsigned b0, unsigned b1, EmuTwin) {
    emu_mma::mma_m16n8k16<false>(c, a[0], a[1], a[2], a[3], b0, b1);
}
// common.cuh (gemv8_mma.cu, codec_gemv_mma.cu)
inline void mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1,
                    EmuTwin) {
    emu_mma::mma_m16n8k16<false>(c, a0, a1, a2, a3, b0, b1);
}
// mma_staged.cu
inline void ms_mma(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1,
                   EmuTwin) {
    emu_mma::mma_m16n8k16<true>(c, a0, a1, a2, a3, b0, b1);
}
// The source's `cvt.rn.bf16x2.f32 d, b, a` (operands in that order): the first source
// operand into the upper half, the second into the lower.
inline unsigned ms_pack(float a, float b, EmuTwin) { return emu_mma::bf16_rn(b) << 16 | emu_mma::bf16_rn(a); }
// mma.cu (also used by wide.cu)
inline void mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1,
                     EmuTwin) {
    emu_mma::mma_m16n8k16<true>(c, a0, a1, a2, a3, b0, b1);
}
// tile.cu (its sm_90 section, compiled for the tile_wg tests: main.rs's SM90A_SOURCES)
inline void ldmatrix_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, EmuTwin) {
    unsigned r[4];
    emu_mma::ldsm_x4(addr, r);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
#define conv_smem(...) conv_smem(__VA_ARGS__, EmuTwin())
#define conv_cp16(...) conv_cp16(__VA_ARGS__, EmuTwin())
#define conv_ldsm4(...) conv_ldsm4(__VA_ARGS__, EmuTwin())
#define conv_mma(...) conv_mma(__VA_ARGS__, EmuTwin())
#define mma_f16(...) mma_f16(__VA_ARGS__, EmuTwin())
#define ms_mma(...) ms_mma(__VA_ARGS__, EmuTwin())
#define ms_pack(...) ms_pack(__VA_ARGS__, EmuTwin())
#define mma_bf16(...) mma_bf16(__VA_ARGS__, EmuTwin())
#define ldmatrix_x4(...) ldmatrix_x4(__VA_ARGS__, EmuTwin())
