//! `tile_wg.cu` (Hopper's warpgroup MMA: the talker's batched linear layers at 2..32 rows and
//! the prefill, the default batched path on the H200) through the emulator's wgmma twins
//! (`emu/wgmma_twins.hpp`), its sm_90a sections compiled as `SM90A_SOURCES` says: the twins
//! against hand-built tiles first, then the kernels on the backend's launch plans.

use crate::run_emulated;
use tts_cuda::linear::{tile_entry_smem, tile_kernel, tile_split, TILE_K, TILE_N};

/// The kernel files of a tile_wg.cu unit (tile.cu: its loads and pipeline prologue; the
/// driver dispatches tile.cu's entry points too: `tile.rs`).
pub(crate) const FILES: &[&str] = &["tile.cu", "tile_wg.cu"];

/// The twins against layouts written out independently in the driver (`emu/wgmma_twins.cpp`):
/// the source's descriptor encoding, the m64n{32,48,64,128}k16 products through the 128-byte
/// swizzle and the four k16 steps onto the accumulator layout, the descriptor forms that
/// must stop a run, and distributed shared-memory stores.
#[test]
fn wgmma_twins_follow_the_ptx_layouts() {
    run_emulated(
        "wgmma_twins_follow_the_ptx_layouts",
        "wgmma_twins.cpp",
        FILES,
        &[],
    );
}

/// The talker's matrices (hidden 2048): (n, k).
const QKV: (usize, usize) = (4096, 2048);
const O: (usize, usize) = (2048, 2048);
pub(crate) const GATE_UP: (usize, usize) = (12288, 2048);
pub(crate) const DOWN: (usize, usize) = (2048, 6144);

/// What a call passes besides the rows (`emu/wgmma_tile.cpp`'s flags, in its order; tile.cu
/// takes none of the chain's).
#[derive(Clone, Copy, Default)]
pub(crate) struct Call {
    /// 0 none, 1 SiLU, 2 SwiGLU pairs.
    pub act: usize,
    pub bias: bool,
    pub res: bool,
    /// The residual is y itself (the talker's O and down add it in place).
    pub in_place: bool,
    /// The rows' norm deferred to this layer (`TileChain::ss_in`).
    pub ss_in: bool,
    /// The next layer's split rows written (`xo`), with its norm gains (`xo_g`) and each
    /// row's Σ y² by block (`ss_out`).
    pub xo: bool,
    pub xo_g: bool,
    pub ss_out: bool,
    /// Rows 0 and 1 alone again: the same bits.
    pub again: bool,
}

/// The driver's arguments for `shape` at `m` rows on the launch the backend makes
/// (`linear::tile`): the entry point `tile_kernel` picks (tile_wg.cu's with `wg`, else
/// tile.cu's), `tile_split`'s cluster size, `n / 128` column blocks and the entry's shared
/// memory (`tile_entry_smem`).
pub(crate) fn case(args: &mut Vec<String>, wg: bool, shape: (usize, usize), m: usize, call: Call) {
    let (n, k) = shape;
    assert!(n % TILE_N == 0);
    let splits = tile_split(n, k).unwrap_or_else(|| panic!("the tile kernels take {n}x{k}"));
    // whole 64-wide K tiles per block of the cluster
    assert!((k / splits).is_multiple_of(TILE_K));
    let (name, mt) = tile_kernel(m, wg);
    assert!(m <= 8 * mt);
    assert!(
        wg || !(call.ss_in || call.xo || call.xo_g || call.ss_out),
        "tile.cu has no chain"
    );
    args.push(name.to_string());
    let smem = tile_entry_smem(mt, wg);
    let fields = [n, k, m, splits, smem, call.act];
    let flags = [
        call.bias,
        call.res,
        call.in_place,
        call.ss_in,
        call.xo,
        call.xo_g,
        call.ss_out,
        call.again,
    ];
    args.extend(fields.iter().map(|v| v.to_string()));
    args.extend(flags.iter().map(|&f| usize::from(f).to_string()));
}

/// One talker step's four layers on `tile_wg_linear_t2` (3 and 16 rows), with the chain the
/// step runs (`linear_then`, `CudaOptions::chain_tile`): QKV reads rows whose input norm
/// is deferred (`ss_in`, from the previous layer's down); O adds the residual in place and
/// writes gate/up's split rows with the post-attention norm's gains and Σ y² (`xo`,
/// `xo_g`, `ss_out`); gate/up (SwiGLU pairs) applies that deferred norm and writes down's
/// rows (`xo`); down adds the residual in place and writes the next QKV's rows and sums.
/// Clusters of 4, 8, 2 and 8 blocks.
#[test]
fn tile_wg_t2_runs_the_talker_step() {
    let mut args = Vec::new();
    let residual = Call {
        res: true,
        in_place: true,
        ..Call::default()
    };
    let chained = Call {
        xo: true,
        xo_g: true,
        ss_out: true,
        ..residual
    };
    let deferred = Call {
        ss_in: true,
        ..Call::default()
    };
    case(&mut args, true, QKV, 3, deferred);
    case(
        &mut args,
        true,
        O,
        16,
        Call {
            again: true,
            ..chained
        },
    );
    let gate_up = Call {
        act: 2,
        xo: true,
        ..deferred
    };
    case(&mut args, true, GATE_UP, 3, gate_up);
    case(&mut args, true, DOWN, 16, chained);
    run_emulated(
        "tile_wg_t2_runs_the_talker_step",
        "wgmma_tile.cpp",
        FILES,
        &args,
    );
}

/// `tile_wg_linear_t4` at 32 rows (gate/up with the deferred norm and the chain to down,
/// down with the residual in place), `tile_wg_linear_t8` at 40 rows (the prefill; a
/// separate residual, bias and SiLU), and a shape `tile_split` gives no cluster (K = 192:
/// one block per 128 outputs, the partial sums through the block's own inbox) at 5 rows.
#[test]
fn tile_wg_t4_t8_and_single_blocks_match_the_reference() {
    let mut args = Vec::new();
    let gate_up = Call {
        act: 2,
        ss_in: true,
        xo: true,
        again: true,
        ..Call::default()
    };
    case(&mut args, true, GATE_UP, 32, gate_up);
    let down = Call {
        res: true,
        in_place: true,
        ..Call::default()
    };
    case(&mut args, true, DOWN, 32, down);
    let epilogue = Call {
        act: 1,
        bias: true,
        res: true,
        ..Call::default()
    };
    case(&mut args, true, QKV, 40, epilogue);
    assert_eq!(tile_split(256, 192), Some(1));
    let single = Call {
        xo: true,
        xo_g: true,
        ss_out: true,
        ..epilogue
    };
    case(&mut args, true, (256, 192), 5, single);
    run_emulated(
        "tile_wg_t4_t8_and_single_blocks_match_the_reference",
        "wgmma_tile.cpp",
        FILES,
        &args,
    );
}

/// `tile_wg_linear_t3` (24 rows: the prefill of 17 to 24 tokens; m64n48k16, and 384 row
/// chunks a stage, one and a half passes of the block) on the talker's matrices: QKV at 24
/// rows with the deferred norm (cluster of 4), gate/up at 21 rows chained to down (2),
/// down at 17 rows with the residual in place (8).
#[test]
fn tile_wg_t3_matches_the_reference() {
    let mut args = Vec::new();
    assert_eq!(tile_kernel(17, true).0, "tile_wg_linear_t3");
    assert_eq!(tile_kernel(24, true).0, "tile_wg_linear_t3");
    assert_eq!(tile_kernel(25, true).0, "tile_wg_linear_t4");
    assert_eq!(tile_kernel(24, false).0, "tile_linear_t4");
    let deferred = Call {
        ss_in: true,
        ..Call::default()
    };
    case(&mut args, true, QKV, 24, deferred);
    let gate_up = Call {
        act: 2,
        xo: true,
        xo_g: true,
        ss_out: true,
        again: true,
        ..deferred
    };
    case(&mut args, true, GATE_UP, 21, gate_up);
    let down = Call {
        res: true,
        in_place: true,
        ..Call::default()
    };
    case(&mut args, true, DOWN, 17, down);
    run_emulated(
        "tile_wg_t3_matches_the_reference",
        "wgmma_tile.cpp",
        FILES,
        &args,
    );
}
