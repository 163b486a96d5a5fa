//! The scheduler: a pure function from what each request is ready for, the clock and the
//! policy to the next plan (one stage and its rows). No I/O, no backend, no clock reads:
//! the engine loop and the simulator call it the same way.
//!
//! The policy (DESIGN.md, "Scheduling rules"), first match wins:
//! 1. **Urgent**: streams whose client buffer runs dry within `reserve`, earliest
//!    deadline first: the most urgent one with frames not yet decoded has them decoded
//!    now, even a partial chunk (with the other urgent rows that have frames); with
//!    [`Policy::urgent_model_stages`] one with nothing to decode yet picks the model stage
//!    its next frame needs (without, such streams wait for rule 3).
//! 2. **First audio**: requests that have not sent audio yet, in the order codec, prefill,
//!    code predictor, talker step (the stage nearest to audio first), oldest first.
//! 3. **Lead**: streams whose buffer runs dry within `lead`, earliest deadline first; the
//!    most urgent one picks the stage.
//! 4. **Round robin**: the request served longest ago picks the stage; every request ready
//!    for it joins the batch.
//!
//! In 1-3 the chosen rows may be topped up with other rows ready for the same stage, as
//! far as [`Fill`] allows (codec top-ups only with chunks no longer than the longest
//! chosen one); batches never exceed the largest bucket, and a codec call never decodes
//! more than [`Policy::codec_max_frames`] frames (rows past that wait for the next call).

use std::time::Duration;

use crate::profile::{Fill, Policy};
use crate::request::RequestId;

/// A schedulable stage of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    Prefill,
    CodePredictor,
    TalkerStep,
    Codec,
}

impl Stage {
    pub const ALL: [Stage; 4] = [
        Stage::Prefill,
        Stage::CodePredictor,
        Stage::TalkerStep,
        Stage::Codec,
    ];

    /// Lower-case name (metrics labels, logs).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Prefill => "prefill",
            Stage::CodePredictor => "code_predictor",
            Stage::TalkerStep => "talker_step",
            Stage::Codec => "codec",
        }
    }
}

/// What a request could run next. Several stages can be ready at once (a frame can be
/// decoded while the talker computes the next one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ready {
    pub prefill: bool,
    pub code_predictor: bool,
    pub talker_step: bool,
    /// Frames generated but not yet decoded.
    pub codec_frames: usize,
    /// Whether those frames make the request's next chunk (or its last).
    pub codec_chunk: bool,
}

impl Ready {
    /// Whether the request would take part in a call of `stage` (codec: a full chunk).
    pub fn has(&self, stage: Stage) -> bool {
        match stage {
            Stage::Prefill => self.prefill,
            Stage::CodePredictor => self.code_predictor,
            Stage::TalkerStep => self.talker_step,
            Stage::Codec => self.codec_chunk,
        }
    }

    /// The stage that brings this request's audio nearest, among those it is ready for.
    pub fn preferred(&self) -> Option<Stage> {
        [
            Stage::Codec,
            Stage::Prefill,
            Stage::CodePredictor,
            Stage::TalkerStep,
        ]
        .into_iter()
        .find(|&s| self.has(s))
    }
}

/// The scheduler's view of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestView {
    pub id: RequestId,
    /// Admission order (smaller = earlier).
    pub order: u64,
    pub ready: Ready,
    /// Whether the request has sent audio to its client.
    pub first_audio: bool,
    /// When the client's buffer runs dry under immediate playback, while more audio is
    /// still to come.
    pub deadline: Option<Duration>,
    /// Engine step that last ran this request (0 = never).
    pub last_served: u64,
}

/// Why a plan was chosen (logs, metrics, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Urgent,
    FirstAudio,
    Lead,
    RoundRobin,
}

/// One backend call: a stage and its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub stage: Stage,
    pub rows: Vec<RequestId>,
    pub reason: Reason,
}

/// The next plan, or `None` when no request can run anything.
pub fn plan(views: &[RequestView], now: Duration, policy: &Policy) -> Option<Plan> {
    // 1. Streams about to run dry, earliest deadline first: codec work (partial chunks
    // count, a short chunk beats a gap), or with `urgent_model_stages` the model stage
    // the next frame of one with nothing to decode yet needs.
    let mut urgent: Vec<&RequestView> = views
        .iter()
        .filter(|v| v.first_audio && v.deadline.is_some_and(|d| d <= now + policy.reserve))
        .filter(|v| {
            v.ready.codec_frames > 0
                || (policy.urgent_model_stages && v.ready.preferred().is_some())
        })
        .collect();
    urgent.sort_by_key(|v| (v.deadline, v.order));
    // (a stream passed the filter with frames to decode or with a stage it is ready for)
    let first_stage = urgent.first().and_then(|v| match v.ready.codec_frames {
        0 => v.ready.preferred(),
        _ => Some(Stage::Codec),
    });
    if let Some(stage) = first_stage {
        let rows = if stage == Stage::Codec {
            urgent
                .into_iter()
                .filter(|v| v.ready.codec_frames > 0)
                .collect()
        } else {
            urgent.into_iter().filter(|v| v.ready.has(stage)).collect()
        };
        return Some(finish(stage, rows, views, policy, Reason::Urgent));
    }

    // 2. Everything that leads to a request's first audio, nearest stage first.
    let mut fresh: Vec<&RequestView> = views.iter().filter(|v| !v.first_audio).collect();
    fresh.sort_by_key(|v| v.order);
    for stage in [
        Stage::Codec,
        Stage::Prefill,
        Stage::CodePredictor,
        Stage::TalkerStep,
    ] {
        let rows: Vec<&RequestView> = fresh
            .iter()
            .copied()
            .filter(|v| v.ready.has(stage))
            .collect();
        if !rows.is_empty() {
            return Some(finish(stage, rows, views, policy, Reason::FirstAudio));
        }
    }

    // 3. Streams getting short, earliest deadline first.
    let mut soon: Vec<&RequestView> = views
        .iter()
        .filter(|v| v.ready.preferred().is_some())
        .filter(|v| v.deadline.is_some_and(|d| d <= now + policy.lead))
        .collect();
    soon.sort_by_key(|v| (v.deadline, v.order));
    if let Some(stage) = soon.first().and_then(|v| v.ready.preferred()) {
        let rows = soon.into_iter().filter(|v| v.ready.has(stage)).collect();
        return Some(finish(stage, rows, views, policy, Reason::Lead));
    }

    // 4. Round robin: the request served longest ago picks the stage, everyone ready joins.
    let next = views
        .iter()
        .filter(|v| v.ready.preferred().is_some())
        .min_by_key(|v| (v.last_served, v.order))?;
    let stage = next.ready.preferred()?;
    let mut rows: Vec<&RequestView> = views.iter().filter(|v| v.ready.has(stage)).collect();
    rows.sort_by_key(|v| (v.last_served, v.order));
    rows.truncate(policy.stage_max_rows(stage));
    Some(Plan {
        stage,
        rows: within_frame_budget(stage, rows, policy),
        reason: Reason::RoundRobin,
    })
}

/// For a backend that runs the code predictor and the talker step side by side: the other
/// of the two stages for every request ready for it and not in `plan` (those without audio
/// yet first, then by deadline, then longest unserved), up to the stage's row limit. `None`
/// when `plan` is another stage or no request is ready.
pub fn partner(plan: &Plan, views: &[RequestView], policy: &Policy) -> Option<Plan> {
    let stage = match plan.stage {
        Stage::CodePredictor => Stage::TalkerStep,
        Stage::TalkerStep => Stage::CodePredictor,
        Stage::Prefill | Stage::Codec => return None,
    };
    others_ready(stage, plan, views, policy.stage_max_rows(stage))
}

/// For a backend that merges prompts into talker steps (`Policy::prefill_with_step`): the
/// other of prefill and talker step, chosen as [`partner`] chooses, once at least
/// `Policy::max_fill_from` requests are between model stages (under light load calls fill
/// to their bucket only, and pulling talker rows forward only splits the code predictor's
/// rows over more calls). After the merged call the new requests and the stepped ones all
/// want the code predictor, so one call of it serves both.
pub fn merge_partner(plan: &Plan, views: &[RequestView], policy: &Policy) -> Option<Plan> {
    let stage = match plan.stage {
        Stage::Prefill => Stage::TalkerStep,
        Stage::TalkerStep => Stage::Prefill,
        Stage::CodePredictor | Stage::Codec => return None,
    };
    let busy = views
        .iter()
        .filter(|v| v.ready.talker_step || v.ready.code_predictor)
        .count();
    if busy < policy.max_fill_from {
        return None;
    }
    // one pass holds both parts' rows: at most the largest call's
    let room = policy.max_rows().saturating_sub(plan.rows.len());
    others_ready(stage, plan, views, policy.stage_max_rows(stage).min(room))
}

/// A plan of `stage` for every request ready for it and not in `plan`, in `partner`'s
/// order, up to `max_rows`; `None` when there is none.
fn others_ready(stage: Stage, plan: &Plan, views: &[RequestView], max_rows: usize) -> Option<Plan> {
    let mut rows: Vec<&RequestView> = views
        .iter()
        .filter(|v| v.ready.has(stage) && !plan.rows.contains(&v.id))
        .collect();
    if rows.is_empty() || max_rows == 0 {
        return None;
    }
    rows.sort_by_key(|v| {
        (
            v.first_audio,
            v.deadline.is_none(),
            v.deadline,
            v.last_served,
            v.order,
        )
    });
    rows.truncate(max_rows);
    Some(Plan {
        stage,
        rows: rows.into_iter().map(|v| v.id).collect(),
        reason: plan.reason,
    })
}

/// The rows' ids, in order; for the codec, only as many rows as
/// [`Policy::codec_max_frames`] holds (each counted with at most that many frames, as the
/// engine decodes no more per call), and always the first.
fn within_frame_budget(stage: Stage, rows: Vec<&RequestView>, policy: &Policy) -> Vec<RequestId> {
    let cap = policy.codec_max_frames;
    let mut used = 0;
    rows.into_iter()
        .enumerate()
        .take_while(|(i, v)| {
            if stage != Stage::Codec {
                return true;
            }
            used += v.ready.codec_frames.min(cap);
            *i == 0 || used <= cap
        })
        .map(|(_, v)| v.id)
        .collect()
}

/// Caps the chosen rows at the stage's limit and tops them up as the fill rule allows,
/// with other rows ready for the stage (earliest deadline, then longest unserved).
fn finish<'a>(
    stage: Stage,
    mut chosen: Vec<&'a RequestView>,
    views: &'a [RequestView],
    policy: &Policy,
    reason: Reason,
) -> Plan {
    let max = policy.stage_max_rows(stage);
    chosen.truncate(max);
    let fill = if stage == Stage::Codec {
        policy.codec_fill
    } else {
        policy.fill
    };
    let ready = || views.iter().filter(|v| v.ready.has(stage)).count();
    let target = match fill {
        Fill::None => chosen.len(),
        Fill::Max if ready() >= policy.max_fill_from => max,
        Fill::Bucket | Fill::Max => policy.bucket_for(chosen.len()).min(max),
    };
    if chosen.len() < target {
        // Codec top-ups no longer than the longest chosen row (a call's time grows with
        // its frames), unless the codec is far behind (`Policy::codec_long_top_ups_from`):
        // then any chunk that still fits the call's frame budget.
        let far_behind = stage == Stage::Codec && ready() >= policy.codec_long_top_ups_from;
        let longest = chosen
            .iter()
            .map(|v| v.ready.codec_frames)
            .max()
            .unwrap_or(0);
        let mut extra: Vec<&'a RequestView> = views
            .iter()
            .filter(|v| v.ready.has(stage) && !chosen.iter().any(|c| c.id == v.id))
            .filter(|v| stage != Stage::Codec || far_behind || v.ready.codec_frames <= longest)
            .collect();
        extra.sort_by_key(|v| (v.deadline.is_none(), v.deadline, v.last_served, v.order));
        if far_behind {
            let cap = policy.codec_max_frames;
            let mut frames: usize = chosen.iter().map(|v| v.ready.codec_frames.min(cap)).sum();
            for v in extra {
                if chosen.len() >= target {
                    break;
                }
                let f = v.ready.codec_frames.min(cap);
                if frames + f <= cap {
                    frames += f;
                    chosen.push(v);
                }
            }
        } else {
            chosen.extend(extra.into_iter().take(target - chosen.len()));
        }
    }
    Plan {
        stage,
        rows: within_frame_budget(stage, chosen, policy),
        reason,
    }
}

#[cfg(test)]
mod tests;
