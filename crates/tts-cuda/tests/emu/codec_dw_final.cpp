// Emulated check of codec.cu's causal layers outside the GEMMs against f64 references, over
// passes of several rows (slots at different positions and parities, a padding row,
// padding frames) that each continue the slots' streams from the history the pass before
// left:
//   codec_dw_ln  the ConvNeXt front, one block of 256 per step: v = bias + the depthwise
//                causal conv of k taps over [history; input], then LayerNorm (biased
//                variance) with ln_w, ln_b; the ones column and zeros up to ldo; a padding
//                frame's rows all zeros;
//   codec_final  the last SnakeBeta + conv of k taps to one channel + bias, clamped to
//                [-1, 1], `tile` samples per block of 256 (exec.rs's final_tile, and its
//                shared memory), `wide` or not; a padding frame's samples zero;
// each also writing every row's new history (the last k - 1 raw input steps) into its
// slot's other copy and nothing else (codec_ref.hpp's History). argv per case, one of:
//   dw_ln c k rate ldx ldo R positions passes | final c k rate tile smem wide R positions passes
// (positions "p0,p1,...": the slots' first positions, 0 a fresh slot; passes
// "slot:frames,...[/padding frames];...": codec_ref.hpp's make_pass).

#include "codec_ref.hpp"

using codec::POISON;

// The layer's two history copies at HIST_OFF in each slot (32-float aligned, as state.rs
// allocates), other state before and after them.
constexpr int HIST_OFF = 96;

struct Layer {
    bool final;
    int c, k, rate, ldx, ldo, tile, smem, wide, R;
    std::string positions, passes;
};

static void run_case(const Layer& L) {
    codec::Book book = codec::parse_book(L.positions);
    check::Rng rng((uint64_t)L.c * 977 + L.k * 13 + L.rate + L.final * 5 + L.wide);
    const int ctx = L.k - 1;
    const int stride = (HIST_OFF + 2 * ctx * L.c + 32 + 31) / 32 * 32;
    codec::History hist(L.c, ctx, L.rate, HIST_OFF, stride, book, rng);
    // dw_ln: taps [k][c], bias, LayerNorm affine; final: SnakeBeta, weights [k][c], bias
    const auto taps = check::f32_values(rng, (size_t)L.k * L.c, L.final ? 0.03f : 0.5f);
    const auto bias = check::f32_values(rng, L.c, 0.2f);
    std::vector<float> ln_w(L.c), ln_b = check::f32_values(rng, L.c, 0.1f);
    for (auto& v : ln_w) v = 1.0f + rng.sym(0.2f);
    std::vector<float> alpha, inv_beta;
    codec::snake_params(rng, L.c, alpha, inv_beta);
    const float fbias = 0.05f, eps = 1e-6f;
    std::vector<float> state = hist.state(book);
    int pass_no = 0;
    for (const std::string& spec : codec::split_passes(L.passes)) {
        const codec::Pass p = codec::make_pass(spec, book, L.R);
        const int steps = p.frames * L.rate;
        const auto x = check::f32_values(rng, (size_t)steps * L.ldx, 1.5f);
        const std::vector<float> before = state;
        const int width = L.final ? 1 : L.ldo;
        std::vector<double> want((size_t)steps * width, 0.0);
        for (int s = 0; s < steps; s++) {
            const int r = p.frame_row(s / L.rate);
            if (r < 0) continue;
            const int ls = s - p.first(r) * L.rate;
            auto in = [&](int j) { return hist.input(p, r, ls, L.k - 1 - j, x.data(), L.ldx); };
            if (L.final) {
                double acc = fbias;
                for (int j = 0; j < L.k; j++)
                    for (int i = 0; i < L.c; i++)
                        acc += taps[(size_t)j * L.c + i] * codec::act_ref(in(j)[i], 1, alpha.data(), inv_beta.data(), i);
                want[s] = std::fmin(std::fmax(acc, -1.0), 1.0);
                continue;
            }
            std::vector<double> v(L.c);
            double mean = 0, var = 0;
            for (int ch = 0; ch < L.c; ch++) {
                v[ch] = bias[ch];
                for (int j = 0; j < L.k; j++) v[ch] += (double)in(j)[ch] * taps[(size_t)j * L.c + ch];
                mean += v[ch] / L.c;
            }
            for (int ch = 0; ch < L.c; ch++) var += (v[ch] - mean) * (v[ch] - mean) / L.c;
            double* o = &want[(size_t)s * width];
            for (int ch = 0; ch < L.c; ch++) o[ch] = (v[ch] - mean) / std::sqrt(var + eps) * ln_w[ch] + ln_b[ch];
            o[L.c] = 1.0;
        }
        // one row past the outputs, to show nothing is written there
        std::vector<float> out((size_t)(steps + 1) * width, POISON);
        dim3 grid;
        if (L.final) {
            grid = dim3(steps / L.tile + p.nrows * ctx);
            emu::launch(grid, dim3(256), L.smem, 1, [&] {
                codec_final(x.data(), L.c, L.k, alpha.data(), inv_beta.data(), taps.data(), fbias, L.rate,
                            state.data(), stride, HIST_OFF, p.meta.data(), L.R, steps, p.nrows, L.tile, out.data(),
                            L.wide);
            });
        } else {
            grid = dim3(steps + p.nrows * ctx);
            emu::launch(grid, dim3(256), 0, 1, [&] {
                codec_dw_ln(x.data(), L.ldx, L.c, taps.data(), bias.data(), L.k, ln_w.data(), ln_b.data(), eps, L.rate,
                            state.data(), stride, HIST_OFF, p.meta.data(), L.R, steps, p.nrows, out.data(), L.ldo);
            });
        }
        const std::string name = std::string(L.final ? "codec_final" : "codec_dw_ln") + " c " + std::to_string(L.c) +
                                 ", " + std::to_string(L.k) + " taps, rate " + std::to_string(L.rate) +
                                 (L.final ? ", tile " + std::to_string(L.tile) + (L.wide ? ", wide" : "") : "") +
                                 ", pass " + std::to_string(++pass_no) + " (" + spec + ", " + std::to_string(grid.x) +
                                 " blocks)";
        check::close(name, std::vector<float>(out.begin(), out.begin() + want.size()), want, 1e-5);
        bool rest = true;
        for (size_t i = want.size(); i < out.size(); i++) rest &= out[i] == POISON;
        check::expect(rest, name + ": nothing written past the pass's steps");
        hist.check_update(name, p, before, state, x.data(), L.ldx);
        codec::advance(book, p);
    }
}

int main(int argc, char** argv) {
    for (int i = 1; i < argc;) {
        Layer L{};
        const std::string kernel = argv[i++];
        if (kernel != "final" && kernel != "dw_ln") emu::fail("codec_dw_final: unknown case");
        L.final = kernel == "final";
        auto num = [&] {
            if (i >= argc) emu::fail("codec_dw_final: missing arguments");
            return std::atoi(argv[i++]);
        };
        L.c = num(), L.k = num(), L.rate = num();
        if (L.final) {
            L.ldx = L.c;
            L.tile = num(), L.smem = num(), L.wide = num();
        } else {
            L.ldx = num(), L.ldo = num();
        }
        L.R = num();
        if (i + 2 > argc) emu::fail("codec_dw_final: missing arguments");
        L.positions = argv[i++];
        L.passes = argv[i++];
        run_case(L);
    }
    return check::failures() ? 1 : 0;
}
