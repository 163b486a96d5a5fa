//! Cloned voices (Base checkpoint) on the GPU: prompts with a speaker vector and with
//! reference frames in context give the official greedy codes and, after the reference's
//! cut, its PCM; a second request with the same voice (its prompt head from the prefix
//! cache) gives them again; another speaker vector is not served from that cache entry.

use std::sync::Arc;

use tts_model::checkpoint::SafetensorsFiles;
use tts_model::prompt::{ClonedVoice, SpeakerVector, VoiceReference};

use super::*;

const CASES: [&str; 3] = [
    "base17_xvec_stream",
    "base17_icl_stream",
    "base17_icl_prefill",
];

fn case_json(name: &str) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(fixtures().join(format!("cases/{name}.json"))).unwrap(),
    )
    .unwrap()
}

fn case_tensor(case: &str, name: &str) -> Vec<f32> {
    let f =
        SafetensorsFiles::open_files(vec![fixtures().join(format!("cases/{case}.safetensors"))])
            .unwrap();
    let shape = f.shape(name).unwrap().to_vec();
    f.tensor(name, &shape).unwrap().to_f32()
}

/// The case's request, its speaker vector scaled by `scale`.
fn request(c: &serde_json::Value, scale: f32) -> SpeechRequest {
    let r = case_json(c["ref_case"].as_str().unwrap());
    let x: Vec<f32> = case_tensor(c["ref_case"].as_str().unwrap(), "x_vector")
        .into_iter()
        .map(|v| v * scale)
        .collect();
    let reference = (!c["x_vector_only_mode"].as_bool().unwrap()).then(|| VoiceReference {
        frames: serde_json::from_value(r["ref_code"].clone()).unwrap(),
        text: c["ref_text"].as_str().unwrap().into(),
    });
    SpeechRequest {
        text: c["text"].as_str().unwrap().into(),
        voice: None,
        language: c["language"].as_str().unwrap().into(),
        instructions: None,
        text_mode: if c["non_streaming_mode"].as_bool().unwrap() {
            TextMode::Prefill
        } else {
            TextMode::Stream
        },
        clone: Some(Arc::new(ClonedVoice {
            speaker: Arc::new(SpeakerVector::new(x)),
            reference,
        })),
    }
}

#[test]
fn cloned_voices_give_the_official_codes_and_pcm_on_the_gpu() {
    let test = "cloned_voices_give_the_official_codes_and_pcm_on_the_gpu";
    let model = Model::from_dir(
        &fixtures().join("models/tiny-1b7-base"),
        LoadOptions::default(),
    )
    .unwrap();
    let Some(mut gpu) = gpu_backend_with(&model, test, true) else {
        return;
    };
    let mut cpu = CpuBackend::new(&model, 1).unwrap();
    let greedy = model.default_sampling(0).greedy();
    for case in CASES {
        let c = case_json(case);
        let frames = c["max_new_tokens"].as_u64().unwrap() as usize - 1;
        let want: Vec<[u32; 16]> = serde_json::from_value(c["codes"].clone()).unwrap();
        let prompt = model.prompt(&request(&c, 1.0)).unwrap();
        // twice: the second prefill finds the voice's prompt head in the prefix cache
        for run in 0..2 {
            let out = synthesize(&mut gpu, &prompt, &greedy, frames, true).unwrap();
            let mm = first_mismatch(&out.frames, &want);
            assert!(mm.is_none(), "{case} run {run}: codes differ at {mm:?}");
            let pcm = case_tensor(case, "pcm");
            assert_eq!(out.pcm.len(), pcm.len(), "{case}");
            let e = out
                .pcm
                .iter()
                .zip(&pcm)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(e < 1e-2, "{case} run {run}: pcm max abs err {e}");
        }
        // another speaker vector: the CPU reference's codes, not the cached head's
        let other = model.prompt(&request(&c, 0.5)).unwrap();
        let g = synthesize(&mut gpu, &other, &greedy, frames, false).unwrap();
        let r = synthesize(&mut cpu, &other, &greedy, frames, false).unwrap();
        let mm = first_mismatch(&g.frames, &r.frames);
        assert!(
            mm.is_none(),
            "{case}, other speaker: codes differ at {mm:?}"
        );
    }
}
