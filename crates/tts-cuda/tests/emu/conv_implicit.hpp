// conv_implicit.hpp — the emulated check of the codec's implicit-GEMM convolutions (codec_conv.cu: codec_act_h, then
// codec_conv_mma{64,32}, codec_conv_win{96,64,32} or codec_conv_win96r on tensor cores,
// through the twins of mma_twins.hpp) against an f64 reference over the same f16 operands:
//   C[s][n] = post(beta·C[s][n] + W[n][K] + Σ_{j,i} W[n][j·cin + i] · h(act(in(s - (taps-1-j)·dil)[i])))
// with h the f16 rounding, `in` the pass's input or, before a row's first step, its slot's
// history (codec_ref.hpp's History), zeros for a padding frame; post the fused SnakeBeta
// (post 1) or nothing (-1). With post, the ones/zero columns n..ldc; nothing written past
// the pass's steps. Passes of several slots (positions, parities, a padding row, padding
// frames) continue the slots' streams from the history the pass before left. W's columns
// past the bias are NaN: no kernel may read them.
// argv per case: cin taps dil rate act ldx n ldc ldw beta post R positions passes plans,
// with plans "kernel:act_blocks:blocks:threads:smem" per pass (conv::plan), ';' between
// passes; several plans of one pass ('|' between) must give the same bits. The drivers
// conv_window.cpp and conv_per_tap.cpp (one per test: each test builds its own driver)
// run conv_main.
#pragma once

#include "codec_ref.hpp"

using codec::POISON;

namespace {

constexpr uint16_t NAN_H = 0x7e7e;  // an f16 NaN: scratch no kernel wrote, weights past the bias
constexpr int HIST_OFF = 64;        // the layer's history copies in a slot's state (as codec_im2col.cpp)

struct Plan {
    std::string kernel;
    int act_blocks, blocks, threads, smem;
};

struct Case {
    int cin, taps, dil, rate, act, ldx, n, ldc, ldw;
    float beta;
    int post, R;
    std::string positions, passes, plans;
    int ctx() const { return (taps - 1) * dil; }
    int K() const { return taps * cin; }
};

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string t; std::getline(ss, t, sep);) out.push_back(t);
    return out;
}

Plan parse_plan(const std::string& s) {
    const auto f = split(s, ':');
    if (f.size() != 5) emu::fail("a plan is kernel:act_blocks:blocks:threads:smem");
    return {f[0], std::stoi(f[1]), std::stoi(f[2]), std::stoi(f[3]), std::stoi(f[4])};
}

// The GEMM kernel of `plan` over the pass.
void launch_conv(const Plan& plan, const Case& c, const std::vector<uint16_t>& xe, const codec::Pass& p, int steps,
                 const std::vector<uint16_t>& w, std::vector<float>& out, const float* a2, const float* ib2) {
    emu::launch(dim3(plan.blocks), dim3(plan.threads), plan.smem, 1, [&] {
#define GEMM_ARGS                                                                                          \
    xe.data(), c.cin, c.taps, c.dil, c.rate, p.meta.data(), c.R, steps, w.data(), c.ldw, c.n, out.data(), \
        c.ldc, c.beta, c.post, a2, ib2
        if (plan.kernel == "codec_conv_mma64") codec_conv_mma64(GEMM_ARGS);
        else if (plan.kernel == "codec_conv_mma32") codec_conv_mma32(GEMM_ARGS);
        else if (plan.kernel == "codec_conv_win96") codec_conv_win96(GEMM_ARGS);
        else if (plan.kernel == "codec_conv_win64") codec_conv_win64(GEMM_ARGS);
        else if (plan.kernel == "codec_conv_win32") codec_conv_win32(GEMM_ARGS);
        else if (plan.kernel == "codec_conv_win96r") codec_conv_win96r(GEMM_ARGS);
        else emu::fail("unknown kernel");
#undef GEMM_ARGS
    });
}

// f16 operand `a` (f64) as the kernel rounds it, and the f16 step when the kernel's f32
// value of `a`, within `f32_err` of it, may round to the other neighbour (else 0).
uint16_t operand(double a, double f32_err, double* ambiguous_ulp) {
    a = std::fmin(std::fmax(a, -65504.0), 65504.0);
    const uint16_t h = codec::to_f16(a);
    const double ulp = codec::f16_ulp(codec::from_f16(h));
    const double to_midpoint = 0.5 * ulp - std::fabs(a - codec::from_f16(h));
    *ambiguous_ulp = to_midpoint <= f32_err ? ulp : 0.0;
    return h;
}

void run_case(const Case& c) {
    codec::Book book = codec::parse_book(c.positions);
    check::Rng rng((uint64_t)c.cin * 977 + c.taps * 31 + c.dil * 7 + c.rate + c.n);
    const int ctx = c.ctx(), K = c.K();
    const int stride = (HIST_OFF + 2 * ctx * c.cin + 32 + 31) / 32 * 32;
    codec::History hist(c.cin, ctx, c.rate, HIST_OFF, stride, book, rng);
    std::vector<float> alpha, inv_beta, alpha2, inv_beta2;
    codec::snake_params(rng, c.cin, alpha, inv_beta);
    codec::snake_params(rng, c.n, alpha2, inv_beta2);
    // the f16 weight rows: taps·cin weights, the bias, NaN up to ldw
    std::vector<uint16_t> w((size_t)c.n * c.ldw, NAN_H);
    for (int n = 0; n < c.n; n++) {
        for (int k = 0; k < K; k++) w[(size_t)n * c.ldw + k] = codec::to_f16(rng.sym(0.1f));
        w[(size_t)n * c.ldw + K] = codec::to_f16(rng.sym(0.5f));
    }
    std::vector<double> wd((size_t)c.n * K);  // the weights in f64, for the reference
    for (int n = 0; n < c.n; n++)
        for (int k = 0; k < K; k++) wd[(size_t)n * K + k] = codec::from_f16(w[(size_t)n * c.ldw + k]);
    const float* al = c.act == 1 ? alpha.data() : nullptr;
    const float* ib = c.act == 1 ? inv_beta.data() : nullptr;
    const float* a2 = c.post == 1 ? alpha2.data() : nullptr;
    const float* ib2 = c.post == 1 ? inv_beta2.data() : nullptr;
    std::vector<float> state = hist.state(book);
    const auto passes = codec::split_passes(c.passes), plans = split(c.plans, ';');
    if (plans.size() != passes.size()) emu::fail("one plan list per pass");
    for (size_t pass_no = 0; pass_no < passes.size(); pass_no++) {
        const codec::Pass p = codec::make_pass(passes[pass_no], book, c.R);
        const int steps = p.frames * c.rate;
        std::vector<Plan> pl;
        for (const std::string& s : split(plans[pass_no], '|')) pl.push_back(parse_plan(s));
        const auto x = check::f32_values(rng, (size_t)steps * c.ldx, 2.0f);
        // the output before: the sums' target with beta, else poison; poison past the
        // columns and one row past the steps
        std::vector<float> c0((size_t)(steps + 1) * c.ldc, POISON);
        if (c.beta != 0.f)
            for (int s = 0; s < steps; s++)
                for (int n = 0; n < c.n; n++) c0[(size_t)s * c.ldc + n] = rng.sym(1.0f);
        // 1. codec_act_h: the activated f16 input (and the slots' new histories)
        const std::vector<float> before = state;
        std::vector<uint16_t> xe((size_t)(steps + p.nrows * ctx) * c.cin, NAN_H);
        emu::launch(dim3(pl[0].act_blocks), dim3(256), 0, 1, [&] {
            codec_act_h(x.data(), c.ldx, c.cin, c.taps, c.dil, c.rate, c.act, al, ib, state.data(), stride,
                        ctx > 0 ? HIST_OFF : -1, p.meta.data(), c.R, steps, p.nrows, xe.data());
        });
        // 2. the reference: each step's operands (zeros for a padding frame), the sums, the
        // allowance: f32 sums of the terms in any order (2e-5 of Σ|terms|), each operand
        // that may round to its other f16 neighbour, the fused activation's slope
        std::vector<double> want((size_t)steps * c.n), allow((size_t)steps * c.n);
        std::vector<double> h(K);
        std::vector<std::pair<int, double>> amb;  // (k, f16 step) of the operands that may round either way
        for (int s = 0; s < steps; s++) {
            const int r = p.frame_row(s / c.rate);
            std::fill(h.begin(), h.end(), 0.0);
            amb.clear();
            if (r >= 0) {
                const int ls = s - p.first(r) * c.rate;
                for (int j = 0; j < c.taps; j++) {
                    const float* v = hist.input(p, r, ls, (c.taps - 1 - j) * c.dil, x.data(), c.ldx);
                    for (int i = 0; i < c.cin; i++) {
                        // the kernel's f32 activation: a few f32 steps of its terms (v, and
                        // SnakeBeta's inv_beta·sin² of up to inv_beta)
                        const double a = codec::act_ref(v[i], c.act, alpha.data(), inv_beta.data(), i);
                        const double terms = std::fabs(v[i]) + (c.act == 1 ? inv_beta[i] : 0.0) + std::fabs(a);
                        double ulp;
                        const int k = j * c.cin + i;
                        h[k] = codec::from_f16(operand(a, 1e-6 * terms + 1e-30, &ulp));
                        if (ulp > 0) amb.push_back({k, ulp});
                    }
                }
            }
            for (int n = 0; n < c.n; n++) {
                const double* wr = &wd[(size_t)n * K];
                double sum = codec::from_f16(w[(size_t)n * c.ldw + K]), mag = std::fabs(sum), am = 0;
                for (int k = 0; k < K; k++) {
                    const double t = wr[k] * h[k];
                    sum += t;
                    mag += std::fabs(t);
                }
                for (const auto& [k, ulp] : amb) am += std::fabs(wr[k]) * ulp;
                const double prior = c0[(size_t)s * c.ldc + n];
                if (c.beta != 0.f) sum += (double)c.beta * prior, mag += std::fabs((double)c.beta * prior);
                double slope = 1.0, v = sum;
                if (c.post == 1) {
                    const double sn = std::sin(sum * alpha2[n]);
                    v = sum + inv_beta2[n] * sn * sn;
                    slope += (double)inv_beta2[n] * alpha2[n];
                }
                want[(size_t)s * c.n + n] = v;
                allow[(size_t)s * c.n + n] = slope * (2e-5 * mag + am) + 1e-5 * std::fmax(1.0, std::fabs(v));
            }
        }
        // 3. each plan's GEMM kernel on the same scratch
        std::vector<float> first;
        for (size_t q = 0; q < pl.size(); q++) {
            std::vector<float> out = c0;
            launch_conv(pl[q], c, xe, p, steps, w, out, a2, ib2);
            const std::string name = pl[q].kernel + " cin " + std::to_string(c.cin) + ", " + std::to_string(c.taps) +
                                     " taps, dilation " + std::to_string(c.dil) + ", rate " + std::to_string(c.rate) +
                                     ", " + std::to_string(c.n) + " outputs, pass " + std::to_string(pass_no + 1) +
                                     " (" + passes[pass_no] + ", " + std::to_string(pl[q].blocks) + " blocks)";
            double worst = 0;
            size_t at = 0;
            for (size_t e = 0; e < want.size(); e++) {
                const float got = out[(e / c.n) * c.ldc + e % c.n];
                double err = std::fabs((double)got - want[e]) / allow[e];
                if (std::isnan(err)) err = INFINITY;
                if (err > worst) worst = err, at = e;
            }
            const bool ok = worst <= 1.0;
            std::printf("%s %s: worst error %.3g of its allowance at step %zu, output %zu\n", ok ? "ok  " : "FAIL",
                        name.c_str(), worst, at / c.n, at % c.n);
            if (!ok) check::failures()++;
            // the columns past the outputs: the next GEMM's ones/zero columns with post, else
            // untouched; nothing past the pass's steps
            bool rest = true;
            for (int s = 0; s <= steps; s++)
                for (int col = s < steps ? c.n : 0; col < c.ldc; col++) {
                    const float expect = c.post >= 0 && s < steps ? (col == c.n ? 1.f : 0.f) : POISON;
                    rest &= std::memcmp(&out[(size_t)s * c.ldc + col], &expect, 4) == 0;
                }
            check::expect(rest, name + ": the ones/zero columns with post, nothing else written");
            if (q == 0) first = out;
            else
                check::expect(std::memcmp(first.data(), out.data(), out.size() * 4) == 0,
                              name + ": the same bits as " + pl[0].kernel);
        }
        hist.check_update("codec_act_h pass " + std::to_string(pass_no + 1), p, before, state, x.data(), c.ldx);
        codec::advance(book, p);
    }
}

}  // namespace

inline int conv_main(int argc, char** argv) {
    const int per = 15;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: conv_implicit (cin taps dil rate act ldx n ldc ldw beta post R positions passes plans)...");
    for (int i = 1; i < argc; i += per) {
        Case c;
        int* f[] = {&c.cin, &c.taps, &c.dil, &c.rate, &c.act, &c.ldx, &c.n, &c.ldc, &c.ldw};
        for (int j = 0; j < 9; j++) *f[j] = std::atoi(argv[i + j]);
        c.beta = std::strtof(argv[i + 9], nullptr);
        c.post = std::atoi(argv[i + 10]);
        c.R = std::atoi(argv[i + 11]);
        c.positions = argv[i + 12];
        c.passes = argv[i + 13];
        c.plans = argv[i + 14];
        run_case(c);
    }
    return check::failures() ? 1 : 0;
}
