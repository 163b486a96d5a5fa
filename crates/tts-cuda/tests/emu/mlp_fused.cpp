// Emulated check of mlp_fused.cu (both kernels) against an f64 reference of
//   x += down(silu(gate(norm x)) · up(norm x)),
// on the launch plans `linear::fused_mlp_plan` gives (argv per case: kernel H I ipb smem
// prefetch).
// Also: the fixed-point sums and the arrival count are left at zero, and a second launch
// on the same input gives the same bits.

static std::vector<double> mlp_reference(const std::vector<float>& x, const std::vector<float>& g,
                                         const std::vector<uint16_t>& wgu,
                                         const std::vector<uint16_t>& wd, int H, int I, float eps) {
    double ss = 0;
    for (float v : x) ss += (double)v * v;
    const double inv = 1.0 / std::sqrt(ss / H + eps);
    std::vector<double> xn(H), act(I), out(H);
    for (int k = 0; k < H; k++) xn[k] = (double)x[k] * inv * g[k];
    for (int j = 0; j < I; j++) {
        double gate = 0, up = 0;
        for (int k = 0; k < H; k++) {
            gate += xn[k] * check::from_bf16(wgu[(size_t)(2 * j) * H + k]);
            up += xn[k] * check::from_bf16(wgu[(size_t)(2 * j + 1) * H + k]);
        }
        act[j] = gate / (1.0 + std::exp(-gate)) * up;
    }
    for (int n = 0; n < H; n++) {
        double s = x[n];
        for (int j = 0; j < I; j++) s += check::from_bf16(wd[(size_t)n * I + j]) * act[j];
        out[n] = s;
    }
    return out;
}

static void run_case(const std::string& kernel, int H, int I, int ipb, int smem, int prefetch) {
    check::Rng rng((uint64_t)H * 7919 + I + (kernel != "mlp_fused_m1"));
    const auto wgu = check::bf16_values(rng, (size_t)2 * I * H, 0.05f);
    const auto wd = check::bf16_values(rng, (size_t)H * I, 0.03f);
    const auto x0 = check::f32_values(rng, H, 1.0f);
    std::vector<float> g(H);
    for (auto& v : g) v = 1.0f + rng.sym(0.1f);
    const float eps = 1e-6f;
    const auto want = mlp_reference(x0, g, wgu, wd, H, I, eps);

    std::vector<unsigned long long> sums(H, 0);
    unsigned arrived = 0;
    auto launch = [&](std::vector<float>& x) {
        const auto* wg = (const bf16*)wgu.data();
        const auto* w2 = (const bf16*)wd.data();
        emu::launch(dim3(I / ipb), dim3(256), smem, 1, [&] {
            if (kernel == "mlp_fused_m1")
                mlp_fused_m1(wg, w2, H, I, ipb, g.data(), eps, x.data(), sums.data(), &arrived, 0);
            else if (kernel == "mlp_stream_m1_s4")
                mlp_stream_m1_s4(wg, w2, H, I, ipb, g.data(), eps, x.data(), sums.data(), &arrived, 1,
                                 prefetch);
            else if (kernel == "mlp_stream_m1_s8")
                mlp_stream_m1_s8(wg, w2, H, I, ipb, g.data(), eps, x.data(), sums.data(), &arrived, 1,
                                 prefetch);
            else
                emu::fail("unknown kernel");
        });
    };
    std::vector<float> x = x0, again = x0;
    launch(x);
    const std::string name = kernel + " " + std::to_string(H) + "x" + std::to_string(I) + " (" +
                             std::to_string(I / ipb) + " blocks of " + std::to_string(ipb) +
                             (prefetch ? ", gate/up asked into L2)" : ")");
    check::close(name, x, want, 2e-5);
    check::sums_reset(name, sums, arrived);
    launch(again);
    check::expect(std::memcmp(x.data(), again.data(), x.size() * 4) == 0,
                  name + ": a second launch gives the same bits");
}

int main(int argc, char** argv) {
    if ((argc - 1) % 6 != 0 || argc == 1) emu::fail("usage: mlp_fused (kernel H I ipb smem prefetch)...");
    for (int i = 1; i < argc; i += 6)
        run_case(argv[i], std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), std::atoi(argv[i + 3]),
                 std::atoi(argv[i + 4]), std::atoi(argv[i + 5]));
    return check::failures() ? 1 : 0;
}
