// cuda_names.hpp — the CUDA built-ins, intrinsics, atomics and the PTX helpers of
// common.cuh that kernels use, for the kernel sources compiled as C++ over emu.hpp's
// runtime (included by it; see there).
#pragma once

#include <string>

#define EMU_CUDA 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ thread_local
#define __constant__
// PDL and prefetches do nothing here; nor do closing a group of cp.async copies and
// waiting for them (codec.cu's attention, codec_conv.cu's pipelines: the emulated copies
// complete when issued); any other PTX stops the run where it is reached.
#define EMU_ASM_NOP(...) ((void)0)
#define EMU_ASM(...) emu_asm(#__VA_ARGS__)
inline void emu_asm(const char* text) {
    for (const char* done : {"\"cp.async.wait_all;", "\"cp.async.commit_group;", "\"cp.async.wait_group "})
        if (std::strncmp(text, done, std::strlen(done)) == 0) return;
    emu::fail((std::string("PTX that is not emulated: ") + text).c_str());
}

#define threadIdx (emu::fib().tid)
#define blockIdx (emu::blk().idx)
#define blockDim (emu::blk().dim)
#define gridDim (emu::blk().grid)
#define warpSize 32

[[noreturn]] inline void __trap() { emu::fail("__trap()"); }

inline void __syncthreads() { emu::block_barrier(0, 0); }
inline int __syncthreads_count(int p) { return (int)emu::block_barrier(1, p); }
inline int __syncthreads_or(int p) { return (int)emu::block_barrier(2, p); }
inline int __syncthreads_and(int p) { return (int)emu::block_barrier(3, p); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_exchange(mask, 0); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <typename T>
inline uint64_t emu_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp exchange of more than 8 bytes");
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}
template <typename T>
inline T emu_from(uint64_t u) {
    T v;
    std::memcpy(&v, &u, sizeof(T));
    return v;
}
inline unsigned emu_lane() { return emu::linear_tid() & 31; }
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    const uint64_t* all = emu::warp_exchange(mask, emu_bits(v));
    const unsigned lane = emu_lane(), base = lane & ~(unsigned)(width - 1);
    return emu_from<T>(all[base + ((unsigned)src & (unsigned)(width - 1))]);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
    const uint64_t* all = emu::warp_exchange(mask, emu_bits(v));
    const unsigned lane = emu_lane(), src = lane ^ (unsigned)m;
    const unsigned base = lane & ~(unsigned)(width - 1);
    return emu_from<T>(all[src < base + (unsigned)width ? src : lane]);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    const uint64_t* all = emu::warp_exchange(mask, emu_bits(v));
    const unsigned lane = emu_lane(), base = lane & ~(unsigned)(width - 1);
    return emu_from<T>(all[lane + d < base + (unsigned)width ? lane + d : lane]);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    const uint64_t* all = emu::warp_exchange(mask, emu_bits(v));
    const unsigned lane = emu_lane(), base = lane & ~(unsigned)(width - 1);
    return emu_from<T>(all[lane >= base + d ? lane - d : lane]);
}
inline unsigned __ballot_sync(unsigned mask, int p) {
    const uint64_t* all = emu::warp_exchange(mask, p != 0);
    unsigned r = 0;
    for (unsigned l = 0; l < 32; l++)
        if (mask >> l & 1u && all[l]) r |= 1u << l;
    return r;
}
// An exchange among the lanes of `mask` while the warp's other lanes may already wait at
// their next exchange (sampling.cu's radix_kth: the lanes whose key is still in the select
// match their buckets under the mask of those lanes; the others go on to the next ballot of
// the whole warp). emu::warp_exchange holds one exchange per warp at a time, so this one
// has a rendezvous of its own per (warp, mask): a lane that arrives yields, staying
// runnable, until every live lane of the mask has arrived. Returns the lanes' values.
struct EmuMaskedExchange {
    unsigned warp, mask;
    int arrived;
    unsigned gen;
    uint64_t vals[2][32];
};
// per block (each block runs on an OS thread of its own)
inline thread_local std::vector<EmuMaskedExchange> emu_masked_exchanges;
inline const uint64_t* emu_masked_exchange(unsigned mask, uint64_t v) {
    emu::Block& b = emu::blk();
    const unsigned t = emu::linear_tid(), lane = t & 31, w = t >> 5;
    if (!(mask >> lane & 1u)) emu::fail("a warp exchange by a lane outside its mask");
    auto& all = emu_masked_exchanges;
    size_t k = 0;
    while (k < all.size() && !(all[k].warp == w && all[k].mask == mask)) k++;
    if (k == all.size()) all.push_back(EmuMaskedExchange{w, mask, 0, 0, {}});
    // generation g's values stay until every lane of g has read them: generation g + 2,
    // the next to write them, cannot start before those lanes have arrived at g + 1
    const unsigned g = all[k].gen;
    all[k].vals[g & 1][lane] = v;
    all[k].arrived++;
    for (long waits = 0; all[k].gen == g; waits++) {
        if (all[k].arrived == __builtin_popcount(mask & b.warps[w].live)) {
            all[k].arrived = 0;
            all[k].gen++;
            break;
        }
        if (waits > (1l << 20)) emu::fail("a masked warp exchange waited for lanes that never came");
        emu::yield_to_scheduler();
    }
    return all[k].vals[g & 1];
}
// The lanes of `mask` whose value equals this lane's.
template <typename T>
inline unsigned __match_any_sync(unsigned mask, T v) {
    const uint64_t* all = emu_masked_exchange(mask, emu_bits(v));
    const uint64_t mine = all[emu_lane()];
    unsigned r = 0;
    for (unsigned l = 0; l < 32; l++)
        if (mask >> l & 1u && all[l] == mine) r |= 1u << l;
    return r;
}
inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == (mask & emu::blk().warps[emu::linear_tid() >> 5].live); }
inline unsigned __activemask() { return emu::blk().warps[emu::linear_tid() >> 5].live; }

inline float __uint_as_float(unsigned u) { return emu_from<float>(u); }
inline unsigned __float_as_uint(float f) { return (unsigned)emu_bits(f); }
inline float __int_as_float(int i) { return emu_from<float>((unsigned)i); }
inline int __float_as_int(float f) { return (int)(unsigned)emu_bits(f); }
inline long long __float2ll_rn(float f) { return std::llrintf(f); }
inline int __float2int_rn(float f) { return (int)std::lrintf(f); }
inline int __float2int_rz(float f) { return (int)f; }
inline int __float2int_rd(float f) { return (int)std::floor(f); }
inline unsigned __float2uint_rn(float f) { return (unsigned)std::llrintf(f); }
inline float __int2float_rn(int i) { return (float)i; }
inline float __uint2float_rn(unsigned u) { return (float)u; }
inline float __ll2float_rn(long long v) { return (float)v; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float a, float b) { return std::pow(a, b); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __saturatef(float a) { return a < 0.f ? 0.f : a > 1.f ? 1.f : a; }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz((unsigned)v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline unsigned __brev(unsigned v) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((v >> i) & 1u) << (31 - i);
    return r;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline size_t min(size_t a, size_t b) { return a < b ? a : b; }
inline size_t max(size_t a, size_t b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

template <typename T>
inline T __ldg(const T* p) { return *p; }
template <typename T>
inline T __ldcg(const T* p) { return *p; }
template <typename T>
inline T __ldcs(const T* p) { return *p; }
template <typename T>
inline T __ldlu(const T* p) { return *p; }
template <typename T>
inline void __stcg(T* p, T v) { *p = v; }
template <typename T>
inline void __stcs(T* p, T v) { *p = v; }

template <typename T>
inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline float atomicAdd(float* p, float v) {
    unsigned* u = (unsigned*)p;
    unsigned old = __atomic_load_n(u, __ATOMIC_SEQ_CST), want;
    do want = __float_as_uint(__uint_as_float(old) + v);
    while (!__atomic_compare_exchange_n(u, &old, want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return __uint_as_float(old);
}
template <typename T>
inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicCAS(T* p, T cmp, T v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
template <typename T>
inline T atomicMax(T* p, T v) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}
template <typename T>
inline T atomicMin(T* p, T v) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}
template <typename T>
inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }

// ---- what common.cuh defines only for sm_80 / sm_90 (its `#if __CUDA_ARCH__` blocks)
inline unsigned smem_addr(const void* p) { return emu::shared_addr(p); }
inline unsigned __cvta_generic_to_shared(const void* p) { return emu::shared_addr(p); }
inline void cp_async16(unsigned dst, const void* src, int src_bytes) {
    unsigned char* d = emu::shared_ptr(dst);
    if (((uintptr_t)d & 15u) || ((uintptr_t)src & 15u)) emu::fail("a cp.async of 16 bytes that is not 16-byte aligned");
    std::memset(d, 0, 16);
    std::memcpy(d, src, (size_t)std::min(std::max(src_bytes, 0), 16));
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

// Cluster barrier: every live thread of every block of the cluster.
inline void cluster_sync_all() {
    emu::Block& b = emu::blk();
    if (!b.cluster) {
        __syncthreads();
        return;
    }
    b.cl_arrived++;
    emu::fib().state = emu::State::Cluster;
    emu::yield_to_scheduler();
}
inline unsigned cluster_ctarank() { return emu::blk().rank; }
inline unsigned cluster_map(unsigned a, unsigned rank) {
    if (rank >= 31) emu::fail("a cluster rank past 30");
    return (a & ~(31u << 25)) | (rank + 1) << 25;
}
// A load from a mapped shared address (cluster_map's): nothing of another block is known to
// be written before the cluster's first barrier, so reading it then stops the run.
inline float ld_cluster_mapped(unsigned m) {
    emu::Block& me = emu::blk();
    if (&emu::shared_block(m) != &me) {
        std::lock_guard<std::mutex> l(me.cluster->m);
        if (me.cluster->gen == 0) emu::fail("another block's shared memory read before any cluster barrier");
    }
    float v;
    std::memcpy(&v, emu::shared_ptr(m), 4);
    return v;
}
inline float ld_cluster_rank(unsigned a, unsigned rank) {
    return ld_cluster_mapped(cluster_map(a, rank));
}

// ---- twins of PTX helpers that kernel sources define themselves: the f16 conversions
// (common.cuh's half_bits_to_f32 and f2h_sat) and codec.cu's 16-byte cp.async
// (codec_cp16). An `asm` statement's operands cannot be reached here, so each helper's name
// becomes a call with one more argument, EmuTwin(): at a call it is an EmuTwin value, which
// only the twin below takes; in the source's own definition it declares an unnamed
// parameter (a pointer to a function returning EmuTwin), so that definition, whose `asm`
// cannot run here, still compiles but is never chosen.
struct EmuTwin {};
// f32 of the IEEE half bit pattern in the low 16 bits of h (exact).
inline float half_bits_to_f32(unsigned int h, EmuTwin) {
    const unsigned s = h >> 15 & 1u, e = h >> 10 & 31u, m = h & 1023u;
    unsigned u;
    if (e == 31) {
        u = s << 31 | 0x7f800000u | m << 13;  // inf, NaN
    } else if (e != 0) {
        u = s << 31 | (e + 112) << 23 | m << 13;
    } else {
        const float f = std::ldexp((float)m, -24);  // zero or subnormal: exact in f32
        return s ? -f : f;
    }
    return __uint_as_float(u);
}
// f2h_sat: the source's clamp to ±65504 (the whole helper is replaced, so it is repeated
// here), then cvt.rn.f16.f32: the nearest f16, ties to even.
inline unsigned short f2h_sat(float f, EmuTwin) {
    f = std::fmin(std::fmax(f, -65504.0f), 65504.0f);
    unsigned u = __float_as_uint(f);
    const unsigned sign = u >> 16 & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);  // NaN
    if (u < 113u << 23) {
        // below 2^-14, f16 subnormal or zero: 0.5 + |f| puts its f16 quanta (2^-24) in the
        // last bits of the sum's mantissa, rounded to nearest even
        const float magic = __uint_as_float(126u << 23);
        return (unsigned short)(sign | (__float_as_uint(__uint_as_float(u) + magic) - (126u << 23)));
    }
    // normal: rebias the exponent, round the 13 bits dropped to nearest even
    u += ((15u - 127u) << 23) + 0xfffu + (u >> 13 & 1u);
    return (unsigned short)(sign | u >> 13);
}
// codec_cp16: 16 bytes into shared memory, complete at once.
inline void codec_cp16(void* dst, const void* src, EmuTwin) {
    if (((uintptr_t)dst & 15u) || ((uintptr_t)src & 15u)) emu::fail("a cp.async of 16 bytes that is not 16-byte aligned");
    std::memcpy(dst, src, 16);
}
#define half_bits_to_f32(...) half_bits_to_f32(__VA_ARGS__, EmuTwin())
#define f2h_sat(...) f2h_sat(__VA_ARGS__, EmuTwin())
#define codec_cp16(...) codec_cp16(__VA_ARGS__, EmuTwin())

// the warp-level tensor-core helpers (ldmatrix, mma.sync) and codec_conv.cu's shared-memory
// address and copy
#include "mma_twins.hpp"
#include "wgmma_twins.hpp"
#include "cluster_twins.hpp"
