//! Stage micro-benchmarks on the GPU: talker step, code-predictor loop and codec decode
//! per batch size, timed with CUDA events over many graph replays, with the achieved
//! weight bandwidth (bytes of weights the stage reads once per call / time).

use std::time::Instant;

use cudarc::driver::sys as dsys;
use tts_model::backend::{Backend, CodecRow, PrefillRow, SlotId, StepRow};
use tts_model::{Model, Prompt, SpeechRequest, TextMode};

use crate::backend::CudaBackend;
use crate::error::CudaError;

mod links;
pub use links::{link_costs, link_table, LinkCost};

/// One measured stage at one batch size.
#[derive(Debug, Clone)]
pub struct StageTiming {
    pub stage: &'static str,
    pub batch: usize,
    /// Median device time per call (ms).
    pub ms: f64,
    /// Host wall time per call through the `Backend` API, sync included (ms).
    pub api_ms: f64,
    /// Weight bytes read per call.
    pub weight_bytes: u64,
}

impl StageTiming {
    /// Achieved weight bandwidth in TB/s.
    pub fn tb_per_s(&self) -> f64 {
        if self.ms <= 0.0 {
            return 0.0;
        }
        self.weight_bytes as f64 / (self.ms * 1e-3) / 1e12
    }
}

/// The stage results as a text table (header line, then one line per timing).
pub fn stage_table(rows: &[StageTiming]) -> String {
    let mut out = format!(
        "{:<16} {:>6} {:>10} {:>10} {:>12}\n",
        "stage", "batch", "gpu ms", "api ms", "weights TB/s"
    );
    for r in rows {
        out += &format!(
            "{:<16} {:>6} {:>10.3} {:>10.3} {:>12.2}\n",
            r.stage,
            r.batch,
            r.ms,
            r.api_ms,
            r.tb_per_s()
        );
    }
    out
}

/// The benchmarks' prompt: one ~60-character English sentence in the model's first voice.
pub(crate) fn bench_prompt(model: &Model, text_mode: TextMode) -> Result<Prompt, CudaError> {
    text_prompt(model, BENCH_TEXT, text_mode)
}

/// The bench's prompt text (16 new tokens after the cached head in prefill mode).
const BENCH_TEXT: &str = "The quick brown fox jumps over the lazy dog near the riverbank.";

/// A longer prompt text: 17 to 24 new tokens in prefill mode (the 24-token bucket, where
/// most of the server bench's prompts land; `prefill_plan::token_bucket`).
const BENCH_TEXT_24: &str =
    "The quick brown fox jumps over the lazy dog near the riverbank, then naps in the sun.";

/// The prefill stages `bench_stages` times: (stage, text, text mode).
const PREFILL_STAGES: [(&str, &str, TextMode); 3] = [
    ("prefill", BENCH_TEXT, TextMode::Prefill),
    ("prefill_stream", BENCH_TEXT, TextMode::Stream),
    ("prefill_24", BENCH_TEXT_24, TextMode::Prefill),
];

fn text_prompt(model: &Model, text: &str, text_mode: TextMode) -> Result<Prompt, CudaError> {
    let req = SpeechRequest {
        text: text.into(),
        voice: model.voices().first().cloned(),
        language: "english".into(),
        text_mode,
        ..Default::default()
    };
    Ok(model.prompt(&req)?)
}

/// Allocates and prefills `n` slots with a realistic prompt (streaming text mode, ~60
/// characters), then runs `context` frames so attention sees a realistic history.
pub(crate) fn prepare(
    b: &mut CudaBackend,
    model: &Model,
    n: usize,
    context: usize,
) -> Result<Vec<SlotId>, CudaError> {
    let prompt = bench_prompt(model, TextMode::Stream)?;
    let params = model.default_sampling(1);
    let mut slots = Vec::with_capacity(n);
    for _ in 0..n {
        slots.push(b.alloc_slot(&params)?);
    }
    let rows: Vec<PrefillRow<'_>> = slots
        .iter()
        .map(|&slot| PrefillRow {
            slot,
            prompt: &prompt,
        })
        .collect();
    b.prefill(&rows)?;
    let steps = pad_steps(b, &slots);
    for _ in 0..context {
        b.predict_codes(&slots)?;
        b.talker_step(&steps)?;
    }
    Ok(slots)
}

/// One codec row per slot, each decoding `frames`.
pub(crate) fn codec_rows<'a>(slots: &[SlotId], frames: &'a [[u32; 16]]) -> Vec<CodecRow<'a>> {
    slots
        .iter()
        .map(|&slot| CodecRow { slot, frames })
        .collect()
}

/// One talker-step row per slot, each fed the pad text token.
pub fn pad_steps(b: &CudaBackend, slots: &[SlotId]) -> Vec<StepRow> {
    let pad = b.info().tts_pad_token_id;
    slots
        .iter()
        .map(|&slot| StepRow {
            slot,
            text_token: pad,
        })
        .collect()
}

/// Times the talker step, the code-predictor loop and codec decoding of `codec_frames`
/// frames for each batch size, after `context` frames of history per slot.
pub fn bench_stages(
    b: &mut CudaBackend,
    model: &Model,
    batches: &[usize],
    iters: usize,
    codec_frames: usize,
    context: usize,
) -> Result<Vec<StageTiming>, CudaError> {
    let (talker_bytes, cp_bytes) = b.weight_bytes();
    let mut out = Vec::new();
    // prefill of one ~60-character prompt in each text mode, and of a longer one (wall
    // time through the API, sync included); after the first call the prompt head is in the
    // prefix cache (when on), so these are the times of a request whose voice and language
    // were seen before
    for (stage, text, text_mode) in PREFILL_STAGES {
        let prompt = text_prompt(model, text, text_mode)?;
        let params = model.default_sampling(1);
        let mut samples = Vec::new();
        for i in 0..iters.max(3) + 1 {
            let slot = b.alloc_slot(&params)?;
            let t = Instant::now();
            b.prefill(&[PrefillRow {
                slot,
                prompt: &prompt,
            }])?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            b.free_slot(slot);
            if i > 0 {
                samples.push(ms);
            }
        }
        samples.sort_by(|a, c| a.total_cmp(c));
        let ms = samples[samples.len() / 2];
        out.push(StageTiming {
            stage,
            batch: 1,
            ms,
            api_ms: ms,
            weight_bytes: talker_bytes,
        });
    }
    for &n in batches {
        let slots = prepare(b, model, n, context)?;
        // code predictor (the slots hold a fresh code 0 after `prepare`)
        let t = Instant::now();
        b.predict_codes(&slots)?;
        let api = t.elapsed().as_secs_f64() * 1e3;
        let ms = b.time_stage(false, n, iters)?;
        out.push(StageTiming {
            stage: "code_predictor",
            batch: n,
            ms,
            api_ms: api,
            weight_bytes: cp_bytes,
        });
        // talker step
        let steps = pad_steps(b, &slots);
        let t = Instant::now();
        b.talker_step(&steps)?;
        let api = t.elapsed().as_secs_f64() * 1e3;
        let ms = b.time_stage(true, n, iters)?;
        out.push(StageTiming {
            stage: "talker_step",
            batch: n,
            ms,
            api_ms: api,
            weight_bytes: talker_bytes,
        });
        // codec (only when it runs on the GPU; the CPU fallback is for debugging)
        if !b.gpu_codec() {
            for s in slots {
                b.free_slot(s);
            }
            continue;
        }
        let frames = vec![[1u32; 16]; codec_frames];
        let rows = codec_rows(&slots, &frames);
        b.codec_decode(&rows)?;
        let reps = iters.clamp(1, 20);
        let t = Instant::now();
        for _ in 0..reps {
            b.codec_decode(&rows)?;
        }
        let api_ms = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        // device time of the call's (last) pass; the API time adds the input copy, the
        // PCM read-back and the host's share
        let ms = b.time_codec_pass(iters)?.unwrap_or(api_ms);
        out.push(StageTiming {
            stage: "codec_decode",
            batch: n,
            ms,
            api_ms,
            weight_bytes: 0,
        });
        for s in slots {
            b.free_slot(s);
        }
    }
    Ok(out)
}

/// One persistent stage's phase times at one batch size.
#[derive(Debug, Clone)]
pub struct StageTrace {
    pub stage: &'static str,
    pub batch: usize,
    pub phases: Vec<crate::persistent::PhaseStat>,
}

/// The persistent kernels' phase times for each batch size (after `context` frames of
/// history per slot), for the stages that run persistently at that size.
pub fn trace_stages(
    b: &mut CudaBackend,
    model: &Model,
    batches: &[usize],
    context: usize,
) -> Result<Vec<StageTrace>, CudaError> {
    let mut out = Vec::new();
    for &n in batches {
        let slots = prepare(b, model, n, context)?;
        b.predict_codes(&slots)?;
        if let Some(phases) = b.trace_persistent(false, n)? {
            out.push(StageTrace {
                stage: "code_predictor",
                batch: n,
                phases,
            });
        }
        b.talker_step(&pad_steps(b, &slots))?;
        if let Some(phases) = b.trace_persistent(true, n)? {
            out.push(StageTrace {
                stage: "talker_step",
                batch: n,
                phases,
            });
        }
        for s in slots {
            b.free_slot(s);
        }
    }
    Ok(out)
}

/// The phase traces as a text table.
pub fn trace_table(rows: &[StageTrace]) -> String {
    let mut out = format!(
        "{:<16} {:>6} {:<10} {:>6} {:>10} {:>11} {:>10}\n",
        "stage", "batch", "phase", "count", "work us", "barrier us", "total ms"
    );
    for t in rows {
        for p in &t.phases {
            out.push_str(&format!(
                "{:<16} {:>6} {:<10} {:>6} {:>10.2} {:>11.2} {:>10.3}\n",
                t.stage,
                t.batch,
                p.phase,
                p.count,
                p.work_us,
                p.barrier_us,
                p.count as f64 * (p.work_us + p.barrier_us) * 1e-3
            ));
        }
    }
    out
}

impl CudaBackend {
    /// Median device time (ms) of `iters` replays of the talker-step (`talker`) or
    /// code-predictor graph of the bucket for `n` rows, with the inputs last written.
    pub fn time_stage(&mut self, talker: bool, n: usize, iters: usize) -> Result<f64, CudaError> {
        let b = self.bucket(n);
        self.median_replay_ms(iters, |s| s.replay(talker, b))
    }

    /// Median device time (ms) of `iters` replays of the GPU codec's last pass (its graph,
    /// on the inputs last written: the same frames decoded again from the same stream
    /// state), or `None` without a GPU codec or a pass yet.
    pub fn time_codec_pass(&mut self, iters: usize) -> Result<Option<f64>, CudaError> {
        if self
            .gpu_codec_mut()
            .is_none_or(|(_, c)| c.last_pass().is_none())
        {
            return Ok(None);
        }
        let ms = self.median_replay_ms(iters, |s| match s.gpu_codec_mut() {
            Some((gpu, c)) => c.replay_last_pass(gpu),
            None => Ok(()),
        })?;
        Ok(Some(ms))
    }

    /// Median of `iters` event-timed runs of `run` (after one untimed run).
    fn median_replay_ms(
        &mut self,
        iters: usize,
        run: impl Fn(&mut Self) -> Result<(), CudaError>,
    ) -> Result<f64, CudaError> {
        let iters = iters.max(1);
        run(self)?;
        let ctx = self.gpu().ctx.clone();
        let stream = self.gpu().stream.clone();
        let e0 = ctx.new_event(Some(dsys::CUevent_flags::CU_EVENT_DEFAULT))?;
        let e1 = ctx.new_event(Some(dsys::CUevent_flags::CU_EVENT_DEFAULT))?;
        let mut samples = Vec::with_capacity(iters);
        for _ in 0..iters {
            e0.record(&stream)?;
            run(self)?;
            e1.record(&stream)?;
            stream.synchronize()?;
            samples.push(e0.elapsed_ms(&e1)? as f64);
        }
        samples.sort_by(|a, c| a.total_cmp(c));
        Ok(samples[samples.len() / 2])
    }
}

/// One kernel micro-benchmark result.
#[derive(Debug, Clone)]
pub struct KernelTiming {
    pub name: String,
    /// Device time per launch (µs), replayed inside a graph.
    pub us: f64,
    /// Achieved bandwidth over the bytes the launch must read (TB/s).
    pub tb_per_s: f64,
}

/// Times linear layers on the release layer shapes for several row counts and each path
/// that takes them (GEMV up to 8 rows, tensor cores, clusters, cuBLAS; the GEMV also over
/// FP8 codes, `gemv8`, on tensor cores where the rule would take them, `gemv8mma`, and
/// with the fused RMSNorm, `+norm`): each case is a graph of 64
/// launches cycling through enough weight copies to defeat the L2 cache. The bandwidth
/// column counts the bytes of the weights the launch reads (1 per FP8 weight).
pub fn bench_gemv(gpu: &crate::device::Gpu) -> Result<Vec<KernelTiming>, CudaError> {
    use crate::device::SmallCall;
    use crate::linear::{linear, staged_mma_plan, Act, GemmScratch, Linear, LinearPath};
    use crate::linear::{LinearPaths, Rows};
    let shapes: &[(&str, usize, usize)] = &[
        ("talker qkv", 4096, 2048),
        ("talker o", 2048, 2048),
        ("talker gate_up", 12288, 2048),
        ("talker down", 2048, 6144),
        ("talker head", 3072, 2048),
        ("cp qkv", 4096, 1024),
        ("cp o", 1024, 2048),
        ("cp gate_up", 6144, 1024),
        ("cp down", 1024, 3072),
        ("cp head", 2048, 1024),
    ];
    let mut scratch = GemmScratch::new(gpu, 128, 6144, 12288)?;
    let path = |p| LinearPaths::forced(p, gpu.clusters, gpu.tiles);
    let (gemv, tc, cublas, cluster, tile) = (
        LinearPath::Gemv,
        LinearPath::TensorCores,
        LinearPath::Cublas,
        LinearPath::Cluster,
        LinearPath::Tile,
    );
    let wide = |label, m| (label, m, path(LinearPath::Wide).with_wide(gpu.wides));
    let x: crate::device::DBuf<f32> = gpu.upload(&vec![0.01f32; 64 * 6144])?;
    let y: crate::device::DBuf<f32> = gpu.zeros(64 * 12288)?;
    let gain: crate::device::DBuf<f32> = gpu.upload(&vec![1.0f32; 6144])?;
    let mut out = Vec::new();
    let lt_was_on = gpu.lt.as_ref().is_some_and(|lt| lt.enabled());
    for &(name, n, k) in shapes {
        let bytes = n * k * 2;
        let copies = (256 << 20) / bytes + 1;
        let w: Vec<u16> = (0..n * k)
            .map(|i| half::bf16::from_f32(((i % 97) as f32 - 48.0) * 1e-3).to_bits())
            .collect();
        let layers: Vec<Linear> = (0..copies)
            .map(|_| Linear::new(gpu, &w, n, k, None))
            .collect::<Result<_, _>>()?;
        let wf: Vec<f32> = w
            .iter()
            .map(|&b| half::bf16::from_bits(b).to_f32())
            .collect();
        let q = tts_model::fp8::Fp8Rows::quantize(&wf, n, k);
        let layers8: Vec<Linear> = (0..(256 << 20) / (n * k) + 1)
            .map(|_| Linear::new_fp8(gpu, &q, None))
            .collect::<Result<_, _>>()?;
        let cases = [
            ("gemv", 1usize, path(gemv)),
            ("gemv+norm", 1, path(gemv)),
            ("gemv8", 1, path(gemv)),
            ("gemv8+norm", 1, path(gemv)),
            // (one row without a norm takes gemv8_* even when forced onto the codes)
            ("gemv8mma+norm", 1, path(gemv)),
            ("gemv", 2, path(gemv)),
            ("gemv8", 2, path(gemv)),
            ("gemv8mma", 2, path(gemv)),
            ("gemv", 4, path(gemv)),
            ("cluster", 4, path(cluster)),
            ("gemv", 8, path(gemv)),
            ("tc", 8, path(tc)),
            ("cluster", 8, path(cluster)),
            ("tc", 16, path(tc)),
            ("cublas", 16, path(cublas)),
            ("cublasLt", 16, path(cublas)),
            ("cluster", 16, path(cluster)),
            ("tile", 16, path(tile)),
            wide("wide", 16),
            ("tc", 32, path(tc)),
            ("cublas", 32, path(cublas)),
            ("cublasLt", 32, path(cublas)),
            ("cluster", 32, path(cluster)),
            ("tile", 32, path(tile)),
            wide("wide", 32),
            ("tc", 64, path(tc)),
            ("cublas", 64, path(cublas)),
            ("cublasLt", 64, path(cublas)),
            ("cluster", 64, path(cluster)),
            ("tile", 64, path(tile)),
            wide("wide", 64),
            wide("wide+norm", 32),
            ("staged", 2, path(cublas)),
            ("staged", 8, path(cublas)),
            ("staged", 16, path(cublas)),
            ("staged", 32, path(cublas)),
            ("staged", 64, path(cublas)),
        ];
        // cuBLASLt tuned for this shape as the backend tunes it; the plain `cublas` rows
        // run with it off
        crate::lt::tune(
            gpu,
            &[(n, k, layers[0].w.ptr)],
            (scratch.xb.ptr, scratch.xb.len),
            (scratch.acc.ptr, scratch.acc.len),
            5,
        )?;
        for (label, m, paths) in cases {
            // the staged MMA (`SmallCall::StagedMma`) where its plan takes the shape
            let staged = label.starts_with("staged");
            let fits = if staged {
                gpu.staged && staged_mma_plan(n, k, m, false, gpu.sm_count as usize).is_some()
            } else {
                paths.choose(m, n, k) == paths.force.unwrap_or(LinearPath::Cublas)
            };
            if !fits {
                continue; // the path cannot take this shape here
            }
            let mode = if staged {
                SmallCall::StagedMma
            } else {
                SmallCall::Default
            };
            if let Some(lt) = &gpu.lt {
                lt.set_enabled(label != "cublas");
            }
            scratch.paths = paths;
            scratch.paths.fp8_codes = Some(label.starts_with("gemv8"));
            scratch.paths.fp8_mma = label.starts_with("gemv8mma");
            let scratch = &scratch;
            let launches = 64;
            let set: &[Linear] = if label.starts_with("gemv8") {
                &layers8
            } else {
                &layers
            };
            let norm = label.ends_with("+norm").then_some((gain.ptr, 1e-6));
            let enqueue = |gpu: &crate::device::Gpu| -> Result<(), CudaError> {
                gpu.with_small_call(mode, || {
                    for i in 0..launches {
                        let l = &set[i % set.len()];
                        let rows = Rows {
                            ptr: x.ptr,
                            ld: k,
                            count: m,
                        };
                        let (act, res) = (Act::None, None);
                        linear(gpu, l, rows, norm, act, res, y.ptr, n, scratch)?;
                    }
                    Ok(())
                })
            };
            let g = crate::device::Graph::capture(gpu, enqueue)?;
            g.launch()?;
            let ms = gpu.time_ms(|| (0..5).try_for_each(|_| g.launch()))?;
            let us = ms * 1e3 / (5 * launches) as f64;
            let read = if label.starts_with("gemv8") {
                n * k
            } else {
                bytes
            };
            out.push(KernelTiming {
                name: format!("{label} {name} [{n}x{k}] m={m}"),
                us,
                tb_per_s: read as f64 / (us * 1e-6) / 1e12,
            });
        }
    }
    if let Some(lt) = &gpu.lt {
        lt.set_enabled(lt_was_on);
    }
    Ok(out)
}

/// A graph of `links` dependent launches of the probe `kernel` (`blocks` blocks of 256
/// threads), link i with the arguments `args(i)`.
fn chain_graph(
    gpu: &crate::device::Gpu,
    kernel: &'static str,
    links: usize,
    blocks: u32,
    args: impl Fn(i32) -> Vec<crate::device::Arg>,
) -> Result<crate::device::Graph, CudaError> {
    crate::device::Graph::capture(gpu, |gpu| {
        (0..links as i32).try_for_each(|i| gpu.launch(kernel, (blocks, 1, 1), 256, &args(i)))
    })
}

/// The median of five results of `timed_run` (a run's device time) after one discarded.
fn median_of_five(mut timed_run: impl FnMut() -> Result<f64, CudaError>) -> Result<f64, CudaError> {
    timed_run()?;
    let mut ms = (0..5).map(|_| timed_run()).collect::<Result<Vec<_>, _>>()?;
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

/// What one dependent step of a chain costs with no weights to read (`kernels/probe.cu`):
/// per launch of a graph of PDL launches, and per phase of one launch whose blocks meet
/// at a grid barrier after each phase; `blocks` blocks of 256 threads either way.
#[derive(Debug, Clone, Copy)]
pub struct ChainCosts {
    pub links: usize,
    pub blocks: u32,
    pub launch_us: f64,
    pub barrier_phase_us: f64,
}

/// Times a chain of `links` dependent links both ways (`chain_link` launches in one graph,
/// `chain_phases` as one launch; one block per multiprocessor), each the median of 5 timed
/// runs after one untimed, and checks that every run carried its value down the chain.
pub fn chain_costs(gpu: &crate::device::Gpu, links: usize) -> Result<ChainCosts, CudaError> {
    use crate::device::Arg;
    let blocks = gpu.sm_count;
    let mut v: crate::device::DBuf<f32> = gpu.zeros(links + 1)?;
    let state: crate::device::DBuf<u32> = gpu.zeros(2)?;
    let check = |gpu: &crate::device::Gpu, v: &crate::device::DBuf<f32>| {
        let end = gpu.read(v, links + 1)?[links];
        if end == links as f32 {
            Ok(())
        } else {
            Err(CudaError::Shape(format!(
                "chain of {links} links ended at {end}, not {links}"
            )))
        }
    };
    let ptr = v.ptr;
    let g = chain_graph(gpu, "chain_link", links, blocks, |i| {
        vec![Arg::P(ptr), Arg::I(i)]
    })?;
    // one untimed run, then the median of five; each starts from zeros and is checked
    let mut timed = |run: &dyn Fn() -> Result<(), CudaError>| -> Result<f64, CudaError> {
        median_of_five(|| {
            gpu.write(&mut v, &vec![0.0f32; links + 1])?;
            let t = gpu.time_ms(run)?;
            check(gpu, &v)?;
            Ok(t)
        })
    };
    let launch_ms = timed(&|| g.launch())?;
    let args = [Arg::P(ptr), Arg::I(links as i32), Arg::P(state.ptr)];
    let phase_ms = timed(&|| gpu.launch("chain_phases", (blocks, 1, 1), 256, &args))?;
    let per = |ms: f64| ms * 1e3 / links as f64;
    Ok(ChainCosts {
        links,
        blocks,
        launch_us: per(launch_ms),
        barrier_phase_us: per(phase_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefill_plan::token_bucket;

    /// The prefill stages' prompts land in the token buckets their names give (the demo
    /// model has the released tokenizer and prompt layout): 16 and 24 new tokens after the
    /// cached head.
    #[test]
    fn bench_prefill_prompts_fill_their_token_buckets() {
        let model = Model::load("demo", Default::default()).expect("demo model");
        let buckets: Vec<usize> = PREFILL_STAGES
            .iter()
            .filter(|(_, _, mode)| *mode == TextMode::Prefill)
            .map(|&(_, text, mode)| {
                let p = text_prompt(&model, text, mode).expect("prompt");
                token_bucket(p.positions.len() - p.head_len, true)
            })
            .collect();
        assert_eq!(buckets, vec![16, 24]);
    }

    #[test]
    fn stage_table_has_a_header_and_one_line_per_timing() {
        let rows = [StageTiming {
            stage: "talker_step",
            batch: 4,
            ms: 2.0,
            api_ms: 2.125,
            weight_bytes: 3_000_000_000,
        }];
        let table = stage_table(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2, "{table}");
        assert!(lines[0].starts_with("stage") && lines[0].ends_with("weights TB/s"));
        let fields: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(fields, ["talker_step", "4", "2.000", "2.125", "1.50"]);
    }
}
