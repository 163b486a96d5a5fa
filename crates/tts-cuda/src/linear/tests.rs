//! Split-row reuse and the staged kernels' plans on the release shapes.

use super::{staged_mma_plan, staged_plan, StagedPlan, STAGED_MAX_SMEM, STAGED_MMA_MAX_SMEM};
use super::{Rows, SplitRows};

/// Split rows a call may take instead of converting its own: the same rows, width and
/// norm; rows in the second buffer or with the norm deferred only on `tile_wg.cu`.
#[test]
fn split_rows_are_reused_only_where_their_reader_can_take_them() {
    let x = Rows {
        ptr: 0x1000,
        ld: 1024,
        count: 20,
    };
    let norm = (0x2000, 1e-6);
    let want = SplitRows::new(x, 1024, norm);
    // converted rows (buffer 0, norm applied): any path
    for tile_wg in [false, true] {
        assert_eq!(SplitRows::usable(Some(want), want, tile_wg), Some(want));
        assert_eq!(SplitRows::usable(None, want, tile_wg), None);
    }
    // a tile_wg.cu epilogue's rows: the other buffer, the norm deferred
    let chained = SplitRows {
        buf: 1,
        deferred: true,
        ..want
    };
    assert_eq!(SplitRows::usable(Some(chained), want, true), Some(chained));
    assert_eq!(SplitRows::usable(Some(chained), want, false), None);
    let other_buffer = SplitRows { buf: 1, ..want };
    assert_eq!(SplitRows::usable(Some(other_buffer), want, false), None);
    let deferred = SplitRows {
        deferred: true,
        ..want
    };
    assert_eq!(SplitRows::usable(Some(deferred), want, false), None);
    // other rows, width or norm: never
    let moved = Rows { ptr: 0x3000, ..x };
    for other in [
        SplitRows::new(moved, 1024, norm),
        SplitRows::new(x, 2048, norm),
        SplitRows::new(x, 1024, (0x4000, 1e-6)),
        SplitRows::new(x, 1024, (0, 0.0)),
    ] {
        assert_eq!(SplitRows::usable(Some(other), want, true), None);
    }
}

/// On the H200's 132 multiprocessors the staged MMA takes every code-predictor matrix
/// of the 1.7B geometry at every row count (the widest, gate/up, with 48 rows a block
/// and the largest groups: two blocks still fit a multiprocessor), and no talker
/// matrix but the O projection.
#[test]
fn staged_mma_plan_covers_the_code_predictor() {
    let sms = 132;
    for m in [2, 8, 9, 16, 17, 128, 256] {
        let p = staged_mma_plan(6144, 1024, m, true, sms).expect("gate/up");
        assert_eq!(
            (p.rows_per_block, p.blocks),
            (48, 128),
            "gate/up at {m} rows"
        );
        assert!(2 * (p.smem + 1024) <= 228 << 10, "{p:?}");
        // (qkv and head with the norm, O and down without, as in the stack)
        for (n, k, rows, norm) in [
            (4096, 1024, 32, true),
            (1024, 2048, 16, false),
            (1024, 3072, 16, false),
            (2048, 1024, 16, true),
        ] {
            let p = staged_mma_plan(n, k, m, norm, sms).unwrap_or_else(|| panic!("{n}x{k}"));
            assert_eq!(p.rows_per_block, rows, "{n}x{k}");
            assert!(p.blocks <= sms && p.blocks * rows >= n, "{n}x{k}: {p:?}");
            assert!(p.smem <= STAGED_MMA_MAX_SMEM, "{n}x{k}: {p:?}");
        }
    }
    assert!(
        staged_mma_plan(2048, 2048, 16, false, sms).is_some(),
        "talker O"
    );
    for (n, k) in [(4096, 2048), (12288, 2048), (2048, 6144), (3072, 2048)] {
        let p = staged_mma_plan(n, k, 16, true, sms);
        assert_eq!(p, None, "{n}x{k} should not fit");
    }
    // K not a multiple of 64, an odd N; down with a norm (its gains do not fit)
    assert_eq!(staged_mma_plan(1024, 1000, 4, false, sms), None);
    assert_eq!(staged_mma_plan(1023, 1024, 4, false, sms), None);
    assert_eq!(staged_mma_plan(1024, 3072, 32, true, sms), None);
}

/// On the H200's 132 multiprocessors the staged GEMV takes every code-predictor matrix
/// of the 1.7B geometry, the talker's O projection and head, and none of the talker's
/// QKV, gate/up or down projections (tiles over `STAGED_MAX_SMEM`).
#[test]
fn staged_plan_covers_the_layers_it_fits() {
    let sms = 132;
    assert_eq!(
        staged_plan(6144, 1024, sms),
        Some(StagedPlan {
            rows_per_block: 48,
            blocks: 128,
            smem: 96 << 10
        })
    );
    for (n, k) in [
        (4096, 1024),
        (1024, 2048),
        (1024, 3072),
        (2048, 1024),
        (2048, 2048),
        (3072, 2048),
    ] {
        let p = staged_plan(n, k, sms).unwrap_or_else(|| panic!("{n}x{k} should fit"));
        assert!(
            p.smem <= STAGED_MAX_SMEM && p.blocks <= sms,
            "{n}x{k}: {p:?}"
        );
        assert!(
            p.blocks * p.rows_per_block >= n,
            "{n}x{k}: {p:?} leaves rows out"
        );
        assert!(
            (p.blocks - 1) * p.rows_per_block < n,
            "{n}x{k}: {p:?} has an empty block"
        );
    }
    for (n, k) in [(4096, 2048), (12288, 2048), (2048, 6144), (1000, 1001)] {
        assert_eq!(staged_plan(n, k, sms), None, "{n}x{k} should not fit");
    }
    // an odd row count: the last block holds the one row left
    let p = staged_plan(1001, 1000, sms).expect("1001x1000");
    assert_eq!((p.rows_per_block, p.blocks), (8, 126));
}

/// One-row GEMVs with passes of 8 steps go to the u8 entries only where a warp then makes
/// fewer passes (the talker's QKV and gate/up: 2 -> 1, down: 3 -> 2; not its O, one pass
/// either way); other row counts and the default keep their entries; a bad knob is named.
#[test]
fn gemv_passes_route_one_row_layers_that_gain_a_pass() {
    use super::{gemv_choice, gemv_choice_with, GemvPasses};
    let (qkv, o, gate_up, down) = ((4096, 2048), (2048, 2048), (12288, 2048), (2048, 6144));
    for (n, k) in [qkv, gate_up, down] {
        assert_eq!(gemv_choice_with(n, k, 1, GemvPasses::Eight).0, "gemv_m1_u8");
        assert_eq!(
            gemv_choice_with(n, k, 1, GemvPasses::EightPre).0,
            "gemv_m1_u8_pre"
        );
        assert_eq!(gemv_choice_with(n, k, 1, GemvPasses::Four).0, "gemv_m1_pre");
        // the same blocks: the passes change nothing of the grid
        assert_eq!(
            gemv_choice_with(n, k, 1, GemvPasses::Eight).1,
            gemv_choice(n, k, 1).1
        );
        assert_eq!(gemv_choice_with(n, k, 2, GemvPasses::Eight).0, "gemv_m2");
    }
    assert_eq!(
        gemv_choice_with(o.0, o.1, 1, GemvPasses::Eight).0,
        "gemv_m1"
    );
    assert_eq!("8pre".parse::<GemvPasses>(), Ok(GemvPasses::EightPre));
    assert_eq!(" 4".parse::<GemvPasses>(), Ok(GemvPasses::Four));
    let err = "16".parse::<GemvPasses>().unwrap_err();
    assert!(err.contains("16"), "{err}");
}
