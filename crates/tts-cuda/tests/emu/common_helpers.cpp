// Emulated check of common.cuh's helpers that stand in for plainer forms with the same bits:
// warp_sum3 against three warp_sums, and div_by_count against the IEEE division, over
// random values, powers of two and other counts, and sums whose quotient is subnormal.

#include "check.hpp"

// Each lane's three values summed with warp_sum3 and with warp_sum: out[t] = (the three
// warp_sum3 results, the three warp_sum results).
void k_sum3(const float* in, float* out) {
    const int t = threadIdx.x;
    float a = in[t * 3], b = in[t * 3 + 1], c = in[t * 3 + 2];
    const float wa = warp_sum(a), wb = warp_sum(b), wc = warp_sum(c);
    warp_sum3(a, b, c);
    const float got[6] = {a, b, c, wa, wb, wc};
    for (int i = 0; i < 6; i++) out[t * 6 + i] = got[i];
}

int main() {
    check::Rng rng(17);
    // warp_sum3: values of mixed magnitudes, so the order of the additions shows in the bits
    std::vector<float> in(64 * 3), out(64 * 6);
    for (size_t i = 0; i < in.size(); i++) in[i] = rng.sym(1.0f) * std::ldexp(1.0f, (int)(i % 23) - 11);
    emu::launch(dim3(1), dim3(64), 0, 1, [&] { k_sum3(in.data(), out.data()); });
    bool same = true;
    for (int t = 0; t < 64; t++)
        for (int i = 0; i < 3; i++) same &= std::memcmp(&out[t * 6 + i], &out[t * 6 + 3 + i], 4) == 0;
    check::expect(same, "warp_sum3 gives each value the bits of warp_sum");

    // div_by_count: the counts the norms use and others, random sums and tiny ones
    const int counts[] = {1, 2, 3, 64, 96, 128, 512, 1000, 1024, 2048, 3072, 4096, 6144, 1 << 20, (1 << 23) + 1, 1 << 24};
    int mismatches = 0, checked = 0;
    for (int n : counts) {
        for (int i = 0; i < 4000; i++) {
            float t = i < 2000 ? std::fabs(rng.sym(1.0f)) * std::ldexp(1.0f, (int)(i % 60) - 20)
                               : std::fabs(rng.sym(1.0f)) * std::ldexp(1.0f, -120 - (i % 20));
            const float got = div_by_count(t, n), want = t / (float)n;
            mismatches += std::memcmp(&got, &want, 4) != 0;
            checked++;
        }
    }
    check::expect(mismatches == 0, "div_by_count gives the division's bits (" + std::to_string(mismatches) +
                                       " of " + std::to_string(checked) + " differ)");
    return check::failures() ? 1 : 0;
}
