// Emulated check of attention.cu's talker attention over its long cache outside
// attention_row.cu, against an f64 reference (attention_ref.hpp):
//   * the split attention of prefills (stack.rs `Attention::Split`): qk_norm_rope_kv (or
//     _f32), one block per token, rewrites each token's q in place as RoPE(RMSNorm(q)) and
//     stores k = RoPE(RMSNorm(k)) and v in the cache at (slot, pos); then decode_attention
//     (or _f32; or the default row_attention_split, chained the same way) gives out[t][h] =
//     softmax(q_h · K^T / sqrt(hd)) · V over positions 0..pos of the token's slot. The
//     tokens are runs of consecutive positions p0..p1 of a slot whose positions 0..p0-1 are
//     already cached (a prefill after a prefix-cache hit), so each token must see the run's
//     earlier tokens and none of its later ones, which the first launch has also written;
//   * fused_attention (or _f32), the talker step's attention when row_attention is not
//     taken: rows of tpr (1..4) new tokens at consecutive positions, QK-norm + RoPE, k and
//     v stored in the cache, attention over positions 0..pos.
// On the launches stack.rs makes (argv per case: qk_kernel qk_grid attn_kernel grid_x grid_y
// block heads kvh hd ldq ldo max_pos cache_rows tpr eps rope_theta xb tokens; qk_kernel "-"
// for fused_attention; tokens "slot:p0-p1,..." with slot -1 for padding, one run per row of
// tpr tokens for fused_attention). Also: no cache entry but the new positions' is written,
// nor a guard row just before the cache (where slot -1 would write); the qkv rows keep
// their k, v and pad columns (padding tokens: the whole row; fused_attention: everything);
// padding tokens' outputs and the columns past the heads keep their poison; with xb, the
// split bf16 rows are exactly the split of the outputs (row_attention_split writes none
// for padding tokens); a second run on the same inputs gives the same bits.

#include "attention_ref.hpp"

struct PrefillCase {
    std::string qk_kernel, attn_kernel;
    int qk_grid, grid_x, grid_y, block, heads, kvh, hd, ldq, ldo, max_pos, cache_rows, tpr;
    float eps;
    double theta;
    bool xb;
    std::vector<int> slots, positions;  // per token
    std::string tokens_spec;
    bool fused() const { return qk_kernel == "-"; }
};

// What one run leaves: the qkv rows (rewritten by qk_norm_rope_kv), outputs, caches (guard
// row first) and split rows.
template <typename KV>
struct PrefillResult {
    std::vector<float> qkv, out;
    std::vector<KV> k, v;
    std::vector<uint16_t> xb;
};

template <typename KV>
static void run_case(const PrefillCase& c, uint64_t seed) {
    const int T = (int)c.slots.size();
    const AttnDims d{c.heads, c.kvh, c.hd, c.max_pos};
    const int qd = d.qd(), kvd = d.kvd();
    const size_t row_elems = (size_t)c.max_pos * kvd;
    const bool by_row = c.attn_kernel.find("row_attention_split") == 0;
    // the grids stack.rs computes
    if (c.block != 128 || c.grid_x != c.heads) emu::fail("attention: not (heads, ..) x 128 threads");
    if (c.fused() ? c.grid_y * c.tpr != T : (c.qk_grid != T || c.grid_y != T))
        emu::fail("not stack.rs's grids: (T) then (heads, T), or (heads, rows) for fused_attention");
    for (int t = 0; t < T; t++) {
        if (c.slots[t] >= c.cache_rows || c.positions[t] < 0 || c.positions[t] >= c.max_pos)
            emu::fail("a token outside the cache");
        // one token per cache entry; fused_attention: one row per slot (a row reads the
        // cached positions another row's block would be writing)
        for (int u = 0; u < t && c.slots[t] >= 0; u++)
            if (c.slots[u] == c.slots[t] &&
                (c.positions[u] == c.positions[t] || (c.fused() && u / c.tpr != t / c.tpr)))
                emu::fail("two tokens of one cache entry, or two fused rows of one slot");
    }
    check::Rng rng(seed);
    const auto qkv = check::f32_values(rng, (size_t)T * c.ldq, 2.0f);
    const NormRope nr = norm_rope(rng, c.hd, c.theta);
    const std::vector<float> &qn = nr.qn, &kn = nr.kn, &inv_freq = nr.inv_freq;
    // cache row -1 (a guard) then rows 0..cache_rows: every position holds a value, as a
    // cached prefix (or an earlier request's leftovers past it) would
    const size_t cache_len = (size_t)(c.cache_rows + 1) * row_elems;
    const auto kc = filled_cache<KV>(rng, cache_len), vc = filled_cache<KV>(rng, cache_len);
    const float poison = -12345.0f;
    const uint16_t xb_poison = 0xBEEF;
    auto run = [&]() {
        PrefillResult<KV> res{qkv, std::vector<float>((size_t)T * c.ldo, poison), kc, vc,
                              std::vector<uint16_t>(c.xb ? (size_t)2 * T * c.ldo : 0, xb_poison)};
        uint16_t* xb = c.xb ? res.xb.data() : nullptr;
        KV* k = res.k.data() + row_elems;
        KV* v = res.v.data() + row_elems;
        float* q = res.qkv.data();
        if (!c.fused())
            emu::launch(dim3(c.qk_grid), dim3(c.block), 0, 1, [&] {
                const auto qk = [&](auto kernel) {
                    kernel(q, c.ldq, T, c.slots.data(), c.positions.data(), qn.data(), kn.data(),
                           c.eps, inv_freq.data(), c.heads, c.kvh, c.hd, k, v, c.max_pos);
                };
                if constexpr (sizeof(KV) == 4) {
                    if (c.qk_kernel == "qk_norm_rope_kv_f32") qk(qk_norm_rope_kv_f32);
                    else emu::fail("not qk_norm_rope_kv_f32");
                } else {
                    if (c.qk_kernel == "qk_norm_rope_kv") qk(qk_norm_rope_kv);
                    else emu::fail("not qk_norm_rope_kv");
                }
            });
        emu::launch(dim3(c.grid_x, c.grid_y), dim3(c.block), 0, 1, [&] {
            // stack.rs's argument orders (Split: window 0; Fused)
            const auto split = [&](auto kernel) {
                kernel(q, c.ldq, T, c.slots.data(), c.positions.data(), k, v, c.max_pos, c.heads,
                       c.kvh, c.hd, 0, res.out.data(), c.ldo, xb, c.ldo);
            };
            const auto fused = [&](auto kernel) {
                kernel(q, c.ldq, c.grid_y, c.tpr, c.slots.data(), c.positions.data(), qn.data(),
                       kn.data(), c.eps, inv_freq.data(), c.heads, c.kvh, c.hd, k, v, c.max_pos,
                       res.out.data(), c.ldo, xb, c.ldo);
            };
            const std::string& n = c.attn_kernel;
            if constexpr (sizeof(KV) == 4) {
                if (n == "decode_attention_f32") split(decode_attention_f32);
                else if (n == "row_attention_split_f32") split(row_attention_split_f32);
                else if (n == "fused_attention_f32") fused(fused_attention_f32);
                else emu::fail("not an attention kernel over f32 caches");
            } else {
                if (n == "decode_attention") split(decode_attention);
                else if (n == "row_attention_split") split(row_attention_split);
                else if (n == "fused_attention") fused(fused_attention);
                else emu::fail("not an attention kernel over bf16 caches");
            }
        });
        return res;
    };
    const PrefillResult<KV> got = run();

    const std::string name = (c.fused() ? "" : c.qk_kernel + " + ") + c.attn_kernel + " " +
                             std::to_string(c.heads) + "x" + std::to_string(c.hd) + " over " +
                             std::to_string(c.kvh) + ", max_pos " + std::to_string(c.max_pos) +
                             (c.fused() ? ", tpr " + std::to_string(c.tpr) : "") +
                             ", tokens (slot:p0-p1) " +
                             (c.tokens_spec.size() <= 80 ? c.tokens_spec
                                                         : c.tokens_spec.substr(0, 60) + "... (" +
                                                               std::to_string(T) + " tokens)") +
                             (c.xb ? ", xb" : "");
    // the new entries as the guarded caches hold them (row s at s + 1)
    std::vector<int> gslots(T), new_positions = c.positions;
    for (int t = 0; t < T; t++) gslots[t] = c.slots[t] < 0 ? -1 : c.slots[t] + 1;
    check::expect(others_kept_marked(got.k, kc, d, gslots, new_positions) &&
                      others_kept_marked(got.v, vc, d, gslots, new_positions),
                  name + ": no cache entry but the new tokens' is written (nor the guard row)");
    std::vector<float> kv_got, q_got, out_got;
    std::vector<double> kv_want, q_want, out_want;
    bool untouched = true, kept = true;
    for (int t = 0; t < T; t++) {
        const float* row = qkv.data() + (size_t)t * c.ldq;
        const float* row_got = got.qkv.data() + (size_t)t * c.ldq;
        const int slot = c.slots[t], pos = c.positions[t];
        // a fused row is skipped as a whole when its first token's slot is negative
        const bool padding = c.fused() ? c.slots[t / c.tpr * c.tpr] < 0 : slot < 0;
        for (int col = 0; col < c.ldo; col++) {
            const float o = got.out[(size_t)t * c.ldo + col];
            if (padding || col >= qd) untouched &= o == poison;
            else out_got.push_back(o);
        }
        // q columns rewritten by qk_norm_rope_kv only (not for padding tokens), the rest kept
        const int from = c.fused() || padding ? 0 : qd;
        kept &= std::memcmp(row + from, row_got + from, (c.ldq - from) * sizeof(float)) == 0;
        if (padding) continue;
        new_kv_entries(row, kn, c.eps, inv_freq, d, slot + 1, pos, got.k, got.v, kv_got, kv_want);
        for (int h = 0; h < c.heads; h++) {
            const auto q = norm_rope_ref(row + h * c.hd, qn, c.eps, inv_freq, pos, c.hd);
            if (!c.fused()) {
                q_got.insert(q_got.end(), row_got + h * c.hd, row_got + (h + 1) * c.hd);
                q_want.insert(q_want.end(), q.begin(), q.end());
            }
            const auto o = attention_ref_from(q, d, h / (c.heads / c.kvh), slot + 1, 0, pos, got.k, got.v);
            out_want.insert(out_want.end(), o.begin(), o.end());
        }
    }
    const bool f32 = sizeof(KV) == 4;
    check::expect(kept, name + (c.fused() ? ": the qkv rows are not written"
                                          : ": only the q columns of real tokens are rewritten"));
    if (!c.fused()) check::close(name + ": q rewritten as RoPE(RMSNorm(q))", q_got, q_want, 2e-5);
    // bf16 caches: the new k and v are stored rounded to bf16 (2^-9 relative)
    check::close(name + ": new cache entries", kv_got, kv_want, f32 ? 2e-5 : 8e-3);
    // the reference reads the caches the kernels left (the new tokens' entries included), so
    // it attends over the very values the kernel did, bf16 or not: only f32 arithmetic
    // against f64 remains, and any token that saw a later token of its run (or missed an
    // earlier one) is far off
    check::close(name + ": outputs", out_got, out_want, 2e-5);
    check::expect(untouched, name + ": padding tokens' outputs and columns past the heads keep their poison");
    if (c.xb)
        check::expect(xb_is_split(got.xb, got.out, T, c.ldo, qd, xb_poison,
                                  [&](int t) { return by_row && c.slots[t] < 0; }),
                      name + ": xb holds the outputs split as bf16 hi + lo rows");
    const PrefillResult<KV> again = run();
    check::expect(same_bits(got.out, again.out) && same_bits(got.k, again.k) &&
                      same_bits(got.v, again.v) && same_bits(got.xb, again.xb) &&
                      same_bits(got.qkv, again.qkv),
                  name + ": a second run gives the same bits");
}

// "slot:p0-p1,..." into the tokens' slots and positions (fused: each run one row of tpr).
static void parse_tokens(PrefillCase& c) {
    const auto spans = parse_slot_spans(c.tokens_spec);
    for (const SlotSpan& s : spans)
        if (c.fused() && s.p1 + 1 - s.p0 != c.tpr) emu::fail("a fused row is not tpr tokens");
    span_tokens(spans, c.slots, c.positions);
}

int main(int argc, char** argv) {
    const int per = 18;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: attention_prefill (qk_kernel qk_grid attn_kernel grid_x grid_y block heads "
                  "kvh hd ldq ldo max_pos cache_rows tpr eps rope_theta xb tokens)...");
    for (int i = 1; i < argc; i += per) {
        PrefillCase c;
        c.qk_kernel = argv[i];
        c.qk_grid = std::atoi(argv[i + 1]);
        c.attn_kernel = argv[i + 2];
        int* f[] = {&c.grid_x, &c.grid_y, &c.block, &c.heads,      &c.kvh, &c.hd,
                    &c.ldq,    &c.ldo,    &c.max_pos, &c.cache_rows, &c.tpr};
        for (int j = 0; j < 11; j++) *f[j] = std::atoi(argv[i + 3 + j]);
        c.eps = (float)std::atof(argv[i + 14]);
        c.theta = std::atof(argv[i + 15]);
        c.xb = std::atoi(argv[i + 16]) != 0;
        c.tokens_spec = argv[i + 17];
        parse_tokens(c);
        const uint64_t seed = (uint64_t)i * 7919 + c.heads * 31 + c.slots.size();
        if (f32_kernel(c.attn_kernel))
            run_case<float>(c, seed);
        else
            run_case<uint16_t>(c, seed);
    }
    return check::failures() ? 1 : 0;
}
