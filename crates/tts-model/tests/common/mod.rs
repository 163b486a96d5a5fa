//! Shared helpers of the fixture tests: locating and reading `fixtures/`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tts_model::checkpoint::SafetensorsFiles;
use tts_model::{LoadOptions, Model, SpeechRequest, TextMode};

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

pub fn model_dir(name: &str) -> PathBuf {
    fixtures_dir().join("models").join(name)
}

pub fn load_model(name: &str) -> Model {
    Model::from_dir(&model_dir(name), LoadOptions::default())
        .unwrap_or_else(|e| panic!("loading fixture model {name}: {e}"))
}

/// A generation case recorded from the official implementation.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    #[serde(skip)]
    pub name: String,
    pub model: String,
    pub text: String,
    pub speaker: Option<String>,
    pub language: String,
    pub instruct: Option<String>,
    pub non_streaming_mode: bool,
    pub max_new_tokens: usize,
    pub input_ids: Vec<u32>,
    pub instruct_ids: Option<Vec<u32>>,
    pub prompt_len: usize,
    pub ended_by_eos: bool,
    pub codes: Vec<[u32; 16]>,
}

impl Case {
    pub fn request(&self) -> SpeechRequest {
        SpeechRequest {
            text: self.text.clone(),
            voice: self.speaker.clone(),
            language: self.language.clone(),
            instructions: self.instruct.clone(),
            text_mode: if self.non_streaming_mode {
                TextMode::Prefill
            } else {
                TextMode::Stream
            },
            clone: None,
        }
    }

    /// Frames the reference produced: `max_new_tokens - 1` unless EOS came first.
    pub fn max_frames(&self) -> usize {
        self.max_new_tokens - 1
    }

    pub fn tensors(&self) -> Tensors {
        Tensors::open(
            &fixtures_dir()
                .join("cases")
                .join(format!("{}.safetensors", self.name)),
        )
    }
}

/// A codec-only case: codes and the official decode.
#[derive(Debug, Clone, Deserialize)]
pub struct CodecCase {
    #[serde(skip)]
    pub name: String,
    pub model: String,
    pub sliding_window: usize,
    pub codes: Vec<[u32; 16]>,
}

impl CodecCase {
    pub fn tensors(&self) -> Tensors {
        Tensors::open(
            &fixtures_dir()
                .join("cases")
                .join(format!("{}.safetensors", self.name)),
        )
    }
}

/// A case's JSON record.
pub fn read_json<T: for<'de> Deserialize<'de>>(name: &str) -> T {
    let path = fixtures_dir().join("cases").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[derive(Deserialize)]
struct Index {
    cases: Vec<IndexEntry>,
}

#[derive(Deserialize)]
struct IndexEntry {
    name: String,
    #[serde(rename = "type")]
    kind: String,
}

fn index() -> Vec<IndexEntry> {
    read_json::<Index>("index").cases
}

/// The names of the index's cases of type `kind`.
pub fn case_names(kind: &str) -> Vec<String> {
    index()
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.name)
        .collect()
}

/// The tensors of the case file `name`.
pub fn case_tensors(name: &str) -> Tensors {
    Tensors::open(
        &fixtures_dir()
            .join("cases")
            .join(format!("{name}.safetensors")),
    )
}

/// All generation cases of the fixture index.
pub fn generation_cases() -> Vec<Case> {
    let cases: Vec<Case> = index()
        .into_iter()
        .filter(|e| e.kind == "generate")
        .map(|e| {
            let mut c: Case = read_json(&e.name);
            c.name = e.name;
            c
        })
        .collect();
    assert!(
        cases.len() >= 8,
        "fixture index lists too few generation cases"
    );
    cases
}

/// All codec-only cases.
pub fn codec_cases() -> Vec<CodecCase> {
    index()
        .into_iter()
        .filter(|e| e.kind == "codec")
        .map(|e| {
            let mut c: CodecCase = read_json(&e.name);
            c.name = e.name;
            c
        })
        .collect()
}

/// The f32 tensors of a case file.
pub struct Tensors(SafetensorsFiles);

impl Tensors {
    fn open(path: &Path) -> Self {
        Self(
            SafetensorsFiles::open_files(vec![path.to_path_buf()])
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// Tensor data and shape.
    pub fn get(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let shape = self
            .0
            .shape(name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
            .to_vec();
        let t = self
            .0
            .tensor(name, &shape)
            .unwrap_or_else(|e| panic!("{e}"));
        (t.to_f32(), shape)
    }
}

/// `max |a - b| / max |b|`.
pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
    max_abs_err(a, b) / scale
}

/// `max |a - b|`.
pub fn max_abs_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}
