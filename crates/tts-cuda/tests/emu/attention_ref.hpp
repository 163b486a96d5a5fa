// attention_ref.hpp — the f64 reference of a code-predictor step's attention half for one
// row (attention_o.cpp, qkv_attention_o.cpp): QK-norm, RoPE, attention over the cached
// positions and the new one, the O projection.
#pragma once

#include "check.hpp"

// RMS-norm of x[0..hd) with gains w, rotated for position pos (rotate-half pairs).
template <typename T>
std::vector<double> norm_rope_ref(const T* x, const std::vector<float>& w, float eps,
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

inline float kv_value(float v) { return v; }
inline float kv_value(uint16_t v) { return check::from_bf16(v); }
template <typename KV>
KV kv_of(float v);
template <>
inline float kv_of<float>(float v) { return v; }
template <>
inline uint16_t kv_of<uint16_t>(float v) { return check::to_bf16(v); }

struct AttnDims {
    int heads, kvh, hd, H, max_pos;
    int qd() const { return heads * hd; }
    int kvd() const { return kvh * hd; }
};

// O · attention for one row whose QKV values are `qkv` (q heads, then k, then v), at
// position `pos` of cache row `slot`, against the caches `k`, `v` as the kernel left them
// (so the new position holds the kernel's rounding of the new k and v). Appends the new
// k and v the kernel stored and their reference values to `got` / `want`.
template <typename KV, typename T>
std::vector<double> attention_o_ref(const T* qkv, const AttnDims& d, int slot, int pos,
                                    const std::vector<float>& qn, const std::vector<float>& kn,
                                    const std::vector<float>& inv_freq, float eps,
                                    const std::vector<KV>& k, const std::vector<KV>& v,
                                    const std::vector<uint16_t>& wo, std::vector<float>& got,
                                    std::vector<double>& want) {
    const int qd = d.qd(), kvd = d.kvd(), hd = d.hd;
    const size_t base = (size_t)slot * d.max_pos * kvd;
    for (int g = 0; g < d.kvh; g++) {
        const auto kr = norm_rope_ref(qkv + qd + g * hd, kn, eps, inv_freq, pos, hd);
        for (int e = 0; e < hd; e++) {
            const size_t at = base + (size_t)pos * kvd + g * hd + e;
            got.push_back(kv_value(k[at]));
            want.push_back(kr[e]);
            got.push_back(kv_value(v[at]));
            want.push_back((double)qkv[qd + kvd + g * hd + e]);
        }
    }
    std::vector<double> attn(qd), out(d.H, 0.0);
    for (int h = 0; h < d.heads; h++) {
        const int g = h / (d.heads / d.kvh);
        const auto q = norm_rope_ref(qkv + h * hd, qn, eps, inv_freq, pos, hd);
        std::vector<double> sc(pos + 1);
        double mx = -1e300, z = 0;
        for (int p = 0; p <= pos; p++) {
            double s = 0;
            for (int e = 0; e < hd; e++) s += q[e] * kv_value(k[base + (size_t)p * kvd + g * hd + e]);
            sc[p] = s / std::sqrt((double)hd);
            mx = std::fmax(mx, sc[p]);
        }
        for (auto& s : sc) z += (s = std::exp(s - mx));
        for (int e = 0; e < hd; e++) {
            double o = 0;
            for (int p = 0; p <= pos; p++) o += sc[p] / z * kv_value(v[base + (size_t)p * kvd + g * hd + e]);
            attn[h * hd + e] = o;
        }
    }
    for (int n = 0; n < d.H; n++)
        for (int j = 0; j < qd; j++) out[n] += check::from_bf16(wo[(size_t)n * qd + j]) * attn[j];
    return out;
}

// A second launch on the same inputs (x0 and the caches kc / vc) gives the bits of the
// first (x and k).
template <typename KV, typename Launch>
void same_bits_again(const std::string& name, Launch launch, const std::vector<float>& x0,
                     const std::vector<KV>& kc, const std::vector<KV>& vc,
                     const std::vector<float>& x, const std::vector<KV>& k) {
    std::vector<float> again = x0;
    std::vector<KV> k2 = kc, v2 = vc;
    launch(again, k2, v2);
    check::expect(std::memcmp(x.data(), again.data(), x.size() * 4) == 0 &&
                      std::memcmp(k.data(), k2.data(), k.size() * sizeof(KV)) == 0,
                  name + ": a second launch gives the same bits");
}

// Whether every cache entry but the new positions' (slot, pos) pairs kept its value.
template <typename KV>
bool others_kept(const std::vector<KV>& now, const std::vector<KV>& before, const AttnDims& d,
                 const std::vector<int>& slots, const std::vector<int>& positions) {
    const int kvd = d.kvd();
    for (size_t i = 0; i < now.size(); i++) {
        const int s = (int)(i / ((size_t)d.max_pos * kvd)), p = (int)(i / kvd % d.max_pos);
        bool is_new = false;
        for (size_t r = 0; r < slots.size(); r++) is_new |= slots[r] == s && positions[r] == p;
        if (!is_new && std::memcmp(&now[i], &before[i], sizeof(KV)) != 0) return false;
    }
    return true;
}
