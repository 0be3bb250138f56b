//! A task's journal as clients read it: progress events and partial results.
use async_graphql::{Json, Object};
use chrono::{DateTime, Utc};
use entity::{research_task_partial_result as partial, research_task_progress_event as progress};
use serde_json::Value;
use uuid::Uuid;

use super::datetime;
use crate::graphql::enums::{GqlEventType, GqlStage};

/// One step of a task's progress. Sequences start at 1 and have no gaps.
pub struct ResearchTaskProgressEvent(pub progress::Model);

/// One step of a task's progress. Sequences start at 1 and have no gaps.
#[Object]
impl ResearchTaskProgressEvent {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    /// 1, 2, 3… per task; resume a subscription with the last one seen.
    async fn sequence(&self) -> i32 {
        self.0.sequence
    }
    async fn event_type(&self) -> GqlEventType {
        self.0.event_type.into()
    }
    /// The stage the task is in after the event.
    async fn stage(&self) -> GqlStage {
        self.0.stage.into()
    }
    /// What the event reports. The `STAGE_CHANGED` event that ends a round's analysis
    /// (to `RETRIEVING` for another round, or to `GENERATING`) carries `{ "round": n,
    /// "queries": [the sub-queries searched in that round], "new_evidence": k, "decision":
    /// d }`, where `d` says why the loop goes on or stops: `continue`, `answered`,
    /// `no_new_queries` (the decision repeated earlier sub-queries or proposed none),
    /// `no_new_evidence` (the round kept no passage earlier rounds had not),
    /// `max_rounds`, `budget` or `deadline` (another round and the answer after it would
    /// not fit), and `"notes_applied": k`, the steering notes the decision saw (0 when
    /// no decision was asked); with
    /// `continue` it also carries the next round's `plan`. A `PAUSED` event of a task
    /// that waits for a person carries `{ "reason": "plan_approval", "plan": [sub-queries]
    /// }` or `{ "reason": "clarification", "question": q }`, and the `RESUMED` event that
    /// ends the wait `{ "reason": r, "edited": bool, "answered": bool, "timed_out": bool }`
    /// (plus the `plan` round 1 searches, after a plan approval).
    async fn payload(&self) -> Json<Value> {
        Json(self.0.payload.clone())
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
}

/// One evidence bundle a task produced on its way to the answer.
pub struct ResearchTaskPartialResult(pub partial::Model);

/// One evidence bundle a task produced on its way to the answer.
#[Object]
impl ResearchTaskPartialResult {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    /// 1, 2, 3… per task; resume a subscription with the last one seen.
    async fn sequence(&self) -> i32 {
        self.0.sequence
    }
    /// `{ kind: "retrieval", sub_query, passages: [item…] }` for each sub-query's
    /// candidates, then `{ kind: "evidence", evidence: [item…] }` for what analysis kept;
    /// each item as in `AnswerTrace.evidence`, without `citation`.
    async fn evidence_bundle(&self) -> Json<Value> {
        Json(self.0.evidence_bundle.clone())
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
}

/// A part of a task's answer as it is written (`researchTaskAnswer`).
#[derive(async_graphql::SimpleObject)]
pub struct ResearchTaskAnswerDelta {
    /// Unicode code points of the answer before `text`.
    pub offset: i32,
    /// The next part of the answer, its citations checked.
    pub text: String,
    /// The answer is complete and its trace committed; nothing follows.
    pub done: bool,
    /// Generation started over: discard what was received before; `offset` is 0.
    pub reset: bool,
}

impl From<crate::live::AnswerDelta> for ResearchTaskAnswerDelta {
    fn from(delta: crate::live::AnswerDelta) -> Self {
        Self { offset: delta.offset, text: delta.text, done: delta.done, reset: delta.reset }
    }
}
