// Emulated check of the small row-moving kernels of embed.cu and the row helpers of ops.cu
// against f64 (or exact) references, on the launches the backend makes. Each argv entry is
// one case, "kernel gx gy gz block p0 p1 ...", the parameters per kernel below. Every
// output buffer has poison around what the kernel should write (row padding up to ld, an
// extra row, rows a negative id skips, the even rows of cp_first_input, the bytes between
// copy_runs2's runs), which must keep its bits; a second launch gives the same bits.

#include <sstream>

#include "check.hpp"

namespace {

const float kPoison = -12345.0f;
const uint16_t kPoisonBf = 0xBEEF;

struct Case {
    std::string kernel, spec;
    dim3 grid, block;
    std::vector<double> p;
    int i(size_t k) const { return (int)p.at(k); }
};

// The ids of `rows` rows into a table of `n` rows: the last row, then -1 (nothing), then
// distinct rows spread over the table (distinct: scatter_u32 writes each once).
std::vector<int> make_ids(int rows, int n) {
    std::vector<int> ids(rows);
    for (int r = 0; r < rows; r++) ids[r] = r == 0 ? n - 1 : r == 1 ? -1 : (int)(((long)r * 7919) % (n - 1));
    for (int r = 2; r < rows; r++)
        for (int u = 0; u < r; u++)
            if (ids[u] == ids[r]) emu::fail("make_ids: the table is too small for distinct ids");
    return ids;
}

// Whether every element of got that `written(i)` does not name equals before's bits.
template <typename T, typename F>
bool kept(const std::vector<T>& got, const std::vector<T>& before, F written) {
    for (size_t i = 0; i < got.size(); i++)
        if (!written(i) && std::memcmp(&got[i], &before[i], sizeof(T)) != 0) return false;
    return true;
}

void launch(const Case& c, const std::function<void()>& body) { emu::launch(c.grid, c.block, 0, 1, body); }

// gather_rows / gather_rows_f32: D table_rows rows ldo accumulate.
// out[r][:D] (+)= table[ids[r]] (a negative id: zeros), the rest of out kept.
template <typename TT>
void gather_rows_case(const Case& c, check::Rng& rng) {
    const int D = c.i(0), n = c.i(1), rows = c.i(2), ldo = c.i(3), acc = c.i(4);
    if ((int)c.grid.x != rows) emu::fail("gather_rows: grid (rows)");
    std::vector<TT> table((size_t)n * D);
    for (auto& v : table) {
        if constexpr (sizeof(TT) == 2) v = check::to_bf16(rng.sym(2.0f));
        else v = rng.sym(2.0f);
    }
    const auto ids = make_ids(rows, n);
    auto out0 = check::f32_values(rng, (size_t)(rows + 1) * ldo, 1.0f);
    auto value = [&](size_t at) { if constexpr (sizeof(TT) == 2) return (double)check::from_bf16(table[at]); else return (double)table[at]; };
    auto run = [&] {
        auto out = out0;
        launch(c, [&] {
            if constexpr (sizeof(TT) == 2) gather_rows(table.data(), D, ids.data(), rows, out.data(), ldo, acc);
            else gather_rows_f32(table.data(), D, ids.data(), rows, out.data(), ldo, acc);
        });
        return out;
    };
    const auto got = run();
    std::vector<float> g;
    std::vector<double> w;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < D; i++) {
            g.push_back(got[(size_t)r * ldo + i]);
            w.push_back((acc ? out0[(size_t)r * ldo + i] : 0.0) + (ids[r] < 0 ? 0.0 : value((size_t)ids[r] * D + i)));
        }
    check::close(c.spec + ": rows", g, w, 1e-6);
    check::expect(kept(got, out0, [&](size_t i) { return (int)(i / ldo) < rows && (int)(i % ldo) < D; }),
                  c.spec + ": nothing written past D nor past the rows");
    check::expect(run() == got, c.spec + ": a second launch gives the same bits");
}

// frame_embedding: H codec_vocab cp_vocab rows ldt ldo.
// out[r] = codec[f0] + sum_j cp_emb[j][f_{j+1}] + text[r] (f = frames[r][0..16]).
void frame_embedding_case(const Case& c, check::Rng& rng) {
    const int H = c.i(0), cv = c.i(1), pv = c.i(2), rows = c.i(3), ldt = c.i(4), ldo = c.i(5);
    if ((int)c.grid.x != rows) emu::fail("frame_embedding: grid (rows)");
    const auto codec = check::bf16_values(rng, (size_t)cv * H, 1.0f);
    const auto cp = check::bf16_values(rng, (size_t)15 * pv * H, 1.0f);
    const auto text = check::f32_values(rng, (size_t)rows * ldt, 1.0f);
    std::vector<int> frames((size_t)rows * 16);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < 16; j++) {
            const int vocab = j == 0 ? cv : pv;
            // the tables' first and last rows among them
            frames[r * 16 + j] = r == 0 ? vocab - 1 : r == 1 ? 0 : (int)((rng.next() >> 33) % vocab);
        }
    const std::vector<float> out0((size_t)(rows + 1) * ldo, kPoison);
    auto run = [&] {
        auto out = out0;
        launch(c, [&] {
            frame_embedding(codec.data(), cp.data(), H, frames.data(), text.data(), ldt, out.data(), ldo, rows, pv);
        });
        return out;
    };
    const auto got = run();
    std::vector<float> g;
    std::vector<double> w;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < H; i++) {
            const int* f = &frames[r * 16];
            double v = check::from_bf16(codec[(size_t)f[0] * H + i]) + text[(size_t)r * ldt + i];
            for (int j = 0; j < 15; j++) v += check::from_bf16(cp[((size_t)j * pv + f[j + 1]) * H + i]);
            g.push_back(got[(size_t)r * ldo + i]);
            w.push_back(v);
        }
    // 17 terms of magnitude <= 1 in any f32 order
    check::close(c.spec + ": rows", g, w, 1e-5);
    check::expect(kept(got, out0, [&](size_t i) { return (int)(i / ldo) < rows && (int)(i % ldo) < H; }),
                  c.spec + ": nothing written past H nor past the rows");
    check::expect(run() == got, c.spec + ": a second launch gives the same bits");
}

// copy_rows: lds ldd D rows.
void copy_rows_case(const Case& c, check::Rng& rng) {
    const int lds = c.i(0), ldd = c.i(1), D = c.i(2), rows = c.i(3);
    if ((int)c.grid.x != rows) emu::fail("copy_rows: grid (rows)");
    const auto src = check::f32_values(rng, (size_t)rows * lds, 2.0f);
    const std::vector<float> dst0((size_t)(rows + 1) * ldd, kPoison);
    auto run = [&] {
        auto dst = dst0;
        launch(c, [&] { copy_rows(src.data(), lds, dst.data(), ldd, D, rows); });
        return dst;
    };
    const auto got = run();
    bool same = true;
    for (int r = 0; r < rows; r++) same &= std::memcmp(&got[(size_t)r * ldd], &src[(size_t)r * lds], D * 4) == 0;
    check::expect(same, c.spec + ": the rows' first D values copied exactly");
    check::expect(kept(got, dst0, [&](size_t i) { return (int)(i / ldd) < rows && (int)(i % ldd) < D; }),
                  c.spec + ": nothing written past D nor past the rows");
    check::expect(run() == got, c.spec + ": a second launch gives the same bits");
}

// gather_u32 / scatter_u32: ld_table D table_rows rows ld_rows.
// gather: rows[r] = table[ids[r]]; scatter: table[ids[r]] = rows[r]; negative ids: nothing.
void indexed_u32_case(const Case& c, check::Rng& rng, bool scatter) {
    const int ldt = c.i(0), D = c.i(1), n = c.i(2), rows = c.i(3), ldr = c.i(4);
    if ((int)c.grid.x != rows) emu::fail("gather/scatter_u32: grid (rows)");
    const auto ids = make_ids(rows, n);
    std::vector<unsigned> table((size_t)n * ldt), rws((size_t)(rows + 1) * ldr);
    for (auto& v : table) v = (unsigned)rng.next();
    for (auto& v : rws) v = (unsigned)rng.next();
    auto run = [&] {
        auto t = table;
        auto o = rws;
        launch(c, [&] {
            if (scatter) scatter_u32(o.data(), ldr, D, ids.data(), rows, t.data(), ldt);
            else gather_u32(t.data(), ldt, D, ids.data(), rows, o.data(), ldr);
        });
        return scatter ? t : o;
    };
    const auto got = run();
    bool same = true;
    for (int r = 0; r < rows; r++)
        if (ids[r] >= 0)
            same &= std::memcmp(scatter ? &got[(size_t)ids[r] * ldt] : &got[(size_t)r * ldr],
                                scatter ? &rws[(size_t)r * ldr] : &table[(size_t)ids[r] * ldt], D * 4) == 0;
    check::expect(same, c.spec + ": every row with an id moved exactly");
    const auto& before = scatter ? table : rws;
    check::expect(kept(got, before, [&](size_t i) {
                      if (scatter) {
                          const int row = (int)(i / ldt);
                          bool named = false;
                          for (int id : ids) named |= id == row;
                          return named && (int)(i % ldt) < D;
                      }
                      const int r = (int)(i / ldr);
                      return r < rows && ids[r] >= 0 && (int)(i % ldr) < D;
                  }),
                  c.spec + ": nothing else written (past D, rows of negative ids, other rows)");
    check::expect(run() == got, c.spec + ": a second launch gives the same bits");
}

// cp_first_input: D rows folded vocab. out row 2r+1 = folded[code] (f32) or raw[code]
// (bf16), code = frames[r][0]; the even rows are the caller's.
void cp_first_input_case(const Case& c, check::Rng& rng) {
    const int D = c.i(0), rows = c.i(1), folded = c.i(2), vocab = c.i(3);
    if ((int)c.grid.x != rows) emu::fail("cp_first_input: grid (rows)");
    const auto f32 = check::f32_values(rng, (size_t)vocab * D, 2.0f);
    const auto raw = check::bf16_values(rng, (size_t)vocab * D, 2.0f);
    std::vector<int> frames((size_t)rows * 16);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < 16; j++) frames[r * 16 + j] = (int)((rng.next() >> 33) % vocab);
    frames[0] = vocab - 1;
    auto out0 = check::f32_values(rng, (size_t)(2 * rows + 1) * D, 1.0f);
    auto run = [&] {
        auto out = out0;
        launch(c, [&] { cp_first_input(folded ? f32.data() : nullptr, raw.data(), D, frames.data(), rows, out.data()); });
        return out;
    };
    const auto got = run();
    bool same = true;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < D; i++) {
            const size_t at = (size_t)frames[r * 16] * D + i;
            same &= got[(size_t)(2 * r + 1) * D + i] == (folded ? f32[at] : check::from_bf16(raw[at]));
        }
    check::expect(same, c.spec + ": the odd rows hold code 0's embedding");
    check::expect(kept(got, out0, [&](size_t i) { const size_t row = i / D; return row % 2 == 1 && (int)row < 2 * rows; }),
                  c.spec + ": the even rows and the row past the last are kept");
    check::expect(run() == got, c.spec + ": a second launch gives the same bits");
}

// rms_norm_rows: ldx K rows ldo eps. out[r] = g ⊙ x[r] / sqrt(mean(x[r]²) + eps).
void rms_norm_rows_case(const Case& c, check::Rng& rng) {
    const int ldx = c.i(0), K = c.i(1), rows = c.i(2), ldo = c.i(3);
    const float eps = (float)c.p.at(4);
    if ((int)c.grid.x != rows) emu::fail("rms_norm_rows: grid (rows)");
    const auto x = check::f32_values(rng, (size_t)rows * ldx, 3.0f);
    std::vector<float> g(K);
    for (auto& v : g) v = 1.0f + rng.sym(0.5f);
    const std::vector<float> out0((size_t)(rows + 1) * ldo, kPoison);
    auto run = [&] {
        auto out = out0;
        launch(c, [&] { rms_norm_rows(x.data(), ldx, K, g.data(), eps, out.data(), ldo, rows); });
        return out;
    };
    const auto got = run();
    std::vector<float> gv;
    std::vector<double> w;
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int k = 0; k < K; k++) ss += (double)x[(size_t)r * ldx + k] * x[(size_t)r * ldx + k];
        const double inv = 1.0 / std::sqrt(ss / K + eps);
        for (int k = 0; k < K; k++) {
            gv.push_back(got[(size_t)r * ldo + k]);
            w.push_back(g[k] * x[(size_t)r * ldx + k] * inv);
        }
    }
    check::close(c.spec + ": normed rows", gv, w, 1e-5);
    check::expect(kept(got, out0, [&](size_t i) { return (int)(i / ldo) < rows && (int)(i % ldo) < K; }),
                  c.spec + ": nothing written past K nor past the rows");
    check::expect(run() == got, c.spec + ": a second launch gives the same bits");
}

// linear_epilogue: N rows act bias res ldr ldy next_g xb eps [alias]. acc [2 rows][N] (hi
// rows' products, then lo rows'); y[r] = act(acc_hi + acc_lo + bias) (+ res), act 2 on
// (gate, up) pairs, N/2 outputs; with xb also y's split rows (normed by next_g when given),
// ld N or N/2. With alias (1), the residual is y itself (res = y, ldr = ldy: linear.rs's
// call for the talker's O and down projections, adding the residual stream in place): y's
// rows hold the residual before the launch, and what the kernel must not write keeps it.
void linear_epilogue_case(const Case& c, check::Rng& rng) {
    const int N = c.i(0), rows = c.i(1), act = c.i(2), has_bias = c.i(3), has_res = c.i(4), ldr = c.i(5),
              ldy = c.i(6), has_g = c.i(7), has_xb = c.i(8);
    const float eps = (float)c.p.at(9);
    const bool alias = c.p.size() > 10 && c.i(10) != 0;
    if ((int)c.grid.x != rows) emu::fail("linear_epilogue: grid (rows)");
    if (alias && (!has_res || ldr != ldy)) emu::fail("linear_epilogue: alias is a residual of y's stride");
    const int out_n = act == 2 ? N / 2 : N;
    const auto acc = check::f32_values(rng, (size_t)2 * rows * N, 3.0f);
    const auto bias = check::f32_values(rng, N, 1.0f);
    const auto res = check::f32_values(rng, (size_t)rows * ldr, 2.0f);
    std::vector<float> g(out_n);
    for (auto& v : g) v = 1.0f + rng.sym(0.5f);
    std::vector<float> y0((size_t)(rows + 1) * ldy, kPoison);
    if (alias) std::copy(res.begin(), res.end(), y0.begin());  // rows 0..rows: the residual
    const std::vector<uint16_t> xb0(has_xb ? (size_t)(2 * rows + 1) * out_n : 0, kPoisonBf);
    std::vector<float> y;
    std::vector<uint16_t> xb;
    auto run = [&] {
        y = y0;
        xb = xb0;
        launch(c, [&] {
            const float* r = alias ? y.data() : has_res ? res.data() : nullptr;
            linear_epilogue(acc.data(), N, has_bias ? bias.data() : nullptr, act, r, ldr,
                            y.data(), ldy, rows, has_g ? g.data() : nullptr, eps, has_xb ? xb.data() : nullptr, out_n);
        });
    };
    run();
    const auto got = y;
    const auto got_xb = xb;
    auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
    std::vector<float> gv;
    std::vector<double> w;
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < out_n; n++) {
            auto sum = [&](int col) {
                return (double)acc[(size_t)r * N + col] + acc[(size_t)(rows + r) * N + col] + (has_bias ? bias[col] : 0.0);
            };
            double v = act == 2 ? silu(sum(2 * n)) * sum(2 * n + 1) : act == 1 ? silu(sum(n)) : sum(n);
            if (has_res) v += res[(size_t)r * ldr + n];
            gv.push_back(got[(size_t)r * ldy + n]);
            w.push_back(v);
        }
    check::close(c.spec + ": y", gv, w, 2e-6);
    check::expect(kept(got, y0, [&](size_t i) { return (int)(i / ldy) < rows && (int)(i % ldy) < out_n; }),
                  c.spec + ": nothing written past the outputs nor past the rows");
    if (has_xb) {
        // the split of the kernel's own y rows: hi = bf16(v), lo = bf16(v - hi), v normed by
        // next_g; checked as hi + lo against the f64 value (hi exactly where v is y itself)
        std::vector<float> sv;
        std::vector<double> sw;
        bool hi_exact = true;
        for (int r = 0; r < rows; r++) {
            double ss = 0;
            for (int n = 0; n < out_n; n++) ss += (double)got[(size_t)r * ldy + n] * got[(size_t)r * ldy + n];
            const double inv = has_g ? 1.0 / std::sqrt(ss / out_n + eps) : 1.0;
            for (int n = 0; n < out_n; n++) {
                const float yv = got[(size_t)r * ldy + n];
                const uint16_t hi = got_xb[(size_t)r * out_n + n], lo = got_xb[(size_t)(rows + r) * out_n + n];
                sv.push_back(check::from_bf16(hi) + check::from_bf16(lo));
                sw.push_back(has_g ? g[n] * yv * inv : yv);
                if (!has_g) hi_exact &= hi == check::to_bf16(yv);
            }
        }
        // hi + lo holds v to about 2^-16 of its size
        check::close(c.spec + ": xb hi + lo rows", sv, sw, 4e-5);
        if (!has_g) check::expect(hi_exact, c.spec + ": xb hi rows are bf16(y) (no norm)");
        check::expect(kept(got_xb, xb0, [&](size_t i) { return (int)(i / out_n) < 2 * rows; }),
                      c.spec + ": nothing written past the split rows");
    }
    run();
    check::expect(y == got && xb == got_xb, c.spec + ": a second launch gives the same bits");
}

// add_bias_rows: N rows. t[r][n] += b[n] for r < rows.
void add_bias_rows_case(const Case& c, check::Rng& rng) {
    const int N = c.i(0), rows = c.i(1);
    if ((int)c.grid.x != rows) emu::fail("add_bias_rows: grid (rows)");
    const auto t0 = check::f32_values(rng, (size_t)(rows + 1) * N, 2.0f);
    const auto b = check::f32_values(rng, N, 1.0f);
    auto run = [&] {
        auto t = t0;
        launch(c, [&] { add_bias_rows(t.data(), N, b.data(), rows); });
        return t;
    };
    const auto got = run();
    bool exact = true;
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < N; n++) exact &= got[(size_t)r * N + n] == t0[(size_t)r * N + n] + b[n];
    check::expect(exact, c.spec + ": every row plus the bias (one f32 add: exact)");
    check::expect(kept(got, t0, [&](size_t i) { return (int)(i / N) < rows; }), c.spec + ": the row past the last kept");
    check::expect(run() == got, c.spec + ": a second launch gives the same bits");
}

// copy_runs2: n16 src_stride dst_stride (16-byte units); grid (blocks, layers, 2). For layer
// l and pair z: dst_z + l·dst_stride <- src_z + l·src_stride, n16 pieces.
void copy_runs2_case(const Case& c, check::Rng& rng) {
    const int n16 = c.i(0), ss = c.i(1), ds = c.i(2), layers = (int)c.grid.y;
    if (c.grid.z != 2) emu::fail("copy_runs2: grid z is the two pairs");
    auto fill = [&](size_t n) {
        std::vector<uint4> v(n);
        for (auto& u : v) u = make_uint4((unsigned)rng.next(), (unsigned)rng.next(), (unsigned)rng.next(), (unsigned)rng.next());
        return v;
    };
    const auto sa = fill((size_t)layers * ss), sb = fill((size_t)layers * ss);
    const auto da0 = fill((size_t)layers * ds + n16), db0 = fill((size_t)layers * ds + n16);
    std::vector<uint4> da, db;
    auto run = [&] {
        da = da0;
        db = db0;
        launch(c, [&] { copy_runs2(sa.data(), sb.data(), da.data(), db.data(), ss, ds, n16); });
    };
    run();
    const auto ga = da, gb = db;
    auto eq = [](const uint4& a, const uint4& b) { return std::memcmp(&a, &b, 16) == 0; };
    bool copied = true, others = true;
    for (size_t i = 0; i < ga.size(); i++) {
        const size_t l = i / ds, k = i % ds;
        if ((int)l < layers && (int)k < n16) {
            copied &= eq(ga[i], sa[l * ss + k]) && eq(gb[i], sb[l * ss + k]);
        } else {
            others &= eq(ga[i], da0[i]) && eq(gb[i], db0[i]);
        }
    }
    check::expect(copied, c.spec + ": every layer's run of both pairs copied");
    check::expect(others, c.spec + ": nothing written between or after the runs");
    run();
    check::expect(std::memcmp(da.data(), ga.data(), ga.size() * 16) == 0 &&
                      std::memcmp(db.data(), gb.data(), gb.size() * 16) == 0,
                  c.spec + ": a second launch gives the same bits");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 1) emu::fail("usage: small_kernels \"kernel gx gy gz block params...\"...");
    for (int a = 1; a < argc; a++) {
        Case c;
        c.spec = argv[a];
        std::istringstream in(c.spec);
        unsigned gx, gy, gz, block;
        in >> c.kernel >> gx >> gy >> gz >> block;
        c.grid = dim3(gx, gy, gz);
        c.block = dim3(block);
        for (double v; in >> v;) c.p.push_back(v);
        check::Rng rng(0x5eed + a * 977);
        const std::string& k = c.kernel;
        if (k == "gather_rows") gather_rows_case<uint16_t>(c, rng);
        else if (k == "gather_rows_f32") gather_rows_case<float>(c, rng);
        else if (k == "frame_embedding") frame_embedding_case(c, rng);
        else if (k == "copy_rows") copy_rows_case(c, rng);
        else if (k == "gather_u32") indexed_u32_case(c, rng, false);
        else if (k == "scatter_u32") indexed_u32_case(c, rng, true);
        else if (k == "cp_first_input") cp_first_input_case(c, rng);
        else if (k == "rms_norm_rows") rms_norm_rows_case(c, rng);
        else if (k == "linear_epilogue") linear_epilogue_case(c, rng);
        else if (k == "add_bias_rows") add_bias_rows_case(c, rng);
        else if (k == "copy_runs2") copy_runs2_case(c, rng);
        else emu::fail("not a small kernel");
    }
    return check::failures() ? 1 : 0;
}
