//! Where a batch-1 link's time goes (`bench-stages --link-costs N`): the code predictor at
//! one row is ~390 dependent launches of ~3.9 µs, most of them `gemv_staged_m1`, where an
//! empty dependent launch (`chain_link`) costs ~0.9 µs. These chains rebuild a link piece
//! by piece: a one-row GEMV's data pattern without weights (`chain_row`), then chains of
//! `gemv_staged_m1` launches over layer shapes, from a tiny one to the code predictor's
//! four matrices, with and without the norm and residual, each way of triggering the next
//! launch (`linear::StagedTrigger`), and weights that stay in L2. Timing only: the staged chains run over zero weights.

use crate::device::{Arg, DBuf, Gpu, Graph, SmallCall};
use crate::error::CudaError;
use crate::linear::{gemv_ksplit, staged_plan, StagedTrigger};

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

/// One layer of a staged chain: `n × k` weights, SwiGLU pairs (`act` 2) or none, the
/// input normed (unit gains) and a residual added.
#[derive(Debug, Clone, Copy)]
struct Layer {
    n: usize,
    k: usize,
    act: i32,
    norm: bool,
    res: bool,
}

const fn plain(n: usize, k: usize) -> Layer {
    Layer {
        n,
        k,
        act: 0,
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
        act: 0,
        norm: true,
        res: false,
    },
    Layer {
        n: 1024,
        k: 2048,
        act: 0,
        norm: false,
        res: true,
    },
    Layer {
        n: 6144,
        k: 1024,
        act: 2,
        norm: true,
        res: false,
    },
    Layer {
        n: 1024,
        k: 3072,
        act: 0,
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
    use StagedTrigger::{Early, Wait};
    let one = |n, k| vec![plain(n, k)];
    let cases: Vec<(&str, Vec<Layer>, bool, StagedTrigger)> = vec![
        ("staged 256x256", one(256, 256), false, Wait),
        ("staged 1024x1024", one(1024, 1024), false, Wait),
        (
            "staged 1024x1024, weights in L2",
            one(1024, 1024),
            true,
            Wait,
        ),
        (
            "staged 1024x1024, norm + residual",
            vec![with(plain(1024, 1024), true, true)],
            false,
            Wait,
        ),
        (
            "staged 1024x1024, norm",
            vec![with(plain(1024, 1024), true, false)],
            false,
            Wait,
        ),
        (
            "staged 1024x1024, residual",
            vec![with(plain(1024, 1024), false, true)],
            false,
            Wait,
        ),
        ("staged 4096x1024", one(4096, 1024), false, Wait),
        (
            "staged 4096x1024, trigger early",
            one(4096, 1024),
            false,
            Early,
        ),
        (
            "staged code-predictor layer",
            CP_LAYER.to_vec(),
            false,
            Wait,
        ),
        (
            "staged code-predictor layer, trigger early",
            CP_LAYER.to_vec(),
            false,
            Early,
        ),
        (
            "staged code-predictor layer, no norm or residual",
            cp_plain,
            false,
            Wait,
        ),
    ];
    for (name, layers, shared, trigger) in cases {
        out.push(staged_chain(gpu, links, name, &layers, shared, trigger)?);
    }
    Ok(out)
}

/// The median of five timed runs of `run` after one untimed, in µs per link.
fn per_link(
    gpu: &Gpu,
    links: usize,
    run: &dyn Fn() -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    let mut ms = Vec::with_capacity(5);
    for i in 0..6 {
        let t = gpu.time_ms(run)?;
        if i > 0 {
            ms.push(t);
        }
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2] * 1e3 / links as f64)
}

/// `chain_row` over rows of `k` values, 128 blocks; checks the value carried down.
fn row_chain(gpu: &Gpu, links: usize, k: usize) -> Result<LinkCost, CudaError> {
    const BLOCKS: u32 = 128;
    let mut v: DBuf<f32> = gpu.zeros((links + 1) * k)?;
    let ptr = v.ptr;
    let g = Graph::capture(gpu, |gpu| {
        (0..links).try_for_each(|i| {
            gpu.launch(
                "chain_row",
                (BLOCKS, 1, 1),
                256,
                &[Arg::P(ptr), Arg::I(k as i32), Arg::I(i as i32)],
            )
        })
    })?;
    let us = per_link(gpu, links, &|| g.launch())?;
    gpu.write(&mut v, &vec![0.0f32; (links + 1) * k])?;
    g.launch()?;
    let end = gpu.read(&v, (links + 1) * k)?[links * k];
    if end != links as f32 {
        return Err(CudaError::Shape(format!(
            "chain_row of {links} links ended at {end}, not {links}"
        )));
    }
    Ok(LinkCost {
        name: format!("chain_row: rows of {k} through L2, 128 blocks"),
        links,
        us,
        weight_bytes: 0,
    })
}

/// A chain of `links` `gemv_staged_m1` launches cycling through `layers`, each reading the
/// row the launch before wrote, each letting the next launch by `trigger`. `shared`: one
/// weight buffer per layer (it stays in L2); else enough copies that the chain streams
/// them from HBM.
fn staged_chain(
    gpu: &Gpu,
    links: usize,
    name: &str,
    layers: &[Layer],
    shared: bool,
    trigger: StagedTrigger,
) -> Result<LinkCost, CudaError> {
    let sms = gpu.sm_count as usize;
    let width = layers.iter().map(|l| l.n.max(l.k)).max().unwrap_or(1);
    let cycle_bytes: usize = layers.iter().map(|l| l.n * l.k * 2).sum();
    let copies = if shared {
        1
    } else {
        WEIGHT_CYCLE_BYTES
            .div_ceil(cycle_bytes.max(1))
            .min(links.div_ceil(layers.len()).max(1))
    };
    let mut weights: Vec<Vec<DBuf<u16>>> = Vec::with_capacity(copies);
    for _ in 0..copies {
        weights.push(
            layers
                .iter()
                .map(|l| gpu.zeros::<u16>(l.n * l.k))
                .collect::<Result<_, _>>()?,
        );
    }
    let gains = gpu.upload(&vec![1.0f32; width])?;
    let residual: DBuf<f32> = gpu.zeros(width)?;
    let rows: DBuf<f32> = gpu.zeros((links + 1) * width)?;
    let mut launches = Vec::with_capacity(links);
    for i in 0..links {
        let (j, l) = (i % layers.len(), layers[i % layers.len()]);
        let plan = staged_plan(l.n, l.k, sms).ok_or_else(|| {
            CudaError::Shape(format!("{name}: {}x{} does not fit gemv_staged", l.n, l.k))
        })?;
        let w = &weights[(i / layers.len()) % copies][j];
        let x = rows.ptr + (i * width * 4) as u64;
        let args = vec![
            Arg::P(w.ptr),
            Arg::I(l.n as i32),
            Arg::I(l.k as i32),
            Arg::P(x),
            Arg::I(width as i32),
            Arg::P(if l.norm { gains.ptr } else { 0 }),
            Arg::F(1e-6),
            Arg::P(0),
            Arg::I(l.act),
            Arg::P(if l.res { residual.ptr } else { 0 }),
            Arg::I(0),
            Arg::P(x + (width * 4) as u64),
            Arg::I(width as i32),
            Arg::I(1),
            Arg::I(gemv_ksplit(l.n) as i32),
            Arg::I(plan.rows_per_block as i32),
            Arg::I(trigger.code()),
        ];
        launches.push((plan, args));
    }
    let g = gpu.with_small_call(SmallCall::Staged, || {
        Graph::capture(gpu, |gpu| {
            launches.iter().try_for_each(|(plan, args)| {
                gpu.launch_with(
                    "gemv_staged_m1",
                    (plan.blocks as u32, 1, 1),
                    256,
                    plan.smem as u32,
                    args,
                )
            })
        })
    })?;
    Ok(LinkCost {
        name: name.into(),
        links,
        us: per_link(gpu, links, &|| g.launch())?,
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
