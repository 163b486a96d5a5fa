// Emulated check of the FP8 GEMVs (gemv.cu's gemv8_m1 / gemv8_m2, gemv8_mma.cu's
// gemv8_mma_m1 / gemv8_mma_m2 on tensor cores) against an f64 reference of
//   y[m][n] = act(inv_m · Σ_k xin[m][k] W[n][k] + bias[n]) + res[m][n],
// W[n][k] = e4m3(codes[n][k]) · scales[n] (the codes and scales of tts_model::fp8::Fp8Rows,
// from files the test writes); the dequantized weights are exact in bf16, so the reference is
// gemv_ref.hpp's. Also: rows past the valid ones and the row padding keep their poison; each
// row of a two-row launch has the bits of a one-row launch on that row; a norm-chain writer's
// next-layer input and Σ y² pair partials; a norm-chain reader (x = g ⊙ y and y's Σ y² pair
// partials: the fused norm's result on y); and the E4M3 decoder gemv.cu runs
// (e4m3x4_to_f32: its fallback, gemv.cu being compiled without __CUDA_ARCH__) on every code
// in every byte position, against an independent decode here, itself checked against
// tts_model's e4m3_decode table.
// argv: e4m3_table, then per case: kernel (0 gemv8, 1 gemv8_mma) M N K blocks ksplit act norm
// bias res (0 none, 1 own buffer, 2 in place) writer reader xmag (x values in ±2^xmag)
// codes_file scales_file.

#include <fstream>

#include "gemv_ref.hpp"

namespace {

const float kPoison = -12345.0f;

std::vector<char> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) emu::fail(("cannot read " + path).c_str());
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The value of E4M3 byte b: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits,
// subnormals (exponent 0: m · 2^-9), no infinities, S.1111.111 NaN.
double e4m3_ref(unsigned b) {
    const double sign = b & 0x80u ? -1.0 : 1.0;
    const int e = (int)(b >> 3 & 15u), m = (int)(b & 7u);
    if (e == 15 && m == 7) return std::nan("");
    if (e == 0) return sign * std::ldexp((double)m, -9);
    return sign * std::ldexp(8.0 + m, e - 10);
}

bool same_value(double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

// The reference decode against tts_model's table, then the kernels' decoder against it: each
// byte value at each of the four positions of a word (the neighbours differ).
void check_e4m3(const std::string& table_path) {
    const auto raw = read_file(table_path);
    if (raw.size() != 256 * 4) emu::fail("the e4m3 table holds 256 f32");
    bool agree = true;
    for (unsigned b = 0; b < 256; b++) {
        float t;
        std::memcpy(&t, raw.data() + 4 * b, 4);
        agree &= same_value(t, e4m3_ref(b));
    }
    check::expect(agree, "the reference E4M3 decode equals tts_model::fp8::e4m3_decode on all 256 codes");
    bool exact = true;
    int wrong = -1;
    float nan_codes[2][4];
    for (unsigned b = 0; b < 256; b++) {
        for (unsigned pos = 0; pos < 4; pos++) {
            unsigned u = 0;
            for (unsigned p = 0; p < 4; p++) u |= (p == pos ? b : (b * 37u + p * 101u + 5u) & 0xffu) << (8 * p);
            float f[4];
            e4m3x4_to_f32(u, f);
            const bool finite_code = (b & 0x7fu) != 0x7fu;
            if (finite_code && !same_value(f[pos], e4m3_ref(b))) {
                exact = false;
                wrong = (int)b;
            }
            if (!finite_code) nan_codes[b >> 7][pos] = f[pos];
        }
    }
    check::expect(exact, "e4m3x4_to_f32 gives the exact value of every finite E4M3 code in every byte position" +
                             (wrong >= 0 ? " (wrong: code " + std::to_string(wrong) + ")" : std::string()));
    // The NaN codes (never produced by the quantizer): reported, not checked.
    std::printf("note e4m3x4_to_f32 of the NaN codes 0x7f, 0xff (fallback path): %g, %g\n", nan_codes[0][0],
                nan_codes[1][0]);
}

struct Case {
    int kernel, M, N, K, blocks, ksplit, act, norm, bias, res, writer, reader, xmag;
    std::string codes, scales;
};

struct Inputs {
    std::vector<uint4> codes;  // 16-byte aligned, as the kernel's loads need
    // x: the kernel's input rows (a reader's g ⊙ y), y_in: a reader's y, ss: its partials
    std::vector<float> scales, x, y_in, ss, g, bias, res, xo_g;
    int ldx, ldy, ldr;
};

struct Out {
    std::vector<float> y, xo, ss;
};

// One launch of `kernel_m` (1 or 2) over rows [row0, row0 + rows) of the inputs.
Out launch(const Case& c, const Inputs& in, int kernel_m, int row0, int rows) {
    const int outs = c.act == 2 ? c.N / 2 : c.N;
    // a row past the valid ones; in place, y starts as the residual rows (res = y, ldr = ldy)
    Out o{std::vector<float>((size_t)(rows + 1) * in.ldy, kPoison),
          std::vector<float>(c.N, kPoison), std::vector<float>(c.N / 2, kPoison)};
    for (int m = 0; m < rows && c.res == 2; m++)
        std::copy_n(in.res.begin() + (size_t)(row0 + m) * in.ldr, outs, o.y.begin() + (size_t)m * in.ldy);
    const float* X = in.x.data() + (size_t)row0 * in.ldx;
    const float* res = c.res == 1 ? in.res.data() + (size_t)row0 * in.ldr : c.res == 2 ? o.y.data() : nullptr;
    const int ldr = c.res == 2 ? in.ldy : in.ldr;
    const auto* W = (const unsigned char*)in.codes.data();
    const float* ss_in = c.reader ? in.ss.data() + (size_t)row0 * (c.K / 2) : nullptr;
    // gemv8_mma: its split rows in dynamic shared memory (linear.rs: 4·K·M bytes)
    const size_t smem = c.kernel ? (size_t)4 * c.K * kernel_m : 0;
    emu::launch(dim3(c.blocks), dim3(256), smem, 1, [&] {
#define GEMV8_ARGS                                                                                     \
    W, c.N, c.K, X, in.ldx, c.norm ? in.g.data() : nullptr, 1e-6f, c.bias ? in.bias.data() : nullptr,   \
        c.act, res, ldr, o.y.data(), in.ldy, rows, c.ksplit, in.scales.data(), ss_in,                   \
        c.reader ? c.K / 2 : 0, c.writer ? o.xo.data() : nullptr, c.writer ? in.xo_g.data() : nullptr,  \
        c.writer ? o.ss.data() : nullptr
        if (c.kernel == 0 && kernel_m == 1)
            gemv8_m1(GEMV8_ARGS);
        else if (c.kernel == 0)
            gemv8_m2(GEMV8_ARGS);
        else if (kernel_m == 1)
            gemv8_mma_m1(GEMV8_ARGS);
        else
            gemv8_mma_m2(GEMV8_ARGS);
#undef GEMV8_ARGS
    });
    return o;
}

void run_case(const Case& c) {
    const int outs = c.act == 2 ? c.N / 2 : c.N;
    Inputs in;
    in.ldx = c.K + (c.res == 2 ? 0 : 8);  // the talker's rows are packed (ld = K)
    in.ldy = outs + (c.res == 2 ? 0 : 4);
    in.ldr = c.res == 2 ? in.ldy : outs + 12;
    const auto codes = read_file(c.codes), scales = read_file(c.scales);
    if (codes.size() != (size_t)c.N * c.K || scales.size() != (size_t)c.N * 4) emu::fail("codes or scales: wrong size");
    in.codes.resize(codes.size() / 16 + 1);
    std::memcpy(in.codes.data(), codes.data(), codes.size());
    in.scales.resize(c.N);
    std::memcpy(in.scales.data(), scales.data(), scales.size());

    check::Rng rng((uint64_t)c.N * 7919 + c.K * 31 + c.M * 7 + c.act + c.norm * 3);
    in.x = check::f32_values(rng, (size_t)c.M * in.ldx, std::ldexp(1.0f, c.xmag));
    in.g.resize(c.K);
    for (auto& v : in.g) v = 1.0f + rng.sym(0.1f);
    if (c.reader) {
        // the writer before it left x = g ⊙ y and y's Σ y² by pair; the reference is the
        // fused norm on y
        in.y_in = in.x;
        in.ss.assign((size_t)c.M * (c.K / 2), 0.0f);
        for (int m = 0; m < c.M; m++)
            for (int k = 0; k < c.K; k++) {
                const float y = in.y_in[(size_t)m * in.ldx + k];
                in.x[(size_t)m * in.ldx + k] = in.g[k] * y;
                in.ss[(size_t)m * (c.K / 2) + k / 2] += y * y;
            }
    }
    in.bias = check::f32_values(rng, c.N, 0.5f);
    in.res = check::f32_values(rng, (size_t)c.M * in.ldr, 1.0f);
    in.xo_g.resize(c.N);
    for (auto& v : in.xo_g) v = 1.0f + rng.sym(0.1f);

    // the dequantized weights as bf16 bits: exact (power-of-two scales, 3 mantissa bits)
    std::vector<uint16_t> w((size_t)c.N * c.K);
    bool exact = true;
    for (size_t i = 0; i < w.size(); i++) {
        const float v = (float)(e4m3_ref((unsigned char)codes[i]) * in.scales[i / c.K]);
        w[i] = check::to_bf16(v);
        exact &= check::from_bf16(w[i]) == v;
    }

    const std::string name = std::string(c.kernel ? "gemv8_mma_m" : "gemv8_m") + std::to_string(c.M) + " " +
                             std::to_string(c.N) + "x" +
                             std::to_string(c.K) + " act " + std::to_string(c.act) + (c.norm ? " norm" : "") +
                             (c.bias ? " bias" : "") + (c.res == 1 ? " res" : c.res == 2 ? " res in place" : "") +
                             (c.writer ? " chain writer" : "") + (c.reader ? " chain reader" : "") +
                             (c.xmag ? " x in ±2^" + std::to_string(c.xmag) : "") + " (" + std::to_string(c.blocks) +
                             " blocks, ksplit " + std::to_string(c.ksplit) + ")";
    check::expect(exact, name + ": the dequantized weights are exact in bf16");

    std::vector<double> want((size_t)(c.M + 1) * in.ldy, kPoison), want_xo, want_ss;
    for (int m = 0; m < c.M; m++) {
        const float* xr = (c.reader ? in.y_in : in.x).data() + (size_t)m * in.ldx;
        const auto y = gemv_row_ref(w, xr, c.norm || c.reader ? in.g.data() : nullptr,
                                    c.bias ? in.bias.data() : nullptr,
                                    c.res ? in.res.data() + (size_t)m * in.ldr : nullptr, c.N, c.K, c.act, 1e-6f);
        std::copy(y.begin(), y.end(), want.begin() + (size_t)m * in.ldy);
    }
    if (c.writer) {
        for (int n = 0; n < c.N; n++) want_xo.push_back(in.xo_g[n] * want[n]);
        for (int n = 0; n < c.N; n += 2) want_ss.push_back(want[n] * want[n] + want[n + 1] * want[n + 1]);
    }

    const Out o = launch(c, in, c.M, 0, c.M);
    check_gemv_rows(name, o.y, want, in.ldy, c.M, outs, kPoison);
    if (c.writer) {
        check::close(name + ": next layer's input", o.xo, want_xo, 2e-5);
        check::close(name + ": its Σ y² pair partials", o.ss, want_ss, 2e-5);
    } else {
        bool none = true;
        for (float v : o.xo) none &= v == kPoison;
        for (float v : o.ss) none &= v == kPoison;
        check::expect(none, name + ": no norm-chain output without a writer");
    }
    if (c.M == 2) {
        bool same = true;
        for (int m = 0; m < 2; m++) {
            const Out one = launch(c, in, 1, m, 1);
            same &= std::memcmp(one.y.data(), o.y.data() + (size_t)m * in.ldy, (size_t)outs * 4) == 0;
        }
        check::expect(same, name + ": each row has the bits of a one-row launch on that row alone");
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int per = 15;
    if (argc < 2 || (argc - 2) % per != 0)
        emu::fail("usage: gemv8 e4m3_table (kernel M N K blocks ksplit act norm bias res writer reader xmag codes "
                  "scales)...");
    check_e4m3(argv[1]);
    for (int i = 2; i < argc; i += per) {
        Case c;
        int* f[] = {&c.kernel, &c.M,   &c.N,   &c.K,      &c.blocks, &c.ksplit, &c.act,
                    &c.norm,   &c.bias, &c.res, &c.writer, &c.reader, &c.xmag};
        for (int j = 0; j < 13; j++) *f[j] = std::atoi(argv[i + j]);
        c.codes = argv[i + 13];
        c.scales = argv[i + 14];
        run_case(c);
    }
    return check::failures() ? 1 : 0;
}
