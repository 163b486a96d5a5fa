//! Texts for the tokenizer's tests: the prompt sets and random texts.

use std::path::Path;

/// Each prompt set of `crates/tts-bench/prompts`, whole.
pub(crate) fn prompt_sets() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tts-bench/prompts");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect()
}

/// `count` texts of 0 to `max_pieces` of `pieces` each, drawn by a xorshift sequence from
/// `seed` (nonzero), so every run checks the same texts.
pub(crate) fn random_texts(
    pieces: &[impl AsRef<str>],
    count: usize,
    max_pieces: u64,
    seed: u64,
) -> Vec<String> {
    let mut state = seed;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let len = next() % (max_pieces + 1);
            (0..len)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize].as_ref())
                .collect()
        })
        .collect()
}
