// batched_case.hpp — what the batched linear drivers (batched_wide.cpp, batched_mma.cpp,
// batched_cluster.cpp) check of one call of M rows, against gemv_ref.hpp's f64 reference of
// each row over the same bf16 weights and f32 rows:
//   y[m][n] = act(inv_m · Σ_k g[k] x[m][k] W[n][k] + bias[n]) + res[m][n]
// (inv_m = 1 / rms(x[m]) with the norm; act 2 pairs rows (2i, 2i+1) as (gate, up) into
// y[m][i]; with `alias` the residual is y itself, as the stack adds it in place).
//   * the outputs within 2e-5 of the largest: the kernels carry the rows as bf16 hi + lo
//     parts (relative error 2^-16) and sum in f32 in their own order; another f32 order
//     moves a sum by about sqrt(K)·2^-24 of its terms, far below that;
//   * nothing written but the outputs: the columns past them (4 per row), the padding rows
//     M.. of the kernel's row tiles and one row more keep their poison (or the residual);
//     the input rows past M are NaN, so a valid row that took anything of them shows it;
//   * with `alone`, rows 0 and M-1 by themselves (a call of one row, on the plan the
//     backend makes for one row) give the same bits as in the batch.
#pragma once

#include <functional>

#include "gemv_ref.hpp"

namespace batched {

struct Case {
    int N, K, M, ldx, act, norm, bias, res, alias;
    int padded;  // rows the kernel's row tiles cover (>= M): M.. are padding
};

// The case's operands, from its shape (the same values for the same case).
struct Operands {
    std::vector<uint16_t> w;
    std::vector<float> x, g, bias, res;
    int outs, ldy;
    explicit Operands(const Case& c) {
        check::Rng rng((uint64_t)c.N * 131 + c.K * 7 + c.M);
        w = check::bf16_values(rng, (size_t)c.N * c.K, 0.05f);
        x = check::f32_values(rng, (size_t)c.M * c.ldx, 1.0f);
        x.resize((size_t)(c.padded + 1) * c.ldx, std::nanf(""));
        g.resize(c.K);
        for (auto& v : g) v = 1.0f + rng.sym(0.1f);
        outs = c.act == 2 ? c.N / 2 : c.N;
        ldy = outs + 4;
        if (c.bias) bias = check::f32_values(rng, c.N, 0.5f);
        if (c.res) res = check::f32_values(rng, (size_t)c.M * ldy, 1.0f);
    }
};

constexpr float EPS = 1e-6f, POISON = -12345.0f;

// "N x K, M rows" and " act a norm bias res": a case's name around its plan.
inline std::string shape(const Case& c) {
    return std::to_string(c.N) + "x" + std::to_string(c.K) + ", " + std::to_string(c.M) + " rows";
}
inline std::string flags(const Case& c) {
    return ", act " + std::to_string(c.act) + (c.norm ? " norm" : "") + (c.bias ? " bias" : "") +
           (c.res ? c.alias ? " res (in place)" : " res" : "");
}

// Runs the kernel(s) on `rows` rows from x (row stride ldx), residual `res` (row stride
// ldy, may be y), into y (row stride ldy).
using Launch = std::function<void(const float* x, int rows, const float* res, float* y)>;

inline void check_case(const std::string& name, const Case& c, const Operands& o, const Launch& launch,
                       bool alone) {
    const int ldy = o.ldy, rows_y = std::max(c.M, c.padded) + 1;
    // y before: the residual rows where it aliases, else poison
    auto run = [&](int first, int rows) {
        std::vector<float> y((size_t)rows_y * ldy, POISON);
        if (c.alias)
            std::copy(o.res.begin() + (size_t)first * ldy, o.res.begin() + (size_t)(first + rows) * ldy, y.begin());
        const float* r = c.alias ? y.data() : c.res ? o.res.data() + (size_t)first * ldy : nullptr;
        launch(o.x.data() + (size_t)first * c.ldx, rows, r, y.data());
        return y;
    };
    const std::vector<float> y = run(0, c.M);
    std::vector<float> got;
    std::vector<double> want;
    bool rest = true;
    for (int m = 0; m < rows_y; m++) {
        std::vector<double> ref;
        if (m < c.M)
            ref = gemv_row_ref(o.w, &o.x[(size_t)m * c.ldx], c.norm ? o.g.data() : nullptr,
                               c.bias ? o.bias.data() : nullptr, c.res ? &o.res[(size_t)m * ldy] : nullptr, c.N,
                               c.K, c.act, EPS);
        for (int n = 0; n < ldy; n++) {
            const float v = y[(size_t)m * ldy + n];
            if (m < c.M && n < o.outs) {
                got.push_back(v);
                want.push_back(ref[n]);
            } else {
                const float before = c.alias && m < c.M ? o.res[(size_t)m * ldy + n] : POISON;
                rest &= std::memcmp(&v, &before, 4) == 0;
            }
        }
    }
    check::close(name, got, want, 2e-5);
    const std::string padding =
        c.padded > c.M ? " (padding rows " + std::to_string(c.M) + ".." + std::to_string(c.padded - 1) + ")" : "";
    check::expect(rest, name + ": nothing written but the rows' outputs" + padding);
    if (!alone) return;
    bool same = true;
    for (int m : {0, c.M - 1}) {
        const std::vector<float> one = run(m, 1);
        same &= std::memcmp(one.data(), &y[(size_t)m * ldy], (size_t)ldy * 4) == 0;
        // and the single call writes nothing past its row
        for (size_t i = ldy; i < one.size(); i++) same &= std::memcmp(&one[i], &POISON, 4) == 0;
    }
    check::expect(same, name + ": rows 0 and " + std::to_string(c.M - 1) + " alone give the same bits");
}

// argv[i..i+n) as ints.
inline std::vector<int> ints(char** argv, int i, int n) {
    std::vector<int> v(n);
    for (int j = 0; j < n; j++) v[j] = std::atoi(argv[i + j]);
    return v;
}

}  // namespace batched
