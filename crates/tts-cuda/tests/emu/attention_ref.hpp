// attention_ref.hpp — the f64 reference of the code predictor's and the talker's attention for
// the emulated kernel tests (attention_short.cpp, attention_row.cpp): QK-norm and RoPE of a new
// token's q and k heads, and attention of a q head over positions 0..pos (or lo..pos) of its
// cache row, read from the caches as the kernel left them; and the check that no cache entry
// but the new positions' was written.
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

// A cache value (bf16 bits or f32) as f32, and an f32 as a cache value.
inline float kv_value(float v) { return v; }
inline float kv_value(uint16_t v) { return check::from_bf16(v); }
template <typename KV>
KV kv_of(float v);
template <>
inline float kv_of<float>(float v) { return v; }
template <>
inline uint16_t kv_of<uint16_t>(float v) { return check::to_bf16(v); }

// A layer's QK-norm gains (1 ± 0.2, q's then k's) and its RoPE inverse frequencies for head
// size hd, as weights.rs computes them.
struct NormRope {
    std::vector<float> qn, kn, inv_freq;
};
inline NormRope norm_rope(check::Rng& rng, int hd, double theta) {
    NormRope r{std::vector<float>(hd), std::vector<float>(hd), std::vector<float>(hd / 2)};
    for (auto& v : r.qn) v = 1.0f + rng.sym(0.2f);
    for (auto& v : r.kn) v = 1.0f + rng.sym(0.2f);
    for (int i = 0; i < hd / 2; i++) r.inv_freq[i] = 1.0f / std::pow((float)theta, (float)(2 * i) / (float)hd);
    return r;
}

// A cache of n entries, every one holding a value (as a cached prefix, or an earlier
// request's leftovers past it, would).
template <typename KV>
std::vector<KV> filled_cache(check::Rng& rng, size_t n) {
    std::vector<KV> c(n);
    for (auto& v : c) v = kv_of<KV>(rng.sym(1.5f));
    return c;
}

// A stack's attention shape and its cache's positions per row: caches are
// [cache row][max_pos][kv heads * hd].
struct AttnDims {
    int heads, kvh, hd, max_pos;
    int qd() const { return heads * hd; }
    int kvd() const { return kvh * hd; }
};

// softmax(q · K^T / sqrt(hd)) · V for the (already normed and rotated) query q of a q head of
// kv group g, over positions 0..pos of cache row `slot` of the caches k, v.
template <typename KV>
std::vector<double> attention_ref(const std::vector<double>& q, const AttnDims& d, int g,
                                  int slot, int pos, const std::vector<KV>& k,
                                  const std::vector<KV>& v) {
    const int kvd = d.kvd(), hd = d.hd;
    const size_t base = (size_t)slot * d.max_pos * kvd + (size_t)g * hd;
    std::vector<double> sc(pos + 1), out(hd, 0.0);
    double mx = -1e300, z = 0;
    for (int p = 0; p <= pos; p++) {
        double s = 0;
        for (int e = 0; e < hd; e++) s += q[e] * kv_value(k[base + (size_t)p * kvd + e]);
        sc[p] = s / std::sqrt((double)hd);
        mx = std::fmax(mx, sc[p]);
    }
    for (auto& s : sc) z += (s = std::exp(s - mx));
    for (int e = 0; e < hd; e++)
        for (int p = 0; p <= pos; p++) out[e] += sc[p] / z * kv_value(v[base + (size_t)p * kvd + e]);
    return out;
}

// The same over positions lo..pos only (a sliding window's first position lo; attention_ref is
// lo = 0), for the split kernels, whose tokens' K and V are already in the cache.
template <typename KV>
std::vector<double> attention_ref_from(const std::vector<double>& q, const AttnDims& d, int g,
                                       int slot, int lo, int pos, const std::vector<KV>& k,
                                       const std::vector<KV>& v) {
    const int kvd = d.kvd(), hd = d.hd;
    const size_t base = (size_t)slot * d.max_pos * kvd + (size_t)g * hd;
    std::vector<double> sc(pos + 1 - lo), out(hd, 0.0);
    double mx = -1e300, z = 0;
    for (int p = lo; p <= pos; p++) {
        double s = 0;
        for (int e = 0; e < hd; e++) s += q[e] * kv_value(k[base + (size_t)p * kvd + e]);
        sc[p - lo] = s / std::sqrt((double)hd);
        mx = std::fmax(mx, sc[p - lo]);
    }
    for (auto& s : sc) z += (s = std::exp(s - mx));
    for (int e = 0; e < hd; e++)
        for (int p = lo; p <= pos; p++)
            out[e] += sc[p - lo] / z * kv_value(v[base + (size_t)p * kvd + e]);
    return out;
}

// Whether every cache entry but the new positions' (slots[t], positions[t]) kept its value
// (tokens with a negative slot write nothing).
template <typename KV>
bool others_kept(const std::vector<KV>& now, const std::vector<KV>& before, const AttnDims& d,
                 const std::vector<int>& slots, const std::vector<int>& positions) {
    const int kvd = d.kvd();
    for (size_t i = 0; i < now.size(); i++) {
        const int s = (int)(i / ((size_t)d.max_pos * kvd)), p = (int)(i / kvd % d.max_pos);
        bool is_new = false;
        for (size_t t = 0; t < slots.size(); t++) is_new |= slots[t] == s && positions[t] == p;
        if (!is_new && std::memcmp(&now[i], &before[i], sizeof(KV)) != 0) return false;
    }
    return true;
}

// Whether two buffers hold the same bits.
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Whether xb holds the outputs `out` (T rows of ld floats, `width` of them real) split into
// bf16 rows, hi then lo T rows further; its columns past `width` and the rows of the tokens
// `skipped(t)` names keep `poison`.
template <typename Skipped>
bool xb_is_split(const std::vector<uint16_t>& xb, const std::vector<float>& out, int T, int ld,
                 int width, uint16_t poison, Skipped skipped) {
    bool ok = true;
    for (int t = 0; t < T; t++)
        for (int col = 0; col < ld; col++) {
            const uint16_t hi = xb[(size_t)t * ld + col], lo = xb[(size_t)(T + t) * ld + col];
            if (skipped(t) || col >= width) {
                ok &= hi == poison && lo == poison;
                continue;
            }
            const float o = out[(size_t)t * ld + col];
            const uint16_t want_hi = check::to_bf16(o);
            ok &= hi == want_hi && lo == check::to_bf16(o - check::from_bf16(want_hi));
        }
    return ok;
}

// A case's rows or tokens, "slot:pos,slot:p0-p1,..." (slot -1: padding), as (slot, p0, p1).
struct SlotSpan {
    int slot, p0, p1;
};
inline std::vector<SlotSpan> parse_slot_spans(const std::string& spec) {
    std::vector<SlotSpan> out;
    const char* s = spec.c_str();
    while (*s) {
        char* end;
        const long slot = std::strtol(s, &end, 10);
        if (*end != ':') emu::fail("expected slot:pos or slot:p0-p1,...");
        const long p0 = std::strtol(end + 1, &end, 10);
        long p1 = p0;
        if (*end == '-') p1 = std::strtol(end + 1, &end, 10);
        if (p1 < p0) emu::fail("slot:p0-p1 with p1 < p0");
        out.push_back(SlotSpan{(int)slot, (int)p0, (int)p1});
        if (*end == ',') end++;
        else if (*end) emu::fail("expected slot:pos or slot:p0-p1,...");
        s = end;
    }
    return out;
}

// others_kept for large caches and many tokens (attention_prefill.cpp): the same check, with
// the new (slot, position) pairs marked once instead of searched per entry.
template <typename KV>
bool others_kept_marked(const std::vector<KV>& now, const std::vector<KV>& before,
                        const AttnDims& d, const std::vector<int>& slots,
                        const std::vector<int>& positions) {
    const size_t kvd = d.kvd(), rows = now.size() / ((size_t)d.max_pos * kvd);
    std::vector<char> is_new(rows * d.max_pos, 0);
    for (size_t t = 0; t < slots.size(); t++)
        if (slots[t] >= 0 && (size_t)slots[t] < rows) is_new[(size_t)slots[t] * d.max_pos + positions[t]] = 1;
    for (size_t e = 0; e < rows * d.max_pos; e++)
        if (!is_new[e] && std::memcmp(&now[e * kvd], &before[e * kvd], kvd * sizeof(KV)) != 0)
            return false;
    return true;
}

// Whether a kernel's name is its f32-cache twin's.
inline bool f32_kernel(const std::string& name) {
    return name.size() > 4 && name.compare(name.size() - 4, 4, "_f32") == 0;
}

// "slot:p0-p1,..." (parse_slot_spans) as one token per position: its slot and position.
inline void span_tokens(const std::vector<SlotSpan>& spans, std::vector<int>& slots, std::vector<int>& positions) {
    for (const SlotSpan& s : spans)
        for (int p = s.p0; p <= s.p1; p++) {
            slots.push_back(s.slot);
            positions.push_back(p);
        }
}

// The new cache entries of the token whose QKV row is `row`, at `pos` of cache row
// `cache_row`: what the kernel stored into k and v (got) against what it should have (want:
// k normed with kn and rotated, v as projected), k then v of each element of each kv head.
template <typename KV>
void new_kv_entries(const float* row, const std::vector<float>& kn, float eps, const std::vector<float>& inv_freq,
                    const AttnDims& d, int cache_row, int pos, const std::vector<KV>& k, const std::vector<KV>& v,
                    std::vector<float>& got, std::vector<double>& want) {
    const int qd = d.qd(), kvd = d.kvd(), hd = d.hd;
    for (int g = 0; g < d.kvh; g++) {
        const auto kr = norm_rope_ref(row + qd + g * hd, kn, eps, inv_freq, pos, hd);
        for (int e = 0; e < hd; e++) {
            const size_t at = ((size_t)cache_row * d.max_pos + pos) * kvd + g * hd + e;
            got.push_back(kv_value(k[at]));
            want.push_back(kr[e]);
            got.push_back(kv_value(v[at]));
            want.push_back((double)row[qd + kvd + g * hd + e]);
        }
    }
}
