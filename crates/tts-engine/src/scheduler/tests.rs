//! The scheduler's rules, call by call: urgency order, buckets, merges, codec chunks.

use super::*;
use crate::profile::DEFAULT_BUCKETS;

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

/// A fixed policy for these tests (the profiles' tuning may move): 60 ms reserve,
/// 300 ms lead, bucket fill.
fn bucket_policy() -> Policy {
    Policy {
        reserve: ms(60),
        urgent_model_stages: true,
        lead: ms(300),
        buckets: DEFAULT_BUCKETS.to_vec(),
        prefill_max_rows: 16,
        fill: Fill::Bucket,
        codec_fill: Fill::Bucket,
        codec_max_frames: 1_000,
        max_fill_from: 0,
        codec_long_top_ups_from: usize::MAX,
        side_by_side: false,
        prefill_with_step: false,
    }
}

fn view(id: u64, ready: Ready, first_audio: bool, deadline: Option<u64>) -> RequestView {
    RequestView {
        id: RequestId(id),
        order: id,
        ready,
        first_audio,
        deadline: deadline.map(ms),
        last_served: 0,
    }
}

const CODES: Ready = Ready {
    prefill: false,
    code_predictor: true,
    talker_step: false,
    codec_frames: 0,
    codec_chunk: false,
};
const STEP: Ready = Ready {
    talker_step: true,
    code_predictor: false,
    ..CODES
};
const PREFILL: Ready = Ready {
    prefill: true,
    code_predictor: false,
    ..CODES
};

/// Ready for the codec only, with `frames` frames making a chunk.
fn chunk(frames: usize) -> Ready {
    Ready {
        codec_frames: frames,
        codec_chunk: true,
        ..Ready::default()
    }
}

fn ids(p: &Plan) -> Vec<u64> {
    p.rows.iter().map(|r| r.0).collect()
}

#[test]
fn a_partner_takes_the_other_model_stage_first_audio_first() {
    let views = [
        view(1, CODES, true, Some(100)),
        view(2, STEP, true, Some(50)),
        view(3, STEP, false, None),
        view(4, CODES, true, Some(10)),
        view(5, PREFILL, false, None),
    ];
    let plan = Plan {
        stage: Stage::CodePredictor,
        rows: vec![RequestId(1)],
        reason: Reason::RoundRobin,
    };
    let p = partner(&plan, &views, &bucket_policy()).unwrap();
    assert_eq!(p.stage, Stage::TalkerStep);
    // the request without audio first, then by deadline
    assert_eq!(ids(&p), vec![3, 2]);
    let back = partner(&p, &views, &bucket_policy()).unwrap();
    assert_eq!(back.stage, Stage::CodePredictor);
    assert_eq!(
        ids(&back),
        vec![4, 1],
        "rows of the plan itself are not taken"
    );
    for stage in [Stage::Prefill, Stage::Codec] {
        let other = Plan {
            stage,
            ..plan.clone()
        };
        assert_eq!(partner(&other, &views, &bucket_policy()), None);
    }
    let lone = [view(1, CODES, true, None)];
    assert_eq!(partner(&plan, &lone, &bucket_policy()), None);
}

#[test]
fn a_merge_partner_pairs_prefill_with_talker_step_under_load() {
    let views = [
        view(1, PREFILL, false, None),
        view(2, STEP, true, Some(50)),
        view(3, CODES, true, Some(40)),
        view(4, PREFILL, false, None),
        view(5, STEP, false, None),
    ];
    let prefill = Plan {
        stage: Stage::Prefill,
        rows: vec![RequestId(1)],
        reason: Reason::FirstAudio,
    };
    let p = merge_partner(&prefill, &views, &bucket_policy()).unwrap();
    assert_eq!(p.stage, Stage::TalkerStep);
    assert_eq!(ids(&p), vec![5, 2], "without audio first, then by deadline");
    assert_eq!(p.reason, Reason::FirstAudio);
    let back = merge_partner(&p, &views, &bucket_policy()).unwrap();
    assert_eq!(back.stage, Stage::Prefill);
    assert_eq!(ids(&back), vec![1, 4]);
    for stage in [Stage::CodePredictor, Stage::Codec] {
        let other = Plan {
            stage,
            ..prefill.clone()
        };
        assert_eq!(merge_partner(&other, &views, &bucket_policy()), None);
    }
    // Fewer requests between model stages (2, 3, 5) than max_fill_from: no merging.
    let light = Policy {
        max_fill_from: 4,
        ..bucket_policy()
    };
    assert_eq!(merge_partner(&prefill, &views, &light), None);
    let at = Policy {
        max_fill_from: 3,
        ..bucket_policy()
    };
    assert!(merge_partner(&prefill, &views, &at).is_some());
    // Both parts fit one call of the largest bucket: 1 prompt leaves room for 1 row.
    let small = Policy {
        buckets: vec![1, 2],
        ..bucket_policy()
    };
    assert_eq!(
        ids(&merge_partner(&prefill, &views, &small).unwrap()),
        vec![5]
    );
    let full = Plan {
        rows: vec![RequestId(1), RequestId(4)],
        ..prefill.clone()
    };
    assert_eq!(merge_partner(&full, &views, &small), None);
}

#[test]
fn nothing_ready_means_no_plan() {
    let policy = bucket_policy();
    assert_eq!(plan(&[], ms(0), &policy), None);
    let idle = view(1, Ready::default(), true, Some(500));
    assert_eq!(plan(&[idle], ms(0), &policy), None);
}

#[test]
fn urgent_codec_beats_a_new_request() {
    let policy = bucket_policy();
    let partial = Ready {
        codec_frames: 1,
        ..STEP
    };
    let views = [
        view(1, partial, true, Some(1_030)),
        view(2, PREFILL, false, None),
    ];
    let p = plan(&views, ms(1_000), &policy).unwrap();
    assert_eq!(
        (p.stage, p.reason, ids(&p)),
        (Stage::Codec, Reason::Urgent, vec![1])
    );
    // With time to spare the new request goes first.
    let p = plan(&views, ms(500), &policy).unwrap();
    assert_eq!((p.stage, ids(&p)), (Stage::Prefill, vec![2]));
}

#[test]
fn a_stream_about_to_run_dry_gets_its_model_stage_before_new_requests() {
    let policy = bucket_policy();
    // Stream 1 runs dry in 30 ms and has no frame to decode: its next frame needs a
    // talker step. Stream 3 is further out (200 ms). Request 2 is new.
    let views = [
        view(1, STEP, true, Some(1_030)),
        view(2, PREFILL, false, None),
        view(3, STEP, true, Some(1_200)),
    ];
    let p = plan(&views, ms(1_000), &policy).unwrap();
    assert_eq!(
        (p.stage, p.reason, ids(&p)),
        (Stage::TalkerStep, Reason::Urgent, vec![1]),
    );
    // The most urgent stream picks the stage; a second urgent row fills a bucket of
    // two with the next-earliest deadline ready for it.
    let mut more = views.to_vec();
    more.push(view(4, STEP, true, Some(1_020)));
    more.push(view(5, CODES, true, Some(1_010)));
    let p = plan(&more, ms(1_000), &policy).unwrap();
    assert_eq!((p.stage, ids(&p)), (Stage::CodePredictor, vec![5]));
    more.pop();
    let p = plan(&more, ms(1_000), &policy).unwrap();
    assert_eq!((p.stage, ids(&p)), (Stage::TalkerStep, vec![4, 1]));
    // Earliest deadline first across stages: a stream with frames to decode that runs
    // dry later waits for the step; one that runs dry sooner goes first.
    let partial = Ready {
        codec_frames: 1,
        ..Ready::default()
    };
    more.push(view(6, partial, true, Some(1_025)));
    let p = plan(&more, ms(1_000), &policy).unwrap();
    assert_eq!((p.stage, ids(&p)), (Stage::TalkerStep, vec![4, 1]));
    more.last_mut().unwrap().deadline = Some(ms(1_005));
    let p = plan(&more, ms(1_000), &policy).unwrap();
    assert_eq!(
        (p.stage, p.reason, ids(&p)),
        (Stage::Codec, Reason::Urgent, vec![6])
    );
    // With time to spare, or with the rule off, the new request goes first.
    let p = plan(&views, ms(900), &policy).unwrap();
    assert_eq!((p.stage, p.reason), (Stage::Prefill, Reason::FirstAudio));
    let codec_only = Policy {
        urgent_model_stages: false,
        ..policy
    };
    let p = plan(&views, ms(1_000), &codec_only).unwrap();
    assert_eq!((p.stage, p.reason), (Stage::Prefill, Reason::FirstAudio));
}

#[test]
fn first_audio_work_runs_nearest_stage_first_and_fills_the_bucket() {
    let policy = bucket_policy();
    let mut views = vec![
        view(1, CODES, true, Some(10_000)),
        view(2, CODES, true, Some(9_000)),
        view(3, CODES, false, None),
        view(4, CODES, false, None),
        view(5, CODES, false, None),
        view(6, PREFILL, false, None),
    ];
    let p = plan(&views, ms(0), &policy).unwrap();
    assert_eq!((p.stage, ids(&p)), (Stage::Prefill, vec![6]));
    views.pop();
    // Three new requests choose the code predictor; their bucket of 4 takes the
    // established stream with the earliest deadline too.
    let p = plan(&views, ms(0), &policy).unwrap();
    assert_eq!(
        (p.stage, p.reason),
        (Stage::CodePredictor, Reason::FirstAudio)
    );
    assert_eq!(ids(&p), vec![3, 4, 5, 2]);
    let no_fill = Policy {
        fill: Fill::None,
        ..policy
    };
    assert_eq!(ids(&plan(&views, ms(0), &no_fill).unwrap()), vec![3, 4, 5]);
}

#[test]
fn codec_top_ups_do_not_lengthen_the_call() {
    let policy = Policy {
        codec_fill: Fill::Max,
        ..bucket_policy()
    };
    let views = [
        view(1, chunk(2), false, None),
        view(2, chunk(12), true, Some(9_000)),
        view(3, chunk(2), true, Some(9_000)),
        view(4, chunk(1), true, Some(9_500)),
    ];
    let p = plan(&views, ms(0), &policy).unwrap();
    assert_eq!((p.stage, ids(&p)), (Stage::Codec, vec![1, 3, 4]));
    // With that many codec-ready rows the codec is far behind: longer chunks join.
    let behind = Policy {
        codec_long_top_ups_from: 4,
        ..policy.clone()
    };
    let p = plan(&views, ms(0), &behind).unwrap();
    assert_eq!((p.stage, ids(&p)), (Stage::Codec, vec![1, 2, 3, 4]));
    let not_yet = Policy {
        codec_long_top_ups_from: 5,
        ..policy
    };
    assert_eq!(ids(&plan(&views, ms(0), &not_yet).unwrap()), vec![1, 3, 4]);
    // Still within the call's frame budget.
    let tight = Policy {
        codec_max_frames: 10,
        ..behind
    };
    assert_eq!(ids(&plan(&views, ms(0), &tight).unwrap()), vec![1, 3, 4]);
}

#[test]
fn a_codec_call_stays_within_its_frame_budget() {
    let policy = Policy {
        codec_fill: Fill::Max,
        codec_max_frames: 20,
        ..bucket_policy()
    };
    // Round robin over streams that ran ahead: 12 + 8 frames fit, the next 12 wait.
    let views = [
        view(1, chunk(12), true, Some(9_000)),
        view(2, chunk(8), true, Some(9_000)),
        view(3, chunk(12), true, Some(9_000)),
    ];
    let p = plan(&views, ms(0), &policy).unwrap();
    assert_eq!(
        (p.stage, p.reason, ids(&p)),
        (Stage::Codec, Reason::RoundRobin, vec![1, 2])
    );
    // The first row always goes, even when it alone holds more than the budget (the
    // engine then decodes the budget's worth of its frames); then the call is full.
    let views = [
        view(1, chunk(30), true, Some(1_010)),
        view(2, chunk(1), true, Some(1_020)),
        view(3, chunk(2), true, Some(1_030)),
    ];
    let p = plan(&views, ms(1_000), &policy).unwrap();
    assert_eq!((p.reason, ids(&p)), (Reason::Urgent, vec![1]));
    let roomy = Policy {
        codec_max_frames: 32,
        ..policy
    };
    assert_eq!(ids(&plan(&views, ms(1_000), &roomy).unwrap()), vec![1, 2]);
}

#[test]
fn model_stages_and_the_codec_fill_separately() {
    let policy = Policy {
        fill: Fill::Max,
        codec_fill: Fill::None,
        ..bucket_policy()
    };
    let chunk = Ready {
        codec_frames: 2,
        codec_chunk: true,
        ..CODES
    };
    // One new request ready for the code predictor: the call takes every other row
    // ready for it, most urgent first, not just the bucket of one.
    let mut views: Vec<RequestView> = (2..=6)
        .map(|i| view(i, CODES, true, Some(10_000 - 1_000 * i)))
        .collect();
    views.push(view(1, CODES, false, None));
    let p = plan(&views, ms(0), &policy).unwrap();
    assert_eq!(
        (p.stage, p.reason),
        (Stage::CodePredictor, Reason::FirstAudio)
    );
    assert_eq!(ids(&p), vec![1, 6, 5, 4, 3, 2]);
    // A new request's first chunk goes alone under `codec_fill: None`.
    views.push(view(7, chunk, false, None));
    views[0].ready = chunk;
    let p = plan(&views, ms(0), &policy).unwrap();
    assert_eq!((p.stage, ids(&p)), (Stage::Codec, vec![7]));
    // Capped at the largest bucket.
    views.pop();
    let capped = Policy {
        buckets: vec![1, 2, 4],
        ..policy.clone()
    };
    assert_eq!(
        ids(&plan(&views, ms(0), &capped).unwrap()),
        vec![1, 6, 5, 4]
    );
    // With fewer rows ready than `max_fill_from`, only the bucket fills.
    let light = Policy {
        max_fill_from: 7,
        ..policy
    };
    assert_eq!(ids(&plan(&views, ms(0), &light).unwrap()), vec![1]);
}

#[test]
fn short_streams_go_before_round_robin() {
    let policy = bucket_policy();
    let mut a = view(1, CODES, true, Some(5_000));
    a.last_served = 1;
    let b = view(2, STEP, true, Some(1_200));
    let p = plan(&[a.clone(), b.clone()], ms(1_000), &policy).unwrap();
    assert_eq!((p.stage, p.reason), (Stage::TalkerStep, Reason::Lead));
    // Far from any deadline: the request served longest ago picks the stage.
    let mut b2 = b;
    b2.deadline = Some(ms(9_000));
    b2.last_served = 5;
    let p = plan(&[a, b2], ms(1_000), &policy).unwrap();
    assert_eq!(
        (p.stage, p.reason, ids(&p)),
        (Stage::CodePredictor, Reason::RoundRobin, vec![1])
    );
}

#[test]
fn round_robin_batches_everyone_ready_up_to_the_largest_bucket() {
    let mut policy = bucket_policy();
    policy.buckets = vec![1, 2, 4];
    let views: Vec<RequestView> = (1..=6)
        .map(|i| view(i, CODES, true, Some(60_000)))
        .collect();
    let p = plan(&views, ms(0), &policy).unwrap();
    assert_eq!(ids(&p), vec![1, 2, 3, 4]);
}

#[test]
fn prefill_batches_are_capped_separately() {
    let mut policy = bucket_policy();
    policy.prefill_max_rows = 2;
    let views: Vec<RequestView> = (1..=5).map(|i| view(i, PREFILL, false, None)).collect();
    let p = plan(&views, ms(0), &policy).unwrap();
    assert_eq!(ids(&p), vec![1, 2]);
}
