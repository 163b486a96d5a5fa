// Emulated check of codec.cu's codec_attention, the codec transformer's sliding-window
// attention over each slot's KV ring, against an f64 reference, on exec.rs's launch (grid
// frames × heads, 128 threads), over passes of several rows (slots at different positions,
// a padding row, padding frames) that each continue the slots' streams:
//   for frame f of row r at absolute position p = pos_r + (f - first_r), query head h
//   (kv group g = h / (heads / kvh)): out[f][h] = softmax(q·K^T · scale) · V over
//   positions max(0, p - window + 1)..p, with q = RoPE(q_h, p); positions before the row's
//   first frame from the slot's ring (row position % ring, keys already rotated), the
//   row's own frames from qkv (keys rotated here);
//   the ring then holds each new position's rotated key and its value at row p % ring.
// The ring starts with random entries (the positions before a slot's first are "earlier
// calls"); later passes read what the kernel stored. Also: nothing else in the slot state
// changes, and a padding frame's output row keeps its poison. argv per case: heads kvh hd
// window ring theta wide R positions passes (positions "p0,p1,...": the slots' first
// positions; passes "slot:frames,...[/padding frames];...": codec_ref.hpp's make_pass).

#include "codec_ref.hpp"

using codec::POISON;

// The layer's ring at KV_OFF in each slot (32-float aligned, as state.rs allocates).
constexpr int KV_OFF = 32;

struct AttnCase {
    int heads, kvh, hd, window, ring, wide, R;
    float theta;
    std::string positions, passes;
};

static void run_case(const AttnCase& c) {
    codec::Book book = codec::parse_book(c.positions);
    check::Rng rng((uint64_t)c.heads * 71 + c.kvh * 11 + c.hd + c.ring + c.wide);
    const int qd = c.heads * c.hd, kvd = c.kvh * c.hd, ldq = qd + 2 * kvd, ldo = qd;
    const int rep = c.heads / c.kvh, half = c.hd / 2;
    const int stride = (KV_OFF + 2 * c.ring * kvd + 32 + 31) / 32 * 32;
    const float scale = 1.0f / std::sqrt((float)c.hd);
    // as build.rs computes them
    std::vector<float> inv_freq(half);
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0f / std::pow(c.theta, (float)(2 * i) / (float)c.hd);
    // the rings of earlier calls (random keys and values), the sentinel around them
    std::vector<float> state(book.pos.size() * stride, codec::SENTINEL);
    for (size_t slot = 0; slot < book.pos.size(); slot++) {
        const auto kv = check::f32_values(rng, (size_t)2 * c.ring * kvd, 1.5f);
        std::copy(kv.begin(), kv.end(), state.begin() + slot * stride + KV_OFF);
    }
    // element i of a head at x, rotated to position `pos` (the angle taken in f32, as the
    // kernel and build.rs's frequencies have it)
    auto rope = [&](const float* x, int i, int pos) {
        const int j = i < half ? i : i - half;
        const double a = (float)pos * inv_freq[j];
        return i < half ? x[i] * std::cos(a) - x[i + half] * std::sin(a) : x[i] * std::cos(a) + x[j] * std::sin(a);
    };
    int pass_no = 0;
    for (const std::string& spec : codec::split_passes(c.passes)) {
        const codec::Pass p = codec::make_pass(spec, book, c.R);
        const auto qkv = check::f32_values(rng, (size_t)p.frames * ldq, 2.0f);
        const std::vector<float> before = state;
        // the state afterwards: each new position's rotated key and value in the ring
        std::vector<double> want_state(before.begin(), before.end());
        std::vector<bool> new_entry(before.size(), false);
        std::vector<double> want((size_t)(p.frames + 1) * ldo, NAN);
        for (int f = 0; f < p.frames; f++) {
            const int r = p.frame_row(f);
            if (r < 0) continue;
            const int first = p.first(r), pos0 = p.pos(r), pos = pos0 + f - first;
            const size_t kc = (size_t)p.slot(r) * stride + KV_OFF, vc = kc + (size_t)c.ring * kvd;
            for (int g = 0; g < c.kvh; g++)
                for (int i = 0; i < c.hd; i++) {
                    const size_t at = (size_t)(pos % c.ring) * kvd + g * c.hd + i;
                    want_state[kc + at] = rope(&qkv[(size_t)f * ldq + qd + g * c.hd], i, pos);
                    want_state[vc + at] = qkv[(size_t)f * ldq + qd + kvd + g * c.hd + i];
                    new_entry[kc + at] = new_entry[vc + at] = true;
                }
            const int lo = std::max(0, pos - c.window + 1);
            for (int h = 0; h < c.heads; h++) {
                const int g = h / rep;
                std::vector<double> q(c.hd), sc;
                for (int i = 0; i < c.hd; i++) q[i] = rope(&qkv[(size_t)f * ldq + h * c.hd], i, pos);
                // key and value element i of position kp: the ring before the row's first
                // frame, else the row's own frame in qkv
                auto key = [&](int kp, int i) -> double {
                    if (kp < pos0) return before[kc + (size_t)(kp % c.ring) * kvd + g * c.hd + i];
                    return rope(&qkv[(size_t)(first + kp - pos0) * ldq + qd + g * c.hd], i, kp);
                };
                auto value = [&](int kp, int i) -> double {
                    if (kp < pos0) return before[vc + (size_t)(kp % c.ring) * kvd + g * c.hd + i];
                    return qkv[(size_t)(first + kp - pos0) * ldq + qd + kvd + g * c.hd + i];
                };
                double m = -INFINITY, sum = 0;
                for (int kp = lo; kp <= pos; kp++) {
                    double s = 0;
                    for (int i = 0; i < c.hd; i++) s += q[i] * key(kp, i);
                    sc.push_back(s * scale);
                    m = std::max(m, sc.back());
                }
                for (double& s : sc) sum += (s = std::exp(s - m));
                for (int i = 0; i < c.hd; i++) {
                    double acc = 0;
                    for (int kp = lo; kp <= pos; kp++) acc += sc[kp - lo] / sum * value(kp, i);
                    want[(size_t)f * ldo + h * c.hd + i] = acc;
                }
            }
        }
        std::vector<float> out((size_t)(p.frames + 1) * ldo, POISON);
        emu::launch(dim3(p.frames, c.heads), dim3(128), 0, 1, [&] {
            codec_attention(qkv.data(), ldq, out.data(), ldo, state.data(), stride, KV_OFF, c.ring, c.heads, c.kvh,
                            c.hd, c.window, scale, inv_freq.data(), p.meta.data(), c.R, c.wide);
        });
        const std::string name = "codec_attention " + std::to_string(c.heads) + " heads over " +
                                 std::to_string(c.kvh) + " of " + std::to_string(c.hd) + ", window " +
                                 std::to_string(c.window) + ", ring " + std::to_string(c.ring) +
                                 (c.wide ? ", wide" : "") + ", pass " + std::to_string(++pass_no) + " (" + spec + ")";
        // outputs of the rows' frames; the padding frames' and the row past them untouched
        std::vector<float> got;
        std::vector<double> ref;
        bool rest = true;
        for (size_t i = 0; i < out.size(); i++) {
            if (!std::isnan(want[i])) {
                got.push_back(out[i]);
                ref.push_back(want[i]);
            } else {
                rest &= out[i] == POISON;
            }
        }
        check::close(name, got, ref, 2e-5);
        check::expect(rest, name + ": padding frames and the row past the pass keep their poison");
        std::vector<float> got_kv;
        std::vector<double> ref_kv;
        bool others = true;
        for (size_t i = 0; i < state.size(); i++) {
            if (new_entry[i]) {
                got_kv.push_back(state[i]);
                ref_kv.push_back(want_state[i]);
            } else {
                others &= std::memcmp(&state[i], &before[i], 4) == 0;
            }
        }
        check::close(name + ": the new positions' keys and values in the ring", got_kv, ref_kv, 2e-6);
        check::expect(others, name + ": nothing else in the slot state changed");
        codec::advance(book, p);
    }
}

int main(int argc, char** argv) {
    const int per = 10;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: codec_attention (heads kvh hd window ring theta wide R positions passes)...");
    for (int i = 1; i < argc; i += per) {
        AttnCase c;
        c.heads = std::atoi(argv[i]);
        c.kvh = std::atoi(argv[i + 1]);
        c.hd = std::atoi(argv[i + 2]);
        c.window = std::atoi(argv[i + 3]);
        c.ring = std::atoi(argv[i + 4]);
        c.theta = (float)std::atof(argv[i + 5]);
        c.wide = std::atoi(argv[i + 6]);
        c.R = std::atoi(argv[i + 7]);
        c.positions = argv[i + 8];
        c.passes = argv[i + 9];
        run_case(c);
    }
    return check::failures() ? 1 : 0;
}
