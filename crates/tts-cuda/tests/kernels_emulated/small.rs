//! The small row kernels of embed.cu (gathers, scatters, copies, the step's 16-way frame
//! embedding, the code predictor's first input) and ops.cu (final norm, the cuBLAS path's
//! epilogue, bias rows, the prefix cache's run copy), on the launches the backend makes
//! (kernels.rs, talker.rs, code_predictor.rs, stack.rs, linear.rs, weights.rs, prefix.rs)
//! with the 1.7B's shapes. probe.cu's `chain_link` is a `bench-stages` probe, not a
//! serving kernel, and is not covered here.

use crate::run_emulated;

/// A built-in model's configuration (the talker's, with its code predictor's inside).
fn talker_config(spec: &str) -> tts_model::config::TalkerConfig {
    tts_model::builtin::load(spec)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .unwrap_or_else(|| panic!("{spec} is a built-in model"))
        .config
        .talker
}

/// kernels.rs's block for the `_u32` kernels: 256 threads for rows of 256 words or more,
/// else 32.
fn block_for(width: usize) -> usize {
    if width >= 256 {
        256
    } else {
        32
    }
}

/// One case of small_kernels.cpp: "kernel gx gy gz block params...".
fn case(kernel: &str, grid: (usize, usize, usize), block: usize, params: &[f64]) -> String {
    let mut s = format!("{kernel} {} {} {} {block}", grid.0, grid.1, grid.2);
    for p in params {
        s.push_str(&format!(" {p}"));
    }
    s
}

/// The embed.cu kernels, each on its backend launch (one block per row; 256 threads, or
/// kernels.rs's `block_for` for the `_u32` kernels), rows with a negative id among them
/// (read as zeros, or skipped), the tables' first and last rows, and poison around every
/// output: `gather_rows` (talker.rs: the text table's rows into the text input, the codec
/// table's added to the residual rows), `gather_rows_f32` (the prompt's f32 table rows added
/// to x), `frame_embedding` (a step row's codec embedding, 15 code-predictor embeddings and
/// text vector: 1.7B's hidden 2048, codec vocab, 2048 codes per group), `copy_rows` (the
/// 0.6B code predictor's unprojected input rows into its interleaved rows of ld 2·ch; the
/// step rows to `ws.last`), `gather_u32` (the prefill's last-token rows; a slot's frames, 16
/// codes: 32 threads), `scatter_u32` (the hidden rows and frames back to their slots),
/// `cp_first_input` (code 0's embedding into the odd interleaved rows, from the folded f32
/// table or the talker's bf16 codec table).
#[test]
fn embed_kernels_match_the_reference() {
    let t = talker_config("random:1.7b");
    let cp = &t.code_predictor;
    let (h, th, ch) = (t.hidden_size, t.text_hidden_size, cp.hidden_size);
    let (codec_vocab, cp_vocab) = (t.vocab_size, cp.vocab_size);
    // a stand-in row count for the text table (151k rows of it would only cost memory):
    // the kernel reads rows by id, whatever the count
    let text_rows = 4096;
    let t6 = talker_config("random:0.6b");
    let (th6, ch6) = (t6.hidden_size, t6.code_predictor.hidden_size);
    let f = |v: usize| v as f64;
    let gather = |k: &str, d: usize, n: usize, rows: usize, acc: bool| {
        case(
            k,
            (rows, 1, 1),
            256,
            &[f(d), f(n), f(rows), f(d), f(usize::from(acc))],
        )
    };
    let u32s = |k: &str, d: usize, n: usize, rows: usize| {
        case(
            k,
            (rows, 1, 1),
            block_for(d),
            &[f(d), f(d), f(n), f(rows), f(d)],
        )
    };
    let frames = tts_model::config::NUM_CODE_GROUPS;
    let args = vec![
        gather("gather_rows", th, text_rows, 6, false),
        gather("gather_rows", h, codec_vocab, 5, true),
        gather("gather_rows_f32", h, text_rows, 7, true),
        gather("gather_rows_f32", h, text_rows, 2, false),
        case(
            "frame_embedding",
            (5, 1, 1),
            256,
            &[f(h), f(codec_vocab), f(cp_vocab), 5.0, f(h), f(h)],
        ),
        // code_predictor.rs without a projection (the 0.6B's): lds th, ldd 2·ch, ch wide;
        // talker.rs: the step's h-wide rows
        case(
            "copy_rows",
            (4, 1, 1),
            256,
            &[f(th6), f(2 * ch6), f(ch6), 4.0],
        ),
        case("copy_rows", (3, 1, 1), 256, &[f(h), f(h), f(h), 3.0]),
        // talker.rs: the last token of each of 5 prefill rows among 40 tokens; a slot's frames
        u32s("gather_u32", h, 40, 5),
        u32s("gather_u32", frames, 8, 4),
        u32s("scatter_u32", h, 8, 6),
        u32s("scatter_u32", frames, 8, 3),
        case(
            "cp_first_input",
            (4, 1, 1),
            256,
            &[f(ch), 4.0, 1.0, f(cp_vocab)],
        ),
        case(
            "cp_first_input",
            (3, 1, 1),
            256,
            &[f(ch), 3.0, 0.0, f(cp_vocab)],
        ),
    ];
    assert_eq!(
        frames, 16,
        "frame_embedding and cp_first_input read 16 codes a row"
    );
    run_emulated(
        "embed_kernels_match_the_reference",
        "small_kernels.cpp",
        &["embed.cu", "ops.cu"],
        &args,
    );
}

/// The ops.cu row helpers, each on its backend launch (one block of 256 threads per row,
/// copy_runs2's (blocks, layers, 2)), with poison around every output: `rms_norm_rows`
/// (stack.rs's final norm of 1.7B's hidden rows; also a row stride past K), `linear_epilogue`
/// (linear.rs's cuBLAS path: the O projection adding the residual and writing the gate/up
/// layer's normed split rows, gate/up's SwiGLU pairs writing the down layer's plain split
/// rows, a SiLU with bias and no residual), `add_bias_rows` (weights.rs folding the code-0
/// table's bias: 2048 rows of ch), `copy_runs2` (prefix.rs moving a cached prompt head of 37
/// and of 200 positions into and out of a slot, every layer of the 1.7B's talker, 16-byte
/// pieces: 19 blocks, and 64 (the clamp) looping over 25600 pieces).
#[test]
fn ops_kernels_match_the_reference() {
    let t = talker_config("random:1.7b");
    let cp = &t.code_predictor;
    let (h, inter, ch) = (t.hidden_size, t.intermediate_size, cp.hidden_size);
    let eps = t.rms_norm_eps;
    let f = |v: usize| v as f64;
    let rows = |n: usize| (n, 1, 1);
    // N rows act bias res ldr ldy next_g xb eps
    let epilogue =
        |n: usize, m: usize, act: usize, bias: bool, res: bool, ldy: usize, g: bool, xb: bool| {
            let b = |v: bool| f(usize::from(v));
            case(
                "linear_epilogue",
                rows(m),
                256,
                &[
                    f(n),
                    f(m),
                    f(act),
                    b(bias),
                    b(res),
                    f(ldy),
                    f(ldy),
                    b(g),
                    b(xb),
                    eps,
                ],
            )
        };
    // prefix.rs: (n16.div_ceil(256)).clamp(1, 64) blocks over every layer, both pairs
    let kv_row_bytes = t.num_key_value_heads * t.head_dim.unwrap_or(h / t.num_attention_heads) * 2;
    // a stand-in cache of 2 rows of 256 positions (the layer stride only places the runs)
    let cache_units = 2 * 256 * kv_row_bytes / 16;
    let copy = |len: usize, to_slot: bool| {
        let n16 = len * kv_row_bytes / 16;
        let blocks = n16.div_ceil(256).clamp(1, 64);
        let (src, dst) = if to_slot {
            (n16, cache_units)
        } else {
            (cache_units, n16)
        };
        case(
            "copy_runs2",
            (blocks, t.num_hidden_layers, 2),
            256,
            &[f(n16), f(src), f(dst)],
        )
    };
    let args = vec![
        case("rms_norm_rows", rows(5), 256, &[f(h), f(h), 5.0, f(h), eps]),
        case(
            "rms_norm_rows",
            rows(2),
            256,
            &[f(h + 8), f(h), 2.0, f(h), eps],
        ),
        epilogue(h, 7, 0, false, true, h, true, true),
        epilogue(2 * inter, 3, 2, false, false, inter, false, true),
        epilogue(h, 4, 1, true, false, h, false, false),
        case(
            "add_bias_rows",
            rows(cp.vocab_size),
            256,
            &[f(ch), f(cp.vocab_size)],
        ),
        copy(37, true),
        copy(200, false),
    ];
    run_emulated(
        "ops_kernels_match_the_reference",
        "small_kernels.cpp",
        &["embed.cu", "ops.cu"],
        &args,
    );
}

/// `linear_epilogue` as linear.rs's cuBLAS path calls it for the talker's O and down
/// projections (stack.rs): the residual is the output buffer itself (`res` = `y`, `ldr` =
/// `ldy` = hidden), so each row's residual is read where its sum is written. O at 33 rows
/// also writes the gate/up layer's normed split rows from the updated stream; the last
/// layer's down at 64 rows (the cuBLAS path's most rows) writes none.
#[test]
fn linear_epilogue_adds_the_residual_in_place() {
    let t = talker_config("random:1.7b");
    let (h, eps) = (t.hidden_size as f64, t.rms_norm_eps);
    // N rows act bias res ldr ldy next_g xb eps alias
    let in_place = |m: usize, chain: bool| {
        let c = f64::from(u8::from(chain));
        case(
            "linear_epilogue",
            (m, 1, 1),
            256,
            &[h, m as f64, 0.0, 0.0, 1.0, h, h, c, c, eps, 1.0],
        )
    };
    let args = vec![in_place(33, true), in_place(64, false)];
    run_emulated(
        "linear_epilogue_adds_the_residual_in_place",
        "small_kernels.cpp",
        &["embed.cu", "ops.cu"],
        &args,
    );
}
