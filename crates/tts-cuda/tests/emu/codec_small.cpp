// Emulated check of codec.cu's codec_to_f16 (dst[i] = f16(src[i]), nearest even, saturated
// to ±65504) and codec_zero (p[i] = 0) for i < n, exactly, with poison past n that must keep
// its bits. argv per case: kernel (to_f16 | zero) n blocks; 256 threads a block.
// The f16 reference is independent of cuda_names.hpp's f2h_sat twin: the value is clamped as
// the kernel does (fminf/fmaxf: NaN gives the lower bound), then rounded by codec_ref.hpp's
// to_f16 (nearest, ties to even, in f64).

#include "check.hpp"
#include "codec_ref.hpp"

namespace {

const int kTail = 37;  // poisoned elements past n

// The kernel's clamp (fminf/fmaxf: NaN gives the lower bound), then codec_ref.hpp's nearest
// f16 (ties to even).
uint16_t f16_ref(float f) { return codec::to_f16(std::fmin(std::fmax(f, -65504.0f), 65504.0f)); }

// Values that exercise the rounding, then random ones of many magnitudes.
std::vector<float> f16_inputs(int n) {
    const float t11 = std::ldexp(1.0f, -11), t24 = std::ldexp(1.0f, -24);
    std::vector<float> v = {
        0.0f, -0.0f, 1.0f,
        1.0f + t11,                 // tie: 1 (even)
        1.0f + 3 * t11,             // tie: 1 + 2^-9 (even)
        1.0f + t11 + std::ldexp(1.0f, -20),  // just past the tie: up
        -(2.0f + 2 * t11),          // tie at the next binade: -2
        t24,                        // smallest subnormal
        t24 / 2,                    // tie: 0
        3 * t24 / 2,                // tie: 2^-23
        5 * t24 / 2,                // tie: 2^-23 (even)
        t24 / 2 + std::ldexp(1.0f, -40),  // past the tie: 2^-24
        std::ldexp(1.0f, -14) - t24 / 2,  // tie below the smallest normal: up to it
        std::ldexp(1.0f, -14) - 3 * t24 / 4, // the largest subnormal
        1e-10f, -1e-10f,            // to ±0
        65504.0f, 65519.0f,         // the largest finite, and below its tie: 65504
        65520.0f, -65520.0f,        // would round to ±inf: saturated
        1e30f, INFINITY, -INFINITY,
        NAN,                        // fmaxf(NaN, -65504): -65504
        2049.0f, 2051.0f,           // ties at quantum 2: 2048, 2052
    };
    check::Rng rng(4242);
    while ((int)v.size() < n) v.push_back(std::ldexp(rng.sym(1.0f), (int)(rng.next() % 48) - 30));
    v.resize(n);
    return v;
}

void run(const std::string& kernel, int n, int blocks) {
    const std::string name = "codec_" + kernel + " n " + std::to_string(n) + " (" + std::to_string(blocks) + " blocks)";
    if (kernel == "to_f16") {
        const auto src = f16_inputs(n);
        std::vector<uint16_t> dst(n + kTail, 0xBEEF);
        emu::launch(dim3(blocks), dim3(256), 0, 1, [&] { codec_to_f16(src.data(), dst.data(), n); });
        int wrong = 0, first = -1;
        for (int i = 0; i < n; i++)
            if (dst[i] != f16_ref(src[i]) && wrong++ == 0) first = i;
        char why[160] = "";
        if (first >= 0)
            std::snprintf(why, sizeof why, " (%d wrong; first at %d: %.9g gave 0x%04x, want 0x%04x)", wrong, first,
                          src[first], dst[first], f16_ref(src[first]));
        check::expect(wrong == 0, name + ": the nearest f16, ties to even, saturated" + why);
        bool kept = true;
        for (int i = n; i < n + kTail; i++) kept &= dst[i] == 0xBEEF;
        check::expect(kept, name + ": nothing written past n");
    } else if (kernel == "zero") {
        check::Rng rng(7);
        auto p = check::f32_values(rng, n + kTail, 3.0f);
        const auto before = p;
        emu::launch(dim3(blocks), dim3(256), 0, 1, [&] { codec_zero(p.data(), n); });
        bool zeros = true;
        for (int i = 0; i < n; i++) zeros &= p[i] == 0.0f && !std::signbit(p[i]);
        check::expect(zeros, name + ": +0 in every element below n");
        check::expect(std::memcmp(p.data() + n, before.data() + n, kTail * 4) == 0, name + ": nothing written past n");
    } else {
        emu::fail("unknown kernel");
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4 || (argc - 1) % 3 != 0) emu::fail("usage: codec_small (kernel n blocks)...");
    // the reference's own anchors
    check::expect(f16_ref(1.0f) == 0x3c00 && f16_ref(65504.0f) == 0x7bff && f16_ref(std::ldexp(1.0f, -24)) == 0x0001 &&
                      f16_ref(std::ldexp(1.0f, -14)) == 0x0400 && f16_ref(-2.0f) == 0xc000 && f16_ref(NAN) == 0xfbff,
                  "the f16 reference encodes known values");
    for (int i = 1; i < argc; i += 3) run(argv[i], std::atoi(argv[i + 1]), std::atoi(argv[i + 2]));
    return check::failures() ? 1 : 0;
}
