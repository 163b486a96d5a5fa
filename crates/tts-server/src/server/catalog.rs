//! What the server offers by name: the loaded model and its aliases (`tts-1`, ...), its
//! speakers and their aliases (OpenAI's voice names by default), its languages.

use std::collections::BTreeMap;

use tts_model::config::ModelKind;
use tts_model::Model;

use super::error::ApiError;

/// OpenAI's voice names, each with the release speaker it maps to when the model has it.
pub const OPENAI_VOICES: [(&str, &str); 11] = [
    ("alloy", "ryan"),
    ("echo", "aiden"),
    ("fable", "ryan"),
    ("onyx", "uncle_fu"),
    ("nova", "vivian"),
    ("shimmer", "serena"),
    ("ash", "aiden"),
    ("ballad", "eric"),
    ("coral", "sohee"),
    ("sage", "ono_anna"),
    ("verse", "dylan"),
];

/// Names a request may use.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub model: String,
    pub kind: ModelKind,
    pub random_weights: bool,
    /// The model's speakers, sorted.
    pub voices: Vec<String>,
    pub languages: Vec<String>,
    /// Lowercased alias -> speaker.
    pub voice_aliases: BTreeMap<String, String>,
    pub model_aliases: Vec<String>,
}

/// How a requested voice resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoiceChoice {
    /// A speaker of the model.
    Speaker(String),
    /// No preset voice (VoiceDesign models: the voice comes from the instructions).
    None,
}

impl Catalog {
    /// Builds the catalog; `aliases` (alias, speaker) override the OpenAI defaults and must
    /// name speakers the model has.
    pub fn new(
        model: &Model,
        aliases: &[(String, String)],
        model_aliases: &[String],
    ) -> Result<Self, String> {
        let voices = model.voices();
        let mut voice_aliases = BTreeMap::new();
        if !voices.is_empty() {
            for (i, (alias, preferred)) in OPENAI_VOICES.iter().enumerate() {
                let speaker = voices
                    .iter()
                    .find(|v| v.eq_ignore_ascii_case(preferred))
                    .unwrap_or(&voices[i % voices.len()]);
                voice_aliases.insert(alias.to_string(), speaker.clone());
            }
        }
        for (alias, speaker) in aliases {
            let Some(found) = voices.iter().find(|v| v.eq_ignore_ascii_case(speaker)) else {
                return Err(format!(
                    "voice alias `{alias}={speaker}`: the model has no speaker `{speaker}` (it has: {})",
                    list_or_none(&voices)
                ));
            };
            voice_aliases.insert(alias.to_ascii_lowercase(), found.clone());
        }
        Ok(Self {
            model: model.name.clone(),
            kind: model.kind(),
            random_weights: model.is_random(),
            voices,
            languages: model.languages(),
            voice_aliases,
            model_aliases: model_aliases.to_vec(),
        })
    }

    /// Model names a request may use: the loaded model's, then its aliases.
    pub fn model_names(&self) -> Vec<String> {
        std::iter::once(self.model.clone())
            .chain(self.model_aliases.iter().cloned())
            .collect()
    }

    pub fn accepts_model(&self, name: &str) -> bool {
        self.model_names()
            .iter()
            .any(|m| m.eq_ignore_ascii_case(name))
    }

    /// Resolves a requested voice (speaker or alias, any case). `None` picks the default
    /// (the first speaker; no voice for VoiceDesign models).
    pub fn resolve_voice(&self, voice: Option<&str>) -> Result<VoiceChoice, ApiError> {
        let Some(name) = voice.map(str::trim) else {
            return Ok(self.default_voice());
        };
        if let Some(v) = self.voices.iter().find(|v| v.eq_ignore_ascii_case(name)) {
            return Ok(VoiceChoice::Speaker(v.clone()));
        }
        if let Some(v) = self.voice_aliases.get(&name.to_ascii_lowercase()) {
            return Ok(VoiceChoice::Speaker(v.clone()));
        }
        if self.voices.is_empty() {
            // OpenAI clients always send a voice; a VoiceDesign model takes its voice from
            // the instructions, so OpenAI's names are accepted and mean "no preset".
            if OPENAI_VOICES
                .iter()
                .any(|(a, _)| a.eq_ignore_ascii_case(name))
            {
                return Ok(VoiceChoice::None);
            }
            let hint = match self.kind {
                ModelKind::Base => "clone a voice with `ref_audio`",
                _ => "describe the voice with `instructions`",
            };
            return Err(ApiError::invalid(
                "voice",
                "unknown_voice",
                format!(
                    "this {:?} model has no preset voices (got `{name}`); {hint}",
                    self.kind
                ),
            ));
        }
        Err(ApiError::invalid(
            "voice",
            "unknown_voice",
            format!(
                "unknown voice `{name}`; available: {} (aliases: {})",
                self.voices.join(", "),
                self.voice_aliases
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }

    fn default_voice(&self) -> VoiceChoice {
        match self.voices.first() {
            Some(v) => VoiceChoice::Speaker(v.clone()),
            None => VoiceChoice::None,
        }
    }
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tts_model::LoadOptions;

    #[test]
    fn openai_voices_map_to_speakers_and_aliases_override() {
        let model = Model::load("demo", LoadOptions::default()).unwrap();
        let c = Catalog::new(&model, &[("alloy".into(), "Vivian".into())], &[]).unwrap();
        assert_eq!(
            c.resolve_voice(Some("ALLOY")).unwrap(),
            VoiceChoice::Speaker("vivian".into())
        );
        assert_eq!(
            c.resolve_voice(Some("nova")).unwrap(),
            VoiceChoice::Speaker("vivian".into())
        );
        assert_eq!(
            c.resolve_voice(Some("Ryan")).unwrap(),
            VoiceChoice::Speaker("ryan".into())
        );
        let e = c.resolve_voice(Some("bogus")).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("voice"));
        assert!(Catalog::new(&model, &[("x".into(), "nobody".into())], &[]).is_err());
    }
}
