// Emulated check of mma_staged.cu (linear layers of a few rows on bf16 tensor cores, through
// the twins of mma_twins.hpp) against gemv_ref.hpp's f64 reference of each row
//   y[m][n] = act(inv_m · Σ_k g[k] x[m][k] W[n][k] + bias[n]) + res[m][n],
// inv_m = 1 / rms(x[m]) with the norm, act 2 pairing rows (2i, 2i+1) as (gate, up) into
// y[m][i]; on the plans `linear::staged_mma_plan` gives, with the entry
// `linear::staged_mma_kernel` picks for M rows. With `alias`, the residual is y itself
// (as the stack adds it in place). Also: nothing written past the M rows or the outputs,
// and a row's result does not depend on M (the first two rows again, alone: the same bits).
// argv per case: kernel N K M rpb blocks smem ldx act norm bias res alias.

#include "gemv_ref.hpp"

namespace {

using Entry = void (*)(const bf16*, int, int, const float*, int, const float*, float, const float*, int,
                       const float*, int, float*, int, int, int);

Entry entry(const std::string& name) {
    if (name == "mma_staged_t1") return mma_staged_t1;
    if (name == "mma_staged_t2") return mma_staged_t2;
    if (name == "mma_staged_t4") return mma_staged_t4;
    emu::fail("unknown kernel");
}

void run_case(const std::string& kernel, const int (&a)[12]) {
    const auto [N, K, M, rpb, blocks, smem, ldx, act, norm, with_bias, with_res, alias] = a;
    check::Rng rng((uint64_t)N * 131 + K * 7 + M);
    const auto w = check::bf16_values(rng, (size_t)N * K, 0.05f);
    const auto x = check::f32_values(rng, (size_t)M * ldx, 1.0f);
    std::vector<float> g(K);
    for (auto& v : g) v = 1.0f + rng.sym(0.1f);
    const int outs = act == 2 ? N / 2 : N, ldy = outs + 4;  // 4 columns no row may touch
    const auto bias = with_bias ? check::f32_values(rng, N, 0.5f) : std::vector<float>();
    const auto res = with_res ? check::f32_values(rng, (size_t)M * ldy, 1.0f) : std::vector<float>();
    const float eps = 1e-6f, poison = -12345.0f;
    // y before: the residual where it aliases, else poison; one poison row past M
    auto launch = [&](int rows) {
        std::vector<float> y((size_t)(rows + 1) * ldy, poison);
        if (alias) std::copy(res.begin(), res.begin() + (size_t)rows * ldy, y.begin());
        const float* r = alias ? y.data() : with_res ? res.data() : nullptr;
        emu::launch(dim3(blocks), dim3(256), smem, 1, [&] {
            entry(kernel)((const bf16*)w.data(), N, K, x.data(), ldx, norm ? g.data() : nullptr, eps,
                          with_bias ? bias.data() : nullptr, act, r, ldy, y.data(), ldy, rows, rpb);
        });
        return y;
    };
    const std::vector<float> y = launch(M);
    const std::string name = kernel + " " + std::to_string(N) + "x" + std::to_string(K) + ", " + std::to_string(M) +
                             " rows, act " + std::to_string(act) + (norm ? " norm" : "") + (with_bias ? " bias" : "") +
                             (with_res ? alias ? " res (in place)" : " res" : "") + " (" + std::to_string(blocks) +
                             " blocks of " + std::to_string(rpb) + " rows)";
    std::vector<float> got;
    std::vector<double> want;
    bool rest = true;
    for (int m = 0; m <= M; m++) {
        std::vector<double> ref;
        if (m < M)
            ref = gemv_row_ref(w, &x[(size_t)m * ldx], norm ? g.data() : nullptr, with_bias ? bias.data() : nullptr,
                               with_res ? &res[(size_t)m * ldy] : nullptr, N, K, act, eps);
        for (int n = 0; n < ldy; n++) {
            const float v = y[(size_t)m * ldy + n];
            if (m < M && n < outs) {
                got.push_back(v);
                want.push_back(ref[n]);
            } else {
                // past the outputs: the residual (in place) or poison, untouched
                const float before = alias && m < M ? res[(size_t)m * ldy + n] : poison;
                rest &= std::memcmp(&v, &before, 4) == 0;
            }
        }
    }
    check::close(name, got, want, 2e-5);
    check::expect(rest, name + ": nothing written past the rows' outputs");
    if (M > 2) {
        const std::vector<float> two = launch(2);
        check::expect(std::memcmp(two.data(), y.data(), (size_t)2 * ldy * 4) == 0,
                      name + ": the first two rows alone give the same bits");
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int per = 13;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: mma_staged (kernel N K M rpb blocks smem ldx act norm bias res alias)...");
    for (int i = 1; i < argc; i += per) {
        int a[12];
        for (int j = 0; j < 12; j++) a[j] = std::atoi(argv[i + 1 + j]);
        run_case(argv[i], a);
    }
    return check::failures() ? 1 : 0;
}
