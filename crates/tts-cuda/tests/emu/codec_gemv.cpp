// Emulated check of codec_gemv.cu (codec_gemv_m1..m8 over f32 weights, codec_gemv_h1..h8
// over their f16 copy) and codec_gemv_mma.cu (codec_gemv_mma*: the f16 copy on tensor
// cores, X split into f16 hi + lo parts, no prologue) against an f64 reference of
//   C[s][n] = Σ_{k < K} pro(X)[s][k] · W[n][k]  (+ beta · C[s][n]),   s < steps,
// pro 0: X as stored; 1: the folded RMSNorm, g ⊙ x / sqrt(mean(x[0..K)²) + eps); 2: the
// folded SwiGLU, silu(X[k]) · X[K + k]. argv per case: kernel steps N K ldx ldc c_off ksplit
// blocks beta pro, the entry point, K split and blocks being exec.rs's gemv_choice for the
// shape (ldw = K, as every codec GEMM has; C at c_off floats into its buffer). Also: steps
// past `steps` (the template's M rounds them up), columns past N and the floats before
// c_off keep their poison.

#include "codec_ref.hpp"

using codec::POISON;

struct GemvCase {
    std::string kernel;
    int steps, N, K, ldx, ldc, c_off, ksplit, blocks, pro;
    float beta;
};

// codec_gemv_mma.cu's entry points (over the f16 weights, no prologue)
static bool is_mma(const std::string& kernel) { return kernel.rfind("codec_gemv_mma", 0) == 0; }

template <typename WT>
static void launch(const GemvCase& c, const WT* W, const float* X, float* C, const float* g, float eps) {
    emu::launch(dim3(c.blocks), dim3(256), 0, 1, [&] {
#define GEMV_ARGS W, c.K, c.N, c.K, X, c.ldx, C, c.ldc, c.steps, c.beta, c.ksplit, c.pro, g, eps
        if constexpr (std::is_same_v<WT, float>) {
            if (c.kernel == "codec_gemv_m1") codec_gemv_m1(GEMV_ARGS);
            else if (c.kernel == "codec_gemv_m2") codec_gemv_m2(GEMV_ARGS);
            else if (c.kernel == "codec_gemv_m4") codec_gemv_m4(GEMV_ARGS);
            else if (c.kernel == "codec_gemv_m8") codec_gemv_m8(GEMV_ARGS);
            else emu::fail("unknown f32 kernel");
        } else if (is_mma(c.kernel)) {
            if (c.pro != 0) emu::fail("codec_gemv_mma* has no prologue");
#define MMA_ARGS W, c.K, c.N, c.K, X, c.ldx, C, c.ldc, c.steps, c.beta
            if (c.kernel == "codec_gemv_mma4") codec_gemv_mma4(MMA_ARGS);
            else if (c.kernel == "codec_gemv_mma8") codec_gemv_mma8(MMA_ARGS);
            else if (c.kernel == "codec_gemv_mma4_v8") codec_gemv_mma4_v8(MMA_ARGS);
            else emu::fail("unknown tensor-core kernel");
#undef MMA_ARGS
        } else {
            if (c.kernel == "codec_gemv_h1") codec_gemv_h1(GEMV_ARGS);
            else if (c.kernel == "codec_gemv_h2") codec_gemv_h2(GEMV_ARGS);
            else if (c.kernel == "codec_gemv_h4") codec_gemv_h4(GEMV_ARGS);
            else if (c.kernel == "codec_gemv_h8") codec_gemv_h8(GEMV_ARGS);
            else emu::fail("unknown f16 kernel");
        }
#undef GEMV_ARGS
    });
}

template <typename WT>
static void run_case(const GemvCase& c) {
    check::Rng rng((uint64_t)c.N * 7919 + c.K * 31 + c.steps * 7 + c.pro);
    // weights as the kernel reads them, and their values
    std::vector<WT> W((size_t)c.N * c.K);
    std::vector<double> w(W.size());
    for (size_t i = 0; i < W.size(); i++) {
        const float v = rng.sym(0.05f);
        if constexpr (std::is_same_v<WT, float>) {
            W[i] = v;
            w[i] = v;
        } else {
            W[i] = codec::to_f16(v);
            w[i] = codec::from_f16(W[i]);
        }
    }
    // the template's M rounds the steps up: its rows past `steps` are not read
    const int rows = c.steps;
    const auto X = check::f32_values(rng, (size_t)rows * c.ldx, 2.0f);
    std::vector<float> g(c.K);
    for (auto& v : g) v = 1.0f + rng.sym(0.2f);
    const float eps = 1e-5f;
    // C: its old values where the GEMM writes (the residual with beta), poison around them
    const int slack = 2;
    std::vector<float> C0((size_t)c.c_off + (size_t)(rows + slack) * c.ldc, POISON);
    for (int s = 0; s < rows; s++)
        for (int n = 0; n < c.N; n++) C0[c.c_off + (size_t)s * c.ldc + n] = rng.sym(1.0f);
    std::vector<double> want(C0.begin(), C0.end());
    for (int s = 0; s < rows; s++) {
        const float* x = X.data() + (size_t)s * c.ldx;
        std::vector<double> xp(c.K);
        double ss = 0;
        for (int k = 0; k < c.K; k++) ss += (double)x[k] * x[k];
        const double inv = 1.0 / std::sqrt(ss / c.K + eps);
        for (int k = 0; k < c.K; k++)
            xp[k] = c.pro == 1 ? g[k] * x[k] * inv : c.pro == 2 ? x[k] / (1.0 + std::exp(-(double)x[k])) * x[c.K + k] : x[k];
        for (int n = 0; n < c.N; n++) {
            double a = 0;
            for (int k = 0; k < c.K; k++) a += xp[k] * w[(size_t)n * c.K + k];
            double& o = want[c.c_off + (size_t)s * c.ldc + n];
            o = a + (c.beta != 0.f ? c.beta * o : 0.0);
        }
    }
    std::vector<float> C = C0;
    launch<WT>(c, W.data(), X.data(), C.data() + c.c_off, c.pro == 1 ? g.data() : nullptr, eps);
    static const char* pros[] = {"", ", folded norm", ", folded SwiGLU"};
    const std::string name = c.kernel + " " + std::to_string(c.N) + "x" + std::to_string(c.K) + ", " +
                             std::to_string(c.steps) + " steps" + pros[c.pro] + (c.beta != 0.f ? ", beta 1" : "") +
                             " (ldx " + std::to_string(c.ldx) + ", ldc " + std::to_string(c.ldc) + ", ksplit " +
                             std::to_string(c.ksplit) + ", " + std::to_string(c.blocks) + " blocks)";
    // the outputs against the reference, the rest still as it was
    std::vector<float> got;
    std::vector<double> ref;
    bool rest = true;
    for (size_t i = 0; i < C.size(); i++) {
        const bool out = i >= (size_t)c.c_off && (int)((i - c.c_off) / c.ldc) < rows && (int)((i - c.c_off) % c.ldc) < c.N;
        if (out) {
            got.push_back(C[i]);
            ref.push_back(want[i]);
        } else {
            rest &= std::memcmp(&C[i], &C0[i], 4) == 0;
        }
    }
    check::close(name, got, ref, 2e-5);
    check::expect(rest, name + ": steps past the call and columns past N keep their poison");
}

int main(int argc, char** argv) {
    const int per = 11;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: codec_gemv (kernel steps N K ldx ldc c_off ksplit blocks beta pro)...");
    for (int i = 1; i < argc; i += per) {
        GemvCase c;
        c.kernel = argv[i];
        int* f[] = {&c.steps, &c.N, &c.K, &c.ldx, &c.ldc, &c.c_off, &c.ksplit, &c.blocks};
        for (int j = 0; j < 8; j++) *f[j] = std::atoi(argv[i + 1 + j]);
        c.beta = (float)std::atof(argv[i + 9]);
        c.pro = std::atoi(argv[i + 10]);
        if (c.kernel.rfind("codec_gemv_h", 0) == 0 || is_mma(c.kernel))
            run_case<uint16_t>(c);
        else
            run_case<float>(c);
    }
    return check::failures() ? 1 : 0;
}
