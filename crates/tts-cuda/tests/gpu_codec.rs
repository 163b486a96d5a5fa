//! The GPU codec against the CPU reference and the official decode: the 90-frame fixture
//! streams (window 72 and 16) decoded whole, frame by frame and in uneven chunks, several
//! slots in one call, in full f32 and in the default TF32; and the release geometry
//! (`random:1.7b`) for a few frames. Skips, saying so, when no CUDA device is present.
//!
//! Tolerances. This random fixture network amplifies rounding about 1000x: the CPU
//! reference and the official f32 decode differ by 6.2e-5 max abs. Full-f32 GEMMs (other
//! summation orders) are held to 5e-4 against the CPU and 1e-3 against the official PCM.
//! TF32 GEMMs round their operands to 10 mantissa bits; emulating that on the host gives
//! max abs 4.1e-2, rms 5.5e-3 (8.8e-2 / 1.4e-2 if the hardware truncates) against a signal
//! rms of 0.24, so TF32 is held to max abs 0.15 and rms 2e-2.
//!
//! `random:1.7b` saturates: 98% of its samples clip to ±1, so the few unclipped samples
//! carry large pre-clip errors. Host emulation of the same program: exact GEMMs max abs
//! 8.7e-3, rms 2.8e-4 (held to 5e-2 / 2e-3); TF32 flips the sign of ~0.5% of the
//! saturated samples, rms 0.14 (held to rms 0.4; an unrelated signal gives about 1.4).

mod common;

use std::path::PathBuf;

use tts_cuda::codec::{
    bench_decode, launch_implicit_conv, CodecPrecision, ConvLaunch, DevCodec, ImplicitConv,
    CAPTURE_AFTER_USES,
};
use tts_cuda::device::Gpu;
use tts_cuda::weights::HostLoader;
use tts_model::checkpoint::SafetensorsFiles;
use tts_model::reference::load_codec;
use tts_model::weights::CodecW;
use tts_model::{Frame, LoadOptions, Model};

const F32_TOL: f32 = 5e-4;
const TF32_MAX: f32 = 0.15;
const TF32_RMS: f64 = 2e-2;
const RELEASE_F32_MAX: f32 = 5e-2;
const RELEASE_F32_RMS: f64 = 2e-3;
const RELEASE_TF32_MAX: f32 = 2.0 + 1e-6;
const RELEASE_TF32_RMS: f64 = 0.4;

fn fixtures() -> PathBuf {
    std::env::var("QWEN3_TTS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"))
}

struct Case {
    name: String,
    model: Model,
    codes: Vec<Frame>,
    official: Vec<f32>,
}

fn case(name: &str) -> Case {
    let dir = fixtures().join("cases");
    let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).expect("case json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("case json");
    let codes: Vec<Frame> = serde_json::from_value(json["codes"].clone()).expect("codes");
    let model_name = json["model"].as_str().expect("model name");
    let model = Model::from_dir(
        &fixtures().join("models").join(model_name),
        LoadOptions::default(),
    )
    .expect("fixture model");
    let st = SafetensorsFiles::open_files(vec![dir.join(format!("{name}.safetensors"))])
        .expect("case tensors");
    let shape = st.shape("pcm").expect("pcm tensor").to_vec();
    let official = st.tensor("pcm", &shape).expect("pcm").to_f32();
    Case {
        name: name.into(),
        model,
        codes,
        official,
    }
}

fn cpu_decode(model: &Model, codes: &[Frame]) -> Vec<f32> {
    let dec = load_codec(model).expect("codec weights");
    let mut st = dec.new_state();
    dec.decode(codes, &mut st)
}

fn dev_codec(gpu: &Gpu, model: &Model, slots: usize, per_call: usize) -> DevCodec {
    let w =
        CodecW::load(&model.codec, &mut HostLoader(&model.codec_weights)).expect("codec weights");
    DevCodec::new(gpu, &model.codec, w, slots, per_call).expect("DevCodec::new")
}

/// `(max abs, rms)` of `a - b`.
fn errors(a: &[f32], b: &[f32]) -> (f32, f64) {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let max = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    let n = a.len().max(1) as f64;
    let rms = (a
        .iter()
        .zip(b)
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    (max, rms)
}

fn check(what: &str, p: CodecPrecision, got: &[f32], want: &[f32]) {
    let (max, rms) = errors(got, want);
    eprintln!("{what} [{p:?}]: max abs {max:.2e}, rms {rms:.2e}");
    match p {
        CodecPrecision::F32 => assert!(max < F32_TOL, "{what} [{p:?}]: max abs {max}"),
        // f16 convolutions keep TF32's mantissa: its emulated error is TF32's
        // (`emulate::emulated_rounding_error_on_the_fixture`), so the same bounds
        CodecPrecision::Tf32 | CodecPrecision::F16 => assert!(
            max < TF32_MAX && rms < TF32_RMS,
            "{what} [{p:?}]: max abs {max}, rms {rms}"
        ),
    }
}

/// Slots 1, 2, 3 decoded together (one call per step, rows in descending slot order):
/// frame by frame, uneven chunks, and two large chunks.
fn streams_together(gpu: &Gpu, codec: &mut DevCodec, codes: &[Frame]) -> Vec<Vec<f32>> {
    let chunkings: [&[usize]; 3] = [&[1], &[1, 2, 3, 5, 8, 13, 4, 7, 30, 6, 11], &[50, 40]];
    let mut at = [0usize; 3];
    let mut out = vec![Vec::new(); 3];
    let mut step = 0;
    while at.iter().any(|&a| a < codes.len()) {
        let mut rows: Vec<(usize, &[Frame])> = Vec::new();
        let mut ends = [0usize; 3];
        for s in (0..3).rev() {
            let c = chunkings[s][step % chunkings[s].len()];
            ends[s] = (at[s] + c).min(codes.len());
            if ends[s] > at[s] {
                rows.push((s + 1, &codes[at[s]..ends[s]]));
            }
        }
        let res = codec.decode(gpu, &rows).expect("decode");
        for ((slot, frames), pcm) in rows.iter().zip(&res) {
            assert_eq!(pcm.len(), frames.len() * codec.samples_per_frame());
            out[slot - 1].extend_from_slice(pcm);
        }
        at = ends;
        step += 1;
    }
    out
}

#[test]
fn fixture_streams_match_the_cpu_reference() {
    let Some(gpu) = common::open_gpu("fixture_streams_match_the_cpu_reference") else {
        return;
    };
    for name in ["codec_long_w72", "codec_long_w16"] {
        let c = case(name);
        let want = cpu_decode(&c.model, &c.codes);
        // 4 slots, up to 96 frames per row per call: the 90 frames fit one pass.
        let mut codec = dev_codec(&gpu, &c.model, 4, 96);
        assert_eq!(codec.samples_per_frame(), 1920);
        // with f16 convolutions, the few-step GEMVs without a prologue also on tensor cores
        // (codec_gemv_mma.cu, from 1 step)
        for (p, mma) in [
            (CodecPrecision::F32, 0),
            (CodecPrecision::Tf32, 0),
            (CodecPrecision::F16, 0),
            (CodecPrecision::F16, 1),
        ] {
            codec.set_precision(&gpu, p).expect("precision");
            codec.set_gemv_mma_steps(mma);
            for s in 0..4 {
                codec.reset_slot(&gpu, s).expect("reset");
            }
            let whole = codec
                .decode(&gpu, &[(0, &c.codes)])
                .expect("decode")
                .remove(0);
            assert!(
                whole.iter().all(|v| v.abs() <= 1.0),
                "samples outside [-1, 1]"
            );
            check(&format!("{} whole vs CPU", c.name), p, &whole, &want);
            let (max, _) = errors(&whole, &c.official);
            eprintln!(
                "{} whole vs official [{p:?}, GEMV on tensor cores from {mma} steps]: max abs {max:.2e}",
                c.name
            );
            if p == CodecPrecision::F32 {
                assert!(max < 1e-3, "{}: whole vs official {max}", c.name);
            }
            for (s, pcm) in streams_together(&gpu, &mut codec, &c.codes)
                .iter()
                .enumerate()
            {
                check(
                    &format!("{} stream {} vs CPU", c.name, s + 1),
                    p,
                    pcm,
                    &want,
                );
                let (max, _) = errors(pcm, &whole);
                eprintln!(
                    "{} stream {} vs whole on the GPU [{p:?}]: max abs {max:.2e}",
                    c.name,
                    s + 1
                );
            }
            // A reset slot starts a fresh stream.
            codec.reset_slot(&gpu, 0).expect("reset");
            let again = codec
                .decode(&gpu, &[(0, &c.codes[..5])])
                .expect("decode")
                .remove(0);
            check(
                &format!("{} after reset", c.name),
                p,
                &again,
                &want[..5 * 1920],
            );
        }
        // Empty rows and bad input.
        assert!(codec.decode(&gpu, &[(2, &[])]).expect("empty row")[0].is_empty());
        assert!(
            codec.decode(&gpu, &[(9, &c.codes[..1])]).is_err(),
            "slot out of range"
        );
        assert!(
            codec
                .decode(&gpu, &[(1, &c.codes[..1]), (1, &c.codes[..1])])
                .is_err(),
            "duplicate slot"
        );
        assert!(
            codec.decode(&gpu, &[(1, &[[4096u32; 16]])]).is_err(),
            "code outside the codebook"
        );
    }
}

#[test]
fn release_geometry_matches_the_cpu_reference() {
    let Some(gpu) = common::open_gpu("release_geometry_matches_the_cpu_reference") else {
        return;
    };
    let model = Model::load("random:1.7b", LoadOptions::default()).expect("random:1.7b");
    let codes: Vec<Frame> = (0..8u32)
        .map(|f| std::array::from_fn(|q| (f * 331 + q as u32 * 97 + 5) % 2048))
        .collect();
    let want = cpu_decode(&model, &codes);
    let mut codec = dev_codec(&gpu, &model, 2, 8);
    // GEMMs of <= 8 steps on the GEMV (the default; f16 weights with F16, those without a
    // prologue also on tensor cores from 3 steps) and all on cuBLAS; the f16 convolutions
    // as implicit GEMMs where they are narrow (the default), always or never
    use ImplicitConv::{All, Narrow, Off};
    for (p, gemv, implicit, mma) in [
        (CodecPrecision::F32, true, Narrow, 0),
        (CodecPrecision::Tf32, true, Narrow, 0),
        (CodecPrecision::F32, false, Narrow, 0),
        (CodecPrecision::Tf32, false, Narrow, 0),
        (CodecPrecision::F16, true, Narrow, 0),
        (CodecPrecision::F16, true, Narrow, 3),
        (CodecPrecision::F16, false, Narrow, 0),
        (CodecPrecision::F16, true, All, 0),
        (CodecPrecision::F16, true, Off, 0),
    ] {
        codec.set_precision(&gpu, p).expect("precision");
        codec.set_small_gemv(gemv);
        codec.set_gemv_mma_steps(mma);
        codec.set_implicit_conv(implicit);
        codec.reset_slot(&gpu, 0).expect("reset");
        codec.reset_slot(&gpu, 1).expect("reset");
        let whole = codec
            .decode(&gpu, &[(0, &codes)])
            .expect("decode")
            .remove(0);
        let mut chunked = Vec::new();
        for (a, b) in [(0, 3), (3, 4), (4, 8)] {
            // slot 0 (output ignored) rides along so each call batches two uneven rows
            chunked.extend(
                codec
                    .decode(&gpu, &[(1, &codes[a..b]), (0, &codes[..1])])
                    .expect("decode")
                    .remove(0),
            );
        }
        let (m1, r1) = errors(&whole, &want);
        let (m2, r2) = errors(&chunked, &want);
        eprintln!(
            "random:1.7b [{p:?}, small GEMV {gemv}, implicit {implicit:?}, tensor-core GEMV from {mma} steps]: whole max abs {m1:.2e} rms {r1:.2e}; chunked {m2:.2e} / {r2:.2e}"
        );
        let (max_tol, rms_tol) = match p {
            CodecPrecision::F32 => (RELEASE_F32_MAX, RELEASE_F32_RMS),
            // random full-size weights clip most samples: these bounds check the wiring
            CodecPrecision::Tf32 | CodecPrecision::F16 => (RELEASE_TF32_MAX, RELEASE_TF32_RMS),
        };
        assert!(
            m1 < max_tol && r1 < rms_tol,
            "whole [{p:?}, small GEMV {gemv}, implicit {implicit:?}, tensor-core GEMV from {mma} steps]"
        );
        assert!(
            m2 < max_tol && r2 < rms_tol,
            "chunked [{p:?}, small GEMV {gemv}, implicit {implicit:?}, tensor-core GEMV from {mma} steps]"
        );
    }
}

/// Not a measurement (tests assert correctness only): checks that the benchmark runs both
/// eagerly and through the per-shape CUDA graphs, and prints what it sees.
#[test]
fn benchmarks_run() {
    let Some(gpu) = common::open_gpu("benchmarks_run") else {
        return;
    };
    let c = case("codec_long_w72");
    let mut codec = dev_codec(&gpu, &c.model, 4, 2);
    codec.set_graphs(false);
    let eager = bench_decode(&gpu, &mut codec, 4, 2, 3).expect("bench_decode, eager");
    codec.set_graphs(true);
    let cached = bench_decode(&gpu, &mut codec, 4, 2, 3).expect("bench_decode, graphs");
    eprintln!(
        "fixture codec, 4 streams x 2 frames: eager {eager:.3} ms, per-shape graphs \
         {cached:.3} ms per call"
    );
}

/// f32 -> f16 -> f32, saturated like the kernels' `f2h_sat`.
fn f16_round(v: f32) -> f32 {
    half::f16::from_f32(v.clamp(-65504.0, 65504.0)).to_f32()
}

/// An implicit convolution's layer and the widths of its outputs: the pass is always two
/// rows of uneven length (3 and 2 frames) whose first steps reach into the slots'
/// histories, then a padding frame.
struct ConvGeo {
    cin: usize,
    ldx: usize,
    taps: usize,
    dil: usize,
    /// Steps per frame.
    rate: usize,
    outputs: &'static [usize],
}

/// What one launch wrote: the GEMM kernel that ran, the outputs and the slots' state.
struct ConvRun {
    kernel: &'static str,
    c: Vec<f32>,
    state: Vec<f32>,
}

/// Runs the implicit-GEMM convolution (`kernels/codec_conv.cu`, the window kernel when
/// `window` and the layer fits it, its resident-weights form when also `resident`) over `geo` and checks it against a host evaluation of the
/// same f16 operands: a causal conv (SnakeBeta on its input) for each output width, beta 0
/// (over NaN) and 1, input and output rows wider than the layer, and the following
/// `codec_act_pad` fused into the epilogue (SnakeBeta on the outputs, ones column); also
/// the history update it writes. Returns every launch's result, in order.
fn check_implicit_conv(gpu: &Gpu, geo: &ConvGeo, (window, resident): (bool, bool)) -> Vec<ConvRun> {
    let ConvGeo {
        cin,
        ldx,
        taps,
        dil,
        rate,
        outputs,
    } = *geo;
    let ctx = (taps - 1) * dil;
    let kk = taps * cin;
    let ldw = (kk + 1).next_multiple_of(8);
    // rows: slot 2 (history copy 1) with 3 frames, slot 0 (copy 0) with 2, then a padding
    // frame; pass metadata as kernels/codec.cu lays it out
    let (cap_rows, rows) = (4usize, 2usize);
    let (slots, parity, first, len) = ([2i32, 0], [1i32, 0], [0i32, 3], [3i32, 2]);
    let frame_row = [0i32, 0, 0, 1, 1, -1];
    let steps = frame_row.len() * rate;
    let mut meta = vec![-1i32; 5 * cap_rows];
    for r in 0..rows {
        meta[r] = slots[r];
        meta[cap_rows + r] = parity[r];
        meta[2 * cap_rows + r] = first[r];
        meta[3 * cap_rows + r] = len[r];
        meta[4 * cap_rows + r] = 0;
    }
    meta.extend(frame_row);
    let hist_off = 16usize;
    let slot_stride = hist_off + 2 * ctx * cin + 8;
    let mut r = common::uniform(7, -2.0, 2.0);
    let x: Vec<f32> = (0..steps * ldx).map(|_| r()).collect();
    let state: Vec<f32> = (0..3 * slot_stride).map(|_| r()).collect();
    let mut ra = common::uniform(8, 0.5, 1.5);
    let alpha: Vec<f32> = (0..cin).map(|_| ra()).collect();
    let mut rb = common::uniform(9, 0.2, 1.0);
    let inv_beta: Vec<f32> = (0..cin).map(|_| rb()).collect();
    let act = |v: f32, ch: usize| v + inv_beta[ch] * (alpha[ch] * v).sin().powi(2);
    let hist = |row: usize| {
        let base = slots[row] as usize * slot_stride + hist_off;
        &state[base + parity[row] as usize * ctx * cin..][..ctx * cin]
    };
    // the layer input seen by `row` at its local step `src` (< 0: history)
    let raw = |row: usize, src: isize, ch: usize| {
        if src >= 0 {
            x[(first[row] as usize * rate + src as usize) * ldx + ch]
        } else {
            hist(row)[(ctx as isize + src) as usize * cin + ch]
        }
    };

    let d_x = gpu.upload(&x).expect("x");
    let d_meta = gpu.upload(&meta).expect("meta");
    let d_alpha = gpu.upload(&alpha).expect("alpha");
    let d_inv_beta = gpu.upload(&inv_beta).expect("inv_beta");
    // the activated input with each row's history before it
    let d_xh = gpu.zeros::<u16>((steps + rows * ctx) * cin).expect("xh");
    let mut runs = Vec::new();
    for &n in outputs {
        let mut rw = common::uniform(10 + n as u64, -0.1, 0.1);
        let w: Vec<f32> = (0..n * ldw)
            .map(|i| if i % ldw <= kk { f16_round(rw()) } else { 0.0 })
            .collect();
        let w_bits: Vec<u16> = w
            .iter()
            .map(|&v| half::f16::from_f32(v).to_bits())
            .collect();
        let d_w = gpu.upload(&w_bits).expect("w");
        let ldc = n + 4;
        // the fused activation of the output (a residual unit's act2), per output channel
        let mut rp = common::uniform(20 + n as u64, 0.5, 1.5);
        let alpha2: Vec<f32> = (0..n).map(|_| rp()).collect();
        let inv_beta2: Vec<f32> = (0..n).map(|_| 0.4 * rp()).collect();
        let act2 = |v: f64, o: usize| {
            let v = v as f32;
            (v + inv_beta2[o] * (alpha2[o] * v).sin().powi(2)) as f64
        };
        let d_alpha2 = gpu.upload(&alpha2).expect("alpha2");
        let d_inv_beta2 = gpu.upload(&inv_beta2).expect("inv_beta2");
        for (beta, post) in [(0.0f32, false), (1.0, false), (0.0, true)] {
            let c0: Vec<f32> = if beta == 0.0 {
                vec![f32::NAN; steps * ldc]
            } else {
                (0..steps * ldc).map(|_| r()).collect()
            };
            let d_c = gpu.upload(&c0).expect("c");
            let d_state = gpu.upload(&state).expect("state");
            let l = ConvLaunch {
                x: d_x.ptr,
                ldx,
                cin,
                taps,
                dil,
                rate,
                act: 1,
                alpha: d_alpha.ptr,
                inv_beta: d_inv_beta.ptr,
                state: d_state.ptr,
                slot_stride,
                hist: Some(hist_off),
                meta: d_meta.ptr,
                cap_rows,
                steps,
                rows,
                xh: d_xh.ptr,
                w: d_w.ptr,
                ldw,
                n,
                c: d_c.ptr,
                ldc,
                beta,
                post: post.then_some((1, d_alpha2.ptr, d_inv_beta2.ptr)),
                window,
                resident,
            };
            let kernel = launch_implicit_conv(gpu, &l)
                .expect("launch")
                .expect("a kernel for a non-empty pass");
            gpu.sync().expect("sync");
            let c = gpu.read(&d_c, steps * ldc).expect("read c");
            let new_state = gpu.read(&d_state, state.len()).expect("read state");
            let mut worst = 0f64;
            for s in 0..steps {
                let fr = frame_row[s / rate];
                if fr < 0 {
                    continue;
                }
                let row = fr as usize;
                let ls = (s - first[row] as usize * rate) as isize;
                for o in 0..n {
                    let (mut sum, mut mag) = (w[o * ldw + kk] as f64, 0f64);
                    for j in 0..taps {
                        let src = ls - ((taps - 1 - j) * dil) as isize;
                        for ch in 0..cin {
                            let t = f16_round(act(raw(row, src, ch), ch)) as f64
                                * w[o * ldw + j * cin + ch] as f64;
                            sum += t;
                            mag += t.abs();
                        }
                    }
                    let old = if beta == 0.0 {
                        0.0
                    } else {
                        c0[s * ldc + o] as f64
                    };
                    let mut want = beta as f64 * old + sum;
                    let mut tol = 1e-3 * (mag + old.abs()) + 1e-5;
                    if post {
                        // the snake's slope is at most 1 + inv_beta2 * alpha2 < 2
                        want = act2(want, o);
                        tol = 2.0 * tol + 1e-5 * want.abs();
                    }
                    let got = c[s * ldc + o] as f64;
                    let err = (got - want).abs();
                    assert!(
                        err <= tol,
                        "n {n}, beta {beta}, fused act {post}: step {s} output {o}: {got} vs \
                         {want} (tol {tol:.2e})"
                    );
                    worst = worst.max(err / (mag + 1e-12));
                }
                // past the layer's outputs: untouched, or with the fused act_pad the ones
                // column then zeros
                for o in n..ldc {
                    let (got, was) = (c[s * ldc + o], c0[s * ldc + o]);
                    if post {
                        assert_eq!(got, if o == n { 1.0 } else { 0.0 }, "pad column {o}");
                    } else {
                        assert!(
                            got == was || (got.is_nan() && was.is_nan()),
                            "column {o} written"
                        );
                    }
                }
            }
            // the new history (the other copy): the last ctx raw inputs of each row
            for row in 0..rows {
                let base = slots[row] as usize * slot_stride + hist_off;
                let copy = &new_state[base + (1 - parity[row] as usize) * ctx * cin..][..ctx * cin];
                let end = len[row] as isize * rate as isize;
                for p in 0..ctx {
                    for ch in 0..cin {
                        let want = raw(row, end - ctx as isize + p as isize, ch);
                        assert_eq!(
                            copy[p * cin + ch],
                            want,
                            "row {row} history step {p} ch {ch}"
                        );
                    }
                }
            }
            eprintln!(
                "implicit conv ({kernel}), {n} outputs, beta {beta}, fused act {post}: worst \
                 error / sum of |terms| {worst:.2e}"
            );
            runs.push(ConvRun {
                kernel,
                c,
                state: new_state,
            });
        }
    }
    assert_eq!(runs.len(), 3 * outputs.len());
    runs
}

/// The per-tap kernel (`codec_conv_mma*`) on a layer whose frames are not whole tiles
/// (7 taps, dilation 3, 4 steps per frame): both tile shapes (96 and 128 outputs).
#[test]
fn implicit_conv_matches_a_host_reference() {
    let Some(gpu) = common::open_gpu("implicit_conv_matches_a_host_reference") else {
        return;
    };
    let geo = ConvGeo {
        cin: 64,
        ldx: 68,
        taps: 7,
        dil: 3,
        rate: 4,
        outputs: &[96, 128],
    };
    let runs = check_implicit_conv(&gpu, &geo, (true, true));
    let kernels: Vec<&str> = runs.iter().map(|r| r.kernel).collect();
    assert_eq!(
        kernels[..3],
        ["codec_conv_mma32"; 3],
        "frames of 4 steps: no window"
    );
    assert_eq!(kernels[3..], ["codec_conv_mma64"; 3]);
}

/// The window kernel (`codec_conv_win*`) on a layer whose frames are whole tiles (128 steps,
/// 96 channels, 7 taps at dilation 9 as the codec's last residual unit), with the weights
/// streamed per tile and (96 outputs) resident: against the host evaluation, and bit for
/// bit the per-tap kernel's results and history (the same products summed in the same
/// order), for 96 outputs (one 96-wide tile), 192 (two) and 128 (64-wide tiles).
#[test]
fn window_conv_matches_the_per_tap_kernel_bit_for_bit() {
    let Some(gpu) = common::open_gpu("window_conv_matches_the_per_tap_kernel_bit_for_bit") else {
        return;
    };
    let geo = ConvGeo {
        cin: 96,
        ldx: 100,
        taps: 7,
        dil: 9,
        rate: 128,
        outputs: &[96, 192, 128],
    };
    let per_tap = check_implicit_conv(&gpu, &geo, (false, false));
    let names = |runs: &[ConvRun]| runs.iter().map(|r| r.kernel).collect::<Vec<_>>();
    assert_eq!(
        names(&per_tap),
        [
            ["codec_conv_mma32"; 3],
            ["codec_conv_mma64"; 3],
            ["codec_conv_mma64"; 3]
        ]
        .concat()
    );
    for (resident, first) in [(false, "codec_conv_win96"), (true, "codec_conv_win96r")] {
        let window = check_implicit_conv(&gpu, &geo, (true, resident));
        assert_eq!(
            names(&window),
            [[first; 3], ["codec_conv_win96"; 3], ["codec_conv_win64"; 3]].concat()
        );
        for (i, (a, b)) in per_tap.iter().zip(&window).enumerate() {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                bits(&a.c) == bits(&b.c),
                "{first}, case {i}: outputs differ"
            );
            assert!(
                bits(&a.state) == bits(&b.state),
                "{first}, case {i}: history differs"
            );
        }
    }
}

/// A pass shape runs eagerly its first `CAPTURE_AFTER_USES` times and from a graph
/// captured at the next use, with the same samples bit for bit (each decode starts from
/// reset streams, so every one decodes the same frames from the same state).
#[test]
fn codec_graphs_are_captured_after_repeated_shapes() {
    let Some(gpu) = common::open_gpu("codec_graphs_are_captured_after_repeated_shapes") else {
        return;
    };
    let c = case("codec_long_w72");
    let mut codec = dev_codec(&gpu, &c.model, 2, 8);
    let (a, b) = (&c.codes[..6], &c.codes[10..13]);
    let bits = |pcm: &[Vec<f32>]| -> Vec<Vec<u32>> {
        pcm.iter()
            .map(|row| row.iter().map(|v| v.to_bits()).collect())
            .collect()
    };
    let mut first = None;
    for use_ in 1..=CAPTURE_AFTER_USES + 2 {
        codec.reset_slot(&gpu, 0).expect("reset");
        codec.reset_slot(&gpu, 1).expect("reset");
        let pcm = codec.decode(&gpu, &[(0, a), (1, b)]).expect("decode");
        assert_eq!(pcm[0].len(), 6 * 1920);
        assert_eq!(
            codec.captured_graphs(),
            usize::from(use_ > CAPTURE_AFTER_USES),
            "graphs after use {use_}"
        );
        let got = bits(&pcm);
        match &first {
            None => first = Some(got),
            Some(want) => assert!(&got == want, "use {use_}: samples differ from the first"),
        }
    }
}

/// The start-up warm-up (a pass of every frame count, on slots it resets) leaves nothing
/// behind: no graph, no use count, every stream at position 0, and streams decoded after
/// it (without resets) give a fresh codec's samples bit for bit.
#[test]
fn warm_up_leaves_no_trace() {
    let Some(gpu) = common::open_gpu("warm_up_leaves_no_trace") else {
        return;
    };
    let c = case("codec_long_w72");
    let decode = |codec: &mut DevCodec| -> Vec<Vec<u32>> {
        let mut out = vec![Vec::new(); 3];
        for (a, b, d) in [(0, 5, 20), (5, 12, 21)] {
            let rows = [
                (0, &c.codes[a..b]),
                (1, &c.codes[30 + a..30 + b]),
                (2, &c.codes[d..d + 1]),
            ];
            let pcm = codec.decode(&gpu, &rows).expect("decode");
            for (o, p) in out.iter_mut().zip(&pcm) {
                o.extend(p.iter().map(|v| v.to_bits()));
            }
        }
        out
    };
    let want = decode(&mut dev_codec(&gpu, &c.model, 3, 8));
    let mut codec = dev_codec(&gpu, &c.model, 3, 8);
    assert_eq!(
        codec.warm_up(&gpu).expect("warm-up"),
        24,
        "3 slots x 8 frames"
    );
    assert_eq!(codec.captured_graphs(), 0);
    assert_eq!(codec.last_pass(), None);
    for slot in 0..3 {
        assert_eq!(codec.position(slot), Some(0), "slot {slot}");
    }
    let got = decode(&mut codec);
    assert_eq!(got[0].len(), 12 * codec.samples_per_frame());
    assert!(
        got == want,
        "samples after the warm-up differ from a fresh codec's"
    );
    // use counts start again: a shape is captured after CAPTURE_AFTER_USES eager uses
    let rows = [(0, &c.codes[..2])];
    for use_ in 1..=CAPTURE_AFTER_USES + 1 {
        codec.decode(&gpu, &rows).expect("decode");
        let want = usize::from(use_ > CAPTURE_AFTER_USES);
        assert_eq!(codec.captured_graphs(), want, "graphs after use {use_}");
    }
}

/// Decodes `codes` in three streams of uneven chunks, all rows in one call per step (so
/// padding frames and histories are exercised), and returns each stream's sample bits.
fn uneven_streams_bits(gpu: &Gpu, codec: &mut DevCodec, codes: &[Frame]) -> Vec<Vec<u32>> {
    let chunks: [&[usize]; 3] = [&[2, 3, 1, 30, 40], &[1, 1, 4, 50, 20], &[3, 3, 70]];
    let mut at = [0usize; 3];
    let mut out = vec![Vec::new(); 3];
    for slot in 0..3 {
        codec.reset_slot(gpu, slot).expect("reset");
    }
    for step in 0..5 {
        let mut rows: Vec<(usize, &[Frame])> = Vec::new();
        for (slot, c) in chunks.iter().enumerate() {
            if let Some(&n) = c.get(step) {
                rows.push((slot, &codes[at[slot]..at[slot] + n]));
                at[slot] += n;
            }
        }
        let res = codec.decode(gpu, &rows).expect("decode");
        for ((slot, _), pcm) in rows.iter().zip(&res) {
            out[*slot].extend(pcm.iter().map(|v| v.to_bits()));
        }
    }
    out
}

/// The wide copies (`codec_im2col8*`: eight columns per thread; `codec_final`: its window
/// read as float4, the weights in registers; `codec_attention`: the cached keys and values
/// staged in shared memory) give the samples of the one-value-at-a-time kernels bit for
/// bit: the fixture codec (its 32- to 8-channel convolutions take the wide im2col, its
/// 2-channel final conv does not) and the release geometry (every im2col and the final
/// conv wide), 76 frames per stream (past the 72-frame attention window), with f16 and f32
/// columns, implicit convolutions off so that every convolution has its im2col.
#[test]
fn wide_copies_match_the_scalar_kernels_bit_for_bit() {
    let Some(gpu) = common::open_gpu("wide_copies_match_the_scalar_kernels_bit_for_bit") else {
        return;
    };
    let fixture = case("codec_long_w72");
    let release = Model::load("random:1.7b", LoadOptions::default()).expect("random:1.7b");
    let release_codes: Vec<Frame> = (0..76u32)
        .map(|f| std::array::from_fn(|q| (f * 509 + q as u32 * 131 + 17) % 2048))
        .collect();
    for (name, model, codes) in [
        ("fixture", &fixture.model, &fixture.codes[..76]),
        ("random:1.7b", &release, &release_codes[..]),
    ] {
        let mut codec = dev_codec(&gpu, model, 3, 8);
        codec.set_graphs(false);
        codec.set_implicit_conv(ImplicitConv::Off);
        for p in [CodecPrecision::F16, CodecPrecision::F32] {
            codec.set_precision(&gpu, p).expect("precision");
            codec.set_wide_copies(false);
            let scalar = uneven_streams_bits(&gpu, &mut codec, codes);
            codec.set_wide_copies(true);
            let wide = uneven_streams_bits(&gpu, &mut codec, codes);
            let unclipped = scalar
                .iter()
                .flatten()
                .filter(|b| f32::from_bits(**b).abs() < 1.0)
                .count();
            eprintln!("{name} [{p:?}]: {unclipped} unclipped samples compared");
            assert!(unclipped > 0, "{name} [{p:?}]: every sample clipped");
            for (slot, (s, w)) in scalar.iter().zip(&wide).enumerate() {
                assert_eq!(
                    s.len(),
                    76 * codec.samples_per_frame(),
                    "{name} slot {slot}"
                );
                assert!(s == w, "{name} [{p:?}] slot {slot}: wide copies differ");
            }
        }
    }
}
