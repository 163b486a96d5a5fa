//! The boundary between the engine and the maths: one small trait at stage granularity,
//! over slots. A slot is one request's device-side state: talker KV cache, last hidden
//! state, the current frame's codes, sampler state and codec stream state.
//!
//! A request's life on a backend:
//! `alloc_slot` -> `prefill` (code 0 of frame 0) -> repeat { `predict_codes` (codes 1..15
//! of the frame) -> `codec_decode` whenever audio is wanted -> `talker_step` (code 0 of the
//! next frame, from this frame's codes plus one text token) } until EOS -> `free_slot`.
//! Every call takes a batch of rows; rows are independent, and a row's results never depend
//! on the other rows of its batch.

use crate::config::NUM_CODE_GROUPS;
use crate::error::BackendError;
use crate::prompt::Prompt;
use crate::sampling::SamplingParams;

/// The 16 codes of one 80 ms frame: code 0 from the talker, 1..15 from the code predictor.
pub type Frame = [u32; NUM_CODE_GROUPS];

/// Handle of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(pub u32);

/// The index of the first free entry of a backend's slot table, or `NoFreeSlot`.
pub fn first_free_slot<T>(slots: &[Option<T>]) -> Result<usize, BackendError> {
    slots
        .iter()
        .position(Option::is_none)
        .ok_or(BackendError::NoFreeSlot {
            capacity: slots.len(),
        })
}

/// One row of a prefill batch.
#[derive(Debug, Clone, Copy)]
pub struct PrefillRow<'a> {
    pub slot: SlotId,
    pub prompt: &'a Prompt,
}

/// One row of a talker step: the slot, and the text token to add to its input (the next
/// trailing text token, or `tts_pad` once the text is exhausted).
#[derive(Debug, Clone, Copy)]
pub struct StepRow {
    pub slot: SlotId,
    pub text_token: u32,
}

/// One row of a codec decode: the frames to append to the slot's audio stream.
#[derive(Debug, Clone, Copy)]
pub struct CodecRow<'a> {
    pub slot: SlotId,
    pub frames: &'a [Frame],
}

/// Static facts the engine needs about the loaded model.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendInfo {
    pub name: String,
    pub device: String,
    /// PCM sample rate of `codec_decode` output.
    pub sample_rate: u32,
    /// PCM samples per frame.
    pub samples_per_frame: usize,
    pub codec_eos: u32,
    pub tts_pad_token_id: u32,
    /// Most slots that can be live at once.
    pub max_slots: usize,
    /// Most talker positions (prompt + frames) a slot can hold.
    pub max_positions: usize,
}

/// Stage-granular model execution over slots.
pub trait Backend: Send {
    fn info(&self) -> &BackendInfo;

    /// Reserves a slot for a request sampled with `params`.
    fn alloc_slot(&mut self, params: &SamplingParams) -> Result<SlotId, BackendError>;

    /// Releases a slot and everything it holds. Unknown slots are ignored.
    fn free_slot(&mut self, slot: SlotId);

    /// Runs the prompts through the talker and samples code 0 of frame 0 for each row.
    fn prefill(&mut self, rows: &[PrefillRow<'_>]) -> Result<Vec<u32>, BackendError>;

    /// Runs the code predictor for each slot's current frame (its code 0 must not be EOS)
    /// and returns the full frames.
    fn predict_codes(&mut self, slots: &[SlotId]) -> Result<Vec<Frame>, BackendError>;

    /// Feeds each slot's current full frame plus a text token to the talker and samples
    /// code 0 of the next frame.
    fn talker_step(&mut self, rows: &[StepRow]) -> Result<Vec<u32>, BackendError>;

    /// Whether [`predict_and_step`](Self::predict_and_step) runs its two parts side by side
    /// on the device (else it runs them one after the other, and the engine gains nothing
    /// from pairing them).
    fn runs_side_by_side(&self) -> bool {
        false
    }

    /// [`predict_codes`](Self::predict_codes) for `cp` and [`talker_step`](Self::talker_step)
    /// for `step` (other slots) as one call, each part with its own result: a part that
    /// fails leaves its rows as they were, whatever the other part did.
    fn predict_and_step(
        &mut self,
        cp: &[SlotId],
        step: &[StepRow],
    ) -> (
        Result<Vec<Frame>, BackendError>,
        Result<Vec<u32>, BackendError>,
    ) {
        (self.predict_codes(cp), self.talker_step(step))
    }

    /// Whether [`prefill_and_step`](Self::prefill_and_step) runs its prompts and step rows
    /// through the talker in one pass (else one after the other, and the engine gains
    /// nothing from pairing them).
    fn merges_prefill_with_step(&self) -> bool {
        false
    }

    /// [`prefill`](Self::prefill) for `prompts` and [`talker_step`](Self::talker_step) for
    /// `step` (other slots) as one call, each part with its own result: a part that fails
    /// leaves its rows as they were, whatever the other part did.
    fn prefill_and_step(
        &mut self,
        prompts: &[PrefillRow<'_>],
        step: &[StepRow],
    ) -> (
        Result<Vec<u32>, BackendError>,
        Result<Vec<u32>, BackendError>,
    ) {
        (self.prefill(prompts), self.talker_step(step))
    }

    /// Appends frames to each slot's codec stream and returns their PCM
    /// (`frames.len() * samples_per_frame` samples per row, in [-1, 1]).
    fn codec_decode(&mut self, rows: &[CodecRow<'_>]) -> Result<Vec<Vec<f32>>, BackendError>;
}
