//! Sampling as the reference does it (transformers 4.57.3 `generate`, §2.4 of the
//! architecture reference), with a counter-based RNG instead of torch's global generator.
//!
//! Talker (code 0): repetition penalty over earlier code-0 ids -> EOS masked for the first
//! two samples -> ids `vocab-1024 .. vocab` except EOS suppressed -> [temperature -> top-k ->
//! top-p -> sample] or argmax. Code predictor (codes 1..15): [temperature -> top-k -> top-p
//! -> sample] or argmax, no processors.
//!
//! The random number for a draw is `philox(seed, frame, codebook)`, so a request's audio
//! depends only on its seed, never on what else shares its batch.

use crate::config::GenerationConfig;
use crate::error::RequestError;

/// Settings of one sampler (talker or code predictor).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerParams {
    /// Sample (true) or take the argmax (false).
    pub do_sample: bool,
    pub temperature: f32,
    /// 0 disables top-k.
    pub top_k: usize,
    /// 1.0 disables top-p.
    pub top_p: f32,
}

impl SamplerParams {
    pub const GREEDY: SamplerParams = SamplerParams {
        do_sample: false,
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
    };

    fn validate(&self, which: &'static str) -> Result<(), RequestError> {
        let err = |message: String| RequestError::Sampling {
            field: which,
            message,
        };
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            return Err(err(format!("temperature {} must be > 0", self.temperature)));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(err(format!("top_p {} must be in (0, 1]", self.top_p)));
        }
        Ok(())
    }
}

/// All sampling settings of a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    pub talker: SamplerParams,
    /// Repetition penalty over earlier code-0 ids (1.0 disables it).
    pub repetition_penalty: f32,
    pub code_predictor: SamplerParams,
    pub seed: u64,
}

impl SamplingParams {
    /// The checkpoint's defaults with the given seed.
    pub fn from_generation(g: &GenerationConfig, seed: u64) -> Self {
        Self {
            talker: SamplerParams {
                do_sample: g.do_sample,
                temperature: g.temperature,
                top_k: g.top_k,
                top_p: g.top_p,
            },
            repetition_penalty: g.repetition_penalty,
            code_predictor: SamplerParams {
                do_sample: g.subtalker_dosample,
                temperature: g.subtalker_temperature,
                top_k: g.subtalker_top_k,
                top_p: g.subtalker_top_p,
            },
            seed,
        }
    }

    /// Greedy decoding for both samplers (the repetition penalty still applies, as in the
    /// reference's `do_sample=False`).
    pub fn greedy(mut self) -> Self {
        self.talker = SamplerParams::GREEDY;
        self.code_predictor = SamplerParams::GREEDY;
        self
    }

    pub fn validate(&self) -> Result<(), RequestError> {
        self.talker.validate("temperature/top_p")?;
        self.code_predictor
            .validate("subtalker_temperature/subtalker_top_p")?;
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(RequestError::Sampling {
                field: "repetition_penalty",
                message: format!("{} must be > 0", self.repetition_penalty),
            });
        }
        Ok(())
    }
}

/// The fixed rules of code-0 sampling that come from the model config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TalkerRules {
    pub eos: u32,
    /// Ids `suppress_from..vocab` except EOS can never be sampled.
    pub suppress_from: usize,
    /// EOS is masked while fewer than this many code-0 ids were sampled.
    pub min_new_tokens: usize,
}

/// Applies the talker's logits processors in place: repetition penalty over `history`,
/// the minimum-length EOS mask and token suppression.
pub fn process_talker_logits(
    logits: &mut [f32],
    history: &[u32],
    penalty: f32,
    rules: &TalkerRules,
) {
    if penalty != 1.0 {
        let mut seen = vec![false; logits.len()];
        for &id in history {
            let i = id as usize;
            if i < logits.len() && !seen[i] {
                seen[i] = true;
                let l = logits[i];
                logits[i] = if l > 0.0 { l / penalty } else { l * penalty };
            }
        }
    }
    let eos = rules.eos as usize;
    if history.len() < rules.min_new_tokens && eos < logits.len() {
        logits[eos] = f32::NEG_INFINITY;
    }
    for (i, l) in logits.iter_mut().enumerate().skip(rules.suppress_from) {
        if i != eos {
            *l = f32::NEG_INFINITY;
        }
    }
}

/// Index of the largest value (the first one on ties, as `torch.argmax`).
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// Picks an id from processed logits: argmax, or temperature/top-k/top-p then a draw with
/// the uniform number `u` in [0, 1) by inverse CDF in index order.
pub fn choose(logits: &mut [f32], p: &SamplerParams, u: f32) -> u32 {
    if !p.do_sample {
        return argmax(logits);
    }
    if p.temperature != 1.0 {
        for l in logits.iter_mut() {
            *l /= p.temperature;
        }
    }
    if p.top_k > 0 && p.top_k < logits.len() {
        let mut sorted: Vec<f32> = logits.to_vec();
        sorted.sort_unstable_by(|a, b| b.total_cmp(a));
        let kth = sorted[p.top_k - 1];
        for l in logits.iter_mut() {
            if *l < kth {
                *l = f32::NEG_INFINITY;
            }
        }
    }
    if p.top_p < 1.0 {
        apply_top_p(logits, p.top_p);
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return argmax(logits);
    }
    let weights: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
    let total: f32 = weights.iter().sum();
    let target = u * total;
    let mut acc = 0.0f32;
    let mut last = 0usize;
    for (i, &w) in weights.iter().enumerate() {
        if w > 0.0 {
            acc += w;
            last = i;
            if acc > target {
                return i as u32;
            }
        }
    }
    last as u32
}

/// Nucleus filtering as transformers' `TopPLogitsWarper`: drop the smallest tokens whose
/// cumulative probability (from the smallest up) is at most `1 - top_p`, keeping at least one.
fn apply_top_p(logits: &mut [f32], top_p: f32) {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[a].total_cmp(&logits[b]));
    let max = logits[*order.last().unwrap_or(&0)];
    let weights: Vec<f32> = order.iter().map(|&i| (logits[i] - max).exp()).collect();
    let total: f32 = weights.iter().sum();
    let mut cum = 0.0f32;
    let n = order.len();
    for (rank, &i) in order.iter().enumerate() {
        cum += weights[rank] / total;
        if cum <= 1.0 - top_p && rank + 1 < n {
            logits[i] = f32::NEG_INFINITY;
        }
    }
}

/// Philox4x32-10 counter-based generator (Salmon et al., 2011): the same (key, counter)
/// always gives the same four words, on any device.
pub fn philox4x32(key: [u32; 2], counter: [u32; 4]) -> [u32; 4] {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    const W0: u32 = 0x9E37_79B9;
    const W1: u32 = 0xBB67_AE85;
    let (mut k0, mut k1) = (key[0], key[1]);
    let mut c = counter;
    for _ in 0..10 {
        let p0 = M0 * c[0] as u64;
        let p1 = M1 * c[2] as u64;
        c = [
            ((p1 >> 32) as u32) ^ c[1] ^ k0,
            p1 as u32,
            ((p0 >> 32) as u32) ^ c[3] ^ k1,
            p0 as u32,
        ];
        k0 = k0.wrapping_add(W0);
        k1 = k1.wrapping_add(W1);
    }
    c
}

/// The uniform number in [0, 1) for draw (`frame`, `codebook`) of a request seeded `seed`.
/// Frame 0 is the first code-0 sample (from the prefill).
pub fn draw_uniform(seed: u64, frame: u32, codebook: u32) -> f32 {
    let out = philox4x32([seed as u32, (seed >> 32) as u32], [frame, codebook, 0, 0]);
    (out[0] >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_the_published_known_answer() {
        // Random123 kat_vectors: philox4x32_10 with counter = key = 0.
        assert_eq!(
            philox4x32([0, 0], [0, 0, 0, 0]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32([0xffff_ffff, 0xffff_ffff], [0xffff_ffff; 4]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
    }

    #[test]
    fn talker_processors_follow_the_reference_rules() {
        let rules = TalkerRules {
            eos: 5,
            suppress_from: 4,
            min_new_tokens: 2,
        };
        let mut l = vec![2.0, -2.0, 1.0, 0.5, 9.0, 3.0, 7.0];
        process_talker_logits(&mut l, &[0, 1, 0], 2.0, &rules);
        // penalised once each: 2/2, -2*2
        assert_eq!(&l[..4], &[1.0, -4.0, 1.0, 0.5]);
        assert_eq!(l[4], f32::NEG_INFINITY);
        assert_eq!(l[5], 3.0, "EOS not masked after 2 samples");
        assert_eq!(l[6], f32::NEG_INFINITY);
        let mut l = vec![0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0];
        process_talker_logits(&mut l, &[1], 1.0, &rules);
        assert_eq!(l[5], f32::NEG_INFINITY, "EOS masked before 2 samples");
    }

    #[test]
    fn top_k_and_top_p_restrict_the_draw() {
        let p = SamplerParams {
            do_sample: true,
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
        };
        for u in [0.0, 0.3, 0.6, 0.99] {
            let mut l = vec![1.0, 5.0, 4.9, -3.0];
            let id = choose(&mut l, &p, u);
            assert!(id == 1 || id == 2);
        }
        // top-p 0.5 with one dominant token keeps only that token
        let p = SamplerParams {
            do_sample: true,
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
        };
        for u in [0.0, 0.5, 0.999] {
            let mut l = vec![0.0, 10.0, 0.0, 0.0];
            assert_eq!(choose(&mut l, &p, u), 1);
        }
        // u sweeps the CDF in index order
        let p = SamplerParams {
            do_sample: true,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
        };
        let mut l = vec![0.0, 0.0];
        assert_eq!(choose(&mut l.clone(), &p, 0.25), 0);
        assert_eq!(choose(&mut l, &p, 0.75), 1);
    }

    #[test]
    fn draws_depend_on_seed_frame_and_codebook() {
        let a = draw_uniform(1, 0, 0);
        assert_eq!(a, draw_uniform(1, 0, 0));
        assert_ne!(a, draw_uniform(2, 0, 0));
        assert_ne!(a, draw_uniform(1, 1, 0));
        assert_ne!(a, draw_uniform(1, 0, 1));
        assert!((0.0..1.0).contains(&a));
    }
}
