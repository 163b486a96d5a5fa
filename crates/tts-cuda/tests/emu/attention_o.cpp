// Emulated check of attention_o.cu against an f64 reference of one code-predictor step's
//   x[r] += O · attention(q[r], k, v)
// (QK-norm, RoPE, the new K/V stored in the cache, attention over the cached positions and
// the new one), on the launch plans `stack::attention_o_plan` gives (argv per case: cache
// type (bf16|f32), heads, kv heads, head dim, hidden, chunks, O rows a chunk, shared bytes,
// rows). Rows take different slots and positions; with 2 or more rows, row 1 is padding
// (slot -1) and must change nothing. Also: the sums are left at zero, a second launch
// gives the same bits, and only the new position's cache rows are written.

struct AoCase {
    bool f32;
    int heads, kvh, hd, H, chunks, orows, smem, rows;
};

static const int MAX_POS = 16, SLOTS = 3;

// RMS-norm of x[0..hd) with gains w, rotated for position pos (rotate-half pairs).
static std::vector<double> norm_rope_ref(const float* x, const std::vector<float>& w, float eps,
                                         const std::vector<float>& inv_freq, int pos, int hd) {
    double ss = 0;
    for (int i = 0; i < hd; i++) ss += (double)x[i] * x[i];
    const double inv = 1.0 / std::sqrt(ss / hd + eps);
    std::vector<double> a(hd), out(hd);
    for (int i = 0; i < hd; i++) a[i] = w[i] * (x[i] * inv);
    for (int i = 0; i < hd / 2; i++) {
        const double ang = (double)(float)((float)pos * inv_freq[i]);
        const double c = std::cos(ang), s = std::sin(ang);
        out[i] = a[i] * c - a[i + hd / 2] * s;
        out[i + hd / 2] = a[i + hd / 2] * c + a[i] * s;
    }
    return out;
}

template <typename KV>
static float kv_value(KV v);
template <>
float kv_value<float>(float v) { return v; }
template <>
float kv_value<uint16_t>(uint16_t v) { return check::from_bf16(v); }
template <typename KV>
static KV kv_of(float v);
template <>
float kv_of<float>(float v) { return v; }
template <>
uint16_t kv_of<uint16_t>(float v) { return check::to_bf16(v); }

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
    // the cache: only the live rows' new positions written, with the normed, rotated k and v
    std::vector<float> kv_got;
    std::vector<double> kv_want;
    bool others_kept = true;
    for (size_t i = 0; i < kc.size(); i++) {
        const int s = (int)(i / ((size_t)MAX_POS * kvd)), p = (int)(i / kvd % MAX_POS);
        bool is_new = false;
        for (int r = 0; r < c.rows; r++) is_new |= slots[r] == s && positions[r] == p;
        if (!is_new) others_kept &= std::memcmp(&k[i], &kc[i], sizeof(KV)) == 0 &&
                                    std::memcmp(&v[i], &vc[i], sizeof(KV)) == 0;
    }
    check::expect(others_kept, name + ": no cache entry but the new positions' is written");
    std::vector<double> want_x(x0.begin(), x0.end());
    for (int r = 0; r < c.rows; r++) {
        if (slots[r] < 0) continue;
        const int s = slots[r], pos = positions[r];
        const float* row = qkv.data() + (size_t)r * ldq;
        const size_t base = ((size_t)s * MAX_POS) * kvd;
        std::vector<double> attn(qd);
        for (int g = 0; g < c.kvh; g++) {
            const auto kr = norm_rope_ref(row + qd + g * c.hd, kn, eps, inv_freq, pos, c.hd);
            for (int e = 0; e < c.hd; e++) {
                const size_t at = base + (size_t)pos * kvd + g * c.hd + e;
                kv_got.push_back(kv_value(k[at]));
                kv_want.push_back(kr[e]);
                kv_got.push_back(kv_value(v[at]));
                kv_want.push_back(row[qd + kvd + g * c.hd + e]);
            }
        }
        for (int h = 0; h < c.heads; h++) {
            const int g = h / (c.heads / c.kvh);
            const auto q = norm_rope_ref(row + h * c.hd, qn, eps, inv_freq, pos, c.hd);
            // the cached positions and the new one as the kernel's cache holds them
            std::vector<double> sc(pos + 1);
            double mx = -1e300;
            for (int p = 0; p <= pos; p++) {
                double d = 0;
                for (int e = 0; e < c.hd; e++)
                    d += q[e] * kv_value(k[base + (size_t)p * kvd + g * c.hd + e]);
                sc[p] = d / std::sqrt((double)c.hd);
                mx = std::fmax(mx, sc[p]);
            }
            double z = 0;
            for (auto& s2 : sc) z += (s2 = std::exp(s2 - mx));
            for (int e = 0; e < c.hd; e++) {
                double o = 0;
                for (int p = 0; p <= pos; p++) o += sc[p] / z * kv_value(v[base + (size_t)p * kvd + g * c.hd + e]);
                attn[h * c.hd + e] = o;
            }
        }
        for (int n = 0; n < c.H; n++) {
            double sacc = 0;
            for (int j = 0; j < qd; j++) sacc += check::from_bf16(wo[(size_t)n * qd + j]) * attn[j];
            want_x[(size_t)r * ldx + n] += sacc;
        }
    }
    check::close(name + ": new cache rows", kv_got, kv_want, c.f32 ? 2e-5 : 8e-3);
    check::close(name + ": x", x, want_x, 2e-5);
    bool zero = arrived == 0;
    for (auto s : sums) zero &= s == 0;
    check::expect(zero, name + ": the sums and the arrival count are zero again");
    std::vector<float> again = x0;
    std::vector<KV> k2 = kc, v2 = vc;
    launch(again, k2, v2);
    check::expect(std::memcmp(x.data(), again.data(), x.size() * 4) == 0 &&
                      std::memcmp(k.data(), k2.data(), k.size() * sizeof(KV)) == 0,
                  name + ": a second launch gives the same bits");
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
