// Emulated check of gemv_staged.cu (the code predictor's one-row linear layers) against an
// f64 reference of
//   y[n] = act(inv · Σ_k g[k] x[k] W[n][k] + bias[n]) + res[n],  inv = 1 / rms(x) with the norm,
// act 2 pairing rows (2i, 2i+1) as (gate, up) into y[i]; on the plans `linear::staged_plan`
// gives (argv per case: N K rpb blocks smem ksplit act norm bias res rows_valid).
// Also: a second launch gives the same bits, with each trigger; a padding call (rows_valid 0)
// writes nothing.

#include "gemv_ref.hpp"

static void run_case(int N, int K, int rpb, int blocks, int smem, int ksplit, int act, int norm,
                     int with_bias, int with_res, int rows_valid) {
    check::Rng rng((uint64_t)N * 7919 + K * 31 + act);
    const auto w = check::bf16_values(rng, (size_t)N * K, 0.05f);
    const auto x = check::f32_values(rng, K, 1.0f);
    std::vector<float> g(K);
    for (auto& v : g) v = 1.0f + rng.sym(0.1f);
    const int outs = act == 2 ? N / 2 : N;
    const auto bias = with_bias ? check::f32_values(rng, N, 0.5f) : std::vector<float>();
    const auto res = with_res ? check::f32_values(rng, outs, 1.0f) : std::vector<float>();
    const float eps = 1e-6f;
    const float poison = -12345.0f;
    auto launch = [&](std::vector<float>& y, int trigger) {
        emu::launch(dim3(blocks), dim3(256), smem, 1, [&] {
            gemv_staged_m1((const bf16*)w.data(), N, K, x.data(), K, norm ? g.data() : nullptr, eps,
                           with_bias ? bias.data() : nullptr, act, with_res ? res.data() : nullptr,
                           outs, y.data(), outs, rows_valid, ksplit, rpb, trigger);
        });
    };
    std::vector<float> y(outs, poison), again(outs, poison);
    launch(y, 1);
    const std::string name = "gemv_staged_m1 " + std::to_string(N) + "x" + std::to_string(K) +
                             " act " + std::to_string(act) + (norm ? " norm" : "") +
                             (with_bias ? " bias" : "") + (with_res ? " res" : "") + " (" +
                             std::to_string(blocks) + " blocks of " + std::to_string(rpb) +
                             " rows, ksplit " + std::to_string(ksplit) + ")";
    if (rows_valid == 0) {
        bool untouched = true;
        for (float v : y) untouched &= v == poison;
        check::expect(untouched, name + ": a padding call writes nothing");
        return;
    }
    check::close(name, y,
                 gemv_row_ref(w, x.data(), norm ? g.data() : nullptr, with_bias ? bias.data() : nullptr,
                              with_res ? res.data() : nullptr, N, K, act, eps),
                 2e-5);
    // both triggers (`linear::StagedTrigger`: after the wait, early)
    for (int trigger = 0; trigger < 2; trigger++) {
        std::fill(again.begin(), again.end(), poison);
        launch(again, trigger);
        check::expect(std::memcmp(y.data(), again.data(), y.size() * 4) == 0,
                      name + ": a second launch (trigger " + std::to_string(trigger) +
                          ") gives the same bits");
    }
}

int main(int argc, char** argv) {
    const int per = 11;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: gemv_staged (N K rpb blocks smem ksplit act norm bias res rows_valid)...");
    for (int i = 1; i < argc; i += per) {
        int a[per];
        for (int j = 0; j < per; j++) a[j] = std::atoi(argv[i + j]);
        run_case(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]);
    }
    return check::failures() ? 1 : 0;
}
