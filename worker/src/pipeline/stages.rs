//! What each stage runs and what its boundary commits. The next stage always comes from
//! the one stage rule (`Stage::next_in_pipeline`); the outputs later stages need are read
//! back from the rows earlier checkpoints committed: the plan from the `stage:retrieving`
//! event, retrievals (`retrieval:<n>`) and evidence (`evidence`) from partial results.
use entity::{
    Stage, research_task_job as job, research_task_partial_result as partial, research_task_progress_event as progress,
};
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::answer::{AnswerSink, flush_drafts};
use crate::cost::{CallLog, CostDelta, CostReport};
use crate::engine::{Answer, EngineError, Passage, Plan, ResearchEngine, Retrieval, StageContext};
use crate::lifecycle::{Checkpoint, Completion, Lease};
use crate::notify::Notifier;
use crate::store::journal;

/// What a stage run writes besides its checkpoint: the answer draft, fenced by the lease.
pub(super) struct Drafts<'a> {
    /// Where the draft's signal goes.
    pub notifier: &'a Notifier,
    /// The lease the draft writes are fenced by.
    pub lease: &'a Lease,
    /// The least time between two draft writes.
    pub every: std::time::Duration,
}

/// What the stages of one run hand on to the next in memory, so that only a run that
/// resumes a task mid-way reads them back from the checkpoints. It holds exactly what the
/// checkpoint committed: a stage's outputs are written once, by the checkpoint that
/// leaves it (its fence on the stage makes that happen once), so no earlier copy can
/// shadow them.
#[derive(Default)]
pub(super) struct Carried {
    plan: Option<Plan>,
    retrievals: Option<Vec<Retrieval>>,
    evidence: Option<Vec<Passage>>,
}

/// What a finished stage hands to the lifecycle.
pub(super) enum StageEnd {
    /// Move on to the next stage; what it produced is carried to the next one once the
    /// checkpoint commits.
    Next(Checkpoint, Carried),
    /// The task is done.
    Done(Completion),
}

impl StageEnd {
    /// What the stage spent.
    pub(super) fn cost_delta(&self) -> &CostDelta {
        match self {
            Self::Next(step, _) => &step.cost_delta,
            Self::Done(done) => &done.cost_delta,
        }
    }
}

/// Runs the engine for the task's stage and shapes what the boundary commits.
pub(super) async fn run(
    db: &DatabaseConnection,
    engine: &dyn ResearchEngine,
    task: &job::Model,
    cancel: CancellationToken,
    drafts: Drafts<'_>,
    carried: Carried,
) -> Result<StageEnd, StageFailure> {
    let sink = AnswerSink::default();
    let calls = CallLog::default();
    let ctx = StageContext { db, job: task, cancel, answer: &sink, calls: &calls };
    let stage = task.stage;
    run_stage(&ctx, engine, &sink, drafts, carried).await.map_err(|error| {
        // What the failed stage's calls spent still counts.
        let cost_delta =
            if calls.is_empty() { CostDelta::none() } else { account(stage, calls.total(), calls_report(&calls)).0 };
        StageFailure { error, cost_delta }
    })
}

/// A stage that failed, with what its calls spent.
pub(super) struct StageFailure {
    /// Why.
    pub error: EngineError,
    /// What it spent.
    pub cost_delta: CostDelta,
}

fn calls_report(calls: &CallLog) -> Value {
    json!({ "calls": calls.records() })
}

async fn run_stage(
    ctx: &StageContext<'_>,
    engine: &dyn ResearchEngine,
    sink: &AnswerSink,
    drafts: Drafts<'_>,
    carried: Carried,
) -> Result<StageEnd, EngineError> {
    let (db, task) = (ctx.db, ctx.job);
    let stage = task.stage;
    let Some(next_stage) = stage.next_in_pipeline().filter(|_| stage.is_running()) else {
        return Err(EngineError::Transient(format!("no engine stage for {}", stage.as_str()).into()));
    };
    let next = |partial_results, cost: CostReport, report: Value, mut payload: Value, carry: Carried| {
        let (cost_delta, report) = account(stage, cost, report);
        if !report.is_null() {
            payload["engine"] = report;
        }
        StageEnd::Next(Checkpoint { next_stage, partial_results, cost_delta, payload }, carry)
    };
    match stage {
        Stage::Planning => {
            let plan = engine.plan(ctx).await?;
            let payload = json!({ "plan": plan.output });
            let carry = Carried { plan: Some(plan.output), ..Carried::default() };
            Ok(next(Vec::new(), plan.cost, plan.report, payload, carry))
        }
        Stage::Retrieving => {
            let plan = match carried.plan {
                Some(plan) => plan,
                None => match load_plan(db, task.id).await? {
                    Some(plan) => plan,
                    // Only reachable for rows written before plans were recorded; the built-in
                    // planner is deterministic, so recomputing gives the same plan.
                    None => engine.plan(ctx).await?.output,
                },
            };
            let found = engine.retrieve(ctx, &plan).await?;
            let partial_results = found
                .output
                .iter()
                .enumerate()
                .map(|(index, retrieval)| {
                    let bundle =
                        json!({ "kind": "retrieval", "sub_query": retrieval.sub_query, "passages": retrieval.passages });
                    (format!("retrieval:{}", index + 1), bundle)
                })
                .collect();
            let payload = json!({ "sub_queries": plan.sub_queries.len() });
            let carry = Carried { retrievals: Some(found.output), ..Carried::default() };
            Ok(next(partial_results, found.cost, found.report, payload, carry))
        }
        Stage::Analyzing => {
            let found = match carried.retrievals {
                Some(found) => found,
                None => load_retrievals(db, task.id).await?,
            };
            let evidence = engine.analyze(ctx, &found).await?;
            let bundle = json!({ "kind": "evidence", "evidence": evidence.output });
            let payload = json!({ "evidence": evidence.output.len() });
            let carry = Carried { evidence: Some(evidence.output), ..Carried::default() };
            Ok(next(vec![("evidence".to_owned(), bundle)], evidence.cost, evidence.report, payload, carry))
        }
        Stage::Generating => {
            let evidence = match carried.evidence {
                Some(evidence) => evidence,
                None => load_evidence(db, task.id).await?,
            };
            // The answer reaches the draft while it is written; the draft writer stops
            // when generation ends (its last word is the completion's).
            let answer = tokio::select! {
                biased;
                answer = engine.generate(ctx, &evidence) => answer?,
                () = flush_drafts(db, drafts.notifier, drafts.lease, sink, drafts.every) => {
                    return Err(EngineError::Transient("the answer draft writer stopped".into()));
                }
            };
            let (cost_delta, report) = account(stage, answer.cost, answer.report);
            Ok(StageEnd::Done(Completion {
                evidence: cited(&answer.output),
                answer: answer.output.text,
                cost_delta,
                payload: report,
            }))
        }
        other => Err(EngineError::Transient(format!("no engine stage for {}", other.as_str()).into())),
    }
}

/// The stage's cost delta, with the engine's per-call detail (`report.calls`) moved into
/// it under the stage; returns the delta and what is left of the report.
fn account(stage: Stage, cost: CostReport, mut report: Value) -> (CostDelta, Value) {
    let calls = report.as_object_mut().and_then(|fields| fields.remove("calls"));
    let delta = cost.to_delta_with_calls(stage.as_str(), calls);
    if report.as_object().is_some_and(serde_json::Map::is_empty) {
        report = Value::Null;
    }
    (delta, report)
}

/// The evidence as the answer trace stores it: each passage (every key of the evidence
/// bundle's items) with its citation number.
fn cited(answer: &Answer) -> Value {
    let rows: Vec<Value> = answer
        .evidence
        .iter()
        .enumerate()
        .map(|(index, passage)| {
            let mut item = serde_json::to_value(passage).unwrap_or_else(|_| json!({}));
            if let Value::Object(fields) = &mut item {
                fields.insert("citation".to_owned(), json!(index + 1));
            }
            item
        })
        .collect();
    Value::Array(rows)
}

/// The plan planning committed with the move to retrieving.
async fn load_plan(db: &DatabaseConnection, task_id: Uuid) -> Result<Option<Plan>, EngineError> {
    let event = journal::by_key::<progress::Entity, _>(db, task_id, "stage:retrieving").await?;
    match event.and_then(|event| event.payload.get("plan").cloned()) {
        Some(plan) => serde_json::from_value(plan).map(Some).map_err(EngineError::Stored),
        None => Ok(None),
    }
}

/// The retrievals committed with the move to analyzing, in sub-query order.
async fn load_retrievals(db: &DatabaseConnection, task_id: Uuid) -> Result<Vec<Retrieval>, EngineError> {
    let rows = journal::by_key_prefix::<partial::Entity, _>(db, task_id, "retrieval:").await?;
    rows.into_iter().map(|row| serde_json::from_value(row.evidence_bundle).map_err(EngineError::Stored)).collect()
}

/// The evidence committed with the move to generating.
async fn load_evidence(db: &DatabaseConnection, task_id: Uuid) -> Result<Vec<Passage>, EngineError> {
    let row = journal::by_key::<partial::Entity, _>(db, task_id, "evidence").await?;
    match row.and_then(|row| row.evidence_bundle.get("evidence").cloned()) {
        Some(evidence) => serde_json::from_value(evidence).map_err(EngineError::Stored),
        None => Ok(Vec::new()),
    }
}
