//! The Qwen2 byte-level BPE text tokenizer, via Hugging Face `tokenizers`.
//!
//! Three ways in: a `tokenizer.json` (used as is), the slow-tokenizer files `vocab.json` +
//! `merges.txt` + `tokenizer_config.json` (converted the way `transformers` converts
//! Qwen2Tokenizer to the fast one), or a tiktoken rank file (Qwen's `qwen.tiktoken`, for the
//! built-in random models), converted to vocab + merges.

use std::path::Path;

use base64::Engine;
use rayon::prelude::*;
use serde_json::Value;

/// Token string -> id, as `tokenizers`' BPE wants it.
type Vocab = ahash::AHashMap<String, u32>;

use crate::error::ModelError;
use crate::pretokenize::{Normalize, PreTokenize};

/// Qwen2's pre-tokenizer split pattern (the one `Qwen2TokenizerFast` uses).
pub const QWEN2_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// `tokenizers`' pipeline with the two stages below in place of the loaded ones.
type Inner = tokenizers::TokenizerImpl<
    tokenizers::ModelWrapper,
    Normalize,
    PreTokenize,
    tokenizers::PostProcessorWrapper,
    tokenizers::DecoderWrapper,
>;

/// A text tokenizer producing Qwen2 token ids.
pub struct TextTokenizer {
    inner: Inner,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

/// An added (special) token: id and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedToken {
    pub id: u32,
    pub content: String,
    pub special: bool,
}

impl TextTokenizer {
    /// Loads the tokenizer of a checkpoint directory.
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        let json_path = dir.join("tokenizer.json");
        if json_path.exists() {
            let stock = tokenizers::Tokenizer::from_file(&json_path)
                .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", json_path.display())))?;
            return Self::from_stock(stock);
        }
        let vocab_path = dir.join("vocab.json");
        let merges_path = dir.join("merges.txt");
        let config_path = dir.join("tokenizer_config.json");
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| ModelError::Io {
                path: p.to_path_buf(),
                source,
            })
        };
        let vocab: std::collections::HashMap<String, u32> =
            serde_json::from_str(&read(&vocab_path)?).map_err(|e| ModelError::Json {
                path: vocab_path.clone(),
                message: e.to_string(),
            })?;
        let mut merges = Vec::new();
        for (n, line) in read(&merges_path)?.lines().enumerate() {
            if line.is_empty() || line.starts_with("#version") {
                continue;
            }
            let (a, b) = line.split_once(' ').ok_or_else(|| {
                ModelError::Tokenizer(format!(
                    "{} line {}: not a merge pair",
                    merges_path.display(),
                    n + 1
                ))
            })?;
            merges.push((a.to_string(), b.to_string()));
        }
        let added = if config_path.exists() {
            let cfg: Value =
                serde_json::from_str(&read(&config_path)?).map_err(|e| ModelError::Json {
                    path: config_path.clone(),
                    message: e.to_string(),
                })?;
            added_tokens_from_config(&config_path, &cfg)?
        } else {
            Vec::new()
        };
        Self::from_stock(from_parts(vocab.into_iter().collect(), merges, &added)?)
    }

    /// Builds a tokenizer from a tiktoken rank file (`<base64 token> <rank>` per line) plus
    /// added special tokens.
    pub fn from_tiktoken(ranks: &str, specials: &[AddedToken]) -> Result<Self, ModelError> {
        Self::from_stock(tiktoken_stock(ranks, specials)?)
    }

    /// `stock`'s pipeline with NFC skipped on ASCII text and Qwen2's split pattern matched
    /// by hand ([`crate::pretokenize`]) where `stock` has them; the same ids either way.
    fn from_stock(stock: tokenizers::Tokenizer) -> Result<Self, ModelError> {
        let stock = stock.into_inner();
        let normalizer = stock.get_normalizer().cloned().map(|n| match n {
            tokenizers::NormalizerWrapper::NFC(_) => Normalize::NfcUnlessAscii,
            n => Normalize::Loaded(n),
        });
        let pre_tokenizer = stock.get_pre_tokenizer().cloned().map(PreTokenize::new);
        let mut inner = Inner::new(stock.get_model().clone());
        inner
            .with_normalizer(normalizer)
            .with_pre_tokenizer(pre_tokenizer)
            .with_post_processor(stock.get_post_processor().cloned())
            .with_decoder(stock.get_decoder().cloned())
            .with_added_vocabulary(stock.get_added_vocabulary().clone())
            .with_padding(stock.get_padding().cloned())
            .with_truncation(stock.get_truncation().cloned())
            .map_err(|e| ModelError::Tokenizer(format!("truncation: {e}")))?;
        Ok(Self { inner })
    }

    /// Token ids of `text` (special tokens written in the text are recognised, as in the
    /// reference; no BOS/EOS is added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(format!("encoding: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids` (for logs and debugging).
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| ModelError::Tokenizer(format!("decoding: {e}")))
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of an exact token string, if it exists.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

/// `tokenizers`' tokenizer of a tiktoken rank file (`<base64 token> <rank>` per line) plus
/// added special tokens.
fn tiktoken_stock(
    ranks: &str,
    specials: &[AddedToken],
) -> Result<tokenizers::Tokenizer, ModelError> {
    let byte_map = bytes_to_unicode();
    let mut vocab: Vocab = Vocab::with_capacity(160_000);
    for (n, line) in ranks.lines().enumerate() {
        let mut parts = line.split_whitespace();
        let (Some(b64), Some(rank)) = (parts.next(), parts.next()) else {
            continue;
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| ModelError::Tokenizer(format!("tiktoken line {}: {e}", n + 1)))?;
        let rank: u32 = rank
            .parse()
            .map_err(|e| ModelError::Tokenizer(format!("tiktoken line {}: {e}", n + 1)))?;
        let token: String = bytes.iter().map(|b| byte_map[*b as usize]).collect();
        vocab.insert(token, rank);
    }
    // Each multi-byte token is produced by merging any split whose halves are tokens;
    // merges are ordered by the rank of the merged token (as transformers' converter).
    let mut merges: Vec<(u32, u32, u32, String, String)> = (*vocab)
        .par_iter()
        .flat_map_iter(|(token, &rank)| {
            let vocab = &vocab;
            token.char_indices().skip(1).filter_map(move |(i, _)| {
                let (l, r) = token.split_at(i);
                let (lr, rr) = (vocab.get(l)?, vocab.get(r)?);
                Some((rank, *lr, *rr, l.to_string(), r.to_string()))
            })
        })
        .collect();
    merges.par_sort_unstable_by_key(|m| (m.0, m.1, m.2));
    let merges = merges.into_iter().map(|(_, _, _, l, r)| (l, r)).collect();
    from_parts(vocab, merges, specials)
}

/// `tokenizers`' Qwen2 tokenizer of a vocabulary, merges and added tokens, as
/// `transformers` converts the slow tokenizer.
fn from_parts(
    mut vocab: Vocab,
    merges: Vec<(String, String)>,
    added: &[AddedToken],
) -> Result<tokenizers::Tokenizer, ModelError> {
    use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
    use tokenizers::models::bpe::BPE;
    use tokenizers::normalizers::unicode::NFC;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::pre_tokenizers::sequence::Sequence;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::SplitDelimiterBehavior;

    // Added tokens keep their ids: put each in the vocabulary at its id, so marking it
    // special below reuses that id (as `added_tokens` in a tokenizer.json does).
    let used: std::collections::HashSet<u32> = vocab.values().copied().collect();
    for t in added {
        match vocab.get(&t.content) {
            Some(&id) if id == t.id => {}
            Some(&id) => {
                return Err(ModelError::Tokenizer(format!(
                    "added token `{}` has id {} but the vocabulary gives it {id}",
                    t.content, t.id
                )))
            }
            None if used.contains(&t.id) => {
                return Err(ModelError::Tokenizer(format!(
                    "added token `{}` wants id {}, which the vocabulary already uses",
                    t.content, t.id
                )))
            }
            None => {
                vocab.insert(t.content.clone(), t.id);
            }
        }
    }
    let err =
        |e: tokenizers::Error| ModelError::Tokenizer(format!("building the BPE tokenizer: {e}"));
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(err)?;
    let split = Split::new(
        SplitPattern::Regex(QWEN2_SPLIT_REGEX.to_string()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(err)?;
    let byte_level = ByteLevel::new(false, false, false);
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner
        .with_normalizer(Some(NFC))
        .with_pre_tokenizer(Some(Sequence::new(vec![split.into(), byte_level.into()])))
        .with_post_processor(Some(byte_level))
        .with_decoder(Some(ByteLevelDecoder::default()));
    let specials: Vec<tokenizers::AddedToken> = added
        .iter()
        .map(|t| tokenizers::AddedToken::from(t.content.clone(), t.special).normalized(false))
        .collect();
    inner.add_special_tokens(&specials);
    Ok(inner)
}

fn added_tokens_from_config(path: &Path, cfg: &Value) -> Result<Vec<AddedToken>, ModelError> {
    let Some(map) = cfg.get("added_tokens_decoder").and_then(|v| v.as_object()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(map.len());
    for (id, tok) in map {
        let bad = |message: &str| ModelError::Config {
            path: path.to_path_buf(),
            field: format!("added_tokens_decoder.{id}"),
            message: message.into(),
        };
        let id: u32 = id.parse().map_err(|_| bad("key is not an integer id"))?;
        let content = tok
            .get("content")
            .and_then(|c| c.as_str())
            .ok_or_else(|| bad("missing `content`"))?;
        let special = tok.get("special").and_then(|s| s.as_bool()).unwrap_or(true);
        out.push(AddedToken {
            id,
            content: content.to_string(),
            special,
        });
    }
    out.sort_by_key(|t| t.id);
    Ok(out)
}

/// GPT-2's reversible byte -> printable character map used by byte-level BPE.
fn bytes_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let printable = |b: u32| {
        (b'!' as u32..=b'~' as u32).contains(&b)
            || (0xA1..=0xAC).contains(&b)
            || (0xAE..=0xFF).contains(&b)
    };
    let mut extra = 0u32;
    for b in 0..256u32 {
        map[b as usize] = if printable(b) {
            char::from_u32(b).unwrap_or('?')
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap_or('?')
        };
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_texts::{prompt_sets, random_texts};

    #[test]
    fn byte_map_is_a_bijection_with_gpt2_values() {
        let m = bytes_to_unicode();
        let set: std::collections::HashSet<char> = m.iter().copied().collect();
        assert_eq!(set.len(), 256);
        assert_eq!(m[b' ' as usize], 'Ġ');
        assert_eq!(m[b'\n' as usize], 'Ċ');
        assert_eq!(m[b'a' as usize], 'a');
    }

    #[test]
    fn tiktoken_ranks_become_a_working_bpe() {
        // bytes a, b, c plus merged "ab" and "abc"
        let e = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let ranks = format!(
            "{} 0\n{} 1\n{} 2\n{} 3\n{} 4\n",
            e("a"),
            e("b"),
            e("c"),
            e("ab"),
            e("abc")
        );
        let specials = [AddedToken {
            id: 5,
            content: "<|x|>".into(),
            special: true,
        }];
        let tok = TextTokenizer::from_tiktoken(&ranks, &specials).unwrap();
        assert_eq!(tok.encode("abc").unwrap(), vec![4]);
        assert_eq!(tok.encode("ab<|x|>c").unwrap(), vec![3, 5, 2]);
        assert_eq!(tok.decode(&[3, 2]).unwrap(), "abc");
    }

    /// Texts for comparing a tokenizer with `tokenizers`' stock pipeline: the prompt sets'
    /// lines and random texts over characters at the split pattern's edges (non-ASCII ones
    /// too, so NFC runs; decomposed accents, which it composes) with the special tokens.
    fn comparison_texts() -> Vec<String> {
        let mut texts: Vec<String> = prompt_sets()
            .iter()
            .flat_map(|set| set.lines().map(str::to_string).collect::<Vec<_>>())
            .collect();
        let pieces = [
            "a",
            "Z",
            "é",
            "e\u{301}",
            " ",
            "  ",
            "\n",
            "\r\n",
            "\t",
            "'s",
            "'LL",
            "\u{A0}",
            "3",
            "٣",
            "½",
            ",",
            "!?",
            "🙂",
            "中文",
            "\u{308}",
            "ſ",
            "<|im_start|>",
            "<tts_pad>",
            "-",
        ];
        texts.extend(random_texts(&pieces, 3000, 16, 0x2545_F491_4F6C_DD1D));
        texts
    }

    fn assert_same_ids(fast: &TextTokenizer, stock: &tokenizers::Tokenizer) {
        assert!(
            matches!(fast.inner.get_normalizer(), Some(Normalize::NfcUnlessAscii))
                && matches!(fast.inner.get_pre_tokenizer(), Some(PreTokenize::Qwen2(_))),
            "the fast stages were not chosen"
        );
        let texts = comparison_texts();
        assert!(texts.len() > 4000, "{} texts", texts.len());
        for text in &texts {
            let want = stock.encode(text.as_str(), false).unwrap();
            assert_eq!(
                fast.encode(text).unwrap(),
                want.get_ids(),
                "ids of {text:?}"
            );
        }
    }

    #[test]
    fn built_in_tokenizer_gives_the_stock_pipelines_ids() {
        let gz =
            std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/qwen.tiktoken.gz"))
                .unwrap();
        let mut ranks = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz.as_slice()), &mut ranks)
            .unwrap();
        let specials = [
            AddedToken {
                id: 151644,
                content: "<|im_start|>".into(),
                special: true,
            },
            AddedToken {
                id: 151671,
                content: "<tts_pad>".into(),
                special: true,
            },
        ];
        let stock = tiktoken_stock(&ranks, &specials).unwrap();
        let fast = TextTokenizer::from_stock(stock.clone()).unwrap();
        assert_same_ids(&fast, &stock);
    }

    #[test]
    fn tokenizer_json_gives_the_stock_pipelines_ids() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/models/tiny-1b7-customvoice");
        let stock = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
        assert_same_ids(&TextTokenizer::from_dir(&dir).unwrap(), &stock);
    }

    #[test]
    fn other_pre_tokenizers_are_kept_as_loaded() {
        use tokenizers::pre_tokenizers::whitespace::Whitespace;
        let loaded: tokenizers::PreTokenizerWrapper = Whitespace.into();
        assert!(matches!(PreTokenize::new(loaded), PreTokenize::Loaded(_)));
    }
}
