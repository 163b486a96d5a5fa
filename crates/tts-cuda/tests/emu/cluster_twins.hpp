// cluster_twins.hpp — thread-block clusters past what cuda_names.hpp emulates (included at
// its end): distributed shared memory that reaches another block's STATIC shared memory
// (wide.cu reads the other blocks' Σ x² in `__shared__ float s_sq[]`, mma_cluster.cu their
// s_ssq), clusters of up to 16 blocks (mma_cluster.cu's widest split), and twins
// (cuda_names.hpp's EmuTwin mechanism) of mma_cluster.cu's own PTX helpers:
//   mov.u32 %cluster_ctarank                          mc_rank
//   barrier.cluster.arrive.release + wait.acquire     mc_cluster_sync
//   cvta.to.shared.u64                                mc_smem_addr
//   mapa.shared::cluster.u32                          mc_map
//   ld.shared::cluster.f32                            mc_ld_cluster
//   cp.async.cg.shared.global (16 bytes)              mc_cp_async16
// Those helpers (and wide.cu's cluster code) exist only in sm_90 builds (`#if __CUDA_ARCH__
// >= 900`): tests/kernels_emulated/batched.rs compiles those kernel files so.
//
// Static shared memory is thread_local here, one copy per block's OS thread, and its
// shared addresses are offsets from that thread's emu::tl_anchor (emu::shared_addr): the
// same variable lies at the same offset from every thread's anchor (one static TLS layout),
// so another block's copy is its anchor plus the offset. Each block publishes its anchor at
// every cluster barrier (common.cuh's cluster_sync_all and mc_cluster_sync, both redirected
// here); a read of another block's shared memory before the cluster's first barrier
// (nothing there is known to be written yet) stops the run.
#pragma once

#include <map>

namespace emu_cluster {

inline std::mutex& anchors_mutex() {
    static std::mutex m;
    return m;
}
inline std::map<const emu::Block*, char*>& anchors() {
    static std::map<const emu::Block*, char*> a;
    return a;
}

// Cluster barrier (cuda_names.hpp's), after publishing where this block's static shared
// memory lies.
inline void sync() {
    {
        std::lock_guard<std::mutex> l(anchors_mutex());
        anchors()[&emu::blk()] = &emu::tl_anchor;
    }
    cluster_sync_all();
}

// The bytes at shared address `a` (emu::shared_addr's form, this block's view: no rank)
// in block `rank` of the cluster, dynamic or static shared memory; `bytes` must lie inside.
inline unsigned char* at(unsigned a, unsigned rank, unsigned bytes) {
    emu::Block& me = emu::blk();
    if (a >> 26 & 15u) emu::fail("a mapped (cluster) address where a block's own was expected");
    emu::Block* b = &me;
    if (me.cluster) {
        if (rank >= me.cluster->blocks.size()) emu::fail("a cluster rank outside the cluster");
        b = me.cluster->blocks[rank];
    } else if (rank != 0) {
        emu::fail("a cluster rank other than 0 outside a cluster");
    }
    if (b != &me) {
        // nothing of another block is known to be written before a cluster barrier; after
        // one, every block of the cluster has published its anchor of this launch (the map
        // may still hold blocks of earlier launches)
        std::lock_guard<std::mutex> l(me.cluster->m);
        if (me.cluster->gen == 0) emu::fail("another block's shared memory read before any cluster barrier");
    }
    const unsigned space = a >> 30;
    if (space == 1) {
        const unsigned off = a & 0x3ffffffu;
        if ((size_t)off + bytes > b->dyn.size()) emu::fail("a dynamic shared address past the launch's size");
        return b->dyn.data() + off;
    }
    if (space != 2) emu::fail("not a shared address");
    long long off = a & 0x3ffffffu;
    if (off >= (1ll << 25)) off -= 1ll << 26;
    char* anchor = &emu::tl_anchor;
    if (b != &me) {
        std::lock_guard<std::mutex> l(anchors_mutex());
        const auto it = anchors().find(b);
        if (it == anchors().end())
            emu::fail("static shared memory of a block that never reached a cluster barrier");
        anchor = it->second;
    }
    return (unsigned char*)anchor + off;
}

inline float ld_f32(unsigned a, unsigned rank) {
    float v;
    std::memcpy(&v, at(a, rank, 4), 4);
    return v;
}

// mapa's result, only ever read by mc_ld_cluster: bits 31-30 the space, 29-25 the rank (up
// to 32), 24-0 the offset (signed for static memory); emu::shared_addr's 4-bit rank field
// holds ranks 0..14 only.
inline unsigned map(unsigned a, unsigned rank) {
    if (a >> 26 & 15u) emu::fail("mapa of an address that is already mapped");
    if (rank >= 32) emu::fail("a cluster rank past 31");
    const unsigned space = a >> 30, off = a & 0x3ffffffu;
    const long long s = off >= (1u << 25) ? (long long)off - (1ll << 26) : (long long)off;
    if (s < -(1ll << 24) || s >= (1ll << 24)) emu::fail("a shared offset too wide for a mapped address");
    return space << 30 | rank << 25 | (off & 0x1ffffffu);
}
inline float ld_mapped(unsigned m) {
    const unsigned space = m >> 30, rank = m >> 25 & 31u;
    unsigned off = m & 0x1ffffffu;
    if (space == 2 && off >= (1u << 24)) off |= 0x2000000u;  // sign-extend to 26 bits
    return ld_f32(space << 30 | off, rank);
}

}  // namespace emu_cluster

// ---- mma_cluster.cu's helpers
inline unsigned mc_rank(EmuTwin) { return cluster_ctarank(); }
inline void mc_cluster_sync(EmuTwin) { emu_cluster::sync(); }
inline unsigned mc_smem_addr(const void* p, EmuTwin) { return emu::shared_addr(p); }
inline unsigned mc_map(unsigned a, unsigned rank, EmuTwin) { return emu_cluster::map(a, rank); }
inline float mc_ld_cluster(unsigned a, EmuTwin) { return emu_cluster::ld_mapped(a); }
// the full 16 bytes, complete at once (the kernel waits with cp.async.wait_all)
inline void mc_cp_async16(unsigned dst, const void* src, EmuTwin) { cp_async16(dst, src, 16); }
#define mc_rank() mc_rank(EmuTwin())
#define mc_cluster_sync() mc_cluster_sync(EmuTwin())
#define mc_smem_addr(...) mc_smem_addr(__VA_ARGS__, EmuTwin())
#define mc_map(...) mc_map(__VA_ARGS__, EmuTwin())
#define mc_ld_cluster(...) mc_ld_cluster(__VA_ARGS__, EmuTwin())
#define mc_cp_async16(...) mc_cp_async16(__VA_ARGS__, EmuTwin())

// ---- common.cuh's cluster helpers (wide.cu, tile.cu), as cuda_names.hpp defines them, but
// publishing the block's static shared memory at the barrier and reaching the other blocks'
#define cluster_sync_all() emu_cluster::sync()
#define ld_cluster_rank(a, rank) emu_cluster::ld_f32(a, rank)
