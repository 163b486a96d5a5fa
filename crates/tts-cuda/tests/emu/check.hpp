// check.hpp — host helpers of the emulated kernel tests: random values, bf16 rounding and a
// comparison that reports its worst element.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace check {

// xorshift64*: the same values on every machine.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 2654435761u + 1) {}
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 2685821657736338717ull;
    }
    // uniform in [-a, a)
    float sym(float a) { return (float)((next() >> 40) * (1.0 / (1ull << 24)) * 2.0 - 1.0) * a; }
};

// Round-to-nearest-even f32 -> bf16 bits, and back.
inline uint16_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline std::vector<uint16_t> bf16_values(Rng& r, size_t n, float a) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = to_bf16(r.sym(a));
    return v;
}
inline std::vector<float> f32_values(Rng& r, size_t n, float a) {
    std::vector<float> v(n);
    for (auto& x : v) x = r.sym(a);
    return v;
}

// Failures so far (the process exits 1 if any).
inline int& failures() {
    static int n = 0;
    return n;
}

// |got - want| <= tol · max(1, max |want|) for every element; prints the worst.
inline bool close(const std::string& what, const std::vector<float>& got,
                  const std::vector<double>& want, double tol) {
    double scale = 1.0, worst = 0.0;
    size_t at = 0;
    for (double w : want) scale = std::fmax(scale, std::fabs(w));
    bool finite = got.size() == want.size();
    for (size_t i = 0; finite && i < got.size(); i++) {
        if (!std::isfinite(got[i])) {
            finite = false;
            at = i;
            break;
        }
        const double d = std::fabs((double)got[i] - want[i]);
        if (d > worst) {
            worst = d;
            at = i;
        }
    }
    const bool ok = finite && worst <= tol * scale;
    std::printf("%s %s: max |diff| %.3g (scale %.3g, tolerance %.3g) at %zu%s\n", ok ? "ok  " : "FAIL",
                what.c_str(), worst, scale, tol * scale, at, finite ? "" : " (not finite or wrong size)");
    if (!ok) failures()++;
    std::fflush(stdout);
    return ok;
}

inline bool expect(bool cond, const std::string& what) {
    std::printf("%s %s\n", cond ? "ok  " : "FAIL", what.c_str());
    if (!cond) failures()++;
    std::fflush(stdout);
    return cond;
}

}  // namespace check
