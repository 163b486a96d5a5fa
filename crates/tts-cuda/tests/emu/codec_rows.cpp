// Emulated check of codec.cu's row kernels against f64 references, on the launches exec.rs
// makes:
//   codec_rvq       one block of 128 per frame: z[f] = (cb_0[c_0], Σ_{q>=1} cb_q[c_q]), codes
//                   clamped to the codebook; a padding frame's row zeros;
//   codec_act_pad   one block per row, in place: x[r][i] = act(x[r][i]) for i < c, then
//                   the ones column and zeros up to ld (act 0: only those columns);
//   codec_rms_norm  one block of 256 per frame: out = w ⊙ x / sqrt(mean(x²) + eps), then
//                   the ones column and zeros up to ldo;
//   codec_swiglu    one block of 256 per frame: out[i] = silu(gu[i]) · gu[inter + i].
// Rows past the launch keep their poison. argv, per case, one of:
//   rvq bins half nq frames pad_frames | act_pad rows ld c act threads |
//   rms_norm frames ldx c ldo eps | swiglu frames inter

#include "codec_ref.hpp"

using codec::POISON;

static bool untouched(const std::vector<float>& v, size_t from) {
    for (size_t i = from; i < v.size(); i++)
        if (v[i] != POISON) return false;
    return true;
}

static void rvq(int bins, int half, int nq, int frames, int pad) {
    check::Rng rng(bins + half * 3 + frames);
    const auto tables = check::f32_values(rng, (size_t)nq * bins * half, 1.0f);
    // the metadata of one row of `frames` frames, then the padding frames
    const int R = 3, F = frames + pad;
    std::vector<int> meta(5 * R + F, 0);
    for (int r = 0; r < R; r++) meta[r] = r == 0 ? 1 : -1;
    meta[3 * R] = frames;
    for (int f = 0; f < F; f++) meta[5 * R + f] = f < frames ? 0 : -1;
    // random codes, one frame with codes outside the codebook (clamped)
    std::vector<int> codes((size_t)F * nq);
    for (auto& c : codes) c = (int)(rng.next() % (uint64_t)bins);
    codes[1] = -7;
    codes[2] = bins + 3;
    const int ld = 2 * half;
    std::vector<float> z((size_t)(F + 1) * ld, POISON);
    emu::launch(dim3(F), dim3(128), 0, 1, [&] {
        codec_rvq(codes.data(), meta.data(), R, tables.data(), bins, half, nq, z.data(), ld, F);
    });
    std::vector<double> want((size_t)F * ld, 0.0);
    for (int f = 0; f < frames; f++)
        for (int i = 0; i < half; i++) {
            auto t = [&](int q) {
                const int c = std::min(std::max(codes[(size_t)f * nq + q], 0), bins - 1);
                return (double)tables[((size_t)q * bins + c) * half + i];
            };
            want[(size_t)f * ld + i] = t(0);
            double s = 0;
            for (int q = 1; q < nq; q++) s += t(q);
            want[(size_t)f * ld + half + i] = s;
        }
    const std::string name = "codec_rvq " + std::to_string(nq) + " x " + std::to_string(bins) + " x " +
                             std::to_string(half) + ", " + std::to_string(frames) + " frames + " +
                             std::to_string(pad) + " padding";
    check::close(name, std::vector<float>(z.begin(), z.begin() + (size_t)F * ld), want, 1e-6);
    check::expect(untouched(z, (size_t)F * ld), name + ": the row past the launch keeps its poison");
}

static void act_pad(int rows, int ld, int c, int act, int threads) {
    check::Rng rng(rows * 31 + ld + act);
    std::vector<float> x = check::f32_values(rng, (size_t)(rows + 1) * ld, 3.0f);
    // a few large inputs: SnakeBeta's range reduction
    for (size_t i = 0; i < x.size(); i += 97) x[i] *= 10.0f;
    std::fill(x.begin() + (size_t)rows * ld, x.end(), POISON);
    std::vector<float> alpha, inv_beta;
    codec::snake_params(rng, c, alpha, inv_beta);
    std::vector<double> want((size_t)rows * ld);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < ld; i++) {
            const float v = x[(size_t)r * ld + i];
            want[(size_t)r * ld + i] = i < c ? codec::act_ref(v, act, alpha.data(), inv_beta.data(), i) : i == c;
        }
    emu::launch(dim3(rows), dim3(threads), 0, 1, [&] {
        codec_act_pad(x.data(), ld, c, act, act == 1 ? alpha.data() : nullptr, act == 1 ? inv_beta.data() : nullptr,
                      rows);
    });
    static const char* acts[] = {"none (the ones columns only)", "SnakeBeta", "GELU"};
    const std::string name = std::string("codec_act_pad ") + acts[act] + ", " + std::to_string(rows) + " rows of " +
                             std::to_string(c) + " in " + std::to_string(ld) + " (" + std::to_string(threads) +
                             " threads)";
    check::close(name, std::vector<float>(x.begin(), x.begin() + (size_t)rows * ld), want, 2e-6);
    check::expect(untouched(x, (size_t)rows * ld), name + ": the row past the launch keeps its poison");
}

static void rms_norm(int frames, int ldx, int c, int ldo, float eps) {
    check::Rng rng(frames * 17 + c + ldo);
    const auto x = check::f32_values(rng, (size_t)frames * ldx, 2.0f);
    std::vector<float> w(c);
    for (auto& v : w) v = 1.0f + rng.sym(0.3f);
    std::vector<float> out((size_t)(frames + 1) * ldo, POISON);
    emu::launch(dim3(frames), dim3(256), 0, 1, [&] {
        codec_rms_norm(x.data(), ldx, c, w.data(), eps, out.data(), ldo, frames);
    });
    std::vector<double> want((size_t)frames * ldo);
    for (int f = 0; f < frames; f++) {
        double ss = 0;
        for (int i = 0; i < c; i++) ss += (double)x[(size_t)f * ldx + i] * x[(size_t)f * ldx + i];
        const double inv = 1.0 / std::sqrt(ss / c + eps);
        for (int i = 0; i < ldo; i++)
            want[(size_t)f * ldo + i] = i < c ? w[i] * x[(size_t)f * ldx + i] * inv : i == c;
    }
    const std::string name = "codec_rms_norm " + std::to_string(frames) + " frames of " + std::to_string(c) +
                             " (ldx " + std::to_string(ldx) + ", ldo " + std::to_string(ldo) + ")";
    check::close(name, std::vector<float>(out.begin(), out.begin() + (size_t)frames * ldo), want, 2e-6);
    check::expect(untouched(out, (size_t)frames * ldo), name + ": the row past the launch keeps its poison");
}

static void swiglu(int frames, int inter) {
    check::Rng rng(frames * 13 + inter);
    const auto gu = check::f32_values(rng, (size_t)frames * 2 * inter, 4.0f);
    std::vector<float> out((size_t)(frames + 1) * inter, POISON);
    emu::launch(dim3(frames), dim3(256), 0, 1, [&] { codec_swiglu(gu.data(), inter, out.data(), frames); });
    std::vector<double> want((size_t)frames * inter);
    for (int f = 0; f < frames; f++)
        for (int i = 0; i < inter; i++) {
            const double g = gu[(size_t)f * 2 * inter + i], u = gu[(size_t)f * 2 * inter + inter + i];
            want[(size_t)f * inter + i] = g / (1.0 + std::exp(-g)) * u;
        }
    const std::string name = "codec_swiglu " + std::to_string(frames) + " frames of " + std::to_string(inter);
    check::close(name, std::vector<float>(out.begin(), out.begin() + (size_t)frames * inter), want, 2e-6);
    check::expect(untouched(out, (size_t)frames * inter), name + ": the row past the launch keeps its poison");
}

int main(int argc, char** argv) {
    for (int i = 1; i < argc;) {
        const std::string k = argv[i++];
        auto num = [&] {
            if (i >= argc) emu::fail("codec_rows: missing arguments");
            return std::atoi(argv[i++]);
        };
        if (k == "rvq") {
            const int bins = num(), half = num(), nq = num(), frames = num(), pad = num();
            rvq(bins, half, nq, frames, pad);
        } else if (k == "act_pad") {
            const int rows = num(), ld = num(), c = num(), act = num(), threads = num();
            act_pad(rows, ld, c, act, threads);
        } else if (k == "rms_norm") {
            const int frames = num(), ldx = num(), c = num(), ldo = num();
            rms_norm(frames, ldx, c, ldo, (float)std::atof(argv[i++]));
        } else if (k == "swiglu") {
            const int frames = num(), inter = num();
            swiglu(frames, inter);
        } else {
            emu::fail("codec_rows: unknown case");
        }
    }
    return check::failures() ? 1 : 0;
}
