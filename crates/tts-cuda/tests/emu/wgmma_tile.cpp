// Emulated check of tile_wg.cu (batched linear layers on Hopper's wgmma, through the twins of
// wgmma_twins.hpp; unit: tile.cu, tile_wg.cu) against an f64 reference over the same bf16
// operands, on the launch plans of the backend (kernels_emulated/tile_wg.rs); also tile.cu's
// own entry points (warp MMA through mma_twins.hpp, no chain: kernels_emulated/tile.rs):
//   y[m][n] = act(inv_m · Σ_k (hi[m][k] + lo[m][k]) W[n][k] + bias[n]) + res[m][n]
// with the split rows xb as linear.rs's to_bf16_rows writes them ([2M][K]: hi = bf16(v) in
// rows 0..M, lo = bf16(v - hi) in rows M..2M), act 2 pairing weight rows (2i, 2i+1) as
// (gate, up) into y[m][i]. With the chain's `ss_in` (TileChain), v = g ⊙ x without the
// norm and inv_m = 1 / sqrt(Σ_t ss_in[t][m] / K + eps), ss_in[t][m] = Σ x² over columns
// 128t.. (as the layer before leaves them); else inv_m = 1. With `xo`, the stored rows
// also go out as the next layer's split rows (hi + lo = xo_g ⊙ y, or y); with `ss_out`,
// each row's Σ y² over each block's 128 outputs (ss_out[blockIdx.y][m]). `alias`: the
// residual is y itself (in place, as the talker's O and down).
// Also checked: nothing written past the M rows, the outputs, 2M split rows or the
// (N / 128) · M sums (poison there, and a padding row of y); with `again`, the first two
// rows alone give the same bits (a row's result does not depend on M).
// argv per case: kernel N K M splits smem act bias res alias ss_in xo xo_g ss_out again.

namespace {

using Entry = void (*)(const bf16*, int, int, const bf16*, int, const float*, int, const float*, int, float*, int,
                       const float*, float, bf16*, const float*, float*);

// tile.cu's entry points (warp MMA, kernels_emulated/tile.rs) take no chain: a case of
// theirs passes none of ss_in, xo, xo_g, ss_out.
#define TILE_MMA_ENTRY(KERNEL)                                                                                   \
    [](const bf16* W, int N, int K, const bf16* xb, int M, const float* bias, int act, const float* res, int ldr, \
       float* Y, int ldy, const float* ss_in, float, bf16* xo, const float* xo_g, float* ss_out) {               \
        if (ss_in || xo || xo_g || ss_out) emu::fail(#KERNEL " takes no chain");                                  \
        KERNEL(W, N, K, xb, M, bias, act, res, ldr, Y, ldy);                                                      \
    }

Entry entry(const std::string& name) {
    if (name == "tile_wg_linear_t2") return tile_wg_linear_t2;
    if (name == "tile_wg_linear_t3") return tile_wg_linear_t3;
    if (name == "tile_wg_linear_t4") return tile_wg_linear_t4;
    if (name == "tile_wg_linear_t8") return tile_wg_linear_t8;
    if (name == "tile_linear_t2") return TILE_MMA_ENTRY(tile_linear_t2);
    if (name == "tile_linear_t4") return TILE_MMA_ENTRY(tile_linear_t4);
    if (name == "tile_linear_t8") return TILE_MMA_ENTRY(tile_linear_t8);
    emu::fail("unknown kernel");
}

struct Case {
    std::string kernel;
    int N, K, M, S, smem, act;
    bool bias, res, alias, ss_in, xo, xo_g, ss_out, again;
};

// What one launch over the first `rows` rows leaves: y, the split output rows, the Σ y².
struct Out {
    std::vector<float> y, ss;
    std::vector<uint16_t> xo;
};

constexpr float POISON = -12345.0f;
constexpr uint16_t XO_POISON = 0xffc1;  // a NaN bf16
constexpr float EPS = 1e-6f;

void run_case(const Case& c) {
    const int N = c.N, K = c.K, M = c.M, TILES = N / 128;
    const int outs = c.act == 2 ? N / 2 : N, ldy = outs + 4;  // 4 columns no row may touch
    if (c.ss_in && K % 128 != 0) emu::fail("ss_in: K of whole 128-column tiles (the layer before's outputs)");
    check::Rng rng((uint64_t)N * 131 + K * 7 + M);
    const auto w = check::bf16_values(rng, (size_t)N * K, 0.05f);
    // each row's values v before the split (g ⊙ x when the norm is deferred) and Σ x² by 128
    const auto x = check::f32_values(rng, (size_t)M * K, 1.0f);
    std::vector<float> g(K), v((size_t)M * K), ss_rows((size_t)M * (K / 128), 0.f);
    for (auto& e : g) e = 1.0f + rng.sym(0.1f);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            const float xv = x[(size_t)m * K + k];
            v[(size_t)m * K + k] = c.ss_in ? g[k] * xv : xv;
            if (c.ss_in) ss_rows[(size_t)m * (K / 128) + k / 128] += xv * xv;
        }
    const auto bias = c.bias ? check::f32_values(rng, N, 0.5f) : std::vector<float>();
    const auto res = c.res ? check::f32_values(rng, (size_t)M * ldy, 1.0f) : std::vector<float>();
    std::vector<float> xo_g(outs);
    for (auto& e : xo_g) e = 1.0f + rng.sym(0.1f);

    auto launch = [&](int rows) {
        // split rows: hi rows 0..rows, lo rows rows..2 rows (ops.cu's split_store); Σ x² [t][m]
        std::vector<uint16_t> xb((size_t)2 * rows * K);
        std::vector<float> ss_in((size_t)(K / 128) * rows);
        for (int m = 0; m < rows; m++) {
            for (int k = 0; k < K; k++) {
                const float val = v[(size_t)m * K + k];
                const uint16_t hi = check::to_bf16(val);
                xb[(size_t)m * K + k] = hi;
                xb[(size_t)(rows + m) * K + k] = check::to_bf16(val - check::from_bf16(hi));
            }
            for (int t = 0; t < K / 128; t++) ss_in[(size_t)t * rows + m] = ss_rows[(size_t)m * (K / 128) + t];
        }
        Out o;
        o.y.assign((size_t)(rows + 1) * ldy, POISON);  // one padding row past `rows`
        if (c.alias) std::copy(res.begin(), res.begin() + (size_t)rows * ldy, o.y.begin());
        o.xo.assign((size_t)2 * rows * outs + 64, XO_POISON);
        o.ss.assign((size_t)TILES * rows + 8, POISON);
        const float* r = c.alias ? o.y.data() : c.res ? res.data() : nullptr;
        emu::launch(dim3(c.S, TILES), dim3(256), c.smem, c.S, [&] {
            entry(c.kernel)((const bf16*)w.data(), N, K, (const bf16*)xb.data(), rows,
                            c.bias ? bias.data() : nullptr, c.act, r, ldy, o.y.data(), ldy,
                            c.ss_in ? ss_in.data() : nullptr, EPS, c.xo ? (bf16*)o.xo.data() : nullptr,
                            c.xo_g ? xo_g.data() : nullptr, c.ss_out ? o.ss.data() : nullptr);
        });
        return o;
    };
    const Out o = launch(M);

    // the f64 reference, row by row
    auto silu = [](double a) { return a / (1.0 + std::exp(-a)); };
    std::vector<double> ref((size_t)M * outs);
    for (int m = 0; m < M; m++) {
        double inv = 1.0;
        if (c.ss_in) {
            double q = 0;
            for (int t = 0; t < K / 128; t++) q += ss_rows[(size_t)m * (K / 128) + t];
            inv = 1.0 / std::sqrt(q / K + EPS);
        }
        std::vector<double> xs(K);
        for (int k = 0; k < K; k++) {
            const float val = v[(size_t)m * K + k], hi = check::from_bf16(check::to_bf16(val));
            xs[k] = (double)hi + check::from_bf16(check::to_bf16(val - hi));
        }
        std::vector<double> s(N);
        for (int n = 0; n < N; n++) {
            double a = 0;
            const uint16_t* wr = &w[(size_t)n * K];
            for (int k = 0; k < K; k++) a += xs[k] * check::from_bf16(wr[k]);
            s[n] = a * inv + (c.bias ? bias[n] : 0.0);
        }
        for (int i = 0; i < outs; i++) {
            const double a = c.act == 2 ? silu(s[2 * i]) * s[2 * i + 1] : c.act == 1 ? silu(s[i]) : s[i];
            ref[(size_t)m * outs + i] = a + (c.res ? res[(size_t)m * ldy + i] : 0.0);
        }
    }

    std::string name = c.kernel + " " + std::to_string(N) + "x" + std::to_string(K) + ", " + std::to_string(M) +
                       " rows, act " + std::to_string(c.act) + (c.bias ? " bias" : "") +
                       (c.res ? c.alias ? " res (in place)" : " res" : "") + (c.ss_in ? " ss_in" : "") +
                       (c.xo ? c.xo_g ? " xo (gains)" : " xo" : "") + (c.ss_out ? " ss_out" : "") + " (clusters of " +
                       std::to_string(c.S) + ", " + std::to_string(TILES) + " column blocks)";
    // y: the outputs, and the rest untouched (the residual in place, else poison)
    std::vector<float> got;
    std::vector<double> want;
    bool rest = true;
    for (int m = 0; m <= M; m++)
        for (int n = 0; n < ldy; n++) {
            const float e = o.y[(size_t)m * ldy + n];
            if (m < M && n < outs) {
                got.push_back(e);
                want.push_back(ref[(size_t)m * outs + n]);
            } else {
                const float before = c.alias && m < M ? res[(size_t)m * ldy + n] : POISON;
                rest &= std::memcmp(&e, &before, 4) == 0;
            }
        }
    check::close(name, got, want, 2e-5);
    check::expect(rest, name + ": nothing written past the rows' outputs");
    // the next layer's split rows: hi + lo = xo_g ⊙ y (to the f32 of y), nothing past 2M rows
    if (c.xo) {
        std::vector<float> split;
        std::vector<double> want_split;
        for (int m = 0; m < M; m++)
            for (int i = 0; i < outs; i++) {
                const double hi = check::from_bf16(o.xo[(size_t)m * outs + i]);
                split.push_back((float)(hi + check::from_bf16(o.xo[(size_t)(M + m) * outs + i])));
                want_split.push_back((c.xo_g ? xo_g[i] : 1.0) * ref[(size_t)m * outs + i]);
            }
        check::close(name + ": split output rows", split, want_split, 2e-5);
        bool past = true;
        for (size_t i = (size_t)2 * M * outs; i < o.xo.size(); i++) past &= o.xo[i] == XO_POISON;
        check::expect(past, name + ": nothing written past the 2M split output rows");
    } else {
        bool none = true;
        for (uint16_t e : o.xo) none &= e == XO_POISON;
        check::expect(none, name + ": no split output rows without xo");
    }
    // Σ y² of each row over each block's outputs
    if (c.ss_out) {
        const int per = outs / TILES;
        std::vector<float> sums;
        std::vector<double> want_ss;
        for (int t = 0; t < TILES; t++)
            for (int m = 0; m < M; m++) {
                double q = 0;
                for (int i = t * per; i < (t + 1) * per; i++) q += ref[(size_t)m * outs + i] * ref[(size_t)m * outs + i];
                sums.push_back(o.ss[(size_t)t * M + m]);
                want_ss.push_back(q);
            }
        check::close(name + ": Σ y² by block", sums, want_ss, 5e-5);
    }
    bool ss_past = true;
    for (size_t i = c.ss_out ? (size_t)TILES * M : 0; i < o.ss.size(); i++) ss_past &= o.ss[i] == POISON;
    check::expect(ss_past, name + ": no Σ y² past the (N / 128) · M sums");

    if (c.again) {
        const Out two = launch(2);
        bool same = std::memcmp(two.y.data(), o.y.data(), (size_t)2 * ldy * 4) == 0;
        for (int m = 0; m < 2 && c.xo; m++)
            same &= std::memcmp(&two.xo[(size_t)m * outs], &o.xo[(size_t)m * outs], (size_t)outs * 2) == 0 &&
                    std::memcmp(&two.xo[(size_t)(2 + m) * outs], &o.xo[(size_t)(M + m) * outs], (size_t)outs * 2) == 0;
        for (int t = 0; t < TILES && c.ss_out; t++)
            same &= std::memcmp(&two.ss[(size_t)t * 2], &o.ss[(size_t)t * M], 2 * 4) == 0;
        check::expect(same, name + ": the first two rows alone give the same bits");
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int per = 15;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: wgmma_tile (kernel N K M splits smem act bias res alias ss_in xo xo_g ss_out again)...");
    for (int i = 1; i < argc; i += per) {
        int a[14];
        for (int j = 0; j < 14; j++) a[j] = std::atoi(argv[i + 1 + j]);
        run_case(Case{argv[i], a[0], a[1], a[2], a[3], a[4], a[5], a[6] != 0, a[7] != 0, a[8] != 0, a[9] != 0,
                      a[10] != 0, a[11] != 0, a[12] != 0, a[13] != 0});
    }
    return check::failures() ? 1 : 0;
}
