// gemv_ref.hpp — the f64 reference of the GEMV kernels' one row (gemv.cpp, gemv_staged.cpp):
//   y[n] = act(inv · Σ_k xin[k] W[n][k] + bias[n]) + res[n],
// xin = g ⊙ x and inv = 1 / rms(x) with the norm (`g` non-null), else xin = x and inv = 1;
// act 1 SiLU, act 2 pairing rows (2i, 2i + 1) as (gate, up) into y[i]. `bias` and `res`
// may be null.
#pragma once

#include "check.hpp"

inline std::vector<double> gemv_row_ref(const std::vector<uint16_t>& w, const float* x, const float* g,
                                        const float* bias, const float* res, int N, int K, int act,
                                        float eps) {
    double inv = 1.0;
    if (g) {
        double ss = 0;
        for (int k = 0; k < K; k++) ss += (double)x[k] * x[k];
        inv = 1.0 / std::sqrt(ss / K + eps);
    }
    std::vector<double> s(N);
    for (int n = 0; n < N; n++) {
        double a = 0;
        for (int k = 0; k < K; k++)
            a += (double)x[k] * (g ? g[k] : 1.0f) * check::from_bf16(w[(size_t)n * K + k]);
        s[n] = a * inv + (bias ? bias[n] : 0.0);
    }
    auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
    const int outs = act == 2 ? N / 2 : N;
    std::vector<double> y(outs);
    for (int i = 0; i < outs; i++) {
        const double v = act == 2 ? silu(s[2 * i]) * s[2 * i + 1] : act == 1 ? silu(s[i]) : s[i];
        y[i] = v + (res ? res[i] : 0.0);
    }
    return y;
}

// The output checks of a GEMV launch (gemv.cpp, gemv8.cpp): `y` (rows of stride `ldy`)
// within 2e-5 of `want` in the first `outs` columns of the first `rows_valid` rows, and
// every other element still `poison` (padding rows and columns, rows past the valid ones).
inline void check_gemv_rows(const std::string& name, const std::vector<float>& y, const std::vector<double>& want,
                            int ldy, int rows_valid, int outs, float poison) {
    std::vector<float> got_valid;
    std::vector<double> want_valid;
    bool untouched = true;
    for (size_t i = 0; i < y.size(); i++) {
        if ((int)(i / ldy) < rows_valid && (int)(i % ldy) < outs) {
            got_valid.push_back(y[i]);
            want_valid.push_back(want[i]);
        } else {
            untouched &= y[i] == poison;
        }
    }
    check::close(name, got_valid, want_valid, 2e-5);
    check::expect(untouched, name + ": padding rows and columns, and rows past the valid ones, keep their poison");
}
