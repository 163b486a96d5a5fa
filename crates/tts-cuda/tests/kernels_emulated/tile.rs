//! `tile.cu` (warp-level MMA over a cp.async weight pipeline, K split over a cluster): the
//! path [`LinearPath::Tile`] takes when `LinearPaths::tile_wg` is off (the knob
//! `QWEN3_TTS_TILE_WGMMA=0`), checked through the emulator's ldmatrix / mma.sync twins
//! (`emu/mma_twins.hpp`) with `emu/wgmma_tile.cpp`'s reference and checks, on
//! the backend's launch plans (`linear::tile`): `tile_kernel(m, false)`, `tile_split`'s
//! cluster, `n / 128` column blocks, `tile_smem`, and none of tile_wg.cu's chain arguments.

use tts_cuda::linear::{tile_kernel, tile_split, LinearPath, LinearPaths};

use crate::run_emulated;
use crate::tile_wg::{case, Call, DOWN, FILES, GATE_UP};

/// Builds and runs `emu/wgmma_tile.cpp` (which dispatches tile.cu's entries too) on `args`.
fn run_driver(test: &str, args: &[String]) {
    run_emulated(test, "wgmma_tile.cpp", FILES, args);
}

/// A device on the tile path with warp MMA (`tile.cu` there, `tile_wg` off).
fn warp_mma_paths() -> LinearPaths {
    LinearPaths {
        tile: true,
        tile_wg: false,
        ..LinearPaths::default()
    }
}

/// The talker's gate/up (2048 → 12288, SwiGLU pairs) where the router sends it to `tile.cu`
/// with `tile_wg` off (3..=16 rows, at least 16 Mi weights): `tile_linear_t2` at 4 rows (a
/// row tile half used, the other empty) and 16, clusters of 2 over 96 column blocks.
#[test]
fn tile_t2_runs_the_talker_gate_up() {
    let paths = warp_mma_paths();
    let (n, k) = GATE_UP;
    assert_eq!(tile_split(n, k), Some(2));
    let gate_up = Call {
        act: 2,
        ..Call::default()
    };
    let mut args = Vec::new();
    for m in [4, 16] {
        assert_eq!(paths.choose(m, n, k), LinearPath::Tile, "{m} rows");
        assert_eq!(tile_kernel(m, false).0, "tile_linear_t2");
        case(&mut args, false, GATE_UP, m, gate_up);
    }
    run_driver("tile_t2_runs_the_talker_gate_up", &args);
}

/// `tile_linear_t4` and `_t8` where the router sends them with `tile_wg` off: a measured
/// choice (`LinearPaths::tuned`, from `autotune`) of the tile path for gate/up at 32 rows
/// (SwiGLU pairs) and for down at 64 rows (the residual in place, clusters of 8); a forced
/// tile path (benchmarks, parity tests) at 40 rows of a shape with a bias, SiLU and a
/// separate residual that `tile_split` gives no cluster (K = 192: one block per 128
/// outputs, no distributed shared memory), where the first two rows alone must give the
/// same bits. (Each launch of the big shapes costs seconds here: one warp exchange per
/// ldmatrix and mma.sync.)
#[test]
fn tile_t4_t8_and_single_blocks_match_the_reference() {
    let mut paths = warp_mma_paths();
    paths
        .tuned
        .insert((GATE_UP.0, GATE_UP.1, 32), LinearPath::Tile);
    paths.tuned.insert((DOWN.0, DOWN.1, 64), LinearPath::Tile);
    assert_eq!(paths.choose(32, GATE_UP.0, GATE_UP.1), LinearPath::Tile);
    assert_eq!(paths.choose(64, DOWN.0, DOWN.1), LinearPath::Tile);
    let forced = LinearPaths::forced(LinearPath::Tile, false, true);
    assert_eq!(forced.choose(40, 256, 192), LinearPath::Tile);
    assert_eq!(tile_split(DOWN.0, DOWN.1), Some(8));
    assert_eq!(tile_split(256, 192), Some(1));
    assert_eq!(tile_kernel(32, false).0, "tile_linear_t4");
    assert_eq!(tile_kernel(40, false).0, "tile_linear_t8");

    let mut args = Vec::new();
    let gate_up = Call {
        act: 2,
        ..Call::default()
    };
    case(&mut args, false, GATE_UP, 32, gate_up);
    let down = Call {
        res: true,
        in_place: true,
        ..Call::default()
    };
    case(&mut args, false, DOWN, 64, down);
    let epilogue = Call {
        act: 1,
        bias: true,
        res: true,
        again: true,
        ..Call::default()
    };
    case(&mut args, false, (256, 192), 40, epilogue);
    run_driver("tile_t4_t8_and_single_blocks_match_the_reference", &args);
}
