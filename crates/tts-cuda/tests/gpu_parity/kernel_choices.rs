//! Whole stage calls on each kernel choice against the path it replaces: chained split
//! rows, tile chains, row and grouped attention, the GEMV's norm chain, the code
//! predictor's QKV table, the staged GEMV and MMA, an FP8 layer's codes.

use super::*;
use crate::lock_step::*;

/// A cuBLAS epilogue that also writes the next layer's split bf16 input rows
/// (`CudaOptions::chain_split`), and with `chain_attention` the attention kernels writing the
/// O projection's (both on by default), compute what each layer converting its own input
/// computes: 20 rows in lock step give identical sampled codes for 4 frames and the same
/// last-head logits, with the production bf16 caches; on the demo model (whose shapes the
/// tile kernels do not take: every layer of 20 rows on cuBLAS) and the full-size 1.7B
/// geometry (its 20-row stage calls on `tile_wg.cu` since 2026-12-04, the attention's rows
/// read there; the batched prefill's hundreds of rows on cuBLAS). `chain_tile` is on in
/// both runs: what it writes does not depend on where its input rows came from.
#[test]
fn chained_split_rows_match_separate_conversion() {
    let test = "chained_split_rows_match_separate_conversion";
    let models = models_to_check();
    let rows = 20usize;
    let opts = |chain_split, chain_attention| {
        twenty_rows(CudaOptions {
            chain_split,
            chain_attention,
            ..options(false)
        })
    };
    for name in models {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!("Request {i} of twenty, with words enough for a real prefill.")
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 40 + i).collect();
        let separate = opts(false, false);
        let Some(base) = lock_step_on(&model, test, separate, &prompts, &seeds, 4) else {
            return;
        };
        for (label, attention) in [("epilogues", false), ("epilogues and attention", true)] {
            let chained = opts(true, attention);
            let run = lock_step_on(&model, test, chained, &prompts, &seeds, 4).unwrap();
            assert_same_run(&format!("{name}, chained {label}"), &run, &base, 1e-6);
            eprintln!("{test}: {name}, {rows} rows, chained {label}: 4 frames identical");
        }
    }
}

/// A `tile_wg.cu` layer writing the next layer's split input rows (`CudaOptions::chain_tile`:
/// into the second buffer, and before a norm as g ⊙ y with per-tile Σ y², the next layer
/// scaling its sums by 1 / rms) computes what each layer converting its own input computes,
/// to f32 rounding: 20 rows in lock step (the talker step and the code predictor on the tile
/// path on the 1.7B geometry; the demo model's shapes never take it) with f32 caches give
/// identical sampled codes for 4 frames and last-head logits within 1e-4; and on the 1.7B
/// the logits are not bit-identical, so the chain ran (the norm is applied after the sums).
#[test]
fn tile_chain_matches_separate_conversion() {
    let test = "tile_chain_matches_separate_conversion";
    let rows = 20usize;
    let opts = |chain_tile| {
        twenty_rows(CudaOptions {
            chain_tile,
            ..options(true)
        })
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!("Request {i}, its layers handing split rows on.")
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 140 + i).collect();
        let Some(separate) = lock_step_on(&model, test, opts(false), &prompts, &seeds, 4) else {
            return;
        };
        let chained = lock_step_on(&model, test, opts(true), &prompts, &seeds, 4).unwrap();
        let worst = assert_same_run_on_another_path("tile chain", name, &chained, &separate, 1e-4);
        eprintln!("{test}: {name}, {rows} rows: 4 frames identical, logits rel err {worst:.2e}");
    }
}

/// A prefill pass of 17 to 24 tokens padded to 24 (`CudaOptions::prefill_bucket_24`: its
/// linear layers on `tile_wg_linear_t3` on the 1.7B geometry) computes what the same pass
/// padded to 32 computes (`t4`; padding tokens come after every real one and write
/// nothing): 6 rows of one voice, each prompt 17 to 24 tokens after the head (cached after
/// the first) and prefilled alone, give identical sampled codes for 4 frames and logits
/// within 1e-5 of each other (an H100 gave both).
#[test]
fn prefill_bucket_24_matches_bucket_32() {
    let test = "prefill_bucket_24_matches_bucket_32";
    let rows = 6usize;
    let opts = |prefill_bucket_24| CudaOptions {
        prefill_bucket_24,
        batched_prefill: false,
        ..options(false)
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        // one voice: after the first, each prompt's head is cached
        let prompts: Vec<tts_model::Prompt> = (0..rows)
            .map(|i| {
                let text =
                    format!("Request {i}: a prompt that is a little longer, in the 24 bucket.");
                model
                    .prompt(&request(&text, Some("vivian"), TextMode::Prefill))
                    .unwrap()
            })
            .collect();
        for p in &prompts {
            let new = p.positions.len() - p.head_len;
            assert!((17..=24).contains(&new), "{new} new tokens");
        }
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 300 + i).collect();
        let Some(b32) = lock_step_on(&model, test, opts(false), &prompts, &seeds, 4) else {
            return;
        };
        let b24 = lock_step_on(&model, test, opts(true), &prompts, &seeds, 4).unwrap();
        let worst = worst_logits_err(&b24, &b32);
        assert_same_run(&format!("{name}, 24-token bucket"), &b24, &b32, 1e-5);
        eprintln!("{test}: {name}, {rows} rows: 4 frames identical, logits rel err {worst:.2e}");
    }
}

/// Talker steps and code-predictor loops of 20 rows in a 24-row bucket
/// (`CudaOptions::batch_bucket_24`: the batched layers on `tile_wg_linear_t3` on the 1.7B
/// geometry) compute what the same calls padded to 32 compute (padding rows write
/// nothing): 20 rows in lock step give identical sampled codes for 4 frames and logits
/// within 1e-5 of each other.
#[test]
fn batch_bucket_24_matches_bucket_32() {
    let test = "batch_bucket_24_matches_bucket_32";
    let rows = 20usize;
    let opts = |batch_bucket_24| {
        twenty_rows(CudaOptions {
            batch_bucket_24,
            ..options(false)
        })
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!("Request {i} of twenty, stepped in the 24-row bucket.")
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 500 + i).collect();
        let Some(b32) = lock_step_on(&model, test, opts(false), &prompts, &seeds, 4) else {
            return;
        };
        let b24 = lock_step_on(&model, test, opts(true), &prompts, &seeds, 4).unwrap();
        let worst = worst_logits_err(&b24, &b32);
        assert_same_run(&format!("{name}, 24-row bucket"), &b24, &b32, 1e-5);
        eprintln!("{test}: {name}, {rows} rows: 4 frames identical, logits rel err {worst:.2e}");
    }
}

/// One-row GEMVs with passes of 8 K steps (`CudaOptions::gemv_passes`: the talker step's
/// QKV, gate/up and down on `gemv_m1_u8` or `gemv_m1_u8_pre` on the 1.7B geometry) sum the
/// same products in the same order as passes of 4: one request stepped for 4 frames gives
/// the same codes and bit-identical last-head logits either way.
#[test]
fn gemv_passes_of_8_match_passes_of_4() {
    use tts_cuda::linear::{gemv_choice_with, GemvPasses};
    let test = "gemv_passes_of_8_match_passes_of_4";
    let opts = |gemv_passes| CudaOptions {
        gemv_passes,
        ..options(false)
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let c = &model.config.talker;
        let eight = gemv_choice_with(2 * c.intermediate_size, c.hidden_size, 1, GemvPasses::Eight);
        let prompts = many_prompts(&model, 1, 2, |_| {
            "One request alone, its talker step on one-row GEMVs.".to_string()
        });
        let Some(four) = lock_step_on(&model, test, opts(GemvPasses::Four), &prompts, &[77], 4)
        else {
            return;
        };
        for passes in [GemvPasses::Eight, GemvPasses::EightPre] {
            let run = lock_step_on(&model, test, opts(passes), &prompts, &[77], 4).unwrap();
            assert_same_run(
                &format!("{name}, passes {passes:?}"),
                &run,
                &four,
                SAME_BITS,
            );
        }
        eprintln!(
            "{test}: {name}: gate/up on {}: 4 frames, the same bits",
            eight.0
        );
    }
}

/// The talker's row attention (`attention_row.cu`: cached K/V rows requested before the
/// PDL wait, online softmax per lane group, `CudaOptions::row_attention_rows`) computes
/// what `fused_attention` computes, and its split form (`row_attention_split`, the
/// prefill's attention) what `decode_attention` computes: 3 rows in lock step with f32
/// caches give identical sampled codes for 6 frames and last-head logits within 1e-4, on
/// the demo model (16-dim heads) and the full-size 1.7B geometry, whose long prompts (over
/// 64 positions) take two chunks of cached rows.
#[test]
fn row_attention_matches_fused_attention() {
    let test = "row_attention_matches_fused_attention";
    let rows = 3usize;
    let opts = |row_attention_rows, row_attention_split| CudaOptions {
        row_attention_rows,
        row_attention_split,
        ..options(true)
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!(
                "Request {i} has a long prompt, so that its talker attends over more cached \
                 positions than one chunk of registers holds: the quick brown fox jumps over \
                 the lazy dog, then runs through the forest, across the river and up the hill \
                 until the evening light fades and the stars come out one by one."
            )
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 210 + i).collect();
        let Some(fused) = lock_step_on(&model, test, opts(0, false), &prompts, &seeds, 6) else {
            return;
        };
        for (what, rows_on, split_on) in [("row", 8, false), ("split", 0, true)] {
            let run =
                lock_step_on(&model, test, opts(rows_on, split_on), &prompts, &seeds, 6).unwrap();
            let worst = assert_same_run_on_another_path(
                &format!("{what} attention"),
                name,
                &run,
                &fused,
                1e-4,
            );
            eprintln!(
                "{test}: {name}, {rows} rows, {what} attention: 6 frames identical, \
                 logits rel err {worst:.2e}"
            );
        }
    }
}

/// The one-row GEMV norm chain (`CudaOptions::chain_gemv`: the talker step's O and down
/// projections write the next normed layer's input with its gains applied and Σ x²
/// partials, that layer scaling its sums by 1 / rms) computes what the fused norm
/// computes: one request, f32 caches, identical sampled codes for 6 frames and last-head
/// logits within 1e-4, on the demo model and the full-size 1.7B geometry.
#[test]
fn gemv_norm_chain_matches_the_fused_norm() {
    let test = "gemv_norm_chain_matches_the_fused_norm";
    let opts = |chain_gemv| CudaOptions {
        chain_gemv,
        ..options(true)
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, 1, 2, |_| {
            "One request, its talker step's layers handing normed rows on.".to_string()
        });
        let seeds = [330u64];
        let Some(fused) = lock_step_on(&model, test, opts(false), &prompts, &seeds, 6) else {
            return;
        };
        let chained = lock_step_on(&model, test, opts(true), &prompts, &seeds, 6).unwrap();
        let worst = assert_same_run_on_another_path("norm chain", name, &chained, &fused, 1e-4);
        eprintln!("{test}: {name}, 1 row: 6 frames identical, logits rel err {worst:.2e}");
    }
}

/// The code predictor's short-cache attention by kv-head group (one block doing every q
/// head of its group, `CudaOptions::group_attention`) computes what one block per q head
/// computes: 20 rows in lock step give identical sampled codes for 4 frames and the same
/// last-head logits, with f32 caches and with the production bf16 ones; on the demo model
/// (2 q heads, 1 kv head) and the full-size 1.7B geometry (16, 8).
#[test]
fn grouped_attention_matches_one_block_per_head() {
    let test = "grouped_attention_matches_one_block_per_head";
    let rows = 20usize;
    let opts = |exact, by_group| {
        twenty_rows(CudaOptions {
            group_attention: Some(by_group),
            ..options(exact)
        })
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let prompts = many_prompts(&model, rows, 3, |i| {
            format!("Request {i}, its code predictor attending by group.")
        });
        let seeds: Vec<u64> = (0..rows as u64).map(|i| 70 + i).collect();
        for (caches, exact) in [("f32", true), ("bf16", false)] {
            let Some(per_head) =
                lock_step_on(&model, test, opts(exact, false), &prompts, &seeds, 4)
            else {
                return;
            };
            let grouped =
                lock_step_on(&model, test, opts(exact, true), &prompts, &seeds, 4).unwrap();
            assert_same_run(
                &format!("{name}, {caches} caches, by group"),
                &grouped,
                &per_head,
                1e-6,
            );
            eprintln!("{test}: {name}, {rows} rows, {caches} caches: 4 frames identical");
        }
    }
}

/// The code predictor's first-layer QKV of steps 1..14 from the table computed at load
/// (`CudaOptions::cp_qkv_table`, the default; 1.7B geometry) gives what computing that
/// projection in the loop gives: at 1 and 2 rows (GEMV rows, the table's kernel) the same
/// sampled codes and last-head logits for 4 frames, in bf16 and with every decoder-layer
/// matrix FP8 (`Fp8Scope::Layers`: the table from the layer's bf16 copy, which the loop's
/// GEMV streams by the routing rule). (On models without the input projection, the
/// demo's, there is no table and both runs are the same path: checked in bf16 only.)
#[test]
fn qkv_table_matches_the_first_layers_projection() {
    let test = "qkv_table_matches_the_first_layers_projection";
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let scopes: &[Fp8Scope] = match name {
            "demo" => &[Fp8Scope::None],
            _ => &[Fp8Scope::None, Fp8Scope::Layers],
        };
        for (&fp8, rows) in scopes.iter().flat_map(|f| [(f, 1usize), (f, 2)]) {
            // (the staged MMA off: two-row calls on the GEMV, the table's kernel)
            let opts = |cp_qkv_table| CudaOptions {
                cp_qkv_table,
                staged_mma_rows: 0,
                fp8,
                ..options(false)
            };
            let prompts = many_prompts(&model, rows, 3, |i| {
                format!("Table check {i}, a sentence of a few words.")
            });
            let seeds: Vec<u64> = (0..rows as u64).map(|i| 70 + i).collect();
            let Some(base) = lock_step_on(&model, test, opts(false), &prompts, &seeds, 4) else {
                return;
            };
            let run = lock_step_on(&model, test, opts(true), &prompts, &seeds, 4).unwrap();
            assert_same_run(
                &format!("{name}, {fp8:?}, {rows} rows, table"),
                &run,
                &base,
                1e-6,
            );
            eprintln!("{test}: {name}, {fp8:?}, {rows} rows: 4 frames identical with the table");
        }
    }
}

/// Stage calls of one row with the staged GEMV (`CudaOptions::staged_gemv`: the code
/// predictor's, then both stages') give what they give without it: the same sampled codes
/// and the same last-head logits, bit for bit, for 4 frames of both models.
#[test]
fn staged_gemv_stages_match_the_gemv_stages() {
    let test = "staged_gemv_stages_match_the_gemv_stages";
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        // (the staged MMA off: it takes the 2-token linear layers of a one-row call's
        // first step, and its sums differ from the GEMV's; the GEMV's norm chain off: the
        // staged GEMV does not take it, and it sums the norm in another order)
        let opts = |staged: &str| CudaOptions {
            staged_gemv: staged.parse().unwrap(),
            staged_mma_rows: 0,
            chain_gemv: false,
            ..options(false)
        };
        let prompts = many_prompts(&model, 1, 2, |i| format!("Staged check {i}, a few words."));
        let Some(base) = lock_step_on(&model, test, opts("0"), &prompts, &[91], 4) else {
            return;
        };
        for staged in ["cp", "1"] {
            let run = lock_step_on(&model, test, opts(staged), &prompts, &[91], 4).unwrap();
            assert_same_run(&format!("{name}, staged {staged}"), &run, &base, SAME_BITS);
            eprintln!("{test}: {name}, staged {staged}: 4 frames identical, logits bit for bit");
        }
    }
}

/// Code-predictor calls of 2-8 rows with the staged MMA (`CudaOptions::staged_mma_rows`,
/// the default) compute what the other paths compute (the GEMV at 2 rows, GEMV and
/// cluster layers at 5 and 8): with f32 KV caches the same sampled codes for 4 frames and
/// last-head logits within 1e-4 (relative; 6-9e-6 measured on the H200), but not the
/// same bits on the 1.7B (the demo's layers are too narrow for the kernel). Its split
/// bf16 rows carry ~1e-5 of a row's size where the GEMV is exact to f32; a bf16 cache
/// rounds such a difference to a whole bf16 step now and then, and on random weights the
/// sampled codes then part after a few frames, as between any two paths
/// (`bench/results/2026-12-03-h200-staged-mma/diagnostic-2.txt`).
#[test]
fn staged_mma_stages_match_the_other_paths() {
    let test = "staged_mma_stages_match_the_other_paths";
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let opts = |rows: usize| CudaOptions {
            staged_mma_rows: rows,
            ..options(true)
        };
        // (the tests' backends hold 8 slots)
        for rows in [2usize, 5, 8] {
            let prompts = many_prompts(&model, rows, 2, |i| {
                format!("Staged rows {i}, a few more words.")
            });
            let seeds: Vec<u64> = (0..rows as u64).map(|s| 91 + s).collect();
            let Some(base) = lock_step_on(&model, test, opts(0), &prompts, &seeds, 4) else {
                return;
            };
            let run = lock_step_on(&model, test, opts(16), &prompts, &seeds, 4).unwrap();
            assert_same_run(&format!("{name}, {rows} rows"), &run, &base, 1e-4);
            // the demo's layers (K = 32) are too narrow for it: both runs take the same paths
            if name != "demo" {
                assert_ne!(
                    run.1, base.1,
                    "{name}, {rows} rows: the same logits bit for bit; the staged MMA did not run"
                );
            }
            eprintln!("{test}: {name}, {rows} rows: 4 frames of the same codes");
        }
    }
}

/// An FP8 layer's codes (`CudaOptions::fp8_codes`: `gemv.cu`'s `gemv8_*`, `gemv8_mma.cu` for
/// normed layers and two rows, two-row calls taken off the batched paths) compute what
/// its bf16 copy computes on the default paths: the same dequantized values, with every
/// decoder-layer matrix FP8 (`Fp8Scope::Layers`), 1 and 2 rows in lock step, f32 caches:
/// identical sampled codes for 4 frames and last-head logits within 1e-4; on the demo
/// model (whose matrices are below the rule's size: forced onto the codes) and the
/// full-size 1.7B geometry (the rule's own routes).
#[test]
fn fp8_codes_match_their_bf16_copy() {
    let test = "fp8_codes_match_their_bf16_copy";
    let opts = |fp8_codes| CudaOptions {
        fp8: Fp8Scope::Layers,
        fp8_codes,
        ..options(true)
    };
    for name in models_to_check() {
        let model = Model::load(name, LoadOptions::default()).unwrap();
        let codes = if name == "demo" { Some(true) } else { None };
        for rows in [1usize, 2] {
            let prompts = many_prompts(&model, rows, 2, |i| {
                format!("FP8 row {i}, its codes against their bf16 copy.")
            });
            let seeds: Vec<u64> = (0..rows as u64).map(|i| 410 + i).collect();
            let Some(copy) = lock_step_on(&model, test, opts(Some(false)), &prompts, &seeds, 4)
            else {
                return;
            };
            let streamed = lock_step_on(&model, test, opts(codes), &prompts, &seeds, 4).unwrap();
            let what = format!("fp8 codes, {rows} rows");
            let worst = assert_same_run_on_another_path(&what, name, &streamed, &copy, 1e-4);
            eprintln!(
                "{test}: {name}, {rows} rows: 4 frames identical, logits rel err {worst:.2e}"
            );
        }
    }
}
