//! Batched linear kernels of 3..=64 rows besides the tile kernels: `wide.cu` (17..=64 rows
//! where `wide_split` takes the shape, when `QWEN3_TTS_WIDE_LINEAR=1` turns it on),
//! `to_bf16_rows` + `mma.cu` (`LinearPath::TensorCores`, devices without clusters) and
//! `mma_cluster.cu` (`LinearPath::Cluster`), on the 1.7B's layer shapes, with the launch
//! plans `linear.rs` makes for them. Each case first asserts that `LinearPaths::choose`
//! sends its rows and shape to that kernel on the device and options named.

use tts_cuda::linear::{
    cluster_entry, cluster_smem, cluster_split, mma_entry, wide_plan, LinearPath, LinearPaths,
    WIDE_N,
};

use crate::run_emulated;

/// A layer's weight shape (outputs n, inputs k).
type Shape = (usize, usize);

/// The (qkv, o, gate_up, down) weight shapes of `random:1.7b`'s talker, or of its code
/// predictor (`cp`).
fn layer_shapes(cp: bool) -> [Shape; 4] {
    let model = tts_model::builtin::load("random:1.7b")
        .expect("random:1.7b")
        .expect("a built-in model");
    let talker = &model.config.talker;
    let d = if cp {
        talker.code_predictor.dims()
    } else {
        talker.dims()
    };
    [
        (d.q_dim() + 2 * d.kv_dim(), d.hidden),
        (d.hidden, d.q_dim()),
        (2 * d.intermediate, d.hidden),
        (d.hidden, d.intermediate),
    ]
}

/// What an H200 runs (sm_90a: clusters, `tile.cu`, `tile_wg.cu`, `wide.cu`), as
/// `GemmScratch::new` sets it from the device, with `wide.cu` asked for
/// (`CudaOptions::wide_linear`, off by default).
fn h200_paths() -> LinearPaths {
    LinearPaths {
        cluster: true,
        tile: true,
        tile_wg: true,
        wide: true,
        ..Default::default()
    }
}

/// The flags of a case: activation (0 none, 1 SiLU, 2 SwiGLU pairs), fused norm, bias,
/// residual, residual in place (the residual is the output itself).
#[derive(Clone, Copy)]
struct Epilogue {
    act: usize,
    norm: bool,
    bias: bool,
    res: bool,
    alias: bool,
}

const NORM: Epilogue = Epilogue {
    act: 0,
    norm: true,
    bias: false,
    res: false,
    alias: false,
};
const IN_PLACE: Epilogue = Epilogue {
    act: 0,
    norm: false,
    bias: false,
    res: true,
    alias: true,
};
const RESIDUAL: Epilogue = Epilogue {
    alias: false,
    ..IN_PLACE
};
const SWIGLU: Epilogue = Epilogue { act: 2, ..NORM };
const BIAS_SILU: Epilogue = Epilogue {
    act: 1,
    norm: true,
    bias: true,
    res: true,
    alias: false,
};

impl Epilogue {
    fn fields(self) -> [usize; 5] {
        [
            self.act,
            usize::from(self.norm),
            usize::from(self.bias),
            usize::from(self.res),
            usize::from(self.alias),
        ]
    }
}

/// `wide.cu`, the H200's path at 17..=64 rows with `QWEN3_TTS_WIDE_LINEAR=1`, on every layer
/// `wide_split` takes: the talker's QKV (norm) at 32 rows and O (residual in place) at 24,
/// both K split 8 ways;
/// its gate/up (norm, SwiGLU pairs) at 32 rows, split 2 ways into slices of 32 chunks
/// staged 11 at a time (a short last piece); its down (residual) at 64 rows, 8 ways,
/// slices of 24 chunks staged 6 at a time; the code predictor's gate/up at 40 rows (4 ways,
/// a short last piece); and a 24576 × 512 layer with bias and SiLU, the one kind of shape
/// (192 output tiles) that runs without a cluster. Each runs the first one or two of the
/// layer's output tiles (the plan, cluster and K split of the whole layer); 24 and 40 rows
/// leave padding rows in the last row tile.
#[test]
fn wide_matches_the_reference() {
    let [qkv, o, gate_up, down] = layer_shapes(false);
    let cp_gate_up = layer_shapes(true)[2];
    let paths = h200_paths();
    let mut args = Vec::new();
    let mut case = |(n, k): Shape, m: usize, tiles: usize, ldx: usize, e: Epilogue| {
        assert_eq!(
            paths.choose(m, n, k),
            LinearPath::Wide,
            "{m} rows of {n}x{k}"
        );
        let p = wide_plan(n, k, m).expect("wide.cu takes the shape");
        let p1 = wide_plan(n, k, 1).expect("wide.cu takes the shape");
        let padded = m.next_multiple_of(8 * p.row_tiles);
        args.extend([p.kernel.to_string(), p1.kernel.to_string()]);
        let fields = [
            tiles * WIDE_N,
            k,
            m,
            ldx,
            p.splits,
            p.chunks,
            p.smem,
            p1.chunks,
            p1.smem,
        ];
        let flags = e.fields().into_iter().chain([padded]);
        args.extend(fields.into_iter().chain(flags).map(|v| v.to_string()));
    };
    case(qkv, 32, 2, qkv.1, NORM);
    case(o, 24, 1, o.1 + 8, IN_PLACE);
    case(gate_up, 32, 1, gate_up.1, SWIGLU);
    case(down, 64, 1, down.1, RESIDUAL);
    case(cp_gate_up, 40, 1, cp_gate_up.1, SWIGLU);
    case((24576, 512), 20, 2, 516, BIAS_SILU);
    run_emulated(
        "wide_matches_the_reference",
        "batched_wide.cpp",
        &["wide.cu"],
        &args,
    );
}

/// `to_bf16_rows` + `mma.cu` (`LinearPath::TensorCores`), the path at 5..=8 rows of the
/// layers of at least 3072 outputs and at 9..=16 rows of those of at most 8 Mi weights on a
/// device without clusters (sm_80; an sm_90a device takes `tile.cu`, the cluster kernels
/// or the staged MMA there), with the entry `linear_then` picks for the rows: the talker's QKV
/// (norm) at 6 rows and gate/up (norm, SwiGLU pairs) at 8 (`mma_linear_t1`), its O
/// (residual in place) at 12; the code predictor's gate/up at 16 and down (residual) at 13
/// (`mma_linear_t2`, padding rows); and a small layer with bias and SiLU, input rows wider
/// than K. Each runs the first 32..64 outputs (blocks of 16 outputs, whatever the layer's
/// size).
#[test]
fn mma_matches_the_reference() {
    let [qkv, o, gate_up, _] = layer_shapes(false);
    let [_, _, cp_gate_up, cp_down] = layer_shapes(true);
    let sm80 = LinearPaths::default();
    let mut args = Vec::new();
    let mut case = |(n, k): Shape, m: usize, outputs: usize, ldx: usize, e: Epilogue| {
        let path = sm80.choose(m, n, k);
        assert_eq!(path, LinearPath::TensorCores, "{m} rows of {n}x{k}");
        // linear_then's entry for the rows, and the rows one of its blocks covers
        let ((kernel, tile), (kernel1, tile1)) = (mma_entry(m), mma_entry(1));
        args.extend([kernel.to_string(), kernel1.to_string()]);
        let fields = [outputs, k, m, ldx, tile, tile1];
        let flags = e.fields().into_iter().chain([m.next_multiple_of(tile)]);
        args.extend(fields.into_iter().chain(flags).map(|v| v.to_string()));
    };
    case(qkv, 6, 64, qkv.1, NORM);
    case(gate_up, 8, 32, gate_up.1, SWIGLU);
    case(o, 12, 48, o.1, IN_PLACE);
    case(cp_gate_up, 16, 64, cp_gate_up.1, SWIGLU);
    case(cp_down, 13, 32, cp_down.1, RESIDUAL);
    case((48, 96), 9, 48, 100, BIAS_SILU);
    run_emulated(
        "mma_matches_the_reference",
        "batched_mma.cpp",
        &["ops.cu", "mma.cu"],
        &args,
    );
}

/// `mma_cluster.cu` (`LinearPath::Cluster`) on the code predictor's layers, with the plan
/// linear.rs's `cluster` makes (`cluster_split` of the whole layer, `cluster_smem`, the
/// entry for the rows): on the H200 at 3..=8 rows (where `CudaOptions::staged_mma_rows`
/// leaves them to it): gate/up (norm, SwiGLU pairs) at 4 rows and QKV (norm) at 7, clusters
/// of 4 (`mma_cluster_t1`); on an sm_90 device without warpgroup MMA (`tile_wg.cu`) also at
/// 9..=16: O (residual in place) at 11 rows and down (residual) at 16, clusters of 16
/// (`mma_cluster_t2`), and a small layer with bias and SiLU, input rows wider than K, at
/// 10. Each runs the first one or two of the layer's output tiles of 128.
#[test]
fn mma_cluster_matches_the_reference() {
    let [qkv, o, gate_up, down] = layer_shapes(true);
    let sm90 = LinearPaths {
        tile_wg: false,
        ..h200_paths()
    };
    let mut args = Vec::new();
    let mut case = |(n, k): Shape, m: usize, tiles: usize, ldx: usize, e: Epilogue| {
        let paths = if m <= 8 { h200_paths() } else { sm90.clone() };
        assert_eq!(
            paths.choose(m, n, k),
            LinearPath::Cluster,
            "{m} rows of {n}x{k}"
        );
        let cs = cluster_split(n, k).expect("the cluster kernel takes the shape");
        // linear.rs's `cluster`: the entry for the rows and the rows it pads them to
        let ((kernel, tile), (kernel1, tile1)) = (cluster_entry(m), cluster_entry(1));
        args.extend([kernel.to_string(), kernel1.to_string()]);
        let smem = [tile, tile1].map(|t| cluster_smem(t, k / cs));
        let fields = [tiles * 128, k, m, ldx, cs, smem[0], smem[1]];
        let flags = e.fields().into_iter().chain([tile]);
        args.extend(fields.into_iter().chain(flags).map(|v| v.to_string()));
    };
    case(gate_up, 4, 2, gate_up.1, SWIGLU);
    case(qkv, 7, 1, qkv.1, NORM);
    case(o, 11, 1, o.1 + 8, IN_PLACE);
    case(down, 16, 1, down.1, RESIDUAL);
    case((256, 512), 10, 2, 516, BIAS_SILU);
    run_emulated(
        "mma_cluster_matches_the_reference",
        "batched_cluster.cpp",
        &["mma.cu", "mma_cluster.cu"],
        &args,
    );
}
