//! One-row MLP timings for `bench-stages --kernels`: a layer's gate/up and down as two
//! launches (the path each stage takes without `CudaOptions::fused_mlp`) against the fused
//! kernel (`mlp_fused.cu`), on the release shapes.

use super::KernelTiming;
use crate::device::{DBuf, Gpu, Graph, SmallCall};
use crate::error::CudaError;
use crate::linear::{fused_mlp, fused_mlp_call, linear, linear_then, Act, GemmScratch, Linear};
use crate::linear::{NextLinear, Rows};

/// Times 64 one-row MLPs in a graph, cycling through enough weight copies to defeat the
/// L2 cache, for the code predictor's shape in a staged call (two staged GEMVs against
/// `mlp_fused_m1` and against the 4-step stream kernel) and the 1.7B talker's outside one
/// (two GEMVs against the 8-step stream kernel). The bandwidth column counts the MLP's
/// weights (gate, up and down).
pub fn bench_mlp(gpu: &Gpu) -> Result<Vec<KernelTiming>, CudaError> {
    let shapes = [
        ("cp", 1024usize, 3072usize, SmallCall::Staged),
        ("talker", 2048, 6144, SmallCall::Default),
    ];
    let mut scratch = GemmScratch::new(gpu, 1, 6144, 12288)?;
    let x: DBuf<f32> = gpu.upload(&vec![0.01f32; 2048])?;
    let gu: DBuf<f32> = gpu.zeros(6144)?;
    let gain: DBuf<f32> = gpu.upload(&vec![1.0f32; 2048])?;
    let norm = (gain.ptr, 1e-6f32);
    let mut out = Vec::new();
    for (name, h, inter, mode) in shapes {
        let variants: &[&str] = if mode == SmallCall::Staged {
            &["0", "staged", "staged-stream"]
        } else {
            &["0", "stream"]
        };
        let bytes = 6 * h * inter;
        let copies = (256 << 20) / bytes + 1;
        let w = |n: usize, k: usize| -> Vec<u16> {
            (0..n * k)
                .map(|i| half::bf16::from_f32(((i % 89) as f32 - 44.0) * 1e-4).to_bits())
                .collect()
        };
        let (wgu, wd) = (w(2 * inter, h), w(h, inter));
        let layers: Vec<(Linear, Linear)> = (0..copies)
            .map(|_| {
                Ok((
                    Linear::new(gpu, &wgu, 2 * inter, h, None)?,
                    Linear::new(gpu, &wd, h, inter, None)?,
                ))
            })
            .collect::<Result<_, CudaError>>()?;
        let row = |ptr, width| Rows {
            ptr,
            ld: width,
            count: 1,
        };
        for &variant in variants {
            scratch.paths.fused_mlp = variant.parse().map_err(CudaError::Shape)?;
            let fused = variant != "0";
            let scratch = &scratch;
            let plan = gpu.with_small_call(mode, || {
                let (g, d) = &layers[0];
                fused_mlp_call(gpu, scratch, (g, d), row(x.ptr, h))
            });
            if fused && plan.is_none() {
                continue; // the kernel does not take this shape on this device
            }
            let launches = 64;
            let enqueue = |gpu: &Gpu| -> Result<(), CudaError> {
                gpu.with_small_call(mode, || {
                    for i in 0..launches {
                        let (g, d) = &layers[i % layers.len()];
                        let xr = row(x.ptr, h);
                        if fused {
                            if let Some(p) = fused_mlp_call(gpu, scratch, (g, d), xr) {
                                fused_mlp(gpu, scratch, (g, d), xr, norm, p, true)?;
                            }
                            continue;
                        }
                        let next = Some(NextLinear { n: h, norm: None });
                        let (swiglu, res) = (Act::SwigluPairs, Some((x.ptr, h)));
                        linear_then(
                            gpu,
                            g,
                            xr,
                            Some(norm),
                            swiglu,
                            None,
                            gu.ptr,
                            inter,
                            scratch,
                            next,
                        )?;
                        linear(
                            gpu,
                            d,
                            row(gu.ptr, inter),
                            None,
                            Act::None,
                            res,
                            x.ptr,
                            h,
                            scratch,
                        )?;
                    }
                    Ok(())
                })
            };
            let g = Graph::capture(gpu, enqueue)?;
            g.launch()?;
            let ms = gpu.time_ms(|| (0..5).try_for_each(|_| g.launch()))?;
            let us = ms * 1e3 / (5 * launches) as f64;
            let label = match plan.filter(|_| fused) {
                None => "mlp gate_up+down",
                Some(p) => p.kernel(h).0,
            };
            out.push(KernelTiming {
                name: format!("{label} {name} [{h}x{inter}] m=1"),
                us,
                tb_per_s: bytes as f64 / (us * 1e-6) / 1e12,
            });
        }
    }
    Ok(out)
}
