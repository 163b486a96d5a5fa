// Emulated check of attention_row.cu, the talker's attention over its long cache, against an
// f64 reference:
//   * row_attention, row_attention_f32 (small talker steps: one new token per row, at
//     position pos of cache row `slot`): the new cache entries k = RoPE(RMSNorm(k)) and v
//     (rounded to bf16 in a bf16 cache), and out[r][h] = softmax(q_h · K^T / sqrt(hd)) · V
//     over positions 0..pos of the slot, q_h = RoPE(RMSNorm(q_h)), K and V the caches as the
//     kernel left them (position pos: the kernel's rounding of its new k and v);
//   * row_attention_split, row_attention_split_f32 (the split attention: q already normed and
//     rotated in qkv, every token's K and V already in the cache): out[t][h] over positions
//     lo..pos of the token's slot, lo = window > 0 ? max(0, pos + 1 - window) : 0; nothing
//     written to the cache;
// on the launches stack.rs makes (argv per case: kernel grid_x grid_y block heads kvh hd ldq
// ldo max_pos cache_rows window eps rope_theta xb tokens, where tokens is "slot:pos,..." with
// slot -1 for a padding row, and "slot:p0-p1" stands for the tokens at positions p0..p1 of
// one slot, a prefill's). Also: no other cache entry is written, nor anything just before
// the cache (a guard row where a padding row's slot -1 would write); a padding row's outputs
// and split rows and the columns past the heads keep their poison; with xb, the split bf16
// rows (hi, then lo T rows further, ld = ldo) are exactly the split of the outputs; a second
// launch on the same inputs gives the same bits.

#include "attention_ref.hpp"

struct RowCase {
    std::string kernel;
    int grid_x, grid_y, block, heads, kvh, hd, ldq, ldo, max_pos, cache_rows, window;
    float eps;
    double theta;
    bool xb;
    std::vector<int> slots, positions;  // per token: cache row (-1: padding) and position
    std::string tokens_spec;
};

// The outputs and caches of one launch; the caches have a guard row in front (cache row
// -1, row 0 here), so cache row s of the kernel is row s + 1 here.
template <typename KV>
struct RowResult {
    std::vector<float> out;
    std::vector<KV> k, v;
    std::vector<uint16_t> xb;
};

template <typename KV>
static void run_case(const RowCase& c, uint64_t seed) {
    const int T = (int)c.slots.size();
    const bool split = c.kernel.find("_split") != std::string::npos;
    const AttnDims d{c.heads, c.kvh, c.hd, c.max_pos};
    const int qd = d.qd(), kvd = d.kvd();
    const size_t row_elems = (size_t)c.max_pos * kvd;
    if (c.grid_x != c.heads || c.grid_y != T || c.block != 128)
        emu::fail("the grid is not (heads, tokens) with 128 threads");
    if (!split && c.window != 0) emu::fail("row_attention has no window");
    for (int t = 0; t < T; t++) {
        if (c.slots[t] >= c.cache_rows || c.positions[t] < 0 || c.positions[t] >= c.max_pos)
            emu::fail("a token outside the cache");
        // row_attention's rows read earlier positions another row's block may be writing
        for (int u = 0; u < t && !split; u++)
            if (c.slots[t] >= 0 && c.slots[u] == c.slots[t])
                emu::fail("row_attention takes one row per slot");
    }
    check::Rng rng(seed);
    // split: q as qk_norm_rope_kv left it (normed, rotated); else the QKV projection's rows
    const auto qkv = check::f32_values(rng, (size_t)T * c.ldq, 2.0f);
    const NormRope nr = norm_rope(rng, c.hd, c.theta);
    const std::vector<float> &qn = nr.qn, &kn = nr.kn, &inv_freq = nr.inv_freq;
    const size_t cache_len = (size_t)(c.cache_rows + 1) * row_elems;
    const auto kc = filled_cache<KV>(rng, cache_len), vc = filled_cache<KV>(rng, cache_len);
    const float poison = -12345.0f;
    const uint16_t xb_poison = 0xBEEF;
    auto launch = [&]() {
        RowResult<KV> res{std::vector<float>((size_t)T * c.ldo, poison), kc, vc,
                          std::vector<uint16_t>(c.xb ? (size_t)2 * T * c.ldo : 0, xb_poison)};
        uint16_t* xb = c.xb ? res.xb.data() : nullptr;
        KV* k = res.k.data() + row_elems;
        KV* v = res.v.data() + row_elems;
        emu::launch(dim3(c.grid_x, c.grid_y), dim3(c.block), 0, 1, [&] {
            // stack.rs's argument orders (Attention::Fused with tokens_per_row 1, and Split)
            const auto fused = [&](auto kernel) {
                kernel(qkv.data(), c.ldq, T, 1, c.slots.data(), c.positions.data(), qn.data(),
                       kn.data(), c.eps, inv_freq.data(), c.heads, c.kvh, c.hd, k, v, c.max_pos,
                       res.out.data(), c.ldo, xb, c.ldo);
            };
            const auto by_cache = [&](auto kernel) {
                kernel(qkv.data(), c.ldq, T, c.slots.data(), c.positions.data(), k, v, c.max_pos,
                       c.heads, c.kvh, c.hd, c.window, res.out.data(), c.ldo, xb, c.ldo);
            };
            if constexpr (sizeof(KV) == 4) {
                if (c.kernel == "row_attention_f32") fused(row_attention_f32);
                else if (c.kernel == "row_attention_split_f32") by_cache(row_attention_split_f32);
                else emu::fail("not a row attention kernel over f32 caches");
            } else {
                if (c.kernel == "row_attention") fused(row_attention);
                else if (c.kernel == "row_attention_split") by_cache(row_attention_split);
                else emu::fail("not a row attention kernel over bf16 caches");
            }
        });
        return res;
    };
    const RowResult<KV> got = launch();

    const std::string name = c.kernel + " " + std::to_string(c.heads) + "x" + std::to_string(c.hd) +
                             " over " + std::to_string(c.kvh) + ", max_pos " + std::to_string(c.max_pos) +
                             (c.window ? ", window " + std::to_string(c.window) : "") +
                             ", tokens (slot:pos) " + c.tokens_spec + (c.xb ? ", xb" : "");
    // the cache rows as others_kept sees them (guard row 0): a token's new entry, if any
    std::vector<int> new_slots, new_positions;
    if (!split)
        for (int t = 0; t < T; t++)
            if (c.slots[t] >= 0) {
                new_slots.push_back(c.slots[t] + 1);
                new_positions.push_back(c.positions[t]);
            }
    check::expect(others_kept(got.k, kc, d, new_slots, new_positions) &&
                      others_kept(got.v, vc, d, new_slots, new_positions),
                  name + (split ? ": no cache entry is written"
                                : ": no cache entry but the new positions' is written"));
    std::vector<float> kv_got, out_got;
    std::vector<double> kv_want, out_want;
    bool untouched = true;
    for (int t = 0; t < T; t++) {
        const float* row = qkv.data() + (size_t)t * c.ldq;
        const int slot = c.slots[t], pos = c.positions[t];
        for (int col = 0; col < c.ldo; col++) {
            const float o = got.out[(size_t)t * c.ldo + col];
            if (slot < 0 || col >= qd) untouched &= o == poison;
            else out_got.push_back(o);
        }
        if (slot < 0) continue;
        const int gs = slot + 1;  // with the guard row
        if (!split) new_kv_entries(row, kn, c.eps, inv_freq, d, gs, pos, got.k, got.v, kv_got, kv_want);
        const int lo = split && c.window > 0 ? std::max(0, pos + 1 - c.window) : 0;
        for (int h = 0; h < c.heads; h++) {
            const auto q = split ? std::vector<double>(row + h * c.hd, row + (h + 1) * c.hd)
                                 : norm_rope_ref(row + h * c.hd, qn, c.eps, inv_freq, pos, c.hd);
            const auto o = attention_ref_from(q, d, h / (c.heads / c.kvh), gs, lo, pos, got.k, got.v);
            out_want.insert(out_want.end(), o.begin(), o.end());
        }
    }
    const bool f32 = sizeof(KV) == 4;
    // bf16 caches: the new k and v are stored rounded to bf16 (2^-9 relative)
    if (!split) check::close(name + ": new cache entries", kv_got, kv_want, f32 ? 2e-5 : 8e-3);
    // the reference reads the caches the kernel left, so it attends over the very values the
    // kernel did, bf16 or not: only f32 arithmetic against f64 remains
    check::close(name + ": outputs", out_got, out_want, 2e-5);
    check::expect(untouched, name + ": padding rows and columns past the heads keep their poison");
    if (c.xb)
        check::expect(xb_is_split(got.xb, got.out, T, c.ldo, qd, xb_poison,
                                  [&](int t) { return c.slots[t] < 0; }),
                      name + ": xb holds the outputs split as bf16 hi + lo rows (padding rows: nothing)");
    const RowResult<KV> again = launch();
    check::expect(same_bits(got.out, again.out) && same_bits(got.k, again.k) &&
                      same_bits(got.v, again.v) && same_bits(got.xb, again.xb),
                  name + ": a second launch gives the same bits");
}

// "slot:pos,slot:p0-p1,..." into the tokens' slots and positions.
static void parse_tokens(RowCase& c) { span_tokens(parse_slot_spans(c.tokens_spec), c.slots, c.positions); }

int main(int argc, char** argv) {
    const int per = 16;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: attention_row (kernel grid_x grid_y block heads kvh hd ldq ldo max_pos "
                  "cache_rows window eps rope_theta xb tokens)...");
    for (int i = 1; i < argc; i += per) {
        RowCase c;
        c.kernel = argv[i];
        int* f[] = {&c.grid_x, &c.grid_y,  &c.block,      &c.heads, &c.kvh,
                    &c.hd,     &c.ldq,     &c.ldo,        &c.max_pos, &c.cache_rows, &c.window};
        for (int j = 0; j < 11; j++) *f[j] = std::atoi(argv[i + 1 + j]);
        c.eps = (float)std::atof(argv[i + 12]);
        c.theta = std::atof(argv[i + 13]);
        c.xb = std::atoi(argv[i + 14]) != 0;
        c.tokens_spec = argv[i + 15];
        parse_tokens(c);
        const uint64_t seed = (uint64_t)i * 7919 + c.heads * 31 + c.slots.size();
        if (f32_kernel(c.kernel))
            run_case<float>(c, seed);
        else
            run_case<uint16_t>(c, seed);
    }
    return check::failures() ? 1 : 0;
}
