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
