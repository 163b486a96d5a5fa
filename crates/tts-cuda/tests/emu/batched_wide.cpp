// Emulated check of wide.cu (batched linear layers of 17..64 rows, one launch, norm and
// epilogue fused, K split over the blocks of a cluster) through batched_case.hpp, on the
// plans `linear::wide` makes (computed by tests/kernels_emulated/batched.rs): S blocks per
// cluster (`routing::wide_split`), `cps` chunks staged at a time, `smem` bytes, the entry
// for M rows; and for the one-row calls of the bits check, the plan for one row (another
// entry and piece size: wide.cu says a row's result depends on neither). The weights hold
// the first N rows of the layer (the grid's first N / 128 output tiles; the plan is the
// whole layer's).
// argv per case: kernel kernel1 N K M ldx S cps smem cps1 smem1 act norm bias res alias padded.

#include "batched_case.hpp"

namespace {

using Entry = void (*)(const bf16*, int, int, const float*, int, const float*, float, const float*, int,
                       const float*, int, float*, int, int, int);

Entry entry(const std::string& name) {
    if (name == "wide_linear_t2_r1") return wide_linear_t2_r1;
    if (name == "wide_linear_t4_r1") return wide_linear_t4_r1;
    if (name == "wide_linear_t8_r1") return wide_linear_t8_r1;
    emu::fail("unknown kernel");
}

}  // namespace

int main(int argc, char** argv) {
    const int per = 2 + 15;
    if ((argc - 1) % per != 0 || argc == 1) emu::fail("usage: batched_wide (kernel kernel1 N K M ldx S cps smem cps1 smem1 act norm bias res alias padded)...");
    for (int i = 1; i < argc; i += per) {
        const std::string kernel = argv[i], kernel1 = argv[i + 1];
        const auto v = batched::ints(argv, i + 2, 15);
        const int S = v[4], cps = v[5], smem = v[6], cps1 = v[7], smem1 = v[8];
        const batched::Case c{v[0], v[1], v[2], v[3], v[9], v[10], v[11], v[12], v[13], v[14]};
        const batched::Operands o(c);
        auto launch = [&](const float* x, int rows, const float* res, float* y) {
            const bool one = rows == 1 && c.M > 1;
            const Entry k = entry(one ? kernel1 : kernel);
            const int pieces = one ? cps1 : cps;
            emu::launch(dim3(S, c.N / 128), dim3(256), one ? smem1 : smem, S, [&] {
                k((const bf16*)o.w.data(), c.N, c.K, x, c.ldx, c.norm ? o.g.data() : nullptr, batched::EPS,
                  c.bias ? o.bias.data() : nullptr, c.act, res, o.ldy, y, o.ldy, rows, pieces);
            });
        };
        const std::string name = kernel + " " + batched::shape(c) + ", S " + std::to_string(S) + ", " +
                                 std::to_string(cps) + " chunks a piece" + batched::flags(c);
        batched::check_case(name, c, o, launch, true);
    }
    return check::failures() ? 1 : 0;
}
