// The emulator's own checks: block barriers with reductions, warp exchanges, threads that
// exit early, and clusters (barrier and distributed shared memory), on small kernels whose
// results are known.

// Block-wide: a sum through shared memory and __syncthreads_count, after a quarter of the
// threads have returned.
void k_block(int* out) {
    __shared__ int s_sum;
    if (threadIdx.x == 0) s_sum = 0;
    __syncthreads();
    if (threadIdx.x % 4 == 3) return;  // exited threads no longer count at barriers
    atomicAdd(&s_sum, (int)threadIdx.x);
    const int odd = __syncthreads_count(threadIdx.x & 1);
    if (threadIdx.x == 0) {
        out[blockIdx.x * 2] = s_sum;
        out[blockIdx.x * 2 + 1] = odd;
    }
}

// Warp-wide: a butterfly sum, a broadcast, a shift down and a ballot.
void k_warp(float* out, unsigned* ballots) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float s = warp_sum((float)lane);
    const float b = __shfl_sync(0xffffffffu, (float)(lane * 10), 7);
    const float d = __shfl_down_sync(0xffffffffu, (float)lane, 1);
    const unsigned bal = __ballot_sync(0xffffffffu, lane % 3 == 0);
    out[threadIdx.x * 3] = s;
    out[threadIdx.x * 3 + 1] = b;
    out[threadIdx.x * 3 + 2] = d;
    if (lane == 0) ballots[warp] = bal;
}

// Cluster: each block writes its rank into its dynamic shared memory, the cluster syncs,
// each block reads the next rank's value.
void k_cluster(float* out) {
    float* s = (float*)emu::dynamic_smem();
    if (threadIdx.x == 0) s[0] = 100.f + (float)cluster_ctarank();
    cluster_sync_all();
    const unsigned n = gridDim.x < 4 ? gridDim.x : 4, next = (cluster_ctarank() + 1) % n;
    if (threadIdx.x == 0) out[blockIdx.x] = ld_cluster_rank(smem_addr(s), next);
    cluster_sync_all();  // no block leaves while another may still read it
}

int main() {
    std::vector<int> blk(6, -1);
    emu::launch(dim3(3), dim3(64), 0, 1, [&] { k_block(blk.data()); });
    int want_sum = 0, want_odd = 0;
    for (int t = 0; t < 64; t++)
        if (t % 4 != 3) want_sum += t, want_odd += t & 1;
    bool ok = true;
    for (int b = 0; b < 3; b++) ok &= blk[b * 2] == want_sum && blk[b * 2 + 1] == want_odd;
    check::expect(ok, "block barriers, __syncthreads_count and early exits");

    std::vector<float> w(64 * 3);
    std::vector<unsigned> bal(2);
    emu::launch(dim3(1), dim3(64), 0, 1, [&] { k_warp(w.data(), bal.data()); });
    ok = true;
    for (int t = 0; t < 64; t++) {
        const int lane = t & 31;
        ok &= w[t * 3] == 496.f && w[t * 3 + 1] == 70.f && w[t * 3 + 2] == (float)(lane < 31 ? lane + 1 : 31);
    }
    unsigned want_bal = 0;
    for (int l = 0; l < 32; l += 3) want_bal |= 1u << l;
    check::expect(ok && bal[0] == want_bal && bal[1] == want_bal, "warp sums, broadcasts, shifts and ballots");

    std::vector<float> cl(8, -1.f);
    emu::launch(dim3(8), dim3(32), 16, 4, [&] { k_cluster(cl.data()); });
    ok = true;
    for (int b = 0; b < 8; b++) ok &= cl[b] == 100.f + (float)((b % 4 + 1) % 4);
    check::expect(ok, "cluster barriers and distributed shared memory");
    return check::failures() ? 1 : 0;
}
