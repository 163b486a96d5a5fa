//! The engine on the CPU reference backend with the `demo` model: streamed audio is
//! sample-identical to `synthesize` (then the same trimming) for the same seed, whatever
//! the batch composition, chunking, text mode or text streaming; plus cancellation,
//! backpressure, admission and shutdown behaviour.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tts_engine::trim::trim_whole;
use tts_engine::{
    EngineConfig, EngineHandle, EnginePool, Event, Profile, RequestFailure, RequestHandle,
    SubmitError, SynthesisRequest, Usage,
};
use tts_model::generate::{random_model_frames, synthesize};
use tts_model::reference::CpuBackend;
use tts_model::{LoadOptions, Model, RequestError, SpeechRequest, TextMode};

fn demo() -> Arc<Model> {
    Arc::new(Model::load("demo", LoadOptions::default()).unwrap())
}

fn start(model: &Arc<Model>, slots: usize, config: EngineConfig) -> EngineHandle {
    let backend = Box::new(CpuBackend::new(model, slots).unwrap());
    let engine = EngineHandle::start(model.clone(), backend, config).unwrap();
    assert_eq!(engine.wait_ready(Duration::from_secs(60)), Ok(true));
    engine
}

fn speech(text: &str, voice: &str, mode: TextMode) -> SpeechRequest {
    SpeechRequest {
        text: text.into(),
        voice: Some(voice.into()),
        language: "english".into(),
        instructions: None,
        text_mode: mode,
        clone: None,
    }
}

fn request(
    model: &Model,
    speech: SpeechRequest,
    seed: u64,
    max_frames: Option<usize>,
) -> SynthesisRequest {
    SynthesisRequest {
        speech,
        sampling: model.default_sampling(seed),
        max_frames,
    }
}

/// `synthesize` on a fresh backend, then the engine's trimming.
fn reference(model: &Model, req: &SynthesisRequest, config: &EngineConfig) -> Vec<f32> {
    let prompt = model.prompt(&req.speech).unwrap();
    let max_frames = req.max_frames.unwrap_or_else(|| {
        let cap = config.frame_cap_for(model).limit(prompt.body_len);
        random_model_frames(&req.speech.text).min(cap)
    });
    let mut backend = CpuBackend::new(model, 1).unwrap();
    let out = synthesize(&mut backend, &prompt, &req.sampling, max_frames, true).unwrap();
    trim_whole(
        &out.pcm,
        config.trim_for(model),
        model.sample_rate(),
        model.samples_per_frame(),
    )
}

/// Reads a request to its end: the audio and how it ended.
fn collect(mut handle: RequestHandle) -> (Vec<f32>, Result<Usage, RequestFailure>) {
    let mut audio = Vec::new();
    let mut started = false;
    while let Some(event) = handle.blocking_recv() {
        match event {
            Event::Started(s) => {
                assert!(!started && audio.is_empty(), "Started comes first, once");
                assert_eq!(s.seed, handle.seed());
                started = true;
            }
            Event::Audio(a) => {
                assert!(!a.is_empty());
                audio.extend(a);
            }
            Event::Done(u) => return (audio, Ok(u)),
            Event::Failed(f) => return (audio, Err(f)),
        }
    }
    panic!("the channel closed without Done or Failed");
}

const TEXTS: &[(&str, &str, TextMode, u64, Option<usize>)] = &[
    (
        "Hello there, how are you today?",
        "ryan",
        TextMode::Prefill,
        1,
        None,
    ),
    ("Short.", "vivian", TextMode::Stream, 2, None),
    (
        "A somewhat longer sentence, to keep a stream busy for a while.",
        "serena",
        TextMode::Stream,
        3,
        None,
    ),
    ("Fixed length reply.", "eric", TextMode::Prefill, 4, Some(7)),
    (
        "Another voice, another seed.",
        "aiden",
        TextMode::Prefill,
        5,
        None,
    ),
    (
        "One more in streaming text mode, just to be sure.",
        "dylan",
        TextMode::Stream,
        6,
        Some(33),
    ),
];

/// Submits every `TEXTS` request, staggered so they join batches at different points,
/// and checks each stream against `synthesize` (then the same trimming) and its usage.
fn every_text_equals_synthesize(
    engine: &EngineHandle,
    model: &Arc<Model>,
    config: &EngineConfig,
    name: &str,
) {
    let mut readers = Vec::new();
    for (i, &(text, voice, mode, seed, max)) in TEXTS.iter().enumerate() {
        let req = request(model, speech(text, voice, mode), seed, max);
        let want = reference(model, &req, config);
        let handle = engine.submit(req).unwrap();
        readers.push(thread::spawn(move || (i, want, collect(handle))));
        thread::sleep(Duration::from_millis(3 * i as u64));
    }
    for r in readers {
        let (i, want, (got, end)) = r.join().unwrap();
        let usage = end.unwrap();
        assert!(!want.is_empty(), "{name}: reference {i} has audio");
        assert_eq!(got.len(), want.len(), "{name}: request {i} length");
        assert!(got == want, "{name}: request {i} differs from synthesize");
        assert!((usage.audio_seconds - want.len() as f64 / 24_000.0).abs() < 1e-9);
        if let Some(n) = TEXTS[i].4 {
            assert_eq!(usage.frames, n);
        }
    }
}

#[test]
fn streamed_audio_equals_synthesize_whatever_the_batch_composition() {
    let model = demo();
    let trimmed_off = EngineConfig {
        onset_trim: None,
        drop_leading_frames: Some(0),
        ..EngineConfig::default()
    };
    let configs = [
        ("balanced, 3 slots", EngineConfig::default(), 3),
        (
            "latency, 8 slots",
            EngineConfig {
                profile: Profile::latency(),
                ..EngineConfig::default()
            },
            8,
        ),
        (
            "throughput, 8 slots",
            EngineConfig {
                profile: Profile::throughput(),
                ..EngineConfig::default()
            },
            8,
        ),
        ("no trimming, 2 slots", trimmed_off, 2),
    ];
    for (name, config, slots) in configs {
        let engine = start(&model, slots, config.clone());
        every_text_equals_synthesize(&engine, &model, &config, name);
        engine.shutdown(Duration::from_secs(5));
        engine.join();
    }
}

/// The CPU backend, claiming to run the code predictor and the talker step side by side:
/// the engine then pairs them; counts the calls that had both parts.
struct Paired {
    inner: CpuBackend,
    pairs: Arc<std::sync::atomic::AtomicUsize>,
}

impl tts_model::Backend for Paired {
    fn info(&self) -> &tts_model::BackendInfo {
        self.inner.info()
    }
    fn alloc_slot(
        &mut self,
        p: &tts_model::SamplingParams,
    ) -> Result<tts_model::SlotId, tts_model::BackendError> {
        self.inner.alloc_slot(p)
    }
    fn free_slot(&mut self, slot: tts_model::SlotId) {
        self.inner.free_slot(slot)
    }
    fn prefill(
        &mut self,
        rows: &[tts_model::PrefillRow<'_>],
    ) -> Result<Vec<u32>, tts_model::BackendError> {
        self.inner.prefill(rows)
    }
    fn predict_codes(
        &mut self,
        slots: &[tts_model::SlotId],
    ) -> Result<Vec<tts_model::Frame>, tts_model::BackendError> {
        self.inner.predict_codes(slots)
    }
    fn talker_step(
        &mut self,
        rows: &[tts_model::StepRow],
    ) -> Result<Vec<u32>, tts_model::BackendError> {
        self.inner.talker_step(rows)
    }
    fn codec_decode(
        &mut self,
        rows: &[tts_model::CodecRow<'_>],
    ) -> Result<Vec<Vec<f32>>, tts_model::BackendError> {
        self.inner.codec_decode(rows)
    }
    fn runs_side_by_side(&self) -> bool {
        true
    }
    #[allow(clippy::type_complexity)]
    fn predict_and_step(
        &mut self,
        cp: &[tts_model::SlotId],
        step: &[tts_model::StepRow],
    ) -> (
        Result<Vec<tts_model::Frame>, tts_model::BackendError>,
        Result<Vec<u32>, tts_model::BackendError>,
    ) {
        assert!(
            step.iter().all(|r| !cp.contains(&r.slot)),
            "a slot in both parts"
        );
        if !cp.is_empty() && !step.is_empty() {
            self.pairs
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        (self.inner.predict_codes(cp), self.inner.talker_step(step))
    }
}

#[test]
fn side_by_side_stages_change_nothing_but_the_schedule() {
    let model = demo();
    let mut config = EngineConfig::default();
    config.profile.policy.side_by_side = true;
    let pairs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let backend = Box::new(Paired {
        inner: CpuBackend::new(&model, 4).unwrap(),
        pairs: pairs.clone(),
    });
    let engine = EngineHandle::start(model.clone(), backend, config.clone()).unwrap();
    assert_eq!(engine.wait_ready(Duration::from_secs(60)), Ok(true));
    every_text_equals_synthesize(&engine, &model, &config, "side by side");
    engine.shutdown(Duration::from_secs(5));
    engine.join();
    // requests in different phases met: some calls ran both stages
    assert!(pairs.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

/// A pool of two engines goes on serving when one has stopped, refuses when both have,
/// and adds up their slots and queues.
#[test]
fn a_pool_serves_from_the_engines_still_running() {
    let model = demo();
    let config = EngineConfig {
        queue_capacity: 3,
        ..EngineConfig::default()
    };
    let engines = vec![
        start(&model, 1, config.clone()),
        start(&model, 2, config.clone()),
    ];
    let pool = EnginePool::new(engines).unwrap();
    assert_eq!(pool.info().max_active, 3);
    assert_eq!(pool.info().queue_capacity, 6);
    assert!(pool.is_ready());
    let first = &pool.engines()[0];
    first.shutdown(Duration::ZERO);
    first.join();
    assert!(pool.is_ready() && !pool.is_stopped());
    let (text, voice, mode, seed, max) = TEXTS[0];
    let req = request(&model, speech(text, voice, mode), seed, max);
    let want = reference(&model, &req, &config);
    let (got, end) = collect(pool.submit(req.clone()).unwrap());
    end.unwrap();
    assert!(got == want, "the request differs from synthesize");
    let second = &pool.engines()[1];
    second.shutdown(Duration::ZERO);
    second.join();
    assert!(!pool.is_ready() && pool.is_stopped());
    assert!(matches!(pool.submit(req), Err(SubmitError::ShuttingDown)));
}

#[test]
fn streamed_text_input_equals_synthesize_of_the_whole_text() {
    let model = demo();
    let config = EngineConfig::default();
    let engine = start(&model, 4, config.clone());
    let text = "Streaming text arrives in pieces, like tokens from a language model, and the talker waits for each.";
    let whole = request(&model, speech(text, "ryan", TextMode::Stream), 11, None);
    let want = reference(&model, &whole, &config);

    // A companion request with all its text, sharing the batches.
    let other = request(
        &model,
        speech(
            "Meanwhile, someone else speaks.",
            "vivian",
            TextMode::Prefill,
        ),
        12,
        None,
    );
    let other_want = reference(&model, &other, &config);
    let other_reader = {
        let handle = engine.submit(other).unwrap();
        thread::spawn(move || collect(handle))
    };

    // First piece with the submission (cut mid-word), the rest in uneven pieces, slowly
    // enough that the talker has to wait for text.
    let mut first = whole.clone();
    first.speech.text = text[..13].to_string();
    let (handle, mut sender) = engine.submit_streaming_text(first).unwrap();
    let reader = thread::spawn(move || collect(handle));
    let mut rest = &text[13..];
    let mut n = 1;
    while !rest.is_empty() {
        let cut = rest
            .char_indices()
            .map(|(i, _)| i)
            .nth(n)
            .unwrap_or(rest.len());
        sender.push(&rest[..cut]).unwrap();
        rest = &rest[cut..];
        n = n % 7 + 2;
        thread::sleep(Duration::from_millis(15));
    }
    sender.finish().unwrap();

    let (got, end) = reader.join().unwrap();
    let usage = end.unwrap();
    assert!(
        got == want,
        "streamed text differs from synthesize of the whole text"
    );
    assert_eq!(usage.frames, random_model_frames(text));
    let (got, end) = other_reader.join().unwrap();
    assert!(end.is_ok() && got == other_want);
}

#[test]
fn streamed_text_that_ends_empty_fails_the_request() {
    let model = demo();
    let engine = start(&model, 2, EngineConfig::default());
    let mut req = request(&model, speech("", "ryan", TextMode::Stream), 1, None);
    req.speech.text = "   ".into();
    let (handle, sender) = engine.submit_streaming_text(req).unwrap();
    drop(sender); // ends the text
    let (audio, end) = collect(handle);
    assert!(audio.is_empty());
    assert_eq!(end, Err(RequestFailure::EmptyText));
}

#[test]
fn a_slow_reader_gets_every_sample_and_does_not_hold_up_others() {
    let model = demo();
    let config = EngineConfig {
        audio_buffer_chunks: 3,
        profile: Profile::latency(),
        ..EngineConfig::default()
    };
    let engine = start(&model, 4, config.clone());
    let slow_req = request(
        &model,
        speech("A slow client reads this reply.", "ryan", TextMode::Prefill),
        21,
        Some(60),
    );
    let fast_req = request(
        &model,
        speech("A fast client reads this one.", "serena", TextMode::Prefill),
        22,
        Some(60),
    );
    let (slow_want, fast_want) = (
        reference(&model, &slow_req, &config),
        reference(&model, &fast_req, &config),
    );
    let mut slow = engine.submit(slow_req).unwrap();
    let fast = engine.submit(fast_req).unwrap();
    let fast_reader = thread::spawn(move || collect(fast));
    // The fast client reads to its end before the slow one reads anything: a full
    // channel pauses only its own request (were the engine blocked, this would hang).
    let (got, end) = fast_reader.join().unwrap();
    assert!(end.is_ok() && got == fast_want);
    let mut audio = Vec::new();
    loop {
        thread::sleep(Duration::from_millis(5));
        match slow.blocking_recv() {
            Some(Event::Audio(a)) => audio.extend(a),
            Some(Event::Done(_)) => break,
            Some(Event::Started(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(audio == slow_want);
}

#[test]
fn dropping_a_handle_cancels_the_request_and_frees_its_slot() {
    let model = demo();
    let engine = start(&model, 1, EngineConfig::default());
    let long = request(
        &model,
        speech(
            "This reply would go on for a very long time.",
            "ryan",
            TextMode::Prefill,
        ),
        1,
        Some(20_000),
    );
    let mut handle = engine.submit(long).unwrap();
    // Wait until it streams, then walk away.
    while !matches!(handle.blocking_recv(), Some(Event::Audio(_))) {}
    drop(handle);
    // With one slot, the next request can only run once the first one's slot is free.
    let next = request(
        &model,
        speech("Next, please.", "vivian", TextMode::Prefill),
        2,
        Some(5),
    );
    let (audio, end) = collect(engine.submit(next).unwrap());
    assert_eq!(end.unwrap().frames, 5);
    assert!(!audio.is_empty());

    // An explicit cancel ends the stream without Done.
    let long = request(
        &model,
        speech("Cancelled explicitly.", "ryan", TextMode::Prefill),
        3,
        Some(20_000),
    );
    let mut handle = engine.submit(long).unwrap();
    while !matches!(handle.blocking_recv(), Some(Event::Audio(_))) {}
    handle.canceller().cancel();
    while let Some(event) = handle.blocking_recv() {
        assert!(
            matches!(event, Event::Audio(_)),
            "no Done after cancel: {event:?}"
        );
    }
}

#[test]
fn a_full_queue_is_refused_at_once_and_shutdown_fails_what_is_left() {
    let model = demo();
    let config = EngineConfig {
        queue_capacity: 1,
        max_active: Some(1),
        ..EngineConfig::default()
    };
    let engine = start(&model, 2, config);
    let long = |seed| {
        request(
            &model,
            speech(
                "Long enough to hold the only slot.",
                "ryan",
                TextMode::Prefill,
            ),
            seed,
            Some(20_000),
        )
    };
    let mut running = engine.submit(long(1)).unwrap();
    assert!(matches!(running.blocking_recv(), Some(Event::Started(_))));
    let queued = engine.submit(long(2)).unwrap();
    match engine.submit(long(3)) {
        Err(SubmitError::QueueFull { capacity: 1, .. }) => {}
        other => panic!("expected QueueFull, got {other:?}"),
    }
    assert_eq!(engine.load().queued, 1);

    engine.shutdown(Duration::ZERO);
    assert!(!engine.is_ready());
    assert!(matches!(
        engine.submit(long(4)),
        Err(SubmitError::ShuttingDown)
    ));
    engine.join();
    assert!(engine.is_stopped());
    let (_, end) = collect(queued);
    assert_eq!(end, Err(RequestFailure::ShuttingDown));
    let mut last = None;
    while let Some(e) = running.blocking_recv() {
        last = Some(e);
    }
    assert_eq!(last, Some(Event::Failed(RequestFailure::ShuttingDown)));
}

#[test]
fn graceful_shutdown_lets_requests_in_flight_finish() {
    let model = demo();
    let engine = start(&model, 2, EngineConfig::default());
    let handles: Vec<RequestHandle> = (0..3)
        .map(|i| {
            engine
                .submit(request(
                    &model,
                    speech("Finish me first.", "ryan", TextMode::Prefill),
                    i,
                    Some(10),
                ))
                .unwrap()
        })
        .collect();
    engine.shutdown(Duration::from_secs(60));
    engine.join();
    for h in handles {
        assert_eq!(collect(h).1.unwrap().frames, 10);
    }
}

#[test]
fn submissions_are_validated_before_queueing() {
    let model = demo();
    let engine = start(
        &model,
        1,
        EngineConfig {
            max_text_chars: 50,
            ..EngineConfig::default()
        },
    );
    let invalid = |req| match engine.submit(req) {
        Err(SubmitError::Invalid(e)) => e,
        other => panic!("expected Invalid, got {other:?}"),
    };
    let e = invalid(request(
        &model,
        speech("Hi.", "nobody", TextMode::Prefill),
        1,
        None,
    ));
    assert!(matches!(e, RequestError::UnknownVoice { .. }));
    let e = invalid(request(
        &model,
        speech("  ", "ryan", TextMode::Prefill),
        1,
        None,
    ));
    assert_eq!(e, RequestError::EmptyText);
    let e = invalid(request(
        &model,
        speech(&"x".repeat(51), "ryan", TextMode::Prefill),
        1,
        None,
    ));
    assert_eq!(e, RequestError::TextTooLong { chars: 51, max: 50 });
    let mut bad = request(&model, speech("Hi.", "ryan", TextMode::Prefill), 1, None);
    bad.sampling.talker.temperature = 0.0;
    assert!(matches!(invalid(bad), RequestError::Sampling { .. }));
    match engine.submit_streaming_text(request(
        &model,
        speech("Hi", "ryan", TextMode::Prefill),
        1,
        None,
    )) {
        Err(SubmitError::Invalid(RequestError::Unsupported(_))) => {}
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // Streamed text is held to the same limit.
    let (_h, mut sender) = engine
        .submit_streaming_text(request(
            &model,
            speech("Hi", "ryan", TextMode::Stream),
            1,
            None,
        ))
        .unwrap();
    assert!(matches!(
        sender.push(&"y".repeat(60)),
        Err(tts_engine::TextError::TooLong { max: 50 })
    ));
}

/// A text too long for the backend's context is spoken in segments of whole sentences,
/// one after another in one stream: one `Started`, one `Done`, the audio sample for sample
/// each segment's `synthesize` with seed + k, trimmed as the engine trims it (every
/// segment's first frame dropped; the onset rule only on the first, though the demo's
/// noise has no leading silence to show it), the usage summed over the segments, every
/// slot given back.
#[test]
fn a_text_too_long_for_the_context_is_spoken_in_segments() {
    use tts_engine::segment::{max_tokens_per_generation, split};
    use tts_engine::trim::TrimConfig;
    let model = demo();
    let context = 96;
    let backend = Box::new(CpuBackend::new(&model, 2).unwrap().with_context(context));
    let config = EngineConfig::default();
    let engine = EngineHandle::start(model.clone(), backend, config.clone()).unwrap();
    assert_eq!(engine.wait_ready(Duration::from_secs(60)), Ok(true));
    let text = "The first sentence is here. A second one follows it! Does a third ask? \
                The fourth says more than the others do, at some length. Then a fifth. \
                And the sixth ends it.";
    let seed = 41;
    let req = request(&model, speech(text, "ryan", TextMode::Prefill), seed, None);

    // the segments the engine makes, and each one's reference audio
    let whole = model.prompt(&req.speech).unwrap();
    let cap = config.frame_cap_for(&model);
    let max_tokens = max_tokens_per_generation(whole.head_len + 16, context, cap.hard_max);
    let count = |s: &str| model.tokenizer.encode(s).unwrap().len();
    let segments = split(text, max_tokens, &count);
    assert!(segments.len() >= 3, "{segments:?}");
    let (mut want, mut frames, mut tokens) = (Vec::new(), 0, 0);
    for (k, seg) in segments.iter().enumerate() {
        let speech = speech(seg, "ryan", TextMode::Prefill);
        let prompt = model.prompt(&speech).unwrap();
        assert!(prompt.positions.len() < context, "{seg}");
        let room = context + 1 - prompt.positions.len();
        let n = random_model_frames(seg)
            .min(cap.limit(prompt.body_len))
            .min(room);
        let params = model.default_sampling(seed + k as u64);
        let mut backend = CpuBackend::new(&model, 1).unwrap();
        let out = synthesize(&mut backend, &prompt, &params, n, true).unwrap();
        let trim = match k {
            0 => config.trim_for(&model),
            _ => TrimConfig {
                onset: None,
                ..config.trim_for(&model)
            },
        };
        want.extend(trim_whole(
            &out.pcm,
            trim,
            model.sample_rate(),
            model.samples_per_frame(),
        ));
        frames += out.frames.len();
        tokens += prompt.body_len;
    }

    let (got, end) = collect(engine.submit(req).unwrap());
    let usage = end.unwrap();
    assert_eq!(got.len(), want.len(), "segments' audio length");
    assert!(
        got == want,
        "the stream differs from its segments' synthesize"
    );
    assert_eq!((usage.frames, usage.text_tokens), (frames, tokens));
    assert!((usage.audio_seconds - want.len() as f64 / 24_000.0).abs() < 1e-9);
    // every segment's slot was given back (the engine retires a request at its next step
    // after `Done` went out)
    for _ in 0..1000 {
        if engine.load().active == 0 {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(engine.load().active, 0, "a slot is still held");
}

/// `f`'s result, run on a thread of its own; a panic here if it takes over two minutes.
fn within_two_minutes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("{what}: no answer in two minutes"))
}

/// With `idle_spin` the idle engine polls its inbox and wake channel instead of sleeping
/// on them: what arrives then (a request, streamed text, the shutdown) is taken as
/// before. The spin has no end (too long for an `Instant`), so whatever the poll missed
/// would never be taken: each step is waited for with a limit.
#[test]
fn an_engine_polling_while_idle_takes_requests_text_and_shutdown() {
    let model = demo();
    let config = EngineConfig {
        idle_spin: Duration::MAX,
        ..EngineConfig::default()
    };
    let engine = start(&model, 2, config.clone());
    for seed in [21, 22] {
        // the second arrives while the engine polls after the first
        thread::sleep(Duration::from_millis(20));
        let req = request(
            &model,
            speech("Polled, not woken.", "ryan", TextMode::Prefill),
            seed,
            None,
        );
        let want = reference(&model, &req, &config);
        let handle = engine.submit(req).unwrap();
        let (got, end) = within_two_minutes("a request", move || collect(handle));
        assert!(end.is_ok() && got == want, "request {seed} differs");
    }
    let text = "Text that comes later.";
    let whole = request(&model, speech(text, "ryan", TextMode::Stream), 23, None);
    let want = reference(&model, &whole, &config);
    let mut first = whole.clone();
    first.speech.text = text[..5].to_string();
    let (handle, mut sender) = engine.submit_streaming_text(first).unwrap();
    let reader = thread::spawn(move || collect(handle));
    thread::sleep(Duration::from_millis(50));
    sender.push(&text[5..]).unwrap();
    sender.finish().unwrap();
    let (got, end) = within_two_minutes("streamed text", move || reader.join().unwrap());
    assert!(end.is_ok() && got == want, "streamed text differs");

    let stopper = engine.clone();
    within_two_minutes("the shutdown", move || {
        stopper.shutdown(Duration::from_secs(60));
        stopper.join();
    });
    assert!(engine.is_stopped());
}
