//! The response formats, by their OpenAI `response_format` names, and their HTTP metadata.

use std::fmt;
use std::str::FromStr;

use super::AudioError;

/// An audio response format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AudioFormat {
    /// Raw 16-bit signed little-endian mono PCM, no header.
    Pcm,
    /// WAV (RIFF), 16-bit PCM, with "unknown" sizes so that it can stream.
    Wav,
    /// Opus in Ogg (RFC 7845).
    Opus,
    /// MPEG-1/2 audio layer III.
    Mp3,
    /// FLAC, 16-bit.
    Flac,
}

impl AudioFormat {
    /// Every format, in the order the error message lists them.
    pub const ALL: [AudioFormat; 5] = [
        AudioFormat::Pcm,
        AudioFormat::Wav,
        AudioFormat::Opus,
        AudioFormat::Mp3,
        AudioFormat::Flac,
    ];

    /// The OpenAI `response_format` name.
    pub fn name(self) -> &'static str {
        match self {
            AudioFormat::Pcm => "pcm",
            AudioFormat::Wav => "wav",
            AudioFormat::Opus => "opus",
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Flac => "flac",
        }
    }

    /// The `Content-Type` of a response. Raw PCM carries no rate: the server states it in
    /// a header of its own.
    pub fn content_type(self) -> &'static str {
        match self {
            AudioFormat::Pcm => "audio/pcm",
            AudioFormat::Wav => "audio/wav",
            AudioFormat::Opus => "audio/ogg",
            AudioFormat::Mp3 => "audio/mpeg",
            AudioFormat::Flac => "audio/flac",
        }
    }

    /// The usual file extension, without the dot.
    pub fn extension(self) -> &'static str {
        self.name()
    }
}

impl fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AudioFormat {
    type Err = AudioError;

    /// Parses an OpenAI `response_format` name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AudioFormat::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| AudioError::UnknownFormat(s.to_string()))
    }
}

/// "pcm, wav, opus, mp3, flac", for error messages.
pub(crate) fn supported_list() -> String {
    AudioFormat::ALL.map(AudioFormat::name).join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_ignore_case() {
        for f in AudioFormat::ALL {
            assert_eq!(f.name().parse::<AudioFormat>().ok(), Some(f));
            assert_eq!(f.name().to_uppercase().parse::<AudioFormat>().ok(), Some(f));
        }
    }

    #[test]
    fn unknown_format_lists_the_supported_ones() {
        let err = "aac".parse::<AudioFormat>().unwrap_err();
        assert!(matches!(&err, AudioError::UnknownFormat(name) if name == "aac"));
        assert_eq!(
            err.to_string(),
            "unsupported audio format \"aac\"; supported: pcm, wav, opus, mp3, flac"
        );
    }

    #[test]
    fn http_metadata() {
        let ct: Vec<_> = AudioFormat::ALL.map(AudioFormat::content_type).into();
        assert_eq!(
            ct,
            [
                "audio/pcm",
                "audio/wav",
                "audio/ogg",
                "audio/mpeg",
                "audio/flac"
            ]
        );
        assert_eq!(AudioFormat::Opus.extension(), "opus");
    }
}
