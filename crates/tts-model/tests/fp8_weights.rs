//! FP8 weights on the CPU reference: the talker's prefill logits with the decoder-layer
//! matrices rounded to E4M3 (per-row power-of-two scales, `tts_model::fp8`) against the
//! stored weights, on the tiny 1.7B fixture. The error is printed; the bound says the
//! quantized model still computes the same function roughly, and that something was
//! quantized at all.

mod common;

use common::{load_model, rel_err};
use tts_model::reference::CpuModel;
use tts_model::{Fp8Scope, SpeechRequest, TextMode};

fn prefill_logits(cpu: &CpuModel, model: &tts_model::Model) -> Vec<f32> {
    let req = SpeechRequest {
        text: "The quick brown fox jumps over the lazy dog.".into(),
        voice: Some("ryan".into()),
        language: "english".into(),
        text_mode: TextMode::Prefill,
        ..Default::default()
    };
    cpu.prefill_logits(&model.prompt(&req).unwrap()).unwrap()
}

#[test]
fn fp8_layers_stay_close_to_the_stored_weights() {
    let model = load_model("tiny-1b7-customvoice");
    let base = prefill_logits(&CpuModel::load(&model).unwrap(), &model);
    for scope in [Fp8Scope::TalkerMlp, Fp8Scope::Layers] {
        let cpu = CpuModel::load_with(&model, scope).unwrap();
        let err = rel_err(&prefill_logits(&cpu, &model), &base);
        eprintln!("fp8 {scope}: talker prefill logits rel err {err:.3e} vs stored weights");
        assert!(err > 0.0, "{scope}: nothing was quantized");
        assert!(err < 0.1, "{scope}: prefill logits rel err {err}");
    }
    // no scope: the stored weights, bit for bit
    let none = CpuModel::load_with(&model, Fp8Scope::None).unwrap();
    assert_eq!(prefill_logits(&none, &model), base);
}
