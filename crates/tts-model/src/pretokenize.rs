//! The text tokenizer's normalizer and pre-tokenizer as `tokenizers` stages, faster where
//! the loaded ones are Qwen2's: NFC skipped on ASCII text (which it leaves as is), and
//! Qwen2's split pattern ([`QWEN2_SPLIT_REGEX`]) matched without a regex engine.
//!
//! The pattern's look-ahead (`\s+(?!\S)`) makes `tokenizers` run it on `fancy-regex`'s
//! backtracking VM, which costs ~65 µs of a request's prompt when the CPU caches are cold
//! (`examples/prompt_timing.rs`). This matcher takes the pattern's seven alternatives in
//! order, at each position, as the backtracking engine does, and reads its character
//! classes (`\p{L}`, `\p{N}`, `\s`, the case-insensitive letters) from `regex-syntax`, the
//! tables that engine uses. The tests compare its pieces with `fancy-regex`'s over every
//! character and many random texts.
//!
//! [`QWEN2_SPLIT_REGEX`]: crate::tokenizer::QWEN2_SPLIT_REGEX

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};
use serde_json::Value;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::tokenizer::pattern::Pattern;
use tokenizers::{
    NormalizedString, Normalizer, NormalizerWrapper, Offsets, PreTokenizedString, PreTokenizer,
    PreTokenizerWrapper, SplitDelimiterBehavior,
};

use crate::tokenizer::QWEN2_SPLIT_REGEX;

/// The normalizer stage.
#[derive(Clone)]
pub(crate) enum Normalize {
    /// Unicode NFC, skipped on ASCII text.
    NfcUnlessAscii,
    /// Any other, as loaded.
    Loaded(NormalizerWrapper),
}

impl Normalizer for Normalize {
    fn normalize(&self, normalized: &mut NormalizedString) -> tokenizers::Result<()> {
        match self {
            Normalize::NfcUnlessAscii => {
                if !normalized.get().is_ascii() {
                    normalized.nfc();
                }
                Ok(())
            }
            Normalize::Loaded(n) => n.normalize(normalized),
        }
    }
}

/// The pre-tokenizer stage.
#[derive(Clone)]
pub(crate) enum PreTokenize {
    /// Qwen2's: the split pattern's pieces (each kept), then byte-level mapping.
    Qwen2(ByteLevel),
    /// Any other, as loaded.
    Loaded(PreTokenizerWrapper),
}

impl PreTokenize {
    /// Qwen2's stage where `loaded` is exactly `Sequence[Split(QWEN2_SPLIT_REGEX, Isolated),
    /// ByteLevel(use_regex: false)]`, else `loaded` itself.
    pub(crate) fn new(loaded: PreTokenizerWrapper) -> Self {
        let qwen2 = || -> Option<ByteLevel> {
            let v = serde_json::to_value(&loaded).ok()?;
            let [split, byte_level] = v.get("pretokenizers")?.as_array()?.as_slice() else {
                return None;
            };
            let split_is_qwen2 = v.get("type")? == "Sequence"
                && split.get("type")? == "Split"
                && split.get("pattern")?.get("Regex")? == QWEN2_SPLIT_REGEX
                && split.get("behavior")? == "Isolated"
                && split.get("invert")? == &Value::Bool(false);
            let byte_level_alone = byte_level.get("type")? == "ByteLevel"
                && byte_level.get("use_regex")? == &Value::Bool(false);
            (split_is_qwen2 && byte_level_alone)
                .then(|| serde_json::from_value(byte_level.clone()).ok())?
        };
        // the character tables are built here, not in a request
        match qwen2() {
            Some(byte_level) if Classes::get().is_some() => PreTokenize::Qwen2(byte_level),
            _ => PreTokenize::Loaded(loaded),
        }
    }
}

impl PreTokenizer for PreTokenize {
    fn pre_tokenize(&self, pretokenized: &mut PreTokenizedString) -> tokenizers::Result<()> {
        match self {
            PreTokenize::Qwen2(byte_level) => {
                pretokenized.split(|_, normalized| {
                    normalized.split(Qwen2Split, SplitDelimiterBehavior::Isolated)
                })?;
                byte_level.pre_tokenize(pretokenized)
            }
            PreTokenize::Loaded(p) => p.pre_tokenize(pretokenized),
        }
    }
}

/// Qwen2's split pattern as a `tokenizers` pattern: every piece a match.
struct Qwen2Split;

impl Pattern for Qwen2Split {
    fn find_matches(&self, inside: &str) -> tokenizers::Result<Vec<(Offsets, bool)>> {
        if inside.is_empty() {
            // as `tokenizers`' regex patterns answer an empty text
            return Ok(vec![((0, 0), false)]);
        }
        let pieces = pieces(inside).ok_or("Qwen2 split: character classes not built")?;
        Ok(pieces.into_iter().map(|p| (p, true)).collect())
    }
}

/// Inclusive ranges of one character class, sorted.
struct Ranges(Vec<(char, char)>);

impl Ranges {
    /// The ranges of `pattern`, which must parse to one Unicode class; `None` otherwise
    /// (the patterns are built in, so that is a bug, and the loaded stage is kept).
    fn of(pattern: &str) -> Option<Self> {
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(pattern)
            .ok()?;
        match hir.kind() {
            HirKind::Class(Class::Unicode(c)) => Some(Ranges(
                c.ranges().iter().map(|r| (r.start(), r.end())).collect(),
            )),
            HirKind::Literal(_) => {
                // a class of one character is simplified to a literal
                let c = pattern.chars().last()?;
                Some(Ranges(vec![(c, c)]))
            }
            _ => None,
        }
    }

    fn contains(&self, c: char) -> bool {
        self.0
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    }
}

const LETTER: u8 = 1;
const NUMBER: u8 = 2;
const SPACE: u8 = 4;

/// The pattern's character classes.
struct Classes {
    ascii: [u8; 128],
    letter: Ranges,
    number: Ranges,
    space: Ranges,
    /// `(?i)` forms of the letters after an apostrophe: s, t, r, e, v, m, l, d.
    folds: [Ranges; 8],
}

const FOLDED: [char; 8] = ['s', 't', 'r', 'e', 'v', 'm', 'l', 'd'];

impl Classes {
    fn get() -> Option<&'static Classes> {
        static CLASSES: OnceLock<Option<Classes>> = OnceLock::new();
        CLASSES
            .get_or_init(|| {
                let folds: Vec<Ranges> = FOLDED
                    .iter()
                    .map(|l| Ranges::of(&format!("(?i){l}")))
                    .collect::<Option<_>>()?;
                let mut classes = Classes {
                    ascii: [0; 128],
                    letter: Ranges::of(r"\p{L}")?,
                    number: Ranges::of(r"\p{N}")?,
                    space: Ranges::of(r"\s")?,
                    folds: folds.try_into().ok()?,
                };
                for b in 0..128u8 {
                    classes.ascii[b as usize] = classes.slow(b as char);
                }
                Some(classes)
            })
            .as_ref()
    }

    fn slow(&self, c: char) -> u8 {
        (self.letter.contains(c) as u8 * LETTER)
            | (self.number.contains(c) as u8 * NUMBER)
            | (self.space.contains(c) as u8 * SPACE)
    }

    fn of(&self, c: char) -> u8 {
        if c.is_ascii() {
            self.ascii[c as usize]
        } else {
            self.slow(c)
        }
    }

    fn folds_to(&self, c: char, letter: char) -> bool {
        FOLDED
            .iter()
            .position(|&l| l == letter)
            .is_some_and(|i| self.folds[i].contains(c))
    }
}

/// A text's characters with their classes, for look-ahead by index.
struct Chars<'a> {
    classes: &'a Classes,
    chars: Vec<(usize, char, u8)>,
    len: usize,
}

impl Chars<'_> {
    fn class(&self, i: usize) -> Option<u8> {
        self.chars.get(i).map(|&(_, _, k)| k)
    }
    fn char(&self, i: usize) -> Option<char> {
        self.chars.get(i).map(|&(_, c, _)| c)
    }
    fn is(&self, i: usize, class: u8) -> bool {
        self.class(i).is_some_and(|k| k & class != 0)
    }
    /// Neither letter, number nor space.
    fn is_other(&self, i: usize) -> bool {
        self.class(i) == Some(0)
    }
    fn is_newline(&self, i: usize) -> bool {
        matches!(self.char(i), Some('\r' | '\n'))
    }
    /// End (exclusive) of the run from `i` of characters passing `keep`.
    fn run(&self, mut i: usize, keep: impl Fn(&Self, usize) -> bool) -> usize {
        while i < self.chars.len() && keep(self, i) {
            i += 1;
        }
        i
    }
    /// End (exclusive, in characters) of the pattern's match at `i`.
    fn match_at(&self, i: usize) -> usize {
        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if self.char(i) == Some('\'') {
            let folds = |at: usize, word: &str| {
                word.chars().enumerate().all(|(k, l)| {
                    self.char(at + k)
                        .is_some_and(|c| self.classes.folds_to(c, l))
                })
            };
            for word in ["s", "t", "re", "ve", "m", "ll", "d"] {
                if folds(i + 1, word) {
                    return i + 1 + word.len();
                }
            }
        }
        let letters = |at| self.run(at, |s, k| s.is(k, LETTER));
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if self.is(i, LETTER) {
            return letters(i);
        }
        if !self.is(i, NUMBER) && !self.is_newline(i) && self.is(i + 1, LETTER) {
            return letters(i + 1);
        }
        // \p{N}
        if self.is(i, NUMBER) {
            return i + 1;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let others = |at| {
            let end = self.run(at, Self::is_other);
            self.run(end, Self::is_newline)
        };
        if self.char(i) == Some(' ') && self.is_other(i + 1) {
            return others(i + 1);
        }
        if self.is_other(i) {
            return others(i);
        }
        // the rest start with a run of spaces
        let spaces = self.run(i, |s, k| s.is(k, SPACE));
        // \s*[\r\n]+: up to the run's last newline
        if let Some(last) = (i..spaces).rev().find(|&k| self.is_newline(k)) {
            return last + 1;
        }
        // \s+(?!\S): the run, less its last space when a non-space follows
        if spaces == self.chars.len() {
            return spaces;
        }
        if spaces - i >= 2 {
            return spaces - 1;
        }
        // \s+
        spaces.max(i + 1)
    }
    fn byte(&self, i: usize) -> usize {
        self.chars.get(i).map_or(self.len, |&(b, _, _)| b)
    }
}

/// The byte ranges of `text`'s pieces under Qwen2's split pattern, in order; they cover
/// the whole text (every character is in some alternative). `None` when the character
/// tables could not be built (a bug: the patterns are built in).
fn pieces(text: &str) -> Option<Vec<(usize, usize)>> {
    let classes = Classes::get()?;
    let chars = Chars {
        classes,
        chars: text
            .char_indices()
            .map(|(b, c)| (b, c, classes.of(c)))
            .collect(),
        len: text.len(),
    };
    let mut out = Vec::with_capacity(chars.chars.len() / 3 + 1);
    let mut i = 0;
    while i < chars.chars.len() {
        let end = chars.match_at(i);
        out.push((chars.byte(i), chars.byte(end)));
        i = end;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_texts::{prompt_sets, random_texts};

    fn reference(re: &fancy_regex::Regex, text: &str) -> Vec<(usize, usize)> {
        re.find_iter(text)
            .map(|m| {
                let m = m.expect("fancy-regex match");
                (m.start(), m.end())
            })
            .collect()
    }

    fn check(re: &fancy_regex::Regex, text: &str) {
        assert_eq!(
            pieces(text).expect("classes"),
            reference(re, text),
            "pieces of {text:?}"
        );
    }

    #[test]
    fn every_character_alone_after_a_space_an_apostrophe_and_before_a_letter() {
        let re = fancy_regex::Regex::new(QWEN2_SPLIT_REGEX).unwrap();
        let mut checked = 0;
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            for text in [
                format!("{c}"),
                format!(" {c}"),
                format!("'{c}a"),
                format!("{c}a"),
                format!("  {c}1"),
            ] {
                check(&re, &text);
            }
            checked += 1;
        }
        assert_eq!(checked, 0x110000 - 0x800);
    }

    /// Texts drawn from characters at the classes' edges.
    #[test]
    fn random_texts_split_as_fancy_regex_splits_them() {
        let re = fancy_regex::Regex::new(QWEN2_SPLIT_REGEX).unwrap();
        let alphabet: Vec<String> = "aZé ſSsTtRrEeVvMmLlDdK\u{212A}'’ \t\n\r\u{0B}\u{0C}\u{85}\u{A0}\u{2028}\u{3000}\u{200B}\u{FEFF}09٣Ⅻ½²,.!?-—\"()…🙂👍🏽中文字ーア\u{301}\u{308}\u{0915}\u{093F}_#@"
            .chars()
            .map(String::from)
            .collect();
        for text in random_texts(&alphabet, 200_000, 23, 0x9E37_79B9_7F4A_7C15) {
            check(&re, &text);
        }
    }

    #[test]
    fn prompt_sets_split_as_fancy_regex_splits_them() {
        let re = fancy_regex::Regex::new(QWEN2_SPLIT_REGEX).unwrap();
        let mut lines = 0;
        for text in prompt_sets() {
            check(&re, &text);
            for line in text.lines() {
                check(&re, line);
                lines += 1;
            }
        }
        assert!(lines >= 1000, "{lines} prompt lines");
    }

    #[test]
    fn known_splits() {
        let text = "Hello world's  3.5\n\n  ok?!\r\n";
        let got: Vec<&str> = pieces(text)
            .unwrap()
            .into_iter()
            .map(|(a, b)| &text[a..b])
            .collect();
        assert_eq!(
            got,
            ["Hello", " world", "'s", " ", " ", "3", ".", "5", "\n\n", " ", " ok", "?!\r\n"]
        );
    }
}
