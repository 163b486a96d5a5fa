//! Request fields, read strictly: a known field with a bad value is a 400 naming the field;
//! unknown fields are ignored (logged at debug), as clients built for OpenAI or vLLM-Omni
//! send fields we do not use. Shared by `POST /v1/audio/speech` and the WebSocket `start`.

use std::sync::Arc;

use serde_json::{Map, Value};
use tts_model::clone::CloneMode;
use tts_model::config::ModelKind;
use tts_model::{SamplingParams, TextMode};

use super::catalog::{Catalog, VoiceChoice};
use super::cloning::ReferenceParams;
use super::error::ApiError;
use crate::audio::tempo::SPEED_RANGE;
use crate::audio::AudioFormat;

/// How the audio of `POST /v1/audio/speech` is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    /// The encoded bytes, chunked as they are generated.
    Audio,
    /// Server-sent events: `speech.audio.delta` (base64 audio) then `speech.audio.done`.
    Sse,
}

/// Sampling overrides (vLLM-Omni's names); unset ones keep the checkpoint's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplingOverrides {
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
}

impl SamplingOverrides {
    /// `base` with the overrides applied to both samplers (talker and code predictor).
    pub fn apply(&self, mut base: SamplingParams) -> SamplingParams {
        for s in [&mut base.talker, &mut base.code_predictor] {
            if let Some(t) = self.temperature {
                s.temperature = t;
            }
            if let Some(k) = self.top_k {
                s.top_k = k;
            }
            if let Some(p) = self.top_p {
                s.top_p = p;
            }
        }
        if let Some(r) = self.repetition_penalty {
            base.repetition_penalty = r;
        }
        base
    }
}

/// What is common to every synthesis request.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceParams {
    pub voice: VoiceChoice,
    pub language: String,
    pub instructions: Option<String>,
    pub format: AudioFormat,
    pub text_mode: TextMode,
    pub seed: Option<u64>,
    pub sampling: SamplingOverrides,
    /// Speaking rate: the audio's duration divided by this (1.0: as generated).
    pub speed: f32,
    /// Base models: the recording whose voice is cloned.
    pub reference: Option<ReferenceParams>,
}

/// A `POST /v1/audio/speech` request.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeechParams {
    pub input: String,
    pub stream_format: StreamFormat,
    pub voice: VoiceParams,
}

/// Fields of `POST /v1/audio/speech` (beyond the common ones).
const SPEECH_FIELDS: &[&str] = &["model", "input", "stream_format", "stream"];
/// Fields every request may carry.
const COMMON_FIELDS: &[&str] = &[
    "voice",
    "speed",
    "language",
    "instructions",
    "response_format",
    "seed",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "task_type",
    "non_streaming_mode",
    "text_mode",
    "ref_audio",
    "ref_text",
    "x_vector_only_mode",
];

/// Typed, named access to a JSON object's fields.
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    pub fn new(map: &'a Map<String, Value>) -> Self {
        Self { map }
    }

    /// The field, `None` when absent or null.
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    pub fn string(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(type_error(name, "a string")),
        }
    }

    /// A string that must be there: its absence is a 400 with `code` on `name`.
    pub fn required_string(&self, name: &str, code: &'static str) -> Result<&'a str, ApiError> {
        self.string(name)?
            .ok_or_else(|| ApiError::invalid(name, code, format!("`{name}` is required")))
    }

    pub fn boolean(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(type_error(name, "true or false")),
        }
    }

    pub fn number(&self, name: &str) -> Result<Option<f64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| type_error(name, "a finite number")),
            Some(_) => Err(type_error(name, "a number")),
        }
    }

    pub fn unsigned(&self, name: &str) -> Result<Option<u64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| type_error(name, "a non-negative integer")),
            Some(_) => Err(type_error(name, "a non-negative integer")),
        }
    }

    /// Logs (at debug) the fields that are not in `known`.
    pub fn log_unknown(&self, known: &[&[&str]]) {
        for key in self.map.keys() {
            if !known.iter().any(|k| k.contains(&key.as_str())) {
                tracing::debug!(field = %key, "ignoring unknown request field");
            }
        }
    }
}

fn type_error(name: &str, what: &str) -> ApiError {
    ApiError::invalid(name, "invalid_type", format!("`{name}` must be {what}"))
}

/// Limits on what a request may ask.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_input_chars: usize,
}

/// Reads the `POST /v1/audio/speech` fields.
pub fn speech(
    map: &Map<String, Value>,
    catalog: &Catalog,
    limits: Limits,
) -> Result<SpeechParams, ApiError> {
    let f = Fields::new(map);
    f.log_unknown(&[SPEECH_FIELDS, COMMON_FIELDS]);
    if let Some(model) = f.string("model")? {
        if !catalog.accepts_model(model) {
            return Err(ApiError::invalid(
                "model",
                "model_not_found",
                format!(
                    "unknown model `{model}`; this server serves: {}",
                    catalog.model_names().join(", ")
                ),
            ));
        }
    }
    let input = f.required_string("input", "missing_input")?;
    check_text("input", input, limits)?;
    let stream_format = match f.string("stream_format")? {
        None => StreamFormat::Audio,
        Some(s) if s.eq_ignore_ascii_case("audio") => StreamFormat::Audio,
        Some(s) if s.eq_ignore_ascii_case("sse") => StreamFormat::Sse,
        Some(s) => {
            return Err(ApiError::invalid(
                "stream_format",
                "invalid_value",
                format!("unknown stream_format `{s}`; use `audio` or `sse`"),
            ))
        }
    };
    // Output always streams; `stream` is accepted for clients that send it.
    f.boolean("stream")?;
    let voice = voice_params(&f, catalog, limits, AudioFormat::Mp3)?;
    Ok(SpeechParams {
        input: input.to_string(),
        stream_format,
        voice,
    })
}

/// Reads a WebSocket `start` message's fields (the common ones); `text` is read by the
/// session.
pub fn ws_start(
    map: &Map<String, Value>,
    catalog: &Catalog,
    limits: Limits,
) -> Result<VoiceParams, ApiError> {
    let f = Fields::new(map);
    f.log_unknown(&[COMMON_FIELDS, &["type", "text", "model"]]);
    if let Some(model) = f.string("model")? {
        if !catalog.accepts_model(model) {
            return Err(ApiError::invalid(
                "model",
                "model_not_found",
                format!("unknown model `{model}`"),
            ));
        }
    }
    let mut p = voice_params(&f, catalog, limits, AudioFormat::Pcm)?;
    if p.reference
        .as_ref()
        .is_some_and(|r| r.mode == CloneMode::InContext)
    {
        return Err(ApiError::invalid(
            "x_vector_only_mode",
            "unsupported_value",
            "a WebSocket session streams its text, and in-context cloning lays the whole text \
             beside the reference: clone from the speaker vector alone \
             (`x_vector_only_mode: true`)",
        ));
    }
    match f.string("text_mode")? {
        None => p.text_mode = TextMode::Stream,
        Some(_) if p.text_mode == TextMode::Stream => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "text_mode",
                "unsupported_value",
                "a WebSocket session streams its text: only `text_mode: \"stream\"` is supported",
            ))
        }
    }
    Ok(p)
}

/// Empty and oversized text are the client's to fix.
pub fn check_text(param: &str, text: &str, limits: Limits) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::invalid(
            param,
            "empty_input",
            format!("`{param}` is empty"),
        ));
    }
    let chars = text.chars().count();
    if chars > limits.max_input_chars {
        return Err(ApiError::invalid(
            param,
            "input_too_long",
            format!(
                "`{param}` is too long: {chars} characters, at most {}",
                limits.max_input_chars
            ),
        ));
    }
    Ok(())
}

fn voice_params(
    f: &Fields<'_>,
    catalog: &Catalog,
    limits: Limits,
    default_format: AudioFormat,
) -> Result<VoiceParams, ApiError> {
    let reference = reference(f, catalog, limits)?;
    let voice_name = match f.get("voice") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Object(o)) => match o.get("id") {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => return Err(type_error("voice", "a voice name or {\"id\": \"<name>\"}")),
        },
        Some(_) => return Err(type_error("voice", "a voice name or {\"id\": \"<name>\"}")),
    };
    let voice = catalog.resolve_voice(voice_name)?;
    let language = f.string("language")?.unwrap_or("auto").trim().to_string();
    if language.is_empty() {
        return Err(ApiError::invalid(
            "language",
            "invalid_value",
            "`language` is empty",
        ));
    }
    let instructions = match f.string("instructions")? {
        Some(s) if s.trim().is_empty() => None,
        Some(s) => {
            if s.chars().count() > limits.max_input_chars {
                return Err(ApiError::invalid(
                    "instructions",
                    "input_too_long",
                    format!(
                        "`instructions` is too long: at most {} characters",
                        limits.max_input_chars
                    ),
                ));
            }
            Some(s.to_string())
        }
        None => None,
    };
    let format = match f.string("response_format")? {
        None => default_format,
        Some(s) => s.parse().map_err(|e: crate::audio::AudioError| {
            ApiError::invalid("response_format", "unsupported_format", e.to_string())
        })?,
    };
    if let Some(task) = f.string("task_type")? {
        let kind = format!("{:?}", catalog.kind);
        let known = ["CustomVoice", "VoiceDesign", "Base"];
        if !known.iter().any(|k| k.eq_ignore_ascii_case(task)) {
            return Err(ApiError::invalid(
                "task_type",
                "invalid_value",
                format!(
                    "unknown task_type `{task}`; use one of {}",
                    known.join(", ")
                ),
            ));
        }
        if !task.eq_ignore_ascii_case(&kind) {
            return Err(ApiError::invalid(
                "task_type",
                "unsupported_value",
                format!("task_type `{task}` is not served here: the loaded model is {kind}"),
            ));
        }
    }
    let text_mode = match (f.string("text_mode")?, f.boolean("non_streaming_mode")?) {
        (Some(s), nsm) => {
            let mode: TextMode = s
                .parse()
                .map_err(|e: String| ApiError::invalid("text_mode", "invalid_value", e))?;
            // The reference's `non_streaming_mode=True` is the prefill mode.
            if nsm.is_some_and(|n| n != (mode == TextMode::Prefill)) {
                return Err(ApiError::invalid(
                    "non_streaming_mode",
                    "invalid_value",
                    "`non_streaming_mode` contradicts `text_mode`",
                ));
            }
            mode
        }
        (None, Some(false)) => TextMode::Stream,
        (None, Some(true)) => TextMode::Prefill,
        // the reference's defaults: cloning streams its text, the other kinds prefill it
        (None, None) if catalog.kind == ModelKind::Base => TextMode::Stream,
        (None, None) => TextMode::Prefill,
    };
    let seed = f.unsigned("seed")?;
    let sampling = SamplingOverrides {
        temperature: positive(f, "temperature")?,
        top_k: match f.unsigned("top_k")? {
            Some(k) => Some(usize::try_from(k).map_err(|_| type_error("top_k", "smaller"))?),
            None => None,
        },
        top_p: match f.number("top_p")? {
            Some(p) if p > 0.0 && p <= 1.0 => Some(p as f32),
            Some(p) => {
                return Err(ApiError::invalid(
                    "top_p",
                    "invalid_value",
                    format!("top_p {p} must be in (0, 1]"),
                ))
            }
            None => None,
        },
        repetition_penalty: positive(f, "repetition_penalty")?,
    };
    let speed = match f.number("speed")? {
        None => 1.0,
        Some(v) if SPEED_RANGE.contains(&(v as f32)) => v as f32,
        Some(v) => {
            return Err(ApiError::invalid(
                "speed",
                "invalid_value",
                format!(
                    "speed {v} is out of range: {} to {}",
                    SPEED_RANGE.start(),
                    SPEED_RANGE.end()
                ),
            ))
        }
    };
    Ok(VoiceParams {
        voice,
        language,
        instructions,
        format,
        text_mode,
        seed,
        sampling,
        speed,
        reference,
    })
}

/// The reference recording of a Base model's request (`ref_audio`, `ref_text`,
/// `x_vector_only_mode`): required there, refused elsewhere.
fn reference(
    f: &Fields<'_>,
    catalog: &Catalog,
    limits: Limits,
) -> Result<Option<ReferenceParams>, ApiError> {
    let audio = f.string("ref_audio")?;
    let text = f
        .string("ref_text")?
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let speaker_only = f.boolean("x_vector_only_mode")?;
    let Some(audio) = audio else {
        if catalog.kind == ModelKind::Base {
            return Err(ApiError::invalid(
                "ref_audio",
                "invalid_value",
                "this Base model clones a voice: give `ref_audio` (base64 or a data: URI of a \
                 WAV, FLAC, MP3 or Ogg Vorbis recording), with `ref_text` (its transcript) or \
                 `x_vector_only_mode: true`",
            ));
        }
        for (field, present) in [
            ("ref_text", text.is_some()),
            ("x_vector_only_mode", speaker_only.is_some()),
        ] {
            if present {
                return Err(ApiError::invalid(
                    field,
                    "invalid_value",
                    format!("`{field}` goes with `ref_audio`, which is missing"),
                ));
            }
        }
        return Ok(None);
    };
    if catalog.kind != ModelKind::Base {
        return Err(ApiError::invalid(
            "ref_audio",
            "unsupported_value",
            format!(
                "`ref_audio` clones a voice with a Base model; the loaded model is {:?}",
                catalog.kind
            ),
        ));
    }
    let mode = match speaker_only {
        Some(true) => CloneMode::SpeakerOnly,
        _ => CloneMode::InContext,
    };
    if let Some(t) = text {
        check_text("ref_text", t, limits)?;
    } else if mode == CloneMode::InContext {
        return Err(ApiError::invalid(
            "ref_text",
            "invalid_value",
            "in-context cloning needs `ref_text`, the transcript of `ref_audio`; or clone from \
             the speaker vector alone with `x_vector_only_mode: true`",
        ));
    }
    Ok(Some(ReferenceParams {
        audio: Arc::from(audio),
        text: text.map(str::to_string),
        mode,
    }))
}

fn positive(f: &Fields<'_>, name: &str) -> Result<Option<f32>, ApiError> {
    match f.number(name)? {
        Some(x) if x > 0.0 && x <= 100.0 => Ok(Some(x as f32)),
        Some(x) => Err(ApiError::invalid(
            name,
            "invalid_value",
            format!("{name} {x} must be > 0 (and at most 100)"),
        )),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tts_model::{LoadOptions, Model};

    fn catalog() -> Catalog {
        let model = Model::load("demo", LoadOptions::default()).unwrap();
        Catalog::new(&model, &[], &["tts-1".into()]).unwrap()
    }

    fn parse(v: Value) -> Result<SpeechParams, ApiError> {
        let limits = Limits {
            max_input_chars: 20,
        };
        speech(v.as_object().unwrap(), &catalog(), limits)
    }

    #[test]
    fn defaults_and_aliases() {
        let p = parse(
            json!({"model": "tts-1", "input": "Hi.", "voice": {"id": "alloy"},
            "stream": true, "unknown_thing": [1]}),
        )
        .unwrap();
        assert_eq!(p.voice.format, AudioFormat::Mp3);
        assert_eq!(p.stream_format, StreamFormat::Audio);
        assert_eq!(p.voice.voice, VoiceChoice::Speaker("ryan".into()));
        assert_eq!(p.voice.language, "auto");
        assert_eq!(p.voice.text_mode, TextMode::Prefill);
        let p = parse(
            json!({"input": "Hi.", "non_streaming_mode": false, "seed": 7,
            "stream_format": "sse", "speed": 1.0}),
        )
        .unwrap();
        assert_eq!(p.voice.text_mode, TextMode::Stream);
        assert_eq!(p.voice.seed, Some(7));
        assert_eq!(p.stream_format, StreamFormat::Sse);
        assert_eq!(p.voice.speed, 1.0);
        assert_eq!(parse(json!({"input": "Hi."})).unwrap().voice.speed, 1.0);
        for v in [0.25, 1.5, 4.0] {
            assert_eq!(
                parse(json!({"input": "Hi.", "speed": v}))
                    .unwrap()
                    .voice
                    .speed,
                v as f32
            );
        }
    }

    #[test]
    fn bad_values_name_their_field() {
        for (body, param) in [
            (json!({"input": ""}), "input"),
            (json!({"input": "   "}), "input"),
            (json!({"input": "x".repeat(21)}), "input"),
            (json!({"input": 3}), "input"),
            (json!({}), "input"),
            (json!({"input": "a", "speed": 4.5}), "speed"),
            (json!({"input": "a", "speed": 0.2}), "speed"),
            (json!({"input": "a", "speed": 0}), "speed"),
            (json!({"input": "a", "speed": "fast"}), "speed"),
            (json!({"input": "a", "voice": "nobody"}), "voice"),
            (json!({"input": "a", "voice": 3}), "voice"),
            (
                json!({"input": "a", "response_format": "aac"}),
                "response_format",
            ),
            (
                json!({"input": "a", "stream_format": "ws"}),
                "stream_format",
            ),
            (json!({"input": "a", "model": "gpt-5"}), "model"),
            (json!({"input": "a", "seed": -1}), "seed"),
            (json!({"input": "a", "temperature": 0}), "temperature"),
            (json!({"input": "a", "top_p": 1.5}), "top_p"),
            (json!({"input": "a", "top_k": 1.5}), "top_k"),
            (
                json!({"input": "a", "task_type": "VoiceDesign"}),
                "task_type",
            ),
            (json!({"input": "a", "ref_audio": "x.wav"}), "ref_audio"),
            (
                json!({"input": "a", "text_mode": "prefill", "non_streaming_mode": false}),
                "non_streaming_mode",
            ),
        ] {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
        }
    }
}
