// Emulated check of LinearPath::TensorCores as linear.rs runs it: `to_bf16_rows` (ops.cu:
// the rows, normalised when the norm is fused, as bf16 hi rows 0..M and lo rows M..2M),
// then mma.cu's entry for M rows over grid (N / 16, ceil(M / tile)), through
// batched_case.hpp. mma.cu says a row's result depends neither on M nor on the other rows:
// the one-row calls run the entry the backend takes for one row.
// argv per case: kernel kernel1 N K M ldx tile tile1 act norm bias res alias padded.

#include "batched_case.hpp"

namespace {

using Entry = void (*)(const bf16*, int, int, const bf16*, int, const float*, int, const float*, int, float*,
                       int);

Entry entry(const std::string& name) {
    if (name == "mma_linear_t1") return mma_linear_t1;
    if (name == "mma_linear_t2") return mma_linear_t2;
    if (name == "mma_linear_t4") return mma_linear_t4;
    if (name == "mma_linear_t8") return mma_linear_t8;
    emu::fail("unknown kernel");
}

}  // namespace

int main(int argc, char** argv) {
    const int per = 2 + 12;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: batched_mma (kernel kernel1 N K M ldx tile tile1 act norm bias res alias padded)...");
    for (int i = 1; i < argc; i += per) {
        const std::string kernel = argv[i], kernel1 = argv[i + 1];
        const auto v = batched::ints(argv, i + 2, 12);
        const int tile = v[4], tile1 = v[5];
        const batched::Case c{v[0], v[1], v[2], v[3], v[6], v[7], v[8], v[9], v[10], v[11]};
        const batched::Operands o(c);
        auto launch = [&](const float* x, int rows, const float* res, float* y) {
            const bool one = rows == 1 && c.M > 1;
            // the split rows, as GemmScratch::xb (ld K); poison where to_bf16_rows writes
            std::vector<uint16_t> xb((size_t)2 * rows * c.K, 0xffff);
            emu::launch(dim3(rows), dim3(256), 0, 1, [&] {
                to_bf16_rows(x, c.ldx, c.K, c.norm ? o.g.data() : nullptr, batched::EPS, (bf16*)xb.data(), c.K,
                             rows);
            });
            const int t = one ? tile1 : tile;
            emu::launch(dim3(c.N / 16, (rows + t - 1) / t), dim3(256), 0, 1, [&] {
                entry(one ? kernel1 : kernel)((const bf16*)o.w.data(), c.N, c.K, (const bf16*)xb.data(), rows,
                                              c.bias ? o.bias.data() : nullptr, c.act, res, o.ldy, y, o.ldy);
            });
        };
        const std::string name = kernel + " " + batched::shape(c) + batched::flags(c);
        batched::check_case(name, c, o, launch, true);
    }
    return check::failures() ? 1 : 0;
}
