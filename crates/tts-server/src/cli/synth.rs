//! `qwen3-tts synth`: one utterance, start to end, on the chosen device.

use std::path::PathBuf;
use std::time::Instant;

use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tts_model::clone::{CloneMode, VoiceCloner};
use tts_model::config::UnknownKeys;
use tts_model::generate::{random_model_frames, synthesize, FrameCap};
use tts_model::prompt::ClonedVoice;
use tts_model::{LoadOptions, Model, SpeechRequest, TextMode};

use crate::audio::input::decode_file;
use crate::audio::wav;
use crate::backend::{self, BackendSize, Device};
use crate::server::cloning::MAX_REFERENCE_SECONDS;

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Checkpoint directory (released layout), `demo`, `random:1.7b` or `random:0.6b` (`-base`: voice cloning).
    #[arg(long, default_value = "demo")]
    pub model: String,
    /// Text to speak.
    #[arg(long)]
    pub text: String,
    /// Preset voice (CustomVoice speaker), case-insensitive.
    #[arg(long)]
    pub voice: Option<String>,
    /// Language name or `auto`, case-insensitive.
    #[arg(long, default_value = "auto")]
    pub language: String,
    /// Style instructions (CustomVoice 1.7B) or the voice description (VoiceDesign).
    #[arg(long)]
    pub instructions: Option<String>,
    /// Base models: the recording whose voice is cloned (WAV, FLAC, MP3 or Ogg Vorbis).
    #[arg(long)]
    pub ref_audio: Option<PathBuf>,
    /// Base models: what is said in `--ref-audio` (in-context cloning).
    #[arg(long)]
    pub ref_text: Option<String>,
    /// Base models: clone from the speaker vector alone (no `--ref-text` needed).
    #[arg(long)]
    pub x_vector_only: bool,
    /// Greedy decoding (argmax) instead of sampling.
    #[arg(long)]
    pub greedy: bool,
    /// Sampling seed; a random one is chosen (and printed) when absent.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop after this many frames (80 ms each); default: derived from the text length.
    #[arg(long)]
    pub max_frames: Option<usize>,
    /// `prefill`: all text in the prompt; `stream`: one text token per frame.
    #[arg(long, default_value = "prefill")]
    pub text_mode: TextMode,
    /// Sampling temperature (talker and code predictor).
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Top-k for both samplers (0 disables).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Top-p for both samplers.
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Repetition penalty on code 0.
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    /// Write the codes as JSON: an array of frames of 16 integers (EOS frame excluded).
    #[arg(long)]
    pub codes_out: Option<PathBuf>,
    /// Output WAV (24 kHz mono 16-bit PCM).
    #[arg(long)]
    pub out: PathBuf,
    /// Device to run on: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Ignore unknown keys in the checkpoint's config files (logged) instead of failing.
    #[arg(long)]
    pub lenient_config: bool,
}

pub fn run(a: SynthArgs) -> anyhow::Result<()> {
    let t_load = Instant::now();
    let opts = LoadOptions {
        unknown_config_keys: if a.lenient_config {
            UnknownKeys::Warn
        } else {
            UnknownKeys::Reject
        },
    };
    let model =
        Model::load(&a.model, opts).with_context(|| format!("loading model `{}`", a.model))?;
    if model.is_random() {
        eprintln!(
            "note: `{}` has random weights: its audio is noise (a pipeline demo)",
            model.name
        );
    }
    let req = SpeechRequest {
        text: a.text.clone(),
        voice: a.voice.clone(),
        language: a.language.clone(),
        instructions: a.instructions.clone(),
        text_mode: a.text_mode,
        clone: cloned_voice(&model, &a)?.map(Arc::new),
    };
    let prompt = model.prompt(&req)?;
    let seed = a.seed.unwrap_or_else(random_seed);
    let mut params = model.default_sampling(seed);
    for s in [&mut params.talker, &mut params.code_predictor] {
        if let Some(t) = a.temperature {
            s.temperature = t;
        }
        if let Some(k) = a.top_k {
            s.top_k = k;
        }
        if let Some(p) = a.top_p {
            s.top_p = p;
        }
    }
    if let Some(p) = a.repetition_penalty {
        params.repetition_penalty = p;
    }
    if a.greedy {
        params = params.greedy();
    }
    params.validate()?;
    let cap = FrameCap {
        hard_max: model.generation.max_new_tokens.saturating_sub(1),
        ..FrameCap::default()
    }
    .limit(prompt.body_len);
    let max_frames = match a.max_frames {
        Some(n) => n,
        // Random weights never end by EOS: length the reply from its text instead.
        None if model.is_random() => random_model_frames(&a.text).min(cap),
        None => cap,
    };
    let size = BackendSize {
        max_slots: 1,
        max_batch: 1,
        max_positions: (prompt.positions.len() + max_frames + 1).max(64),
        code_predictor_lane: false,
        merge_prefill: false,
    };
    let mut backend = backend::create(&model, a.device, size)?;
    let load_s = t_load.elapsed().as_secs_f64();

    let t_gen = Instant::now();
    let out = synthesize(backend.as_mut(), &prompt, &params, max_frames, true)?;
    let gen_s = t_gen.elapsed().as_secs_f64();

    wav::write_file(&a.out, &out.pcm, model.sample_rate())
        .with_context(|| format!("writing {}", a.out.display()))?;
    if let Some(path) = &a.codes_out {
        let json = serde_json::to_string(&out.frames)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    let audio_s = out.pcm.len() as f64 / model.sample_rate() as f64;
    eprintln!(
        "{} frames ({audio_s:.2} s of audio) in {gen_s:.2} s (real-time factor {:.2}), load {load_s:.2} s, \
         ended by {}, seed {seed} -> {}",
        out.frames.len(),
        if audio_s > 0.0 { gen_s / audio_s } else { 0.0 },
        if out.ended_by_eos { "EOS" } else { "the frame cap" },
        a.out.display()
    );
    Ok(())
}

/// A seed from the clock and the process id (unpredictable enough for sampling).
pub fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ ((std::process::id() as u64) << 32)
}

/// The voice cloned from `--ref-audio` (Base models).
fn cloned_voice(model: &Model, a: &SynthArgs) -> anyhow::Result<Option<ClonedVoice>> {
    let Some(path) = &a.ref_audio else {
        if a.ref_text.is_some() || a.x_vector_only {
            anyhow::bail!("--ref-text and --x-vector-only go with --ref-audio");
        }
        return Ok(None);
    };
    let Some(cloner) = VoiceCloner::load(model)? else {
        anyhow::bail!(
            "--ref-audio clones a voice with a Base model; `{}` is a {} model",
            model.name,
            model.kind().as_str()
        );
    };
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let audio = decode_file(bytes, MAX_REFERENCE_SECONDS)
        .with_context(|| format!("decoding {}", path.display()))?;
    let mode = if a.x_vector_only {
        CloneMode::SpeakerOnly
    } else {
        CloneMode::InContext
    };
    Ok(Some(cloner.clone_voice(
        &audio.samples,
        audio.sample_rate,
        mode,
        a.ref_text.as_deref(),
    )?))
}
