// Emulated check of attention_o.cu against an f64 reference of one code-predictor step's
//   x[r] += O · attention(q[r], k, v)
// (QK-norm, RoPE, the new K/V stored in the cache, attention over the cached positions and
// the new one), on the launch plans `stack::attention_o_plan` gives (argv per case: cache
// type (bf16|f32), heads, kv heads, head dim, hidden, chunks, O rows a chunk, shared bytes,
// rows). Rows take different slots and positions; with 2 or more rows, row 1 is padding
// (slot -1) and must change nothing. Also: the sums are left at zero, a second launch
// gives the same bits, and only the new position's cache rows are written.

#include "attention_ref.hpp"

struct AoCase {
    bool f32;
    int heads, kvh, hd, H, chunks, orows, smem, rows;
};

static const int MAX_POS = 16, SLOTS = 3;

template <typename KV>
static void run_case(const AoCase& c) {
    const int qd = c.heads * c.hd, kvd = c.kvh * c.hd, ldq = qd + 2 * kvd + 8, ldx = c.H + 4;
    check::Rng rng((uint64_t)c.H * 31 + c.heads * 7 + c.rows + (c.f32 ? 1000 : 0));
    std::vector<float> qkv = check::f32_values(rng, (size_t)c.rows * ldq, 2.0f);
    std::vector<float> qn(c.hd), kn(c.hd), inv_freq(c.hd / 2);
    for (auto& v : qn) v = 1.0f + rng.sym(0.2f);
    for (auto& v : kn) v = 1.0f + rng.sym(0.2f);
    for (int i = 0; i < c.hd / 2; i++) inv_freq[i] = (float)std::pow(1e6, -2.0 * i / c.hd);
    const auto wo = check::bf16_values(rng, (size_t)c.H * qd, 0.03f);
    std::vector<KV> kc((size_t)SLOTS * MAX_POS * kvd), vc(kc.size());
    for (auto& v : kc) v = kv_of<KV>(rng.sym(1.5f));
    for (auto& v : vc) v = kv_of<KV>(rng.sym(1.5f));
    const auto x0 = check::f32_values(rng, (size_t)c.rows * ldx, 1.0f);
    // row r: slot and position (row 1 is padding when there are two or more rows)
    const int slot_of[4] = {2, -1, 0, 1}, pos_of[4] = {5, 9, 15, 0};
    std::vector<int> slots(c.rows), positions(c.rows);
    for (int r = 0; r < c.rows; r++) {
        slots[r] = c.rows == 1 ? 1 : slot_of[r];
        positions[r] = c.rows == 1 ? 7 : pos_of[r];
    }
    const float eps = 1e-6f;
    std::vector<unsigned long long> sums((size_t)c.rows * c.H, 0);
    unsigned arrived = 0;
    auto launch = [&](std::vector<float>& x, std::vector<KV>& k, std::vector<KV>& v) {
        emu::launch(dim3(c.heads, c.chunks, c.rows), dim3(128), c.smem, 1, [&] {
            const auto* w = (const bf16*)wo.data();
            if constexpr (sizeof(KV) == 4)
                attention_o_m1_f32(qkv.data(), ldq, slots.data(), positions.data(), qn.data(), kn.data(),
                                   eps, inv_freq.data(), c.heads, c.kvh, c.hd, k.data(), v.data(), MAX_POS,
                                   w, c.H, c.orows, c.rows, x.data(), ldx, sums.data(), &arrived);
            else
                attention_o_m1(qkv.data(), ldq, slots.data(), positions.data(), qn.data(), kn.data(), eps,
                               inv_freq.data(), c.heads, c.kvh, c.hd, (bf16*)k.data(), (bf16*)v.data(),
                               MAX_POS, w, c.H, c.orows, c.rows, x.data(), ldx, sums.data(), &arrived);
        });
    };
    std::vector<float> x = x0;
    std::vector<KV> k = kc, v = vc;
    launch(x, k, v);

    const std::string name = std::string(c.f32 ? "attention_o_m1_f32" : "attention_o_m1") + " " +
                             std::to_string(c.heads) + "x" + std::to_string(c.hd) + " -> " +
                             std::to_string(c.H) + ", " + std::to_string(c.rows) + " row(s), " +
                             std::to_string(c.chunks) + " chunks of " + std::to_string(c.orows);
    const AttnDims d{c.heads, c.kvh, c.hd, c.H, MAX_POS};
    check::expect(others_kept(k, kc, d, slots, positions) && others_kept(v, vc, d, slots, positions),
                  name + ": no cache entry but the new positions' is written");
    std::vector<float> kv_got;
    std::vector<double> kv_want, want_x(x0.begin(), x0.end());
    for (int r = 0; r < c.rows; r++) {
        if (slots[r] < 0) continue;
        const auto delta = attention_o_ref(qkv.data() + (size_t)r * ldq, d, slots[r], positions[r], qn, kn,
                                           inv_freq, eps, k, v, wo, kv_got, kv_want);
        for (int n = 0; n < c.H; n++) want_x[(size_t)r * ldx + n] += delta[n];
    }
    check::close(name + ": new cache rows", kv_got, kv_want, c.f32 ? 2e-5 : 8e-3);
    check::close(name + ": x", x, want_x, 2e-5);
    check::sums_reset(name, sums, arrived);
    same_bits_again(name, launch, x0, kc, vc, x, k);
}

int main(int argc, char** argv) {
    if ((argc - 1) % 9 != 0 || argc == 1)
        emu::fail("usage: attention_o (bf16|f32 heads kvh hd H chunks orows smem rows)...");
    for (int i = 1; i < argc; i += 9) {
        AoCase c;
        c.f32 = std::string(argv[i]) == "f32";
        int* f[] = {&c.heads, &c.kvh, &c.hd, &c.H, &c.chunks, &c.orows, &c.smem, &c.rows};
        for (int j = 0; j < 8; j++) *f[j] = std::atoi(argv[i + 1 + j]);
        if (c.f32)
            run_case<float>(c);
        else
            run_case<uint16_t>(c);
    }
    return check::failures() ? 1 : 0;
}
