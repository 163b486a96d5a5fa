// Emulated check of mma_cluster.cu (batched linear layers on tensor cores in one launch,
// norm and epilogue fused, K split over a cluster of CS = 4, 8 or 16 blocks that add their
// partial sums through distributed shared memory) through batched_case.hpp, on the plans
// linear.rs's `cluster` makes (computed by tests/kernels_emulated/batched.rs): grid (CS,
// N / 128) in clusters of CS (`routing::cluster_split` of the whole layer), `smem` bytes
// (`linear::cluster_smem`), the entry for M rows. mma_cluster.cu says a row's result never
// depends on the other rows: the one-row calls run the entry the backend takes for one row.
// The weights hold the first N rows of the layer (its first N / 128 output tiles).
// argv per case: kernel kernel1 N K M ldx CS smem smem1 act norm bias res alias padded.

#include "batched_case.hpp"

namespace {

using Entry = void (*)(const bf16*, int, int, const float*, int, const float*, float, const float*, int,
                       const float*, int, float*, int, int);

Entry entry(const std::string& name) {
    if (name == "mma_cluster_t1") return mma_cluster_t1;
    if (name == "mma_cluster_t2") return mma_cluster_t2;
    if (name == "mma_cluster_t4") return mma_cluster_t4;
    if (name == "mma_cluster_t8") return mma_cluster_t8;
    emu::fail("unknown kernel");
}

}  // namespace

int main(int argc, char** argv) {
    const int per = 2 + 13;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: batched_cluster (kernel kernel1 N K M ldx CS smem smem1 act norm bias res alias padded)...");
    for (int i = 1; i < argc; i += per) {
        const std::string kernel = argv[i], kernel1 = argv[i + 1];
        const auto v = batched::ints(argv, i + 2, 13);
        const int cs = v[4], smem = v[5], smem1 = v[6];
        const batched::Case c{v[0], v[1], v[2], v[3], v[7], v[8], v[9], v[10], v[11], v[12]};
        const batched::Operands o(c);
        auto launch = [&](const float* x, int rows, const float* res, float* y) {
            const bool one = rows == 1 && c.M > 1;
            emu::launch(dim3(cs, c.N / 128), dim3(256), one ? smem1 : smem, cs, [&] {
                entry(one ? kernel1 : kernel)((const bf16*)o.w.data(), c.N, c.K, x, c.ldx,
                                              c.norm ? o.g.data() : nullptr, batched::EPS,
                                              c.bias ? o.bias.data() : nullptr, c.act, res, o.ldy, y, o.ldy, rows);
            });
        };
        const std::string name = kernel + " " + batched::shape(c) + ", CS " + std::to_string(cs) + batched::flags(c);
        batched::check_case(name, c, o, launch, true);
    }
    return check::failures() ? 1 : 0;
}
