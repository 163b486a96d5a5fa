// Emulated check of attention.cu's short-cache attention, the code predictor's
// (fused_attention_short, _f32 and their _group twins), against an f64 reference: for each
// row of `tpr` new tokens at consecutive positions pos0.. of cache row `slot`,
//   * the new cache entries: k = RoPE(RMSNorm(k)), v as given (stored rounded to bf16 in a
//     bf16 cache);
//   * out[t][h] = softmax(q_h · K^T / sqrt(hd)) · V over positions 0..pos of the slot, with
//     q_h = RoPE(RMSNorm(q_h)) and K, V the caches as the kernel left them (so the new
//     positions hold the kernel's rounding of its new k and v);
// on the launches stack.rs makes (argv per case: kernel grid_x grid_y block heads kvh hd ldq
// ldo max_pos cache_rows tpr eps rope_theta xb rows, where rows is "slot:pos0,..." with slot
// -1 for a padding row). Also: no other cache entry is written; a padding row's outputs and
// the columns past the heads keep their poison; with xb, the split bf16 rows (hi, then lo T
// rows further, ld = ldo) are exactly the split of the outputs; a second launch on the same
// inputs gives the same bits.

#include "attention_ref.hpp"

struct ShortCase {
    std::string kernel;
    int grid_x, grid_y, block, heads, kvh, hd, ldq, ldo, max_pos, cache_rows, tpr;
    float eps;
    double theta;
    bool xb;
    std::vector<int> row_slot, row_pos;  // per row: cache row (-1: padding) and first position
    std::string rows_spec;
};

// The outputs and caches of one launch.
template <typename KV>
struct Result {
    std::vector<float> out;
    std::vector<KV> k, v;
    std::vector<uint16_t> xb;
};

template <typename KV>
static void run_case(const ShortCase& c, uint64_t seed) {
    const int rows = (int)c.row_slot.size(), T = rows * c.tpr;
    const AttnDims d{c.heads, c.kvh, c.hd, c.max_pos};
    const int qd = d.qd(), kvd = d.kvd();
    check::Rng rng(seed);
    const auto qkv = check::f32_values(rng, (size_t)T * c.ldq, 2.0f);
    const NormRope nr = norm_rope(rng, c.hd, c.theta);
    const std::vector<float> &qn = nr.qn, &kn = nr.kn, &inv_freq = nr.inv_freq;
    const size_t cache_len = (size_t)c.cache_rows * c.max_pos * kvd;
    const auto kc = filled_cache<KV>(rng, cache_len), vc = filled_cache<KV>(rng, cache_len);
    // token t = r * tpr + i: row r's slot (every token of the row, as the code predictor's
    // row maps give it) at position pos0 + i
    std::vector<int> slots(T), positions(T);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < c.tpr; i++) {
            slots[r * c.tpr + i] = c.row_slot[r];
            positions[r * c.tpr + i] = c.row_pos[r] + i;
        }
    const float poison = -12345.0f;
    const uint16_t xb_poison = 0xBEEF;
    const bool group = c.kernel.find("_group") != std::string::npos;
    if (rows != c.grid_y || c.grid_x != (group ? c.kvh : c.heads))
        emu::fail("the grid is not (heads, rows), or (kv heads, rows) for a _group kernel");
    auto launch = [&]() {
        Result<KV> res{std::vector<float>((size_t)T * c.ldo, poison), kc, vc,
                       std::vector<uint16_t>(c.xb ? (size_t)2 * T * c.ldo : 0, xb_poison)};
        uint16_t* xb = c.xb ? res.xb.data() : nullptr;
        emu::launch(dim3(c.grid_x, c.grid_y), dim3(c.block), 0, 1, [&] {
            const auto args = [&](auto kernel) {
                kernel(qkv.data(), c.ldq, rows, c.tpr, slots.data(), positions.data(), qn.data(),
                       kn.data(), c.eps, inv_freq.data(), c.heads, c.kvh, c.hd, res.k.data(),
                       res.v.data(), c.max_pos, res.out.data(), c.ldo, xb, c.ldo);
            };
            if constexpr (sizeof(KV) == 4) {
                if (c.kernel == "fused_attention_short_f32") args(fused_attention_short_f32);
                else if (c.kernel == "fused_attention_short_group_f32") args(fused_attention_short_group_f32);
                else emu::fail("not a short attention kernel over f32 caches");
            } else {
                if (c.kernel == "fused_attention_short") args(fused_attention_short);
                else if (c.kernel == "fused_attention_short_group") args(fused_attention_short_group);
                else emu::fail("not a short attention kernel over bf16 caches");
            }
        });
        return res;
    };
    const Result<KV> got = launch();

    const std::string name = c.kernel + " " + std::to_string(c.heads) + "x" + std::to_string(c.hd) +
                             " over " + std::to_string(c.kvh) + ", tpr " + std::to_string(c.tpr) +
                             ", rows (slot:pos0) " + c.rows_spec + (c.xb ? ", xb" : "");
    check::expect(others_kept(got.k, kc, d, slots, positions) && others_kept(got.v, vc, d, slots, positions),
                  name + ": no cache entry but the new positions' is written");
    std::vector<float> kv_got, out_got;
    std::vector<double> kv_want, out_want;
    bool untouched = true;
    for (int t = 0; t < T; t++) {
        const float* row = qkv.data() + (size_t)t * c.ldq;
        const int slot = slots[t], pos = positions[t];
        for (int col = 0; col < c.ldo; col++) {
            const float o = got.out[(size_t)t * c.ldo + col];
            if (slot < 0 || col >= qd) untouched &= o == poison;
            else out_got.push_back(o);
        }
        if (slot < 0) continue;
        new_kv_entries(row, kn, c.eps, inv_freq, d, slot, pos, got.k, got.v, kv_got, kv_want);
        for (int h = 0; h < c.heads; h++) {
            const auto q = norm_rope_ref(row + h * c.hd, qn, c.eps, inv_freq, pos, c.hd);
            const auto o = attention_ref(q, d, h / (c.heads / c.kvh), slot, pos, got.k, got.v);
            out_want.insert(out_want.end(), o.begin(), o.end());
        }
    }
    const bool f32 = sizeof(KV) == 4;
    // bf16 caches: the new k and v are stored rounded to bf16 (2^-9 relative)
    check::close(name + ": new cache entries", kv_got, kv_want, f32 ? 2e-5 : 8e-3);
    // the reference reads the caches the kernel left, so it attends over the very values
    // the kernel did, bf16 or not: only f32 arithmetic against f64 remains
    check::close(name + ": outputs", out_got, out_want, 2e-5);
    check::expect(untouched, name + ": padding rows and columns past the heads keep their poison");
    if (c.xb)
        check::expect(xb_is_split(got.xb, got.out, T, c.ldo, qd, xb_poison, [](int) { return false; }),
                      name + ": xb holds the outputs split as bf16 hi + lo rows");
    const Result<KV> again = launch();
    check::expect(same_bits(got.out, again.out) && same_bits(got.k, again.k) &&
                      same_bits(got.v, again.v) && same_bits(got.xb, again.xb),
                  name + ": a second launch gives the same bits");
}

// "slot:pos0,slot:pos0,..." into the rows' slots and first positions.
static void parse_rows(ShortCase& c) {
    for (const SlotSpan& r : parse_slot_spans(c.rows_spec)) {
        if (r.p1 != r.p0) emu::fail("rows: expected slot:pos0,...");
        c.row_slot.push_back(r.slot);
        c.row_pos.push_back(r.p0);
    }
}


int main(int argc, char** argv) {
    const int per = 16;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: attention_short (kernel grid_x grid_y block heads kvh hd ldq ldo max_pos "
                  "cache_rows tpr eps rope_theta xb rows)...");
    for (int i = 1; i < argc; i += per) {
        ShortCase c;
        c.kernel = argv[i];
        int* f[] = {&c.grid_x, &c.grid_y, &c.block, &c.heads,      &c.kvh, &c.hd,
                    &c.ldq,    &c.ldo,    &c.max_pos, &c.cache_rows, &c.tpr};
        for (int j = 0; j < 11; j++) *f[j] = std::atoi(argv[i + 1 + j]);
        c.eps = (float)std::atof(argv[i + 12]);
        c.theta = std::atof(argv[i + 13]);
        c.xb = std::atoi(argv[i + 14]) != 0;
        c.rows_spec = argv[i + 15];
        parse_rows(c);
        const uint64_t seed = (uint64_t)i * 7919 + c.heads * 31 + c.tpr;
        if (f32_kernel(c.kernel))
            run_case<float>(c, seed);
        else
            run_case<uint16_t>(c, seed);
    }
    return check::failures() ? 1 : 0;
}
