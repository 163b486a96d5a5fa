// emu.hpp — runs this crate's CUDA kernels on the CPU, so a kernel's indexing, barriers and
// cross-block reductions can be checked against a CPU reference on a machine without a GPU
// (tests/kernels_emulated/). It checks logic, not timing or memory ordering.
//
// How: the kernel sources are compiled as C++ (the test rewrites `asm` statements to no-ops
// and `extern __shared__` arrays to the launch's dynamic shared memory). Each CUDA thread is
// a fiber (ucontext) on the OS thread of its block; fibers switch only at barriers and warp
// exchanges, in a fixed order, so a run is deterministic. Shared-memory variables are
// thread_local: one copy per block. The blocks of a cluster run at once, each on its own OS
// thread (cluster barriers and distributed shared memory work); clusters run one after
// another, so a kernel that waits on another cluster, or on a block of a non-cluster grid,
// deadlocks here (and is reported) as it may on a GPU.
//
// Exited threads no longer count at block barriers (as on Volta and later). Warp exchanges
// expect the live lanes of their mask, one exchange at a time per warp (two groups of lanes
// exchanging under disjoint masks at once are not emulated). Tensor-core instructions run
// as twins of the helpers that issue them: ldmatrix and mma.sync (mma_twins.hpp), Hopper's
// wgmma with its shared-memory descriptors (wgmma_twins.hpp). Not emulated: timing, memory
// ordering between blocks (a block runs until it waits) and texture instructions (an `asm`
// statement other than PDL's, prefetches and cp.async groups, outside a helper with a twin,
// stops the run when it is reached).
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline int2 make_int2(int a, int b) { return {a, b}; }
inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }

namespace emu {

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "emu: %s\n", what);
    std::fflush(stderr);
    std::abort();
}

enum class State { Runnable, Block, Warp, Cluster, Done };

struct Fiber {
    ucontext_t ctx;
    dim3 tid;
    State state = State::Runnable;
};

struct Warp {
    int arrived = 0;
    unsigned gen = 0;
    unsigned live = 0;  // lanes not exited
    uint64_t vals[2][32] = {};
};

struct Cluster;

// One block: its fibers, barriers and dynamic shared memory.
struct Block {
    dim3 idx, dim, grid;
    unsigned rank = 0;  // in its cluster
    Cluster* cluster = nullptr;
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    std::vector<char> stacks;
    std::vector<unsigned char> dyn;  // dynamic shared memory
    char* anchor = nullptr;          // its OS thread's tl_anchor: where its static shared memory lies
    ucontext_t sched;
    int cur = 0, live = 0;
    int bar_arrived = 0, cl_arrived = 0;
    unsigned bar_gen = 0;
    long long bar_acc[2] = {0, 0};  // the reduction of __syncthreads_count / _or / _and
    const std::function<void()>* body = nullptr;
};

// The blocks of one cluster (each on its own OS thread) and their barrier.
struct Cluster {
    dim3 dim;
    std::vector<Block*> blocks;
    std::mutex m;
    std::condition_variable cv;
    unsigned arrived = 0, gen = 0;
    unsigned live_blocks = 0;

    // The calling block's threads have all arrived: wait for every live block's.
    void arrive_and_wait() {
        std::unique_lock<std::mutex> l(m);
        unsigned g = gen;
        if (++arrived == live_blocks) {
            arrived = 0;
            gen++;
            cv.notify_all();
            return;
        }
        if (!cv.wait_for(l, std::chrono::seconds(60), [&] { return gen != g; }))
            fail("a cluster barrier waited 60 s: a block of the cluster never reached it");
    }
    // A block has ended: it no longer takes part in cluster barriers.
    void leave() {
        std::lock_guard<std::mutex> l(m);
        live_blocks--;
        if (live_blocks > 0 && arrived == live_blocks) {
            arrived = 0;
            gen++;
            cv.notify_all();
        }
    }
};

inline thread_local Block* tl_block = nullptr;
inline thread_local char tl_anchor = 0;  // shared addresses of static shared memory are relative to it

inline Block& blk() { return *tl_block; }
inline Fiber& fib() { return tl_block->fibers[tl_block->cur]; }
inline unsigned linear_tid() {
    const Fiber& f = fib();
    const dim3& d = blk().dim;
    return f.tid.x + d.x * (f.tid.y + d.y * f.tid.z);
}

inline void yield_to_scheduler() {
    Block& b = blk();
    swapcontext(&b.fibers[b.cur].ctx, &b.sched);
}

// Releases the block barrier when every live thread has arrived.
inline bool release_block_barrier_if_full(Block& b) {
    if (b.bar_arrived == 0 || b.bar_arrived < b.live) return false;
    b.bar_arrived = 0;
    b.bar_gen++;
    for (auto& f : b.fibers)
        if (f.state == State::Block) f.state = State::Runnable;
    return true;
}

// A block barrier with a reduction: op 0 none, 1 count, 2 or, 3 and. Returns the result.
inline long long block_barrier(int op, long long v) {
    Block& b = blk();
    const unsigned g = b.bar_gen;
    if (b.bar_arrived == 0) b.bar_acc[g & 1] = op == 3 ? 1 : 0;
    if (op == 1) b.bar_acc[g & 1] += v != 0;
    if (op == 2) b.bar_acc[g & 1] |= v != 0;
    if (op == 3) b.bar_acc[g & 1] &= v != 0;
    b.bar_arrived++;
    const long long* acc = &b.bar_acc[g & 1];
    long long result;
    if (b.bar_arrived == b.live) {
        result = *acc;
        b.bar_arrived = 0;
        b.bar_gen++;
        for (auto& f : b.fibers)
            if (f.state == State::Block) f.state = State::Runnable;
        // generation g's waiters read acc[g & 1]: generation g + 2, the next to reset it,
        // cannot start before they have all arrived at g + 1
        return result;
    }
    fib().state = State::Block;
    yield_to_scheduler();
    return b.bar_acc[g & 1];
}

// Exchanges a 64-bit value among the warp's lanes in `mask`: returns the lanes' values.
inline const uint64_t* warp_exchange(unsigned mask, uint64_t v) {
    Block& b = blk();
    const unsigned t = linear_tid(), lane = t & 31;
    Warp& w = b.warps[t >> 5];
    if (!(mask >> lane & 1u)) fail("a warp exchange by a lane outside its mask");
    const unsigned g = w.gen;
    w.vals[g & 1][lane] = v;
    const int expected = __builtin_popcount(mask & w.live);
    if (++w.arrived == expected) {
        w.arrived = 0;
        w.gen++;
        for (unsigned l = 0; l < 32; l++) {
            const unsigned i = (t & ~31u) + l;
            if (i < b.fibers.size() && b.fibers[i].state == State::Warp) b.fibers[i].state = State::Runnable;
        }
    } else {
        fib().state = State::Warp;
        yield_to_scheduler();
    }
    return w.vals[g & 1];
}

inline void fiber_entry() {
    Block& b = blk();
    (*b.body)();
    Fiber& f = b.fibers[b.cur];
    f.state = State::Done;
    b.live--;
    const unsigned t = linear_tid();
    Warp& w = b.warps[t >> 5];
    w.live &= ~(1u << (t & 31));
    // an exited thread no longer holds back the block's barriers or its warp's exchanges
    release_block_barrier_if_full(b);
    const int expected = __builtin_popcount(w.live);
    if (w.arrived > 0 && w.arrived == expected) {
        w.arrived = 0;
        w.gen++;
        for (auto& o : b.fibers)
            if (o.state == State::Warp) o.state = State::Runnable;
    }
    // returning ends the fiber (uc_link is the scheduler)
}

constexpr size_t STACK = 96 * 1024;

// Runs one block on this OS thread.
inline void run_block(Block& b) {
    tl_block = &b;
    b.anchor = &tl_anchor;
    const unsigned n = b.dim.x * b.dim.y * b.dim.z;
    b.fibers.assign(n, Fiber{});
    b.warps.assign((n + 31) / 32, Warp{});
    for (unsigned i = 0; i < n; i++) b.warps[i / 32].live |= 1u << (i % 32);
    b.stacks.assign((size_t)n * STACK, 0);
    b.live = (int)n;
    for (unsigned i = 0; i < n; i++) {
        Fiber& f = b.fibers[i];
        f.tid = dim3(i % b.dim.x, (i / b.dim.x) % b.dim.y, i / (b.dim.x * b.dim.y));
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = b.stacks.data() + (size_t)i * STACK;
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = &b.sched;
        makecontext(&f.ctx, fiber_entry, 0);
    }
    for (;;) {
        bool ran = false;
        for (unsigned i = 0; i < n; i++) {
            if (b.fibers[i].state != State::Runnable) continue;
            b.cur = (int)i;
            swapcontext(&b.sched, &b.fibers[i].ctx);
            ran = true;
        }
        if (b.live == 0) break;
        if (ran) continue;
        if (b.cluster && b.cl_arrived == b.live) {
            b.cl_arrived = 0;
            b.cluster->arrive_and_wait();
            for (auto& f : b.fibers)
                if (f.state == State::Cluster) f.state = State::Runnable;
            continue;
        }
        char msg[160];
        std::snprintf(msg, sizeof msg,
                      "deadlock in block (%u,%u,%u): %d live threads, %d at the block barrier, "
                      "%d at a cluster barrier",
                      b.idx.x, b.idx.y, b.idx.z, b.live, b.bar_arrived, b.cl_arrived);
        fail(msg);
    }
    if (b.cluster) b.cluster->leave();
    b.stacks.clear();
    b.stacks.shrink_to_fit();
    tl_block = nullptr;
}

// Launches `body` (a call of the kernel with its arguments) over grid × block threads, with
// `smem` bytes of dynamic shared memory and clusters of `cluster` blocks (x only).
inline void launch(dim3 grid, dim3 block, size_t smem, unsigned cluster,
                   const std::function<void()>& body) {
    if (cluster == 0 || grid.x % cluster != 0) fail("the grid's x is not a multiple of the cluster size");
    if (smem > 227 * 1024) fail("more than 227 KiB of dynamic shared memory");
    if ((size_t)block.x * block.y * block.z > 1024) fail("more than 1024 threads in a block");
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x0 = 0; x0 < grid.x; x0 += cluster) {
                Cluster cl;
                cl.dim = dim3(cluster);
                cl.live_blocks = cluster;
                std::vector<Block> blocks(cluster);
                for (unsigned r = 0; r < cluster; r++) {
                    Block& b = blocks[r];
                    b.idx = dim3(x0 + r, y, z);
                    b.dim = block;
                    b.grid = grid;
                    b.rank = r;
                    b.cluster = cluster > 1 ? &cl : nullptr;
                    b.dyn.assign(smem, 0xA5);  // not zero: a kernel must not rely on it
                    b.body = &body;
                    cl.blocks.push_back(&b);
                }
                if (cluster == 1) {
                    std::thread([&] { run_block(blocks[0]); }).join();
                } else {
                    std::vector<std::thread> ts;
                    for (unsigned r = 0; r < cluster; r++) ts.emplace_back([&, r] { run_block(blocks[r]); });
                    for (auto& t : ts) t.join();
                }
            }
}

// Shared addresses (what cvta.to.shared gives): bits 31-30 the space (1: dynamic, 2: static
// shared memory, relative to the block's anchor), bits 29-25 the cluster rank + 1 (0: this
// block; clusters of up to 16 blocks and more), bits 24-0 the offset (signed for static
// memory). Static shared memory is thread_local, one copy per block's OS thread, with one
// layout: a variable lies at the same offset from every block's anchor, so another block's
// copy is its anchor plus the offset.
inline unsigned shared_addr(const void* p) {
    Block& b = blk();
    const unsigned char* c = (const unsigned char*)p;
    if (!b.dyn.empty() && c >= b.dyn.data() && c <= b.dyn.data() + b.dyn.size()) {
        if (b.dyn.size() >= (1u << 25)) fail("dynamic shared memory past the address format");
        return 1u << 30 | (unsigned)(c - b.dyn.data());
    }
    const long long off = (long long)((const char*)p - &tl_anchor);
    if (off < -(1ll << 24) || off >= (1ll << 24)) fail("an address that is not shared memory");
    return 2u << 30 | ((unsigned)off & 0x1ffffffu);
}

// The block a shared address is in: this one, or the cluster's block of its rank.
inline Block& shared_block(unsigned a) {
    const unsigned rank1 = a >> 25 & 31u;
    Block& me = blk();
    if (!rank1) return me;
    if (!me.cluster || rank1 - 1 >= me.cluster->blocks.size()) fail("a cluster rank outside the cluster");
    return *me.cluster->blocks[rank1 - 1];
}

inline unsigned char* shared_ptr(unsigned a) {
    const unsigned space = a >> 30;
    Block& b = shared_block(a);
    if (space == 1) {
        const unsigned off = a & 0x1ffffffu;
        if (off >= b.dyn.size()) fail("a dynamic shared address past the launch's size");
        return b.dyn.data() + off;
    }
    if (space == 2) {
        long long off = a & 0x1ffffffu;
        if (off >= (1ll << 24)) off -= 1ll << 25;
        return (unsigned char*)b.anchor + off;
    }
    fail("not a shared address");
}

inline unsigned char* dynamic_smem() { return blk().dyn.data(); }

}  // namespace emu

// the CUDA names the kernels use, over this runtime
#include "cuda_names.hpp"
