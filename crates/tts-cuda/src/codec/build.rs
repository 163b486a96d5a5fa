//! Builds the codec [`Program`] from the checkpoint's weights: validates the geometry,
//! re-lays out every layer (see `layers`), allocates the per-slot state and sizes the
//! scratch buffers while emitting the op list.
//!
//! Per pass (release geometry, N frames): RVQ lookups + projection GEMM; pre_conv (im2col +
//! GEMM); transformer input GEMM, 8 × [RMSNorm, QKV GEMM, attention, O GEMM (+residual),
//! RMSNorm, gate/up GEMM, SwiGLU, down GEMM (+residual)], RMSNorm, output GEMM; 2 × upsample
//! [2 phase GEMMs, depthwise conv + LayerNorm, pw1 GEMM, GELU, pw2 GEMM (+residual)];
//! decoder_in (im2col + GEMM); 4 × block [im2col with SnakeBeta + transposed-conv GEMM,
//! 3 × residual unit (im2col with SnakeBeta, conv GEMM, SnakeBeta in place, 1x1 GEMM
//! (+residual))]; final SnakeBeta + conv + clamp. 142 launches, 73 of them GEMMs.

use tts_model::checkpoint::HostTensor;
use tts_model::config::CodecConfig;
use tts_model::weights::{CodecW, LinearW};

use super::layers::{self, conv_padded, padded, Arena};
use super::plan::{Act, AttnGeo, Buf, Op, Pad, Program, View, FIXED_BUFS};
use super::state::StateLayout;
use crate::error::CudaError;

fn at(buf: Buf) -> View {
    View { buf, off: 0 }
}

fn shape_err(what: impl Into<String>) -> CudaError {
    CudaError::Shape(format!("codec: {}", what.into()))
}

struct Builder {
    ar: Arena,
    st: StateLayout,
    ops: Vec<Op>,
    per_frame: Vec<usize>,
    pads: Vec<Pad>,
}

impl Builder {
    fn need(&mut self, b: Buf, n: usize) {
        let i = b.index();
        if self.per_frame.len() <= i {
            self.per_frame.resize(i + 1, 0);
        }
        self.per_frame[i] = self.per_frame[i].max(n);
    }

    fn snake(&mut self, alpha: &HostTensor, beta: &HostTensor) -> Act {
        let (a, b) = layers::snake_params(&alpha.to_f32(), &beta.to_f32());
        Act::Snake {
            alpha: self.ar.push(&a),
            inv_beta: self.ar.push(&b),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        w: usize,
        ldw: usize,
        m: usize,
        k: usize,
        x: View,
        ldx: usize,
        c: View,
        ldc: usize,
        rate: usize,
        beta: f32,
    ) {
        self.need(x.buf, x.off + rate * ldx);
        self.need(c.buf, c.off + rate * ldc);
        self.ops.push(Op::Gemm {
            w,
            ldw,
            m,
            k,
            x,
            ldx,
            c,
            ldc,
            rate,
            beta,
        });
    }

    /// A causal conv (or transposed conv when `rows` came from `tconv_rows`): im2col of
    /// `taps` taps with `act` applied, then one GEMM with `m` output columns into `out`.
    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        x: View,
        ldx: usize,
        cin: usize,
        rate: usize,
        act: Act,
        taps: usize,
        dil: usize,
        rows: &[f32],
        m: usize,
        out: View,
        ldo: usize,
        beta: f32,
    ) {
        let ldcol = conv_padded(taps * cin);
        let ctx = (taps - 1) * dil;
        let hist = (ctx > 0).then(|| self.st.alloc(2 * ctx * cin));
        self.need(x.buf, x.off + rate * ldx);
        self.need(Buf::Col, rate * ldcol);
        self.ops.push(Op::Im2col {
            x,
            ldx,
            cin,
            taps,
            dil,
            rate,
            act,
            hist,
            col: at(Buf::Col),
            ldcol,
        });
        let w = self.ar.push(rows);
        self.gemm(
            w,
            ldcol,
            m,
            ldcol,
            at(Buf::Col),
            ldcol,
            out,
            ldo,
            rate,
            beta,
        );
    }
}

fn linear_w(l: &LinearW<HostTensor>, scale: Option<&[f32]>) -> (Vec<f32>, usize, usize) {
    let (n, k) = (l.weight.shape[0], l.weight.shape[1]);
    let b = l.bias.as_ref().map(|b| b.to_f32());
    (
        layers::linear_rows(&l.weight.to_f32(), b.as_deref(), n, k, scale),
        n,
        padded(k, b.is_some()),
    )
}

/// The codec's dimensions the program is built for.
#[derive(Debug, Clone, Copy)]
struct Dims {
    hd: usize,
    heads: usize,
    kvh: usize,
    /// Half the codebook dimension (each quantizer's lookup width).
    half: usize,
    cbd: usize,
    lat: usize,
    hid: usize,
    qd: usize,
    kvd: usize,
    inter: usize,
    ddim: usize,
    /// Samples per frame (the product of every upsampling factor).
    spf: usize,
    /// A latent row's padded width.
    ld_lat: usize,
}

/// Checks that the kernels take `cfg`'s geometry; its dimensions.
fn check(cfg: &CodecConfig) -> Result<Dims, CudaError> {
    let d = &cfg.decoder;
    let (hd, heads, kvh) = (d.head_dim(), d.num_attention_heads, d.num_key_value_heads);
    if hd == 0 || !hd.is_multiple_of(2) || hd > 128 {
        return Err(shape_err(format!(
            "head_dim {hd} must be even and at most 128"
        )));
    }
    if kvh == 0 || !heads.is_multiple_of(kvh) {
        return Err(shape_err(format!("{heads} heads over {kvh} kv heads")));
    }
    if d.sliding_window == 0 || d.sliding_window > 1024 {
        return Err(shape_err(format!(
            "sliding_window {} not in 1..=1024",
            d.sliding_window
        )));
    }
    if d.latent_dim > 4096 {
        return Err(shape_err(format!("latent_dim {} above 4096", d.latent_dim)));
    }
    if d.num_quantizers < 2 || !d.codebook_dim.is_multiple_of(2) {
        return Err(shape_err("needs >= 2 quantizers and an even codebook_dim"));
    }
    let spf = d.total_upsample();
    if spf != cfg.decode_upsample_rate {
        return Err(shape_err(format!(
            "upsampling factors give {spf} samples per frame, config says {}",
            cfg.decode_upsample_rate
        )));
    }
    let (half, cbd, lat, hid) = (
        d.codebook_dim / 2,
        d.codebook_dim,
        d.latent_dim,
        d.hidden_size,
    );
    Ok(Dims {
        hd,
        heads,
        kvh,
        half,
        cbd,
        lat,
        hid,
        qd: heads * hd,
        kvd: kvh * hd,
        inter: d.intermediate_size,
        ddim: d.decoder_dim,
        spf,
        ld_lat: padded(lat, true),
    })
}

/// Builds the program for `cfg` with KV rings of `ring` positions per layer.
pub fn build(cfg: &CodecConfig, w: CodecW<HostTensor>, ring: usize) -> Result<Program, CudaError> {
    let dm = check(cfg)?;
    let mut b = Builder {
        ar: Arena::default(),
        st: StateLayout::default(),
        ops: Vec::new(),
        per_frame: vec![0; FIXED_BUFS],
        pads: Vec::new(),
    };
    b.rvq(&w, cfg, dm)?;
    let ld_p = b.pre_conv(&w, dm);
    b.transformer(&w, dm, ld_p, ring);
    let (src, rate) = b.upsample(&w, dm)?;
    b.decoder_in(&w, dm, src, rate);
    let (cur, cin, rate) = b.decoder_blocks(&w, dm, rate)?;
    b.final_conv(&w, cur, cin, rate);
    Ok(b.finish(cfg, dm, ring))
}

impl Builder {
    /// 1. RVQ: lookups then both output projections in one GEMM.
    fn rvq(
        &mut self,
        w: &CodecW<HostTensor>,
        cfg: &CodecConfig,
        dm: Dims,
    ) -> Result<(), CudaError> {
        let d = &cfg.decoder;
        let (half, cbd) = (dm.half, dm.cbd);
        let mut tables = Vec::with_capacity(d.num_quantizers * d.codebook_size * half);
        for (sum, usage) in w.rvq_first.codebooks.iter().chain(&w.rvq_rest.codebooks) {
            tables.extend(layers::codebook(&sum.to_f32(), &usage.to_f32(), half));
        }
        if tables.len() != d.num_quantizers * d.codebook_size * half {
            return Err(shape_err(
                "RVQ codebooks do not match num_quantizers x codebook_size",
            ));
        }
        let tables = self.ar.push(&tables);
        let proj = layers::rvq_projection(
            &w.rvq_first.output_proj.to_f32(),
            &w.rvq_rest.output_proj.to_f32(),
            cbd,
            half,
        );
        let proj = self.ar.push(&proj);
        self.need(Buf::Z, 2 * half);
        self.ops.push(Op::Rvq {
            tables,
            out: at(Buf::Z),
            ld: 2 * half,
        });
        self.gemm(
            proj,
            2 * half,
            cbd,
            2 * half,
            at(Buf::Z),
            2 * half,
            at(Buf::X0),
            cbd,
            1,
            0.0,
        );
        Ok(())
    }

    /// 2. pre_conv (k3) into P, which feeds the biased input projection; P's row width.
    fn pre_conv(&mut self, w: &CodecW<HostTensor>, dm: Dims) -> usize {
        let (cbd, lat) = (dm.cbd, dm.lat);
        let ld_p = padded(lat, w.input_proj.bias.is_some());
        let k = w.pre_conv.weight.shape[2];
        let rows = layers::conv_rows(
            &w.pre_conv.weight.to_f32(),
            &w.pre_conv.bias.to_f32(),
            lat,
            cbd,
            k,
            conv_padded(k * cbd),
        );
        self.conv(
            at(Buf::X0),
            cbd,
            cbd,
            1,
            Act::None,
            k,
            1,
            &rows,
            lat,
            at(Buf::P),
            ld_p,
            0.0,
        );
        self.pads.push(Pad {
            buf: Buf::P,
            ld: ld_p,
            c: lat,
            rate: 1,
        });
        ld_p
    }

    /// 3. transformer at the frame rate, its output projected into T0.
    fn transformer(&mut self, w: &CodecW<HostTensor>, dm: Dims, ld_p: usize, ring: usize) {
        let (hid, lat, qd, kvd, inter, ld_lat) =
            (dm.hid, dm.lat, dm.qd, dm.kvd, dm.inter, dm.ld_lat);
        let (wi, _, kpi) = linear_w(&w.input_proj, None);
        let wi = self.ar.push(&wi);
        self.gemm(wi, kpi, hid, kpi, at(Buf::P), ld_p, at(Buf::H), hid, 1, 0.0);
        let ld_hn = padded(hid, w.output_proj.bias.is_some());
        for l in &w.layers {
            let n1 = self.ar.push(&l.input_layernorm.to_f32());
            let mut qkv = l.q_proj.to_f32();
            qkv.extend(l.k_proj.to_f32());
            qkv.extend(l.v_proj.to_f32());
            let qkv = self.ar.push(&qkv);
            let o = layers::linear_rows(
                &l.o_proj.to_f32(),
                None,
                hid,
                qd,
                Some(&l.attn_layer_scale.to_f32()),
            );
            let o = self.ar.push(&o);
            let n2 = self.ar.push(&l.post_attention_layernorm.to_f32());
            let mut gu = l.gate_proj.to_f32();
            gu.extend(l.up_proj.to_f32());
            let gu = self.ar.push(&gu);
            let down = layers::linear_rows(
                &l.down_proj.to_f32(),
                None,
                hid,
                inter,
                Some(&l.mlp_layer_scale.to_f32()),
            );
            let down = self.ar.push(&down);
            let kv = self.st.alloc(2 * ring * kvd);

            self.need(Buf::Hn, ld_hn);
            self.ops.push(Op::RmsNorm {
                x: at(Buf::H),
                ldx: hid,
                c: hid,
                w: n1,
                out: at(Buf::Hn),
                ldo: ld_hn,
            });
            self.gemm(
                qkv,
                hid,
                qd + 2 * kvd,
                hid,
                at(Buf::Hn),
                ld_hn,
                at(Buf::Qkv),
                qd + 2 * kvd,
                1,
                0.0,
            );
            self.need(Buf::Attn, qd);
            self.ops.push(Op::Attention {
                qkv: at(Buf::Qkv),
                out: at(Buf::Attn),
                kv,
            });
            self.gemm(o, qd, hid, qd, at(Buf::Attn), qd, at(Buf::H), hid, 1, 1.0);
            self.ops.push(Op::RmsNorm {
                x: at(Buf::H),
                ldx: hid,
                c: hid,
                w: n2,
                out: at(Buf::Hn),
                ldo: ld_hn,
            });
            self.gemm(
                gu,
                hid,
                2 * inter,
                hid,
                at(Buf::Hn),
                ld_hn,
                at(Buf::Gu),
                2 * inter,
                1,
                0.0,
            );
            self.need(Buf::Sw, inter);
            self.ops.push(Op::SwiGlu {
                gu: at(Buf::Gu),
                out: at(Buf::Sw),
            });
            self.gemm(
                down,
                inter,
                hid,
                inter,
                at(Buf::Sw),
                inter,
                at(Buf::H),
                hid,
                1,
                1.0,
            );
        }
        let nf = self.ar.push(&w.norm.to_f32());
        self.need(Buf::Hn, ld_hn);
        self.ops.push(Op::RmsNorm {
            x: at(Buf::H),
            ldx: hid,
            c: hid,
            w: nf,
            out: at(Buf::Hn),
            ldo: ld_hn,
        });
        let (wo, _, kpo) = linear_w(&w.output_proj, None);
        let wo = self.ar.push(&wo);
        self.gemm(
            wo,
            kpo,
            lat,
            kpo,
            at(Buf::Hn),
            ld_hn,
            at(Buf::T0),
            ld_lat,
            1,
            0.0,
        );
        self.pads.push(Pad {
            buf: Buf::T0,
            ld: ld_lat,
            c: lat,
            rate: 1,
        });
    }

    /// 4. upsample stages: k = s transposed conv (one GEMM per output phase, written with a
    ///    stride of s rows), then ConvNeXt with its residual added by the pw2 GEMM. The
    ///    last stage's output and its rate (samples per frame so far).
    fn upsample(&mut self, w: &CodecW<HostTensor>, dm: Dims) -> Result<(View, usize), CudaError> {
        let (lat, ld_lat) = (dm.lat, dm.ld_lat);
        let mut src = at(Buf::T0);
        let mut rate = 1;
        for (u, up) in w.upsample.iter().enumerate() {
            let f = up.factor;
            if up.tconv.weight.shape != [lat, lat, f] {
                return Err(shape_err(format!(
                    "upsample {u}: transposed conv is not kernel = stride = {f}"
                )));
            }
            let rows = layers::tconv_rows(
                &up.tconv.weight.to_f32(),
                &up.tconv.bias.to_f32(),
                lat,
                lat,
                f,
                ld_lat,
            );
            let tw = self.ar.push(&rows);
            let out = at(Buf::Up(u));
            for q in 0..f {
                let c = View {
                    buf: Buf::Up(u),
                    off: q * ld_lat,
                };
                self.gemm(
                    tw + q * lat * ld_lat,
                    ld_lat,
                    lat,
                    ld_lat,
                    src,
                    ld_lat,
                    c,
                    f * ld_lat,
                    rate,
                    0.0,
                );
            }
            rate *= f;
            self.need(Buf::Up(u), rate * ld_lat);
            self.pads.push(Pad {
                buf: Buf::Up(u),
                ld: ld_lat,
                c: lat,
                rate,
            });

            let cn = &up.convnext;
            let k = cn.dwconv.weight.shape[2];
            let taps = self
                .ar
                .push(&layers::depthwise_taps(&cn.dwconv.weight.to_f32(), lat, k));
            let bias = self.ar.push(&cn.dwconv.bias.to_f32());
            let ln_w = self.ar.push(&cn.norm_weight.to_f32());
            let ln_b = self.ar.push(&cn.norm_bias.to_f32());
            let hist = self.st.alloc(2 * (k - 1) * lat);
            let ld_d = padded(lat, cn.pwconv1.bias.is_some());
            self.need(Buf::D, rate * ld_d);
            self.ops.push(Op::DwLn {
                x: out,
                ldx: ld_lat,
                taps,
                bias,
                k,
                ln_w,
                ln_b,
                rate,
                hist,
                out: at(Buf::D),
                ldo: ld_d,
            });
            let (w1, n1, kp1) = linear_w(&cn.pwconv1, None);
            let w1 = self.ar.push(&w1);
            let ld_e = padded(n1, cn.pwconv2.bias.is_some());
            self.gemm(
                w1,
                kp1,
                n1,
                kp1,
                at(Buf::D),
                ld_d,
                at(Buf::E),
                ld_e,
                rate,
                0.0,
            );
            self.ops.push(Op::ActPad {
                x: at(Buf::E),
                ld: ld_e,
                c: n1,
                rate,
                act: Act::Gelu,
            });
            let (w2, _, kp2) = linear_w(&cn.pwconv2, Some(&cn.gamma.to_f32()));
            let w2 = self.ar.push(&w2);
            self.gemm(w2, kp2, lat, kp2, at(Buf::E), ld_e, out, ld_lat, rate, 1.0);
            src = out;
        }
        Ok((src, rate))
    }

    /// 5. decoder_in: causal conv k7 latent -> decoder_dim, into XA.
    fn decoder_in(&mut self, w: &CodecW<HostTensor>, dm: Dims, src: View, rate: usize) {
        let (lat, ld_lat, ddim) = (dm.lat, dm.ld_lat, dm.ddim);
        let k = w.decoder_in.weight.shape[2];
        let rows = layers::conv_rows(
            &w.decoder_in.weight.to_f32(),
            &w.decoder_in.bias.to_f32(),
            ddim,
            lat,
            k,
            conv_padded(k * lat),
        );
        self.conv(
            src,
            ld_lat,
            lat,
            rate,
            Act::None,
            k,
            1,
            &rows,
            ddim,
            at(Buf::XA),
            ddim,
            0.0,
        );
    }

    /// 6. decoder blocks, ping-ponging between XA and XB: the buffer holding the last
    ///    block's output, its channels and the rate after it.
    fn decoder_blocks(
        &mut self,
        w: &CodecW<HostTensor>,
        dm: Dims,
        rate: usize,
    ) -> Result<(Buf, usize, usize), CudaError> {
        let ddim = dm.ddim;
        let mut rate = rate;
        let (mut cur, mut other) = (Buf::XA, Buf::XB);
        let mut cin = ddim;
        for (i, blk) in w.blocks.iter().enumerate() {
            let (r, cout) = (blk.rate, blk.out_dim);
            let kt = blk.tconv.weight.shape[2];
            if !kt.is_multiple_of(r) || blk.tconv.weight.shape[..2] != [cin, cout] {
                return Err(shape_err(format!(
                    "block {i}: transposed conv {:?} for rate {r}",
                    blk.tconv.weight.shape
                )));
            }
            let snake = self.snake(&blk.snake.alpha, &blk.snake.beta);
            let rows = layers::tconv_rows(
                &blk.tconv.weight.to_f32(),
                &blk.tconv.bias.to_f32(),
                cin,
                cout,
                r,
                conv_padded(kt / r * cin),
            );
            self.conv(
                at(cur),
                cin,
                cin,
                rate,
                snake,
                kt / r,
                1,
                &rows,
                r * cout,
                at(other),
                r * cout,
                0.0,
            );
            rate *= r;
            let ld_h = padded(cout, true);
            for ru in &blk.res_units {
                let a1 = self.snake(&ru.act1.alpha, &ru.act1.beta);
                let k1 = ru.conv1.weight.shape[2];
                let rows = layers::conv_rows(
                    &ru.conv1.weight.to_f32(),
                    &ru.conv1.bias.to_f32(),
                    cout,
                    cout,
                    k1,
                    conv_padded(k1 * cout),
                );
                self.conv(
                    at(other),
                    cout,
                    cout,
                    rate,
                    a1,
                    k1,
                    ru.dilation,
                    &rows,
                    cout,
                    at(Buf::Hb),
                    ld_h,
                    0.0,
                );
                let a2 = self.snake(&ru.act2.alpha, &ru.act2.beta);
                self.ops.push(Op::ActPad {
                    x: at(Buf::Hb),
                    ld: ld_h,
                    c: cout,
                    rate,
                    act: a2,
                });
                let k2 = ru.conv2.weight.shape[2];
                if k2 != 1 {
                    return Err(shape_err(format!(
                        "block {i}: residual conv2 kernel {k2}, expected 1"
                    )));
                }
                let rows = layers::conv_rows(
                    &ru.conv2.weight.to_f32(),
                    &ru.conv2.bias.to_f32(),
                    cout,
                    cout,
                    1,
                    ld_h,
                );
                let w2 = self.ar.push(&rows);
                self.gemm(
                    w2,
                    ld_h,
                    cout,
                    ld_h,
                    at(Buf::Hb),
                    ld_h,
                    at(other),
                    cout,
                    rate,
                    1.0,
                );
            }
            std::mem::swap(&mut cur, &mut other);
            cin = cout;
        }
        Ok((cur, cin, rate))
    }

    /// 7. final SnakeBeta + conv (-> 1 channel) + clamp.
    fn final_conv(&mut self, w: &CodecW<HostTensor>, cur: Buf, cin: usize, rate: usize) {
        let act = self.snake(&w.final_snake.alpha, &w.final_snake.beta);
        let k = w.final_conv.weight.shape[2];
        let fw = self
            .ar
            .push(&layers::final_taps(&w.final_conv.weight.to_f32(), cin, k));
        let bias = w.final_conv.bias.to_f32().first().copied().unwrap_or(0.0);
        let hist = self.st.alloc(2 * (k - 1) * cin);
        self.need(cur, rate * cin);
        self.need(Buf::Pcm, rate);
        self.ops.push(Op::Final {
            x: at(cur),
            c: cin,
            k,
            act,
            w: fw,
            bias,
            rate,
            hist,
        });
    }

    /// The program: the ops and buffers built, the attention's geometry with RoPE inverse
    /// frequencies computed in f32 exactly as the CPU reference does.
    fn finish(mut self, cfg: &CodecConfig, dm: Dims, ring: usize) -> Program {
        let d = &cfg.decoder;
        let Dims {
            hd,
            heads,
            kvh,
            half,
            lat,
            qd,
            kvd,
            inter,
            spf,
            ..
        } = dm;
        let theta = d.rope_theta as f32;
        let inv: Vec<f32> = (0..hd / 2)
            .map(|i| 1.0 / theta.powf((2 * i) as f32 / hd as f32))
            .collect();
        let inv_freq = self.ar.push(&inv);
        Program {
            arena: self.ar,
            ops: self.ops,
            per_frame: self.per_frame,
            pads: self.pads,
            state_stride: self.st.finish(),
            attn: AttnGeo {
                heads,
                kv_heads: kvh,
                head_dim: hd,
                window: d.sliding_window,
                ring,
                scale: 1.0 / (hd as f32).sqrt(),
                inv_freq,
                ld_qkv: qd + 2 * kvd,
                ld_attn: qd,
                inter,
            },
            eps: d.rms_norm_eps as f32,
            ln_eps: 1e-6,
            samples_per_frame: spf,
            num_quantizers: d.num_quantizers,
            codebook_size: d.codebook_size,
            half,
            latent: lat,
        }
    }
}
