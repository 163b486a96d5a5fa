//! The built-in routing rule and the split helpers on the release shapes.

use super::*;

#[test]
fn fp8_codes_go_to_the_gemvs_that_measured_faster_on_them() {
    use Fp8Gemv::{Bf16, Mma, Simt};
    let rule = LinearPaths {
        fp8_mma: true,
        ..Default::default()
    };
    // talker down (12 Mi weights, no norm): gemv8_* at one row; at two its split rows
    // (48 KiB) do not fit gemv8_mma.cu's shared memory
    assert_eq!(rule.fp8_kernel(1, 2048, 6144, false), Simt);
    assert_eq!(rule.fp8_kernel(2, 2048, 6144, false), Simt);
    // gate/up (24 Mi): a chain reader at one row on gemv8_*; normed, or at two rows, on
    // tensor cores
    assert_eq!(rule.fp8_kernel(1, 12288, 2048, false), Simt);
    assert_eq!(rule.fp8_kernel(1, 12288, 2048, true), Mma);
    assert_eq!(rule.fp8_kernel(2, 12288, 2048, true), Mma);
    assert_eq!(rule.fp8_kernel(2, 4096, 2048, false), Mma);
    // the talker's O projection (4 Mi, both sides 2048): its codes, at one and two rows
    assert_eq!(rule.fp8_kernel(1, 2048, 2048, false), Simt);
    assert_eq!(rule.fp8_kernel(2, 2048, 2048, false), Mma);
    // the code predictor's matrices (one side 1024, even at 6 Mi weights) and three rows
    // or more: the bf16 copy
    assert_eq!(rule.fp8_kernel(1, 1024, 2048, false), Bf16);
    assert_eq!(rule.fp8_kernel(1, 6144, 1024, false), Bf16);
    assert_eq!(rule.fp8_kernel(2, 4096, 1024, true), Bf16);
    assert_eq!(rule.fp8_kernel(1, 1024, 3072, false), Bf16);
    assert_eq!(rule.fp8_kernel(3, 2048, 6144, false), Bf16);
    // without gemv8_mma.cu a normed layer keeps the bf16 copy (gemv8_*'s norm is slow)
    let simt_only = LinearPaths::default();
    assert_eq!(simt_only.fp8_kernel(1, 12288, 2048, true), Bf16);
    assert_eq!(simt_only.fp8_kernel(2, 12288, 2048, false), Simt);
    let always = LinearPaths {
        fp8_codes: Some(true),
        ..Default::default()
    };
    assert_eq!(always.fp8_kernel(1, 1024, 2048, true), Simt);
    assert_eq!(
        always.fp8_kernel(3, 1024, 2048, true),
        Bf16,
        "the FP8 kernels take two rows"
    );
    let never = LinearPaths {
        fp8_codes: Some(false),
        ..rule
    };
    assert_eq!(never.fp8_kernel(1, 2048, 6144, false), Bf16);
}

#[test]
fn static_rule_follows_the_measured_table() {
    let p = LinearPaths::default();
    // few rows: the GEMV
    assert_eq!(p.choose(1, 4096, 2048), LinearPath::Gemv);
    assert_eq!(p.choose(4, 12288, 2048), LinearPath::Gemv);
    // 5..8 rows: tensor cores only on layers with many outputs
    assert_eq!(p.choose(6, 12288, 2048), LinearPath::TensorCores);
    assert_eq!(p.choose(8, 2048, 2048), LinearPath::Gemv);
    // 9..16 rows: tensor cores except the two largest talker matrices
    assert_eq!(p.choose(16, 4096, 2048), LinearPath::TensorCores);
    assert_eq!(p.choose(16, 12288, 2048), LinearPath::Cublas);
    assert_eq!(p.choose(16, 2048, 6144), LinearPath::Cublas);
    // beyond 16 rows, and shapes the kernel cannot take: cuBLAS
    assert_eq!(p.choose(32, 1024, 2048), LinearPath::Cublas);
    assert_eq!(p.choose(12, 1000, 2048), LinearPath::Cublas);
}

#[test]
fn the_cluster_kernel_takes_the_shapes_where_it_measured_fastest() {
    let p = LinearPaths {
        cluster: true,
        ..Default::default()
    };
    // 1.7B code predictor (hidden 1024) and talker (hidden 2048) shapes
    let (cp_qkv, cp_o, cp_gu, cp_down) = ((4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072));
    let (t_o, t_gu, t_down) = ((2048, 2048), (12288, 2048), (2048, 6144));
    let at = |m: usize, (n, k): (usize, usize)| p.choose(m, n, k);
    assert_eq!(at(2, cp_gu), LinearPath::Gemv);
    assert_eq!(at(4, cp_gu), LinearPath::Cluster);
    assert_eq!(at(4, cp_qkv), LinearPath::Gemv);
    assert_eq!(at(8, cp_qkv), LinearPath::Cluster);
    assert_eq!(at(8, cp_o), LinearPath::Gemv);
    assert_eq!(at(16, cp_o), LinearPath::Cluster);
    assert_eq!(at(16, cp_down), LinearPath::Cluster);
    assert_eq!(at(16, cp_qkv), LinearPath::TensorCores);
    // the talker's layers: as before
    assert_eq!(at(8, t_gu), LinearPath::TensorCores);
    assert_eq!(at(16, t_o), LinearPath::TensorCores);
    // a K it cannot split, and more than 16 rows: as before
    assert_eq!(at(16, t_down), LinearPath::Cublas);
    assert_eq!(at(32, cp_o), LinearPath::Cublas);
    // without the device support, never
    assert_eq!(
        LinearPaths::default().choose(16, 1024, 2048),
        LinearPath::TensorCores
    );
}

#[test]
fn cluster_split_fills_the_gpu_once_with_slices_of_128_to_256() {
    assert_eq!(cluster_split(4096, 1024), Some(4)); // 32 clusters x 4, slices of 256
    assert_eq!(cluster_split(1024, 2048), Some(16)); // 8 x 16, slices of 128
    assert_eq!(cluster_split(1024, 3072), Some(16)); // slices of 192
    assert_eq!(cluster_split(2048, 1024), Some(8)); // 16 x 8 = 128
    assert_eq!(cluster_split(256, 1024), Some(8)); // too few outputs: the most it can
    assert_eq!(cluster_split(12288, 2048), Some(8)); // no slice of 256 or less with 4
    assert_eq!(cluster_split(2048, 6144), None); // 16 slices of 384: too wide
    assert_eq!(cluster_split(1000, 2048), None); // not whole 128-output tiles
    assert_eq!(cluster_split(1024, 1000), None);
}

#[test]
fn tile_split_aims_at_128_blocks_of_whole_k_tiles() {
    // 1.7B talker and code-predictor shapes: (n / 128) x splits blocks
    assert_eq!(tile_split(4096, 2048), Some(4)); // 32 x 4, 512 wide
    assert_eq!(tile_split(2048, 6144), Some(8)); // 16 x 8, 768 wide
    assert_eq!(tile_split(12288, 2048), Some(2)); // 96 x 2
    assert_eq!(tile_split(6144, 1024), Some(4)); // 48 x 4, 256 wide
    assert_eq!(tile_split(1024, 3072), Some(8)); // 8 x 8: the most, 384 wide
                                                 // too few outputs: the most splits with whole tiles
    assert_eq!(tile_split(256, 1024), Some(8));
    assert_eq!(tile_split(128, 192), Some(1));
    // not whole output tiles or K tiles
    assert_eq!(tile_split(1000, 2048), None);
    assert_eq!(tile_split(1024, 1000), None);
    assert_eq!(tile_split(0, 1024), None);
    for n in (128..=16384).step_by(128) {
        for k in [64, 192, 1024, 2048, 3072, 6144] {
            if let Some(s) = tile_split(n, k) {
                assert!(k / s >= TILE_K && (k / s).is_multiple_of(TILE_K), "{n}x{k}");
            }
        }
    }
}

#[test]
fn wide_split_aims_at_192_blocks_with_slices_of_128_or_more() {
    // 1.7B talker and code-predictor shapes: (n / 128) x splits blocks
    assert_eq!(wide_split(4096, 2048), Some(8)); // 32 x 8, 256 wide
    assert_eq!(wide_split(2048, 2048), Some(8)); // 16 x 8: the most
    assert_eq!(wide_split(12288, 2048), Some(2)); // 96 x 2, 1024 wide
    assert_eq!(wide_split(2048, 6144), Some(8)); // 16 x 8, 768 wide
    assert_eq!(wide_split(3072, 2048), Some(8)); // 24 x 8
    assert_eq!(wide_split(4096, 1024), Some(8)); // 32 x 8, 128 wide
    assert_eq!(wide_split(1024, 2048), Some(8)); // 8 x 8: the most, 256 wide
    assert_eq!(wide_split(6144, 1024), Some(4)); // 48 x 4
    assert_eq!(wide_split(1024, 3072), Some(8)); // 8 x 8, 384 wide

    // slices never under 128 columns: the most splits that keep them, or one
    assert_eq!(wide_split(16384, 256), Some(2));
    assert_eq!(wide_split(1024, 192), Some(1));
    // not whole output tiles, or K not in whole 32-wide chunks
    assert_eq!(wide_split(1000, 2048), None);
    assert_eq!(wide_split(1024, 1000), None);
    assert_eq!(wide_split(0, 1024), None);
    for n in (128..=16384).step_by(128) {
        for k in [32, 192, 1024, 2048, 3072, 6144] {
            if let Some(s) = wide_split(n, k) {
                assert!(n.is_multiple_of(WIDE_N), "{n}x{k}");
                assert!(
                    k.is_multiple_of(32 * s) && (s == 1 || k / s >= 128),
                    "{n}x{k}"
                );
            }
        }
    }
}

#[test]
fn wide_takes_17_to_64_rows_where_it_is_there() {
    let p = LinearPaths {
        cluster: true,
        tile: true,
        wide: true,
        ..Default::default()
    };
    for (n, k) in [(12288, 2048), (2048, 6144), (1024, 2048), (4096, 1024)] {
        assert_eq!(p.choose(17, n, k), LinearPath::Wide, "{n}x{k}");
        assert_eq!(p.choose(64, n, k), LinearPath::Wide, "{n}x{k}");
        assert_eq!(p.choose(65, n, k), LinearPath::Cublas, "{n}x{k}");
    }
    // 16 rows and fewer: as before
    assert_eq!(p.choose(16, 12288, 2048), LinearPath::Tile);
    assert_eq!(p.choose(16, 1024, 2048), LinearPath::Cluster);
    // a shape it cannot take, or without the device support: as before
    assert_eq!(p.choose(32, 1000, 2048), LinearPath::Cublas);
    let off = p.clone().with_wide(false);
    assert_eq!(off.choose(32, 12288, 2048), LinearPath::Cublas);
}

#[test]
fn tile_wg_takes_9_to_32_rows_and_the_talker_matrices_from_2_where_it_is_there() {
    let p = LinearPaths {
        cluster: true,
        tile: true,
        tile_wg: true,
        ..Default::default()
    };
    for m in [9, 16, 17, 32] {
        for (n, k) in [(2048, 2048), (4096, 1024), (1024, 3072), (2048, 6144)] {
            assert_eq!(p.choose(m, n, k), LinearPath::Tile, "{m} rows of {n}x{k}");
        }
    }
    for m in 2..=8 {
        for (n, k) in [(2048, 2048), (4096, 2048), (12288, 2048), (2048, 6144)] {
            assert_eq!(p.choose(m, n, k), LinearPath::Tile, "{m} rows of {n}x{k}");
        }
    }
    for m in 5..=8 {
        // the code predictor's keep their paths
        assert_eq!(p.choose(m, 6144, 1024), LinearPath::Cluster, "{m} rows");
    }
    assert_eq!(p.choose(2, 4096, 1024), LinearPath::Gemv);
    assert_eq!(p.choose(1, 4096, 2048), LinearPath::Gemv);
    assert_eq!(p.choose(33, 2048, 2048), LinearPath::Cublas);
    // without the warpgroup kernels, as before
    let plain = LinearPaths {
        tile_wg: false,
        ..p.clone()
    };
    assert_eq!(plain.choose(16, 2048, 2048), LinearPath::TensorCores);
    assert_eq!(plain.choose(32, 2048, 2048), LinearPath::Cublas);
    assert_eq!(plain.choose(16, 4096, 1024), LinearPath::TensorCores);
}

#[test]
fn tile_takes_the_talker_gate_up_at_3_to_16_rows_where_it_is_there() {
    let p = LinearPaths {
        cluster: true,
        tile: true,
        ..Default::default()
    };
    for m in [3, 4, 5, 8, 9, 16] {
        assert_eq!(p.choose(m, 12288, 2048), LinearPath::Tile, "{m} rows");
    }
    // other rows and smaller matrices: as before
    assert_eq!(p.choose(2, 12288, 2048), LinearPath::Gemv);
    assert_eq!(p.choose(8, 4096, 2048), LinearPath::TensorCores);
    assert_eq!(p.choose(17, 12288, 2048), LinearPath::Cublas);
    assert_eq!(p.choose(16, 4096, 2048), LinearPath::TensorCores);
    assert_eq!(p.choose(16, 1024, 2048), LinearPath::Cluster);
    // without the device support, never
    let off = LinearPaths {
        tile: false,
        ..p.clone()
    };
    assert_eq!(off.choose(16, 12288, 2048), LinearPath::Cublas);
}

#[test]
fn forced_and_measured_paths_only_where_they_fit() {
    let mut p = LinearPaths {
        force: Some(LinearPath::Gemv),
        ..Default::default()
    };
    assert_eq!(p.choose(8, 1024, 1024), LinearPath::Gemv);
    // the GEMV cannot take 9 rows: the rule decides
    assert_eq!(p.choose(9, 1024, 1024), LinearPath::TensorCores);
    p.force = Some(LinearPath::TensorCores);
    assert_eq!(p.choose(65, 1024, 1024), LinearPath::Cublas);
    p.force = None;
    p.tuned.insert((1024, 1024, 32), LinearPath::TensorCores);
    assert_eq!(p.choose(20, 1024, 1024), LinearPath::TensorCores);
    assert_eq!(p.choose(40, 1024, 1024), LinearPath::Cublas);
    // a measured choice never applies outside its bucket's shape
    assert_eq!(p.choose(20, 1024, 2048), LinearPath::Cublas);
}

#[test]
fn test_rows_are_deterministic_and_bounded() {
    let a = test_rows(1000);
    assert_eq!(a, test_rows(1000));
    assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
    assert!(a.iter().any(|v| *v < -0.5) && a.iter().any(|v| *v > 0.5));
}
