// The wgmma twins (wgmma_twins.hpp) on small hand-built cases, against the layouts written
// out here independently, before tile_wg.cu relies on them (unit: tile.cu, tile_wg.cu):
//   wg_desc: the source's encoding, bit for bit (start >> 4, leading offset 1, stride 1024,
//     128-byte swizzle);
//   wg_mma<MT> (m64n{32,48,64,128}k16): two warpgroups (256 threads, as tile_wg.cu) over a
//     128 × 64 A tile and a 16 MT × 64 B tile placed by tile.cu's rule (chunk c of row r
//     at chunk c ^ (r & 7), rows 128 bytes apart, all at a 1024-byte boundary), the four
//     k16 steps +32 bytes each, onto nonzero accumulators: every thread's d[4j + q] must be
//     D[64g + 16w + l/4 + 8(q/2)][8j + 2(l%4) + q%2] (PTX ISA's accumulator layout), exactly
//     for small integers, to f32 rounding for random values;
//   the descriptor forms the twin does not implement, and warpgroups whose threads disagree,
//     stop the run (in a child process);
//   st_cluster_rank: stores into another block of the cluster.

#include <sys/wait.h>
#include <unistd.h>

namespace {

// Byte offset of element k of row r in a tile of 128-byte rows, swizzled as tile.cu places
// its copies.
unsigned placed(unsigned r, unsigned k) { return r * 128 + ((k / 8 ^ (r & 7)) << 4) + (k % 8) * 2; }

constexpr unsigned A_ROWS = 128;  // two warpgroups of 64 (TILE_K: tile.cu's 64)

// Runs the 4 k16 steps of one 64-wide tile on 256 threads: A (128 × 64, bf16 bits, row-major)
// at offset 0 of the dynamic shared memory, B (16 MT × 64) at A_ROWS·128; each thread's
// accumulators start at `c0` (by its (row, col) in D) and are returned, [thread][8 MT].
template <int MT>
std::vector<float> run_tile(const std::vector<uint16_t>& A, const std::vector<uint16_t>& B,
                            float (*c0)(unsigned, unsigned)) {
    constexpr unsigned N = 16 * MT;
    std::vector<float> got(256 * 8 * MT);
    emu::launch(dim3(1), dim3(256), (A_ROWS + N) * 128, 1, [&] {
        unsigned char* sm = emu::dynamic_smem();
        const unsigned t = threadIdx.x, lane = t & 31, w = t >> 5 & 3, g = t >> 7;
        for (unsigned e = t; e < A_ROWS * TILE_K; e += 256)
            std::memcpy(sm + placed(e / TILE_K, e % TILE_K), &A[e], 2);
        for (unsigned e = t; e < N * TILE_K; e += 256)
            std::memcpy(sm + A_ROWS * 128 + placed(e / TILE_K, e % TILE_K), &B[e], 2);
        __syncthreads();
        float d[8 * MT];
        for (unsigned j = 0; j < N / 8; j++)
            for (unsigned q = 0; q < 4; q++)
                d[4 * j + q] = c0(64 * g + 16 * w + lane / 4 + 8 * (q / 2), 8 * j + 2 * (lane % 4) + q % 2);
        const unsigned base = smem_addr(sm), abuf = base + g * 64 * 128, bbuf = base + A_ROWS * 128;
        fence_proxy_async_smem();
        wg_fence();
        for (int ks = 0; ks < 4; ks++) wg_mma<MT>(d, wg_desc(abuf + ks * 32), wg_desc(bbuf + ks * 32));
        wg_commit_and_wait();
        std::memcpy(&got[t * 8 * MT], d, sizeof d);
    });
    return got;
}

float zero(unsigned, unsigned) { return 0.f; }
float offsets(unsigned r, unsigned c) { return (float)((int)(r * 7 + c * 3) % 50 - 25); }

template <int MT>
void mma_layout() {
    constexpr unsigned N = 16 * MT;
    for (int exact = 1; exact >= 0; exact--) {
        check::Rng rng(100 + MT);
        std::vector<uint16_t> A(A_ROWS * TILE_K), B(N * TILE_K);
        // exact: small integers, every sum exact in f32 and each element distinct enough that a
        // misplaced one shows
        for (unsigned i = 0; i < A.size(); i++)
            A[i] = check::to_bf16(exact ? (float)((int)(i * 37 % 31) - 15) : rng.sym(1.0f));
        for (unsigned i = 0; i < B.size(); i++)
            B[i] = check::to_bf16(exact ? (float)((int)(i * 11 % 23) - 11) * 0.5f : rng.sym(1.0f));
        float (*c0)(unsigned, unsigned) = exact ? offsets : zero;
        const std::vector<float> got = run_tile<MT>(A, B, c0);
        // by the accumulator layout: thread t = 128 g + 32 w + l, register 4j + q
        std::vector<float> flat;
        std::vector<double> want;
        double bound = 0;
        for (unsigned t = 0; t < 256; t++)
            for (unsigned j = 0; j < N / 8; j++)
                for (unsigned q = 0; q < 4; q++) {
                    const unsigned l = t % 32, w = t / 32 % 4, g = t / 128;
                    const unsigned row = 64 * g + 16 * w + l / 4 + 8 * (q / 2), col = 8 * j + 2 * (l % 4) + q % 2;
                    double s = c0(row, col), mag = std::fabs(s);
                    for (unsigned k = 0; k < TILE_K; k++) {
                        const double p = (double)check::from_bf16(A[row * TILE_K + k]) *
                                         check::from_bf16(B[col * TILE_K + k]);
                        s += p;
                        mag += std::fabs(p);
                    }
                    flat.push_back(got[t * 8 * MT + 4 * j + q]);
                    want.push_back(s);
                    bound = std::fmax(bound, (TILE_K + 1) * std::ldexp(mag, -24));  // any f32 order
                }
        const std::string name = "wg_mma<" + std::to_string(MT) + "> (m64n" + std::to_string(N) + "k16)";
        if (exact) {
            bool same = true;
            for (size_t i = 0; i < want.size(); i++) same &= (double)flat[i] == want[i];
            check::expect(same, name + ": D += A·Bᵀ exactly, through the swizzle, 4 k16 steps, on the "
                                       "accumulator layout");
        } else {
            double scale = 1;
            for (double v : want) scale = std::fmax(scale, std::fabs(v));
            check::close(name + ": random values", flat, want, bound / scale);
        }
    }
}

void descriptor_encoding() {
    bool ok = true;
    emu::launch(dim3(1), dim3(1), 4096, 1, [&] {
        const unsigned base = smem_addr(emu::dynamic_smem());
        for (unsigned off : {0u, 32u, 1024u + 96u, 3072u}) {
            const unsigned long long want = (unsigned long long)(off >> 4) | 1ull << 16 | 64ull << 32 | 1ull << 62;
            ok &= wg_desc(base + off).bits == want;
        }
    });
    check::expect(ok, "wg_desc: start >> 4, leading offset 1, stride 1024 >> 4, 128-byte swizzle");
}

// Runs `body` on 256 threads in a child process (the twin stops a run with abort): whether
// it stopped.
bool stops(const std::function<void()>& body) {
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        emu::launch(dim3(1), dim3(256), 8192, 1, body);
        std::fflush(stdout);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

void unimplemented_forms_stop() {
    const unsigned long long good = 1ull << 16 | 64ull << 32 | 1ull << 62;
    auto issue = [](unsigned long long a, unsigned long long b) {
        return [=] {
            float d[16] = {};
            wg_mma<2>(d, EmuWgDesc{a}, EmuWgDesc{b});
        };
    };
    check::expect(!stops(issue(good, good | 1024 >> 4)), "a good descriptor pair runs");
    struct Case {
        const char* what;
        unsigned long long a;
    } cases[] = {
        {"no swizzle", good & ~(3ull << 62)},
        {"64-byte swizzle", (good & ~(3ull << 62)) | 2ull << 62},
        {"a base offset", good | 1ull << 49},
        {"a reserved bit", good | 1ull << 47},
        {"a start 128 bytes into its pattern", good | 128 >> 4},
        {"a k16 slice crossing its row", good | 112 >> 4},
    };
    for (const Case& c : cases)
        check::expect(stops(issue(c.a, good)), std::string("a descriptor with ") + c.what + " stops the run");
    check::expect(stops([] {
                      float d[16] = {};
                      const unsigned long long b = 1ull << 16 | 64ull << 32 | 1ull << 62;
                      wg_mma<2>(d, EmuWgDesc{b | (threadIdx.x == 5 ? 2 : 0)}, EmuWgDesc{b});
                  }),
                  "a warpgroup whose threads give different descriptors stops the run");
}

void cluster_stores() {
    constexpr unsigned S = 4, T = 64;
    std::vector<float> got(S * T);
    emu::launch(dim3(S), dim3(T), T * 4, S, [&] {
        float* s = (float*)emu::dynamic_smem();
        const unsigned r = cluster_ctarank(), t = threadIdx.x;
        st_cluster_rank(smem_addr(s + t), (r + 1) % S, 1000.f * r + t);
        cluster_sync_all();
        got[r * T + t] = s[t];
    });
    bool ok = true;
    for (unsigned r = 0; r < S; r++)
        for (unsigned t = 0; t < T; t++) ok &= got[r * T + t] == 1000.f * ((r + S - 1) % S) + t;
    check::expect(ok, "st_cluster_rank: each block's stores land in the next rank's shared memory");
}

}  // namespace

int main() {
    descriptor_encoding();
    mma_layout<2>();
    mma_layout<3>();
    mma_layout<4>();
    mma_layout<8>();
    unimplemented_forms_stop();
    cluster_stores();
    return check::failures() ? 1 : 0;
}
