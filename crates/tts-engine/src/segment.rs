//! Long texts in segments that each fit the backend's context.
//!
//! A talker generation holds its prompt and one position per frame in the slot's context
//! (`max_positions`). Real speech takes ~0.25 s (~3.1 frames) per text token; a text whose
//! prompt and expected frames, with a margin, do not fit is spoken as consecutive
//! generations of whole sentences (the same voice, language and instructions), one after
//! another in the same stream. Shorter texts are one generation, as before.

use tts_model::Prompt;

/// The prompt positions of a generation that are not its text's tokens, from the prompt of
/// one text: a bound for every text spoken with the same voice. The voice head plus 16
/// (the role and suffix tokens); an in-context clone adds its reference's transcript and
/// frames, which every segment's prompt repeats (counted generously: the frames twice,
/// for the stream layout whose text may be shorter than them).
pub fn overhead_positions(prompt: &Prompt) -> usize {
    match prompt.codec_context.len() {
        0 => prompt.head_len + 16,
        frames => {
            (prompt.positions.len() + prompt.trailing_text.len() + frames)
                .saturating_sub(prompt.body_len)
                + 16
        }
    }
}

/// Frames budgeted per text token when deciding whether a text fits: real speech needs
/// ~3.1 (0.25 s at 12.5 frames/s); the rest is margin for slow speakers and pauses.
pub const FRAMES_PER_TOKEN_BUDGET: usize = 5;

/// The most body tokens one generation may take so that `overhead` prompt positions (the
/// prompt less its text), the tokens and their budgeted frames fit `max_positions`, and
/// the frames stay within `max_frames` (the runaway guard's hard cap). At least 1.
pub fn max_tokens_per_generation(
    overhead: usize,
    max_positions: usize,
    max_frames: usize,
) -> usize {
    let by_context = max_positions.saturating_sub(overhead) / (1 + FRAMES_PER_TOKEN_BUDGET);
    let by_frames = max_frames / FRAMES_PER_TOKEN_BUDGET;
    by_context.min(by_frames).max(1)
}

/// Splits `text` into segments of at most `max_tokens` tokens each (as `tokens` counts
/// them), cutting after sentence ends (`.`, `!`, `?`, `;`, their CJK forms, `…`, line
/// breaks) and packing whole sentences greedily; a sentence longer than that is cut after
/// commas, then between words, then between characters. Each segment is a trimmed slice
/// of `text`, none empty; together they hold all of `text` but the whitespace at the cuts.
pub fn split(text: &str, max_tokens: usize, tokens: &dyn Fn(&str) -> usize) -> Vec<String> {
    let pieces = pieces(text, max_tokens.max(1), tokens);
    pack(text, &pieces, max_tokens, tokens)
        .into_iter()
        .map(String::from)
        .collect()
}

/// `parts` (slices of `s`, in order) packed greedily into groups of at most `max_tokens`
/// (a part alone may be more): each group the trimmed slice of `s` from its first part's
/// start to its last part's end.
fn pack<'a>(
    s: &'a str,
    parts: &[&'a str],
    max_tokens: usize,
    tokens: &dyn Fn(&str) -> usize,
) -> Vec<&'a str> {
    let mut out = Vec::new();
    // the current group: s[start..end]
    let mut group: Option<(usize, usize)> = None;
    for p in parts {
        let (p_start, p_end) = (offset_in(s, p), offset_in(s, p) + p.len());
        group = match group {
            Some((start, end)) if tokens(s[start..p_end].trim()) > max_tokens => {
                out.push(s[start..end].trim());
                Some((p_start, p_end))
            }
            Some((start, _)) => Some((start, p_end)),
            None => Some((p_start, p_end)),
        };
    }
    if let Some((start, end)) = group {
        out.push(s[start..end].trim());
    }
    out
}

/// The sentences of `text`, each cut further (commas, words, characters) until it fits
/// `max_tokens`; trimmed, none empty.
fn pieces<'a>(text: &'a str, max_tokens: usize, tokens: &dyn Fn(&str) -> usize) -> Vec<&'a str> {
    let mut out = Vec::new();
    for sentence in cut_after(text, is_sentence_end) {
        fit(sentence, max_tokens, tokens, 0, &mut out);
    }
    out
}

/// Pushes `s` (trimmed, when not empty) into `out`, cut by the rules from `level` on until
/// every piece fits.
fn fit<'a>(
    s: &'a str,
    max_tokens: usize,
    tokens: &dyn Fn(&str) -> usize,
    level: usize,
    out: &mut Vec<&'a str>,
) {
    let s = s.trim();
    if s.is_empty() {
        return;
    }
    if tokens(s) <= max_tokens {
        out.push(s);
        return;
    }
    let parts: Vec<&str> = match level {
        0 => cut_after(s, |c| matches!(c, ',' | '，' | '、' | ':' | '：')),
        1 => cut_after(s, char::is_whitespace),
        _ => {
            // between characters: the longest prefix that fits, then the rest
            let mut end = 0;
            for (i, c) in s.char_indices() {
                let next = i + c.len_utf8();
                if end > 0 && tokens(&s[..next]) > max_tokens {
                    break;
                }
                end = next;
            }
            out.push(&s[..end]);
            fit(&s[end..], max_tokens, tokens, level, out);
            return;
        }
    };
    if parts.len() < 2 {
        fit(s, max_tokens, tokens, level + 1, out);
        return;
    }
    // the parts packed greedily, each group cut further if one part alone is too long
    for group in pack(s, &parts, max_tokens, tokens) {
        fit(group, max_tokens, tokens, level + 1, out);
    }
}

/// Where `part` (a slice of `s`) starts in `s`.
fn offset_in(s: &str, part: &str) -> usize {
    part.as_ptr() as usize - s.as_ptr() as usize
}

fn is_sentence_end(c: char) -> bool {
    matches!(
        c,
        '.' | '!' | '?' | ';' | '。' | '！' | '？' | '；' | '…' | '\n'
    )
}

/// `s` cut after each run of characters matching `at` (the run stays with the piece
/// before it); the pieces cover `s`.
fn cut_after(s: &str, at: impl Fn(char) -> bool) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_matches = chars.peek().is_some_and(|&(_, n)| at(n));
        if at(c) && !next_matches {
            let end = i + c.len_utf8();
            out.push(&s[start..end]);
            start = end;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per whitespace-separated word (a stand-in tokenizer).
    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    /// One token per character.
    fn chars(s: &str) -> usize {
        s.chars().count()
    }

    fn squash(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_text_that_fits_is_one_segment() {
        let t = "Hello there. How are you today?";
        assert_eq!(split(t, 100, &words), vec![t.to_string()]);
    }

    #[test]
    fn sentences_are_packed_whole_up_to_the_budget() {
        let t = "One two three. Four five six! Seven eight nine? Ten eleven.";
        let s = split(t, 6, &words);
        assert_eq!(
            s,
            vec![
                "One two three. Four five six!",
                "Seven eight nine? Ten eleven."
            ]
        );
        assert!(s.iter().all(|x| words(x) <= 6));
        assert_eq!(squash(&s.join(" ")), squash(t));
    }

    #[test]
    fn a_long_sentence_is_cut_at_commas_then_words() {
        let t = "alpha beta, gamma delta epsilon, zeta eta theta iota kappa lambda mu.";
        let s = split(t, 4, &words);
        assert!(
            s.iter().all(|x| words(x) <= 4 && !x.trim().is_empty()),
            "{s:?}"
        );
        assert_eq!(s[0], "alpha beta,");
        assert_eq!(squash(&s.join(" ")), squash(t));
    }

    #[test]
    fn text_without_breaks_is_cut_between_characters() {
        let t = "这是一个没有任何标点符号的很长的句子需要被切开";
        let s = split(t, 5, &chars);
        assert!(s.iter().all(|x| chars(x) <= 5 && !x.is_empty()), "{s:?}");
        assert_eq!(s.concat(), t);
    }

    #[test]
    fn cjk_sentence_ends_and_line_breaks_cut() {
        let t = "第一句。第二句！\nThird line\nfourth";
        assert_eq!(
            split(t, 2, &words),
            vec!["第一句。第二句！", "Third line", "fourth"]
        );
        assert_eq!(split(t, 4, &chars)[..2], ["第一句。", "第二句！"]);
    }

    #[test]
    fn punctuation_runs_stay_with_their_sentence() {
        let t = "Wait... what?! Yes.";
        assert_eq!(split(t, 1, &words), vec!["Wait...", "what?!", "Yes."]);
    }

    #[test]
    fn the_budget_leaves_room_for_the_frames() {
        // 2048 positions, 30 of them the prompt's own: (2048 - 30) / 6 = 336 tokens
        assert_eq!(max_tokens_per_generation(30, 2048, 8191), 336);
        // the frame cap binds: 2047 frames / 5 per token
        assert_eq!(max_tokens_per_generation(30, 32768, 2047), 409);
        assert_eq!(max_tokens_per_generation(5000, 2048, 2047), 1);
    }
}
