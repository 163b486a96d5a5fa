//! How well two stage calls share the GPU when they run at the same time: each on its own
//! backend (own stream, workspace and graphs; one process, one CUDA context), one host
//! thread each. The stage kernels are latency-bound (few blocks, dependent memory round
//! trips), so a second stream can fill what one leaves idle; this measures how much.

use std::fmt;
use std::str::FromStr;
use std::sync::Barrier;
use std::time::Instant;

use tts_model::backend::{Backend, PrefillRow, SlotId};
use tts_model::{Model, TextMode};

use crate::backend::CudaBackend;
use crate::bench::{bench_prompt, codec_rows, pad_steps, prepare};
use crate::error::CudaError;

/// One stage call, as `prefill`, `cp<rows>`, `talker<rows>` or `codec<rows>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// One prompt through the API (host sync included).
    Prefill,
    /// The code-predictor graph of the bucket for this many rows.
    CodePredictor(usize),
    /// The talker-step graph of the bucket for this many rows.
    TalkerStep(usize),
    /// The GPU codec's pass for this many rows.
    Codec(usize),
}

impl FromStr for Work {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "prefill" {
            return Ok(Work::Prefill);
        }
        let split = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
        let (name, rows) = s.split_at(split);
        let rows: usize = rows
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("`{s}`: expected a row count after `{name}` (e.g. cp32)"))?;
        match name {
            "cp" => Ok(Work::CodePredictor(rows)),
            "talker" => Ok(Work::TalkerStep(rows)),
            "codec" => Ok(Work::Codec(rows)),
            _ => Err(format!(
                "`{s}`: expected prefill, cp<rows>, talker<rows> or codec<rows>"
            )),
        }
    }
}

impl Work {
    /// Rows of the call (a prefill takes one prompt).
    pub fn rows(&self) -> usize {
        match *self {
            Work::Prefill => 1,
            Work::CodePredictor(n) | Work::TalkerStep(n) | Work::Codec(n) => n,
        }
    }
}

impl fmt::Display for Work {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Work::Prefill => write!(f, "prefill"),
            Work::CodePredictor(n) => write!(f, "cp{n}"),
            Work::TalkerStep(n) => write!(f, "talker{n}"),
            Work::Codec(n) => write!(f, "codec{n}"),
        }
    }
}

/// Two stage calls to run side by side, as `<work>+<work>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair(pub Work, pub Work);

impl FromStr for Pair {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once('+')
            .ok_or_else(|| format!("`{s}`: expected two stages joined by `+` (e.g. cp1+cp1)"))?;
        Ok(Pair(a.parse()?, b.parse()?))
    }
}

/// One pair's measurement (ms per call).
#[derive(Debug, Clone)]
pub struct Overlap {
    pub pair: Pair,
    /// Each call alone on its backend: wall time per call over back-to-back calls.
    pub alone_ms: [f64; 2],
    /// Calls made by each side while both ran.
    pub calls: [usize; 2],
    /// Each side's wall time per call while both ran.
    pub together_ms: [f64; 2],
    /// Wall time until both sides were done.
    pub together_wall_ms: f64,
}

impl Overlap {
    /// Time the same calls take one after the other / time they took side by side.
    pub fn gain(&self) -> f64 {
        let seq = self.calls[0] as f64 * self.alone_ms[0] + self.calls[1] as f64 * self.alone_ms[1];
        seq / self.together_wall_ms.max(1e-9)
    }
}

/// A backend made ready to repeat one `Work`: its slots, and the prompt for prefill.
struct Ready {
    work: Work,
    slots: Vec<SlotId>,
    prompt: Option<tts_model::prompt::Prompt>,
    params: tts_model::SamplingParams,
}

fn ready(
    b: &mut CudaBackend,
    model: &Model,
    work: Work,
    context: usize,
    codec_frames: usize,
) -> Result<Ready, CudaError> {
    let mut r = Ready {
        work,
        slots: Vec::new(),
        prompt: None,
        params: model.default_sampling(1),
    };
    match work {
        Work::Prefill => {
            r.prompt = Some(bench_prompt(model, TextMode::Stream)?);
        }
        Work::CodePredictor(n) => {
            r.slots = prepare(b, model, n, context)?;
            b.predict_codes(&r.slots)?;
        }
        Work::TalkerStep(n) => {
            r.slots = prepare(b, model, n, context)?;
            // the step takes a completed frame
            b.predict_codes(&r.slots)?;
            let steps = pad_steps(b, &r.slots);
            b.talker_step(&steps)?;
        }
        Work::Codec(n) => {
            r.slots = prepare(b, model, n, 0)?;
            let frames = vec![[1u32; 16]; codec_frames];
            b.codec_decode(&codec_rows(&r.slots, &frames))?;
        }
    }
    // once more, untimed (first launches, prefix cache)
    r.repeat(b, 1)?;
    Ok(r)
}

impl Ready {
    /// `k` calls back to back, then a sync.
    fn repeat(&self, b: &mut CudaBackend, k: usize) -> Result<(), CudaError> {
        for _ in 0..k {
            match self.work {
                Work::Prefill => {
                    let Some(prompt) = &self.prompt else {
                        return Ok(());
                    };
                    let slot = b.alloc_slot(&self.params)?;
                    let out = b.prefill(&[PrefillRow { slot, prompt }]);
                    b.free_slot(slot);
                    out?;
                }
                Work::CodePredictor(n) => {
                    let bucket = b.bucket(n);
                    b.replay(false, bucket)?;
                }
                Work::TalkerStep(n) => {
                    let bucket = b.bucket(n);
                    b.replay(true, bucket)?;
                }
                Work::Codec(_) => {
                    if let Some((gpu, c)) = b.gpu_codec_mut() {
                        c.replay_last_pass(gpu)?;
                    }
                }
            }
        }
        b.gpu().sync()
    }

    /// Wall time (ms) per call of `k` calls.
    fn time(&self, b: &mut CudaBackend, k: usize) -> Result<f64, CudaError> {
        let t = Instant::now();
        self.repeat(b, k)?;
        Ok(t.elapsed().as_secs_f64() * 1e3 / k.max(1) as f64)
    }

    fn release(self, b: &mut CudaBackend) {
        for s in self.slots {
            b.free_slot(s);
        }
    }
}

/// Measures each pair: both calls alone, then side by side on `x` and `y` (two backends of
/// the same model), each side making about `iters` calls' worth of the slower one's time.
pub fn bench_overlap(
    x: &mut CudaBackend,
    y: &mut CudaBackend,
    model: &Model,
    pairs: &[Pair],
    iters: usize,
    context: usize,
    codec_frames: usize,
) -> Result<Vec<Overlap>, CudaError> {
    let iters = iters.max(2);
    let mut out = Vec::new();
    for &pair in pairs {
        let rx = ready(x, model, pair.0, context, codec_frames)?;
        let ry = ready(y, model, pair.1, context, codec_frames)?;
        let alone = [rx.time(x, iters)?, ry.time(y, iters)?];
        // equal busy time on both sides
        let slow = alone[0].max(alone[1]);
        let calls = [
            ((iters as f64 * slow / alone[0].max(1e-6)).round() as usize).max(1),
            ((iters as f64 * slow / alone[1].max(1e-6)).round() as usize).max(1),
        ];
        let barrier = Barrier::new(2);
        let side = |b: &mut CudaBackend, r: &Ready, k: usize| -> Result<f64, CudaError> {
            let bound = b.gpu().bind();
            // both sides pass the barrier even if one cannot bind, so neither waits forever
            barrier.wait();
            bound?;
            r.time(b, k)
        };
        let t0 = Instant::now();
        let (tx, ty) = std::thread::scope(|s| {
            let hx = s.spawn(|| side(x, &rx, calls[0]));
            let hy = s.spawn(|| side(y, &ry, calls[1]));
            let join = |h: std::thread::ScopedJoinHandle<'_, Result<f64, CudaError>>| {
                h.join().unwrap_or_else(|_| {
                    Err(CudaError::Unavailable("a timing thread panicked".into()))
                })
            };
            (join(hx), join(hy))
        });
        let wall = t0.elapsed().as_secs_f64() * 1e3;
        x.gpu().bind()?;
        let together = [tx?, ty?];
        out.push(Overlap {
            pair,
            alone_ms: alone,
            calls,
            together_ms: together,
            together_wall_ms: wall,
        });
        rx.release(x);
        ry.release(y);
    }
    Ok(out)
}

/// The measurements as a text table.
pub fn overlap_table(rows: &[Overlap]) -> String {
    let mut out = format!(
        "{:<20} {:>9} {:>9} {:>12} {:>12} {:>7}\n",
        "pair", "A alone", "B alone", "A together", "B together", "gain"
    );
    for r in rows {
        out += &format!(
            "{:<20} {:>9.3} {:>9.3} {:>12.3} {:>12.3} {:>6.2}x\n",
            format!("{}+{}", r.pair.0, r.pair.1),
            r.alone_ms[0],
            r.alone_ms[1],
            r.together_ms[0],
            r.together_ms[1],
            r.gain()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_and_print_back() {
        let p: Pair = "cp32+talker16".parse().unwrap();
        assert_eq!(p, Pair(Work::CodePredictor(32), Work::TalkerStep(16)));
        let p: Pair = "prefill+codec4".parse().unwrap();
        assert_eq!(p, Pair(Work::Prefill, Work::Codec(4)));
        assert_eq!(format!("{}+{}", p.0, p.1), "prefill+codec4");
        for bad in ["cp32", "cp+cp1", "gpu4+cp1", "cp0+cp1", "cp1+"] {
            assert!(bad.parse::<Pair>().is_err(), "{bad} parsed");
        }
    }
}
