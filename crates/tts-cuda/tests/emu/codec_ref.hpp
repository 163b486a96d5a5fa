// codec_ref.hpp — what the codec drivers (codec_*.cpp) share: a pass's metadata as
// state.rs's pass_inputs writes it (codec.cu's CodecMeta), the slots' streams across passes
// (position, history parity, a causal layer's history of raw inputs), the slot state's
// check, the activations in f64 and f16 rounding.
#pragma once

#include <sstream>
#include <string>

#include "check.hpp"

namespace codec {

// Values no kernel writes: the slot state around the layer's history, and the history
// copy a pass must overwrite before anything reads it.
constexpr float SENTINEL = 777.0f, STALE = -999.0f, POISON = -12345.0f;

// Each slot's stream position (frames decoded) and history parity (state.rs's SlotBook).
struct Book {
    std::vector<int> pos, parity;
};

// The slots' first positions "p0,p1,..." (slot s starts at parity s & 1).
inline Book parse_book(const std::string& spec) {
    Book b;
    std::stringstream ss(spec);
    for (std::string t; std::getline(ss, t, ',');) {
        b.pos.push_back(std::stoi(t));
        b.parity.push_back((int)(b.pos.size() - 1) & 1);
    }
    return b;
}

// One pass: `nrows` rows in a metadata capacity of R rows (slot, parity, first frame,
// frames, position), then frame_row per frame (-1: a padding frame).
struct Pass {
    int R = 0, nrows = 0, frames = 0;
    std::vector<int> meta;
    int slot(int r) const { return meta[r]; }
    int parity(int r) const { return meta[R + r]; }
    int first(int r) const { return meta[2 * R + r]; }
    int len(int r) const { return meta[3 * R + r]; }
    int pos(int r) const { return meta[4 * R + r]; }
    int frame_row(int f) const { return meta[5 * R + f]; }
};

// A pass from "slot:frames,...[/pad]": its rows in order (slot -1: a padding row, no
// frames), then `pad` padding frames; rows past it up to R are padding as well.
inline Pass make_pass(const std::string& spec, const Book& book, int R) {
    Pass p;
    p.R = R;
    std::string rows = spec;
    int pad = 0;
    if (const size_t at = spec.find('/'); at != std::string::npos) {
        rows = spec.substr(0, at);
        pad = std::stoi(spec.substr(at + 1));
    }
    std::vector<std::pair<int, int>> rs;
    std::stringstream ss(rows);
    for (std::string t; std::getline(ss, t, ',');) {
        const size_t c = t.find(':');
        rs.push_back({std::stoi(t.substr(0, c)), std::stoi(t.substr(c + 1))});
    }
    p.nrows = (int)rs.size();
    for (auto& r : rs) p.frames += r.second;
    p.frames += pad;
    if (p.nrows > R) emu::fail("a pass of more rows than its capacity");
    p.meta.assign(5 * R + p.frames, 0);
    for (int r = 0; r < R; r++) p.meta[r] = -1;
    for (int f = 0; f < p.frames; f++) p.meta[5 * R + f] = -1;
    int first = 0;
    for (int r = 0; r < p.nrows; r++) {
        const int slot = rs[r].first, n = rs[r].second;
        if (slot < 0) continue;
        p.meta[r] = slot;
        p.meta[R + r] = book.parity[slot];
        p.meta[2 * R + r] = first;
        p.meta[3 * R + r] = n;
        p.meta[4 * R + r] = book.pos[slot];
        for (int f = 0; f < n; f++) p.meta[5 * R + first + f] = r;
        first += n;
    }
    return p;
}

// The passes of "pass;pass;...".
inline std::vector<std::string> split_passes(const std::string& spec) {
    std::vector<std::string> out;
    std::stringstream ss(spec);
    for (std::string t; std::getline(ss, t, ';');) out.push_back(t);
    return out;
}

// After a pass: each of its slots advanced by its frames, its parity flipped (state.rs).
inline void advance(Book& b, const Pass& p) {
    for (int r = 0; r < p.nrows; r++)
        if (p.slot(r) >= 0) {
            b.pos[p.slot(r)] += p.len(r);
            b.parity[p.slot(r)] ^= 1;
        }
}

// A causal layer's history (codec.cu's header): `ctx` raw input steps of `cin` channels,
// two copies at `off` in each slot's `stride` floats of state; `past[slot]` is what the
// copy `parity` holds (zeros for a fresh slot, as reset_slot leaves it).
struct History {
    int cin, ctx, rate, off, stride;
    std::vector<std::vector<float>> past;

    History(int cin_, int ctx_, int rate_, int off_, int stride_, const Book& b, check::Rng& rng)
        : cin(cin_), ctx(ctx_), rate(rate_), off(off_), stride(stride_) {
        for (int pos : b.pos)
            past.push_back(pos == 0 ? std::vector<float>((size_t)ctx * cin, 0.f)
                                    : check::f32_values(rng, (size_t)ctx * cin, 1.5f));
    }

    // The slots' state: the sentinel, each slot's history in copy `parity`, the other copy
    // stale.
    std::vector<float> state(const Book& b) const {
        std::vector<float> s(past.size() * stride, SENTINEL);
        for (size_t slot = 0; slot < past.size(); slot++) {
            float* h = s.data() + slot * stride + off;
            std::copy(past[slot].begin(), past[slot].end(), h + (size_t)b.parity[slot] * ctx * cin);
            std::fill_n(h + (size_t)(1 - b.parity[slot]) * ctx * cin, (size_t)ctx * cin, STALE);
        }
        return s;
    }

    // Row r's input `back` steps before its local step ls: the pass's input x (rows of
    // ldx) or, before the row's first step, the slot's history.
    const float* input(const Pass& p, int r, int ls, int back, const float* x, int ldx) const {
        const int src = ls - back;
        if (src >= 0) return x + ((size_t)p.first(r) * rate + src) * ldx;
        return past[p.slot(r)].data() + (size_t)(ctx + src) * cin;
    }

    // The pass's effect on the state: each row's slot gets the last ctx steps of
    // [history; new input] in its other copy; nothing else changes. Checks `got` against
    // that exactly, then takes the new histories as the slots' past.
    void check_update(const std::string& name, const Pass& p, const std::vector<float>& before,
                      const std::vector<float>& got, const float* x, int ldx) {
        std::vector<float> want = before;
        std::vector<std::vector<float>> next = past;
        for (int r = 0; r < p.nrows; r++) {
            const int slot = p.slot(r);
            if (slot < 0) continue;
            const int steps = p.len(r) * rate;
            for (int q = 0; q < ctx; q++) {
                const float* v = input(p, r, steps + q, ctx, x, ldx);
                std::copy(v, v + cin, next[slot].begin() + (size_t)q * cin);
            }
            float* h = want.data() + (size_t)slot * stride + off + (size_t)(1 - p.parity(r)) * ctx * cin;
            std::copy(next[slot].begin(), next[slot].end(), h);
        }
        size_t bad = 0;
        while (bad < want.size() && std::memcmp(&want[bad], &got[bad], 4) == 0) bad++;
        check::expect(bad == want.size(),
                      name + ": the slot state holds each row's new history in its other copy, "
                             "nothing else changed" +
                          (bad == want.size() ? "" : " (first difference at " + std::to_string(bad) + ")"));
        past = next;
    }
};

// The activations of codec.cu's codec_act in f64: 1 SnakeBeta (alpha·x taken in f32, as
// the kernel does), 2 exact GELU.
inline double act_ref(float v, int act, const float* alpha, const float* inv_beta, int ch) {
    if (act == 1) {
        const double s = std::sin((double)(v * alpha[ch]));
        return v + inv_beta[ch] * s * s;
    }
    if (act == 2) return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    return v;
}

// SnakeBeta parameters as layers.rs's snake_params gives them: alpha = exp(a) and
// inv_beta = 1 / (exp(b) + 1e-9) for small random a, b.
inline void snake_params(check::Rng& rng, int c, std::vector<float>& alpha, std::vector<float>& inv_beta) {
    alpha.resize(c);
    inv_beta.resize(c);
    for (int i = 0; i < c; i++) {
        alpha[i] = std::exp(rng.sym(0.7f));
        inv_beta[i] = 1.0f / (std::exp(rng.sym(0.7f)) + 1e-9f);
    }
}

// f32 of IEEE half bits (exact; independent of the emulator's twin).
inline double from_f16(uint16_t h) {
    const int e = h >> 10 & 31, m = h & 1023;
    const double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? INFINITY : std::ldexp(m + 1024, e - 25);
    return h >> 15 ? -v : v;
}

// The f16 bits nearest v (ties to even; |v| <= 65504).
inline uint16_t to_f16(double v) {
    const uint16_t s = std::signbit(v) ? 0x8000 : 0;
    const double a = std::fabs(v);
    if (a < std::ldexp(1.0, -14)) return s | (uint16_t)std::nearbyint(std::ldexp(a, 24));
    int e = std::ilogb(a);
    double m = std::nearbyint(std::ldexp(a, 10 - e));
    if (m == 2048) m = 1024, e++;
    return s | (uint16_t)((e + 15) << 10) | (uint16_t)(m - 1024);
}

// The spacing of f16 values around |v| (2^-24 below the normal range).
inline double f16_ulp(double v) {
    const double a = std::fabs(v);
    return a < std::ldexp(1.0, -14) ? std::ldexp(1.0, -24) : std::ldexp(1.0, std::ilogb(a) - 10);
}

// f16 bits `got` against f64 values `want` saturated to ±65504: each within half an f16
// step of its value, plus `rel` of max(|value|, 1) (the f32 arithmetic before the rounding,
// whose terms may be larger than a small result). Prints the worst element.
inline bool close_f16(const std::string& what, const std::vector<uint16_t>& got, const std::vector<double>& want,
                      double rel) {
    double worst = 0;
    size_t at = 0;
    bool ok = got.size() == want.size();
    for (size_t i = 0; ok && i < got.size(); i++) {
        const double w = std::fmin(std::fmax(want[i], -65504.0), 65504.0);
        const double g = from_f16(got[i]);
        const double err = std::fabs(g - w) / (0.5 * f16_ulp(w) + rel * std::fmax(std::fabs(w), 1.0));
        if (std::isnan(err) || err > worst) {
            worst = std::isnan(err) ? INFINITY : err;
            at = i;
        }
    }
    ok = ok && worst <= 1.0;
    std::printf("%s %s: worst error %.3g of its allowance (half an f16 step + %.1g) at %zu\n",
                ok ? "ok  " : "FAIL", what.c_str(), worst, rel, at);
    if (!ok) check::failures()++;
    std::fflush(stdout);
    return ok;
}

}  // namespace codec
