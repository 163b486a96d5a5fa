// wgmma_twins.hpp — emulated twins (cuda_names.hpp's EmuTwin mechanism) of tile_wg.cu's
// sm_90a helpers (included by cuda_names.hpp):
//   wgmma.mma_async.sync.aligned.m64n{32,48,64,128}k16.f32.bf16.bf16, both operands from
//     shared memory through matrix descriptors                       wg_mma<MT>, wg_desc
//   wgmma.fence / commit_group / wait_group 0                         wg_fence, wg_commit_and_wait
//   fence.proxy.async.shared::cta                                     fence_proxy_async_smem
//   mapa + st.shared::cluster.f32                                     st_cluster_rank
// tile_wg.cu's code is under `#if defined(__CUDA_ARCH_FEAT_SM90_ALL)` and the tile.cu helpers
// it uses under `#if __CUDA_ARCH__ >= 900`: the harness compiles those two files (only) with
// both macros defined (kernels_emulated/main.rs, `SM90A_SOURCES`).
//
// The fences, commits and waits do nothing here: the emulated copies complete when issued
// and a twin's wgmma completes when issued, so what a thread reads after the barrier that
// publishes a stage is already in shared memory, and its accumulators are final at once.
//
// wgmma reads both operands from shared memory, so each thread computes its own
// accumulator registers from them, with no exchange: in warp w of its warpgroup (4 warps,
// the first a multiple of 4), lane l holds (PTX ISA, "wgmma register fragment layout for
// the accumulator D", m64nNk16) d[4j + q] = D[row 16w + l/4 + 8(q/2)][col 8j + 2(l%4) + q%2],
// j < N/8, with D (64 × N) += A (64 × 16) · B (16 × N) and B given K-major, i.e. stored as
// N rows of 16 k like A: D[m][n] += Σ_k A[m][k] B[n][k]. The products of bf16 values are
// exact in f32; each is added to the accumulator in k order (the hardware's order and
// internal precision are unspecified: the tests' references allow any f32 order).
//
// The descriptor (64 bits): start address >> 4 (bits 0-13), leading byte offset >> 4
// (16-29), stride byte offset >> 4 (32-45), base offset (49-51), swizzle mode (62-63:
// 1 = 128-byte). The twin implements the form tile_wg.cu uses, K-major with the 128-byte
// swizzle: row r of the operand at start + (r / 8)·SBO + (r % 8)·128, element k 2k bytes
// further, and the 16-byte chunk bits 4-6 of that address XORed with its bits 7-9; the
// leading byte offset is not used by this form (PTX ISA: swizzled K-major layouts). It
// stops the run on any other form: another swizzle mode, a base offset, reserved bits set,
// a start not within the first 128 bytes of a 1024-byte pattern (a misaligned tile), or a
// k16 slice crossing its 128-byte row. The descriptor's address (18 bits, kept >> 4) is
// read as an offset in the block's dynamic shared memory (the emulator's dynamic shared
// addresses start at offset 0, which is 1024-byte aligned, so address bits 7-9 are the
// offset's; the kernels' operands are all there).
//
// wgmma is `.sync.aligned`: the 128 threads of a warpgroup issue the same instruction with
// the same descriptors; the twin stops the run when a thread's n-th wgmma differs from the
// n-th of the first thread of its warpgroup to get there.
#pragma once

namespace emu_wg {

// A decoded descriptor of the implemented form: byte offsets in dynamic shared memory.
struct Desc {
    unsigned start, sbo;
};

inline Desc decode(unsigned long long bits) {
    const unsigned long long reserved = 3ull << 14 | 3ull << 30 | 7ull << 46 | 0x3ffull << 52;
    char msg[200];
    const unsigned start = (unsigned)(bits & 0x3fff) << 4, sbo = (unsigned)(bits >> 32 & 0x3fff) << 4;
    const unsigned base_offset = (unsigned)(bits >> 49 & 7), swizzle = (unsigned)(bits >> 62);
    const char* why = swizzle != 1      ? "a swizzle mode other than 128-byte"
                      : base_offset     ? "a base offset"
                      : bits & reserved ? "reserved bits set"
                      : start & 0x380   ? "a start past the first 128 bytes of its 1024-byte pattern"
                      : (start & 127) + 32 > 128 ? "a k16 slice crossing its 128-byte row"
                                                  : nullptr;
    if (why) {
        std::snprintf(msg, sizeof msg, "a wgmma descriptor form the twin does not implement (%s): 0x%016llx", why,
                      bits);
        emu::fail(msg);
    }
    return Desc{start, sbo};
}

// Element (row r, k) of the operand `d` (bf16 bits) as f32, through the 128-byte swizzle.
inline float elem(const Desc& d, unsigned r, unsigned k) {
    const unsigned logical = d.start + (r >> 3) * d.sbo + (r & 7) * 128 + 2 * k;
    const unsigned physical = logical ^ ((logical >> 7 & 7u) << 4);
    uint16_t h;
    std::memcpy(&h, emu::shared_ptr(1u << 30 | physical), 2);
    return __uint_as_float((unsigned)h << 16);
}

// The wgmma instructions issued so far, per warpgroup of this block (each block runs on an
// OS thread of its own), and how many each thread has issued.
struct Issued {
    std::vector<std::vector<unsigned long long>> by_group;  // (N, a, b) per instruction
    std::vector<unsigned> by_thread;
};
inline thread_local Issued tl_issued;

// Stops the run unless this is the instruction the thread's warpgroup issued at this point.
inline void check_aligned(unsigned N, unsigned long long a, unsigned long long b) {
    emu::Block& blk = emu::blk();
    const unsigned threads = blk.dim.x * blk.dim.y * blk.dim.z, t = emu::linear_tid();
    if (threads % 128 != 0) emu::fail("wgmma in a block that is not whole warpgroups of 128 threads");
    Issued& is = tl_issued;
    if (is.by_thread.size() != threads) is.by_thread.assign(threads, 0), is.by_group.assign(threads / 128, {});
    std::vector<unsigned long long>& log = is.by_group[t / 128];
    const size_t i = 3 * (size_t)is.by_thread[t]++;
    if (i == log.size()) {
        log.insert(log.end(), {(unsigned long long)N, a, b});
    } else if (log[i] != N || log[i + 1] != a || log[i + 2] != b) {
        emu::fail("the threads of a warpgroup at different wgmma instructions or descriptors (.aligned)");
    }
}

// wgmma.mma_async m64nNk16 .f32.bf16.bf16, scale-d 1 (accumulate), no negation or
// transposition: this thread's N / 2 accumulators d += A · Bᵀ.
template <unsigned N>
inline void mma(float* d, unsigned long long a_bits, unsigned long long b_bits) {
    static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma n");
    check_aligned(N, a_bits, b_bits);
    const Desc A = decode(a_bits), B = decode(b_bits);
    const unsigned t = emu::linear_tid(), lane = t & 31, w = t >> 5 & 3;
    float a[2][16], b[N / 4][16];  // this thread's 2 rows of A and N / 4 rows of B
    for (unsigned k = 0; k < 16; k++) {
        for (unsigned h = 0; h < 2; h++) a[h][k] = elem(A, 16 * w + lane / 4 + 8 * h, k);
        for (unsigned j = 0; j < N / 8; j++)
            for (unsigned h = 0; h < 2; h++) b[2 * j + h][k] = elem(B, 8 * j + 2 * (lane & 3) + h, k);
    }
    for (unsigned j = 0; j < N / 8; j++)
        for (unsigned q = 0; q < 4; q++) {
            const float* ar = a[q >> 1];
            const float* br = b[2 * j + (q & 1)];
            float acc = d[4 * j + q];
            for (unsigned k = 0; k < 16; k++) acc += ar[k] * br[k];
            d[4 * j + q] = acc;
        }
}

}  // namespace emu_wg

// ---- the twins (signatures of tile_wg.cu's helpers, plus EmuTwin)
inline void wg_fence(EmuTwin) {}
inline void wg_commit_and_wait(EmuTwin) {}
inline void fence_proxy_async_smem(EmuTwin) {}
// mapa of the address into block `rank` of the cluster, then a 4-byte store there.
inline void st_cluster_rank(unsigned a, unsigned rank, float v, EmuTwin) {
    unsigned char* p = emu::shared_ptr(cluster_map(a, rank));
    if ((uintptr_t)p & 3u) emu::fail("an st.shared::cluster.f32 that is not 4-byte aligned");
    std::memcpy(p, &v, 4);
}
// wg_desc is plain C++ (no PTX), and the twin keeps the source's encoding: the source's
// definition (which the macro below gives an extra unnamed parameter, EmuTwin (*)()) is
// declared here and called with a null one. What the twin changes is the type: a call
// gives an EmuWgDesc, which only the wg_mma twin takes, so `wg_mma<MT>(d, wg_desc(..),
// wg_desc(..))` chooses the twin. (wg_mma is a template called with explicit arguments,
// which a function-like macro cannot rewrite.) A template, so that a unit without
// tile_wg.cu, where the source's definition is missing, never refers to it.
struct EmuWgDesc {
    unsigned long long bits;
};
inline unsigned long long wg_desc(unsigned addr, EmuTwin (*)());
template <typename Twin>
inline EmuWgDesc wg_desc(unsigned addr, Twin) {
    return EmuWgDesc{wg_desc(addr, (EmuTwin(*)()) nullptr)};
}
// tile_wg.cu's wg_mma<MT>: B is 16 MT row slots (n = 16 MT).
template <int MT>
inline void wg_mma(float* d, EmuWgDesc a, EmuWgDesc b) {
    emu_wg::mma<16 * MT>(d, a.bits, b.bits);
}
#define wg_fence() wg_fence(EmuTwin())
#define wg_commit_and_wait() wg_commit_and_wait(EmuTwin())
#define fence_proxy_async_smem() fence_proxy_async_smem(EmuTwin())
#define st_cluster_rank(...) st_cluster_rank(__VA_ARGS__, EmuTwin())
#define wg_desc(...) wg_desc(__VA_ARGS__, EmuTwin())
