// Emulated check of head_sample.cu: the fused head + sampler of a one-row code-predictor
// step against an f64 reference of the head's logits and against sampling.cu's sample_cp
// (the separate path, 512 threads) run on the same logits: the same code in the frame, the
// same next-step input rows (the embedding and QKV table rows of the code), bit for bit;
// greedy picks the reference's argmax; the counter is left at zero; a padding row (slot
// -1) writes nothing. argv per case: V H rpb smem step do_sample slot.

struct HsCase {
    int V, H, rpb, smem, step, sample, slot;
};

static const int D = 64, Q = 32, SLOTS = 2;

static void run_case(const HsCase& c) {
    check::Rng rng((uint64_t)c.V * 17 + c.step * 3 + c.sample);
    const auto w = check::bf16_values(rng, (size_t)c.V * c.H, 0.05f);
    const auto x = check::f32_values(rng, c.H, 1.0f);
    std::vector<float> g(c.H);
    for (auto& v : g) v = 1.0f + rng.sym(0.1f);
    const auto raw = check::bf16_values(rng, (size_t)15 * c.V * D, 1.0f);
    const auto qkv0 = check::f32_values(rng, (size_t)14 * c.V * Q, 1.0f);
    std::vector<unsigned> params((size_t)SLOTS * 16, 0);
    for (int s = 0; s < SLOTS; s++) {
        unsigned* p = &params[(size_t)s * 16];
        p[0] = 1234u + s;
        p[1] = 99u;
        p[7] = c.sample;
        p[8] = 50;
        p[9] = __float_as_uint(0.9f);
        p[10] = __float_as_uint(0.95f);
        p[11] = 5;
    }
    const std::vector<int> slots{c.slot};
    const float eps = 1e-6f;
    struct Out {
        std::vector<float> logits, next_x, qkv;
        std::vector<int> frames;
    };
    auto fresh = [&] {
        Out o;
        o.logits.assign(c.V, -9.f);
        o.next_x.assign(D, -7.f);
        o.qkv.assign(Q, -5.f);
        o.frames.assign(16, -3);
        return o;
    };
    unsigned arrived = 0;
    Out fused = fresh();
    emu::launch(dim3((c.V + c.rpb - 1) / c.rpb), dim3(SAMPLE_THREADS), c.smem, 1, [&] {
        head_sample_cp_m1((const bf16*)w.data(), c.V, c.H, c.rpb, g.data(), eps, x.data(), fused.logits.data(),
                          &arrived, slots.data(), params.data(), c.step, fused.frames.data(), nullptr,
                          (const bf16*)raw.data(), D, fused.next_x.data(), D, qkv0.data(), Q, fused.qkv.data(), Q);
    });
    const std::string name = "head_sample_cp_m1 " + std::to_string(c.V) + "x" + std::to_string(c.H) + " step " +
                             std::to_string(c.step) + (c.sample ? " sampled" : " greedy") + ", slot " +
                             std::to_string(c.slot);
    check::expect(arrived == 0, name + ": the counter is zero again");
    if (c.slot < 0) {
        const Out none = fresh();
        check::expect(fused.frames == none.frames && fused.next_x == none.next_x && fused.qkv == none.qkv,
                      name + ": a padding row writes no frame entry and no next-step rows");
        return;
    }
    // the logits against the reference
    double ss = 0;
    for (float v : x) ss += (double)v * v;
    const double inv = 1.0 / std::sqrt(ss / c.H + eps);
    std::vector<double> want(c.V, 0.0);
    int best = 0;
    for (int n = 0; n < c.V; n++) {
        for (int k = 0; k < c.H; k++) want[n] += check::from_bf16(w[(size_t)n * c.H + k]) * (x[k] * inv * g[k]);
        if (want[n] > want[best]) best = n;
    }
    check::close(name + ": logits", fused.logits, want, 1e-5);
    // the separate sampler on the same logits
    Out apart = fresh();
    apart.logits = fused.logits;
    emu::launch(dim3(1), dim3(512), 0, 1, [&] {
        sample_cp(apart.logits.data(), c.V, 1, slots.data(), params.data(), c.step, apart.frames.data(), nullptr,
                  (const bf16*)raw.data(), D, apart.next_x.data(), D, qkv0.data(), Q, apart.qkv.data(), Q);
    });
    const int code = fused.frames[c.step];
    check::expect(code >= 0 && code < c.V && code == apart.frames[c.step] && fused.frames == apart.frames,
                  name + ": code " + std::to_string(code) + ", sample_cp's " + std::to_string(apart.frames[c.step]));
    check::expect(std::memcmp(fused.next_x.data(), apart.next_x.data(), D * 4) == 0 &&
                      std::memcmp(fused.qkv.data(), apart.qkv.data(), Q * 4) == 0,
                  name + ": the next step's rows as sample_cp writes them");
    if (c.step < 15)
        check::expect(fused.next_x[0] == check::from_bf16(raw[((size_t)(c.step - 1) * c.V + code) * D]),
                      name + ": the next input is the code's embedding");
    if (!c.sample) check::expect(code == best, name + ": greedy takes the reference's argmax");
}

int main(int argc, char** argv) {
    if ((argc - 1) % 7 != 0 || argc == 1) emu::fail("usage: head_sample (V H rpb smem step do_sample slot)...");
    for (int i = 1; i < argc; i += 7) {
        HsCase c;
        int* f[] = {&c.V, &c.H, &c.rpb, &c.smem, &c.step, &c.sample, &c.slot};
        for (int j = 0; j < 7; j++) *f[j] = std::atoi(argv[i + j]);
        run_case(c);
    }
    return check::failures() ? 1 : 0;
}
