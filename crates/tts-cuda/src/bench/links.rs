//! Where a batch-1 link's time goes (`bench-stages --link-costs N`): the code predictor at
//! one row is ~390 dependent launches of ~3.9 µs, most of them `gemv_staged_m1`, where an
//! empty dependent launch (`chain_link`) costs ~0.9 µs. These chains rebuild a link piece
//! by piece: a one-row GEMV's data pattern without weights (`chain_row`), then chains of
//! `gemv_staged_m1` launches over layer shapes, from a tiny one to the code predictor's
//! four matrices, with and without the norm and residual, followed by another linear
//! layer (its launch may start early, `linear::StagedTrigger`) or not, and with weights that
//! stay in L2. The staged chains launch through `linear::linear_then`, the path the stages
//! take. Timing only: they run over zero weights.

use crate::device::{Arg, DBuf, Gpu, Graph, SmallCall};
use crate::error::CudaError;
use crate::linear::{linear_then, staged_plan, Act, GemmScratch, Linear, NextLinear, Rows};

/// One chain's cost per link.
#[derive(Debug, Clone)]
pub struct LinkCost {
    pub name: String,
    pub links: usize,
    /// Median device time per link (µs).
    pub us: f64,
    /// Weight bytes a link streams, on average.
    pub weight_bytes: usize,
}

/// One layer of a staged chain: `n × k` weights, its activation, the input normed (unit
/// gains) and a residual added.
#[derive(Debug, Clone, Copy)]
struct Layer {
    n: usize,
    k: usize,
    act: Act,
    norm: bool,
    res: bool,
}

const fn plain(n: usize, k: usize) -> Layer {
    Layer {
        n,
        k,
        act: Act::None,
        norm: false,
        res: false,
    }
}

/// The code predictor's layer (1.7B) as its one-row GEMVs see it: QKV and gate/up read a
/// normed input, O and down add the residual (attention left out).
const CP_LAYER: [Layer; 4] = [
    Layer {
        n: 4096,
        k: 1024,
        act: Act::None,
        norm: true,
        res: false,
    },
    Layer {
        n: 1024,
        k: 2048,
        act: Act::None,
        norm: false,
        res: true,
    },
    Layer {
        n: 6144,
        k: 1024,
        act: Act::SwigluPairs,
        norm: true,
        res: false,
    },
    Layer {
        n: 1024,
        k: 3072,
        act: Act::None,
        norm: false,
        res: true,
    },
];

/// Distinct weight bytes a chain cycles through, so its weights come from HBM (the H200's
/// L2 is 50 MB).
const WEIGHT_CYCLE_BYTES: usize = 200 << 20;

/// Every chain of the ladder, `links` links each.
pub fn link_costs(gpu: &Gpu, links: usize) -> Result<Vec<LinkCost>, CudaError> {
    let mut out = vec![
        LinkCost {
            name: "chain_link: one value through L2".into(),
            links,
            us: super::chain_costs(gpu, links)?.launch_us,
            weight_bytes: 0,
        },
        row_chain(gpu, links, 1024)?,
        row_chain(gpu, links, 4096)?,
    ];
    let with = |l: Layer, norm: bool, res: bool| Layer { norm, res, ..l };
    let cp_plain: Vec<Layer> = CP_LAYER.iter().map(|&l| with(l, false, false)).collect();
    // the last field: each launch is followed by another linear layer's (`linear_then`'s
    // `next`), so it triggers as `gpu.staged_trigger` says, else after its wait
    let (early, wait) = (true, false);
    let one = |n, k| vec![plain(n, k)];
    let cases: Vec<(&str, Vec<Layer>, bool, bool)> = vec![
        ("staged 256x256", one(256, 256), false, wait),
        ("staged 1024x1024", one(1024, 1024), false, wait),
        (
            "staged 1024x1024, weights in L2",
            one(1024, 1024),
            true,
            wait,
        ),
        (
            "staged 1024x1024, norm + residual",
            vec![with(plain(1024, 1024), true, true)],
            false,
            wait,
        ),
        (
            "staged 1024x1024, norm",
            vec![with(plain(1024, 1024), true, false)],
            false,
            wait,
        ),
        (
            "staged 1024x1024, residual",
            vec![with(plain(1024, 1024), false, true)],
            false,
            wait,
        ),
        ("staged 4096x1024", one(4096, 1024), false, wait),
        (
            "staged 4096x1024, next linear",
            one(4096, 1024),
            false,
            early,
        ),
        (
            "staged code-predictor layer",
            CP_LAYER.to_vec(),
            false,
            wait,
        ),
        (
            "staged code-predictor layer, next linear",
            CP_LAYER.to_vec(),
            false,
            early,
        ),
        (
            "staged code-predictor layer, no norm or residual",
            cp_plain,
            false,
            wait,
        ),
    ];
    for (name, layers, shared, next) in cases {
        let name = if next {
            format!("{name} (trigger {:?})", gpu.staged_trigger)
        } else {
            name.to_string()
        };
        out.push(staged_chain(gpu, links, &name, &layers, shared, next)?);
    }
    Ok(out)
}

/// `chain_row` over rows of `k` values, 128 blocks; checks the value carried down.
fn row_chain(gpu: &Gpu, links: usize, k: usize) -> Result<LinkCost, CudaError> {
    const BLOCKS: u32 = 128;
    let mut v: DBuf<f32> = gpu.zeros((links + 1) * k)?;
    let ptr = v.ptr;
    let g = super::chain_graph(gpu, "chain_row", links, BLOCKS, |i| {
        vec![Arg::P(ptr), Arg::I(k as i32), Arg::I(i)]
    })?;
    let ms = super::median_of_five(|| {
        gpu.write(&mut v, &vec![0.0f32; (links + 1) * k])?;
        let t = gpu.time_ms(|| g.launch())?;
        let end = gpu.read(&v, (links + 1) * k)?[links * k];
        if end != links as f32 {
            return Err(CudaError::Shape(format!(
                "chain_row of {links} links ended at {end}, not {links}"
            )));
        }
        Ok(t)
    })?;
    let us = ms * 1e3 / links as f64;
    Ok(LinkCost {
        name: format!("chain_row: rows of {k} through L2, 128 blocks"),
        links,
        us,
        weight_bytes: 0,
    })
}

/// A chain of `links` one-row `linear_then` calls in the staged mode (`gemv_staged_m1`)
/// cycling through `layers`, each reading the row the call before wrote; with `next`, each
/// told that another linear layer follows. `shared`: one weight buffer per layer (it stays
/// in L2); else enough copies that the chain streams them from HBM.
fn staged_chain(
    gpu: &Gpu,
    links: usize,
    name: &str,
    layers: &[Layer],
    shared: bool,
    next: bool,
) -> Result<LinkCost, CudaError> {
    let sms = gpu.sm_count as usize;
    // on another path the chain would time another kernel under this name
    if !gpu.staged {
        return Err(CudaError::Unavailable(format!(
            "{name}: the staged GEMV does not run on this device"
        )));
    }
    if let Some(l) = layers.iter().find(|l| staged_plan(l.n, l.k, sms).is_none()) {
        return Err(CudaError::Shape(format!(
            "{name}: {}x{} does not fit gemv_staged",
            l.n, l.k
        )));
    }
    let width = layers.iter().map(|l| l.n.max(l.k)).max().unwrap_or(1);
    let cycle_bytes: usize = layers.iter().map(|l| l.n * l.k * 2).sum();
    let copies = if shared {
        1
    } else {
        WEIGHT_CYCLE_BYTES
            .div_ceil(cycle_bytes.max(1))
            .min(links.div_ceil(layers.len()).max(1))
    };
    let mut weights: Vec<Vec<Linear>> = Vec::with_capacity(copies);
    for _ in 0..copies {
        weights.push(
            layers
                .iter()
                .map(|l| {
                    Ok(Linear {
                        w: gpu.zeros::<u16>(l.n * l.k)?,
                        n: l.n,
                        k: l.k,
                        bias: None,
                        fp8: None,
                    })
                })
                .collect::<Result<_, CudaError>>()?,
        );
    }
    let gains = gpu.upload(&vec![1.0f32; width])?;
    let residual: DBuf<f32> = gpu.zeros(width)?;
    let rows: DBuf<f32> = gpu.zeros((links + 1) * width)?;
    let scratch = GemmScratch::new(gpu, 1, width, width)?;
    let call = |gpu: &Gpu, i: usize| {
        let (j, l) = (i % layers.len(), layers[i % layers.len()]);
        let x = rows.ptr + (i * width * 4) as u64;
        let after = layers[(i + 1) % layers.len()];
        linear_then(
            gpu,
            &weights[(i / layers.len()) % copies][j],
            Rows {
                ptr: x,
                ld: width,
                count: 1,
            },
            l.norm.then_some((gains.ptr, 1e-6)),
            l.act,
            l.res.then_some((residual.ptr, 0)),
            x + (width * 4) as u64,
            width,
            &scratch,
            next.then_some(NextLinear {
                n: after.n,
                norm: None,
            }),
        )
    };
    let g = gpu.with_small_call(SmallCall::Staged, || {
        Graph::capture(gpu, |gpu| (0..links).try_for_each(|i| call(gpu, i)))
    })?;
    let ms = super::median_of_five(|| gpu.time_ms(|| g.launch()))?;
    Ok(LinkCost {
        name: name.into(),
        links,
        us: ms * 1e3 / links as f64,
        weight_bytes: cycle_bytes / layers.len(),
    })
}

/// The ladder as a table: µs per link and the weight bandwidth it implies.
pub fn link_table(costs: &[LinkCost]) -> String {
    let mut s = format!(
        "{:<52} {:>8} {:>10} {:>8}\n",
        "chain", "links", "us/link", "TB/s"
    );
    for c in costs {
        let tbs = c.weight_bytes as f64 / (c.us * 1e-6) / 1e12;
        s.push_str(&format!(
            "{:<52} {:>8} {:>10.2} {:>8.2}\n",
            c.name, c.links, c.us, tbs
        ));
    }
    s
}
