// Emulated run of sampling.cu's samplers, `sample_cp` (codes 1..15: the code predictor's
// per-step sampler, which also writes the frame entry and the next step's input rows) and
// `sample_talker` (code 0: repetition penalty, EOS and suppression masks, then the same
// choice), on inputs the Rust test wrote: it prints the codes each launch picked, one line
// per case ("codes <kernel> <case>: c0 c1 ...", -1 for a padding row), for the test to
// compare with the CPU reference sampler, and checks itself what it can:
//   * sample_cp: the code is in the vocabulary; the frame entry [r][step] is the only one of
//     the row written; for step < 15 the next step's input row is the embedding of the code
//     (table step - 1: folded f32 when given, else bf16 widened) and, with the QKV table,
//     the QKV row is that table's row; nothing else written, the parameters unchanged;
//   * sample_talker: the code is in the vocabulary; the slot's count went up by one and the
//     code's seen bit is set, nothing else of the parameters or seen bits changed;
//   * padding rows (slot -1) write nothing.
// argv per case: kernel file V rows threads max_slots a b c d, with (a b c d) = (step D Q
// folded) for sample_cp and (seen_words eos suppress_from min_new) for sample_talker. The
// file holds, little-endian: slots i32 [rows], params u32 [max_slots][16], for the talker
// seen u32 [max_slots][seen_words], then logits f32 [rows][V].

#include <fstream>
#include <iterator>
#include <sstream>

// The input file, read in order.
struct Reader {
    std::vector<char> bytes;
    size_t at = 0;
    explicit Reader(const char* path) {
        std::ifstream f(path, std::ios::binary);
        if (!f) emu::fail("cannot open the case's file");
        bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    template <typename T>
    std::vector<T> take(size_t n) {
        if (at + n * sizeof(T) > bytes.size()) emu::fail("the case's file is too short");
        std::vector<T> v(n);
        std::memcpy(v.data(), bytes.data() + at, n * sizeof(T));
        at += n * sizeof(T);
        return v;
    }
    void finish() const {
        if (at != bytes.size()) emu::fail("the case's file is longer than its shape");
    }
};

// A value in [-1, 1) for table element x (table `salt`): a different value per element.
static float table_value(uint64_t x, uint64_t salt) {
    uint64_t h = (x + 1) * 0x9E3779B97F4A7C15ull ^ salt * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (float)((h >> 40) * (1.0 / (1ull << 24)) * 2.0 - 1.0);
}

static void print_codes(const char* kernel, int index, const std::vector<int>& codes) {
    std::ostringstream line;
    line << "codes " << kernel << " " << index << ":";
    for (int c : codes) line << " " << c;
    std::printf("%s\n", line.str().c_str());
    std::fflush(stdout);
}

static void run_cp(int index, const char* path, int V, int rows, int threads, int max_slots,
                   int step, int D, int Q, bool folded) {
    Reader in(path);
    const auto slots = in.take<int>(rows);
    auto params = in.take<unsigned>((size_t)max_slots * 16);
    const auto logits = in.take<float>((size_t)rows * V);
    in.finish();
    if (step < 1 || step > 15) emu::fail("sample_cp's step is 1..15");
    const std::vector<unsigned> params_before = params;
    // the tables: folded f32 [15][V][D] or raw bf16 [15][V][D], QKV f32 [14][V][Q]
    std::vector<float> fold(folded ? (size_t)15 * V * D : 0);
    for (size_t x = 0; x < fold.size(); x++) fold[x] = table_value(x, 1);
    std::vector<uint16_t> raw((size_t)15 * V * D);
    for (size_t x = 0; x < raw.size(); x++) raw[x] = check::to_bf16(table_value(x, 2));
    std::vector<float> qkv0((size_t)14 * V * Q);
    for (size_t x = 0; x < qkv0.size(); x++) qkv0[x] = table_value(x, 3);
    // code_predictor.rs: ldx = D, ldq = Q
    const int ldx = D, ldq = Q;
    const int poison = -7;
    const float fpoison = -12345.0f;
    std::vector<int> frames((size_t)rows * 16, poison);
    std::vector<float> next_x((size_t)rows * ldx, fpoison), qkv((size_t)rows * std::max(ldq, 1), fpoison);
    emu::launch(dim3(rows), dim3(threads), 0, 1, [&] {
        sample_cp(logits.data(), V, rows, slots.data(), params.data(), step, frames.data(),
                  folded ? fold.data() : nullptr, (const bf16*)raw.data(), D, next_x.data(), ldx,
                  Q > 0 ? qkv0.data() : nullptr, Q, qkv.data(), ldq);
    });
    const std::string name = "sample_cp case " + std::to_string(index) + " (" +
                             std::to_string(rows) + " rows of " + std::to_string(V) + ", " +
                             std::to_string(threads) + " threads, step " + std::to_string(step) +
                             ", D " + std::to_string(D) + ", Q " + std::to_string(Q) +
                             (folded ? ", folded" : ", bf16") + ")";
    std::vector<int> codes(rows, -1);
    bool written = true, copies = true, untouched = true;
    for (int r = 0; r < rows; r++) {
        const bool pad = slots[r] < 0;
        for (int j = 0; j < 16; j++)
            if ((pad || j != step) && frames[(size_t)r * 16 + j] != poison) untouched = false;
        const bool copied = !pad && step < 15;
        int c = -1;
        if (!pad) {
            c = frames[(size_t)r * 16 + step];
            if (c < 0 || c >= V) {
                written = false;
                std::printf("  row %d: code %d outside the vocabulary\n", r, c);
                c = -1;
            }
        }
        codes[r] = c;
        // row r of `dst` (`width` wide): the picked code's table row, bit for bit; poison
        // where nothing is copied
        auto check_copy = [&](const std::vector<float>& dst, int ld, int width, auto table_value) {
            for (int i = 0; i < width; i++) {
                const float got = dst[(size_t)r * ld + i];
                if (!copied) {
                    untouched &= got == fpoison;
                    continue;
                }
                if (c < 0) continue;
                const float want = table_value(((size_t)(step - 1) * V + c) * width + i);
                copies &= std::memcmp(&got, &want, 4) == 0;
            }
        };
        check_copy(next_x, ldx, D, [&](size_t at) { return folded ? fold[at] : check::from_bf16(raw[at]); });
        check_copy(qkv, ldq, Q, [&](size_t at) { return qkv0[at]; });
    }
    check::expect(written, name + ": every row's code is in the vocabulary");
    if (step < 15)
        check::expect(copies, name + ": the next step's input" + (Q > 0 ? " and QKV" : "") +
                                  " rows are the picked codes' table rows");
    check::expect(untouched, name + ": nothing else written (other frame entries, padding rows" +
                                 (step == 15 ? ", inputs at the last step" : "") + ")");
    check::expect(params == params_before, name + ": the parameters unchanged");
    print_codes("sample_cp", index, codes);
}

static void run_talker(int index, const char* path, int V, int rows, int threads, int max_slots,
                       int seen_words, int eos, int suppress_from, int min_new) {
    Reader in(path);
    const auto slots = in.take<int>(rows);
    auto params = in.take<unsigned>((size_t)max_slots * 16);
    auto seen = in.take<unsigned>((size_t)max_slots * seen_words);
    const auto logits = in.take<float>((size_t)rows * V);
    in.finish();
    const std::vector<unsigned> params_before = params, seen_before = seen;
    const int poison = -7;
    // talker.rs: out_stride 1
    const int out_stride = 1;
    std::vector<int> out((size_t)rows * out_stride, poison);
    emu::launch(dim3(rows), dim3(threads), 0, 1, [&] {
        sample_talker(logits.data(), V, rows, slots.data(), params.data(), seen.data(), seen_words,
                      eos, suppress_from, min_new, out.data(), out_stride);
    });
    const std::string name = "sample_talker case " + std::to_string(index) + " (" +
                             std::to_string(rows) + " rows of " + std::to_string(V) + ", " +
                             std::to_string(threads) + " threads)";
    std::vector<int> codes(rows, -1);
    std::vector<unsigned> want_params = params_before, want_seen = seen_before;
    bool written = true;
    for (int r = 0; r < rows; r++) {
        const int slot = slots[r];
        const int c = out[(size_t)r * out_stride];
        if (slot < 0) {
            written &= c == poison;
            continue;
        }
        if (c < 0 || c >= V) {
            written = false;
            std::printf("  row %d: code %d outside the vocabulary\n", r, c);
            continue;
        }
        codes[r] = c;
        want_params[(size_t)slot * 16 + 11] += 1;
        want_seen[(size_t)slot * seen_words + c / 32] |= 1u << (c % 32);
    }
    check::expect(written, name + ": every row's code is in the vocabulary, padding rows unwritten");
    check::expect(params == want_params, name + ": each row's slot counted its sample, nothing else changed");
    check::expect(seen == want_seen, name + ": each row's code marked seen, no other bit changed");
    print_codes("sample_talker", index, codes);
}

int main(int argc, char** argv) {
    const int per = 10;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: sampling (kernel file V rows threads max_slots a b c d)...");
    for (int i = 1, index = 0; i < argc; i += per, index++) {
        const std::string kernel = argv[i];
        const char* path = argv[i + 1];
        int a[per - 2];
        for (int j = 0; j < per - 2; j++) a[j] = std::atoi(argv[i + 2 + j]);
        if (kernel == "sample_cp")
            run_cp(index, path, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] != 0);
        else if (kernel == "sample_talker")
            run_talker(index, path, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
        else
            emu::fail("not a sampler: expected sample_cp or sample_talker");
    }
    return check::failures() ? 1 : 0;
}
