//! Building the talker's prompt exactly as the reference does
//! (`Qwen3TTSForConditionalGeneration.generate`, architecture reference §2.2).
//!
//! A prompt is ids, not vectors: every talker input position is the sum of a text-track
//! vector `T(id)` (text embedding + text projection) and a codec-track vector `C(id)` (codec
//! embedding); either may be absent. Backends turn ids into vectors.

use std::sync::Arc;

use crate::backend::Frame;
use crate::config::{ModelConfig, ModelKind};
use crate::error::{ModelError, RequestError};
use crate::tokenizer::TextTokenizer;

/// How the text enters the talker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TextMode {
    /// All text in the prompt (the reference's `non_streaming_mode=True`, its default for
    /// CustomVoice and VoiceDesign).
    #[default]
    Prefill,
    /// One text token per generated frame (`non_streaming_mode=False`); needed when text
    /// arrives in pieces, and gives a shorter prefill.
    Stream,
}

impl std::str::FromStr for TextMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "prefill" | "non_streaming" | "non-streaming" => Ok(TextMode::Prefill),
            "stream" | "streaming" => Ok(TextMode::Stream),
            other => Err(format!(
                "unknown text mode `{other}` (use `prefill` or `stream`)"
            )),
        }
    }
}

/// What to say and how.
#[derive(Debug, Clone, Default)]
pub struct SpeechRequest {
    pub text: String,
    /// A preset speaker (CustomVoice). Matched case-insensitively.
    pub voice: Option<String>,
    /// A language key or "auto". Matched case-insensitively.
    pub language: String,
    /// Style instructions (CustomVoice 1.7B) or the voice description (VoiceDesign).
    pub instructions: Option<String>,
    pub text_mode: TextMode,
    /// The voice to clone (Base checkpoints only; they take no preset voice).
    pub clone: Option<Arc<ClonedVoice>>,
}

/// A Base checkpoint's speaker embedding (x-vector) of a reference recording, spliced into
/// the prompt's speaker slot. Named by a key derived from its values, so that prompts with
/// the same speaker have equal heads.
#[derive(Debug, Clone)]
pub struct SpeakerVector {
    key: u64,
    values: Vec<f32>,
}

impl SpeakerVector {
    pub fn new(values: Vec<f32>) -> Self {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        values.len().hash(&mut h);
        for v in &values {
            v.to_bits().hash(&mut h);
        }
        Self {
            key: h.finish(),
            values,
        }
    }

    pub fn key(&self) -> u64 {
        self.key
    }

    pub fn values(&self) -> &[f32] {
        &self.values
    }
}

impl PartialEq for SpeakerVector {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.values.len() == other.values.len()
            && self
                .values
                .iter()
                .zip(&other.values)
                .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

impl Eq for SpeakerVector {}

/// A voice cloned from a reference recording (the reference's `VoiceClonePromptItem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClonedVoice {
    pub speaker: Arc<SpeakerVector>,
    /// In-context cloning: the recording's codes and transcript continue the prompt. Without
    /// it only the speaker vector is used (the reference's `x_vector_only_mode`).
    pub reference: Option<VoiceReference>,
}

/// The reference recording of an in-context clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoiceReference {
    /// The recording's codec frames (`ceil(samples / 1920)` of them).
    pub frames: Vec<Frame>,
    /// What is said in it.
    pub text: String,
}

/// What a prompt position's codec track carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodecInput {
    /// `C(id)`: one row of the talker's codec embedding.
    Id(u32),
    /// A reference frame of an in-context clone, embedded as a talker step embeds a
    /// generated frame: the talker's codec embedding of code 0 plus the code predictor's
    /// embedding `k - 1` of code `k`, summed.
    Frame(Frame),
    /// The prompt's speaker vector ([`Prompt::speaker`]), named by its key.
    Speaker(u64),
}

/// One prompt position: the ids of its two tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PromptPosition {
    /// Text-track token id (embedded with `text_embedding` then `text_projection`).
    pub text: Option<u32>,
    /// Codec-track input.
    pub codec: Option<CodecInput>,
}

/// The prefill positions and the text still to be fed one token per frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub positions: Vec<PromptPosition>,
    /// Text ids added to the talker input of generation steps 0, 1, ...; after them the
    /// text track is `tts_pad` forever.
    pub trailing_text: Vec<u32>,
    /// The tokenized assistant text (role + body + suffix), as the reference tokenizes it.
    pub input_ids: Vec<u32>,
    /// The tokenized instructions, when used.
    pub instruct_ids: Option<Vec<u32>>,
    /// Number of text tokens in the body (drives the runaway frame cap).
    pub body_len: usize,
    /// How many leading positions do not depend on the text (instructions, role, codec
    /// prefix, `tts_bos`): every request with the same voice, language and instructions
    /// shares them, so a backend may keep their KV cache rows and prefill only the rest.
    pub head_len: usize,
    /// The vector of the [`CodecInput::Speaker`] position, when there is one.
    pub speaker: Option<Arc<SpeakerVector>>,
    /// Frames whose audio comes before the generated frames' in the codec stream and is
    /// not part of the reply: an in-context clone's reference frames, decoded (to give the
    /// codec their state) and discarded, as the reference decodes `ref_code ++ codes` and
    /// cuts the reference's part.
    pub codec_context: Vec<Frame>,
}

impl Prompt {
    /// The values of the speaker vector a [`CodecInput::Speaker`] position names, checked
    /// against the talker's hidden size `hidden`.
    pub fn speaker_values(&self, key: u64, hidden: usize) -> Result<&[f32], String> {
        let s = self
            .speaker
            .as_deref()
            .filter(|s| s.key() == key)
            .ok_or("the prompt names a speaker vector it does not carry")?;
        if s.values().len() != hidden {
            return Err(format!(
                "the speaker vector has {} values, the talker's hidden size is {hidden}",
                s.values().len()
            ));
        }
        Ok(s.values())
    }
}

/// The resolved voice of a request: what the codec prefix carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VoiceIds {
    pub speaker: Option<CodecInput>,
    pub language: Option<u32>,
}

/// Looks up the speaker and language of a request, applying the dialect override.
pub fn resolve_voice(cfg: &ModelConfig, req: &SpeechRequest) -> Result<VoiceIds, RequestError> {
    let talker = &cfg.talker;
    let speaker_key = req
        .voice
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_lowercase);
    let speaker = match (&speaker_key, cfg.tts_model_type) {
        (None, _) => None,
        (Some(v), ModelKind::CustomVoice) => {
            Some(
                *talker
                    .spk_id
                    .get(v)
                    .ok_or_else(|| RequestError::UnknownVoice {
                        voice: v.clone(),
                        available: talker.spk_id.keys().cloned().collect::<Vec<_>>().join(", "),
                    })?,
            )
        }
        (Some(v), kind) => {
            return Err(RequestError::VoiceNotSupported {
                kind: kind.as_str().into(),
                voice: v.clone(),
                hint: match kind {
                    ModelKind::Base => "clone one from reference audio",
                    _ => "describe the voice with instructions",
                },
            })
        }
    };
    let speaker = match (&req.clone, cfg.tts_model_type) {
        (None, ModelKind::Base) => return Err(RequestError::ReferenceRequired),
        (Some(c), ModelKind::Base) => Some(CodecInput::Speaker(c.speaker.key())),
        (Some(_), kind) => {
            return Err(RequestError::ReferenceNotSupported {
                kind: kind.as_str().into(),
            })
        }
        (None, _) => speaker.map(CodecInput::Id),
    };
    let lang = req.language.trim().to_lowercase();
    let lang = if lang.is_empty() {
        "auto".to_string()
    } else {
        lang
    };
    let supported = talker.supported_languages();
    if !supported.contains(&lang) {
        return Err(RequestError::UnknownLanguage {
            language: req.language.clone(),
            supported: supported.join(", "),
        });
    }
    let mut language = if lang == "auto" {
        None
    } else {
        talker.codec_language_id.get(&lang).copied()
    };
    if lang == "chinese" || lang == "auto" {
        if let Some(dialect) = speaker_key
            .as_ref()
            .and_then(|s| talker.spk_is_dialect.get(s))
            .and_then(|f| f.dialect())
        {
            language = talker.codec_language_id.get(dialect).copied();
        }
    }
    Ok(VoiceIds { speaker, language })
}

/// Builds the prompt of a request.
pub fn build_prompt(
    cfg: &ModelConfig,
    tokenizer: &TextTokenizer,
    req: &SpeechRequest,
) -> Result<Prompt, ModelError> {
    if req.text.trim().is_empty() {
        return Err(RequestError::EmptyText.into());
    }
    let voice = resolve_voice(cfg, req)?;

    let input_ids = tokenizer.encode(&format!(
        "<|im_start|>assistant\n{}<|im_end|>\n<|im_start|>assistant\n",
        req.text
    ))?;
    // The reference slices positionally: role = ids[:3], body = ids[3:-5].
    if input_ids.len() < 9 {
        return Err(RequestError::EmptyText.into());
    }
    let role = &input_ids[..3];
    let body = &input_ids[3..input_ids.len() - 5];

    let instruct_ids = instruction_ids(cfg, tokenizer, req)?;
    let mut positions = head_positions(cfg, voice, instruct_ids.as_deref(), role);
    let head_len = positions.len();
    let talker = &cfg.talker;
    let (pad, eos) = (cfg.tts_pad_token_id, cfg.tts_eos_token_id);
    let reference = req.clone.as_ref().and_then(|c| c.reference.as_ref());

    let trailing_text = match (reference, req.text_mode) {
        (Some(r), mode) => {
            let ref_body = reference_text_ids(cfg, tokenizer, r)?;
            let text: Vec<u32> = ref_body.iter().chain(body).copied().chain([eos]).collect();
            icl_block(cfg, &text, &r.frames, mode, &mut positions)
        }
        (None, TextMode::Stream) => {
            positions.push(both(body[0], talker.codec_bos_id));
            body[1..].iter().copied().chain([eos]).collect()
        }
        (None, TextMode::Prefill) => {
            positions.extend(body.iter().map(|&id| both(id, talker.codec_pad_id)));
            positions.push(both(eos, talker.codec_pad_id));
            positions.push(both(pad, talker.codec_bos_id));
            Vec::new()
        }
    };
    Ok(Prompt {
        positions,
        trailing_text,
        body_len: body.len(),
        input_ids,
        instruct_ids,
        head_len,
        speaker: req.clone.as_ref().map(|c| Arc::clone(&c.speaker)),
        codec_context: reference.map(|r| r.frames.clone()).unwrap_or_default(),
    })
}

/// A position with both tracks, the codec one an id.
fn both(text: u32, codec: u32) -> PromptPosition {
    PromptPosition {
        text: Some(text),
        codec: Some(CodecInput::Id(codec)),
    }
}

/// The transcript of an in-context clone's reference, tokenized and sliced as the
/// reference does (`<|im_start|>assistant\n{text}<|im_end|>\n`, without the role's three
/// ids and the last two), after checking its frames' codes.
fn reference_text_ids(
    cfg: &ModelConfig,
    tokenizer: &TextTokenizer,
    r: &VoiceReference,
) -> Result<Vec<u32>, ModelError> {
    if r.text.trim().is_empty() {
        return Err(RequestError::ReferenceTextRequired.into());
    }
    let bins = cfg.talker.code_predictor.vocab_size as u32;
    if r.frames.iter().flatten().any(|&c| c >= bins) {
        return Err(RequestError::BadReference(format!(
            "a reference code is outside the codebook (size {bins})"
        ))
        .into());
    }
    let ids = tokenizer.encode(&format!("<|im_start|>assistant\n{}<|im_end|>\n", r.text))?;
    if ids.len() < 6 {
        return Err(RequestError::ReferenceTextRequired.into());
    }
    Ok(ids[3..ids.len() - 2].to_vec())
}

/// Appends an in-context clone's block (the reference's `generate_icl_prompt`): the text
/// track `text` (reference transcript, body, `tts_eos`) against the codec track
/// (`codec_bos`, then the reference frames). Returns the trailing text.
///
/// - [`TextMode::Prefill`]: every text id over `codec_pad`, then the codec track over
///   `tts_pad`; nothing trails.
/// - [`TextMode::Stream`]: the two tracks side by side; text beyond the codec track
///   trails, a shorter text is padded with `tts_pad`.
fn icl_block(
    cfg: &ModelConfig,
    text: &[u32],
    frames: &[Frame],
    mode: TextMode,
    positions: &mut Vec<PromptPosition>,
) -> Vec<u32> {
    let talker = &cfg.talker;
    let pad = cfg.tts_pad_token_id;
    let codec: Vec<CodecInput> = std::iter::once(CodecInput::Id(talker.codec_bos_id))
        .chain(frames.iter().map(|&f| CodecInput::Frame(f)))
        .collect();
    let pair = |t: u32, c: CodecInput| PromptPosition {
        text: Some(t),
        codec: Some(c),
    };
    match mode {
        TextMode::Prefill => {
            positions.extend(text.iter().map(|&t| both(t, talker.codec_pad_id)));
            positions.extend(codec.iter().map(|&c| pair(pad, c)));
            Vec::new()
        }
        TextMode::Stream => {
            for (i, &c) in codec.iter().enumerate() {
                positions.push(pair(text.get(i).copied().unwrap_or(pad), c));
            }
            text.get(codec.len()..).unwrap_or_default().to_vec()
        }
    }
}

/// The tokenized instructions of a request, when the model uses them.
fn instruction_ids(
    cfg: &ModelConfig,
    tokenizer: &TextTokenizer,
    req: &SpeechRequest,
) -> Result<Option<Vec<u32>>, ModelError> {
    let instructions = req.instructions.as_deref().filter(|s| !s.is_empty());
    Ok(match instructions {
        Some(_) if cfg.tts_model_type == ModelKind::Base => {
            return Err(RequestError::Unsupported(
                "a base model takes no instructions (the reference's voice cloning has none)"
                    .into(),
            )
            .into())
        }
        Some(_) if cfg.drops_instructions() => {
            tracing::warn!(
                "this CustomVoice checkpoint ignores instructions (as the reference does for 0.6B)"
            );
            None
        }
        Some(ins) => Some(tokenizer.encode(&format!("<|im_start|>user\n{ins}<|im_end|>\n"))?),
        None => None,
    })
}

/// Every prompt position before the body: instructions, role, the codec prefix (think /
/// language / speaker, over `tts_pad`), then (`tts_bos`, `codec_pad`).
fn head_positions(
    cfg: &ModelConfig,
    voice: VoiceIds,
    instruct_ids: Option<&[u32]>,
    role: &[u32],
) -> Vec<PromptPosition> {
    let talker = &cfg.talker;
    let text = |id: u32| PromptPosition {
        text: Some(id),
        codec: None,
    };
    let codec_prefix = match voice.language {
        None => vec![
            talker.codec_nothink_id,
            talker.codec_think_bos_id,
            talker.codec_think_eos_id,
        ],
        Some(lang) => vec![
            talker.codec_think_id,
            talker.codec_think_bos_id,
            lang,
            talker.codec_think_eos_id,
        ],
    };
    let mut codec_prefix: Vec<CodecInput> = codec_prefix.into_iter().map(CodecInput::Id).collect();
    codec_prefix.extend(voice.speaker);

    let mut positions: Vec<PromptPosition> = Vec::new();
    if let Some(ids) = instruct_ids {
        positions.extend(ids.iter().map(|&id| text(id)));
    }
    positions.extend(role.iter().map(|&id| text(id)));
    positions.extend(codec_prefix.iter().map(|&c| PromptPosition {
        text: Some(cfg.tts_pad_token_id),
        codec: Some(c),
    }));
    positions.push(both(cfg.tts_bos_token_id, talker.codec_pad_id));
    positions
}

/// The text-independent head of a [`TextMode::Stream`] prompt, for text that arrives in
/// pieces: everything [`build_prompt`] puts before the first body token. The first body
/// token must be known before prefill ([`StreamingPrefix::with_first_token`]); the later
/// ones, then `tts_eos`, are fed one per generated frame as they arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamingPrefix {
    /// Instructions, role, codec prefix and (`tts_bos`, `codec_pad`).
    pub positions: Vec<PromptPosition>,
    /// `<|im_start|>assistant\n`, tokenized.
    pub role_ids: Vec<u32>,
    pub instruct_ids: Option<Vec<u32>>,
    codec_bos: u32,
    speaker: Option<Arc<SpeakerVector>>,
}

impl StreamingPrefix {
    /// The prompt once the first body token is known: the head plus (`body[0]`,
    /// `codec_bos`), as [`build_prompt`] lays out a [`TextMode::Stream`] prompt. Its
    /// `trailing_text` is empty (the caller supplies the rest as it arrives), `input_ids`
    /// holds the role and the first token, and `body_len` is 1.
    pub fn with_first_token(&self, first: u32) -> Prompt {
        let head_len = self.positions.len();
        let mut positions = self.positions.clone();
        positions.push(both(first, self.codec_bos));
        let mut input_ids = self.role_ids.clone();
        input_ids.push(first);
        Prompt {
            positions,
            trailing_text: Vec::new(),
            input_ids,
            instruct_ids: self.instruct_ids.clone(),
            body_len: 1,
            head_len,
            speaker: self.speaker.clone(),
            codec_context: Vec::new(),
        }
    }
}

/// Builds the head of a text-streaming prompt for `req` (its voice, language and
/// instructions; `req.text` and `req.text_mode` are not used). Together with the body
/// tokens it equals [`build_prompt`] in [`TextMode::Stream`] for a text whose tokenization
/// starts at a pre-tokenizer boundary (text not starting with a line break; see
/// `text_stream`).
pub fn build_streaming_prefix(
    cfg: &ModelConfig,
    tokenizer: &TextTokenizer,
    req: &SpeechRequest,
) -> Result<StreamingPrefix, ModelError> {
    if req.clone.as_ref().is_some_and(|c| c.reference.is_some()) {
        return Err(RequestError::Unsupported(
            "in-context cloning lays the whole text beside the reference audio, so it cannot \
             take text in pieces; clone from the speaker vector alone (`x_vector_only_mode`)"
                .into(),
        )
        .into());
    }
    let voice = resolve_voice(cfg, req)?;
    let role_ids = tokenizer.encode("<|im_start|>assistant\n")?;
    let instruct_ids = instruction_ids(cfg, tokenizer, req)?;
    let positions = head_positions(cfg, voice, instruct_ids.as_deref(), &role_ids);
    Ok(StreamingPrefix {
        positions,
        role_ids,
        instruct_ids,
        codec_bos: cfg.talker.codec_bos_id,
        speaker: req.clone.as_ref().map(|c| Arc::clone(&c.speaker)),
    })
}
