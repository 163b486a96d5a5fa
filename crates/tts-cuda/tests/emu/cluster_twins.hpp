// cluster_twins.hpp — twins (cuda_names.hpp's EmuTwin mechanism) of mma_cluster.cu's own PTX
// helpers, on the emulator's clusters (included at the end of cuda_names.hpp):
//   mov.u32 %cluster_ctarank                          mc_rank
//   barrier.cluster.arrive.release + wait.acquire     mc_cluster_sync
//   cvta.to.shared.u64                                mc_smem_addr
//   mapa.shared::cluster.u32                          mc_map
//   ld.shared::cluster.f32                            mc_ld_cluster
//   cp.async.cg.shared.global (16 bytes)              mc_cp_async16
// Those helpers (and wide.cu's cluster code) exist only in sm_90 builds (`#if __CUDA_ARCH__
// >= 900`): the harness compiles those kernel files so (main.rs, `SM90A_SOURCES`). Another
// block's static shared memory (wide.cu reads the other blocks' Σ x² in `s_sq`,
// mma_cluster.cu their `s_ssq`) and clusters of 16 blocks are emu.hpp's shared addresses.
#pragma once

// ---- mma_cluster.cu's helpers
inline unsigned mc_rank(EmuTwin) { return cluster_ctarank(); }
inline void mc_cluster_sync(EmuTwin) { cluster_sync_all(); }
inline unsigned mc_smem_addr(const void* p, EmuTwin) { return emu::shared_addr(p); }
inline unsigned mc_map(unsigned a, unsigned rank, EmuTwin) { return cluster_map(a, rank); }
inline float mc_ld_cluster(unsigned a, EmuTwin) { return ld_cluster_mapped(a); }
// the full 16 bytes, complete at once (the kernel waits with cp.async.wait_all)
inline void mc_cp_async16(unsigned dst, const void* src, EmuTwin) { cp_async16(dst, src, 16); }
#define mc_rank() mc_rank(EmuTwin())
#define mc_cluster_sync() mc_cluster_sync(EmuTwin())
#define mc_smem_addr(...) mc_smem_addr(__VA_ARGS__, EmuTwin())
#define mc_map(...) mc_map(__VA_ARGS__, EmuTwin())
#define mc_ld_cluster(...) mc_ld_cluster(__VA_ARGS__, EmuTwin())
#define mc_cp_async16(...) mc_cp_async16(__VA_ARGS__, EmuTwin())
