//! The built-in full-size models have exactly the released geometry: every tensor name and
//! shape the loader asks for adds up to the parameter counts of the real checkpoints
//! (architecture reference §5.1), without materialising the weights.

use tts_model::checkpoint::Init;
use tts_model::weights::{CodePredictorW, CodecW, TalkerW, TensorLoader};
use tts_model::{LoadOptions, Model};

/// Records names and element counts instead of loading.
#[derive(Default)]
struct Census {
    names: Vec<String>,
    params: usize,
}

impl TensorLoader for Census {
    type T = ();
    fn load(&mut self, name: &str, shape: &[usize], _: Init) -> Result<(), tts_model::ModelError> {
        self.names.push(name.to_string());
        self.params += shape.iter().product::<usize>();
        Ok(())
    }
}

fn census(spec: &str) -> (Census, Census) {
    let m = Model::load(spec, LoadOptions::default()).unwrap();
    let mut main = Census::default();
    TalkerW::load(&m.config, &mut main).unwrap();
    CodePredictorW::load(&m.config, &mut main).unwrap();
    let mut codec = Census::default();
    CodecW::load(&m.codec, &mut codec).unwrap();
    (main, codec)
}

#[test]
fn random_1_7b_has_the_released_parameter_counts() {
    let (main, codec) = census("random:1.7b");
    assert_eq!(main.params, 1_916_676_352);
    assert!(main
        .names
        .iter()
        .any(|n| n == "talker.code_predictor.small_to_mtp_projection.weight"));
    assert_eq!(codec.params, 114_323_137 - rvq_input_projs());
}

#[test]
fn random_0_6b_has_the_released_parameter_counts() {
    let (main, codec) = census("random:0.6b");
    assert_eq!(main.params, 905_788_672);
    assert!(!main
        .names
        .iter()
        .any(|n| n.contains("small_to_mtp_projection")));
    assert_eq!(codec.params, 114_323_137 - rvq_input_projs());
}

/// The decoder's RVQ input projections (encode side, 2 × 256×512) are in the released
/// decoder count but never used to decode, so the loader does not read them.
fn rvq_input_projs() -> usize {
    2 * 256 * 512
}

/// The Base built-ins add the released speaker encoder (an x-vector as wide as the talker)
/// to the same talker and code predictor.
#[test]
fn random_base_models_have_the_released_speaker_encoders() {
    use tts_model::config::ModelKind;
    use tts_model::reference::speaker::weights::SpeakerEncoderW;
    for (spec, main_params, speaker_params) in [
        ("random:1.7b-base", 1_916_676_352, 12_001_088),
        ("random:0.6b-base", 905_788_672, 8_854_336),
    ] {
        let m = Model::load(spec, LoadOptions::default()).unwrap();
        assert_eq!(m.kind(), ModelKind::Base, "{spec}");
        assert!(m.voices().is_empty(), "{spec}: no preset speakers");
        let (main, _) = census(spec);
        assert_eq!(main.params, main_params, "{spec}");
        let cfg = m.config.speaker_encoder.clone().unwrap();
        assert_eq!(cfg.enc_dim, m.config.talker.hidden_size, "{spec}");
        let mut speaker = Census::default();
        SpeakerEncoderW::load(&cfg, &mut speaker).unwrap();
        assert_eq!(speaker.params, speaker_params, "{spec}");
    }
}
