// Emulated check of qkv_attention_o.cu (short caches) and qkv_attention_o_long.cu (any
// cache) against an f64 reference of one step's attention half for one row,
//   x += O · attention(QKV(norm x)),
// on the launch plans `stack::qkv_attention_o_plan` gives (argv per case: short|long,
// cache type (bf16|f32), heads, kv heads, head dim, hidden, shared bytes, slot (-1:
// padding), position, cache positions). Also: only the new position's cache rows are
// written (none for padding), the sums are left at zero, and a second launch gives the
// same bits.

#include "attention_ref.hpp"

struct QaoCase {
    bool lng, f32;
    int heads, kvh, hd, H, smem, slot, pos, max_pos;
};

static const int SLOTS = 3;

template <typename KV>
static void run_case(const QaoCase& c) {
    const int MAX_POS = c.max_pos;
    const AttnDims d{c.heads, c.kvh, c.hd, c.H, MAX_POS};
    const int qd = d.qd(), kvd = d.kvd(), nq = qd + 2 * kvd;
    check::Rng rng((uint64_t)c.H * 131 + c.heads * 7 + c.pos + (c.f32 ? 1000 : 0));
    const auto wqkv = check::bf16_values(rng, (size_t)nq * c.H, 0.05f);
    const auto wo = check::bf16_values(rng, (size_t)c.H * qd, 0.03f);
    std::vector<float> in_norm(c.H), qn(c.hd), kn(c.hd), inv_freq(c.hd / 2);
    for (auto& v : in_norm) v = 1.0f + rng.sym(0.1f);
    for (auto& v : qn) v = 1.0f + rng.sym(0.2f);
    for (auto& v : kn) v = 1.0f + rng.sym(0.2f);
    for (int i = 0; i < c.hd / 2; i++) inv_freq[i] = (float)std::pow(1e6, -2.0 * i / c.hd);
    std::vector<KV> kc((size_t)SLOTS * MAX_POS * kvd), vc(kc.size());
    for (auto& v : kc) v = kv_of<KV>(rng.sym(1.5f));
    for (auto& v : vc) v = kv_of<KV>(rng.sym(1.5f));
    const auto x0 = check::f32_values(rng, c.H, 1.0f);
    const std::vector<int> slots{c.slot}, positions{c.pos};
    const float eps = 1e-6f;
    std::vector<unsigned long long> sums(c.H, 0);
    unsigned arrived = 0;
    auto launch = [&](std::vector<float>& x, std::vector<KV>& k, std::vector<KV>& v) {
        emu::launch(dim3(8, c.heads), dim3(256), c.smem, 8, [&] {
            const auto* wq = (const bf16*)wqkv.data();
            const auto* w = (const bf16*)wo.data();
            auto* kp = (std::conditional_t<sizeof(KV) == 4, float, bf16>*)k.data();
            auto* vp = (std::conditional_t<sizeof(KV) == 4, float, bf16>*)v.data();
            auto kernel = [&](auto f) {
                f(wq, in_norm.data(), slots.data(), positions.data(), qn.data(), kn.data(), eps,
                  inv_freq.data(), c.heads, c.kvh, c.hd, kp, vp, MAX_POS, w, c.H, x.data(), sums.data(),
                  &arrived, (int)c.f32);
            };
            if constexpr (sizeof(KV) == 4) {
                if (c.lng) kernel(qkv_attention_o_long_m1_f32);
                else kernel(qkv_attention_o_m1_f32);
            } else {
                if (c.lng) kernel(qkv_attention_o_long_m1);
                else kernel(qkv_attention_o_m1);
            }
        });
    };
    std::vector<float> x = x0;
    std::vector<KV> k = kc, v = vc;
    launch(x, k, v);

    const std::string name = std::string(c.lng ? "qkv_attention_o_long_m1" : "qkv_attention_o_m1") +
                             (c.f32 ? "_f32 " : " ") +
                             std::to_string(c.heads) + "x" + std::to_string(c.hd) + " (kv " +
                             std::to_string(c.kvh) + ") -> " + std::to_string(c.H) + ", slot " +
                             std::to_string(c.slot) + " at " + std::to_string(c.pos) + " of " +
                             std::to_string(c.max_pos);
    const std::vector<int> written_slots = c.slot < 0 ? std::vector<int>{} : slots;
    check::expect(others_kept(k, kc, d, written_slots, positions) && others_kept(v, vc, d, written_slots, positions),
                  name + ": no cache entry but the new position's is written");
    std::vector<double> want_x(x0.begin(), x0.end());
    if (c.slot >= 0) {
        // the row's QKV values: Wqkv · (g ⊙ x / rms(x))
        double ss = 0;
        for (float e : x0) ss += (double)e * e;
        const double inv = 1.0 / std::sqrt(ss / c.H + eps);
        std::vector<double> qkv(nq, 0.0);
        for (int n = 0; n < nq; n++)
            for (int kk = 0; kk < c.H; kk++)
                qkv[n] += check::from_bf16(wqkv[(size_t)n * c.H + kk]) * ((double)x0[kk] * inv * in_norm[kk]);
        std::vector<float> kv_got;
        std::vector<double> kv_want;
        const auto delta = attention_o_ref(qkv.data(), d, c.slot, c.pos, qn, kn, inv_freq, eps, k, v, wo,
                                           kv_got, kv_want);
        for (int n = 0; n < c.H; n++) want_x[n] += delta[n];
        check::close(name + ": new cache rows", kv_got, kv_want, c.f32 ? 2e-5 : 8e-3);
    }
    check::close(name + ": x", x, want_x, 2e-5);
    check::sums_reset(name, sums, arrived);
    same_bits_again(name, launch, x0, kc, vc, x, k);
}

int main(int argc, char** argv) {
    if ((argc - 1) % 10 != 0 || argc == 1)
        emu::fail("usage: qkv_attention_o (short|long bf16|f32 heads kvh hd H smem slot pos max_pos)...");
    for (int i = 1; i < argc; i += 10) {
        QaoCase c;
        c.lng = std::string(argv[i]) == "long";
        c.f32 = std::string(argv[i + 1]) == "f32";
        int* f[] = {&c.heads, &c.kvh, &c.hd, &c.H, &c.smem, &c.slot, &c.pos, &c.max_pos};
        for (int j = 0; j < 8; j++) *f[j] = std::atoi(argv[i + 2 + j]);
        if (c.f32)
            run_case<float>(c);
        else
            run_case<uint16_t>(c);
    }
    return check::failures() ? 1 : 0;
}
