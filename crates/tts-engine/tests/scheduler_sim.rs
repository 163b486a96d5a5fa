//! The scheduler and engine core under a simulated clock, on a fake backend with set stage
//! costs (prefill 3 ms + 0.1 ms/row, talker 1 ms, code predictor 1 ms, codec 0.5 ms unless
//! a test says otherwise). Every assertion is about simulated time, so none is flaky.

use std::time::Duration;

use tts_engine::onset::OnsetRule;
use tts_engine::scheduler::{Reason, Stage};
use tts_engine::sim::{
    fake_sample, simulate, Fault, SimConfig, SimOutcome, SimRequest, StageCosts,
    FAKE_SAMPLES_PER_FRAME,
};
use tts_engine::trim::TrimConfig;
use tts_engine::{EndReason, Event};

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn request(arrival_ms: u64, frames: usize, seed: u64) -> SimRequest {
    SimRequest {
        arrival: ms(arrival_ms),
        frames,
        seed,
        prompt_len: 40,
        cancel_at: None,
    }
}

/// The audio a request should deliver: its fake tone after `skip_frames` frames.
fn expected_audio(seed: u64, frames: usize, skip_frames: usize) -> Vec<f32> {
    (skip_frames * FAKE_SAMPLES_PER_FRAME..frames * FAKE_SAMPLES_PER_FRAME)
        .map(|n| fake_sample(seed, n))
        .collect()
}

/// Every request of `out` delivered all its `frames` frames of audio, once and in order.
fn assert_all_audio_in_order(out: &SimOutcome, frames: usize) {
    for r in &out.requests {
        assert_eq!(r.usage().expect("done").frames, frames);
        assert!(
            r.audio() == expected_audio(r.spec.seed, frames, 0),
            "{:?}: audio lost or out of order",
            r.id
        );
    }
}

#[test]
fn every_stream_gets_all_its_audio_once_and_in_order() {
    let reqs: Vec<SimRequest> = (0..12)
        .map(|i| request(i * 37, 5 + (i as usize * 13) % 60, 100 + i))
        .collect();
    let out = simulate(&SimConfig::default(), &reqs);
    for r in &out.requests {
        let usage = r.usage().expect("done");
        assert_eq!(usage.frames, r.spec.frames);
        assert_eq!(usage.end, EndReason::FrameLimit);
        assert!(
            r.audio() == expected_audio(r.spec.seed, r.spec.frames, 0),
            "{:?}",
            r.id
        );
        assert!(matches!(r.events[0].1, Event::Started(_)));
    }
    // The same input gives the same run, step for step.
    let again = simulate(&SimConfig::default(), &reqs);
    assert_eq!(again.steps, out.steps);
}

#[test]
fn leading_silence_and_bootstrap_frames_are_trimmed_and_eos_ends_early() {
    let config = SimConfig {
        silent_frames: 2,
        trim: TrimConfig {
            drop_frames: 1,
            onset: Some(OnsetRule::default()),
        },
        eos_after: vec![(7, 9)],
        ..SimConfig::default()
    };
    let out = simulate(&config, &[request(0, 20, 7), request(0, 20, 8)]);
    let early = &out.requests[0];
    assert_eq!(early.usage().unwrap().end, EndReason::Eos);
    assert_eq!(early.usage().unwrap().frames, 9);
    // Frame 0 dropped, frame 1 silent, the tone from frame 2 on: the first loud window
    // (20 ms, 10 ms hop) is the one half over the tone, so audio starts 10 ms (240
    // samples) before frame 2.
    let with_lead_in = |seed, frames| {
        let mut a = vec![0.0f32; 240];
        a.extend(expected_audio(seed, frames, 2));
        a
    };
    assert!(early.audio() == with_lead_in(7, 9));
    assert!(out.requests[1].audio() == with_lead_in(8, 20));
    let usage = out.requests[1].usage().unwrap();
    assert!((usage.trimmed_seconds - 0.15).abs() < 1e-9, "{usage:?}");
    assert!(
        (usage.audio_seconds - (1.44 + 0.01)).abs() < 1e-9,
        "{usage:?}"
    );
}

#[test]
fn new_arrivals_get_first_audio_ahead_of_established_streams() {
    for established in [1u64, 8, 32] {
        // Long streams in steady state, then one newcomer at 5 s.
        let mut reqs: Vec<SimRequest> = (0..established)
            .map(|i| request(i * 20, 1_000, i))
            .collect();
        reqs.push(request(5_000, 50, 999));
        let out = simulate(&SimConfig::default(), &reqs);
        let newcomer = out.requests.last().unwrap();
        let (arrived, first) = (newcomer.spec.arrival, newcomer.first_audio_at().unwrap());
        // Between its arrival and its first audio, every call that started works for it
        // (others may ride along in its batch) or rescues a stream about to run dry.
        let between: Vec<_> = out
            .steps
            .iter()
            .filter(|s| s.started >= arrived && s.ended <= first)
            .collect();
        assert!(!between.is_empty());
        for s in &between {
            assert!(
                s.rows.contains(&newcomer.id) || s.reason == Reason::Urgent,
                "with {established} streams, {s:?} ran before the newcomer's first audio"
            );
        }
        // So its time to first audio is one call in flight plus its own three calls
        // (prefill, code predictor, codec), whatever the number of established streams.
        let ttfa = first - arrived;
        assert!(
            ttfa <= ms(1) + ms(4) + ms(1) + ms(1),
            "{established} streams: ttfa {ttfa:?}"
        );
        let stages: Vec<Stage> = between.iter().map(|s| s.stage).collect();
        assert_eq!(
            stages,
            vec![Stage::Prefill, Stage::CodePredictor, Stage::Codec]
        );
    }
}

#[test]
fn with_spare_capacity_no_stream_underruns() {
    for (name, costs, count) in [
        ("gpu-like", StageCosts::gpu_like(), 60),
        ("cpu-like", StageCosts::cpu_like(), 14),
    ] {
        // Arrivals every 150 ms, 1-12 s of audio each; at most `count` at once
        // keeps the load below capacity.
        let reqs: Vec<SimRequest> = (0..count)
            .map(|i| request(i * 150, 12 + (i as usize * 29) % 140, i))
            .collect();
        let config = SimConfig {
            costs,
            ..SimConfig::default()
        };
        let out = simulate(&config, &reqs);
        for r in &out.requests {
            let usage = r.usage().expect("done");
            assert_eq!(usage.frames, r.spec.frames);
            let playback = r.playback();
            assert_eq!(playback.underruns(), 0, "{name}: {:?} ran dry", r.id);
            assert_eq!(usage.underruns, 0, "{name}: engine estimate");
            assert!(r.audio() == expected_audio(r.spec.seed, r.spec.frames, 0));
        }
    }
}

#[test]
fn overload_shows_up_as_underruns_not_as_lost_audio() {
    // Twice the streams a cpu-like backend can keep up with: gaps, but every sample.
    let reqs: Vec<SimRequest> = (0..40).map(|i| request(i * 10, 100, i)).collect();
    let out = simulate(
        &SimConfig {
            costs: StageCosts::cpu_like(),
            ..SimConfig::default()
        },
        &reqs,
    );
    let gaps: u32 = out.requests.iter().map(|r| r.playback().underruns()).sum();
    assert!(gaps > 0);
    for r in &out.requests {
        assert!(r.audio() == expected_audio(r.spec.seed, 100, 0));
        assert_eq!(r.usage().unwrap().underruns, r.playback().underruns());
    }
}

#[test]
fn cancelled_requests_free_their_slot_within_one_step() {
    let config = SimConfig {
        max_slots: 2,
        ..SimConfig::default()
    };
    let mut cancelled = request(0, 1_000, 1);
    cancelled.cancel_at = Some(ms(2_000));
    let reqs = vec![cancelled, request(0, 1_000, 2), request(1_000, 30, 3)];
    let out = simulate(&config, &reqs);
    let (a, waiting) = (&out.requests[0], &out.requests[2]);

    // The slot is freed before any call that starts after the cancellation.
    let t_cancel = ms(2_000);
    let next_start = out
        .steps
        .iter()
        .map(|s| s.started)
        .find(|&t| t >= t_cancel)
        .unwrap();
    let in_flight_end = out
        .steps
        .iter()
        .find(|s| s.started < t_cancel && s.ended >= t_cancel)
        .map_or(t_cancel, |s| s.ended);
    let freed = out.frees.iter().find(|(t, _)| *t >= t_cancel).unwrap().0;
    assert_eq!(freed, in_flight_end);
    assert!(freed <= next_start);
    assert!(out
        .steps
        .iter()
        .filter(|s| s.started >= t_cancel)
        .all(|s| !s.rows.contains(&a.id)));
    assert!(a.usage().is_none() && !a.failed());

    // The request waiting for a slot gets it at once.
    let started = waiting
        .events
        .iter()
        .find(|(_, e)| matches!(e, Event::Started(_)))
        .unwrap()
        .0;
    assert_eq!(started, freed);
    assert_eq!(waiting.usage().unwrap().frames, 30);
    assert_eq!(waiting.usage().unwrap().queue_wait, freed - ms(1_000));
}

#[test]
fn a_failing_request_does_not_stop_the_others() {
    let reqs: Vec<SimRequest> = (0..6).map(|i| request(i * 5, 40, i)).collect();
    for stage in Stage::ALL {
        let at_frame = if stage == Stage::Prefill { 0 } else { 10 };
        let config = SimConfig {
            faults: vec![Fault {
                seed: 2,
                stage,
                at_frame,
                attributed: true,
            }],
            ..SimConfig::default()
        };
        let out = simulate(&config, &reqs);
        for r in &out.requests {
            if r.spec.seed == 2 {
                assert!(r.failed(), "{stage:?}: the faulty request failed");
                assert!(r.usage().is_none());
            } else {
                assert_eq!(
                    r.usage().map(|u| u.frames),
                    Some(40),
                    "{stage:?}: {:?}",
                    r.id
                );
                assert!(r.audio() == expected_audio(r.spec.seed, 40, 0), "{stage:?}");
            }
        }
        // Its slot was freed, and requests admitted later still run.
        assert!(!out.frees.is_empty());
    }

    // A device error names no request: the rows of that call fail, the engine goes on.
    let mut reqs = reqs;
    reqs.push(request(2_000, 20, 77));
    let config = SimConfig {
        faults: vec![Fault {
            seed: 2,
            stage: Stage::TalkerStep,
            at_frame: 10,
            attributed: false,
        }],
        ..SimConfig::default()
    };
    let out = simulate(&config, &reqs);
    let failed_step = out.steps.iter().find(|s| !s.failed.is_empty()).unwrap();
    assert_eq!(failed_step.failed, failed_step.rows);
    for r in &out.requests {
        assert_eq!(r.failed(), failed_step.rows.contains(&r.id));
    }
    assert_eq!(
        out.requests.last().unwrap().usage().map(|u| u.frames),
        Some(20)
    );
}

#[test]
fn a_small_codec_budget_decodes_in_parts_and_loses_nothing() {
    // A slow codec lets streams run ahead; each call may decode at most 5 frames.
    let mut config = SimConfig {
        costs: StageCosts {
            codec_per_frame: ms(2),
            ..StageCosts::gpu_like()
        },
        ..SimConfig::default()
    };
    config.profile.policy.codec_max_frames = 5;
    let reqs: Vec<SimRequest> = (0..6).map(|i| request(i * 5, 40, 300 + i)).collect();
    let out = simulate(&config, &reqs);
    assert_all_audio_in_order(&out, 40);
    // Simulated cost: 0.5 ms + 2 ms per frame, so a call of at most 5 frames ends
    // within 10.5 ms of its start.
    let codec: Vec<_> = out
        .steps
        .iter()
        .filter(|s| s.stage == Stage::Codec)
        .collect();
    assert!(codec
        .iter()
        .all(|s| s.ended - s.started <= ms(10) + Duration::from_micros(500)));
    // Without the budget, the same load makes longer calls.
    let mut open = config.clone();
    open.profile.policy.codec_max_frames = usize::MAX;
    let wide = simulate(&open, &reqs);
    assert!(wide
        .steps
        .iter()
        .any(|s| s.stage == Stage::Codec && s.ended - s.started > ms(11)));
}

#[test]
fn long_codec_top_ups_under_deep_load_lose_nothing() {
    // 64 streams of 100 frames arriving 10 ms apart on a codec with a fixed cost per call:
    // many chunks ready at once, of different lengths.
    let mut config = SimConfig {
        costs: StageCosts {
            codec_base: ms(1),
            codec_per_frame: Duration::from_micros(50),
            ..StageCosts::gpu_like()
        },
        ..SimConfig::default()
    };
    config.profile.policy.codec_long_top_ups_from = 8;
    let reqs: Vec<SimRequest> = (0..64).map(|i| request(i * 10, 100, 500 + i)).collect();
    let out = simulate(&config, &reqs);
    assert_all_audio_in_order(&out, 100);
    // Here the same work takes fewer codec calls than without long top-ups.
    let calls = |steps: &[tts_engine::core::StepRecord]| {
        steps.iter().filter(|s| s.stage == Stage::Codec).count()
    };
    let mut never = config.clone();
    never.profile.policy.codec_long_top_ups_from = usize::MAX;
    let short = simulate(&never, &reqs);
    assert!(
        calls(&out.steps) < calls(&short.steps),
        "codec calls with long top-ups {} against {} without",
        calls(&out.steps),
        calls(&short.steps)
    );
}

/// A backend that merges prompts into talker steps (each prompt adds 0.1 ms to the step),
/// with `Policy::prefill_with_step` on.
fn merging(faults: Vec<Fault>) -> SimConfig {
    let mut config = SimConfig {
        costs: StageCosts {
            merged_prefill_per_prompt: Some(Duration::from_micros(100)),
            ..StageCosts::gpu_like()
        },
        faults,
        ..SimConfig::default()
    };
    config.profile.policy.prefill_with_step = true;
    config
}

fn is_merged(s: &tts_engine::core::StepRecord) -> bool {
    matches!(
        (s.stage, s.partner_stage),
        (Stage::Prefill, Some(Stage::TalkerStep)) | (Stage::TalkerStep, Some(Stage::Prefill))
    )
}

#[test]
fn prefills_merged_into_talker_steps_lose_nothing() {
    // Streams arriving 5 ms apart, so prompts come while others are mid-reply.
    let reqs: Vec<SimRequest> = (0..32).map(|i| request(i * 5, 60, 700 + i)).collect();
    let config = merging(Vec::new());
    let out = simulate(&config, &reqs);
    assert_all_audio_in_order(&out, 60);
    assert!(
        out.steps.iter().any(is_merged),
        "some prompts rode a talker step"
    );
    // Off by policy, or on a backend that cannot merge: never merged, same audio.
    let mut apart = config.clone();
    apart.profile.policy.prefill_with_step = false;
    let separate = simulate(&apart, &reqs);
    assert_all_audio_in_order(&separate, 60);
    assert!(!separate.steps.iter().any(is_merged));
    let mut plain = config;
    plain.costs.merged_prefill_per_prompt = None;
    assert!(!simulate(&plain, &reqs).steps.iter().any(is_merged));
}

#[test]
fn merged_calls_are_metered_once_as_shared() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tts_engine::metrics::{SHARED_CALL_DURATION, STAGE_DURATION};
    let reqs: Vec<SimRequest> = (0..32).map(|i| request(i * 5, 60, 700 + i)).collect();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let out = metrics::with_local_recorder(&recorder, || simulate(&merging(Vec::new()), &reqs));
    let merged: Vec<Duration> = out
        .steps
        .iter()
        .filter(|s| is_merged(s))
        .map(|s| s.ended - s.started)
        .collect();
    assert!(!merged.is_empty(), "some prompts rode a talker step");
    let mut shared = Vec::new();
    let mut prefill_calls = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let DebugValue::Histogram(values) = value else {
            continue;
        };
        let key = key.key();
        let label = |k: &str| {
            key.labels()
                .find(|l| l.key() == k)
                .map(|l| l.value().to_string())
        };
        if key.name() == SHARED_CALL_DURATION {
            assert_eq!(label("stages").as_deref(), Some("prefill+talker_step"));
            shared.extend(values.iter().map(|v| v.into_inner()));
        } else if key.name() == STAGE_DURATION && label("stage").as_deref() == Some("prefill") {
            prefill_calls += values.len();
        }
    }
    assert_eq!(
        shared.len(),
        merged.len(),
        "one shared sample per merged call"
    );
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    let merged_s: Vec<f64> = merged.iter().map(Duration::as_secs_f64).collect();
    assert!((sum(&shared) - sum(&merged_s)).abs() < 1e-9);
    assert!(
        prefill_calls >= shared.len(),
        "merged calls count as prefill calls too"
    );
}

#[test]
fn a_failed_prompt_in_a_merged_call_fails_only_its_request() {
    // Requests 5 ms apart: the later ones arrive while 16 or more others are mid-reply.
    let reqs: Vec<SimRequest> = (0..40).map(|i| request(i * 5, 40, 800 + i)).collect();
    let out = simulate(
        &merging(vec![Fault {
            seed: 829,
            stage: Stage::Prefill,
            at_frame: 0,
            attributed: true,
        }]),
        &reqs,
    );
    let failed = out
        .steps
        .iter()
        .find(|s| !s.failed.is_empty())
        .expect("the fault fired");
    assert!(is_merged(failed), "the prompt failed inside a merged call");
    for r in &out.requests {
        if r.spec.seed == 829 {
            assert!(r.failed());
        } else {
            assert_eq!(r.usage().map(|u| u.frames), Some(40), "{:?}", r.id);
            assert!(
                r.audio() == expected_audio(r.spec.seed, 40, 0),
                "{:?}",
                r.id
            );
        }
    }
}
