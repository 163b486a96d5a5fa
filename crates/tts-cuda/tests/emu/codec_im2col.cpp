// Emulated check of the codec's convolution inputs against f64 references, over passes of
// several rows (slots at different positions and parities, a padding row, padding frames)
// that each continue the slots' streams from the history the pass before left:
//   codec_im2col, codec_im2col8 (f32) and codec_im2col_h, codec_im2col8_h (f16 bits):
//     col[s][j·cin + i] = act(in(s - (taps-1-j)·dil)[i]), the input before a row's first
//     step from its slot's history copy `parity`; then col[s][K] = 1 and zeros up to
//     ldcol; a padding frame's rows all zeros;
//   codec_act_h (codec_conv.cu; f16 bits): xe row s + (r+1)·ctx = act(x[s]) for step s of
//     row r, xe row first_r·rate + r·ctx + p = act(history step p of r's slot); no other
//     row written;
// each also writing every row's new history (the last ctx raw input steps) into its slot's
// other copy and nothing else (codec_ref.hpp's History). Grids as exec.rs and conv.rs
// launch them. argv per case: kernel cin taps dil rate act ldx ldcol R positions passes
// (positions "p0,p1,...": the slots' first positions, 0 a fresh slot; passes
// "slot:frames,...[/padding frames];...": codec_ref.hpp's make_pass).

#include "codec_ref.hpp"

using codec::POISON;

constexpr uint16_t POISON_H = 0x7e7e;  // an f16 NaN: no kernel writes one here

struct ConvCase {
    std::string kernel;
    int cin, taps, dil, rate, act, ldx, ldcol, R;
    std::string positions, passes;
    int ctx() const { return (taps - 1) * dil; }
};

// The state's layout: the layer's two history copies at HIST_OFF in each slot (32-float
// aligned, as state.rs allocates), other state before and after them.
constexpr int HIST_OFF = 64;

// The grid (and threads) exec.rs launches an im2col with and conv.rs codec_act_h: the
// kernel's own blocks, then one history-update block per step of each row's history.
static dim3 grid_of(const ConvCase& c, int steps, int nrows, int* threads) {
    const int hist_blocks = nrows * c.ctx(), octs = c.cin / 8;
    if (c.kernel == "codec_act_h") {
        *threads = 256;
        return dim3((steps * octs + 255) / 256 + (nrows * c.ctx() * octs + 255) / 256 + hist_blocks);
    }
    if (c.kernel == "codec_im2col8" || c.kernel == "codec_im2col8_h") {
        *threads = 256;
        return dim3((steps * octs + 255) / 256 + hist_blocks);
    }
    *threads = 128;
    return dim3(steps + hist_blocks);
}

static void run_case(const ConvCase& c) {
    codec::Book book = codec::parse_book(c.positions);
    check::Rng rng((uint64_t)c.cin * 131 + c.taps * 17 + c.dil * 5 + c.rate + c.kernel.size());
    const int ctx = c.ctx(), K = c.taps * c.cin;
    const int stride = (HIST_OFF + 2 * ctx * c.cin + 32 + 31) / 32 * 32;
    codec::History hist(c.cin, ctx, c.rate, HIST_OFF, stride, book, rng);
    std::vector<float> alpha, inv_beta;
    codec::snake_params(rng, c.cin, alpha, inv_beta);
    const bool f16 = c.kernel.back() == 'h';
    std::vector<float> state = hist.state(book);
    int pass_no = 0;
    for (const std::string& spec : codec::split_passes(c.passes)) {
        const codec::Pass p = codec::make_pass(spec, book, c.R);
        const int steps = p.frames * c.rate;
        auto x = check::f32_values(rng, (size_t)steps * c.ldx, 2.0f);
        // f16 columns: a few inputs past f16's range, which saturate
        if (f16)
            for (size_t i = 5; i < x.size(); i += 211) x[i] *= 1e5f;
        const std::vector<float> before = state;
        // the reference: what each written f16 or f32 value should be (NaN: not written)
        const size_t out_rows = c.kernel == "codec_act_h" ? (size_t)steps + p.nrows * ctx : steps;
        const size_t width = c.kernel == "codec_act_h" ? c.cin : c.ldcol;
        std::vector<double> want(out_rows * width, NAN);
        auto act = [&](const float* v, int i) {
            return codec::act_ref(v[i], c.act, alpha.data(), inv_beta.data(), i);
        };
        if (c.kernel == "codec_act_h") {
            for (int s = 0; s < steps; s++) {
                const int r = p.frame_row(s / c.rate);
                if (r < 0) continue;
                for (int i = 0; i < c.cin; i++) want[((size_t)s + (r + 1) * ctx) * width + i] = act(&x[(size_t)s * c.ldx], i);
            }
            for (int r = 0; r < p.nrows; r++) {
                if (p.slot(r) < 0) continue;
                for (int q = 0; q < ctx; q++)
                    for (int i = 0; i < c.cin; i++)
                        want[((size_t)p.first(r) * c.rate + r * ctx + q) * width + i] =
                            act(&hist.past[p.slot(r)][(size_t)q * c.cin], i);
            }
        } else {
            for (int s = 0; s < steps; s++) {
                double* o = &want[(size_t)s * width];
                const int r = p.frame_row(s / c.rate);
                std::fill(o, o + width, 0.0);
                if (r < 0) continue;
                const int ls = s - p.first(r) * c.rate;
                for (int j = 0; j < c.taps; j++) {
                    const float* v = hist.input(p, r, ls, (c.taps - 1 - j) * c.dil, x.data(), c.ldx);
                    for (int i = 0; i < c.cin; i++) o[j * c.cin + i] = act(v, i);
                }
                o[K] = 1.0;
            }
        }
        // one row past the outputs, to show nothing is written there
        std::vector<float> col32(f16 ? 0 : (out_rows + 1) * width, POISON);
        std::vector<uint16_t> col16(f16 ? (out_rows + 1) * width : 0, POISON_H);
        int threads = 0;
        const dim3 grid = grid_of(c, steps, p.nrows, &threads);
        const float* al = c.act == 1 ? alpha.data() : nullptr;
        const float* ib = c.act == 1 ? inv_beta.data() : nullptr;
        emu::launch(grid, dim3(threads), 0, 1, [&] {
#define CONV_ARGS(COL)                                                                                                 \
    x.data(), c.ldx, c.cin, c.taps, c.dil, c.rate, c.act, al, ib, state.data(), stride, HIST_OFF, p.meta.data(), c.R, \
        steps, p.nrows, COL
            if (c.kernel == "codec_im2col") codec_im2col(CONV_ARGS(col32.data()), c.ldcol);
            else if (c.kernel == "codec_im2col8") codec_im2col8(CONV_ARGS(col32.data()), c.ldcol);
            else if (c.kernel == "codec_im2col_h") codec_im2col_h(CONV_ARGS(col16.data()), c.ldcol);
            else if (c.kernel == "codec_im2col8_h") codec_im2col8_h(CONV_ARGS(col16.data()), c.ldcol);
            else if (c.kernel == "codec_act_h") codec_act_h(CONV_ARGS(col16.data()));
            else emu::fail("unknown kernel");
#undef CONV_ARGS
        });
        const std::string name = c.kernel + " cin " + std::to_string(c.cin) + ", " + std::to_string(c.taps) +
                                 " taps, dilation " + std::to_string(c.dil) + ", rate " + std::to_string(c.rate) +
                                 ", act " + std::to_string(c.act) + ", pass " + std::to_string(++pass_no) + " (" +
                                 spec + ", " + std::to_string(grid.x) + " blocks)";
        // the values written against the reference; the rest keeps its poison
        std::vector<float> got32;
        std::vector<uint16_t> got16;
        std::vector<double> ref;
        bool rest = true;
        for (size_t i = 0; i < (out_rows + 1) * width; i++) {
            const bool written = i < want.size() && !std::isnan(want[i]);
            if (written) ref.push_back(want[i]);
            if (f16) {
                if (written) got16.push_back(col16[i]);
                else rest &= col16[i] == POISON_H;
            } else {
                if (written) got32.push_back(col32[i]);
                else rest &= std::memcmp(&col32[i], &POISON, 4) == 0;
            }
        }
        if (f16)
            codec::close_f16(name, got16, ref, 2e-6);
        else
            check::close(name, got32, ref, 2e-6);
        check::expect(rest, name + ": nothing written past the pass's values");
        hist.check_update(name, p, before, state, x.data(), c.ldx);
        codec::advance(book, p);
    }
}

int main(int argc, char** argv) {
    const int per = 11;
    if ((argc - 1) % per != 0 || argc == 1)
        emu::fail("usage: codec_im2col (kernel cin taps dil rate act ldx ldcol R positions passes)...");
    for (int i = 1; i < argc; i += per) {
        ConvCase c;
        c.kernel = argv[i];
        int* f[] = {&c.cin, &c.taps, &c.dil, &c.rate, &c.act, &c.ldx, &c.ldcol, &c.R};
        for (int j = 0; j < 8; j++) *f[j] = std::atoi(argv[i + 1 + j]);
        c.positions = argv[i + 9];
        c.passes = argv[i + 10];
        run_case(c);
    }
    return check::failures() ? 1 : 0;
}
