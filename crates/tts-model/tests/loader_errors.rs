//! A broken checkpoint gives a clear error naming the file and the field or tensor, never
//! a panic. Each test copies a fixture checkpoint to a temporary directory and breaks it.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;
use tts_model::config::UnknownKeys;
use tts_model::{LoadOptions, Model, ModelError};

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

/// A fresh copy of a fixture model.
fn scratch(model: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(model);
    copy_dir(&common::model_dir(model), &dir);
    (tmp, dir)
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn load_err(dir: &Path) -> String {
    match Model::from_dir(dir, LoadOptions::default()) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => e.to_string(),
    }
}

/// Loading builds the CPU weights too, so tensor problems surface.
fn load_weights_err(dir: &Path) -> String {
    let m = Model::from_dir(dir, LoadOptions::default()).expect("configs load");
    match tts_model::reference::CpuModel::load(&m) {
        Ok(_) => panic!("loading the weights of {} should fail", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_untouched_fixture_loads() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    let m = Model::from_dir(&dir, LoadOptions::default()).unwrap();
    tts_model::reference::CpuModel::load(&m).unwrap();
}

#[test]
fn unknown_config_field_is_named_and_can_be_allowed() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    edit_json(&dir.join("config.json"), |v| {
        v["talker_config"]["mystery_scale"] = Value::from(2.0);
    });
    let e = load_err(&dir);
    assert!(
        e.contains("config.json") && e.contains("talker_config.mystery_scale"),
        "{e}"
    );
    let lenient = LoadOptions {
        unknown_config_keys: UnknownKeys::Warn,
    };
    Model::from_dir(&dir, lenient).expect("lenient loading ignores the field");
}

#[test]
fn missing_config_field_is_named() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    edit_json(&dir.join("config.json"), |v| {
        v["talker_config"]["code_predictor_config"]
            .as_object_mut()
            .unwrap()
            .remove("num_hidden_layers");
    });
    let e = load_err(&dir);
    assert!(
        e.contains("talker_config.code_predictor_config.num_hidden_layers")
            && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn wrongly_typed_config_value_is_named() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    edit_json(&dir.join("config.json"), |v| {
        v["talker_config"]["hidden_size"] = Value::from("wide");
    });
    let e = load_err(&dir);
    assert!(
        e.contains("config.json") && e.contains("talker_config") && e.contains("invalid type"),
        "{e}"
    );
}

#[test]
fn malformed_json_names_the_file() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    std::fs::write(dir.join("speech_tokenizer/config.json"), "{ not json").unwrap();
    let e = load_err(&dir);
    assert!(
        e.contains("speech_tokenizer/config.json") && e.contains("invalid JSON"),
        "{e}"
    );
}

#[test]
fn inconsistent_codec_config_is_rejected() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    edit_json(&dir.join("speech_tokenizer/config.json"), |v| {
        v["decode_upsample_rate"] = Value::from(960);
    });
    let e = load_err(&dir);
    assert!(
        e.contains("decode_upsample_rate") && e.contains("1920"),
        "{e}"
    );
}

#[test]
fn missing_weights_file_is_named() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let e = load_err(&dir);
    assert!(
        e.contains("model.safetensors") && e.contains("not found"),
        "{e}"
    );
}

#[test]
fn missing_shard_is_named() {
    let (_t, dir) = scratch("tiny-0b6-customvoice");
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
}

#[test]
fn truncated_weights_are_detected() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("model.safetensors"), "{e}");
}

#[test]
fn shape_mismatch_names_the_tensor() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    edit_json(&dir.join("config.json"), |v| {
        v["talker_config"]["intermediate_size"] = Value::from(48);
    });
    let e = load_weights_err(&dir);
    assert!(
        e.contains("talker.model.layers.0.mlp.gate_proj.weight") && e.contains("expected [48"),
        "{e}"
    );
}

#[test]
fn missing_tensor_is_named() {
    let (_t, dir) = scratch("tiny-1b7-customvoice");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != "talker.codec_head.weight")
        .collect();
    let out = safetensors::serialize(kept, None).unwrap();
    std::fs::write(&path, out).unwrap();
    let e = load_weights_err(&dir);
    assert!(
        e.contains("talker.codec_head.weight") && e.contains("not found"),
        "{e}"
    );
}

#[test]
fn missing_tokenizer_is_named() {
    let (_t, dir) = scratch("tiny-0b6-customvoice");
    std::fs::remove_file(dir.join("merges.txt")).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("merges.txt"), "{e}");
}

#[test]
fn unknown_model_spec_is_explained() {
    for spec in ["random:3b", "/no/such/dir"] {
        match Model::load(spec, LoadOptions::default()) {
            Err(ModelError::UnknownModel(s)) => assert_eq!(s, spec),
            other => panic!("{spec}: {other:?}"),
        }
    }
}
