//! Tokenizing text that arrives in pieces (text from an LLM, for instance) so that the
//! concatenated ids equal tokenizing the whole text at once.
//!
//! Qwen2's byte-level BPE first splits text with [`QWEN2_SPLIT_REGEX`](crate::tokenizer::QWEN2_SPLIT_REGEX)
//! and merges only inside those pieces, so cutting the text where the split always has a
//! boundary, whatever follows, gives the same ids. The rule used here: a cut may go just
//! before a whitespace character other than `\r` and `\n` whose preceding character is not
//! whitespace. Why that is a boundary:
//! - no pre-token ends in such whitespace after a non-whitespace character: letter runs,
//!   digits, contractions and punctuation runs stop at whitespace, and a punctuation run
//!   only swallows *line breaks* (`[\r\n]*`), which the rule excludes;
//! - whitespace pre-tokens cannot cover the character before the cut (it is not
//!   whitespace), and the one lookahead of the pattern (`\s+(?!\S)`) looks at most one
//!   character past a whitespace run, which ends before that character;
//! - matching restarts at the cut and the pattern has no lookbehind, so the text after it
//!   splits the same alone; NFC cannot compose across it (whitespace composes with
//!   nothing), and special tokens contain no whitespace.
//!
//! Text after the last such cut stays pending until more text or the end arrives.
//! Leading whitespace of the whole text is dropped: in the prompt the text follows
//! `assistant\n`, and a leading line break would merge with that newline.

use crate::error::ModelError;
use crate::tokenizer::TextTokenizer;

/// Incremental tokenizer state of one text stream.
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    /// Text received but not yet tokenized (starts after the last cut).
    pending: String,
    /// Whether a non-whitespace character has been seen (leading whitespace is dropped).
    started: bool,
    /// Characters accepted so far (leading whitespace excluded).
    chars: usize,
}

impl TextStream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a piece of text; returns the ids that are now final (possibly none).
    pub fn push(&mut self, tokenizer: &TextTokenizer, piece: &str) -> Result<Vec<u32>, ModelError> {
        let piece = if self.started {
            piece
        } else {
            let trimmed = piece.trim_start();
            self.started = !trimmed.is_empty();
            trimmed
        };
        self.chars += piece.chars().count();
        self.pending.push_str(piece);
        match safe_cut(&self.pending) {
            Some(cut) => {
                let ids = tokenizer.encode(&self.pending[..cut])?;
                self.pending.drain(..cut);
                Ok(ids)
            }
            None => Ok(Vec::new()),
        }
    }

    /// Ends the text; returns the ids of what was still pending.
    pub fn finish(&mut self, tokenizer: &TextTokenizer) -> Result<Vec<u32>, ModelError> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let ids = tokenizer.encode(&self.pending)?;
        self.pending.clear();
        Ok(ids)
    }

    /// Text received but not yet tokenized.
    pub fn pending(&self) -> &str {
        &self.pending
    }

    /// Characters accepted so far (leading whitespace excluded).
    pub fn chars(&self) -> usize {
        self.chars
    }
}

/// The last byte offset `i > 0` where `text` may be cut (see the module docs), if any.
pub fn safe_cut(text: &str) -> Option<usize> {
    let mut cut = None;
    let mut prev_ws = true; // nothing before offset 0: never cut there
    for (i, c) in text.char_indices() {
        let ws = c.is_whitespace();
        if ws && c != '\r' && c != '\n' && !prev_ws {
            cut = Some(i);
        }
        prev_ws = ws;
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::qwen_tokenizer;

    const TEXTS: &[&str] = &[
        "Hello, world! This is a test.",
        "It's   three  spaces\tand a tab; don't split   them.",
        "Numbers 12345 and 3.14159, plus $100.00 (approx.) & more...",
        "Line one!\nLine two?\r\n\n  Indented line.\n",
        "Mixed 中文 text, 日本語も — and émojis 🙂🙂 here.",
        "  leading spaces and trailing ones   ",
        "Combining: e\u{301}te\u{301} cafe\u{301} (NFC composes these).",
        "Quotes \"like this\" and 'that', or «these» — then: done",
        "Special <|im_end|> tokens written in text, and a\u{a0}no-break space.",
        "A\u{2028}line separator and \u{3000}ideographic space.",
    ];

    fn stream_ids(tok: &TextTokenizer, pieces: &[&str]) -> Vec<u32> {
        let mut s = TextStream::new();
        let mut ids = Vec::new();
        for p in pieces {
            ids.extend(s.push(tok, p).unwrap());
        }
        ids.extend(s.finish(tok).unwrap());
        ids
    }

    #[test]
    fn split_anywhere_equals_the_whole_text() {
        let tok = qwen_tokenizer().unwrap();
        for text in TEXTS {
            let whole = tok.encode(text.trim_start()).unwrap();
            let bounds: Vec<usize> = text
                .char_indices()
                .map(|(i, _)| i)
                .chain([text.len()])
                .collect();
            for &i in &bounds {
                let got = stream_ids(&tok, &[&text[..i], &text[i..]]);
                assert_eq!(got, whole, "{text:?} split at byte {i}");
            }
            // one character at a time
            let chars: Vec<String> = text.chars().map(String::from).collect();
            let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
            assert_eq!(stream_ids(&tok, &pieces), whole, "{text:?} char by char");
        }
    }

    #[test]
    fn ids_become_final_before_the_end() {
        let tok = qwen_tokenizer().unwrap();
        let mut s = TextStream::new();
        assert!(s.push(&tok, "Hello").unwrap().is_empty(), "no cut yet");
        let ids = s.push(&tok, " world, how").unwrap();
        assert_eq!(ids, tok.encode("Hello world,").unwrap());
        assert_eq!(s.pending(), " how");
        assert_eq!(s.finish(&tok).unwrap(), tok.encode(" how").unwrap());
        assert_eq!(s.chars(), "Hello world, how".len());
    }

    #[test]
    fn cuts_only_before_inline_whitespace_after_a_non_space() {
        assert_eq!(safe_cut("ab cd"), Some(2));
        assert_eq!(safe_cut("ab  cd ef"), Some(6));
        assert_eq!(safe_cut(" ab"), None);
        assert_eq!(
            safe_cut("ab!\ncd"),
            None,
            "punctuation swallows line breaks"
        );
        assert_eq!(safe_cut("ab\tcd"), Some(2));
        assert_eq!(safe_cut("abc"), None);
    }

    #[test]
    fn streamed_prompt_equals_build_prompt_in_stream_mode() {
        use crate::prompt::{build_prompt, build_streaming_prefix, SpeechRequest, TextMode};
        let model = crate::model::Model::load("demo", Default::default()).unwrap();
        let (cfg, tok) = (&model.config, &model.tokenizer);
        for (voice, language, instructions) in [
            (Some("ryan"), "English", None),
            (Some("eric"), "auto", Some("Speak slowly.")),
            (None, "chinese", None),
        ] {
            for text in TEXTS.iter().filter(|t| !t.starts_with(char::is_whitespace)) {
                let req = SpeechRequest {
                    text: text.to_string(),
                    voice: voice.map(String::from),
                    language: language.into(),
                    instructions: instructions.map(String::from),
                    text_mode: TextMode::Stream,
                    clone: None,
                };
                let want = build_prompt(cfg, tok, &req).unwrap();
                let prefix = build_streaming_prefix(cfg, tok, &req).unwrap();
                let body = stream_ids(tok, &[text]);
                let got = prefix.with_first_token(body[0]);
                assert_eq!(got.positions, want.positions, "{text:?}");
                assert_eq!(got.instruct_ids, want.instruct_ids);
                let mut trailing = body[1..].to_vec();
                trailing.push(cfg.tts_eos_token_id);
                assert_eq!(trailing, want.trailing_text, "{text:?}");
                assert_eq!(body.len(), want.body_len);
                assert_eq!(got.head_len, want.head_len, "{text:?}");
                assert_eq!(want.head_len, want.positions.len() - 1, "{text:?}");
            }
        }
    }

    #[test]
    fn prompts_of_one_voice_share_their_head_in_both_text_modes() {
        use crate::prompt::{build_prompt, SpeechRequest, TextMode};
        let model = crate::model::Model::load("demo", Default::default()).unwrap();
        let (cfg, tok) = (&model.config, &model.tokenizer);
        let prompt = |text: &str, mode, instructions: Option<&str>| {
            let req = SpeechRequest {
                text: text.into(),
                voice: Some("ryan".into()),
                language: "English".into(),
                instructions: instructions.map(String::from),
                text_mode: mode,
                clone: None,
            };
            build_prompt(cfg, tok, &req).unwrap()
        };
        let a = prompt("Hello there.", TextMode::Stream, None);
        for (b, mode) in [
            (
                prompt("A different sentence.", TextMode::Stream, None),
                "stream",
            ),
            (prompt("Hello there.", TextMode::Prefill, None), "prefill"),
            (prompt("Something else", TextMode::Prefill, None), "prefill"),
        ] {
            assert_eq!(b.head_len, a.head_len, "{mode}");
            assert_eq!(
                b.positions[..b.head_len],
                a.positions[..a.head_len],
                "{mode}"
            );
            assert!(b.positions.len() > b.head_len);
        }
        // instructions are part of the head
        let i = prompt("Hello there.", TextMode::Stream, Some("Whisper."));
        assert!(i.head_len > a.head_len);
        assert_ne!(i.positions[..i.head_len - a.head_len], [][..]);
        assert_eq!(
            i.positions[i.head_len - a.head_len..i.head_len],
            a.positions[..a.head_len]
        );
    }
}
