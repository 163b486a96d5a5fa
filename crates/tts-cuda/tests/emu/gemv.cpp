// Emulated check of gemv.cu's bf16 entries (gemv_m1, gemv_m1_pre, gemv_m1_u8,
// gemv_m1_u8_pre, gemv_m2, gemv_m4, gemv_m8: the talker's one-row steps and every stage's
// calls of 2-8 rows; the u8 entries also against gemv_m1, bit for bit) against an f64
// reference of
//   y[m][n] = act(inv_m · Σ_k xin[m][k] W[n][k] + bias[n]) + res[m][n],
// act 2 pairing rows (2i, 2i+1) as (gate, up) into y[m][i]; with the fused norm xin = g ⊙ x
// and inv_m = 1 / rms(x[m]); as a norm-chain reader X is already g ⊙ x and inv comes from
// the writer's Σ y² pair partials (ss_in); as a norm-chain writer (one row, act 0) the
// kernel also writes xo[n] = xo_g[n] · y[n] and ss_out[n / 2] = y[n]² + y[n + 1]².
// argv per case: kernel M N K blocks ksplit act norm (0 none, 1 fused, 2 chain reader) bias
// res writer rows_valid. Also: rows past rows_valid keep their poison; a second launch gives
// the same bits.

#include "gemv_ref.hpp"

struct GemvCase {
    std::string kernel;
    int M, N, K, blocks, ksplit, act, norm, bias, res, writer, rows_valid;
};

static void launch_gemv(const GemvCase& c, const bf16* W, const float* X, int ldx,
                        const float* norm_w, float eps, const float* bias, const float* res,
                        int ldr, float* Y, int ldy, const float* ss_in, int ss_n, float* xo,
                        const float* xo_g, float* ss_out) {
    emu::launch(dim3(c.blocks), dim3(256), 0, 1, [&] {
#define GEMV_ARGS                                                                           \
    W, c.N, c.K, X, ldx, norm_w, eps, bias, c.act, res, ldr, Y, ldy, c.rows_valid, c.ksplit, \
        nullptr, ss_in, ss_n, xo, xo_g, ss_out
        if (c.kernel == "gemv_m1")
            gemv_m1(GEMV_ARGS);
        else if (c.kernel == "gemv_m1_pre")
            gemv_m1_pre(GEMV_ARGS);
        else if (c.kernel == "gemv_m1_u8")
            gemv_m1_u8(GEMV_ARGS);
        else if (c.kernel == "gemv_m1_u8_pre")
            gemv_m1_u8_pre(GEMV_ARGS);
        else if (c.kernel == "gemv_m2")
            gemv_m2(GEMV_ARGS);
        else if (c.kernel == "gemv_m4")
            gemv_m4(GEMV_ARGS);
        else if (c.kernel == "gemv_m8")
            gemv_m8(GEMV_ARGS);
        else
            emu::fail("unknown kernel");
#undef GEMV_ARGS
    });
}

static void run_case(const GemvCase& c) {
    const int outs = c.act == 2 ? c.N / 2 : c.N;
    const int ldx = c.K + 8, ldy = outs + 4, ldr = outs + 12;
    check::Rng rng((uint64_t)c.N * 7919 + c.K * 31 + c.M * 7 + c.act + c.norm * 3);
    const auto w = check::bf16_values(rng, (size_t)c.N * c.K, 0.05f);
    const auto x = check::f32_values(rng, (size_t)c.M * ldx, 1.0f);
    std::vector<float> g(c.K);
    for (auto& v : g) v = 1.0f + rng.sym(0.1f);
    const auto bias = c.bias ? check::f32_values(rng, c.N, 0.5f) : std::vector<float>();
    const auto res = c.res ? check::f32_values(rng, (size_t)c.M * ldr, 1.0f) : std::vector<float>();
    std::vector<float> xo_g(c.N);
    for (auto& v : xo_g) v = 1.0f + rng.sym(0.1f);
    const float eps = 1e-6f;

    // the kernel's X: the rows, or (chain reader, one row) the rows with the gains applied,
    // beside the writer's pair partials of Σ x²
    std::vector<float> X = x, ss_in;
    if (c.norm == 2) {
        for (int k = 0; k < c.K; k++) X[k] = g[k] * x[k];
        for (int k = 0; k < c.K; k += 2) ss_in.push_back(x[k] * x[k] + x[k + 1] * x[k + 1]);
    }

    // reference
    const float poison = -12345.0f;
    std::vector<double> want((size_t)c.M * ldy, poison);
    std::vector<double> want_xo, want_ss;
    for (int m = 0; m < c.rows_valid; m++) {
        const auto y = gemv_row_ref(w, x.data() + (size_t)m * ldx, c.norm ? g.data() : nullptr,
                                    c.bias ? bias.data() : nullptr,
                                    c.res ? res.data() + (size_t)m * ldr : nullptr, c.N, c.K, c.act, eps);
        std::copy(y.begin(), y.end(), want.begin() + (size_t)m * ldy);
    }
    if (c.writer) {
        for (int n = 0; n < c.N; n++) want_xo.push_back(xo_g[n] * want[n]);
        for (int n = 0; n < c.N; n += 2) want_ss.push_back(want[n] * want[n] + want[n + 1] * want[n + 1]);
    }

    struct Out {
        std::vector<float> y, xo, ss;
    };
    auto run = [&](const GemvCase& kc) {
        Out o{std::vector<float>((size_t)c.M * ldy, poison), std::vector<float>(c.N, poison),
              std::vector<float>(c.N / 2, poison)};
        launch_gemv(kc, (const bf16*)w.data(), X.data(), ldx, c.norm == 1 ? g.data() : nullptr, eps,
                    c.bias ? bias.data() : nullptr, c.res ? res.data() : nullptr, ldr, o.y.data(), ldy,
                    c.norm == 2 ? ss_in.data() : nullptr, c.norm == 2 ? c.K / 2 : 0,
                    c.writer ? o.xo.data() : nullptr, c.writer ? xo_g.data() : nullptr,
                    c.writer ? o.ss.data() : nullptr);
        return o;
    };
    const Out o = run(c);
    static const char* norms[] = {"", " norm", " chain reader"};
    const std::string name = c.kernel + " " + std::to_string(c.N) + "x" + std::to_string(c.K) + " act " +
                             std::to_string(c.act) + norms[c.norm] + (c.bias ? " bias" : "") +
                             (c.res ? " res" : "") + (c.writer ? " chain writer" : "") + ", " +
                             std::to_string(c.rows_valid) + " of " + std::to_string(c.M) + " rows (" +
                             std::to_string(c.blocks) + " blocks, ksplit " + std::to_string(c.ksplit) + ")";
    // the valid rows against the reference, the rest (and the row padding) still poison
    check_gemv_rows(name, o.y, want, ldy, c.rows_valid, outs, poison);
    if (c.writer) {
        check::close(name + ": next layer's input", o.xo, want_xo, 2e-5);
        check::close(name + ": its Σ y² pair partials", o.ss, want_ss, 2e-5);
    }
    auto same_bits = [](const Out& a, const Out& b) {
        return std::memcmp(a.y.data(), b.y.data(), a.y.size() * 4) == 0 &&
               std::memcmp(a.xo.data(), b.xo.data(), a.xo.size() * 4) == 0 &&
               std::memcmp(a.ss.data(), b.ss.data(), a.ss.size() * 4) == 0;
    };
    check::expect(same_bits(o, run(c)), name + ": a second launch gives the same bits");
    // passes of 8 steps sum the same products in the same order as passes of 4
    if (c.kernel.rfind("gemv_m1_u8", 0) == 0) {
        GemvCase four = c;
        four.kernel = "gemv_m1";
        check::expect(same_bits(o, run(four)), name + ": the same bits as gemv_m1");
    }
}

int main(int argc, char** argv) {
    const int per = 12;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: gemv (kernel M N K blocks ksplit act norm bias res writer rows_valid)...");
    for (int i = 1; i < argc; i += per) {
        GemvCase c;
        c.kernel = argv[i];
        int* f[] = {&c.M, &c.N, &c.K, &c.blocks, &c.ksplit, &c.act, &c.norm, &c.bias, &c.res, &c.writer, &c.rows_valid};
        for (int j = 0; j < per - 1; j++) *f[j] = std::atoi(argv[i + 1 + j]);
        run_case(c);
    }
    return check::failures() ? 1 : 0;
}
