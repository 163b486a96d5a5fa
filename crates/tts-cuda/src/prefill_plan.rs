//! How the prompts of one prefill call become GPU passes: which rows share a pass (all the
//! rows that fit the token budget when batching is on, else one row per pass), and one
//! pass's token-major plan, padded to the graph buckets it replays. Plain host code,
//! unit-tested without a GPU.

use std::ops::Range;

use crate::talker::PrefillPlan;

/// One row's part of a prefill: the tokens still to run (after a cached prompt head).
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillJob {
    pub slot: i32,
    /// Position of the first token to run.
    pub start: usize,
    pub text: Vec<i32>,
    /// Codec ids (-1: none), one per text id.
    pub codec: Vec<i32>,
    /// Vectors added to tokens' inputs (a cloned voice's speaker vector, reference
    /// frames): (token index within `text`, vector).
    pub extra: Vec<(usize, Vec<f32>)>,
}

impl PrefillJob {
    pub fn tokens(&self) -> usize {
        self.text.len()
    }
}

/// Consecutive groups of rows, one pass each: with `batched`, as many rows as fit
/// `max_tokens` tokens and `max_rows` rows (a row longer than the budget alone), else one
/// row per pass.
pub fn passes(
    tokens: &[usize],
    batched: bool,
    max_tokens: usize,
    max_rows: usize,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let (mut j, mut sum) = (i + 1, tokens[i]);
        while batched && j < tokens.len() && j - i < max_rows && sum + tokens[j] <= max_tokens {
            sum += tokens[j];
            j += 1;
        }
        out.push(i..j);
        i = j;
    }
    out
}

/// A slot that appears more than once among `slots` (one call prefills a slot once).
pub fn repeated_slot(slots: &[u32]) -> Option<u32> {
    let mut seen = std::collections::HashSet::new();
    slots.iter().copied().find(|s| !seen.insert(*s))
}

/// The token bucket of a pass of `n` tokens: 1 for a single position (a prefill after a
/// cached head), else 16, 24 (with `b24`: `CudaOptions::prefill_bucket_24`) or a power of
/// two from 32. 24 holds most prompts after a cached head (17 to 25 tokens for 449 of the
/// bench's 1,000: `tile_wg.cu`'s 24-row entry instead of its 32-row one).
pub fn token_bucket(n: usize, b24: bool) -> usize {
    match n {
        1 => 1,
        0..=16 => 16,
        17..=24 if b24 => 24,
        _ => n.next_power_of_two(),
    }
}

/// The token buckets of more than one token, in order, up to `max` tokens: 16, 24 (with
/// `b24`), 32, 64 …
pub fn token_buckets(max: usize, b24: bool) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(16), move |&t| Some(token_bucket(t + 1, b24)))
        .take_while(move |&t| t <= max)
}

/// One pass over `jobs`: their tokens one after another, each row's last token, and with
/// `pad_to = Some((tokens, rows))` padding up to those buckets (padding tokens have slot
/// -1 and text `pad_text`; padding rows have slot -1 and no last token, so they write
/// nothing).
pub fn pass_plan(
    jobs: &[PrefillJob],
    pad_text: i32,
    pad_to: Option<(usize, usize)>,
) -> PrefillPlan {
    let n: usize = jobs.iter().map(PrefillJob::tokens).sum();
    let mut plan = PrefillPlan {
        text: Vec::with_capacity(n),
        codec: Vec::with_capacity(n),
        slots: Vec::with_capacity(n),
        positions: Vec::with_capacity(n),
        last: Vec::with_capacity(jobs.len()),
        row_slots: Vec::with_capacity(jobs.len()),
    };
    for j in jobs {
        plan.text.extend(&j.text);
        plan.codec.extend(&j.codec);
        plan.slots.extend(std::iter::repeat_n(j.slot, j.tokens()));
        plan.positions
            .extend((j.start..j.start + j.tokens()).map(|p| p as i32));
        plan.last.push(plan.text.len() as i32 - 1);
        plan.row_slots.push(j.slot);
    }
    if let Some((tokens, rows)) = pad_to {
        plan.text.resize(tokens.max(n), pad_text);
        plan.codec.resize(tokens.max(n), -1);
        plan.slots.resize(tokens.max(n), -1);
        plan.positions.resize(tokens.max(n), 0);
        plan.last.resize(rows.max(jobs.len()), -1);
        plan.row_slots.resize(rows.max(jobs.len()), -1);
    }
    plan
}

/// One step row of a merged pass: slot, position of its new token, text id.
pub type StepToken = (i32, i32, i32);

/// One talker pass over `jobs`' prompts and then one token for each of `steps` (a talker
/// step of other slots): the prompts' tokens as [`pass_plan`] lays them out (no padding),
/// then each step row's token (codec id -1: its input is the frame's code embeddings),
/// whose output row is its own token. Rows: the prompts' in order, then the step rows'.
pub fn merged_plan(jobs: &[PrefillJob], steps: &[StepToken]) -> PrefillPlan {
    // unpadded: no pad text id is written
    let mut plan = pass_plan(jobs, -1, None);
    for &(slot, position, text) in steps {
        plan.last.push(plan.text.len() as i32);
        plan.row_slots.push(slot);
        plan.text.push(text);
        plan.codec.push(-1);
        plan.slots.push(slot);
        plan.positions.push(position);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(slot: i32, start: usize, n: usize) -> PrefillJob {
        PrefillJob {
            slot,
            start,
            text: (0..n as i32).map(|t| 100 * slot + t).collect(),
            codec: vec![-1; n],
            extra: Vec::new(),
        }
    }

    #[test]
    fn passes_fill_the_token_and_row_budgets_in_order() {
        assert_eq!(
            passes(&[20, 30, 5], false, 1024, 16),
            vec![0..1, 1..2, 2..3]
        );
        assert_eq!(passes(&[20, 30, 5], true, 1024, 16), vec![0..3]);
        assert_eq!(passes(&[20, 30, 5], true, 50, 16), vec![0..2, 2..3]);
        assert_eq!(passes(&[20, 30, 5], true, 1024, 2), vec![0..2, 2..3]);
        // a row over the budget still runs, alone
        assert_eq!(passes(&[2000, 3], true, 1024, 16), vec![0..1, 1..2]);
        assert!(passes(&[], true, 1024, 16).is_empty());
    }

    #[test]
    fn a_slot_twice_in_one_call_is_found() {
        assert_eq!(repeated_slot(&[3, 5, 7]), None);
        assert_eq!(repeated_slot(&[3, 5, 3, 5]), Some(3));
        assert_eq!(repeated_slot(&[]), None);
    }

    #[test]
    fn token_buckets_are_one_16_24_or_powers_of_two_from_32() {
        let counts = [1, 2, 16, 17, 24, 25, 33, 100];
        let b: Vec<usize> = counts.map(|n| token_bucket(n, true)).to_vec();
        assert_eq!(b, vec![1, 16, 16, 24, 24, 32, 64, 128]);
        // without the 24-token bucket: powers of two from 16
        let b: Vec<usize> = counts.map(|n| token_bucket(n, false)).to_vec();
        assert_eq!(b, vec![1, 16, 16, 32, 32, 32, 64, 128]);
        for (b24, want) in [
            (true, vec![16, 24, 32, 64, 128]),
            (false, vec![16, 32, 64, 128]),
        ] {
            let all: Vec<usize> = token_buckets(128, b24).collect();
            assert_eq!(all, want);
            // every pass of 2..=max tokens has its bucket among them
            for n in 2..=128 {
                assert!(all.contains(&token_bucket(n, b24)), "{n} tokens");
            }
        }
        assert_eq!(token_buckets(20, true).collect::<Vec<_>>(), vec![16]);
    }

    #[test]
    fn a_pass_concatenates_rows_and_marks_each_last_token() {
        let plan = pass_plan(&[job(3, 0, 2), job(5, 9, 3)], 7, None);
        assert_eq!(plan.text, vec![300, 301, 500, 501, 502]);
        assert_eq!(plan.slots, vec![3, 3, 5, 5, 5]);
        assert_eq!(plan.positions, vec![0, 1, 9, 10, 11]);
        assert_eq!(plan.last, vec![1, 4]);
        assert_eq!(plan.row_slots, vec![3, 5]);
    }

    #[test]
    fn a_merged_pass_puts_each_step_row_after_the_prompts_as_its_own_row() {
        let plan = merged_plan(&[job(3, 0, 2), job(5, 9, 3)], &[(1, 40, 77), (6, 12, 88)]);
        assert_eq!(plan.text, vec![300, 301, 500, 501, 502, 77, 88]);
        assert_eq!(plan.codec, vec![-1; 7]);
        assert_eq!(plan.slots, vec![3, 3, 5, 5, 5, 1, 6]);
        assert_eq!(plan.positions, vec![0, 1, 9, 10, 11, 40, 12]);
        assert_eq!(plan.last, vec![1, 4, 5, 6]);
        assert_eq!(plan.row_slots, vec![3, 5, 1, 6]);
    }

    #[test]
    fn padding_tokens_and_rows_write_nothing() {
        let plan = pass_plan(&[job(3, 4, 2), job(5, 0, 1)], 7, Some((16, 4)));
        assert_eq!(plan.text.len(), 16);
        assert_eq!(&plan.text[3..], &[7; 13]);
        assert_eq!(&plan.slots[3..], &[-1; 13]);
        assert_eq!(&plan.codec[3..], &[-1; 13]);
        assert_eq!(plan.last, vec![1, 2, -1, -1]);
        assert_eq!(plan.row_slots, vec![3, 5, -1, -1]);
        // one row, one token (after a cached head): bucket 1, nothing added
        let one = pass_plan(&[job(2, 30, 1)], 7, Some((token_bucket(1, true), 1)));
        assert_eq!((one.text.len(), one.last.clone()), (1, vec![0]));
    }
}
